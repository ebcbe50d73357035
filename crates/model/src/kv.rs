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
            k: vec![f16::ZERO; per_layer * config.n_layers],
            v: vec![f16::ZERO; per_layer * config.n_layers],
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
