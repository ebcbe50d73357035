//! KV cache storage: one pool of fixed-size blocks per layer, f16 values.
//!
//! This module owns only the memory. Which blocks belong to which sequence
//! (allocation, sharing, eviction) is the engine's business; the forward
//! pass receives each sequence's block table.
//!
//! Layout of each of K and V: `[layer][block][slot in block][kv_head][head_dim]`.

use crate::config::Config;
use half::f16;
use hasten_kernels::attention::PagedKv;

#[derive(Debug)]
pub struct KvCache {
    pub n_layers: usize,
    pub n_blocks: usize,
    pub block_size: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    k: Vec<f16>,
    v: Vec<f16>,
}

/// `n` zero halves from a zeroed allocation: the OS maps the pages lazily,
/// so a 1 GiB pool costs memory only as blocks are first written (it was
/// written in full at start-up: a 135M server sat at 1.2 GB resident).
fn zeroed(n: usize) -> Vec<f16> {
    use zerocopy::FromZeros;
    f16::new_vec_zeroed(n).unwrap_or_else(|_| vec![f16::ZERO; n])
}

impl KvCache {
    /// Allocates `n_blocks` blocks of `block_size` tokens for every layer.
    pub fn new(config: &Config, n_blocks: usize, block_size: usize) -> Self {
        let per_layer = n_blocks * block_size * config.kv_dim();
        KvCache {
            n_layers: config.n_layers,
            n_blocks,
            block_size,
            n_kv_heads: config.n_kv_heads,
            head_dim: config.head_dim,
            k: zeroed(per_layer * config.n_layers),
            v: zeroed(per_layer * config.n_layers),
        }
    }

    /// Bytes of K and V for one token across all layers.
    pub fn bytes_per_token(&self) -> usize {
        2 * self.n_layers * self.kv_dim() * std::mem::size_of::<f16>()
    }

    pub fn capacity_tokens(&self) -> usize {
        self.n_blocks * self.block_size
    }

    fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    fn layer_range(&self, layer: usize) -> std::ops::Range<usize> {
        let per_layer = self.n_blocks * self.block_size * self.kv_dim();
        layer * per_layer..(layer + 1) * per_layer
    }

    /// A read view of one layer for the attention kernel.
    pub fn layer(&self, layer: usize) -> PagedKv<'_> {
        let r = self.layer_range(layer);
        PagedKv {
            k: &self.k[r.clone()],
            v: &self.v[r],
            block_size: self.block_size,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
        }
    }

    /// Stores one token's K and V (f32, `kv_dim` each) at `slot` of `layer`.
    pub fn store(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        let kv_dim = self.kv_dim();
        let base = self.layer_range(layer).start + slot * kv_dim;
        for (d, s) in self.k[base..base + kv_dim].iter_mut().zip(k) {
            *d = f16::from_f32(*s);
        }
        for (d, s) in self.v[base..base + kv_dim].iter_mut().zip(v) {
            *d = f16::from_f32(*s);
        }
    }
}

#[cfg(test)]
mod tests {
    /// Resident memory of this process in KiB (Linux).
    #[cfg(target_os = "linux")]
    fn rss_kib() -> usize {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_pool_costs_memory_only_as_it_is_written() {
        let n = 256 << 20; // 512 MiB of halves
        let before = rss_kib();
        let mut v = super::zeroed(n);
        let after_alloc = rss_kib();
        assert!(v.iter().step_by(4096).all(|x| x.to_f32() == 0.0));
        v[n - 1] = half::f16::ONE;
        // Reading zero pages maps the shared zero page; far less than 512 MiB
        // became resident (the old `vec![f16::ZERO; n]` wrote all of it).
        assert!(
            after_alloc.saturating_sub(before) < 128 << 10,
            "{before} -> {after_alloc} KiB"
        );
        assert_eq!(v[n - 1], half::f16::ONE);
    }
}
