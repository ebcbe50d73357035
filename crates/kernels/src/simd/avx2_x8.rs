//! AVX2 kernels over the eight-row interleaved layouts of
//! [`crate::quant::repack`]: each block column of a group yields the integer
//! sums of eight rows in the eight lanes of one register, so the float
//! work (convert, scale, accumulate) is done once per eight rows instead of
//! once per row. For Q4_0 the `maddubs` results of a whole block are summed
//! in 16 bits before the one widening `madd` (16 products of 4-bit by 8-bit
//! values stay below 2^15); Q8_0 widens every chunk.
//!
//! Handed out by [`crate::cpu::Kernels::for_isa`] only after AVX2, FMA and
//! F16C were detected: the safety condition of every function below.

#![allow(unsafe_code)]

use crate::rows::{Q8Row, X8_N};
use std::arch::x86_64::*;

pub(super) const Q4_UNIT: usize = 16 + 8 * 16;
pub(super) const Q8_UNIT: usize = 16 + 8 * 32;

/// Q4_0 (`OFF` 16) and Q4_1 (`OFF` 32, after the minimums): the unit's
/// nibbles split into low (elements 0..16) and high halves, once per block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prep_q4_at<const OFF: usize>(u: *const u8) -> [__m256i; 8] {
    let m4 = _mm256_set1_epi8(0x0f);
    let mut w = [_mm256_setzero_si256(); 8];
    for k in 0..4 {
        // SAFETY: the unit holds 128 quant bytes from `OFF`.
        let v = unsafe { _mm256_loadu_si256(u.add(OFF + 32 * k) as *const __m256i) };
        w[k] = _mm256_and_si256(v, m4);
        w[4 + k] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    w
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prep_q4(u: *const u8) -> [__m256i; 8] {
    prep_q4_at::<16>(u)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prep_q4_1(u: *const u8) -> [__m256i; 8] {
    prep_q4_at::<32>(u)
}

/// Four quant bytes at `q` broadcast to the eight row slots.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn bcast4(q: *const u8) -> __m256i {
    // SAFETY: callers pass a pointer to 4 readable bytes of an activation block.
    _mm256_set1_epi32(unsafe { (q as *const i32).read_unaligned() })
}

/// Q4_0: the eight rows' integer sums for one activation block's quants `q`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sums_q4(w: &[__m256i; 8], _u: *const u8, q: *const u8) -> __m256i {
    let mut s16 = _mm256_setzero_si256();
    for k in 0..4 {
        // SAFETY: `q` points at the block's 32 quant bytes.
        let (xl, xh) = unsafe { (bcast4(q.add(4 * k)), bcast4(q.add(16 + 4 * k))) };
        let p = _mm256_add_epi16(
            _mm256_maddubs_epi16(w[k], xl),
            _mm256_maddubs_epi16(w[4 + k], xh),
        );
        s16 = _mm256_add_epi16(s16, p);
    }
    _mm256_madd_epi16(s16, _mm256_set1_epi16(1))
}

pub(super) const Q5_UNIT: usize = crate::quant::repack::Q5_0_UNIT;

/// Q5_0 (`OFF` 16) and Q5_1 (`OFF` 32): nibbles plus fifth bits as
/// unsigned 5-bit values, low and high halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prep_q5_at<const OFF: usize>(u: *const u8) -> [__m256i; 8] {
    let m4 = _mm256_set1_epi8(0x0f);
    let m1 = _mm256_set1_epi8(0x01);
    // SAFETY: the unit holds 32 bit bytes at `OFF` and 128 quant bytes after them.
    let bits = unsafe { _mm256_loadu_si256(u.add(OFF) as *const __m256i) };
    let mut w = [_mm256_setzero_si256(); 8];
    for k in 0..4 {
        // SAFETY: as above.
        let v = unsafe { _mm256_loadu_si256(u.add(OFF + 32 + 32 * k) as *const __m256i) };
        let shift = _mm_cvtsi32_si128(2 * k as i32);
        let lo_bit = _mm256_and_si256(_mm256_srl_epi16(bits, shift), m1);
        let hi_bit = _mm256_and_si256(
            _mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * k as i32 + 1)),
            m1,
        );
        w[k] = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_slli_epi16(lo_bit, 4));
        w[4 + k] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
            _mm256_slli_epi16(hi_bit, 4),
        );
    }
    w
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prep_q5(u: *const u8) -> [__m256i; 8] {
    prep_q5_at::<16>(u)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prep_q5_1(u: *const u8) -> [__m256i; 8] {
    prep_q5_at::<32>(u)
}

/// Q5_0: the eight rows' integer sums. 5-bit by 8-bit products allow only
/// four `maddubs` per 16-bit sum, so each half widens separately.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sums_q5(w: &[__m256i; 8], _u: *const u8, q: *const u8) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    let (mut lo16, mut hi16) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for k in 0..4 {
        // SAFETY: `q` points at the block's 32 quant bytes.
        let (xl, xh) = unsafe { (bcast4(q.add(4 * k)), bcast4(q.add(16 + 4 * k))) };
        lo16 = _mm256_add_epi16(lo16, _mm256_maddubs_epi16(w[k], xl));
        hi16 = _mm256_add_epi16(hi16, _mm256_maddubs_epi16(w[4 + k], xh));
    }
    _mm256_add_epi32(_mm256_madd_epi16(lo16, ones), _mm256_madd_epi16(hi16, ones))
}

/// Q8_0 needs nothing prepared: the signed bytes are read per token.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prep_q8(_u: *const u8) {}

/// Q8_0: the eight rows' integer sums (sign trick: |w| times x with w's signs).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sums_q8(_w: &(), u: *const u8, q: *const u8) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    let mut s32 = _mm256_setzero_si256();
    for k in 0..8 {
        // SAFETY: a Q8_0 unit holds 256 quant bytes after its scales; `q` 32 bytes.
        let (w, x) = unsafe {
            (
                _mm256_loadu_si256(u.add(16 + 32 * k) as *const __m256i),
                bcast4(q.add(4 * k)),
            )
        };
        let p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
        s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(p, ones));
    }
    s32
}

/// Generates the kernels of a 32-element x8 layout. `[$($j)+]` lists the
/// activation rows `0..$rn`: the loop over them is written out by the macro,
/// so every accumulator stays a named value and no loop counter is kept.
macro_rules! x8 {
    ($feat:literal, $name:ident, $impl_name:ident, $rn:expr, [$($j:literal)+], $unit:expr, $prep:ident, $sums:ident) => {
        x8!(@ $feat, false, $name, $impl_name, $rn, [$($j)+], $unit, $prep, $sums);
    };
    // Q4_1 / Q5_1: the unit's scales are followed by the rows' minimums `m`,
    // which multiply `8 ds = d_x * sum(q_x)` (see `crate::rows::zero_offset`).
    ($feat:literal, $name:ident, $impl_name:ident, $rn:expr, [$($j:literal)+], $unit:expr, $prep:ident, $sums:ident, mins) => {
        x8!(@ $feat, true, $name, $impl_name, $rn, [$($j)+], $unit, $prep, $sums);
    };
    (@ $feat:literal, $mins:literal, $name:ident, $impl_name:ident, $rn:expr, [$($j:literal)+], $unit:expr, $prep:ident, $sums:ident) => {
        /// One eight-row group times activation rows (see the module docs).
        pub fn $name(group: &[u8], x: [Q8Row<'_>; $rn]) -> [[f32; 8]; $rn] {
            const { assert!([$($j),+].len() == $rn) };
            let nb = x.iter().fold(group.len() / $unit, |m, r| {
                m.min(r.q.len() / 34).min(r.d.len()).min(r.ds.len())
            });
            // SAFETY: features detected by the kernel table; every slice holds `nb` whole blocks.
            unsafe { $impl_name(&group[..nb * $unit], x, nb) }
        }

        /// # Safety
        /// Call only once the CPU's support for the features named in
        /// `target_feature` is known (the kernel table hands out the safe
        /// wrapper only then), with every slice and pointer covering the
        /// whole blocks or elements the wrapper checked.
        #[target_feature(enable = $feat)]
        unsafe fn $impl_name(group: &[u8], x: [Q8Row<'_>; $rn], nb: usize) -> [[f32; 8]; $rn] {
            super::align_frame!();
            let mut acc = [_mm256_setzero_ps(); $rn];
            // Skip each row's first f16 scale: `q` then points at block 0's quants.
            let q = x.map(|r| r.q.as_ptr().wrapping_add(2));
            let d = x.map(|r| r.d.as_ptr());
            let ds = x.map(|r| r.ds.as_ptr());
            let mut u = group.as_ptr();
            for b in 0..nb {
                if $rn == 1 {
                    super::prefetch_ahead(u, $unit);
                } else {
                    // Batched rows consume weights slowly: fetch far ahead
                    // into L2 (see `prefetch_far`).
                    super::prefetch_far(u, $unit, super::far_distance($unit, 256));
                }
                // SAFETY: a unit starts with the 8 rows' f16 scales (16 bytes).
                let dw = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(u as *const __m128i) });
                let mw = if $mins {
                    // SAFETY: units of the types with minimums hold them at 16.
                    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(u.add(16) as *const __m128i) })
                } else {
                    _mm256_setzero_ps()
                };
                let w = $prep(u);
                $(
                    // SAFETY: block `b < nb` of each activation row exists
                    // (34 bytes of `q`, one value of `d` and `ds`).
                    let (qj, dx, dsj) = unsafe { (q[$j].add(34 * b), *d[$j].add(b), *ds[$j].add(b)) };
                    let f = _mm256_cvtepi32_ps($sums(&w, u, qj));
                    // `ds` is spread over 8 lanes for the one-row tiles: the whole term is 8 * ds.
                    if $mins {
                        let v = _mm256_mul_ps(_mm256_set1_ps(dx), f);
                        acc[$j] = _mm256_fmadd_ps(dw, v, acc[$j]);
                        acc[$j] = _mm256_fmadd_ps(mw, _mm256_set1_ps(8.0 * dsj), acc[$j]);
                    } else {
                        let v = _mm256_fmadd_ps(_mm256_set1_ps(dx), f, _mm256_set1_ps(8.0 * dsj));
                        acc[$j] = _mm256_fmadd_ps(dw, v, acc[$j]);
                    }
                )+
                // SAFETY: unit `b + 1` starts here; only dereferenced while `b + 1 < nb`.
                u = u.wrapping_add($unit);
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

pub(super) use x8;

x8!(
    "avx2,fma,f16c",
    gemv_q4_0x8,
    gemv_q4_0x8_impl,
    1,
    [0],
    Q4_UNIT,
    prep_q4,
    sums_q4
);
x8!(
    "avx2,fma,f16c",
    gemm_q4_0x8,
    gemm_q4_0x8_impl,
    X8_N,
    [0 1 2 3 4 5 6 7],
    Q4_UNIT,
    prep_q4,
    sums_q4
);
x8!(
    "avx2,fma,f16c",
    gemv_q8_0x8,
    gemv_q8_0x8_impl,
    1,
    [0],
    Q8_UNIT,
    prep_q8,
    sums_q8
);
x8!(
    "avx2,fma,f16c",
    gemv_q5_0x8,
    gemv_q5_0x8_impl,
    1,
    [0],
    Q5_UNIT,
    prep_q5,
    sums_q5
);
x8!(
    "avx2,fma,f16c",
    gemm_q5_0x8,
    gemm_q5_0x8_impl,
    X8_N,
    [0 1 2 3 4 5 6 7],
    Q5_UNIT,
    prep_q5,
    sums_q5
);
x8!(
    "avx2,fma,f16c",
    gemm_q8_0x8,
    gemm_q8_0x8_impl,
    X8_N,
    [0 1 2 3 4 5 6 7],
    Q8_UNIT,
    prep_q8,
    sums_q8
);

pub(super) const Q4_1_UNIT: usize = crate::quant::repack::Q4_1_UNIT;
pub(super) const Q5_1_UNIT: usize = crate::quant::repack::Q5_1_UNIT;

x8!(
    "avx2,fma,f16c",
    gemv_q4_1x8,
    gemv_q4_1x8_impl,
    1,
    [0],
    Q4_1_UNIT,
    prep_q4_1,
    sums_q4,
    mins
);
x8!(
    "avx2,fma,f16c",
    gemm_q4_1x8,
    gemm_q4_1x8_impl,
    X8_N,
    [0 1 2 3 4 5 6 7],
    Q4_1_UNIT,
    prep_q4_1,
    sums_q4,
    mins
);
x8!(
    "avx2,fma,f16c",
    gemv_q5_1x8,
    gemv_q5_1x8_impl,
    1,
    [0],
    Q5_1_UNIT,
    prep_q5_1,
    sums_q5,
    mins
);
x8!(
    "avx2,fma,f16c",
    gemm_q5_1x8,
    gemm_q5_1x8_impl,
    X8_N,
    [0 1 2 3 4 5 6 7],
    Q5_1_UNIT,
    prep_q5_1,
    sums_q5,
    mins
);

pub(super) const Q4K_UNIT: usize = crate::quant::repack::Q4K_UNIT;
pub(super) const Q8K: usize = crate::quant::dot::Q8_K_BYTES;

/// Q4_K: per block, the sub-block scales as `(s, s)` i16 pairs per row lane
/// (so `madd` applies them) and the minimums of sub-blocks `2p, 2p + 1` as
/// i16 pairs per row lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prep_q4k(u: *const u8) -> Q4kPrep {
    let mut sc = [_mm256_setzero_si256(); 8];
    let mut mins = [_mm256_setzero_si256(); 4];
    for j in 0..8 {
        // SAFETY: a Q4_K unit holds 8 scale bytes per sub-block at 32 + 8j.
        let v =
            _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(u.add(32 + 8 * j) as *const __m128i) });
        sc[j] = _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
    }
    for p in 0..4 {
        // SAFETY: 8 minimum bytes per sub-block at 96 + 8j.
        let (a, b) = unsafe {
            (
                _mm_loadl_epi64(u.add(96 + 16 * p) as *const __m128i),
                _mm_loadl_epi64(u.add(104 + 16 * p) as *const __m128i),
            )
        };
        mins[p] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b));
    }
    // SAFETY: d and dmin of the 8 rows open the unit (16 bytes each).
    let (d, dmin) = unsafe {
        (
            _mm256_cvtph_ps(_mm_loadu_si128(u as *const __m128i)),
            _mm256_cvtph_ps(_mm_loadu_si128(u.add(16) as *const __m128i)),
        )
    };
    Q4kPrep { sc, mins, d, dmin }
}

/// What [`prep_q4k`] decodes from a Q4_K unit.
pub(super) struct Q4kPrep {
    pub(super) sc: [__m256i; 8],
    pub(super) mins: [__m256i; 4],
    pub(super) d: __m256,
    pub(super) dmin: __m256,
}

/// Q4_K: the eight rows' `sum_j sc_j * sum(q * x)` and `sum_j m_j * sum(x)`
/// for one Q8_K activation block at `bx`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sums_q4k(
    sc: &[__m256i; 8],
    mins: &[__m256i; 4],
    u: *const u8,
    bx: *const u8,
) -> (__m256i, __m256i) {
    let m4 = _mm256_set1_epi8(0x0f);
    // SAFETY: a Q8_K block is d (4 bytes), 256 quants, 16 i16 block sums.
    let q8 = unsafe { bx.add(4) };
    let mut isum = _mm256_setzero_si256();
    for c in 0..4 {
        let (mut lo16, mut hi16) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for k in 0..8 {
            // SAFETY: 1024 quant bytes from byte 160 of the unit; 256 activation quants.
            let (v, xl, xh) = unsafe {
                (
                    _mm256_loadu_si256(u.add(160 + 256 * c + 32 * k) as *const __m256i),
                    bcast4(q8.add(64 * c + 4 * k)),
                    bcast4(q8.add(64 * c + 32 + 4 * k)),
                )
            };
            let l = _mm256_and_si256(v, m4);
            let h = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            lo16 = _mm256_add_epi16(lo16, _mm256_maddubs_epi16(l, xl));
            hi16 = _mm256_add_epi16(hi16, _mm256_maddubs_epi16(h, xh));
        }
        isum = _mm256_add_epi32(
            isum,
            _mm256_add_epi32(
                _mm256_madd_epi16(lo16, sc[2 * c]),
                _mm256_madd_epi16(hi16, sc[2 * c + 1]),
            ),
        );
    }
    (isum, min_sums(mins, bx))
}

/// Q4_K and Q5_K: the eight rows' `sum_j m_j * sum(x over sub-block j)`
/// from the Q8_K block sums at `bx`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn min_sums(mins: &[__m256i; 4], bx: *const u8) -> __m256i {
    let bs = |i: usize| -> i32 {
        // SAFETY: block sum `i < 16` of the Q8_K block lies at 260 + 2i.
        unsafe { (bx.add(260 + 2 * i) as *const i16).read_unaligned() as i32 }
    };
    let mut msum = _mm256_setzero_si256();
    for p in 0..4 {
        let lo = bs(4 * p) + bs(4 * p + 1);
        let hi = bs(4 * p + 2) + bs(4 * p + 3);
        let pair = (lo as u16 as u32 | ((hi as u16 as u32) << 16)) as i32;
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mins[p], _mm256_set1_epi32(pair)));
    }
    msum
}

/// Generates the kernels of a K-quant x8 layout: `$prep(unit)` decodes a
/// block's scales once for all activation rows, `$step(&prep, unit, bx, dx,
/// acc)` adds one Q8_K activation block's contribution for the eight rows.
macro_rules! k8 {
    ($feat:literal, $name:ident, $impl_name:ident, $rn:expr, $unit:expr, $prep:ident, $step:ident) => {
        /// One eight-row K-quant group times Q8_K activation rows.
        pub fn $name(group: &[u8], x: [&[u8]; $rn]) -> [[f32; 8]; $rn] {
            let nb = x
                .iter()
                .fold(group.len() / $unit, |m, r| m.min(r.len() / Q8K));
            // SAFETY: features detected by the kernel table; `nb` whole blocks everywhere.
            unsafe { $impl_name(&group[..nb * $unit], x, nb) }
        }

        /// # Safety
        /// Call only once the CPU's support for the features named in
        /// `target_feature` is known (the kernel table hands out the safe
        /// wrapper only then), with every slice and pointer covering the
        /// whole blocks or elements the wrapper checked.
        #[target_feature(enable = $feat)]
        unsafe fn $impl_name(group: &[u8], x: [&[u8]; $rn], nb: usize) -> [[f32; 8]; $rn] {
            super::align_frame!();
            let mut acc = [_mm256_setzero_ps(); $rn];
            for b in 0..nb {
                // SAFETY: unit `b < nb` lies inside `group`.
                let u = unsafe { group.as_ptr().add(b * $unit) };
                if $rn == 1 {
                    super::prefetch_ahead(u, $unit);
                }
                let prep = $prep(u);
                for j in 0..$rn {
                    if $rn > 1 {
                        // A part of the unit per activation row (see
                        // `prefetch_far_part`).
                        let far = super::far_distance($unit, 2048);
                        super::prefetch_far_part(u, $unit, j, $rn, far);
                    }
                    // SAFETY: block `b < nb` of each activation row exists.
                    let bx = unsafe { x[j].as_ptr().add(b * Q8K) };
                    // SAFETY: the block's f32 scale is its first 4 bytes.
                    let dx = _mm256_set1_ps(unsafe { (bx as *const f32).read_unaligned() });
                    acc[j] = $step(&prep, u, bx, dx, acc[j]);
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

pub(super) use k8;

/// Q4_K: `acc + d * dx * sum_j sc_j q.x - dmin * dx * sum_j m_j sum(x)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn step_q4k(p: &Q4kPrep, u: *const u8, bx: *const u8, dx: __m256, acc: __m256) -> __m256 {
    let (isum, msum) = sums_q4k(&p.sc, &p.mins, u, bx);
    let acc = _mm256_fmadd_ps(_mm256_mul_ps(p.d, dx), _mm256_cvtepi32_ps(isum), acc);
    _mm256_fnmadd_ps(_mm256_mul_ps(p.dmin, dx), _mm256_cvtepi32_ps(msum), acc)
}

k8!(
    "avx2,fma,f16c",
    gemv_q4_kx8,
    gemv_q4_kx8_impl,
    1,
    Q4K_UNIT,
    prep_q4k,
    step_q4k
);
k8!(
    "avx2,fma,f16c",
    gemm_q4_kx8,
    gemm_q4_kx8_impl,
    X8_N,
    Q4K_UNIT,
    prep_q4k,
    step_q4k
);

pub(super) const Q5K_UNIT: usize = crate::quant::repack_q5k::Q5K_UNIT;

/// Q5_K: the 5-bit values of elements `64c + 4k..` and `64c + 32 + 4k..`
/// of the 8 rows (`k = 4h + kk`), given the fifth bits `bits` of `(c, h)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn values_q5k(
    u: *const u8,
    bits: __m256i,
    c: usize,
    h: usize,
    kk: usize,
) -> [__m256i; 2] {
    let (m4, m16) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x10));
    // SAFETY: 1024 nibble bytes from byte 160 of the unit.
    let q =
        unsafe { _mm256_loadu_si256(u.add(160 + 256 * c + 32 * (4 * h + kk)) as *const __m256i) };
    // Bit `pos` of each byte moved to bit 4: one 16-bit shift by at most 4
    // never carries a bit across the byte boundary into bit 4.
    let bit = |pos: usize| {
        let b = if pos <= 4 {
            _mm256_sll_epi16(bits, _mm_cvtsi32_si128(4 - pos as i32))
        } else {
            _mm256_srl_epi16(bits, _mm_cvtsi32_si128(pos as i32 - 4))
        };
        _mm256_and_si256(b, m16)
    };
    [
        _mm256_or_si256(_mm256_and_si256(q, m4), bit(2 * kk)),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
            bit(2 * kk + 1),
        ),
    ]
}

/// The fifth bits of chunk `c`, half `h` of a Q5_K unit.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn bits_q5k(u: *const u8, c: usize, h: usize) -> __m256i {
    // SAFETY: the fifth bits follow the Q4_K part of the unit (64 bytes per chunk).
    unsafe { _mm256_loadu_si256(u.add(Q4K_UNIT + 64 * c + 32 * h) as *const __m256i) }
}

/// Q5_K for several activation rows: the Q4_K scales, and the 5-bit values
/// of the whole block widened to bytes once (`v[8c + k]`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prep_q5k(u: *const u8) -> Q5kPrep {
    let mut v = [[_mm256_setzero_si256(); 2]; 32];
    for c in 0..4 {
        for h in 0..2 {
            let bits = bits_q5k(u, c, h);
            for kk in 0..4 {
                v[8 * c + 4 * h + kk] = values_q5k(u, bits, c, h, kk);
            }
        }
    }
    Q5kPrep { q4: prep_q4k(u), v }
}

/// What [`prep_q5k`] decodes from a Q5_K unit.
pub(super) struct Q5kPrep {
    pub(super) q4: Q4kPrep,
    pub(super) v: [[__m256i; 2]; 32],
}

/// Q5_K: as [`step_q4k`], with the values from `value(c, h, kk)`. 5-bit by
/// 8-bit products allow four `maddubs` per 16-bit sum, so each half of a
/// chunk widens apart.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn step_q5k_with(
    p: &Q4kPrep,
    bx: *const u8,
    dx: __m256,
    acc: __m256,
    value: impl Fn(usize, usize, usize) -> [__m256i; 2],
) -> __m256 {
    // SAFETY: a Q8_K block is d (4 bytes), 256 quants, 16 i16 block sums.
    let q8 = unsafe { bx.add(4) };
    let mut isum = _mm256_setzero_si256();
    for c in 0..4 {
        for h in 0..2 {
            let (mut lo16, mut hi16) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            for kk in 0..4 {
                let k = 4 * h + kk;
                // SAFETY: 256 activation quants.
                let (xl, xh) = unsafe {
                    (
                        bcast4(q8.add(64 * c + 4 * k)),
                        bcast4(q8.add(64 * c + 32 + 4 * k)),
                    )
                };
                let [vl, vh] = value(c, h, kk);
                lo16 = _mm256_add_epi16(lo16, _mm256_maddubs_epi16(vl, xl));
                hi16 = _mm256_add_epi16(hi16, _mm256_maddubs_epi16(vh, xh));
            }
            isum = _mm256_add_epi32(
                isum,
                _mm256_add_epi32(
                    _mm256_madd_epi16(lo16, p.sc[2 * c]),
                    _mm256_madd_epi16(hi16, p.sc[2 * c + 1]),
                ),
            );
        }
    }
    let msum = min_sums(&p.mins, bx);
    let acc = _mm256_fmadd_ps(_mm256_mul_ps(p.d, dx), _mm256_cvtepi32_ps(isum), acc);
    _mm256_fnmadd_ps(_mm256_mul_ps(p.dmin, dx), _mm256_cvtepi32_ps(msum), acc)
}

/// Q5_K against several rows: the values widened once by [`prep_q5k`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn step_q5k(p: &Q5kPrep, _u: *const u8, bx: *const u8, dx: __m256, acc: __m256) -> __m256 {
    step_q5k_with(&p.q4, bx, dx, acc, |c, h, kk| p.v[8 * c + 4 * h + kk])
}

/// Q5_K against one row: the values widened as they are used (a block's
/// 2 KiB of widened values would cost more stores than it saves).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn step_q5k_one(p: &Q4kPrep, u: *const u8, bx: *const u8, dx: __m256, acc: __m256) -> __m256 {
    step_q5k_with(p, bx, dx, acc, |c, h, kk| {
        values_q5k(u, bits_q5k(u, c, h), c, h, kk)
    })
}

k8!(
    "avx2,fma,f16c",
    gemv_q5_kx8,
    gemv_q5_kx8_impl,
    1,
    Q5K_UNIT,
    prep_q4k,
    step_q5k_one
);
k8!(
    "avx2,fma,f16c",
    gemm_q5_kx8,
    gemm_q5_kx8_impl,
    X8_N,
    Q5K_UNIT,
    prep_q5k,
    step_q5k
);

pub(super) const Q6K_UNIT: usize = crate::quant::repack_q6k::Q6K_UNIT;

/// Q6_K: per block, the 16 group scales as `(s, s)` i16 pairs per row lane,
/// and the scales of groups `2p, 2p + 1` as i16 pairs per row lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prep_q6k(u: *const u8) -> Q6kPrep {
    let low = _mm256_set1_epi32(0xffff);
    let mut sc = [_mm256_setzero_si256(); 16];
    let mut pairs = [_mm256_setzero_si256(); 8];
    for g in 0..16 {
        // SAFETY: a Q6_K unit holds 8 scale bytes per group at 16 + 8g.
        let v =
            _mm256_cvtepi8_epi32(unsafe { _mm_loadl_epi64(u.add(16 + 8 * g) as *const __m128i) });
        sc[g] = _mm256_or_si256(_mm256_and_si256(v, low), _mm256_slli_epi32(v, 16));
    }
    for p in 0..8 {
        // SAFETY: as above.
        let (a, b) = unsafe {
            (
                _mm_loadl_epi64(u.add(16 + 16 * p) as *const __m128i),
                _mm_loadl_epi64(u.add(24 + 16 * p) as *const __m128i),
            )
        };
        pairs[p] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
    }
    // SAFETY: the 8 rows' d open the unit (16 bytes).
    let d = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(u as *const __m128i) });
    Q6kPrep { sc, pairs, d }
}

/// What [`prep_q6k`] decodes from a Q6_K unit.
pub(super) struct Q6kPrep {
    pub(super) sc: [__m256i; 16],
    pub(super) pairs: [__m256i; 8],
    pub(super) d: __m256,
}

/// Q6_K: stored values are `q + 32`, so take `32 * sum_g sc_g sum(x)` back off.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn step_q6k(p: &Q6kPrep, u: *const u8, bx: *const u8, dx: __m256, acc: __m256) -> __m256 {
    let (isum, osum) = sums_q6k(&p.sc, &p.pairs, u, bx);
    let total = _mm256_sub_epi32(isum, _mm256_slli_epi32(osum, 5));
    _mm256_fmadd_ps(_mm256_mul_ps(p.d, dx), _mm256_cvtepi32_ps(total), acc)
}

/// Q6_K: the eight rows' `sum_g sc_g * sum(v * x)` and `sum_g sc_g * sum(x)`
/// for one Q8_K block (two `maddubs` of 6-bit values fit one 16-bit sum).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sums_q6k(
    sc: &[__m256i; 16],
    pairs: &[__m256i; 8],
    u: *const u8,
    bx: *const u8,
) -> (__m256i, __m256i) {
    // SAFETY: a Q8_K block is d (4 bytes), 256 quants, 16 i16 block sums.
    let q8 = unsafe { bx.add(4) };
    let mut isum = _mm256_setzero_si256();
    for s in 0..8 {
        for kk in 0..4 {
            let k = 2 * kk;
            // SAFETY: 2048 value bytes from byte 144 of the unit; 256 activation quants.
            let (v0, v1, x0, x1) = unsafe {
                (
                    _mm256_loadu_si256(u.add(144 + 256 * s + 32 * k) as *const __m256i),
                    _mm256_loadu_si256(u.add(144 + 256 * s + 32 * k + 32) as *const __m256i),
                    bcast4(q8.add(32 * s + 4 * k)),
                    bcast4(q8.add(32 * s + 4 * k + 4)),
                )
            };
            let p = _mm256_add_epi16(_mm256_maddubs_epi16(v0, x0), _mm256_maddubs_epi16(v1, x1));
            // Elements 32s + 4k.. lie in group 2s (k < 4) or 2s + 1.
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sc[2 * s + kk / 2]));
        }
    }
    let mut osum = _mm256_setzero_si256();
    for p in 0..8 {
        // SAFETY: block sums `2p, 2p + 1` (i16) lie at 260 + 4p.
        let pair = unsafe { (bx.add(260 + 4 * p) as *const i32).read_unaligned() };
        osum = _mm256_add_epi32(osum, _mm256_madd_epi16(pairs[p], _mm256_set1_epi32(pair)));
    }
    (isum, osum)
}

k8!(
    "avx2,fma,f16c",
    gemv_q6_kx8,
    gemv_q6_kx8_impl,
    1,
    Q6K_UNIT,
    prep_q6k,
    step_q6k
);
k8!(
    "avx2,fma,f16c",
    gemm_q6_kx8,
    gemm_q6_kx8_impl,
    X8_N,
    Q6K_UNIT,
    prep_q6k,
    step_q6k
);
