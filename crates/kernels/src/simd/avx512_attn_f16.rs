//! The AVX-512 tile's weighted sum of an f16 V cache (the default cache
//! type): each V row is widened straight from the pool with `vcvtph2ps`
//! into 512-bit registers and added, times each query row's softmax
//! weight (a broadcast from memory), into accumulators of up to eight
//! query rows by 32 dimensions. The AVX2 tile's sum widened each block of
//! rows into a buffer first and summed eight dimensions per FMA.
//!
//! Positions go in chunks of [`CHUNK`], whose rows stay in L1 while every
//! 32-dimension slice of every query row is summed over them; the next
//! chunk's rows are prefetched meanwhile.
//!
//! Reached only through the AVX-512 tier's attention tile, which the kernel
//! table hands out after AVX-512 F/BW/VL were detected: the safety
//! condition of [`weighted_v_f16`].

#![allow(unsafe_code)]

use crate::rows::{HeadView, KvRows};
use half::f16;
use std::arch::x86_64::*;

/// Positions per chunk (64 rows of a 64-value head: 8 KiB).
const CHUNK: usize = 64;
/// Query rows summed together (two accumulators each).
const GROUP: usize = 8;

/// The part of the AVX-512 tile after its scores: over an f16 V cache
/// whose heads are multiples of 32, the 512-bit softmax and
/// [`weighted_v_f16`] ([`super::avx512_attn::softmax_and_sum`]); the AVX2
/// tile's softmax and V sum otherwise.
///
/// # Safety
/// AVX-512 F/BW/VL are available; the shapes `checked` in
/// [`super::avx2_attn`] checks hold.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn finish_tile(
    view: &HeadView<'_>,
    t: usize,
    g: usize,
    n_ctx: usize,
    start: usize,
    scores: &mut [f32],
    out: &mut [f32],
    lse: Option<&mut [f32]>,
) {
    let hd = view.kv.head_dim;
    // SAFETY (both arms): the caller's contract.
    match view.kv.v {
        KvRows::F16(v) if hd.is_multiple_of(32) => unsafe {
            let n_last = view.visible_end(n_ctx + t - 1);
            let w = n_last.next_multiple_of(8);
            let sum = |s: &mut [f32], o: &mut [f32]| {
                weighted_v_f16(view, v, s, t * g, start, n_last, w, o)
            };
            super::avx512_attn::softmax_and_sum(
                view, t, g, n_ctx, start, None, scores, lse, out, sum,
            );
        },
        // SAFETY: as above; the AVX2 tile's finish needs less than this tier has.
        _ => unsafe { super::avx2_attn::finish_tile(view, t, g, n_ctx, start, scores, out, lse) },
    }
}

/// `out[r] = sum_p probs[r * w + p] * V[p]` for the `rows` query rows over
/// the f16 V rows `v` of `view`'s head at positions `start..n_last`
/// (`out` is `rows * hd`, overwritten).
///
/// # Safety
/// AVX-512 F is available; `hd` is a multiple of 32; `probs` holds
/// `rows * w` values with `w >= n_last`, `out` `rows * hd`, and `n_last`
/// is at most the positions the view's block table covers.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn weighted_v_f16(
    view: &HeadView<'_>,
    v: &[f16],
    probs: &[f32],
    rows: usize,
    start: usize,
    n_last: usize,
    w: usize,
    out: &mut [f32],
) {
    let hd = view.kv.head_dim;
    let out = &mut out[..rows * hd];
    out.fill(0.0);
    let probs = &probs[..rows * w];
    let mut next = chunk_rows(view, v, start, n_last);
    for p0 in (start..n_last).step_by(CHUNK) {
        let (ptr, n) = next;
        next = chunk_rows(view, v, p0 + CHUNK, n_last);
        for &p in &next.0[..next.1] {
            for line in (0..2 * hd).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>((p as *const i8).wrapping_add(line));
            }
        }
        let mut r0 = 0;
        while r0 < rows {
            // SAFETY: `ptr[..n]` start rows of `hd` halfs; rows `r0..` of
            // `probs` hold the positions `p0..p0 + n` (`p0 + n <= n_last <= w`).
            unsafe {
                r0 += match rows - r0 {
                    1 => group::<1>(&ptr[..n], hd, probs, w, p0, r0, out),
                    2 => group::<2>(&ptr[..n], hd, probs, w, p0, r0, out),
                    3 => group::<3>(&ptr[..n], hd, probs, w, p0, r0, out),
                    4 => group::<4>(&ptr[..n], hd, probs, w, p0, r0, out),
                    5 => group::<5>(&ptr[..n], hd, probs, w, p0, r0, out),
                    6 => group::<6>(&ptr[..n], hd, probs, w, p0, r0, out),
                    7 => group::<7>(&ptr[..n], hd, probs, w, p0, r0, out),
                    _ => group::<GROUP>(&ptr[..n], hd, probs, w, p0, r0, out),
                };
            }
        }
    }
}

/// The rows of the (at most [`CHUNK`]) positions from `p0` below `n_last`
/// of `view`'s head in `v`, as pointers into bounds-checked slices, and
/// how many there are.
#[inline(always)]
fn chunk_rows(
    view: &HeadView<'_>,
    v: &[f16],
    p0: usize,
    n_last: usize,
) -> ([*const f16; CHUNK], usize) {
    let (hd, bs) = (view.kv.head_dim, view.kv.block_size);
    let base = view.kvh * view.kv.n_blocks() * bs;
    let mut ptr = [std::ptr::null(); CHUNK];
    let n = n_last.saturating_sub(p0).min(CHUNK);
    let mut j = 0;
    while j < n {
        // A run of positions in one cache block: consecutive rows.
        let p = p0 + j;
        let run = (bs - p % bs).min(n - j);
        let first = base + view.table[p / bs] as usize * bs + p % bs;
        let rows = v[first * hd..(first + run) * hd].as_ptr();
        for (k, o) in ptr[j..j + run].iter_mut().enumerate() {
            *o = rows.wrapping_add(k * hd);
        }
        j += run;
    }
    (ptr, n)
}

/// Adds the weighted rows `ptr` (positions `p0..`) to query rows
/// `r0..r0 + R` of `out`, 32 dimensions at a time; returns `R`.
///
/// # Safety
/// AVX-512 F is available; each `ptr[j]` starts a row of `hd` halfs
/// (`hd` a multiple of 32); rows `r0..r0 + R` of `probs` (stride `w`)
/// hold positions `p0..p0 + ptr.len()`, and those of `out` `hd` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn group<const R: usize>(
    ptr: &[*const f16],
    hd: usize,
    probs: &[f32],
    w: usize,
    p0: usize,
    r0: usize,
    out: &mut [f32],
) -> usize {
    let pr = probs.as_ptr();
    for c in (0..hd).step_by(32) {
        let o = out[r0 * hd + c..].as_mut_ptr();
        // SAFETY: the caller's contract covers every access below.
        unsafe {
            let mut acc: [[__m512; 2]; R] = std::array::from_fn(|i| {
                let o = o.add(i * hd);
                [_mm512_loadu_ps(o), _mm512_loadu_ps(o.add(16))]
            });
            for (j, &p) in ptr.iter().enumerate() {
                let src = p.add(c) as *const __m256i;
                let v0 = _mm512_cvtph_ps(_mm256_loadu_si256(src));
                let v1 = _mm512_cvtph_ps(_mm256_loadu_si256(src.add(1)));
                for (i, a) in acc.iter_mut().enumerate() {
                    let wt = _mm512_set1_ps(*pr.add((r0 + i) * w + p0 + j));
                    a[0] = _mm512_fmadd_ps(wt, v0, a[0]);
                    a[1] = _mm512_fmadd_ps(wt, v1, a[1]);
                }
            }
            for (i, a) in acc.iter().enumerate() {
                let o = o.add(i * hd);
                _mm512_storeu_ps(o, a[0]);
                _mm512_storeu_ps(o.add(16), a[1]);
            }
        }
    }
    R
}

#[cfg(test)]
mod tests {
    use crate::rows::{HeadView, KvRows, PagedKv};
    use half::f16;

    #[test]
    fn weighted_v_equals_the_float_sum() {
        if !crate::cpu::tiers().contains(&crate::cpu::Isa::Avx512) {
            return;
        }
        // (page slots, KV heads, head dim, positions, start, query rows):
        // chunks that end mid-page, pages of 8 and 16, 1 to 11 rows.
        for (bs, nkv, hd, n_last, start, rows) in [
            (16usize, 1, 64, 1usize, 0, 8),
            (16, 4, 64, 150, 0, 8),
            (8, 2, 32, 77, 8, 3),
            (8, 3, 96, 100, 16, 11),
            (16, 2, 128, 65, 0, 5),
            (16, 1, 256, 33, 8, 1),
        ] {
            let blocks = n_last.div_ceil(bs) + 1;
            let vals: Vec<f16> = (0..blocks * bs * nkv * hd)
                .map(|i| f16::from_f32(((i * 37 % 101) as f32 * 0.3).sin()))
                .collect();
            let table: Vec<u32> = (0..blocks as u32).rev().collect();
            let view = HeadView {
                kv: PagedKv {
                    k: KvRows::F16(&vals),
                    v: KvRows::F16(&vals),
                    block_size: bs,
                    n_kv_heads: nkv,
                    head_dim: hd,
                },
                table: &table,
                kvh: nkv - 1,
                scale: 0.125,
                window: None,
                softcap: None,
                from: 0,
                until: usize::MAX,
            };
            let w = n_last.next_multiple_of(8);
            let probs: Vec<f32> = (0..rows * w)
                .map(|i| {
                    let p = i % w;
                    if p < start || p >= n_last {
                        0.0
                    } else {
                        ((i * 13 % 29) as f32 + 1.0) * 1e-2
                    }
                })
                .collect();
            let mut want = vec![0.0f32; rows * hd];
            for r in 0..rows {
                for p in start..n_last {
                    let i = view.kv.row_index(view.table, p, view.kvh);
                    for d in 0..hd {
                        want[r * hd + d] += probs[r * w + p] * vals[i * hd + d].to_f32();
                    }
                }
            }
            let mut got = vec![f32::NAN; rows * hd];
            // SAFETY: AVX-512 detected; shapes as the kernel requires.
            unsafe {
                super::weighted_v_f16(&view, &vals, &probs, rows, start, n_last, w, &mut got)
            };
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "hd={hd} n={n_last} rows={rows} value {i}: {a} vs {b}"
                );
            }
        }
    }
}
