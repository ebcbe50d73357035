//! AVX2 grouped-query attention over the paged f16 KV cache: each K and V
//! row is widened to f32 once (F16C) for every query head that shares it.
//!
//! Handed out by [`crate::cpu::Kernels::for_isa`] only after AVX2, FMA and
//! F16C were detected: the safety condition of the function below.

#![allow(unsafe_code)]

use super::avx2::hsum;
use crate::attention::{attend_group_reference, PagedKv};
use crate::ops::softmax;
use std::arch::x86_64::*;

/// Widest head handled here (others take the reference).
const MAX_HEAD_DIM: usize = 256;

/// See [`crate::attention::attend_group`].
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
    let hd = kv.head_dim;
    let g = q.len() / hd.max(1);
    if hd == 0
        || !hd.is_multiple_of(8)
        || hd > MAX_HEAD_DIM
        || g == 0
        || scores.len() < g * n_ctx
        || out.len() < g * hd
    {
        return attend_group_reference(q, kvh, kv, table, n_ctx, scale, scores, out);
    }
    // SAFETY: features detected by the kernel table; lengths checked above,
    // cache rows are taken as bounds-checked slices inside.
    unsafe {
        attend_group_impl(
            &q[..g * hd],
            kvh,
            kv,
            table,
            n_ctx,
            scale,
            scores,
            &mut out[..g * hd],
        )
    }
}

/// Widens `hd` f16 values at `src` into `row`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen(src: &[half::f16], row: &mut [__m256; MAX_HEAD_DIM / 8], nv: usize) {
    for (i, r) in row.iter_mut().enumerate().take(nv) {
        // SAFETY: `src` holds `8 * nv` halfs (checked by the caller's slice).
        *r = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(src.as_ptr().add(8 * i) as *const __m128i) });
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn attend_group_impl(
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
    let (g, nv) = (q.len() / hd, hd / 8);
    let mut row = [_mm256_setzero_ps(); MAX_HEAD_DIM / 8];
    for p in 0..n_ctx {
        let off = kv.slot_offset(table, p) + kvh * hd;
        widen(&kv.k[off..off + hd], &mut row, nv);
        for h in 0..g {
            let qh = &q[h * hd..(h + 1) * hd];
            let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut i = 0;
            while i + 2 <= nv {
                // SAFETY: `qh` holds `8 * nv` floats.
                unsafe {
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qh.as_ptr().add(8 * i)), row[i], a0);
                    a1 = _mm256_fmadd_ps(
                        _mm256_loadu_ps(qh.as_ptr().add(8 * i + 8)),
                        row[i + 1],
                        a1,
                    );
                }
                i += 2;
            }
            if i < nv {
                // SAFETY: as above.
                a0 = _mm256_fmadd_ps(
                    unsafe { _mm256_loadu_ps(qh.as_ptr().add(8 * i)) },
                    row[i],
                    a0,
                );
            }
            scores[h * n_ctx + p] = hsum(_mm256_add_ps(a0, a1)) * scale;
        }
    }
    for h in 0..g {
        softmax(&mut scores[h * n_ctx..(h + 1) * n_ctx]);
    }
    out.fill(0.0);
    for p in 0..n_ctx {
        let off = kv.slot_offset(table, p) + kvh * hd;
        widen(&kv.v[off..off + hd], &mut row, nv);
        for h in 0..g {
            let w = _mm256_set1_ps(scores[h * n_ctx + p]);
            let oh = &mut out[h * hd..(h + 1) * hd];
            for (i, r) in row.iter().enumerate().take(nv) {
                // SAFETY: `oh` holds `8 * nv` floats.
                unsafe {
                    let o = oh.as_mut_ptr().add(8 * i);
                    _mm256_storeu_ps(o, _mm256_fmadd_ps(w, *r, _mm256_loadu_ps(o)));
                }
            }
        }
    }
}
