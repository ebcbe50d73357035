//! Causal grouped-query attention of one query row over a paged KV cache.
//!
//! The cache of one layer is a pool of blocks, each `block_size` token slots
//! of `n_kv_heads * head_dim` f16 values for K and for V. A sequence's block
//! table lists the pool blocks holding its positions in order, so position
//! `p` lives in slot `table[p / block_size] * block_size + p % block_size`.
//!
//! Precision: K and V are stored as f16 (as llama.cpp's default cache) and
//! widened to f32; scores, softmax and the weighted sum accumulate in f32.

use crate::ops::softmax;
use half::f16;

/// One layer's K and V block pools and their geometry.
#[derive(Debug, Clone, Copy)]
pub struct PagedKv<'a> {
    pub k: &'a [f16],
    pub v: &'a [f16],
    pub block_size: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl PagedKv<'_> {
    /// Offset of token slot `pos` for a sequence with block table `table`.
    #[inline]
    pub fn slot_offset(&self, table: &[u32], pos: usize) -> usize {
        let slot = table[pos / self.block_size] as usize * self.block_size + pos % self.block_size;
        slot * self.n_kv_heads * self.head_dim
    }
}

/// Attention of query `q` (`n_heads * head_dim`) over positions `0..n_ctx`
/// of the sequence whose blocks are `table`. `scores` must hold `n_ctx`
/// values; `out` receives `n_heads * head_dim` values.
pub fn attend(
    q: &[f32],
    kv: &PagedKv<'_>,
    table: &[u32],
    n_ctx: usize,
    n_heads: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let hd = kv.head_dim;
    for h in 0..n_heads {
        attend_head(
            &q[h * hd..(h + 1) * hd],
            h,
            kv,
            table,
            n_ctx,
            n_heads,
            scale,
            scores,
            &mut out[h * hd..(h + 1) * hd],
        );
    }
}

/// One head of [`attend`]: `q` and `out` are that head's `head_dim` values.
/// Heads are independent, so callers may run them on different threads.
pub fn attend_head(
    q: &[f32],
    head: usize,
    kv: &PagedKv<'_>,
    table: &[u32],
    n_ctx: usize,
    n_heads: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let hd = kv.head_dim;
    let kvh = head / (n_heads / kv.n_kv_heads);
    let scores = &mut scores[..n_ctx];
    let k = crate::cpu::kernels();
    for (p, s) in scores.iter_mut().enumerate() {
        let off = kv.slot_offset(table, p) + kvh * hd;
        *s = (k.kv_dot)(q, &kv.k[off..off + hd]) * scale;
    }
    softmax(scores);
    out.fill(0.0);
    for (p, &w) in scores.iter().enumerate() {
        let off = kv.slot_offset(table, p) + kvh * hd;
        (k.kv_axpy)(out, w, &kv.v[off..off + hd]);
    }
}

/// Attention of the `q.len() / head_dim` query heads that share KV head
/// `kvh` (grouped-query attention) over positions `0..n_ctx`: each K and V
/// row is read and widened once for the whole group. `q` and `out` hold the
/// group's heads in order; `scores` must hold `group * n_ctx` values.
/// Runs the tier's kernel ([`crate::cpu::Kernels::attend_group`]).
pub fn attend_group(
    q: &[f32],
    kvh: usize,
    kv: &PagedKv<'_>,
    table: &[u32],
    n_ctx: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    (crate::cpu::kernels().attend_group)(q, kvh, kv, table, n_ctx, scale, scores, out)
}

/// The reference of [`attend_group`]: [`attend_head`] for each head of the group.
pub fn attend_group_reference(
    q: &[f32],
    kvh: usize,
    kv: &PagedKv<'_>,
    table: &[u32],
    n_ctx: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let hd = kv.head_dim;
    let g = q.len() / hd;
    for h in 0..g {
        // `attend_head` maps a head to its KV head by `head / group`; pass one
        // that lands on `kvh` with a model of `g * n_kv_heads` heads.
        attend_head(
            &q[h * hd..(h + 1) * hd],
            kvh * g + h,
            kv,
            table,
            n_ctx,
            g * kv.n_kv_heads,
            scale,
            scores,
            &mut out[h * hd..(h + 1) * hd],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_attention_matches_per_head_attention_on_every_tier() {
        use crate::cpu::{supported, Isa, Kernels};
        for (bs, nkv, hd, g, n_ctx) in [(4, 2, 8, 3, 11), (16, 1, 64, 8, 40), (16, 3, 24, 1, 5)] {
            let kv_dim = nkv * hd;
            let table = [2u32, 0, 3, 1];
            let n_blocks = 4;
            let val = |i: usize, s: f32| f16::from_f32(((i * 37 % 101) as f32 * s).sin());
            let ks: Vec<f16> = (0..n_blocks * bs * kv_dim).map(|i| val(i, 0.1)).collect();
            let vs: Vec<f16> = (0..n_blocks * bs * kv_dim).map(|i| val(i, 0.3)).collect();
            let kv = PagedKv {
                k: &ks,
                v: &vs,
                block_size: bs,
                n_kv_heads: nkv,
                head_dim: hd,
            };
            let q: Vec<f32> = (0..g * hd).map(|i| (i as f32 * 0.7).cos()).collect();
            let n_ctx = n_ctx.min(table.len() * bs);
            for kvh in 0..nkv {
                let mut scores = vec![0.0; g * n_ctx];
                let mut want = vec![0.0; g * hd];
                attend_group_reference(&q, kvh, &kv, &table, n_ctx, 0.3, &mut scores, &mut want);
                for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                    if isa > supported() {
                        continue;
                    }
                    let mut got = vec![0.0; g * hd];
                    (Kernels::for_isa(isa).attend_group)(
                        &q,
                        kvh,
                        &kv,
                        &table,
                        n_ctx,
                        0.3,
                        &mut scores,
                        &mut got,
                    );
                    for (a, b) in got.iter().zip(&want) {
                        assert!(
                            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                            "{isa:?} hd={hd} g={g}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    /// Attention over a scrambled block table equals attention over a
    /// contiguous cache holding the same values.
    #[test]
    fn paged_layout_is_invisible() {
        let (bs, nkv, hd, nh, n_ctx) = (4, 2, 8, 6, 11);
        let kv_dim = nkv * hd;
        let n_blocks = 5;
        let val = |p: usize, i: usize, s: f32| f16::from_f32(((p * 31 + i * 7) as f32 * s).sin());
        let table_scrambled = [3u32, 0, 4];
        let mut ks = vec![f16::ZERO; n_blocks * bs * kv_dim];
        let mut vs = ks.clone();
        let mut kc = ks.clone();
        let mut vc = ks.clone();
        for p in 0..n_ctx {
            let slot = table_scrambled[p / bs] as usize * bs + p % bs;
            for i in 0..kv_dim {
                ks[slot * kv_dim + i] = val(p, i, 0.1);
                vs[slot * kv_dim + i] = val(p, i, 0.2);
                kc[p * kv_dim + i] = val(p, i, 0.1);
                vc[p * kv_dim + i] = val(p, i, 0.2);
            }
        }
        let q: Vec<f32> = (0..nh * hd).map(|i| (i as f32 * 0.3).cos()).collect();
        let mut scores = vec![0.0; n_ctx];
        let mut o1 = vec![0.0; nh * hd];
        let mut o2 = o1.clone();
        let paged = PagedKv {
            k: &ks,
            v: &vs,
            block_size: bs,
            n_kv_heads: nkv,
            head_dim: hd,
        };
        attend(
            &q,
            &paged,
            &table_scrambled,
            n_ctx,
            nh,
            0.35,
            &mut scores,
            &mut o1,
        );
        let contiguous = PagedKv {
            k: &kc,
            v: &vc,
            block_size: bs,
            n_kv_heads: nkv,
            head_dim: hd,
        };
        attend(
            &q,
            &contiguous,
            &[0, 1, 2],
            n_ctx,
            nh,
            0.35,
            &mut scores,
            &mut o2,
        );
        if cfg!(miri) {
            // Miri perturbs `exp` by a few ULPs on every call, on purpose.
            assert!(o1.iter().zip(&o2).all(|(a, b)| (a - b).abs() < 1e-5));
        } else {
            assert_eq!(o1, o2);
        }
        // One position: output is exactly V of that position.
        attend(
            &q,
            &paged,
            &table_scrambled,
            1,
            nh,
            0.35,
            &mut scores,
            &mut o1,
        );
        for h in 0..nh {
            for i in 0..hd {
                assert_eq!(
                    o1[h * hd + i],
                    vs[3 * bs * kv_dim + (h / 3) * hd + i].to_f32()
                );
            }
        }
    }
}
