//! AVX2 causal attention of a tile (consecutive tokens x the query heads of
//! one KV head) over the paged f16 KV cache. K and V rows are widened (F16C)
//! eight at a time into an f32 block that serves every query row of the
//! tile; scores come eight positions per register (no per-score horizontal
//! sum), and the weighted sum keeps 64 output dimensions in registers.
//!
//! Handed out by [`crate::cpu::Kernels::for_isa`] only after AVX2, FMA and
//! F16C were detected: the safety condition of the function below.

#![allow(unsafe_code)]

use crate::attention::{attend_tile_reference, tile_scores_len};
use crate::ops::softmax;
use crate::rows::HeadView;
use std::arch::x86_64::*;

/// Widest head handled here (others take the reference).
const MAX_HEAD_DIM: usize = 256;
/// Cache rows widened per block.
const ROWS: usize = 8;

/// See [`crate::attention::attend_tile`].
pub fn attend_tile(
    view: &HeadView<'_>,
    q: &[f32],
    t: usize,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let hd = view.kv.head_dim;
    let g = q.len() / (t * hd).max(1);
    let n_last = n_ctx + t.max(1) - 1;
    let kv_rows = view.table.len() * view.kv.block_size;
    if hd == 0
        || !hd.is_multiple_of(8)
        || hd > MAX_HEAD_DIM
        || g == 0
        || t == 0
        || n_ctx == 0
        || n_last > kv_rows
        || scores.len() < tile_scores_len(t, g, n_ctx)
        || out.len() < t * g * hd
    {
        return attend_tile_reference(view, q, t, n_ctx, scores, out);
    }
    // SAFETY: features detected by the kernel table; lengths checked above,
    // cache rows are taken as bounds-checked slices inside.
    unsafe {
        tile_impl(
            view,
            &q[..t * g * hd],
            t,
            g,
            n_ctx,
            scores,
            &mut out[..t * g * hd],
        )
    }
}

/// Widens up to [`ROWS`] cache rows starting at position `p0` of `cache`
/// (K or V) into `block`, zeroing the rows past `n_rows`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen_block(
    view: &HeadView<'_>,
    cache: &[half::f16],
    p0: usize,
    n_rows: usize,
    block: &mut [f32; ROWS * MAX_HEAD_DIM],
) {
    let hd = view.kv.head_dim;
    for j in 0..ROWS {
        let dst = &mut block[j * hd..(j + 1) * hd];
        if j >= n_rows {
            dst.fill(0.0);
            continue;
        }
        let off = view.kv.slot_offset(view.table, p0 + j) + view.kvh * hd;
        let src = &cache[off..off + hd];
        for (d, s) in dst.chunks_exact_mut(8).zip(src.chunks_exact(8)) {
            // SAFETY: `s` holds 8 halfs (16 bytes) and `d` 8 floats.
            unsafe {
                let v = _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr() as *const __m128i));
                _mm256_storeu_ps(d.as_mut_ptr(), v);
            }
        }
    }
}

/// `[sum(a[0]), ..., sum(a[7])]`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn sums8(a: &[__m256; 8]) -> __m256 {
    let t0 = _mm256_hadd_ps(a[0], a[1]);
    let t1 = _mm256_hadd_ps(a[2], a[3]);
    let t2 = _mm256_hadd_ps(a[4], a[5]);
    let t3 = _mm256_hadd_ps(a[6], a[7]);
    let u0 = _mm256_hadd_ps(t0, t1);
    let u1 = _mm256_hadd_ps(t2, t3);
    _mm256_add_ps(
        _mm256_permute2f128_ps(u0, u1, 0x20),
        _mm256_permute2f128_ps(u0, u1, 0x31),
    )
}

/// # Safety
/// Call only once the CPU's AVX2, FMA and F16C support is known (the kernel
/// table hands out the safe wrapper only then), with every slice and pointer
/// covering the whole blocks or elements the wrapper checked.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_impl(
    view: &HeadView<'_>,
    q: &[f32],
    t: usize,
    g: usize,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
) {
    super::align_frame!();
    let hd = view.kv.head_dim;
    let nv = hd / 8;
    let n_last = n_ctx + t - 1;
    let w = n_last.next_multiple_of(8);
    let rows = t * g;
    // Context length of query row `r` (token `r / g`).
    let len = |r: usize| n_ctx + r / g;
    let mut block = [0.0f32; ROWS * MAX_HEAD_DIM];
    let bp = block.as_ptr();

    // Scores: eight positions at a time for every query row that sees them.
    for p0 in (0..n_last).step_by(ROWS) {
        widen_block(view, view.kv.k, p0, (n_last - p0).min(ROWS), &mut block);
        for r in (0..rows).filter(|&r| len(r) > p0) {
            let qr = q[r * hd..(r + 1) * hd].as_ptr();
            let mut acc = [_mm256_setzero_ps(); 8];
            for c in 0..nv {
                // SAFETY: `qr` holds `hd` floats and `block` `ROWS * hd`.
                unsafe {
                    let qv = _mm256_loadu_ps(qr.add(8 * c));
                    for (j, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(qv, _mm256_loadu_ps(bp.add(j * hd + 8 * c)), *a);
                    }
                }
            }
            let s = _mm256_mul_ps(sums8(&acc), _mm256_set1_ps(view.scale));
            // SAFETY: `p0 + 8 <= w` and `scores` holds `rows * w` values.
            unsafe { _mm256_storeu_ps(scores.as_mut_ptr().add(r * w + p0), s) };
        }
    }
    for r in 0..rows {
        let row = &mut scores[r * w..(r + 1) * w];
        softmax(&mut row[..len(r)]);
        row[len(r)..].fill(0.0);
    }

    // Weighted sum of V: 64 output dimensions of one query row in registers
    // across each block of eight positions.
    // The same block buffer: `widen_block` rewrites every row it is read at
    // (one 8 KiB zeroing per call instead of two).
    out.fill(0.0);
    for p0 in (0..n_last).step_by(ROWS) {
        widen_block(view, view.kv.v, p0, (n_last - p0).min(ROWS), &mut block);
        for r in (0..rows).filter(|&r| len(r) > p0) {
            let sr = scores[r * w + p0..r * w + p0 + ROWS].as_ptr();
            let o = out[r * hd..(r + 1) * hd].as_mut_ptr();
            for c0 in (0..nv).step_by(8) {
                // SAFETY: `o` holds `hd = 8 * nv` floats, `sr` ROWS scores,
                // `block` ROWS rows of `hd` floats; each call touches the
                // `8 * n` dimensions from `8 * c0`.
                unsafe {
                    let (o, b) = (o.add(8 * c0), bp.add(8 * c0));
                    match nv - c0 {
                        1 => weighted_sum::<1>(o, sr, b, hd),
                        2 => weighted_sum::<2>(o, sr, b, hd),
                        3 => weighted_sum::<3>(o, sr, b, hd),
                        4 => weighted_sum::<4>(o, sr, b, hd),
                        5 => weighted_sum::<5>(o, sr, b, hd),
                        6 => weighted_sum::<6>(o, sr, b, hd),
                        7 => weighted_sum::<7>(o, sr, b, hd),
                        _ => weighted_sum::<8>(o, sr, b, hd),
                    }
                }
            }
        }
    }
}

/// `o[..8N] += sum_j s[j] * block[j][..8N]` over the [`ROWS`] rows of a
/// block (row stride `hd`), keeping the `N` output registers live.
///
/// # Safety
/// `o` and each of the ROWS rows at `b + j * hd` hold `8 * N` floats, `s`
/// holds ROWS floats; AVX2 and FMA are available.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn weighted_sum<const N: usize>(o: *mut f32, s: *const f32, b: *const f32, hd: usize) {
    // SAFETY: the caller's contract covers every access below.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); N];
        for (c, a) in acc.iter_mut().enumerate() {
            *a = _mm256_loadu_ps(o.add(8 * c));
        }
        for j in 0..ROWS {
            let w = _mm256_broadcast_ss(&*s.add(j));
            for (c, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(w, _mm256_loadu_ps(b.add(j * hd + 8 * c)), *a);
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(o.add(8 * c), *a);
        }
    }
}
