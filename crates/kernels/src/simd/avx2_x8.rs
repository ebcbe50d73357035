//! AVX2 kernels over the eight-row interleaved Q4_0 layout of
//! [`crate::quant::repack`]: each block column of a group yields the integer
//! sums of eight rows in the eight lanes of one register, so the float
//! work (convert, scale, accumulate) is done once per eight rows instead of
//! once per row, and the `maddubs` results of a whole block are summed in
//! 16 bits before the one widening `madd` (16 products of 4-bit by 8-bit
//! values stay below 2^15).
//!
//! Handed out by [`crate::cpu::Kernels::for_isa`] only after AVX2, FMA and
//! F16C were detected: the safety condition of every function below.

#![allow(unsafe_code)]

use crate::cpu::{Q8Row, X8_N};
use crate::quant::repack::X8_UNIT;
use std::arch::x86_64::*;

macro_rules! x8 {
    ($name:ident, $impl_name:ident, $rn:expr) => {
        /// One eight-row group times activation rows (see the module docs).
        pub fn $name(group: &[u8], x: [Q8Row<'_>; $rn]) -> [[f32; 8]; $rn] {
            let nb = x.iter().fold(group.len() / X8_UNIT, |m, r| {
                m.min(r.q.len() / 34).min(r.d.len()).min(r.ds.len())
            });
            // SAFETY: features detected by the kernel table; every slice holds `nb` whole blocks.
            unsafe { $impl_name(&group[..nb * X8_UNIT], x, nb) }
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $impl_name(group: &[u8], x: [Q8Row<'_>; $rn], nb: usize) -> [[f32; 8]; $rn] {
            let m4 = _mm256_set1_epi8(0x0f);
            let ones = _mm256_set1_epi16(1);
            let mut acc = [_mm256_setzero_ps(); $rn];
            for b in 0..nb {
                // SAFETY: unit `b < nb` lies inside `group` (checked by the caller).
                let u = unsafe { group.as_ptr().add(b * X8_UNIT) };
                // SAFETY: a unit starts with 8 f16 scales (16 bytes), then 128 quant bytes.
                let dw = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(u as *const __m128i) });
                let mut lo = [_mm256_setzero_si256(); 4];
                let mut hi = [_mm256_setzero_si256(); 4];
                for k in 0..4 {
                    // SAFETY: as above.
                    let v = unsafe { _mm256_loadu_si256(u.add(16 + 32 * k) as *const __m256i) };
                    lo[k] = _mm256_and_si256(v, m4);
                    hi[k] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                }
                for j in 0..$rn {
                    // SAFETY: block `b < nb` of each activation row exists.
                    let q = unsafe { x[j].q.as_ptr().add(34 * b + 2) };
                    let mut s16 = _mm256_setzero_si256();
                    for k in 0..4 {
                        // SAFETY: the block's 32 quant bytes start at `q`.
                        let (xl, xh) = unsafe {
                            (
                                _mm256_set1_epi32((q.add(4 * k) as *const i32).read_unaligned()),
                                _mm256_set1_epi32(
                                    (q.add(16 + 4 * k) as *const i32).read_unaligned(),
                                ),
                            )
                        };
                        let p = _mm256_add_epi16(
                            _mm256_maddubs_epi16(lo[k], xl),
                            _mm256_maddubs_epi16(hi[k], xh),
                        );
                        s16 = _mm256_add_epi16(s16, p);
                    }
                    let f = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, ones));
                    // SAFETY: `b < nb <= d.len(), ds.len()`.
                    let (dx, ds) = unsafe { (*x[j].d.get_unchecked(b), *x[j].ds.get_unchecked(b)) };
                    let v = _mm256_fmadd_ps(_mm256_set1_ps(dx), f, _mm256_set1_ps(8.0 * ds));
                    acc[j] = _mm256_fmadd_ps(dw, v, acc[j]);
                }
            }
            let mut out = [[0f32; 8]; $rn];
            for j in 0..$rn {
                // SAFETY: `out[j]` holds 8 floats.
                unsafe { _mm256_storeu_ps(out[j].as_mut_ptr(), acc[j]) };
            }
            out
        }
    };
}

x8!(gemv_q4_0x8, gemv_q4_0x8_impl, 1);
x8!(gemm_q4_0x8, gemm_q4_0x8_impl, X8_N);
