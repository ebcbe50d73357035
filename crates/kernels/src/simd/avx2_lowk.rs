//! AVX2 one-row dots of the 2- and 3-bit k-quants (Q2_K, Q3_K) with Q8_K
//! activations (the AVX-512 tier uses them too). Each 32-byte load of
//! `qs` holds four shifts of 32 two-bit values; one shift is two 16-element
//! sub-blocks, whose products `maddubs` sums to i16 lanes 0-7 and 8-15,
//! then `madd` weights by the two sub-blocks' scales (picked from a
//! register by a byte shuffle). Q3_K's third bit comes from `hmask`, its
//! `- 4` folded into a second product (4 where the bit is clear); Q2_K's
//! minimums are applied through the activation block sums.
//!
//! Handed out by [`crate::cpu::Kernels::for_isa`] only after AVX2, FMA and
//! F16C were detected: the safety condition of the functions below.

#![allow(unsafe_code)]

use super::avx2::f16c;
use super::prefetch_ahead;
use crate::quant::dot::Q8_K_BYTES as Q8K;
use crate::quant::lowk::{Q2_K_BYTES, Q3_K_BYTES};
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

/// `w` and each row of `x` cut to the blocks all of them have whole
/// (`wb` bytes per weight block, a Q8_K block per activation block).
fn whole_blocks<'a>(w: &'a [u8], x: [&'a [u8]; 4], wb: usize) -> (&'a [u8], [&'a [u8]; 4]) {
    let n = x.iter().fold(w.len() / wb, |n, r| n.min(r.len() / Q8K));
    (&w[..n * wb], x.map(|r| &r[..n * Q8K]))
}

/// Q2_K · four Q8_K rows, each weight block unpacked once.
pub fn dot4_q2_k_q8_k(w: &[u8], x: [&[u8]; 4]) -> [f32; 4] {
    let (w, x) = whole_blocks(w, x, Q2_K_BYTES);
    // SAFETY: features detected by the kernel table; whole blocks of each.
    unsafe { dot4_impl::<false>(w, x) }
}

/// Q3_K · four Q8_K rows, each weight block unpacked once.
pub fn dot4_q3_k_q8_k(w: &[u8], x: [&[u8]; 4]) -> [f32; 4] {
    let (w, x) = whole_blocks(w, x, Q3_K_BYTES);
    // SAFETY: features detected by the kernel table; whole blocks of each.
    unsafe { dot4_impl::<true>(w, x) }
}

/// One weight block of either type, unpacked: the eight 32-value vectors
/// (unsigned, Q3_K's as `q3 + 4` in 0..8), their eight scale-pair vectors,
/// the block sums' weights (Q2_K: its minimums; Q3_K: `4 * sc`, the
/// offset) and the two super-block scales (`dmin` 0 for Q3_K).
struct Unpacked {
    v: [__m256i; 8],
    sc: [__m256i; 8],
    sums_by: __m256i,
    d: f32,
    dmin: f32,
}

/// Unpacks one block (`$bw`, of Q3_K if `$q3` else Q2_K) into an
/// [`Unpacked`], `$pairs` deciding whether the scale-pair vectors are
/// built. A macro, not a function: it must be inlined into kernels of
/// either tier, and a call returning the struct through memory stalls
/// each later 512-bit read of it on store forwarding.
macro_rules! unpack {
    ($bw:expr, $q3:expr, $pairs:expr) => {{
        let bw: &[u8] = $bw;
        let (m3, one, m4) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1), _mm_set1_epi8(0xf));
        let (scales, sums_by, qs_at, d, dmin);
        if $q3 {
            let s16 = _mm256_cvtepi8_epi16(q3_scales_v(&bw[96..108]));
            scales = halves(s16);
            sums_by = _mm256_slli_epi16(s16, 2);
            qs_at = 32;
            d = f16c(&bw[108..110]);
            dmin = 0.0;
        } else {
            // SAFETY: the block's 16 scale bytes.
            let s8 = unsafe { _mm_loadu_si128(bw.as_ptr() as *const __m128i) };
            scales = halves(_mm256_cvtepu8_epi16(_mm_and_si128(s8, m4)));
            sums_by = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), m4));
            qs_at = 16;
            d = f16c(&bw[80..82]);
            dmin = f16c(&bw[82..84]);
        }
        // SAFETY: Q3_K's 32 `hmask` bytes (unused for Q2_K).
        let hm = unsafe { _mm256_loadu_si256(bw.as_ptr() as *const __m256i) };
        let mut v = [_mm256_setzero_si256(); 8];
        let mut sc = [_mm256_setzero_si256(); 8];
        for h in 0..2 {
            // SAFETY: 32 of the block's 64 `qs` bytes.
            let q =
                unsafe { _mm256_loadu_si256(bw.as_ptr().add(qs_at + 32 * h) as *const __m256i) };
            for s in 0..4 {
                let mut vs =
                    _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * s as i32)), m3);
                if $q3 {
                    let bit = _mm256_and_si256(
                        _mm256_srl_epi16(hm, _mm_cvtsi32_si128((4 * h + s) as i32)),
                        one,
                    );
                    vs = _mm256_or_si256(vs, _mm256_slli_epi16(bit, 2));
                }
                v[4 * h + s] = vs;
                if $pairs {
                    // SAFETY: the mask's 32 bytes.
                    let mask = unsafe { _mm256_loadu_si256(PAIR[s].as_ptr() as *const __m256i) };
                    sc[4 * h + s] = _mm256_shuffle_epi8(scales[h], mask);
                }
            }
        }
        Unpacked {
            v,
            sc,
            sums_by,
            d,
            dmin,
        }
    }};
}

/// # Safety
/// AVX2, FMA and F16C are available; `w` and every `x[r]` hold the same
/// number of whole weight (Q3_K if `Q3`, else Q2_K) and Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot4_impl<const Q3: bool>(w: &[u8], x: [&[u8]; 4]) -> [f32; 4] {
    let wb = if Q3 { Q3_K_BYTES } else { Q2_K_BYTES };
    let mut acc = [_mm256_setzero_ps(); 4];
    for (b, bw) in w.chunks_exact(wb).enumerate() {
        let u = unpack!(bw, Q3, true);
        for r in 0..4 {
            let bx = &x[r][b * Q8K..(b + 1) * Q8K];
            let dx = f32::from_le_bytes([bx[0], bx[1], bx[2], bx[3]]);
            let mut sumi = _mm256_setzero_si256();
            for k in 0..8 {
                // SAFETY: 32 activation quants of elements 32k ...
                let xv =
                    unsafe { _mm256_loadu_si256(bx.as_ptr().add(4 + 32 * k) as *const __m256i) };
                let prod = _mm256_maddubs_epi16(u.v[k], xv);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, u.sc[k]));
            }
            // SAFETY: `bx` is a whole Q8_K block.
            let sums = _mm256_madd_epi16(u.sums_by, unsafe { bsums(bx) });
            // Q3_K: d * (sum(q3u * q8 * sc) - sum(4 sc * bsum)); Q2_K: d * ... - dmin * sum(m * bsum).
            let (ds, dm) = if Q3 {
                (u.d * dx, u.d * dx)
            } else {
                (u.d * dx, u.dmin * dx)
            };
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(ds), _mm256_cvtepi32_ps(sumi), acc[r]);
            acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(dm), _mm256_cvtepi32_ps(sums), acc[r]);
        }
    }
    let mut out = [0.0f32; 4];
    for (o, a) in out.iter_mut().zip(acc) {
        *o = hsum(a);
    }
    out
}

/// The AVX-512 VNNI tier's [`dot4_q2_k_q8_k`]: `vpdpbusd` sums four
/// products per i32 lane over 64 values at a time, and each lane's
/// sub-block scale is applied in f32.
pub fn dot4_q2_k_q8_k_vnni(w: &[u8], x: [&[u8]; 4]) -> [f32; 4] {
    let (w, x) = whole_blocks(w, x, Q2_K_BYTES);
    // SAFETY: handed out by the kernel table only after AVX-512 F/BW/VL/VNNI
    // were detected; whole blocks of each.
    unsafe { dot4_vnni::<false>(w, x) }
}

/// The AVX-512 VNNI tier's [`dot4_q3_k_q8_k`].
pub fn dot4_q3_k_q8_k_vnni(w: &[u8], x: [&[u8]; 4]) -> [f32; 4] {
    let (w, x) = whole_blocks(w, x, Q3_K_BYTES);
    // SAFETY: as in `dot4_q2_k_q8_k_vnni`.
    unsafe { dot4_vnni::<true>(w, x) }
}

/// # Safety
/// AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI are available; `w` and every
/// `x[r]` hold the same number of whole weight (Q3_K if `Q3`, else Q2_K)
/// and Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn dot4_vnni<const Q3: bool>(w: &[u8], x: [&[u8]; 4]) -> [f32; 4] {
    let wb = if Q3 { Q3_K_BYTES } else { Q2_K_BYTES };
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut acc_sums = [_mm256_setzero_ps(); 4];
    for (b, bw) in w.chunks_exact(wb).enumerate() {
        let u = unpack!(bw, Q3, false);
        // Values 64c..64c + 64 in one register; lane j (four values) is in
        // sub-block 4c + j / 4, whose scale (times d) multiplies it.
        // (Loops, not closures: a closure would not inherit the target
        // features, and each intrinsic in it would become a call.)
        let mut v = [_mm512_setzero_si512(); 4];
        for (c, vc) in v.iter_mut().enumerate() {
            *vc = _mm512_inserti64x4(_mm512_castsi256_si512(u.v[2 * c]), u.v[2 * c + 1], 1);
        }
        let sc8 = if Q3 {
            q3_scales_v(&bw[96..108])
        } else {
            // SAFETY: the block's 16 scale bytes.
            _mm_and_si128(
                unsafe { _mm_loadu_si128(bw.as_ptr() as *const __m128i) },
                _mm_set1_epi8(0xf),
            )
        };
        let scf = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)),
            _mm512_set1_ps(u.d),
        );
        let mut lane_scales = [_mm512_setzero_ps(); 4];
        let quarter = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
        for (c, ls) in lane_scales.iter_mut().enumerate() {
            let idx = _mm512_add_epi32(quarter, _mm512_set1_epi32(4 * c as i32));
            *ls = _mm512_permutexvar_ps(idx, scf);
        }
        // Q2_K: the scale times the value (at most 15 * 3) still fits a
        // byte, so the scales go into the weights once per block and each
        // row needs one integer sum.
        let mut scaled = [_mm512_setzero_si512(); 4];
        if !Q3 {
            // SAFETY: the 16 scale bytes.
            let sc = _mm512_broadcast_i32x4(_mm_and_si128(
                unsafe { _mm_loadu_si128(bw.as_ptr() as *const __m128i) },
                _mm_set1_epi8(0xf),
            ));
            let sc2 = _mm512_add_epi8(sc, sc);
            for (c, sv) in scaled.iter_mut().enumerate() {
                // 128-bit lane k holds sub-block 4c + k: its scale in every byte.
                let c4 = 4 * c as i8;
                let idx = _mm512_set_epi8(
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 3,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 2,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4 + 1,
                    c4,
                    c4,
                    c4,
                    c4,
                    c4,
                    c4,
                    c4,
                    c4,
                    c4,
                    c4,
                    c4,
                    c4,
                    c4,
                    c4,
                    c4,
                    c4,
                );
                let (s1, s2) = (_mm512_shuffle_epi8(sc, idx), _mm512_shuffle_epi8(sc2, idx));
                let k1 = _mm512_test_epi8_mask(v[c], _mm512_set1_epi8(1));
                let k2 = _mm512_test_epi8_mask(v[c], _mm512_set1_epi8(2));
                *sv = _mm512_add_epi8(_mm512_maskz_mov_epi8(k1, s1), _mm512_maskz_mov_epi8(k2, s2));
            }
        }
        for r in 0..4 {
            let bx = &x[r][b * Q8K..(b + 1) * Q8K];
            let dx = f32::from_le_bytes([bx[0], bx[1], bx[2], bx[3]]);
            if Q3 {
                let mut f = _mm512_setzero_ps();
                for c in 0..4 {
                    // SAFETY: 64 activation quants of elements 64c ...
                    let xv = unsafe { _mm512_loadu_si512(bx.as_ptr().add(4 + 64 * c) as *const _) };
                    let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[c], xv);
                    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), lane_scales[c], f);
                }
                acc[r] = _mm512_fmadd_ps(f, _mm512_set1_ps(dx), acc[r]);
            } else {
                let mut p = _mm512_setzero_si512();
                for (c, sv) in scaled.iter().enumerate() {
                    // SAFETY: 64 activation quants of elements 64c ...
                    let xv = unsafe { _mm512_loadu_si512(bx.as_ptr().add(4 + 64 * c) as *const _) };
                    p = _mm512_dpbusd_epi32(p, *sv, xv);
                }
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(u.d * dx), acc[r]);
            }
            // SAFETY: `bx` is a whole Q8_K block.
            let sums = _mm256_madd_epi16(u.sums_by, unsafe { bsums(bx) });
            let dm = if Q3 { u.d * dx } else { u.dmin * dx };
            acc_sums[r] =
                _mm256_fmadd_ps(_mm256_set1_ps(dm), _mm256_cvtepi32_ps(sums), acc_sums[r]);
        }
    }
    let mut out = [0.0f32; 4];
    for (r, o) in out.iter_mut().enumerate() {
        *o = _mm512_reduce_add_ps(acc[r]) - hsum(acc_sums[r]);
    }
    out
}

/// The AVX-512 tier's one-row [`dot_q3_k_q8_k`], 64 consecutive values a
/// step (one activation load): a `qs` half broadcast to both register
/// halves gives two shifts at once, the high bit comes from a byte test
/// of `hmask` as `+ 4`, and the block's `- 4` is taken off through the
/// activation block sums.
pub fn dot_q3_k_q8_k_avx512(w: &[u8], x: &[u8]) -> f32 {
    let n = (w.len() / Q3_K_BYTES).min(x.len() / Q8K);
    // SAFETY: handed out by the kernel table only after AVX-512 F/BW/VL
    // (and AVX2, FMA, F16C) were detected; `n` whole blocks.
    unsafe { dot_q3_k_512(&w[..n * Q3_K_BYTES], &x[..n * Q8K]) }
}

/// # Safety
/// AVX2, FMA, F16C and AVX-512 F/BW/VL are available; `w` and `x` hold
/// the same number of whole Q3_K and Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn dot_q3_k_512(w: &[u8], x: &[u8]) -> f32 {
    let (m3, four) = (_mm512_set1_epi8(3), _mm512_set1_epi8(4));
    // Step c covers elements 64c..64c + 64: in `qs` half c / 2, shifts
    // 2 (c % 2) and 2 (c % 2) + 1; in `hmask` bits 4 (c / 2) + 2 (c % 2)
    // and the next.
    let mut bit = [_mm512_setzero_si512(); 4];
    for (c, b) in bit.iter_mut().enumerate() {
        let lo = 4 * (c / 2) + 2 * (c % 2);
        *b = _mm512_inserti64x4(
            _mm512_set1_epi8((1u8 << lo) as i8),
            _mm256_set1_epi8((1u8 << (lo + 1)) as i8),
            1,
        );
    }
    let shift = shift_counts();
    let mut acc = _mm512_setzero_ps();
    for (bw, bx) in w.chunks_exact(Q3_K_BYTES).zip(x.chunks_exact(Q8K)) {
        prefetch_ahead(bw.as_ptr(), bw.len());
        let dx = f32::from_le_bytes([bx[0], bx[1], bx[2], bx[3]]);
        let sc16 = _mm256_cvtepi8_epi16(q3_scales_v(&bw[96..108]));
        let sc512 = _mm512_zextsi256_si512(sc16);
        // SAFETY: the block's 32 `hmask` bytes and 64 `qs` bytes, each
        // 32-byte half in both halves of a register.
        let (hm, q) = unsafe {
            let p = bw.as_ptr() as *const __m256i;
            (
                _mm512_broadcast_i64x4(_mm256_loadu_si256(p)),
                [
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(1))),
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(2))),
                ],
            )
        };
        let q8 = bx.as_ptr().wrapping_add(4);
        let mut sumi = _mm512_setzero_si512();
        for c in 0..4 {
            let low = _mm512_and_si512(_mm512_srlv_epi16(q[c / 2], shift[c % 2]), m3);
            let v = _mm512_mask_add_epi8(low, _mm512_test_epi8_mask(hm, bit[c]), low, four);
            // SAFETY: 64 of a whole block's quants.
            let xv = unsafe { _mm512_loadu_si512(q8.add(64 * c) as *const _) };
            let scv = _mm512_permutexvar_epi16(scale_lanes(c), sc512);
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(v, xv), scv));
        }
        // SAFETY: `bx` is a whole Q8_K block.
        let offset = _mm256_madd_epi16(_mm256_slli_epi16(sc16, 2), unsafe { bsums(bx) });
        sumi = _mm512_sub_epi32(sumi, _mm512_zextsi256_si512(offset));
        let d = f16c(&bw[108..110]) * dx;
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    _mm512_reduce_add_ps(acc)
}

/// The AVX-512 tier's one-row [`dot_q2_k_q8_k`], 64 consecutive values a
/// step (as [`dot_q3_k_q8_k_avx512`], without the high bit); the
/// minimums are applied through the activation block sums.
pub fn dot_q2_k_q8_k_avx512(w: &[u8], x: &[u8]) -> f32 {
    let n = (w.len() / Q2_K_BYTES).min(x.len() / Q8K);
    // SAFETY: as in `dot_q3_k_q8_k_avx512`.
    unsafe { dot_q2_k_512(&w[..n * Q2_K_BYTES], &x[..n * Q8K]) }
}

/// Which sub-block's scale each i16 product lane of step `c` (elements
/// 64c..64c + 64) takes: `4c + lane / 8` (a table, so that no call
/// builds it).
static SCALE_LANES: [[i16; 32]; 4] = {
    let mut t = [[0i16; 32]; 4];
    let mut c = 0;
    while c < 4 {
        let mut j = 0;
        while j < 32 {
            t[c][j] = (4 * c + j / 8) as i16;
            j += 1;
        }
        c += 1;
    }
    t
};

/// Step `c`'s scale-lane vector (see [`SCALE_LANES`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn scale_lanes(c: usize) -> __m512i {
    // SAFETY: a row of the table holds 32 i16.
    unsafe { _mm512_loadu_si512(SCALE_LANES[c].as_ptr() as *const _) }
}

/// Per-i16-lane shift counts taking, from a `qs` half broadcast to both
/// register halves, shift `2p` into the low half and `2p + 1` into the
/// high half (elements 64c.. for `c % 2 == p`), as 2-bit fields.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn shift_counts() -> [__m512i; 2] {
    [0, 1]
        .map(|p: i16| _mm512_inserti64x4(_mm512_set1_epi16(4 * p), _mm256_set1_epi16(4 * p + 2), 1))
}

/// # Safety
/// AVX2, FMA, F16C and AVX-512 F/BW/VL are available; `w` and `x` hold
/// the same number of whole Q2_K and Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn dot_q2_k_512(w: &[u8], x: &[u8]) -> f32 {
    let (m3, m4) = (_mm512_set1_epi8(3), _mm_set1_epi8(0xf));
    let shift = shift_counts();
    let mut acc = _mm512_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for (bw, bx) in w.chunks_exact(Q2_K_BYTES).zip(x.chunks_exact(Q8K)) {
        prefetch_ahead(bw.as_ptr(), bw.len());
        let dx = f32::from_le_bytes([bx[0], bx[1], bx[2], bx[3]]);
        // SAFETY: the block's 16 scale bytes and 64 `qs` bytes, each
        // 32-byte half in both halves of a register.
        let (sc8, q) = unsafe {
            let p = bw.as_ptr().add(16) as *const __m256i;
            (
                _mm_loadu_si128(bw.as_ptr() as *const __m128i),
                [
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(p)),
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(1))),
                ],
            )
        };
        let sc512 = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sc8, m4)));
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
        let q8 = bx.as_ptr().wrapping_add(4);
        let mut sumi = _mm512_setzero_si512();
        for c in 0..4 {
            let v = _mm512_and_si512(_mm512_srlv_epi16(q[c / 2], shift[c % 2]), m3);
            // SAFETY: 64 of a whole block's quants.
            let xv = unsafe { _mm512_loadu_si512(q8.add(64 * c) as *const _) };
            let scv = _mm512_permutexvar_epi16(scale_lanes(c), sc512);
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(v, xv), scv));
        }
        // SAFETY: `bx` is a whole Q8_K block.
        let summ = _mm256_madd_epi16(mins, unsafe { bsums(bx) });
        let (d, dmin) = (f16c(&bw[80..82]) * dx, f16c(&bw[82..84]) * dx);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
        acc_min = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(summ), acc_min);
    }
    _mm512_reduce_add_ps(acc) - hsum(acc_min)
}

/// Q3_K's sixteen 6-bit scales minus 32, as i8 lanes: the bit layout of
/// [`crate::quant::lowk::q3_scales`] computed in four general registers and moved in whole,
/// not sixteen byte stores read back by a vector load (which stalls on
/// store forwarding once per block).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q3_scales_v(packed: &[u8]) -> __m128i {
    const K1: u32 = 0x0303_0303;
    const K2: u32 = 0x0f0f_0f0f;
    let word =
        |i: usize| u32::from_le_bytes([packed[i], packed[i + 1], packed[i + 2], packed[i + 3]]);
    let (a0, a1, a2) = (word(0), word(4), word(8));
    let v = _mm_setr_epi32(
        ((a0 & K2) | ((a2 & K1) << 4)) as i32,
        ((a1 & K2) | (((a2 >> 2) & K1) << 4)) as i32,
        (((a0 >> 4) & K2) | (((a2 >> 4) & K1) << 4)) as i32,
        (((a1 >> 4) & K2) | (((a2 >> 6) & K1) << 4)) as i32,
    );
    _mm_sub_epi8(v, _mm_set1_epi8(32))
}

/// Sum of the eight f32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// `_mm256_shuffle_epi8` masks that, from eight i16 scales repeated in
/// both 128-bit lanes, give lanes 0-7 scale `2s` and lanes 8-15 scale
/// `2s + 1`: the two sub-blocks of shift `s`.
const PAIR: [[u8; 32]; 4] = {
    let mut m = [[0u8; 32]; 4];
    let mut s = 0;
    while s < 4 {
        let mut i = 0;
        while i < 16 {
            m[s][i] = (4 * s + i % 2) as u8;
            m[s][16 + i] = (4 * s + 2 + i % 2) as u8;
            i += 1;
        }
        s += 1;
    }
    m
};

/// The sixteen i16 of `v16` as two vectors, each one half's eight scales
/// repeated in both 128-bit lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn halves(v16: __m256i) -> [__m256i; 2] {
    let (lo, hi) = (
        _mm256_castsi256_si128(v16),
        _mm256_extracti128_si256(v16, 1),
    );
    [
        _mm256_inserti128_si256(_mm256_castsi128_si256(lo), lo, 1),
        _mm256_inserti128_si256(_mm256_castsi128_si256(hi), hi, 1),
    ]
}

/// The block's 16 i16 activation sums (Q8_K `bsums`).
///
/// # Safety
/// `bx` is a whole Q8_K block; AVX2 is available.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bsums(bx: &[u8]) -> __m256i {
    // SAFETY: the 32 bytes after `d` and the 256 quants.
    unsafe { _mm256_loadu_si256(bx.as_ptr().add(4 + 256) as *const __m256i) }
}

/// # Safety
/// AVX2, FMA and F16C are available; `w` and `x` hold the same number of
/// whole Q2_K and Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q2_k_impl(w: &[u8], x: &[u8]) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0xf);
    let mut acc = _mm256_setzero_ps();
    for (bw, bx) in w.chunks_exact(Q2_K_BYTES).zip(x.chunks_exact(Q8K)) {
        prefetch_ahead(bw.as_ptr(), bw.len());
        let dx = f32::from_le_bytes([bx[0], bx[1], bx[2], bx[3]]);
        let q8 = &bx[4..];
        // SAFETY: the block's 16 scale bytes.
        let sc8 = unsafe { _mm_loadu_si128(bw.as_ptr() as *const __m128i) };
        let scales = halves(_mm256_cvtepu8_epi16(_mm_and_si128(sc8, m4)));
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
        // SAFETY: `bx` is a whole Q8_K block.
        let summ = _mm256_madd_epi16(mins, unsafe { bsums(bx) });
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            // SAFETY: 32 of the block's 64 `qs` bytes.
            let q = unsafe { _mm256_loadu_si256(bw.as_ptr().add(16 + 32 * h) as *const __m256i) };
            let v = [
                _mm256_and_si256(q, m3),
                _mm256_and_si256(_mm256_srli_epi16(q, 2), m3),
                _mm256_and_si256(_mm256_srli_epi16(q, 4), m3),
                _mm256_and_si256(_mm256_srli_epi16(q, 6), m3),
            ];
            for (s, vs) in v.iter().enumerate() {
                // SAFETY: 32 activation quants of elements 128h + 32s ...; the mask's 32 bytes.
                let (xv, mask) = unsafe {
                    (
                        _mm256_loadu_si256(q8.as_ptr().add(128 * h + 32 * s) as *const __m256i),
                        _mm256_loadu_si256(PAIR[s].as_ptr() as *const __m256i),
                    )
                };
                let prod = _mm256_maddubs_epi16(*vs, xv);
                let sc = _mm256_shuffle_epi8(scales[h], mask);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, sc));
            }
        }
        let d = f16c(&bw[80..82]) * dx;
        let dmin = f16c(&bw[82..84]) * dx;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc = _mm256_fnmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(summ), acc);
    }
    hsum(acc)
}

/// # Safety
/// AVX2, FMA and F16C are available; `w` and `x` hold the same number of
/// whole Q3_K and Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q3_k_impl(w: &[u8], x: &[u8]) -> f32 {
    let (m3, one) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
    let mut acc = _mm256_setzero_ps();
    for (bw, bx) in w.chunks_exact(Q3_K_BYTES).zip(x.chunks_exact(Q8K)) {
        prefetch_ahead(bw.as_ptr(), bw.len());
        let dx = f32::from_le_bytes([bx[0], bx[1], bx[2], bx[3]]);
        let q8 = &bx[4..];
        let sc16 = _mm256_cvtepi8_epi16(q3_scales_v(&bw[96..108]));
        let scales = halves(sc16);
        // SAFETY: the block's 32 `hmask` bytes.
        let hm = unsafe { _mm256_loadu_si256(bw.as_ptr() as *const __m256i) };
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            // SAFETY: 32 of the block's 64 `qs` bytes.
            let q = unsafe { _mm256_loadu_si256(bw.as_ptr().add(32 + 32 * h) as *const __m256i) };
            for s in 0..4 {
                let sh = _mm_cvtsi32_si128(2 * s as i32);
                let low = _mm256_and_si256(_mm256_srl_epi16(q, sh), m3);
                // 4 where the high bit is clear: (low + 4 * bit) - 4 = low - this.
                let clear = _mm256_andnot_si256(
                    _mm256_srl_epi16(hm, _mm_cvtsi32_si128((4 * h + s) as i32)),
                    one,
                );
                let four = _mm256_slli_epi16(clear, 2);
                // SAFETY: 32 activation quants of elements 128h + 32s ...; the mask's 32 bytes.
                let (xv, mask) = unsafe {
                    (
                        _mm256_loadu_si256(q8.as_ptr().add(128 * h + 32 * s) as *const __m256i),
                        _mm256_loadu_si256(PAIR[s].as_ptr() as *const __m256i),
                    )
                };
                let prod = _mm256_sub_epi16(
                    _mm256_maddubs_epi16(low, xv),
                    _mm256_maddubs_epi16(four, xv),
                );
                let scv = _mm256_shuffle_epi8(scales[h], mask);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, scv));
            }
        }
        let d = f16c(&bw[108..110]) * dx;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum(acc)
}
