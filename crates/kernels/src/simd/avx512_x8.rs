//! AVX-512 VNNI kernels over the eight-row interleaved layouts of
//! [`crate::quant::repack`]: the layouts, the block loops and the weight
//! decoding are the AVX2 tier's ([`super::avx2_x8`]); what changes is the
//! integer product. `vpdpbusd` multiplies unsigned weight bytes by signed
//! activation bytes and adds each four products into a 32-bit lane in one
//! instruction, where AVX2 needs `maddubs` (16-bit pairs), 16-bit adds and
//! a widening `madd`. So every sum below is kept in 32 bits from the first
//! product: no 16-bit overflow limits (Q5 and Q6 values need no split
//! halves), and k-quant sub-block scales multiply the 32-bit sums
//! (`vpmulld`) instead of 16-bit pairs. With AVX-512VL these run on 256-bit
//! registers but may use all 32 of them, which the eight-activation-row
//! tiles need.
//!
//! Handed out by [`crate::cpu::Kernels::for_isa`] only after AVX2, FMA,
//! F16C, AVX-512 F/BW/VL and VNNI were detected: the safety condition of
//! every function below.

#![allow(unsafe_code)]

use super::avx2_x8::{
    bcast4, bits_q5k, k8, min_sums, prep_q4, prep_q4_1, prep_q4k, prep_q5, prep_q5_1, prep_q5k,
    prep_q6k, values_q5k, x8, Q4kPrep, Q5kPrep, Q6kPrep, Q4K_UNIT, Q4_1_UNIT, Q4_UNIT, Q5K_UNIT,
    Q5_1_UNIT, Q5_UNIT, Q6K_UNIT, Q8K, Q8_UNIT,
};
use crate::rows::{Q8Row, X8_N};
use std::arch::x86_64::*;

/// Q4_0, Q4_1, Q5_0 and Q5_1: the eight rows' integer sums for one
/// activation block's quants `q`, from the weight values `w` (unsigned,
/// elements 0..16 in `w[0..4]`, 16..32 in `w[4..8]`). Two accumulators
/// halve the dependency chain.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn sums_u(w: &[__m256i; 8], _u: *const u8, q: *const u8) -> __m256i {
    let (mut lo, mut hi) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for k in 0..4 {
        // SAFETY: `q` points at the block's 32 quant bytes.
        let (xl, xh) = unsafe { (bcast4(q.add(4 * k)), bcast4(q.add(16 + 4 * k))) };
        lo = _mm256_dpbusd_epi32(lo, w[k], xl);
        hi = _mm256_dpbusd_epi32(hi, w[4 + k], xh);
    }
    _mm256_add_epi32(lo, hi)
}

/// Q8_0: the weights made unsigned once per block (`w ^ 0x80 = w + 128`);
/// the kernel table's offset 128 for Q8_0 makes the activation terms take
/// `128 * sum(x)` back off.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn prep_q8u(u: *const u8) -> [__m256i; 8] {
    let bias = _mm256_set1_epi8(-128);
    let mut w = [_mm256_setzero_si256(); 8];
    for (k, wk) in w.iter_mut().enumerate() {
        // SAFETY: a Q8_0 unit holds 256 quant bytes after its 16 scale bytes.
        let v = unsafe { _mm256_loadu_si256(u.add(16 + 32 * k) as *const __m256i) };
        *wk = _mm256_xor_si256(v, bias);
    }
    w
}

/// Q8_0: the eight rows' sums of the unsigned weights with one block's quants.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn sums_q8(w: &[__m256i; 8], _u: *const u8, q: *const u8) -> __m256i {
    let (mut a, mut b) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for k in 0..4 {
        // SAFETY: `q` points at the block's 32 quant bytes.
        let (x0, x1) = unsafe { (bcast4(q.add(8 * k)), bcast4(q.add(8 * k + 4))) };
        a = _mm256_dpbusd_epi32(a, w[2 * k], x0);
        b = _mm256_dpbusd_epi32(b, w[2 * k + 1], x1);
    }
    _mm256_add_epi32(a, b)
}

x8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemv_q4_0x8,
    gemv_q4_0x8_impl,
    1,
    [0],
    Q4_UNIT,
    prep_q4,
    sums_u
);
x8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemm_q4_0x8,
    gemm_q4_0x8_impl,
    X8_N,
    [0 1 2 3 4 5 6 7],
    Q4_UNIT,
    prep_q4,
    sums_u
);
x8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemv_q8_0x8,
    gemv_q8_0x8_impl,
    1,
    [0],
    Q8_UNIT,
    prep_q8u,
    sums_q8
);
x8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemm_q8_0x8,
    gemm_q8_0x8_impl,
    X8_N,
    [0 1 2 3 4 5 6 7],
    Q8_UNIT,
    prep_q8u,
    sums_q8
);
x8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemv_q5_0x8,
    gemv_q5_0x8_impl,
    1,
    [0],
    Q5_UNIT,
    prep_q5,
    sums_u
);
x8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemm_q5_0x8,
    gemm_q5_0x8_impl,
    X8_N,
    [0 1 2 3 4 5 6 7],
    Q5_UNIT,
    prep_q5,
    sums_u
);
x8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemv_q4_1x8,
    gemv_q4_1x8_impl,
    1,
    [0],
    Q4_1_UNIT,
    prep_q4_1,
    sums_u,
    mins
);
x8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemm_q4_1x8,
    gemm_q4_1x8_impl,
    X8_N,
    [0 1 2 3 4 5 6 7],
    Q4_1_UNIT,
    prep_q4_1,
    sums_u,
    mins
);
x8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemv_q5_1x8,
    gemv_q5_1x8_impl,
    1,
    [0],
    Q5_1_UNIT,
    prep_q5_1,
    sums_u,
    mins
);
x8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemm_q5_1x8,
    gemm_q5_1x8_impl,
    X8_N,
    [0 1 2 3 4 5 6 7],
    Q5_1_UNIT,
    prep_q5_1,
    sums_u,
    mins
);

/// The AVX2 tier's `(s, s)` i16 scale pairs as plain 32-bit scales (the
/// low half, sign-extended), for `vpmulld`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn plain_scales<const N: usize>(sc: &mut [__m256i; N]) {
    for s in sc.iter_mut() {
        *s = _mm256_srai_epi32::<16>(_mm256_slli_epi32::<16>(*s));
    }
}

/// Q4_K: the AVX2 decoding with 32-bit sub-block scales.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn prep_q4k_vnni(u: *const u8) -> Q4kPrep {
    let mut p = prep_q4k(u);
    plain_scales(&mut p.sc);
    p
}

/// Q4_K and Q5_K: `acc + d * dx * isum - dmin * dx * sum_j m_j sum(x)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn finish_k(p: &Q4kPrep, isum: __m256i, bx: *const u8, dx: __m256, acc: __m256) -> __m256 {
    let msum = min_sums(&p.mins, bx);
    let acc = _mm256_fmadd_ps(_mm256_mul_ps(p.d, dx), _mm256_cvtepi32_ps(isum), acc);
    _mm256_fnmadd_ps(_mm256_mul_ps(p.dmin, dx), _mm256_cvtepi32_ps(msum), acc)
}

/// Q4_K and Q5_K: `sum_j sc_j * sum(v * x)` over the eight sub-blocks of
/// one Q8_K block at `bx`, the values of chunk `c` (sub-blocks `2c`,
/// `2c + 1`) from `value(c, k)` as (low, high) halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn sums_k(
    sc: &[__m256i; 8],
    bx: *const u8,
    value: impl Fn(usize, usize) -> [__m256i; 2],
) -> __m256i {
    // SAFETY: a Q8_K block is d (4 bytes), 256 quants, 16 i16 block sums.
    let q8 = unsafe { bx.add(4) };
    let mut isum = _mm256_setzero_si256();
    for c in 0..4 {
        let (mut lo, mut hi) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for k in 0..8 {
            // SAFETY: 256 activation quants.
            let (xl, xh) = unsafe {
                (
                    bcast4(q8.add(64 * c + 4 * k)),
                    bcast4(q8.add(64 * c + 32 + 4 * k)),
                )
            };
            let [vl, vh] = value(c, k);
            lo = _mm256_dpbusd_epi32(lo, vl, xl);
            hi = _mm256_dpbusd_epi32(hi, vh, xh);
        }
        isum = _mm256_add_epi32(
            isum,
            _mm256_add_epi32(
                _mm256_mullo_epi32(lo, sc[2 * c]),
                _mm256_mullo_epi32(hi, sc[2 * c + 1]),
            ),
        );
    }
    isum
}

/// Q4_K: nibbles of chunk `c`, column `k` (low and high halves).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn nibbles_q4k(u: *const u8, c: usize, k: usize) -> [__m256i; 2] {
    let m4 = _mm256_set1_epi8(0x0f);
    // SAFETY: 1024 quant bytes from byte 160 of the unit.
    let v = unsafe { _mm256_loadu_si256(u.add(160 + 256 * c + 32 * k) as *const __m256i) };
    [
        _mm256_and_si256(v, m4),
        _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4),
    ]
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn step_q4k(p: &Q4kPrep, u: *const u8, bx: *const u8, dx: __m256, acc: __m256) -> __m256 {
    let isum = sums_k(&p.sc, bx, |c, k| nibbles_q4k(u, c, k));
    finish_k(p, isum, bx, dx, acc)
}

k8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemv_q4_kx8,
    gemv_q4_kx8_impl,
    1,
    Q4K_UNIT,
    prep_q4k_vnni,
    step_q4k
);
k8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemm_q4_kx8,
    gemm_q4_kx8_impl,
    X8_N,
    Q4K_UNIT,
    prep_q4k_vnni,
    step_q4k
);

/// Q5_K against several rows: the values widened once per block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn prep_q5k_vnni(u: *const u8) -> Q5kPrep {
    let mut p = prep_q5k(u);
    plain_scales(&mut p.q4.sc);
    p
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn step_q5k(p: &Q5kPrep, _u: *const u8, bx: *const u8, dx: __m256, acc: __m256) -> __m256 {
    let isum = sums_k(&p.q4.sc, bx, |c, k| p.v[8 * c + k]);
    finish_k(&p.q4, isum, bx, dx, acc)
}

/// Q5_K against one row: the values widened as they are used.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn step_q5k_one(p: &Q4kPrep, u: *const u8, bx: *const u8, dx: __m256, acc: __m256) -> __m256 {
    let isum = sums_k(&p.sc, bx, |c, k| {
        values_q5k(u, bits_q5k(u, c, k / 4), c, k / 4, k % 4)
    });
    finish_k(p, isum, bx, dx, acc)
}

k8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemv_q5_kx8,
    gemv_q5_kx8_impl,
    1,
    Q5K_UNIT,
    prep_q4k_vnni,
    step_q5k_one
);
k8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemm_q5_kx8,
    gemm_q5_kx8_impl,
    X8_N,
    Q5K_UNIT,
    prep_q5k_vnni,
    step_q5k
);

/// Q6_K: the AVX2 decoding with 32-bit group scales.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn prep_q6k_vnni(u: *const u8) -> Q6kPrep {
    let mut p = prep_q6k(u);
    plain_scales(&mut p.sc);
    p
}

/// Q6_K: stored values are `q + 32`; `32 * sum_g sc_g sum(x)` is taken back
/// off with the AVX2 tier's 16-bit pairs (block sums fit 16 bits).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn step_q6k(p: &Q6kPrep, u: *const u8, bx: *const u8, dx: __m256, acc: __m256) -> __m256 {
    // SAFETY: a Q8_K block is d (4 bytes), 256 quants, 16 i16 block sums.
    let q8 = unsafe { bx.add(4) };
    let mut isum = _mm256_setzero_si256();
    for g in 0..16 {
        // Group g holds elements 16g..16g + 16: four columns of four.
        let mut s = _mm256_setzero_si256();
        for k in 0..4 {
            // SAFETY: 2048 value bytes from byte 144 of the unit (the
            // elements of group g at 32 * (4g + k)); 256 activation quants.
            let (v, x) = unsafe {
                (
                    _mm256_loadu_si256(u.add(144 + 32 * (4 * g + k)) as *const __m256i),
                    bcast4(q8.add(16 * g + 4 * k)),
                )
            };
            s = _mm256_dpbusd_epi32(s, v, x);
        }
        isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(s, p.sc[g]));
    }
    let mut osum = _mm256_setzero_si256();
    for q in 0..8 {
        // SAFETY: block sums `2q, 2q + 1` (i16) lie at 260 + 4q.
        let pair = unsafe { (bx.add(260 + 4 * q) as *const i32).read_unaligned() };
        osum = _mm256_add_epi32(osum, _mm256_madd_epi16(p.pairs[q], _mm256_set1_epi32(pair)));
    }
    let total = _mm256_sub_epi32(isum, _mm256_slli_epi32(osum, 5));
    _mm256_fmadd_ps(_mm256_mul_ps(p.d, dx), _mm256_cvtepi32_ps(total), acc)
}

k8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemv_q6_kx8,
    gemv_q6_kx8_impl,
    1,
    Q6K_UNIT,
    prep_q6k_vnni,
    step_q6k
);
k8!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    gemm_q6_kx8,
    gemm_q6_kx8_impl,
    X8_N,
    Q6K_UNIT,
    prep_q6k_vnni,
    step_q6k
);
