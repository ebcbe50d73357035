//! Integer attention over a Q8_0 or Q4_0 KV cache: the scalar references
//! of the AVX-512 VNNI tile, and the quantization both share. A Q4_0 row
//! is the Q8_0 row of the same values ([`q4_0_as_q8_0`], exact), so both
//! caches take one integer path.
//!
//! - **Scores.** Each query row is quantized to Q8_0 (as llama.cpp does for
//!   a `q8_0` K cache) and a score is `sum_b dq_b * dk_b * (q_b . k_b)`
//!   over the row's 32-value blocks, the dot products in integers.
//! - **Weighted sum of V.** Per 64-position chunk ([`V_CHUNK`]), query row and V block,
//!   the softmax weights times the V block scales, `w_p = P_p * dv_p`, are
//!   quantized to signed 16 bits against the chunk's largest `P` times its
//!   largest `dv` (`u_p = round(32767 * w_p / (max P * max dv))`), the
//!   chunk's sum `sum_p u_p * v_p` is taken in integers (the SIMD kernel
//!   with `vpdpwssd`, two positions per instruction), and
//!   `max P * max dv / 32767` times it is added to the output in f32.
//!   Each weight is off by at most 1/65534 of that bound, far below what
//!   Q8_0 V itself loses (8-bit weights measured 1.6% off on a
//!   150-position sum: too coarse).
//!
//! Scores and weights sit in rows of stride `w` (positions `start..`), as
//! the tile kernels keep them; positions past the cache's last are zero.

use crate::quant::read_f16;
use crate::rows::{HeadView, KvType};

/// Values per Q8_0 block.
pub const QK: usize = 32;
/// Bytes per Q8_0 block: an f16 scale, then 32 int8 values.
pub const BLOCK_BYTES: usize = 34;
/// Positions per SIMD pass of the scores.
pub const CHUNK: usize = 16;
/// Positions per weight-quantization chunk of the V sum.
pub const V_CHUNK: usize = 64;

/// Query rows quantized to Q8_0 for the integer scores.
#[derive(Default)]
pub struct QuantQuery {
    /// `rows * hd` int8 values.
    pub q: Vec<i8>,
    /// Per row and block: the block's scale times the softmax scale.
    pub d: Vec<f32>,
    /// Per row and block: `128 * sum(q)` (what a K made unsigned by adding
    /// 128 adds to the dot product).
    pub offset: Vec<i32>,
}

impl QuantQuery {
    /// No rows (buffers a tile kernel keeps and refills).
    pub const fn new() -> Self {
        QuantQuery {
            q: Vec::new(),
            d: Vec::new(),
            offset: Vec::new(),
        }
    }
}

/// Quantizes `rows` query rows of `hd` values (a multiple of 32) to Q8_0
/// blocks, folding `scale` into the block scales.
pub fn quantize_query(q: &[f32], rows: usize, hd: usize, scale: f32) -> QuantQuery {
    let mut out = QuantQuery::new();
    quantize_query_into(q, rows, hd, scale, &mut out);
    out
}

/// [`quantize_query`] into `out`'s buffers (their capacity kept).
pub fn quantize_query_into(q: &[f32], rows: usize, hd: usize, scale: f32, out: &mut QuantQuery) {
    let nb = hd / QK;
    out.q.clear();
    out.q.resize(rows * hd, 0);
    out.d.clear();
    out.d.resize(rows * nb, 0.0);
    out.offset.clear();
    out.offset.resize(rows * nb, 0);
    for (i, (src, dst)) in q[..rows * hd]
        .chunks_exact(QK)
        .zip(out.q.chunks_exact_mut(QK))
        .enumerate()
    {
        let amax = max_abs(src);
        let d = amax / 127.0;
        let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (o, &x) in dst.iter_mut().zip(src) {
            *o = round_away(x * inv).clamp(-127, 127) as i8;
            sum += *o as i32;
        }
        out.d[i] = d * scale;
        out.offset[i] = 128 * sum;
    }
}

/// The largest `|x|` of `x` (0 for none; NaNs ignored), in eight lanes
/// the compiler keeps in a vector register (a fold of `f32::max` stays
/// scalar: its NaN rule is not `maxps`'s).
fn max_abs(x: &[f32]) -> f32 {
    let mut m = [0.0f32; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for k in 0..8 {
            let a = c[k].abs();
            m[k] = if a > m[k] { a } else { m[k] };
        }
    }
    tail.iter()
        .chain(&m)
        .fold(0.0, |acc, &v| if v.abs() > acc { v.abs() } else { acc })
}

/// `x.round()` (halves away from zero) as an integer, for `|x| < 2^23`,
/// without the libm call `round` is on CPUs before SSE4.1 (the baseline
/// this crate's portable code is built for): adding the float just below
/// one half (its rounding ties to even make a half carry over) and
/// truncating, as LLVM lowers `round` where it has no instruction for it.
#[inline]
pub fn round_away(x: f32) -> i32 {
    (x + 0.499_999_97f32.copysign(x)) as i32
}

/// Below this, a chunk's largest weight is taken as this (weights that
/// small add nothing; it keeps `WEIGHT_MAX / max` finite without a branch).
pub const MIN_WEIGHT_MAX: f32 = 1e-30;
/// The largest quantized weight: weights are signed 16-bit `vpdpwssd`
/// operands (never negative). A chunk's sum stays below
/// `64 * 32767 * 128 < 2^31`.
pub const WEIGHT_MAX: f32 = 32767.0;

/// The quantized weights of one chunk of the V sum, query row and V
/// block: `u` (16-bit) and the scale their integer sum is multiplied by.
/// `p` holds the chunk's [`V_CHUNK`] softmax weights, `dv` the V rows'
/// scales of the block (both non-negative). The weight of a position is
/// `p * dv`, quantized against the product of the chunk's largest `p` and
/// largest `dv` (the second is shared by every query row, so a SIMD pass
/// takes one horizontal maximum and one division per row).
pub fn quantize_weights(p: &[f32; V_CHUNK], dv: &[f32; V_CHUNK]) -> ([u16; V_CHUNK], f32) {
    let dmax = dv.iter().fold(MIN_WEIGHT_MAX, |m, &x| m.max(x));
    let pmax = p.iter().fold(MIN_WEIGHT_MAX, |m, &x| m.max(x));
    let (c, inv) = (WEIGHT_MAX / dmax, 1.0 / pmax);
    (
        std::array::from_fn(|j| {
            ((p[j] * inv) * (dv[j] * c))
                .round_ties_even()
                .clamp(0.0, WEIGHT_MAX) as u16
        }),
        pmax * dmax * (1.0 / WEIGHT_MAX),
    )
}

/// Bytes per Q4_0 block: an f16 scale, then 16 bytes of two nibbles.
pub const Q4_BLOCK_BYTES: usize = 18;

/// Q4_0 blocks (`src`) as the Q8_0 blocks they equal (`dst`): values
/// `nibble - 8` (low nibbles are values 0-15 of a block, high nibbles
/// 16-31) under the same scale, or all negated under the scale's absolute
/// value when it is negative (ggml's Q4_0 scale takes the sign of the
/// block's largest value; the V sum needs scales >= 0, as Q8_0's are).
/// Exact, so one integer kernel serves both caches.
pub fn q4_0_as_q8_0(src: &[u8], dst: &mut [u8]) {
    for (s, d) in src
        .chunks_exact(Q4_BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let negative = s[1] & 0x80 != 0;
        d[..2].copy_from_slice(&[s[0], s[1] & 0x7f]);
        let sign = if negative { -1 } else { 1 };
        for (j, &b) in s[2..].iter().enumerate() {
            d[2 + j] = (sign * ((b & 0x0f) as i8 - 8)) as u8;
            d[2 + 16 + j] = (sign * ((b >> 4) as i8 - 8)) as u8;
        }
    }
}

/// The Q8_0 row of position `p` of `view`'s KV head in `cache` (rows of
/// `ty`, Q8_0 or Q4_0), or `None` past `n_last` (a zero row).
fn row(view: &HeadView<'_>, cache: &[u8], ty: KvType, p: usize, n_last: usize) -> Option<Vec<u8>> {
    let (hd, rb) = (view.kv.head_dim, ty.row_bytes(view.kv.head_dim));
    (p < n_last).then(|| {
        let i = view.kv.row_index(view.table, p, view.kvh);
        let src = &cache[i * rb..(i + 1) * rb];
        match ty {
            KvType::Q4_0 => {
                let mut out = vec![0u8; hd / QK * BLOCK_BYTES];
                q4_0_as_q8_0(src, &mut out);
                out
            }
            _ => src.to_vec(),
        }
    })
}

/// Integer scores of `rows` quantized query rows against the K rows `k`
/// (Q8_0 or Q4_0, as `view.kv.k` says) at positions `start..n_last`, stored at `scores[r * w + p]` for the
/// positions below `w` of each [`CHUNK`] from `start` (the reference of
/// the SIMD scores).
#[allow(clippy::too_many_arguments)]
pub fn scores_reference(
    view: &HeadView<'_>,
    k: &[u8],
    qq: &QuantQuery,
    rows: usize,
    start: usize,
    n_last: usize,
    w: usize,
    scores: &mut [f32],
) {
    let hd = view.kv.head_dim;
    let nb = hd / QK;
    let end = (start + n_last.saturating_sub(start).next_multiple_of(CHUNK)).min(w);
    for p in start..end {
        let kr = row(view, k, view.kv.k.ty(), p, n_last);
        for r in 0..rows {
            let mut s = 0.0f32;
            for b in 0..nb {
                let (dk, dot) = match &kr {
                    Some(kr) => {
                        let blk = &kr[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
                        let dot: i32 = blk[2..]
                            .iter()
                            .zip(&qq.q[r * hd + b * QK..r * hd + (b + 1) * QK])
                            .map(|(&kv, &qv)| (kv as i8 as i32 + 128) * qv as i32)
                            .sum();
                        (read_f16(&blk[..2]), dot)
                    }
                    None => (0.0, 0),
                };
                let f = (dot - qq.offset[r * nb + b]) as f32 * (dk * qq.d[r * nb + b]);
                s = if b == 0 { f } else { s + f };
            }
            scores[r * w + p] = s;
        }
    }
}

/// The weighted sum of the V rows `v` (Q8_0 or Q4_0, as `view.kv.v`
/// says) at positions `start..n_last`
/// with the weights `probs[r * w + p]` of `rows` rows, into `out`
/// (`rows * hd`, overwritten), weights quantized per chunk as the module
/// says (the reference of the SIMD sum). Row `r` sees positions
/// `seen[r].0..seen[r].1` only (inside `start..n_last`): its weights
/// elsewhere are taken as 0 and the V scales there do not bound its
/// quantization. Chunks start at multiples of [`V_CHUNK`]. So a row's
/// sum depends on its own weights and positions alone, never on the rows
/// beside it (a decode step's row and the same token's row in a
/// verification pass get the same bits).
#[allow(clippy::too_many_arguments)]
pub fn weighted_v_reference(
    view: &HeadView<'_>,
    v: &[u8],
    probs: &[f32],
    seen: &[(usize, usize)],
    start: usize,
    n_last: usize,
    w: usize,
    out: &mut [f32],
) {
    let hd = view.kv.head_dim;
    let (nb, rows) = (hd / QK, seen.len());
    out[..rows * hd].fill(0.0);
    for p0 in (start / V_CHUNK * V_CHUNK..n_last).step_by(V_CHUNK) {
        let vr: Vec<Option<Vec<u8>>> = (p0..p0 + V_CHUNK)
            .map(|p| row(view, v, view.kv.v.ty(), p, n_last))
            .collect();
        for (r, &(lo, hi)) in seen.iter().enumerate() {
            let sees = |j: usize| (lo..hi.min(w)).contains(&(p0 + j));
            let p: [f32; V_CHUNK] =
                std::array::from_fn(|j| if sees(j) { probs[r * w + p0 + j] } else { 0.0 });
            for b in 0..nb {
                let dv: [f32; V_CHUNK] = std::array::from_fn(|j| match &vr[j] {
                    Some(vr) if sees(j) => read_f16(&vr[b * BLOCK_BYTES..b * BLOCK_BYTES + 2]),
                    _ => 0.0,
                });
                let (u, s) = quantize_weights(&p, &dv);
                for d in 0..QK {
                    let sum: i32 = (0..V_CHUNK)
                        .filter_map(|j| {
                            vr[j]
                                .as_ref()
                                .map(|vr| u[j] as i32 * vr[b * BLOCK_BYTES + 2 + d] as i8 as i32)
                        })
                        .sum();
                    let o = &mut out[r * hd + b * QK + d];
                    *o = (sum as f32).mul_add(s, *o);
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod test_cache {
    use crate::rows::{HeadView, KvRows, KvType, PagedKv};

    /// Awkward sizes for the integer tile's tests: contexts that end
    /// mid-chunk and mid-block, a start past 0, pages of 8 and 16 slots
    /// (chunks that cross pages), heads of 32 to 256 values, a context of
    /// several V chunks: (page slots, KV heads, head dim, positions, start).
    #[cfg(target_arch = "x86_64")]
    pub(crate) const SHAPES: [(usize, usize, usize, usize, usize); 8] = [
        (16, 1, 64, 1, 0),
        (16, 4, 64, 40, 0),
        (8, 2, 32, 37, 8),
        (8, 3, 96, 100, 16),
        (16, 2, 128, 77, 0),
        (16, 1, 256, 33, 8),
        (8, 1, 64, 200, 24),
        (16, 2, 64, 300, 0),
    ];

    /// A paged Q8_0 (or Q4_0) cache of `blocks` blocks (`bs` slots, `nkv`
    /// heads of `hd`), its block table out of order, and a view of its
    /// last head whose visible positions start at `from`.
    pub(crate) struct Cache {
        pub(crate) bytes: Vec<u8>,
        ty: KvType,
        table: Vec<u32>,
        bs: usize,
        nkv: usize,
        hd: usize,
        from: usize,
    }

    impl Cache {
        pub(crate) fn with_type(
            blocks: usize,
            bs: usize,
            nkv: usize,
            hd: usize,
            from: usize,
            seed: f32,
            ty: KvType,
        ) -> Cache {
            let rows = blocks * bs * nkv;
            let vals: Vec<f32> = (0..rows * hd)
                .map(|i| ((i * 37 % 101) as f32 * seed).sin() * (1.0 + (i / hd % 7) as f32))
                .collect();
            let rb = ty.row_bytes(hd);
            let mut bytes = vec![0u8; rows * rb];
            for (src, dst) in vals.chunks_exact(hd).zip(bytes.chunks_exact_mut(rb)) {
                crate::quant::quantize_row(ty.ggml(), src, dst).unwrap();
            }
            let table = (0..blocks as u32).rev().collect();
            Cache {
                bytes,
                ty,
                table,
                bs,
                nkv,
                hd,
                from,
            }
        }

        pub(crate) fn view(&self) -> HeadView<'_> {
            let rows = KvRows::Quant(self.ty, &self.bytes);
            HeadView {
                kv: PagedKv {
                    k: rows,
                    v: rows,
                    block_size: self.bs,
                    n_kv_heads: self.nkv,
                    head_dim: self.hd,
                },
                table: &self.table,
                kvh: self.nkv - 1,
                scale: 0.125,
                window: None,
                softcap: None,
                from: self.from,
                until: usize::MAX,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_cache::Cache;
    use super::*;

    /// `max_abs` is the plain fold of `f32::max` over `|x|`, at lengths
    /// around its eight lanes, with negatives, zeros and a NaN.
    #[test]
    fn max_abs_is_the_plain_fold() {
        for n in [0usize, 1, 7, 8, 9, 31, 32, 33, 64] {
            for seed in 0..4 {
                let mut x: Vec<f32> = (0..n)
                    .map(|i| ((i * 7 + seed * 13) as f32 * 0.37).sin() * (1 + i % 5) as f32)
                    .collect();
                if seed == 3 && n > 2 {
                    x[n / 2] = f32::NAN;
                }
                let want = x.iter().fold(0.0f32, |m, &v| m.max(v.abs()));
                assert_eq!(max_abs(&x).to_bits(), want.to_bits(), "n={n} seed={seed}");
            }
        }
    }

    /// `round_away` is `round` at halves, their neighbours a few ulps
    /// away either side, and spread values, over the quantizer's range.
    #[test]
    fn round_away_is_round() {
        let mut xs = vec![0.0f32, -0.0, 1e-30, -1e-30];
        for k in -300..=300 {
            let h = k as f32 + 0.5;
            for d in -4i32..=4 {
                let b = (h.abs().to_bits() as i32 + d) as u32;
                xs.push(f32::from_bits(b).copysign(h));
            }
        }
        xs.extend((0..100_000).map(|i| ((i as f32) * 0.618_034).sin() * 140.0));
        for x in xs {
            assert_eq!(round_away(x), x.round() as i32, "{x:e}");
        }
    }

    /// The quantized weights keep the sum near the exact one: the
    /// reference's V sum against the same sum in f32.
    #[test]
    fn quantized_weights_stay_near_the_float_sum() {
        for ty in [KvType::Q8_0, KvType::Q4_0] {
            near_the_float_sum(ty);
        }
    }

    fn near_the_float_sum(ty: KvType) {
        let (bs, nkv, hd, n_last, start) = (16usize, 1, 64, 150usize, 0);
        let c = Cache::with_type(n_last.div_ceil(bs), bs, nkv, hd, start, 0.3, ty);
        let view = c.view();
        let w = n_last.next_multiple_of(8);
        let probs: Vec<f32> = (0..w)
            .map(|p| {
                if p < n_last {
                    (-((p % 37) as f32) * 0.2).exp()
                } else {
                    0.0
                }
            })
            .collect();
        let total: f32 = probs.iter().sum();
        let probs: Vec<f32> = probs.iter().map(|p| p / total).collect();
        let mut got = vec![0.0; hd];
        let seen = [(start, n_last)];
        weighted_v_reference(&view, &c.bytes, &probs, &seen, start, n_last, w, &mut got);
        let mut exact = vec![0.0f32; hd];
        let mut row = vec![0.0f32; hd];
        for (p, &pr) in probs.iter().enumerate().take(n_last) {
            let i = view.kv.row_index(view.table, p, view.kvh);
            crate::attention::widen_row(view.kv.v, i, &mut row);
            for (e, v) in exact.iter_mut().zip(&row) {
                *e += pr * v;
            }
        }
        let scale = exact.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (a, b) in got.iter().zip(&exact) {
            assert!(
                (a - b).abs() <= 2e-4 * scale,
                "{ty:?}: {a} vs {b} (largest {scale})"
            );
        }
    }
}
