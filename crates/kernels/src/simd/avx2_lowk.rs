//! AVX2 one-row dots of the 2- and 3-bit k-quants (Q2_K, Q3_K) with Q8_K
//! activations (the AVX-512 tier uses them too). Each 32-byte load of
//! `qs` holds four shifts of 32 two-bit values; one shift is two 16-element
//! sub-blocks, whose products `maddubs` sums to i16 lanes 0-7 and 8-15,
//! then `madd` weights by the two sub-blocks' scales. Q3_K's third bit
//! comes from `hmask`; its `- 4` offset and Q2_K's minimums are applied
//! through the activation block sums.
//!
//! Handed out by [`crate::cpu::Kernels::for_isa`] only after AVX2, FMA and
//! F16C were detected: the safety condition of the functions below.

#![allow(unsafe_code)]

use crate::quant::dot::{q8k_parts, Q8_K_BYTES as Q8K};
use crate::quant::lowk::{q3_scales, Q2_K_BYTES, Q3_K_BYTES};
use crate::quant::read_f16;
use std::arch::x86_64::*;

/// Q2_K · Q8_K (see [`crate::quant::dot::dot_q2_k_q8_k`]).
pub fn dot_q2_k_q8_k(w: &[u8], x: &[u8]) -> f32 {
    let n = (w.len() / Q2_K_BYTES).min(x.len() / Q8K);
    // SAFETY: features detected by the kernel table; `n` whole blocks.
    unsafe { dot_q2_k_impl(&w[..n * Q2_K_BYTES], &x[..n * Q8K]) }
}

/// Q3_K · Q8_K (see [`crate::quant::dot::dot_q3_k_q8_k`]).
pub fn dot_q3_k_q8_k(w: &[u8], x: &[u8]) -> f32 {
    let n = (w.len() / Q3_K_BYTES).min(x.len() / Q8K);
    // SAFETY: features detected by the kernel table; `n` whole blocks.
    unsafe { dot_q3_k_impl(&w[..n * Q3_K_BYTES], &x[..n * Q8K]) }
}

/// Sum of the eight f32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// Lanes 0-7 `a`, lanes 8-15 `b` (the scales of two sub-blocks).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair(a: i16, b: i16) -> __m256i {
    _mm256_setr_epi16(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b)
}

/// # Safety
/// AVX2, FMA and F16C are available; `w` and `x` hold the same number of
/// whole Q2_K and Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q2_k_impl(w: &[u8], x: &[u8]) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = 0.0f32;
    for (bw, bx) in w.chunks_exact(Q2_K_BYTES).zip(x.chunks_exact(Q8K)) {
        let (dx, q8, bsums) = q8k_parts(bx);
        let scales = &bw[..16];
        let mins: i32 = (0..16).map(|j| (scales[j] >> 4) as i32 * bsums[j]).sum();
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            // SAFETY: 32 of the block's 64 `qs` bytes.
            let q = unsafe { _mm256_loadu_si256(bw.as_ptr().add(16 + 32 * h) as *const __m256i) };
            for s in 0..4 {
                let v = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * s as i32)), m3);
                // SAFETY: 32 activation quants of elements 128h + 32s ...
                let xv = unsafe {
                    _mm256_loadu_si256(q8.as_ptr().add(128 * h + 32 * s) as *const __m256i)
                };
                let g = 8 * h + 2 * s;
                let sc = pair((scales[g] & 0xf) as i16, (scales[g + 1] & 0xf) as i16);
                let prod = _mm256_maddubs_epi16(v, xv);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, sc));
            }
        }
        let d = read_f16(&bw[80..82]) * dx;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc_min += read_f16(&bw[82..84]) * dx * mins as f32;
    }
    hsum(acc) - acc_min
}

/// # Safety
/// AVX2, FMA and F16C are available; `w` and `x` hold the same number of
/// whole Q3_K and Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q3_k_impl(w: &[u8], x: &[u8]) -> f32 {
    let (m3, one) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
    let mut acc = _mm256_setzero_ps();
    for (bw, bx) in w.chunks_exact(Q3_K_BYTES).zip(x.chunks_exact(Q8K)) {
        let (dx, q8, bsums) = q8k_parts(bx);
        let sc = q3_scales(&bw[96..108]);
        // sum((q3u - 4) * q8) = sum(q3u * q8) - 4 * sum(q8).
        let offset: i32 = (0..16).map(|j| sc[j] as i32 * 4 * bsums[j]).sum();
        // SAFETY: the block's 32 `hmask` bytes.
        let hm = unsafe { _mm256_loadu_si256(bw.as_ptr() as *const __m256i) };
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            // SAFETY: 32 of the block's 64 `qs` bytes.
            let q = unsafe { _mm256_loadu_si256(bw.as_ptr().add(32 + 32 * h) as *const __m256i) };
            for s in 0..4 {
                let low =
                    _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * s as i32)), m3);
                let bit = _mm256_and_si256(
                    _mm256_srl_epi16(hm, _mm_cvtsi32_si128((4 * h + s) as i32)),
                    one,
                );
                let v = _mm256_or_si256(low, _mm256_slli_epi16(bit, 2));
                // SAFETY: 32 activation quants of elements 128h + 32s ...
                let xv = unsafe {
                    _mm256_loadu_si256(q8.as_ptr().add(128 * h + 32 * s) as *const __m256i)
                };
                let g = 8 * h + 2 * s;
                let prod = _mm256_maddubs_epi16(v, xv);
                sumi = _mm256_add_epi32(
                    sumi,
                    _mm256_madd_epi16(prod, pair(sc[g] as i16, sc[g + 1] as i16)),
                );
            }
        }
        let d = read_f16(&bw[108..110]) * dx;
        let total = _mm256_sub_epi32(sumi, _mm256_setr_epi32(offset, 0, 0, 0, 0, 0, 0, 0));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(total), acc);
    }
    hsum(acc)
}
