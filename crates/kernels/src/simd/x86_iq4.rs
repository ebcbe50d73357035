//! AVX2 and AVX-512 VNNI kernels of the non-linear 4-bit types over their
//! eight-row layouts ([`crate::quant::repack_iq4`]): a nibble becomes its
//! level with one byte shuffle (`vpshufb` over the 16-entry table), then
//! the products are those of the signed types.
//!
//! - AVX2: levels are signed (-127..113), so products use the sign trick
//!   (`maddubs(|w|, sign(x, w))`; two products of at most 127 x 127 fit a
//!   16-bit pair) and are widened every step.
//! - AVX-512 VNNI: the table holds `level + 128` (1..241, unsigned), so
//!   `vpdpbusd` takes them directly; the `128 * sum(x)` this adds comes off
//!   through the activation terms (IQ4_NL: the kernel table's offset 128,
//!   as for Q8_0) or the Q8_K block sums (IQ4_XS).
//!
//! The sixteen-row IQ4_XS kernel follows [`super::avx512_k16`]'s Q6_K one.
//!
//! Handed out by [`crate::cpu::Kernels::for_isa`] only after the features
//! each function enables were detected: the safety condition of every
//! function below.

#![allow(unsafe_code)]

use super::avx2_x8::{bcast4, k8, prep_q4, x8, Q4_UNIT, Q8K};
use super::avx512_k16::{join8, pairs, sub_block_dot, whole_blocks};
use super::avx512_x16::{bcast4 as bcast16, join, join_f16, rows16, x16};
use crate::quant::iquants::LEVELS;
use crate::quant::repack_iq4::IQ4XS_UNIT;
use crate::rows::{Q8Row, X4_N, X8_N};
use std::arch::x86_64::*;

/// The levels as unsigned bytes `level + 128`.
const LEVELS_U: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (LEVELS[i] as i16 + 128) as u8;
        i += 1;
    }
    t
};

/// A 16-byte table in both 128-bit lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn table256(t: &[u8; 16]) -> __m256i {
    // SAFETY: `t` holds 16 bytes.
    _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(t.as_ptr() as *const __m128i) })
}

/// IQ4_NL, AVX2: the unit's levels (signed) and their magnitudes, low
/// halves (elements 0..16) in `[0..4]`, high halves in `[4..8]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prep_nl(u: *const u8) -> ([__m256i; 8], [__m256i; 8]) {
    let t = table256(&LEVELS.map(|v| v as u8));
    let w = prep_q4(u).map(|n| _mm256_shuffle_epi8(t, n));
    (w.map(|v| _mm256_abs_epi8(v)), w)
}

/// IQ4_NL, AVX2: the eight rows' integer sums for one activation block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sums_nl(w: &([__m256i; 8], [__m256i; 8]), _u: *const u8, q: *const u8) -> __m256i {
    let (abs, signed) = w;
    let ones = _mm256_set1_epi16(1);
    let mut s32 = _mm256_setzero_si256();
    for k in 0..8 {
        let off = if k < 4 { 4 * k } else { 16 + 4 * (k - 4) };
        // SAFETY: `q` points at the block's 32 quant bytes.
        let x = unsafe { bcast4(q.add(off)) };
        let p = _mm256_maddubs_epi16(abs[k], _mm256_sign_epi8(x, signed[k]));
        s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(p, ones));
    }
    s32
}

x8!(
    "avx2,fma,f16c",
    gemv_iq4_nlx8,
    gemv_iq4_nlx8_impl,
    1,
    [0],
    Q4_UNIT,
    prep_nl,
    sums_nl
);
x8!(
    "avx2,fma,f16c",
    gemm_iq4_nlx8,
    gemm_iq4_nlx8_impl,
    X8_N,
    [0 1 2 3 4 5 6 7],
    Q4_UNIT,
    prep_nl,
    sums_nl
);

/// IQ4_NL, VNNI: the unit's levels plus 128, in [`prep_q4`]'s order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn prep_nl_u(u: *const u8) -> [__m256i; 8] {
    let t = table256(&LEVELS_U);
    prep_q4(u).map(|n| _mm256_shuffle_epi8(t, n))
}

x8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemv_iq4_nlx8_vnni,
    gemv_iq4_nlx8_vnni_impl,
    1,
    [0],
    Q4_UNIT,
    prep_nl_u,
    sums_u8
);
x8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemm_iq4_nlx8_vnni,
    gemm_iq4_nlx8_vnni_impl,
    X8_N,
    [0 1 2 3 4 5 6 7],
    Q4_UNIT,
    prep_nl_u,
    sums_u8
);

use super::avx512_x8::sums_u as sums_u8;

/// IQ4_NL, sixteen rows: both groups' levels plus 128.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn prep_nl16(a: *const u8, b: *const u8) -> [__m512i; 8] {
    // SAFETY: LEVELS_U holds 16 bytes.
    let t = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(LEVELS_U.as_ptr() as *const __m128i) });
    super::avx512_x16::prep_q4::<16>(a, b).map(|n| _mm512_shuffle_epi8(t, n))
}

use super::avx512_x16::sums_u as sums_u16;

x16!(
    gemm_iq4_nlx16,
    gemm_iq4_nlx16_impl,
    gemm_iq4_nlx16_4,
    gemm_iq4_nlx16_4_impl,
    Q4_UNIT,
    prep_nl16,
    sums_u16,
    false
);

/// What an IQ4_XS unit's header decodes to: the rows' `d` and, per
/// sub-block, the multipliers as `(s, s)` 16-bit pairs (AVX2, for `madd`)
/// or plain 32-bit values (VNNI, for `vpmulld`).
pub(super) struct XsPrep {
    d: __m256,
    sc: [__m256i; 8],
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prep_xs_with(u: *const u8, pairs: bool) -> XsPrep {
    let sc = std::array::from_fn(|j| {
        // SAFETY: 8 signed multiplier bytes per sub-block at 16 + 8j.
        let v =
            _mm256_cvtepi8_epi32(unsafe { _mm_loadl_epi64(u.add(16 + 8 * j) as *const __m128i) });
        if pairs {
            _mm256_or_si256(
                _mm256_and_si256(v, _mm256_set1_epi32(0xffff)),
                _mm256_slli_epi32(v, 16),
            )
        } else {
            v
        }
    });
    // SAFETY: the 8 rows' f16 `d` open the unit.
    let d = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(u as *const __m128i) });
    XsPrep { d, sc }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prep_xs(u: *const u8) -> XsPrep {
    prep_xs_with(u, true)
}

/// Nibbles of sub-block `j`, column `k`: (low, high) halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn nibbles_xs(u: *const u8, j: usize, k: usize) -> (__m256i, __m256i) {
    let m4 = _mm256_set1_epi8(0x0f);
    // SAFETY: 1024 quant bytes from byte 80 of the unit.
    let v = unsafe { _mm256_loadu_si256(u.add(80 + 128 * j + 32 * k) as *const __m256i) };
    (
        _mm256_and_si256(v, m4),
        _mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
    )
}

/// IQ4_XS, AVX2: `acc + d * dx * sum_j sc_j * sum(level * x)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn step_xs(p: &XsPrep, u: *const u8, bx: *const u8, dx: __m256, acc: __m256) -> __m256 {
    let t = table256(&LEVELS.map(|v| v as u8));
    // SAFETY: a Q8_K block is d (4 bytes), 256 quants, 16 i16 block sums.
    let q8 = unsafe { bx.add(4) };
    let mut isum = _mm256_setzero_si256();
    for j in 0..8 {
        for k in 0..4 {
            let (nl, nh) = nibbles_xs(u, j, k);
            let (l, h) = (_mm256_shuffle_epi8(t, nl), _mm256_shuffle_epi8(t, nh));
            // SAFETY: 256 activation quants.
            let (xl, xh) = unsafe {
                (
                    bcast4(q8.add(32 * j + 4 * k)),
                    bcast4(q8.add(32 * j + 16 + 4 * k)),
                )
            };
            let pl = _mm256_maddubs_epi16(_mm256_abs_epi8(l), _mm256_sign_epi8(xl, l));
            let ph = _mm256_maddubs_epi16(_mm256_abs_epi8(h), _mm256_sign_epi8(xh, h));
            isum = _mm256_add_epi32(
                isum,
                _mm256_add_epi32(
                    _mm256_madd_epi16(pl, p.sc[j]),
                    _mm256_madd_epi16(ph, p.sc[j]),
                ),
            );
        }
    }
    _mm256_fmadd_ps(_mm256_mul_ps(p.d, dx), _mm256_cvtepi32_ps(isum), acc)
}

k8!(
    "avx2,fma,f16c",
    gemv_iq4_xsx8,
    gemv_iq4_xsx8_impl,
    1,
    IQ4XS_UNIT,
    prep_xs,
    step_xs
);
/// IQ4_XS, AVX2, for many activation rows: the block's levels and their
/// magnitudes decoded once (4 KiB) and read by every row's step.
pub(super) struct XsFull {
    head: XsPrep,
    /// Sub-block `j`'s column `k`: low halves at `8j + k`, high at `8j + 4 + k`.
    abs: [__m256i; 64],
    signed: [__m256i; 64],
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prep_xs_full(u: *const u8) -> XsFull {
    let t = table256(&LEVELS.map(|v| v as u8));
    let mut signed = [_mm256_setzero_si256(); 64];
    for j in 0..8 {
        for k in 0..4 {
            let (nl, nh) = nibbles_xs(u, j, k);
            signed[8 * j + k] = _mm256_shuffle_epi8(t, nl);
            signed[8 * j + 4 + k] = _mm256_shuffle_epi8(t, nh);
        }
    }
    XsFull {
        head: prep_xs(u),
        abs: signed.map(|v| _mm256_abs_epi8(v)),
        signed,
    }
}

/// [`step_xs`] over levels decoded by [`prep_xs_full`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn step_xs_full(p: &XsFull, _u: *const u8, bx: *const u8, dx: __m256, acc: __m256) -> __m256 {
    // SAFETY: a Q8_K block is d (4 bytes), 256 quants, 16 i16 block sums.
    let q8 = unsafe { bx.add(4) };
    let mut isum = _mm256_setzero_si256();
    for j in 0..8 {
        let mut s = _mm256_setzero_si256();
        for i in 0..8 {
            let off = 32 * j + if i < 4 { 4 * i } else { 16 + 4 * (i - 4) };
            // SAFETY: 256 activation quants.
            let x = unsafe { bcast4(q8.add(off)) };
            let w = 8 * j + i;
            let prod = _mm256_maddubs_epi16(p.abs[w], _mm256_sign_epi8(x, p.signed[w]));
            s = _mm256_add_epi32(s, _mm256_madd_epi16(prod, p.head.sc[j]));
        }
        isum = _mm256_add_epi32(isum, s);
    }
    _mm256_fmadd_ps(_mm256_mul_ps(p.head.d, dx), _mm256_cvtepi32_ps(isum), acc)
}

k8!(
    "avx2,fma,f16c",
    gemm_iq4_xsx8,
    gemm_iq4_xsx8_impl,
    X8_N,
    IQ4XS_UNIT,
    prep_xs_full,
    step_xs_full
);

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn prep_xs_vnni(u: *const u8) -> XsPrep {
    prep_xs_with(u, false)
}

/// IQ4_XS, VNNI: per sub-block the sums of `(level + 128) * x`, less
/// `128 * sum(x)` from the block sums, times the multipliers.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn step_xs_vnni(p: &XsPrep, u: *const u8, bx: *const u8, dx: __m256, acc: __m256) -> __m256 {
    let t = table256(&LEVELS_U);
    // SAFETY: a Q8_K block is d (4 bytes), 256 quants, 16 i16 block sums.
    let q8 = unsafe { bx.add(4) };
    let bs = |i: usize| -> i32 {
        // SAFETY: block sum `i < 16` of the Q8_K block lies at 260 + 2i.
        unsafe { (bx.add(260 + 2 * i) as *const i16).read_unaligned() as i32 }
    };
    let mut isum = _mm256_setzero_si256();
    for j in 0..8 {
        let (mut lo, mut hi) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for k in 0..4 {
            let (nl, nh) = nibbles_xs(u, j, k);
            // SAFETY: 256 activation quants.
            let (xl, xh) = unsafe {
                (
                    bcast4(q8.add(32 * j + 4 * k)),
                    bcast4(q8.add(32 * j + 16 + 4 * k)),
                )
            };
            lo = _mm256_dpbusd_epi32(lo, _mm256_shuffle_epi8(t, nl), xl);
            hi = _mm256_dpbusd_epi32(hi, _mm256_shuffle_epi8(t, nh), xh);
        }
        let offset = _mm256_set1_epi32(128 * (bs(2 * j) + bs(2 * j + 1)));
        let s = _mm256_sub_epi32(_mm256_add_epi32(lo, hi), offset);
        isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(s, p.sc[j]));
    }
    _mm256_fmadd_ps(_mm256_mul_ps(p.d, dx), _mm256_cvtepi32_ps(isum), acc)
}

k8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemv_iq4_xsx8_vnni,
    gemv_iq4_xsx8_vnni_impl,
    1,
    IQ4XS_UNIT,
    prep_xs_vnni,
    step_xs_vnni
);
k8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemm_iq4_xsx8_vnni,
    gemm_iq4_xsx8_vnni_impl,
    X8_N,
    IQ4XS_UNIT,
    prep_xs_vnni,
    step_xs_vnni
);

/// IQ4_XS, sixteen rows (two adjacent groups) times [`X8_N`] activation
/// rows, on 512-bit registers, for prefill and batched decode: each
/// 64-element chunk's levels (plus 128) are looked up once for all rows.
pub fn gemm_iq4_xsx16(groups: [&[u8]; 2], x: &[&[u8]; X8_N]) -> [[f32; 16]; X8_N] {
    let nb = whole_blocks(groups, x, IQ4XS_UNIT);
    // SAFETY: features detected by the kernel table; `nb` whole blocks everywhere.
    unsafe {
        gemm_iq4_xsx16_impl(
            groups[0].as_ptr(),
            groups[1].as_ptr(),
            std::array::from_fn(|j| x[j].as_ptr()),
            nb,
        )
    }
}

/// # Safety
/// Call only once the CPU's support for the features named in
/// `target_feature` is known, with `a`, `b` and every row of `x` covering
/// `nb` whole blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn gemm_iq4_xsx16_impl(
    a: *const u8,
    b: *const u8,
    x: [*const u8; X8_N],
    nb: usize,
) -> [[f32; 16]; X8_N] {
    super::align_frame!();
    let m4 = _mm512_set1_epi8(0x0f);
    // SAFETY: LEVELS_U holds 16 bytes.
    let t = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(LEVELS_U.as_ptr() as *const __m128i) });
    let mut acc = [_mm512_setzero_ps(); X8_N];
    super::prefetch_start(b, nb * IQ4XS_UNIT);
    for blk in 0..nb {
        // SAFETY: (the whole loop body) unit `blk < nb` of both groups and
        // block `blk` of every activation row exist; offsets are the unit
        // layout's (see `crate::quant::repack_iq4`): d, multipliers at 16,
        // nibbles at 80.
        unsafe {
            let (ua, ub) = (a.add(blk * IQ4XS_UNIT), b.add(blk * IQ4XS_UNIT));
            // Sub-block sums times their scales, in f32: exact products
            // of integers below 2^24 and 6-bit scales, rounded only where
            // they add up (vpmulld costs two port-0 uops per use).
            let mut fsum = [_mm512_setzero_ps(); X8_N];
            for c in 0..4 {
                // The weights are read once per step: fetch ahead of them,
                // a quarter unit per chunk.
                let far = super::far_distance(IQ4XS_UNIT, 2048);
                super::prefetch_far_part(ua, IQ4XS_UNIT, c, 4, far);
                super::prefetch_far_part(ub, IQ4XS_UNIT, c, 4, far);
                // Sub-blocks 2c and 2c + 1: low and high halves of four columns each.
                let mut w = [_mm512_setzero_si512(); 16];
                for h in 0..2 {
                    for k in 0..4 {
                        let v = join(ua, ub, 80 + 128 * (2 * c + h) + 32 * k);
                        w[8 * h + k] = _mm512_shuffle_epi8(t, _mm512_and_si512(v, m4));
                        w[8 * h + 4 + k] =
                            _mm512_shuffle_epi8(t, _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4));
                    }
                }
                let sc: [__m512; 2] = std::array::from_fn(|h| {
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(join8(ua, ub, 16 + 8 * (2 * c + h))))
                });
                for (j, s) in fsum.iter_mut().enumerate() {
                    let q8 = x[j].add(blk * Q8K + 4 + 64 * c);
                    let mut tot = *s;
                    for h in 0..2 {
                        let (mut lo, mut hi) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                        for k in 0..4 {
                            lo = _mm512_dpbusd_epi32(
                                lo,
                                w[8 * h + k],
                                bcast16(q8.add(32 * h + 4 * k)),
                            );
                            hi = _mm512_dpbusd_epi32(
                                hi,
                                w[8 * h + 4 + k],
                                bcast16(q8.add(32 * h + 16 + 4 * k)),
                            );
                        }
                        tot = _mm512_fmadd_ps(
                            _mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi)),
                            sc[h],
                            tot,
                        );
                    }
                    *s = tot;
                }
            }
            let d = join_f16(ua, ub, 0);
            // Levels are stored plus 128: take `128 * sum_j sc_j sum(x_j)` back off.
            let sc_pairs: [__m512i; 4] = std::array::from_fn(|p| {
                pairs(ua, ub, 16 + 16 * p, 24 + 16 * p, |v| {
                    _mm256_cvtepi8_epi16(v)
                })
            });
            for (j, a) in acc.iter_mut().enumerate() {
                let bx = x[j].add(blk * Q8K);
                let dx = _mm512_set1_ps((bx as *const f32).read_unaligned());
                let osum = _mm512_cvtepi32_ps(_mm512_slli_epi32::<7>(sub_block_dot(&sc_pairs, bx)));
                let total = _mm512_sub_ps(fsum[j], osum);
                *a = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), total, *a);
            }
        }
    }
    rows16(acc)
}
