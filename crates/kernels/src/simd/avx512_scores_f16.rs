//! The AVX-512 tile's scores over an f16 K cache (the default cache type):
//! sixteen cache rows are widened to f32 and transposed per pass
//! ([`widen_transposed`]: one 512-bit register per dimension, lane `j` =
//! position `j`), so each FMA with a broadcast query value advances
//! sixteen scores of a query row, with no sums across lanes; up to eight
//! query rows share each loaded dimension. The AVX2 tile took eight
//! dimensions per FMA and summed across lanes once per eight positions.
//! Then [`super::avx512_attn_f16::finish_tile`] as before.
//!
//! Reached only through the AVX-512 tier's attention tile, which the kernel
//! table hands out after AVX-512 F/BW/VL were detected: the safety
//! condition of [`tile_f16k`].

#![allow(unsafe_code)]

use super::avx2_attn::{prefetch_rows, tile_span, PREFETCH_AHEAD, ROWS};
use crate::rows::HeadView;
use half::f16;
use std::arch::x86_64::*;

/// Cache rows per pass (the lanes of a 512-bit register).
const LANES: usize = 2 * ROWS;
/// Query heads per KV head this kernel is chosen from: the transposes are paid once
/// per pass for all of them (`attn_decode`, one thread, heads of 64 and
/// 128: a tile of eight rows took 12-15% less time than with the AVX2
/// tile's scores, four the same, two 18% more, one 23% more).
pub(super) const MIN_ROWS: usize = 8;
/// Widest head handled (the tile's).
const MAX_HEAD_DIM: usize = 256;

/// The AVX-512 tile over an f16 K cache whose heads are multiples of 16
/// values, for KV heads shared by at least [`MIN_ROWS`] query heads
/// (chosen by the group, not the tile's rows, so a row's scores are the
/// same in decode, verification and prefill): its scores as the module
/// says, then
/// [`super::avx512_attn_f16::finish_tile`].
///
/// # Safety
/// AVX-512 F/BW/VL are available; the shapes `checked` in
/// [`super::avx2_attn`] checks hold and `hd` is a multiple of 16.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile_f16k(
    view: &HeadView<'_>,
    k: &[f16],
    q: &[f32],
    t: usize,
    g: usize,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
    lse: Option<&mut [f32]>,
) {
    let hd = view.kv.head_dim;
    let (n_last, w, start) = tile_span(view, t, n_ctx);
    let rows = t * g;
    // One past the last position query row `r` (token `r / g`) sees.
    let len = |r: usize| view.visible_end(n_ctx + r / g);
    let mut kt = [0.0f32; LANES * MAX_HEAD_DIM];
    for p0 in (start..n_last).step_by(LANES) {
        for half in 0..2 {
            let next = p0 + PREFETCH_AHEAD + half * ROWS;
            if next < n_last {
                prefetch_rows(view, view.kv.k, next, (n_last - next).min(ROWS));
            }
        }
        // SAFETY: `kt` holds `hd` registers of 16 floats.
        unsafe { widen_transposed(view, k, p0, (n_last - p0).min(LANES), &mut kt) };
        // The lanes inside the scores rows (`w - p0` from `p0`).
        let store = ((1u32 << (w - p0).min(LANES)) - 1) as __mmask16;
        // Rows that see none of the pass skip it (`len` grows with `r`);
        // what a row sees of it is the softmax's business.
        let mut r = (0..rows).find(|&r| len(r) > p0).unwrap_or(rows);
        let s = (view.scale, store, w, p0);
        while r + 8 <= rows {
            // SAFETY: rows `r..r + 8` of `q` and `scores` exist (the
            // caller's contract), `store` keeps the stores inside the rows.
            unsafe { score_rows::<8>(q, hd, &kt, r, s, scores) };
            r += 8;
        }
        if r + 4 <= rows {
            // SAFETY: as for the eight rows above, fewer rows.
            unsafe { score_rows::<4>(q, hd, &kt, r, s, scores) };
            r += 4;
        }
        if r + 2 <= rows {
            // SAFETY: as for the eight rows above, fewer rows.
            unsafe { score_rows::<2>(q, hd, &kt, r, s, scores) };
            r += 2;
        }
        if r < rows {
            // SAFETY: as for the eight rows above, fewer rows.
            unsafe { score_rows::<1>(q, hd, &kt, r, s, scores) };
        }
    }
    // SAFETY: the caller's contract.
    unsafe { super::avx512_attn_f16::finish_tile(view, t, g, n_ctx, start, scores, out, lse) };
}

/// The f16 K rows of the `n` positions from `p0` (zeros past them),
/// widened into `kt` dimension by dimension: `kt[16 d + j]` is dimension
/// `d` of position `p0 + j`.
///
/// # Safety
/// `kt` holds `16 * hd` floats, `hd` a multiple of 16; the positions lie
/// in the view's block table; AVX-512 F is available.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn widen_transposed(view: &HeadView<'_>, k: &[f16], p0: usize, n: usize, kt: &mut [f32]) {
    let hd = view.kv.head_dim;
    let lo = view
        .kv
        .row_indices::<ROWS>(view.table, p0, n.min(ROWS), view.kvh);
    let hi = view
        .kv
        .row_indices::<ROWS>(view.table, p0 + ROWS, n.saturating_sub(ROWS), view.kvh);
    let row = |j: usize| if j < ROWS { lo[j] } else { hi[j - ROWS] };
    for c in (0..hd).step_by(16) {
        let v: [__m512; LANES] = std::array::from_fn(|j| {
            if j < n {
                let i = row(j);
                let s = &k[i * hd + c..i * hd + c + 16];
                // SAFETY: `s` holds 16 halfs (32 bytes).
                _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(s.as_ptr() as *const __m256i) })
            } else {
                _mm512_setzero_ps()
            }
        });
        for (d, col) in transpose16(&v).iter().enumerate() {
            // SAFETY: `c + d < hd`: register `c + d` of `kt`.
            unsafe { _mm512_storeu_ps(kt.as_mut_ptr().add(16 * (c + d)), *col) };
        }
    }
}

/// The 16 x 16 transpose of `r` (register `i` = row `i`): interleave
/// pairs of rows, then pairs of pairs (each 128-bit lane then holds four
/// rows of one column), then gather the four 128-bit lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn transpose16(r: &[__m512; LANES]) -> [__m512; LANES] {
    let t: [__m512; LANES] = std::array::from_fn(|i| {
        let (a, b) = (r[i & !1], r[i | 1]);
        if i % 2 == 0 {
            _mm512_unpacklo_ps(a, b)
        } else {
            _mm512_unpackhi_ps(a, b)
        }
    });
    // u[4 g + m], 128-bit lane k: column 4 k + m of rows 4 g..4 g + 4.
    let u: [__m512; LANES] = std::array::from_fn(|i| {
        let (g, m) = (i / 4, i % 4);
        let (a, b) = (
            _mm512_castps_pd(t[4 * g + m / 2]),
            _mm512_castps_pd(t[4 * g + 2 + m / 2]),
        );
        _mm512_castpd_ps(if m % 2 == 0 {
            _mm512_unpacklo_pd(a, b)
        } else {
            _mm512_unpackhi_pd(a, b)
        })
    });
    let mut out = [_mm512_setzero_ps(); LANES];
    for m in 0..4 {
        let v0 = _mm512_shuffle_f32x4::<0x88>(u[m], u[4 + m]);
        let v1 = _mm512_shuffle_f32x4::<0xdd>(u[m], u[4 + m]);
        let w0 = _mm512_shuffle_f32x4::<0x88>(u[8 + m], u[12 + m]);
        let w1 = _mm512_shuffle_f32x4::<0xdd>(u[8 + m], u[12 + m]);
        out[m] = _mm512_shuffle_f32x4::<0x88>(v0, w0);
        out[4 + m] = _mm512_shuffle_f32x4::<0x88>(v1, w1);
        out[8 + m] = _mm512_shuffle_f32x4::<0xdd>(v0, w0);
        out[12 + m] = _mm512_shuffle_f32x4::<0xdd>(v1, w1);
    }
    out
}

/// Scores of query rows `r..r + R` against the sixteen transposed rows in
/// `kt`, scaled, stored at `scores[(r + i) * w + p0..]` in the lanes of
/// `store` (`s` = scale, store, w, p0).
///
/// # Safety
/// `q` holds rows `r..r + R` of `hd` floats, `kt` `16 * hd` floats; the
/// lanes of `store` lie inside each row of `scores`; AVX-512 F is
/// available.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn score_rows<const R: usize>(
    q: &[f32],
    hd: usize,
    kt: &[f32],
    r: usize,
    s: (f32, __mmask16, usize, usize),
    scores: &mut [f32],
) {
    let (scale, store, w, p0) = s;
    let qr = &q[r * hd..(r + R) * hd];
    let mut acc = [_mm512_setzero_ps(); R];
    for d in 0..hd {
        // SAFETY: register `d < hd` of `kt`.
        let kd = unsafe { _mm512_loadu_ps(kt.as_ptr().add(16 * d)) };
        for (i, a) in acc.iter_mut().enumerate() {
            *a = _mm512_fmadd_ps(_mm512_set1_ps(qr[i * hd + d]), kd, *a);
        }
    }
    let sc = _mm512_set1_ps(scale);
    for (i, a) in acc.iter().enumerate() {
        // SAFETY: the caller's contract on `store`.
        unsafe {
            _mm512_mask_storeu_ps(
                scores.as_mut_ptr().add((r + i) * w + p0),
                store,
                _mm512_mul_ps(*a, sc),
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose16_transposes() {
        if !crate::cpu::tiers().contains(&crate::cpu::Isa::Avx512) {
            return;
        }
        let vals: Vec<f32> = (0..256).map(|i| i as f32).collect();
        let mut got = [0.0f32; 256];
        // SAFETY: AVX-512 F was detected; both buffers hold 16 x 16 floats.
        unsafe {
            let r: [__m512; LANES] =
                std::array::from_fn(|j| _mm512_loadu_ps(vals.as_ptr().add(16 * j)));
            for (d, col) in transpose16(&r).iter().enumerate() {
                _mm512_storeu_ps(got.as_mut_ptr().add(16 * d), *col);
            }
        }
        for d in 0..16 {
            for j in 0..16 {
                assert_eq!(got[16 * d + j], vals[16 * j + d], "column {d}, row {j}");
            }
        }
    }
}
