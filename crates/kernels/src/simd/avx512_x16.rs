//! AVX-512 VNNI products of two adjacent eight-row groups at once, on
//! 512-bit registers: lanes 0..8 are the first group's rows, lanes 8..16
//! the second's. An activation block's four bytes are broadcast once for
//! sixteen weight rows instead of eight, and each `vpdpbusd` does sixteen
//! rows' four products, so the instructions per product halve against the
//! 256-bit kernels of [`super::avx512_x8`]; the weights of the two groups
//! are joined once per block and serve all [`X8_N`] activation rows. Used
//! for prefill and batched decode (the x8 kernels keep one activation row
//! and lone groups).
//!
//! Handed out by [`crate::cpu::Kernels::for_isa`] only after AVX2, FMA,
//! F16C, AVX-512 F/BW/VL and VNNI were detected: the safety condition of
//! every function below.

#![allow(unsafe_code)]

use super::avx2_x8::{Q4_1_UNIT, Q4_UNIT, Q5_1_UNIT, Q5_UNIT, Q8_UNIT};
use crate::rows::{Q8Row, X4_N, X8_N};
use std::arch::x86_64::*;

/// 32 bytes at `a + off` in lanes 0..8 and at `b + off` in lanes 8..16.
///
/// # Safety
/// Both `a + off` and `b + off` must have 32 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn join(a: *const u8, b: *const u8, off: usize) -> __m512i {
    // SAFETY: the caller's contract.
    unsafe {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_loadu_si256(a.add(off) as *const __m256i)),
            _mm256_loadu_si256(b.add(off) as *const __m256i),
        )
    }
}

/// Eight f16 values at `a + off` and eight at `b + off`, widened.
///
/// # Safety
/// Both `a + off` and `b + off` must have 16 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn join_f16(a: *const u8, b: *const u8, off: usize) -> __m512 {
    // SAFETY: the caller's contract.
    let h = unsafe {
        _mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_loadu_si128(a.add(off) as *const __m128i)),
            _mm_loadu_si128(b.add(off) as *const __m128i),
        )
    };
    _mm512_cvtph_ps(h)
}

/// The sixteen-row accumulators of `N` activation rows as arrays.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn rows16<const N: usize>(acc: [__m512; N]) -> [[f32; 16]; N] {
    let mut out = [[0f32; 16]; N];
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: `o` holds 16 floats.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
    out
}

/// Four quant bytes at `q` broadcast to the sixteen row slots.
///
/// # Safety
/// `q` must have 4 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn bcast4(q: *const u8) -> __m512i {
    // SAFETY: the caller's contract.
    _mm512_set1_epi32(unsafe { (q as *const i32).read_unaligned() })
}

/// Q4_0 (`OFF` 16) and Q4_1 (`OFF` 32): both groups' nibbles, low halves
/// (elements 0..16) in `w[0..4]`, high halves in `w[4..8]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn prep_q4<const OFF: usize>(a: *const u8, b: *const u8) -> [__m512i; 8] {
    let m4 = _mm512_set1_epi8(0x0f);
    let mut w = [_mm512_setzero_si512(); 8];
    for k in 0..4 {
        // SAFETY: each unit holds 128 quant bytes from `OFF`.
        let v = unsafe { join(a, b, OFF + 32 * k) };
        w[k] = _mm512_and_si512(v, m4);
        w[4 + k] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
    }
    w
}

/// Q5_0 (`OFF` 16) and Q5_1 (`OFF` 32): nibbles plus fifth bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn prep_q5<const OFF: usize>(a: *const u8, b: *const u8) -> [__m512i; 8] {
    let (m4, m1) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x01));
    // SAFETY: each unit holds 32 bit bytes at `OFF` and 128 quant bytes after them.
    let bits = unsafe { join(a, b, OFF) };
    let mut w = [_mm512_setzero_si512(); 8];
    for k in 0..4 {
        // SAFETY: as above.
        let v = unsafe { join(a, b, OFF + 32 + 32 * k) };
        let lo = _mm512_and_si512(_mm512_srl_epi16(bits, _mm_cvtsi32_si128(2 * k as i32)), m1);
        let hi = _mm512_and_si512(
            _mm512_srl_epi16(bits, _mm_cvtsi32_si128(2 * k as i32 + 1)),
            m1,
        );
        w[k] = _mm512_or_si512(_mm512_and_si512(v, m4), _mm512_slli_epi16::<4>(lo));
        w[4 + k] = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4),
            _mm512_slli_epi16::<4>(hi),
        );
    }
    w
}

/// The 32-element types: the sixteen rows' integer sums of unsigned values
/// `w` with one activation block's quants at `q`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn sums_u(w: &[__m512i; 8], q: *const u8) -> __m512i {
    let (mut lo, mut hi) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    for k in 0..4 {
        // SAFETY: `q` points at the block's 32 quant bytes.
        let (xl, xh) = unsafe { (bcast4(q.add(4 * k)), bcast4(q.add(16 + 4 * k))) };
        lo = _mm512_dpbusd_epi32(lo, w[k], xl);
        hi = _mm512_dpbusd_epi32(hi, w[4 + k], xh);
    }
    _mm512_add_epi32(lo, hi)
}

/// Q8_0: both groups' weights made unsigned (`w ^ 0x80 = w + 128`); the
/// kernel table's offset 128 for Q8_0 makes the activation terms take
/// `128 * sum(x)` back off.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn prep_q8(a: *const u8, b: *const u8) -> [__m512i; 8] {
    let bias = _mm512_set1_epi8(-128);
    let mut w = [_mm512_setzero_si512(); 8];
    for (k, wk) in w.iter_mut().enumerate() {
        // SAFETY: each Q8_0 unit holds 256 quant bytes after its 16 scale bytes.
        *wk = _mm512_xor_si512(unsafe { join(a, b, 16 + 32 * k) }, bias);
    }
    w
}

/// Q8_0: the sixteen rows' sums of the unsigned weights with one block's quants.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn sums_q8(w: &[__m512i; 8], q: *const u8) -> __m512i {
    let (mut s0, mut s1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    for k in 0..4 {
        // SAFETY: `q` points at the block's 32 quant bytes.
        let (x0, x1) = unsafe { (bcast4(q.add(8 * k)), bcast4(q.add(8 * k + 4))) };
        s0 = _mm512_dpbusd_epi32(s0, w[2 * k], x0);
        s1 = _mm512_dpbusd_epi32(s1, w[2 * k + 1], x1);
    }
    _mm512_add_epi32(s0, s1)
}

/// Generates a sixteen-row kernel of a 32-element layout; `$mins` says
/// whether the unit holds the rows' minimums after the scales (Q4_1, Q5_1).
macro_rules! x16 {
    ($name:ident, $impl_name:ident, $name4:ident, $impl4:ident, $unit:expr, $prep:expr, $sums:ident, $mins:literal) => {
        x16!(@ $name, $impl_name, X8_N, $unit, $prep, $sums, $mins, [0 1 2 3 4 5 6 7]);
        x16!(@ $name4, $impl4, X4_N, $unit, $prep, $sums, $mins, [0 1 2 3]);
    };
    (@ $name:ident, $impl_name:ident, $rn:expr, $unit:expr, $prep:expr, $sums:ident, $mins:literal, [$($j:literal)+]) => {
        /// Two adjacent eight-row groups times `$rn` activation rows (see
        /// the module docs): row `r` of the result is `8 * g + r`.
        pub fn $name(groups: [&[u8]; 2], x: &[Q8Row<'_>; $rn]) -> [[f32; 16]; $rn] {
            let nb = x.iter().fold(
                (groups[0].len() / $unit).min(groups[1].len() / $unit),
                |m, r| m.min(r.q.len() / 34).min(r.d.len()).min(r.ds.len()),
            );
            // SAFETY: features detected by the kernel table; every slice holds `nb` whole blocks.
            unsafe { $impl_name(groups[0].as_ptr(), groups[1].as_ptr(), x, nb) }
        }

        /// # Safety
        /// Call only once the CPU's support for the features named in
        /// `target_feature` is known, with `a`, `b` and every activation
        /// row covering `nb` whole blocks.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $impl_name(
            a: *const u8,
            b: *const u8,
            x: &[Q8Row<'_>; $rn],
            nb: usize,
        ) -> [[f32; 16]; $rn] {
            const { assert!([$($j),+].len() == $rn) };
            super::align_frame!();
            let mut acc = [_mm512_setzero_ps(); $rn];
            super::prefetch_start(b, nb * $unit);
            for blk in 0..nb {
                // SAFETY: unit `blk < nb` of both groups.
                let (ua, ub) = unsafe { (a.add(blk * $unit), b.add(blk * $unit)) };
                // The weights are read once per step: fetch ahead of them
                // (the hardware prefetcher does not cross the two groups).
                super::prefetch_ahead(ua, $unit);
                super::prefetch_ahead(ub, $unit);
                super::prefetch_far(ua, $unit, super::far_distance($unit, 256));
                super::prefetch_far(ub, $unit, super::far_distance($unit, 256));
                // SAFETY: a unit starts with its 8 rows' f16 scales (and minimums).
                let dw = unsafe { join_f16(ua, ub, 0) };
                let mw = if $mins {
                    // SAFETY: units of the types with minimums hold them at 16.
                    unsafe { join_f16(ua, ub, 16) }
                } else {
                    _mm512_setzero_ps()
                };
                let w = $prep(ua, ub);
                // The activation rows written out (not a loop), so that every
                // accumulator stays in a register.
                $(
                    // SAFETY: block `blk < nb` of each activation row exists
                    // (34 bytes of `q` after the row start, one `d` and `ds`).
                    let (qj, dx, dsj) = unsafe {
                        (
                            x[$j].q.as_ptr().add(34 * blk + 2),
                            *x[$j].d.get_unchecked(blk),
                            *x[$j].ds.get_unchecked(blk),
                        )
                    };
                    let f = _mm512_cvtepi32_ps($sums(&w, qj));
                    if $mins {
                        let v = _mm512_mul_ps(_mm512_set1_ps(dx), f);
                        acc[$j] = _mm512_fmadd_ps(dw, v, acc[$j]);
                        acc[$j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(8.0 * dsj), acc[$j]);
                    } else {
                        let v = _mm512_fmadd_ps(_mm512_set1_ps(dx), f, _mm512_set1_ps(8.0 * dsj));
                        acc[$j] = _mm512_fmadd_ps(dw, v, acc[$j]);
                    }
                )+
            }
            rows16(acc)
        }
    };
}

pub(super) use x16;

x16!(
    gemm_q4_0x16,
    gemm_q4_0x16_impl,
    gemm_q4_0x16_4,
    gemm_q4_0x16_4_impl,
    Q4_UNIT,
    prep_q4::<16>,
    sums_u,
    false
);
x16!(
    gemm_q4_1x16,
    gemm_q4_1x16_impl,
    gemm_q4_1x16_4,
    gemm_q4_1x16_4_impl,
    Q4_1_UNIT,
    prep_q4::<32>,
    sums_u,
    true
);
x16!(
    gemm_q5_0x16,
    gemm_q5_0x16_impl,
    gemm_q5_0x16_4,
    gemm_q5_0x16_4_impl,
    Q5_UNIT,
    prep_q5::<16>,
    sums_u,
    false
);
x16!(
    gemm_q5_1x16,
    gemm_q5_1x16_impl,
    gemm_q5_1x16_4,
    gemm_q5_1x16_4_impl,
    Q5_1_UNIT,
    prep_q5::<32>,
    sums_u,
    true
);
x16!(
    gemm_q8_0x16,
    gemm_q8_0x16_impl,
    gemm_q8_0x16_4,
    gemm_q8_0x16_4_impl,
    Q8_UNIT,
    prep_q8,
    sums_q8,
    false
);
