//! One pass over a Q8_0 or Q4_0 cache for a decode tile (flash attention
//! with the integer kernels of [`super::avx512_attn`]): per chunk of
//! [`V_CHUNK`] positions the scores of every query row, their
//! exponentials against each row's running maximum, and the chunk's
//! weighted sum of V, before the next chunk's K is read. When a row's
//! maximum grows, what it has summed so far is scaled by
//! `exp(old - new)`; at the end each row is divided by its sum.
//!
//! The tile that scores all positions first keeps `rows` rows of scores
//! (512 KiB for 8 rows at 16k positions) and passes over them three times
//! (scores, softmax, V sum), out of L2 and beyond at long contexts; here a
//! chunk's scores (8 x 64 floats) stay in L1. The V sum's weights are
//! quantized per chunk against the chunk's largest weight, so they come
//! out the same integers as the tile's (their common factor differs).
//!
//! Reached only from [`super::avx512_attn::tile_q8k`] on the AVX-512 tier,
//! for tiles whose every query row sees exactly the scored positions (a
//! decode token: one row per query head of the KV head).

#![allow(unsafe_code)]

use super::avx2_attn::{
    prefetch_rows, score_rows, widen_block, MAX_HEAD_DIM, PREFETCH_AHEAD, ROWS,
};
use super::avx512::exp16;
use super::avx512_attn::{scores_span, unpermute, v_chunk, Scratch, Span};
use super::avx512_attn_f16::{chunk_rows, sum_rows};
use super::avx512_rows::{HeadRows, LANES};
use crate::attention_q8::{QuantQuery, V_CHUNK};
use crate::rows::HeadView;
use half::f16;
use std::arch::x86_64::*;

/// Attention of `rows` quantized query rows (`qq`) over positions
/// `start..n_last` of `view`'s Q8_0 or Q4_0 K (`k`) and V (`v`) rows:
/// `out` (`rows * hd`) gets each row's softmax-weighted sum of V, `lse`
/// (where given) each row's log-sum-exp (`-inf` for a row that sees
/// nothing, whose output is 0).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI are available; `hd` is a multiple of 64 and at
/// most 256; `start` is a multiple of 8; `qq` holds `rows` rows, `out`
/// `rows * hd` values, `lse` `rows`; `n_last` is at most the rows the
/// view's block table covers.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn flash_q8(
    view: &HeadView<'_>,
    k: &[u8],
    v: &[u8],
    qq: &QuantQuery,
    rows: usize,
    start: usize,
    n_last: usize,
    out: &mut [f32],
    lse: Option<&mut [f32]>,
) {
    let hd = view.kv.head_dim;
    let (kh, vh) = (
        HeadRows::new(view, view.kv.k.ty()),
        HeadRows::new(view, view.kv.v.ty()),
    );
    let mut s = Scratch::new(rows);
    let mut probs = vec![0.0f32; rows * V_CHUNK];
    let mut chunk_max = vec![0.0f32; rows];
    let mut run = Running::new(rows, hd);
    for p0 in (start..n_last).step_by(V_CHUNK) {
        let end = (p0 + V_CHUNK).min(n_last);
        let span = Span {
            start: p0,
            n_last: end,
            w: V_CHUNK,
            base: p0,
        };
        // SAFETY: the caller's contract; `probs` holds `rows * V_CHUNK`.
        unsafe {
            scores_span(
                &kh,
                k,
                qq,
                hd,
                rows,
                span,
                &mut probs,
                &mut chunk_max,
                &mut s,
            )
        };
        for (r, &cm) in chunk_max.iter().enumerate() {
            // SAFETY: AVX-512 F (the caller's contract).
            unsafe { run.add_chunk(r, &mut probs[r * V_CHUNK..][..V_CHUNK], end - p0, cm) };
        }
        // SAFETY: the caller's contract; positions past `end` have weight 0.
        unsafe { v_chunk(&vh, v, &probs, hd, rows, span, &mut run.acc, &mut s) };
    }
    run.finish(out, lse, unpermute);
}

/// As [`flash_q8`] over an f16 cache (`v` its V rows) with the float
/// query rows `q` (`rows * hd`): each eight K rows widened and scored as
/// the AVX-512 tile scores them (two query rows per pass), each chunk's V
/// rows summed in 512-bit registers ([`super::avx512_attn_f16::sum_rows`]).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI are available; `hd` is a multiple of 32 and at
/// most 256; `start` is a multiple of 8; `q` and `out` hold `rows * hd`
/// values, `lse` `rows`; `n_last` is at most the rows the view's block
/// table covers.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn flash_f16(
    view: &HeadView<'_>,
    v: &[f16],
    q: &[f32],
    rows: usize,
    start: usize,
    n_last: usize,
    out: &mut [f32],
    lse: Option<&mut [f32]>,
) {
    super::align_frame!();
    let hd = view.kv.head_dim;
    let mut block = [0.0f32; ROWS * MAX_HEAD_DIM];
    let mut probs = vec![0.0f32; rows * V_CHUNK];
    let mut run = Running::new(rows, hd);
    for p0 in (start..n_last).step_by(V_CHUNK) {
        let end = (p0 + V_CHUNK).min(n_last);
        // This chunk's V rows, on their way while K is scored.
        let (ptr, n) = chunk_rows(view, v, p0, n_last);
        for &p in &ptr[..n] {
            for line in (0..2 * hd).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>((p as *const i8).wrapping_add(line));
            }
        }
        for p in (p0..end).step_by(ROWS) {
            let next = p + PREFETCH_AHEAD;
            if next < n_last {
                prefetch_rows(view, view.kv.k, next, (n_last - next).min(ROWS));
            }
            widen_block(view, view.kv.k, p, (end - p).min(ROWS), &mut block);
            let mut r = 0;
            // SAFETY: rows `r..r + 2` (then `r`) of `q` and of `probs`
            // (stride V_CHUNK, eight scores from `p - p0 <= V_CHUNK - 8`).
            unsafe {
                while r + 2 <= rows {
                    score_rows::<2>(q, hd, &block, r, V_CHUNK, p - p0, view.scale, &mut probs);
                    r += 2;
                }
                if r < rows {
                    score_rows::<1>(q, hd, &block, r, V_CHUNK, p - p0, view.scale, &mut probs);
                }
            }
        }
        let mut chunk_max = [f32::NEG_INFINITY; 64];
        for (r, m) in chunk_max[..rows.min(64)].iter_mut().enumerate() {
            *m = probs[r * V_CHUNK..r * V_CHUNK + (end - p0)]
                .iter()
                .fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        }
        for r in 0..rows {
            let cm = chunk_max.get(r).copied().unwrap_or_else(|| {
                probs[r * V_CHUNK..r * V_CHUNK + (end - p0)]
                    .iter()
                    .fold(f32::NEG_INFINITY, |a, &b| a.max(b))
            });
            // SAFETY: AVX-512 F (the caller's contract).
            unsafe { run.add_chunk(r, &mut probs[r * V_CHUNK..][..V_CHUNK], end - p0, cm) };
        }
        // SAFETY: `ptr[..n]` start rows of `hd` halfs; `probs` holds the
        // chunk's weights from position 0, 0 past `n`.
        unsafe { sum_rows(&ptr[..n], hd, &probs, V_CHUNK, 0, rows, &mut run.acc) };
    }
    run.finish(out, lse, |a, o, norm| {
        o.iter_mut().zip(a).for_each(|(o, &a)| *o = a * norm)
    });
}

/// Each query row's running maximum, sum of exponentials and unnormalized
/// output of the one-pass kernels.
struct Running {
    hd: usize,
    max: Vec<f32>,
    sum: Vec<f32>,
    /// `rows * hd` accumulators.
    acc: Vec<f32>,
}

impl Running {
    fn new(rows: usize, hd: usize) -> Self {
        Running {
            hd,
            max: vec![f32::NEG_INFINITY; rows],
            sum: vec![0.0; rows],
            acc: vec![0.0; rows * hd],
        }
    }

    /// Takes row `r`'s chunk of scores (`row`, the first `n` live, their
    /// largest `chunk_max`): what the row has summed so far is scaled to
    /// the new maximum, and `row` becomes the chunk's weights against it.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI are available; `row` holds [`V_CHUNK`] values.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn add_chunk(&mut self, r: usize, row: &mut [f32], n: usize, chunk_max: f32) {
        let m = self.max[r].max(chunk_max);
        if m > self.max[r] && self.max[r] > f32::NEG_INFINITY {
            let f = (self.max[r] - m).exp();
            self.sum[r] *= f;
            let hd = self.hd;
            self.acc[r * hd..(r + 1) * hd]
                .iter_mut()
                .for_each(|a| *a *= f);
        }
        self.max[r] = m;
        // SAFETY: the caller's contract.
        self.sum[r] += unsafe { exp_row(row, n, m) };
    }

    /// Each row's output, `write(acc row, out row, 1 / sum)` (0 for a row
    /// that saw nothing), and its log-sum-exp (`-inf` for such a row).
    fn finish(
        &self,
        out: &mut [f32],
        lse: Option<&mut [f32]>,
        write: impl Fn(&[f32], &mut [f32], f32),
    ) {
        let hd = self.hd;
        for (r, &s) in self.sum.iter().enumerate() {
            let norm = if s > 0.0 { 1.0 / s } else { 0.0 };
            write(
                &self.acc[r * hd..(r + 1) * hd],
                &mut out[r * hd..(r + 1) * hd],
                norm,
            );
        }
        if let Some(lse) = lse {
            for (l, (&m, &s)) in lse.iter_mut().zip(self.max.iter().zip(&self.sum)) {
                *l = if s > 0.0 {
                    m + s.ln()
                } else {
                    f32::NEG_INFINITY
                };
            }
        }
    }
}

/// `row[i] = exp(row[i] - max)` for the first `n` of the row's
/// [`V_CHUNK`] values, 0 for the rest; returns their sum.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI are available; `row` holds [`V_CHUNK`] values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn exp_row(row: &mut [f32], n: usize, max: f32) -> f32 {
    let mv = _mm512_set1_ps(max);
    let mut total = _mm512_setzero_ps();
    for (h, x) in row[..V_CHUNK].chunks_exact_mut(LANES).enumerate() {
        let live = n.saturating_sub(h * LANES).min(LANES);
        let mask = ((1u32 << live) - 1) as __mmask16;
        // SAFETY: `x` holds 16 floats; the masked lanes are not read.
        unsafe {
            let e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x.as_ptr()), mv));
            let e = _mm512_maskz_mov_ps(mask, e);
            total = _mm512_add_ps(total, e);
            _mm512_storeu_ps(x.as_mut_ptr(), e);
        }
    }
    _mm512_reduce_add_ps(total)
}

#[cfg(test)]
mod tests {
    use crate::attention_q8::test_cache::Cache;
    use crate::attention_q8::{quantize_query, scores_reference, weighted_v_reference};
    use crate::rows::KvType;

    /// The one pass equals the references taken in turn: all scores, a
    /// softmax of each row, the V sum. Contexts of one position to several
    /// thousand (row maxima that grow in later chunks), a last chunk cut
    /// short, a start past 0, Q4_0's negative scales, heads of 64 to 256.
    #[test]
    fn one_pass_equals_scores_softmax_and_v_sum_in_turn() {
        if !crate::cpu::tiers().contains(&crate::cpu::Isa::Avx512) {
            return;
        }
        for ty in [KvType::Q8_0, KvType::Q4_0] {
            let shapes: [(usize, usize, usize, usize, usize, usize); 7] = [
                (16, 1, 64, 1, 0, 8),
                (16, 4, 64, 40, 0, 8),
                (8, 3, 128, 200, 16, 3),
                (16, 2, 256, 77, 0, 5),
                (16, 1, 64, 1_000, 64, 8),
                (16, 2, 64, 5_003, 0, 4),
                (16, 1, 64, 8, 8, 2),
            ];
            for (bs, nkv, hd, n_last, start, rows) in shapes {
                let c = Cache::with_type(n_last.div_ceil(bs) + 1, bs, nkv, hd, start, 0.1, ty);
                let view = c.view();
                let q: Vec<f32> = (0..rows * hd)
                    .map(|i| (i as f32 * 0.7).cos() * 3.0)
                    .collect();
                let qq = quantize_query(&q, rows, hd, view.scale);
                let w = n_last.next_multiple_of(8);
                let mut probs = vec![0.0f32; rows * w];
                scores_reference(&view, &c.bytes, &qq, rows, start, n_last, w, &mut probs);
                let mut want_lse = vec![f32::NEG_INFINITY; rows];
                for (r, row) in probs.chunks_exact_mut(w).enumerate() {
                    let live = &mut row[start..n_last];
                    let m = live.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                    let total: f64 = live.iter().map(|&x| ((x - m) as f64).exp()).sum();
                    live.iter_mut()
                        .for_each(|x| *x = (((*x - m) as f64).exp() / total) as f32);
                    if !live.is_empty() {
                        want_lse[r] = m + (total as f32).ln();
                    }
                    row[..start].fill(0.0);
                    row[n_last..].fill(0.0);
                }
                let mut want = vec![0.0f32; rows * hd];
                weighted_v_reference(&view, &c.bytes, &probs, rows, start, n_last, w, &mut want);
                let (mut got, mut lse) = (vec![f32::NAN; rows * hd], vec![f32::NAN; rows]);
                // SAFETY: AVX-512 VNNI detected; shapes as the kernel requires.
                unsafe {
                    super::flash_q8(
                        &view,
                        &c.bytes,
                        &c.bytes,
                        &qq,
                        rows,
                        start,
                        n_last,
                        &mut got,
                        Some(&mut lse),
                    )
                };
                let what = format!("{ty:?} hd={hd} n={n_last} start={start}");
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 2e-5 * (1.0 + b.abs()),
                        "{what} value {i}: {a} vs {b}"
                    );
                }
                for (a, b) in lse.iter().zip(&want_lse) {
                    assert!(
                        a == b || (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "{what} lse {a} vs {b}"
                    );
                }
            }
        }
    }

    /// The f16 one pass equals the reference tile (scores, softmax, V sum
    /// in turn, in floats) with its log-sum-exp: 1 to 11 query rows (odd
    /// counts score one row alone), heads of 32 to 256, pages of 8 and 16,
    /// a range that starts past 0, contexts of 1 to 5,003 positions.
    #[test]
    fn f16_one_pass_equals_the_reference_tile() {
        use crate::attention::attend_tile_reference;
        use crate::rows::{HeadView, KvRows, PagedKv};
        use half::f16;
        if !crate::cpu::tiers().contains(&crate::cpu::Isa::Avx512) {
            return;
        }
        let shapes: [(usize, usize, usize, usize, usize, usize); 7] = [
            (16, 1, 64, 1, 0, 8),
            (16, 4, 64, 150, 0, 8),
            (8, 2, 32, 77, 8, 3),
            (8, 3, 96, 100, 16, 11),
            (16, 2, 128, 1_000, 64, 5),
            (16, 1, 256, 33, 8, 1),
            (16, 2, 64, 5_003, 0, 4),
        ];
        for (bs, nkv, hd, n_ctx, from, rows) in shapes {
            let blocks = n_ctx.div_ceil(bs) + 1;
            let val = |i: usize, s: f32| f16::from_f32(((i * 37 % 1009) as f32 * s).sin() * 2.0);
            let ks: Vec<f16> = (0..blocks * bs * nkv * hd).map(|i| val(i, 0.013)).collect();
            let vs: Vec<f16> = (0..blocks * bs * nkv * hd).map(|i| val(i, 0.029)).collect();
            let table: Vec<u32> = (0..blocks as u32).rev().collect();
            let view = HeadView {
                kv: PagedKv {
                    k: KvRows::F16(&ks),
                    v: KvRows::F16(&vs),
                    block_size: bs,
                    n_kv_heads: nkv,
                    head_dim: hd,
                },
                table: &table,
                kvh: nkv - 1,
                scale: 0.125,
                window: None,
                softcap: None,
                from,
                until: usize::MAX,
            };
            let q: Vec<f32> = (0..rows * hd)
                .map(|i| (i as f32 * 0.37).cos() * 2.0)
                .collect();
            let mut scores = vec![0.0; crate::attention::tile_scores_len(1, rows, n_ctx)];
            let (mut want, mut want_lse) = (vec![0.0; rows * hd], vec![0.0; rows]);
            attend_tile_reference(
                &view,
                &q,
                1,
                n_ctx,
                &mut scores,
                &mut want,
                Some(&mut want_lse),
            );
            let (mut got, mut lse) = (vec![f32::NAN; rows * hd], vec![f32::NAN; rows]);
            let (start, n_last) = (view.first_visible(n_ctx), view.visible_end(n_ctx));
            // SAFETY: AVX-512 VNNI detected; shapes as the kernel requires.
            unsafe {
                super::flash_f16(
                    &view,
                    &vs,
                    &q,
                    rows,
                    start,
                    n_last,
                    &mut got,
                    Some(&mut lse),
                )
            };
            let what = format!("hd={hd} n={n_ctx} from={from} rows={rows}");
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 2e-5 * (1.0 + b.abs()),
                    "{what} value {i}: {a} vs {b}"
                );
            }
            for (a, b) in lse.iter().zip(&want_lse) {
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "{what} lse {a} vs {b}"
                );
            }
        }
    }
}
