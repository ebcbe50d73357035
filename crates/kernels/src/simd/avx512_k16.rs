//! AVX-512 VNNI products of two adjacent eight-row Q4_K, Q5_K or Q6_K groups
//! at once (lanes 0..8 the first group's rows, 8..16 the second's), for
//! prefill and batched decode. A 256-element block is too big to keep
//! decoded in registers for all activation rows, so the loop runs over
//! 64-element chunks: a chunk's weights are joined and widened once
//! (sixteen 512-bit registers) and serve every activation row before the
//! next chunk is read. Sub-block sums stay in 32 bits (`vpdpbusd`, in
//! several short chains so that its latency does not bound the loop), then
//! are converted to float and scaled with one FMA: two uops where `vpmulld`
//! and an integer add took three, with `vpmulld`'s ten-cycle latency.
//!
//! Handed out by [`crate::cpu::Kernels::for_isa`] only after AVX2, FMA,
//! F16C, AVX-512 F/BW/VL and VNNI were detected: the safety condition of
//! every function below.

#![allow(unsafe_code)]

use super::avx2_x8::{Q4K_UNIT, Q5K_UNIT, Q6K_UNIT, Q8K};
use super::avx512_x16::{bcast4, join, join_f16, rows16};
use crate::rows::X8_N;
use std::arch::x86_64::*;

/// 8 bytes at `a + off` then 8 at `b + off`.
///
/// # Safety
/// Both `a + off` and `b + off` must have 8 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn join8(a: *const u8, b: *const u8, off: usize) -> __m128i {
    // SAFETY: the caller's contract.
    unsafe {
        _mm_unpacklo_epi64(
            _mm_loadl_epi64(a.add(off) as *const __m128i),
            _mm_loadl_epi64(b.add(off) as *const __m128i),
        )
    }
}

/// Per row, the i16 pairs `(v[s0][r], v[s1][r])` of two byte tables at
/// `off0` and `off1` (eight rows each) of both groups, widened by `widen`.
///
/// # Safety
/// `a` and `b` must have 8 readable bytes at `off0` and `off1`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn pairs(
    a: *const u8,
    b: *const u8,
    off0: usize,
    off1: usize,
    widen: impl Fn(__m128i) -> __m256i,
) -> __m512i {
    // SAFETY: the caller's contract.
    let half = |u: *const u8| unsafe {
        widen(_mm_unpacklo_epi8(
            _mm_loadl_epi64(u.add(off0) as *const __m128i),
            _mm_loadl_epi64(u.add(off1) as *const __m128i),
        ))
    };
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(half(a)), half(b))
}

/// `w` with bit `pos` of each byte of `bits` set at its bit 4 (`m16` =
/// 0x10 bytes; `w`'s bit 4 is clear): a 16-bit shift by at most 4 never
/// carries a bit across the byte boundary into bit 4, and one
/// `vpternlogd` takes `w | (shifted & m16)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn with_fifth_bit(w: __m512i, bits: __m512i, pos: usize, m16: __m512i) -> __m512i {
    let b = if pos <= 4 {
        _mm512_sll_epi16(bits, _mm_cvtsi32_si128(4 - pos as i32))
    } else {
        _mm512_srl_epi16(bits, _mm_cvtsi32_si128(pos as i32 - 4))
    };
    // Truth table of A | (B & C) over A = 0xf0, B = 0xcc, C = 0xaa.
    _mm512_ternarylogic_epi32::<0xf8>(w, b, m16)
}

/// The blocks every group and activation row holds in full.
pub(super) fn whole_blocks(groups: [&[u8]; 2], x: &[&[u8]; X8_N], unit: usize) -> usize {
    x.iter().fold(
        (groups[0].len() / unit).min(groups[1].len() / unit),
        |m, r| m.min(r.len() / Q8K),
    )
}

/// The Q8_K block sums `2p, 2p + 1` of the block at `bx`, as one i16 pair.
///
/// # Safety
/// `bx` must point at a whole Q8_K block.
#[inline]
pub(super) unsafe fn sum_pair(bx: *const u8, p: usize) -> i32 {
    // SAFETY: block sums (16 x i16) lie at 260.
    unsafe { (bx.add(260 + 4 * p) as *const i32).read_unaligned() }
}

/// Per row lane, `sum_j v_j * sum(x over 32-element sub-block j)` of the
/// Q8_K block at `bx`, where `pairs[p]` holds each row's `(v_2p, v_2p+1)`
/// as i16 pairs (Q4_K's minimums, IQ4_XS's multipliers). Sub-block `2p + h`
/// covers block sums `4p + 2h` and `4p + 2h + 1`.
///
/// # Safety
/// `bx` must point at a whole Q8_K block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn sub_block_dot(pairs: &[__m512i; 4], bx: *const u8) -> __m512i {
    let mut sum = _mm512_setzero_si512();
    for (p, v) in pairs.iter().enumerate() {
        // SAFETY: the caller's contract.
        let (s0, s1) = unsafe { (sum_pair(bx, 2 * p), sum_pair(bx, 2 * p + 1)) };
        let lo = (s0 as i16 as i32 + (s0 >> 16)) as u16 as u32;
        let hi = (s1 as i16 as i32 + (s1 >> 16)) as u16 as u32;
        let x = _mm512_set1_epi32((lo | hi << 16) as i32);
        sum = _mm512_add_epi32(sum, _mm512_madd_epi16(*v, x));
    }
    sum
}

/// Two adjacent eight-row Q4_K groups times [`X8_N`] Q8_K activation rows.
pub fn gemm_q4_kx16(groups: [&[u8]; 2], x: &[&[u8]; X8_N]) -> [[f32; 16]; X8_N] {
    gemm_q45_kx16::<false, Q4K_UNIT>(groups, x)
}

/// Two adjacent eight-row Q5_K groups times [`X8_N`] Q8_K activation rows.
pub fn gemm_q5_kx16(groups: [&[u8]; 2], x: &[&[u8]; X8_N]) -> [[f32; 16]; X8_N] {
    gemm_q45_kx16::<true, Q5K_UNIT>(groups, x)
}

/// The checked entry of [`gemm_q45_kx16_impl`].
fn gemm_q45_kx16<const FIVE: bool, const UNIT: usize>(
    groups: [&[u8]; 2],
    x: &[&[u8]; X8_N],
) -> [[f32; 16]; X8_N] {
    let nb = whole_blocks(groups, x, UNIT);
    // SAFETY: features detected by the kernel table; `nb` whole blocks everywhere.
    unsafe {
        gemm_q45_kx16_impl::<FIVE, UNIT>(
            groups[0].as_ptr(),
            groups[1].as_ptr(),
            std::array::from_fn(|j| x[j].as_ptr()),
            nb,
        )
    }
}

/// Q4_K (`FIVE` false) or Q5_K units of `UNIT` bytes: the Q5_K unit is the
/// Q4_K one followed by the fifth bits (`crate::quant::repack_q5k`), which
/// are ORed in at bit 4 of each value before the products.
///
/// # Safety
/// Call only once the CPU's support for the features named in
/// `target_feature` is known, with `a`, `b` and every row of `x` covering
/// `nb` whole blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn gemm_q45_kx16_impl<const FIVE: bool, const UNIT: usize>(
    a: *const u8,
    b: *const u8,
    x: [*const u8; X8_N],
    nb: usize,
) -> [[f32; 16]; X8_N] {
    super::align_frame!();
    let (m4, m16) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x10));
    let mut acc = [_mm512_setzero_ps(); X8_N];
    super::prefetch_start(b, nb * UNIT);
    for blk in 0..nb {
        // SAFETY: (the whole loop body) unit `blk < nb` of both groups and
        // block `blk` of every activation row exist; offsets are the unit
        // layout's (see `crate::quant::repack`): d, dmin, scales at 32,
        // minimums at 96, nibbles at 160 (and Q5_K's fifth bits after them).
        unsafe {
            let (ua, ub) = (a.add(blk * UNIT), b.add(blk * UNIT));
            let mut fsum = [_mm512_setzero_ps(); X8_N];
            for c in 0..4 {
                // Batched decode reads each unit once: fetch ahead of both
                // groups, a quarter unit per chunk.
                let far = super::far_distance(UNIT, 2048);
                super::prefetch_far_part(ua, UNIT, c, 4, far);
                super::prefetch_far_part(ub, UNIT, c, 4, far);
                let sc0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(join8(ua, ub, 32 + 16 * c)));
                let sc1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(join8(ua, ub, 40 + 16 * c)));
                let mut wl = [_mm512_setzero_si512(); 8];
                let mut wh = [_mm512_setzero_si512(); 8];
                for k in 0..8 {
                    let v = join(ua, ub, 160 + 256 * c + 32 * k);
                    wl[k] = _mm512_and_si512(v, m4);
                    wh[k] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
                }
                if FIVE {
                    for h in 0..2 {
                        let bits = join(ua, ub, Q4K_UNIT + 64 * c + 32 * h);
                        for kk in 0..4 {
                            let k = 4 * h + kk;
                            wl[k] = with_fifth_bit(wl[k], bits, 2 * kk, m16);
                            wh[k] = with_fifth_bit(wh[k], bits, 2 * kk + 1, m16);
                        }
                    }
                }
                // Four activation rows at a time: eight independent
                // `vpdpbusd` chains, enough to hide its latency.
                for (jq, s) in fsum.chunks_exact_mut(4).enumerate() {
                    let q8 = [0, 1, 2, 3].map(|r| x[4 * jq + r].add(blk * Q8K + 4 + 64 * c));
                    let mut lo = [_mm512_setzero_si512(); 4];
                    let mut hi = [_mm512_setzero_si512(); 4];
                    for k in 0..8 {
                        for r in 0..4 {
                            lo[r] = _mm512_dpbusd_epi32(lo[r], wl[k], bcast4(q8[r].add(4 * k)));
                            hi[r] =
                                _mm512_dpbusd_epi32(hi[r], wh[k], bcast4(q8[r].add(32 + 4 * k)));
                        }
                    }
                    for r in 0..4 {
                        s[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo[r]), sc0, s[r]);
                        s[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi[r]), sc1, s[r]);
                    }
                }
            }
            let (d, dmin) = (join_f16(ua, ub, 0), join_f16(ua, ub, 16));
            let mins: [__m512i; 4] = std::array::from_fn(|p| {
                pairs(ua, ub, 96 + 16 * p, 104 + 16 * p, |v| {
                    _mm256_cvtepu8_epi16(v)
                })
            });
            for (j, a) in acc.iter_mut().enumerate() {
                let bx = x[j].add(blk * Q8K);
                let dx = _mm512_set1_ps((bx as *const f32).read_unaligned());
                let msum = sub_block_dot(&mins, bx);
                *a = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), fsum[j], *a);
                *a = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(msum), *a);
            }
        }
    }
    rows16(acc)
}

/// Two adjacent eight-row Q6_K groups times [`X8_N`] Q8_K activation rows.
pub fn gemm_q6_kx16(groups: [&[u8]; 2], x: &[&[u8]; X8_N]) -> [[f32; 16]; X8_N] {
    let nb = whole_blocks(groups, x, Q6K_UNIT);
    // SAFETY: features detected by the kernel table; `nb` whole blocks everywhere.
    unsafe {
        gemm_q6_kx16_impl(
            groups[0].as_ptr(),
            groups[1].as_ptr(),
            std::array::from_fn(|j| x[j].as_ptr()),
            nb,
        )
    }
}

/// # Safety
/// As [`gemm_q4_kx16_impl`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn gemm_q6_kx16_impl(
    a: *const u8,
    b: *const u8,
    x: [*const u8; X8_N],
    nb: usize,
) -> [[f32; 16]; X8_N] {
    super::align_frame!();
    let mut acc = [_mm512_setzero_ps(); X8_N];
    super::prefetch_start(b, nb * Q6K_UNIT);
    for blk in 0..nb {
        // SAFETY: (the whole loop body) unit `blk < nb` of both groups and
        // block `blk` of every activation row exist; offsets are the unit
        // layout's (see `crate::quant::repack_q6k`): d, group scales at 16,
        // values at 144 (column `i` of 32 bytes: group `i / 4`).
        unsafe {
            let (ua, ub) = (a.add(blk * Q6K_UNIT), b.add(blk * Q6K_UNIT));
            let mut fsum = [_mm512_setzero_ps(); X8_N];
            for c in 0..4 {
                // Batched decode reads each unit once: fetch ahead of both
                // groups, a quarter unit per chunk.
                let far = super::far_distance(Q6K_UNIT, 2048);
                super::prefetch_far_part(ua, Q6K_UNIT, c, 4, far);
                super::prefetch_far_part(ub, Q6K_UNIT, c, 4, far);
                // Groups 4c..4c + 4: sixteen columns of four elements.
                let w: [__m512i; 16] =
                    std::array::from_fn(|i| join(ua, ub, 144 + 32 * (16 * c + i)));
                let sc: [__m512; 4] = std::array::from_fn(|g| {
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(join8(ua, ub, 16 + 8 * (4 * c + g))))
                });
                // Four activation rows at a time: independent `vpdpbusd`
                // chains.
                for (jq, s) in fsum.chunks_exact_mut(4).enumerate() {
                    let q8 = [0, 1, 2, 3].map(|r| x[4 * jq + r].add(blk * Q8K + 4 + 64 * c));
                    for g in 0..4 {
                        let mut v = [_mm512_setzero_si512(); 4];
                        for k in 0..4 {
                            for r in 0..4 {
                                v[r] = _mm512_dpbusd_epi32(
                                    v[r],
                                    w[4 * g + k],
                                    bcast4(q8[r].add(16 * g + 4 * k)),
                                );
                            }
                        }
                        for r in 0..4 {
                            s[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v[r]), sc[g], s[r]);
                        }
                    }
                }
            }
            let d = join_f16(ua, ub, 0);
            // Values are stored `q + 32`: take `32 * sum_g sc_g sum(x)` back off.
            let sc_pairs: [__m512i; 8] = std::array::from_fn(|p| {
                pairs(ua, ub, 16 + 16 * p, 24 + 16 * p, |v| {
                    _mm256_cvtepi8_epi16(v)
                })
            });
            for (j, a) in acc.iter_mut().enumerate() {
                let bx = x[j].add(blk * Q8K);
                let dx = _mm512_set1_ps((bx as *const f32).read_unaligned());
                let mut osum = _mm512_setzero_si512();
                for (p, sp) in sc_pairs.iter().enumerate() {
                    let pair = _mm512_set1_epi32(sum_pair(bx, p));
                    osum = _mm512_add_epi32(osum, _mm512_madd_epi16(*sp, pair));
                }
                let off = _mm512_cvtepi32_ps(_mm512_slli_epi32::<5>(osum));
                let total = _mm512_sub_ps(fsum[j], off);
                *a = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), total, *a);
            }
        }
    }
    rows16(acc)
}
