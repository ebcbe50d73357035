//! KV cache storage: one pool of fixed-size blocks per layer, each row
//! (one token's values of one KV head) f16 or quantized to Q8_0 / Q4_0
//! blocks ([`KvType`], `--kv-type`).
//!
//! Sliding-window layers may keep their rows in a pool of their own
//! ([`KvCache::windowed`]): a sequence needs only its last `window`
//! positions there, so the engine frees its older blocks of that pool and
//! the pool is sized by running sequences, not by context (as vLLM's
//! sliding-window block tables and llama.cpp's SWA cache do). Those layers
//! then read a second block table (`SeqBatch::local_table`).
//!
//! This module owns only the memory. Which blocks belong to which sequence
//! (allocation, sharing, eviction) is the engine's business; the forward
//! pass receives each sequence's block table.
//!
//! Layout of each of K and V: `[layer][kv_head][block][slot in block]`
//! rows of `head_dim` values (head-major: attention streams one head's
//! rows, across blocks where a sequence's blocks are consecutive; see
//! [`KvRows`]). A block's bytes on disk keep the order of the earlier
//! block-major layout (layer, K then V, head), so disk files carry over.

use crate::config::Config;
use crate::{Error, Result};
use half::f16;
use half::slice::HalfFloatSliceExt;
use hasten_kernels::attention::{KvRows, KvType, PagedKv};

#[derive(Debug)]
pub struct KvCache {
    pub n_layers: usize,
    pub n_blocks: usize,
    pub block_size: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ty: KvType,
    /// Blocks of the windowed layers' own pool, if they have one.
    pub local_blocks: Option<usize>,
    /// Per layer: whether its rows live in the windowed pool, and its
    /// first row in the stores.
    windowed: Vec<bool>,
    base: Vec<usize>,
    k: Store,
    v: Store,
}

/// The rows of every layer: f16 values or quantized blocks' bytes.
#[derive(Debug)]
enum Store {
    F16(Vec<f16>),
    Quant(Vec<u8>),
}

/// `n` zero halves from a zeroed allocation: the OS maps the pages lazily,
/// so a 1 GiB pool costs memory only as blocks are first written (it was
/// written in full at start-up: a 135M server sat at 1.2 GB resident).
fn zeroed(n: usize) -> Vec<f16> {
    use zerocopy::FromZeros;
    let mut v = f16::new_vec_zeroed(n).unwrap_or_else(|_| vec![f16::ZERO; n]);
    hasten_kernels::hugepages::advise(&mut v);
    v
}

/// `n` zero bytes, as lazily as [`zeroed`] (`vec![0u8; n]` asks the
/// allocator for zeroed pages).
fn zeroed_bytes(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    hasten_kernels::hugepages::advise(&mut v);
    v
}

impl KvCache {
    /// Allocates `n_blocks` blocks of `block_size` tokens for every layer, f16.
    pub fn new(config: &Config, n_blocks: usize, block_size: usize) -> Self {
        Self::with_type(config, n_blocks, block_size, KvType::F16)
            .expect("f16 rows fit every head dimension")
    }

    /// As [`Self::new`], rows stored as `ty`; an error when the model's
    /// head dimension is not a whole number of `ty`'s blocks.
    pub fn with_type(
        config: &Config,
        n_blocks: usize,
        block_size: usize,
        ty: KvType,
    ) -> Result<Self> {
        Self::windowed(config, n_blocks, None, block_size, ty)
    }

    /// As [`Self::with_type`], with the sliding-window layers' rows in a
    /// pool of `local_blocks` blocks of their own (a second block-id
    /// space); `None`, or a model without such layers, keeps every layer
    /// in the one pool.
    pub fn windowed(
        config: &Config,
        n_blocks: usize,
        local_blocks: Option<usize>,
        block_size: usize,
        ty: KvType,
    ) -> Result<Self> {
        check_kv_type(config, ty)?;
        let windowed = match (&config.swa, local_blocks) {
            (Some(w), Some(_)) if w.layers.len() == config.n_layers => w.layers.clone(),
            _ => vec![false; config.n_layers],
        };
        let local_blocks = local_blocks.filter(|_| windowed.contains(&true));
        let shape = Shape {
            n_blocks,
            block_size,
            n_kv_heads: config.n_kv_heads,
            head_dim: config.head_dim,
            ty,
        };
        Ok(Self::from_parts(shape, windowed, local_blocks))
    }

    fn from_parts(s: Shape, windowed: Vec<bool>, local_blocks: Option<usize>) -> Self {
        let mut base = Vec::with_capacity(windowed.len());
        let mut rows = 0;
        for &w in &windowed {
            base.push(rows);
            let blocks = if w {
                local_blocks.unwrap_or(0)
            } else {
                s.n_blocks
            };
            rows += blocks * s.block_size * s.n_kv_heads;
        }
        let store = || match s.ty {
            KvType::F16 => Store::F16(zeroed(rows * s.head_dim)),
            _ => Store::Quant(zeroed_bytes(rows * s.ty.row_bytes(s.head_dim))),
        };
        KvCache {
            n_layers: windowed.len(),
            n_blocks: s.n_blocks,
            block_size: s.block_size,
            n_kv_heads: s.n_kv_heads,
            head_dim: s.head_dim,
            ty: s.ty,
            local_blocks,
            k: store(),
            v: store(),
            windowed,
            base,
        }
    }

    /// Whether `layer` keeps its rows in the windowed pool (it reads
    /// `SeqBatch::local_table`).
    pub fn is_windowed(&self, layer: usize) -> bool {
        self.windowed[layer]
    }

    /// Blocks of `layer`'s pool.
    fn layer_blocks(&self, layer: usize) -> usize {
        match (self.windowed[layer], self.local_blocks) {
            (true, Some(n)) => n,
            _ => self.n_blocks,
        }
    }

    /// Layers in the main pool (every layer unless the cache is windowed).
    fn main_layers(&self) -> usize {
        self.windowed.iter().filter(|&&w| !w).count()
    }

    /// Bytes of K and V for one more token of context: every layer's, or
    /// with a windowed pool the other layers' (the windowed pool is a fixed
    /// size, [`Self::windowed_bytes`]).
    pub fn bytes_per_token(&self) -> usize {
        kv_bytes_per_token(self.main_layers(), self.n_kv_heads, self.head_dim, self.ty)
    }

    /// Bytes of the windowed layers' pool (0 without one).
    pub fn windowed_bytes(&self) -> usize {
        let layers = self.n_layers - self.main_layers();
        self.local_blocks.unwrap_or(0)
            * self.block_size
            * kv_bytes_per_token(layers, self.n_kv_heads, self.head_dim, self.ty)
    }

    pub fn capacity_tokens(&self) -> usize {
        self.n_blocks * self.block_size
    }

    /// Rows of one layer.
    fn layer_rows(&self, layer: usize) -> usize {
        self.layer_blocks(layer) * self.block_size * self.n_kv_heads
    }

    fn rows<'a>(&self, s: &'a Store, layer: usize) -> KvRows<'a> {
        let r = self.base[layer]..self.base[layer] + self.layer_rows(layer);
        match s {
            Store::F16(v) => KvRows::F16(&v[r.start * self.head_dim..r.end * self.head_dim]),
            Store::Quant(b) => {
                let rb = self.ty.row_bytes(self.head_dim);
                KvRows::Quant(self.ty, &b[r.start * rb..r.end * rb])
            }
        }
    }

    /// A read view of one layer for the attention kernel.
    pub fn layer(&self, layer: usize) -> PagedKv<'_> {
        PagedKv {
            k: self.rows(&self.k, layer),
            v: self.rows(&self.v, layer),
            block_size: self.block_size,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
        }
    }

    /// Stores one token's K and V (f32, `kv_dim` each) at `slot` of
    /// `layer` (a slot of the windowed pool if the layer [`Self::is_windowed`]).
    pub fn store(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        let (hd, ty, bs) = (self.head_dim, self.ty, self.block_size);
        // Head `h`'s row: `[layer][h][block][slot in block]`.
        let row0 = self.base[layer] + slot;
        let head_rows = self.layer_blocks(layer) * bs;
        for (s, src) in [(&mut self.k, k), (&mut self.v, v)] {
            for (h, x) in src.chunks_exact(hd).take(self.n_kv_heads).enumerate() {
                let r = row0 + h * head_rows;
                match s {
                    // F16C eight at a time where the CPU has it (half's
                    // run-time check).
                    Store::F16(d) => d[r * hd..(r + 1) * hd].convert_from_f32_slice(x),
                    Store::Quant(b) => {
                        let rb = ty.row_bytes(hd);
                        quantize_row(ty, x, &mut b[r * rb..(r + 1) * rb]);
                    }
                }
            }
        }
    }
}

impl KvCache {
    /// Bytes of one block's K and V across all layers: what
    /// [`Self::read_block`] gives and [`Self::write_block`] takes.
    pub fn block_bytes(&self) -> usize {
        self.block_size * self.bytes_per_token()
    }

    /// Bytes of one block of the windowed layers' pool (0 without one):
    /// what [`Self::read_local_block`] gives and [`Self::write_local_block`]
    /// takes.
    pub fn local_block_bytes(&self) -> usize {
        match self.local_blocks {
            Some(_) => {
                let layers = self.n_layers - self.main_layers();
                self.block_size
                    * kv_bytes_per_token(layers, self.n_kv_heads, self.head_dim, self.ty)
            }
            None => 0,
        }
    }

    /// The byte ranges of `block`'s rows in one store, per layer one per
    /// KV head: the order of [`Self::read_block`]'s bytes is layer, then
    /// K before V, then head. `local` picks the layers of the windowed
    /// pool (its own block ids) instead of the others.
    fn block_ranges(&self, block: usize, local: bool) -> Vec<Vec<std::ops::Range<usize>>> {
        let bs = self.block_size;
        let row_bytes = self.ty.row_bytes(self.head_dim);
        (0..self.n_layers)
            .filter(|&l| self.windowed[l] == local)
            .map(|l| {
                let head_rows = self.layer_blocks(l) * bs;
                (0..self.n_kv_heads)
                    .map(|h| {
                        let first = (self.base[l] + h * head_rows + block * bs) * row_bytes;
                        first..first + bs * row_bytes
                    })
                    .collect()
            })
            .collect()
    }

    /// Appends `block`'s K and V rows of every layer to `out`, as bytes
    /// (layer by layer, K then V, head by head; f16 little-endian). With a
    /// windowed pool, the layers outside it.
    pub fn read_block(&self, block: usize, out: &mut Vec<u8>) {
        self.read_ranges(self.block_ranges(block, false), out)
    }

    /// [`Self::read_block`] of block `block` of the windowed layers' pool.
    pub fn read_local_block(&self, block: usize, out: &mut Vec<u8>) {
        self.read_ranges(self.block_ranges(block, true), out)
    }

    fn read_ranges(&self, ranges: Vec<Vec<std::ops::Range<usize>>>, out: &mut Vec<u8>) {
        for layer in ranges {
            for s in [&self.k, &self.v] {
                for r in &layer {
                    match s {
                        Store::F16(v) => out.extend(
                            v[r.start / 2..r.end / 2]
                                .iter()
                                .flat_map(|x| x.to_bits().to_le_bytes()),
                        ),
                        Store::Quant(b) => out.extend_from_slice(&b[r.clone()]),
                    }
                }
            }
        }
    }

    /// Overwrites `block`'s rows with `data` from [`Self::read_block`] of a
    /// cache of the same shape and type; an error if the length differs.
    pub fn write_block(&mut self, block: usize, data: &[u8]) -> Result<()> {
        self.write_part(block, false, data)
    }

    /// [`Self::write_block`] of block `block` of the windowed layers' pool,
    /// `data` from [`Self::read_local_block`].
    pub fn write_local_block(&mut self, block: usize, data: &[u8]) -> Result<()> {
        self.write_part(block, true, data)
    }

    fn write_part(&mut self, block: usize, local: bool, data: &[u8]) -> Result<()> {
        let (bytes, blocks) = match local {
            false => (self.block_bytes(), self.n_blocks),
            true => (self.local_block_bytes(), self.local_blocks.unwrap_or(0)),
        };
        if data.len() != bytes || block >= blocks {
            return Err(Error::Config {
                file: "KV block".into(),
                what: format!(
                    "{} bytes for block {block} of {blocks}; a block holds {bytes}",
                    data.len(),
                ),
            });
        }
        let mut src = data;
        for layer in self.block_ranges(block, local) {
            for s in [&mut self.k, &mut self.v] {
                for r in &layer {
                    let (now, rest) = src.split_at(r.len());
                    match s {
                        Store::F16(v) => {
                            for (d, b) in v[r.start / 2..r.end / 2]
                                .iter_mut()
                                .zip(now.chunks_exact(2))
                            {
                                *d = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
                            }
                        }
                        Store::Quant(b) => b[r.clone()].copy_from_slice(now),
                    }
                    src = rest;
                }
            }
        }
        Ok(())
    }
}

/// The geometry shared by every layer's pool.
#[derive(Debug, Clone, Copy)]
struct Shape {
    n_blocks: usize,
    block_size: usize,
    n_kv_heads: usize,
    head_dim: usize,
    ty: KvType,
}

/// One row of `ty`'s blocks, as ggml's reference quantizers write them.
fn quantize_row(ty: KvType, src: &[f32], dst: &mut [u8]) {
    // Lengths are whole blocks by construction (`check_kv_type`).
    let _ = hasten_kernels::quant::quantize_row(ty.ggml(), src, dst);
}

/// Bytes of K and V per token across all layers, rows stored as `ty`.
pub fn kv_bytes_per_token(
    n_layers: usize,
    n_kv_heads: usize,
    head_dim: usize,
    ty: KvType,
) -> usize {
    2 * n_layers * n_kv_heads * ty.row_bytes(head_dim)
}

/// Whether `config`'s heads can be cached as `ty`: a clear error if not.
pub fn check_kv_type(config: &Config, ty: KvType) -> Result<()> {
    if ty.fits(config.head_dim) {
        Ok(())
    } else {
        Err(Error::Config {
            file: "--kv-type".into(),
            what: format!(
                "a {} KV cache needs a head dimension that is a multiple of {}; this model's is {}",
                ty.name(),
                ty.ggml().block_size(),
                config.head_dim
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of 2 layers, 3 blocks of 4 slots, 2 KV heads of 8, f16.
    fn small() -> KvCache {
        KvCache::from_parts(SMALL, vec![false; 2], None)
    }

    const SMALL: Shape = Shape {
        n_blocks: 3,
        block_size: 4,
        n_kv_heads: 2,
        head_dim: 8,
        ty: KvType::F16,
    };

    /// Value `d` of head `h` at `slot` of `layer`, K (`kv = 0`) or V.
    fn val(layer: usize, kv: usize, h: usize, slot: usize, d: usize) -> f32 {
        (((layer * 2 + kv) * 2 + h) * 100 + slot * 10 + d) as f32
    }

    fn fill(c: &mut KvCache) {
        for layer in 0..2 {
            for slot in 0..12 {
                let row = |kv| {
                    (0..16)
                        .map(|i| val(layer, kv, i / 8, slot, i % 8))
                        .collect::<Vec<_>>()
                };
                c.store(layer, slot, &row(0), &row(1));
            }
        }
    }

    #[test]
    fn stored_rows_are_where_attention_reads_them() {
        let mut c = small();
        fill(&mut c);
        for layer in 0..2 {
            let view = c.layer(layer);
            let KvRows::F16(k) = view.k else { panic!() };
            let table = [2u32, 0, 1];
            for pos in 0..12 {
                for h in 0..2 {
                    let r = view.row_index(&table, pos, h);
                    let slot = table[pos / 4] as usize * 4 + pos % 4;
                    assert_eq!(k[r * 8 + 3].to_f32(), val(layer, 0, h, slot, 3));
                }
            }
        }
    }

    /// A block's bytes are ordered layer, K then V, head, slot, value: the
    /// disk tier's files (`HKVBLK02`) depend on it.
    #[test]
    fn a_block_reads_in_the_disk_order_and_writes_back() {
        let mut c = small();
        fill(&mut c);
        let mut bytes = Vec::new();
        c.read_block(1, &mut bytes);
        assert_eq!(bytes.len(), c.block_bytes());
        let halves: Vec<f32> = bytes
            .chunks_exact(2)
            .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect();
        let mut want = Vec::new();
        for layer in 0..2 {
            for kv in 0..2 {
                for h in 0..2 {
                    for s in 4..8 {
                        want.extend((0..8).map(|d| val(layer, kv, h, s, d)));
                    }
                }
            }
        }
        assert_eq!(halves, want);
        let mut other = small();
        other.write_block(2, &bytes).unwrap();
        let mut back = Vec::new();
        other.read_block(2, &mut back);
        assert_eq!(back, bytes);
        assert!(other.write_block(0, &bytes[1..]).is_err());
    }
    /// A windowed layer's rows live in a pool of its own blocks: views,
    /// stores and byte counts follow each layer's pool, and a block's
    /// bytes (the disk tier's) hold the main pool's layers only.
    #[test]
    fn windowed_layers_have_a_pool_of_their_own() {
        let mut c = KvCache::from_parts(SMALL, vec![true, false], Some(2));
        assert_eq!(c.layer(0).n_blocks(), 2);
        assert_eq!(c.layer(1).n_blocks(), 3);
        assert!(c.is_windowed(0) && !c.is_windowed(1));
        assert_eq!(c.bytes_per_token(), 2 * 2 * 8 * 2);
        assert_eq!(c.windowed_bytes(), 2 * 4 * 2 * 2 * 8 * 2);
        for (layer, slots) in [(0, 8), (1, 12)] {
            for slot in 0..slots {
                let row = |kv| {
                    (0..16)
                        .map(|i| val(layer, kv, i / 8, slot, i % 8))
                        .collect::<Vec<_>>()
                };
                c.store(layer, slot, &row(0), &row(1));
            }
        }
        for (layer, table) in [(0, vec![1u32, 0]), (1, vec![2, 0, 1])] {
            let view = c.layer(layer);
            let (KvRows::F16(k), KvRows::F16(v)) = (view.k, view.v) else {
                panic!()
            };
            for pos in 0..table.len() * 4 {
                for h in 0..2 {
                    let r = view.row_index(&table, pos, h);
                    let slot = table[pos / 4] as usize * 4 + pos % 4;
                    assert_eq!(k[r * 8 + 5].to_f32(), val(layer, 0, h, slot, 5));
                    assert_eq!(v[r * 8 + 1].to_f32(), val(layer, 1, h, slot, 1));
                }
            }
        }
        let mut bytes = Vec::new();
        c.read_block(2, &mut bytes);
        assert_eq!(bytes.len(), c.block_bytes());
        assert_eq!(bytes.len(), 4 * 2 * 2 * 8 * 2);
        let first = f16::from_bits(u16::from_le_bytes([bytes[0], bytes[1]])).to_f32();
        assert_eq!(first, val(1, 0, 0, 8, 0));
    }

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
