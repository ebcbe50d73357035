//! AVX2 + FMA + F16C kernels (the tier of most x86-64 CPUs since 2013).
//!
//! Each safe wrapper is handed out by [`crate::cpu::Kernels::for_isa`] only
//! after `is_x86_feature_detected!` confirmed AVX2, FMA and F16C, which is
//! the safety condition of every `#[target_feature]` function below.

#![allow(unsafe_code)]

use crate::quant::read_f16;
use std::arch::x86_64::*;

const QK: usize = 32;

/// Q8_0 weights · Q8_0 activations.
pub fn dot_q8_0_q8_0(w: &[u8], x: &[u8]) -> f32 {
    let n = (w.len() / 34).min(x.len() / 34);
    // SAFETY: this function is only reachable through the kernel table,
    // which offers it only when AVX2/FMA/F16C were detected; the inner
    // function reads exactly `n` whole blocks of each slice.
    unsafe { dot_q8_0_q8_0_impl(&w[..n * 34], &x[..n * 34]) }
}

/// Q4_0 weights · Q8_0 activations.
pub fn dot_q4_0_q8_0(w: &[u8], x: &[u8]) -> f32 {
    let n = (w.len() / 18).min(x.len() / 34);
    // SAFETY: as in `dot_q8_0_q8_0`: features detected, `n` whole blocks.
    unsafe { dot_q4_0_q8_0_impl(&w[..n * 18], &x[..n * 34]) }
}

/// f16 weights · f32 activations.
pub fn dot_f16_f32(w: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 2).min(x.len());
    // SAFETY: features detected by the kernel table; `n` elements of each.
    unsafe { dot_f16_f32_impl(&w[..n * 2], &x[..n]) }
}

/// bf16 weights · f32 activations (a bf16 widens by a 16-bit shift).
pub fn dot_bf16_f32(w: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 2).min(x.len());
    // SAFETY: features detected by the kernel table; `n` elements of each.
    unsafe { dot_bf16_f32_impl(&w[..n * 2], &x[..n]) }
}

/// # Safety
/// Call only once the CPU's AVX2, FMA and F16C support is known (the kernel
/// table hands out the safe wrapper only then), with every slice and pointer
/// covering the whole blocks or elements the wrapper checked.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_bf16_f32_impl(w: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    let widen = |h: __m128i| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)));
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n elements remain in both slices.
        unsafe {
            let h0 = _mm_loadu_si128(w.as_ptr().add(2 * i) as *const __m128i);
            let h1 = _mm_loadu_si128(w.as_ptr().add(2 * i + 16) as *const __m128i);
            acc0 = _mm256_fmadd_ps(widen(h0), _mm256_loadu_ps(x.as_ptr().add(i)), acc0);
            acc1 = _mm256_fmadd_ps(widen(h1), _mm256_loadu_ps(x.as_ptr().add(i + 8)), acc1);
        }
        i += 16;
    }
    let mut s = hsum(_mm256_add_ps(acc0, acc1));
    while i < n {
        s += f32::from_bits((u16::from_le_bytes([w[2 * i], w[2 * i + 1]]) as u32) << 16) * x[i];
        i += 1;
    }
    s
}

/// Quantizes activations to Q8_0 blocks (`x.len()` a multiple of 32).
pub fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    let n = (x.len() / QK).min(out.len() / 34);
    // SAFETY: features detected by the kernel table; `n` whole blocks.
    unsafe { quantize_q8_0_impl(&x[..n * QK], &mut out[..n * 34]) }
}

/// Quantizes activations to Q8_K blocks (`x.len()` a multiple of 256),
/// bit for bit as [`crate::quant::dot::quantize_q8_k_act`].
pub fn quantize_q8_k(x: &[f32], out: &mut [u8]) {
    // SAFETY: features detected by the kernel table; whole blocks.
    super::q8k_blocks(x, out, |xb, ob| unsafe { quantize_q8_k_block(xb, ob) })
}

/// # Safety
/// Call only once the CPU's AVX2, FMA and F16C support is known; `ob` holds
/// one Q8_K block.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_q8_k_block(xb: &[f32; 256], ob: &mut [u8]) {
    let sign_bit = _mm256_set1_ps(-0.0);
    let p = xb.as_ptr();
    let mut amax = _mm256_setzero_ps();
    for k in 0..32 {
        // SAFETY: `xb` holds 256 floats.
        let v = unsafe { _mm256_loadu_ps(p.add(8 * k)) };
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v));
    }
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds 8 floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), amax) };
    let amax = lanes.iter().fold(0f32, |m, &v| m.max(v));
    if amax == 0.0 {
        ob.fill(0);
        return;
    }
    // The reference keeps the sign of the first value of largest magnitude.
    let max = xb.iter().copied().find(|v| v.abs() == amax).unwrap_or(amax);
    let iscale = -127.0f32 / max;
    let mul = _mm256_set1_ps(iscale);
    let top = _mm256_set1_epi32(127);
    let (head, rest) = ob.split_at_mut(4);
    let (qs, bsums) = rest.split_at_mut(256);
    for g in 0..16 {
        // Sixteen values: round half to even (the reference's `nearest_int`
        // under the default rounding mode), capped at 127.
        // SAFETY: `xb` holds 256 floats.
        let (a, b) = unsafe {
            (
                _mm256_loadu_ps(p.add(16 * g)),
                _mm256_loadu_ps(p.add(16 * g + 8)),
            )
        };
        let qa = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(a, mul)), top);
        let qb = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(b, mul)), top);
        // Pack i32 -> i16 -> i8 (in range: no saturation); packs interleave
        // 128-bit lanes, so permute back.
        let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(qa, qb));
        let bytes = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
        // SAFETY: `qs` holds 256 bytes.
        unsafe { _mm_storeu_si128(qs.as_mut_ptr().add(16 * g) as *mut __m128i, bytes) };
        let s = _mm256_add_epi32(qa, qb);
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        let sum = _mm_cvtsi128_si32(s) as i16;
        bsums[2 * g..2 * g + 2].copy_from_slice(&sum.to_le_bytes());
    }
    head.copy_from_slice(&(1.0 / iscale).to_le_bytes());
}

/// Sum of the 8 f32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn hsum(v: __m256) -> f32 {
    let lo = _mm256_castps256_ps128(v);
    let hi = _mm256_extractf128_ps(v, 1);
    let s = _mm_add_ps(lo, hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Signed 8-bit dot product of 32 lanes, as 8 f32 partial sums:
/// |x| · sign(x)·y with `maddubs`, then pairs summed with `madd`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn mul_sum_i8(x: __m256i, y: __m256i) -> __m256 {
    let ax = _mm256_sign_epi8(x, x);
    let sy = _mm256_sign_epi8(y, x);
    let dot16 = _mm256_maddubs_epi16(ax, sy);
    let dot32 = _mm256_madd_epi16(dot16, _mm256_set1_epi16(1));
    _mm256_cvtepi32_ps(dot32)
}

/// A little-endian f16 at `b[0..2]` through F16C (two instructions).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn f16c(b: &[u8]) -> f32 {
    let bits = u16::from_le_bytes([b[0], b[1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// The product of one Q8_0-activation block with a weight block given as 32 signed bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn block_q8(qw: __m256i, dw: f32, bx: &[u8], acc: __m256) -> __m256 {
    // SAFETY: a Q8_0 block holds 32 quant bytes after its 2-byte scale.
    let qx = unsafe { _mm256_loadu_si256(bx.as_ptr().add(2) as *const __m256i) };
    _mm256_fmadd_ps(_mm256_set1_ps(dw * f16c(bx)), mul_sum_i8(qw, qx), acc)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q8_0_weights(bw: &[u8]) -> __m256i {
    // SAFETY: each block holds 32 quant bytes after its 2-byte scale.
    unsafe { _mm256_loadu_si256(bw.as_ptr().add(2) as *const __m256i) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_0_weights(bw: &[u8]) -> __m256i {
    // SAFETY: a Q4_0 block holds 16 nibble bytes after its scale.
    let packed = unsafe { _mm_loadu_si128(bw.as_ptr().add(2) as *const __m128i) };
    // Low nibbles are elements 0..16, high nibbles 16..32.
    let both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
    _mm256_sub_epi8(
        _mm256_and_si256(both, _mm256_set1_epi8(0x0f)),
        _mm256_set1_epi8(8),
    )
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5_0_weights(bw: &[u8]) -> __m256i {
    let qh = u32::from_le_bytes([bw[2], bw[3], bw[4], bw[5]]);
    // Byte i of `bits` is 0xFF where bit i of qh is set.
    let shuf = _mm256_setr_epi64x(
        0,
        0x0101_0101_0101_0101,
        0x0202_0202_0202_0202,
        0x0303_0303_0303_0303,
    );
    let spread = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), shuf);
    let bits = _mm256_cmpeq_epi8(
        _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe)),
        _mm256_set1_epi64x(-1),
    );
    // SAFETY: a Q5_0 block holds 16 nibble bytes after its scale and qh.
    let packed = unsafe { _mm_loadu_si128(bw.as_ptr().add(6) as *const __m128i) };
    let both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
    let nib = _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
    // q5 - 16 as i8: the nibble if the fifth bit is set, else nibble - 16 (= nibble | 0xF0).
    _mm256_or_si256(
        nib,
        _mm256_andnot_si256(bits, _mm256_set1_epi8(0xf0u8 as i8)),
    )
}

/// Q5_0 weights · Q8_0 activations.
pub fn dot_q5_0_q8_0(w: &[u8], x: &[u8]) -> f32 {
    let n = (w.len() / 22).min(x.len() / 34);
    // SAFETY: features detected by the kernel table; `n` whole blocks.
    unsafe { dot_q5_0_q8_0_impl(&w[..n * 22], &x[..n * 34]) }
}

/// # Safety
/// Call only once the CPU's AVX2, FMA and F16C support is known (the kernel
/// table hands out the safe wrapper only then), with every slice and pointer
/// covering the whole blocks or elements the wrapper checked.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q5_0_q8_0_impl(w: &[u8], x: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (bw, bx) in w.chunks_exact(22).zip(x.chunks_exact(34)) {
        acc = block_q8(q5_0_weights(bw), f16c(bw), bx, acc);
    }
    hsum(acc)
}

/// # Safety
/// Call only once the CPU's AVX2, FMA and F16C support is known (the kernel
/// table hands out the safe wrapper only then), with every slice and pointer
/// covering the whole blocks or elements the wrapper checked.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q8_0_q8_0_impl(w: &[u8], x: &[u8]) -> f32 {
    // Two independent accumulators (in registers) hide the FMA latency.
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut pw = w.chunks_exact(68);
    let mut px = x.chunks_exact(68);
    for (bw, bx) in (&mut pw).zip(&mut px) {
        acc0 = block_q8(q8_0_weights(bw), f16c(bw), bx, acc0);
        acc1 = block_q8(q8_0_weights(&bw[34..]), f16c(&bw[34..]), &bx[34..], acc1);
    }
    let (rw, rx) = (pw.remainder(), px.remainder());
    if rw.len() == 34 && rx.len() == 34 {
        acc0 = block_q8(q8_0_weights(rw), f16c(rw), rx, acc0);
    }
    hsum(_mm256_add_ps(acc0, acc1))
}

/// # Safety
/// Call only once the CPU's AVX2, FMA and F16C support is known (the kernel
/// table hands out the safe wrapper only then), with every slice and pointer
/// covering the whole blocks or elements the wrapper checked.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_0_q8_0_impl(w: &[u8], x: &[u8]) -> f32 {
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut pw = w.chunks_exact(36);
    let mut px = x.chunks_exact(68);
    for (bw, bx) in (&mut pw).zip(&mut px) {
        acc0 = block_q8(q4_0_weights(bw), f16c(bw), bx, acc0);
        acc1 = block_q8(q4_0_weights(&bw[18..]), f16c(&bw[18..]), &bx[34..], acc1);
    }
    let (rw, rx) = (pw.remainder(), px.remainder());
    if rw.len() == 18 && rx.len() == 34 {
        acc0 = block_q8(q4_0_weights(rw), f16c(rw), rx, acc0);
    }
    hsum(_mm256_add_ps(acc0, acc1))
}

/// # Safety
/// Call only once the CPU's AVX2, FMA and F16C support is known (the kernel
/// table hands out the safe wrapper only then), with every slice and pointer
/// covering the whole blocks or elements the wrapper checked.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_f32_impl(w: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n elements remain in both slices.
        unsafe {
            let h0 = _mm_loadu_si128(w.as_ptr().add(2 * i) as *const __m128i);
            let h1 = _mm_loadu_si128(w.as_ptr().add(2 * i + 16) as *const __m128i);
            acc0 = _mm256_fmadd_ps(
                _mm256_cvtph_ps(h0),
                _mm256_loadu_ps(x.as_ptr().add(i)),
                acc0,
            );
            acc1 = _mm256_fmadd_ps(
                _mm256_cvtph_ps(h1),
                _mm256_loadu_ps(x.as_ptr().add(i + 8)),
                acc1,
            );
        }
        i += 16;
    }
    let mut s = hsum(_mm256_add_ps(acc0, acc1));
    while i < n {
        s += read_f16(&w[2 * i..]) * x[i];
        i += 1;
    }
    s
}

/// # Safety
/// Call only once the CPU's AVX2, FMA and F16C support is known (the kernel
/// table hands out the safe wrapper only then), with every slice and pointer
/// covering the whole blocks or elements the wrapper checked.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_q8_0_impl(x: &[f32], out: &mut [u8]) {
    let sign_bit = _mm256_set1_ps(-0.0);
    for (xb, ob) in x.chunks_exact(QK).zip(out.chunks_exact_mut(34)) {
        // SAFETY: each chunk holds 32 f32 values.
        let v: [__m256; 4] =
            unsafe { std::array::from_fn(|k| _mm256_loadu_ps(xb.as_ptr().add(8 * k))) };
        let mut amax = _mm256_andnot_ps(sign_bit, v[0]);
        for vk in &v[1..] {
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, *vk));
        }
        let m128 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
        let m128 = _mm_max_ps(m128, _mm_movehl_ps(m128, m128));
        let m128 = _mm_max_ss(m128, _mm_movehdup_ps(m128));
        let max = _mm_cvtss_f32(m128);
        let d = max / 127.0;
        // The same float steps as the scalar reference, so both tiers agree bit for bit.
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        ob[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        let mul = _mm256_set1_ps(id);
        // Round half away from zero, as the scalar reference's `roundf`.
        let half_ = _mm256_set1_ps(0.5);
        let r: [__m256i; 4] = std::array::from_fn(|k| {
            let s = _mm256_mul_ps(v[k], mul);
            let sgn = _mm256_and_ps(s, sign_bit);
            let t = _mm256_add_ps(_mm256_andnot_ps(sign_bit, s), half_);
            _mm256_cvttps_epi32(_mm256_or_ps(
                _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC),
                sgn,
            ))
        });
        // Pack i32 -> i16 -> i8; packs interleave 128-bit lanes, so permute back.
        let p01 = _mm256_packs_epi32(r[0], r[1]);
        let p23 = _mm256_packs_epi32(r[2], r[3]);
        let p = _mm256_packs_epi16(p01, p23);
        let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: the block has 32 quant bytes after its scale.
        unsafe { _mm256_storeu_si256(ob.as_mut_ptr().add(2) as *mut __m256i, p) };
    }
}

/// Q4_K weights · Q8_K activations.
pub fn dot_q4_k_q8_k(w: &[u8], x: &[u8]) -> f32 {
    let n = (w.len() / 144).min(x.len() / Q8K);
    // SAFETY: features detected by the kernel table; `n` whole blocks.
    unsafe { dot_q4_k_q8_k_impl(&w[..n * 144], &x[..n * Q8K]) }
}

/// Q6_K weights · Q8_K activations.
pub fn dot_q6_k_q8_k(w: &[u8], x: &[u8]) -> f32 {
    let n = (w.len() / 210).min(x.len() / Q8K);
    // SAFETY: features detected by the kernel table; `n` whole blocks.
    unsafe { dot_q6_k_q8_k_impl(&w[..n * 210], &x[..n * Q8K]) }
}

const Q8K: usize = crate::quant::dot::Q8_K_BYTES;

/// # Safety
/// Call only once the CPU's AVX2, FMA and F16C support is known (the kernel
/// table hands out the safe wrapper only then), with every slice and pointer
/// covering the whole blocks or elements the wrapper checked.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_k_q8_k_impl(w: &[u8], x: &[u8]) -> f32 {
    use crate::quant::dot::q8k_parts;
    use crate::quant::kquants::scale_min_k4;
    let mask = _mm256_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = 0.0f32;
    for (bw, bx) in w.chunks_exact(144).zip(x.chunks_exact(Q8K)) {
        let (dx, q8, bsums) = q8k_parts(bx);
        let d = read_f16(&bw[0..2]) * dx;
        let dmin = read_f16(&bw[2..4]) * dx;
        let scales = &bw[4..16];
        let mut sumi = _mm256_setzero_si256();
        let mut mins = 0i32;
        for c in 0..4 {
            let (sc1, m1) = scale_min_k4(2 * c, scales);
            let (sc2, m2) = scale_min_k4(2 * c + 1, scales);
            mins += m1 as i32 * (bsums[4 * c] + bsums[4 * c + 1])
                + m2 as i32 * (bsums[4 * c + 2] + bsums[4 * c + 3]);
            // SAFETY: 32 nibble bytes per 64-element chunk; 64 quant bytes of activations.
            let (q4, x0, x1) = unsafe {
                (
                    _mm256_loadu_si256(bw.as_ptr().add(16 + 32 * c) as *const __m256i),
                    _mm256_loadu_si256(q8.as_ptr().add(64 * c) as *const __m256i),
                    _mm256_loadu_si256(q8.as_ptr().add(64 * c + 32) as *const __m256i),
                )
            };
            let lo = _mm256_and_si256(q4, mask);
            let hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), mask);
            // Unsigned nibbles times signed activations, pairs summed to i16 (no overflow: 2*15*127).
            let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_set1_epi16(sc1 as i16));
            let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), _mm256_set1_epi16(sc2 as i16));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc_min += dmin * mins as f32;
    }
    hsum(acc) - acc_min
}

/// # Safety
/// Call only once the CPU's AVX2, FMA and F16C support is known (the kernel
/// table hands out the safe wrapper only then), with every slice and pointer
/// covering the whole blocks or elements the wrapper checked.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q6_k_q8_k_impl(w: &[u8], x: &[u8]) -> f32 {
    use crate::quant::dot::q8k_parts;
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(0x03);
    let mut acc = _mm256_setzero_ps();
    let mut acc_offset = 0.0f32;
    for (bw, bx) in w.chunks_exact(210).zip(x.chunks_exact(Q8K)) {
        let (dx, q8, bsums) = q8k_parts(bx);
        let d = read_f16(&bw[208..210]) * dx;
        let sc = &bw[192..208];
        let mut sumi = _mm256_setzero_si256();
        // The -32 offset is applied through the block sums: sum((q6u - 32) * q8) = sum(q6u*q8) - 32*sum(q8).
        let mut offset = 0i32;
        for g in 0..16 {
            offset += (sc[g] as i8 as i32) * bsums[g];
        }
        for h in 0..2 {
            // SAFETY: 64 low-bit bytes and 32 high-bit bytes per 128-element half.
            let (ql0, ql1, qh) = unsafe {
                (
                    _mm256_loadu_si256(bw.as_ptr().add(64 * h) as *const __m256i),
                    _mm256_loadu_si256(bw.as_ptr().add(64 * h + 32) as *const __m256i),
                    _mm256_loadu_si256(bw.as_ptr().add(128 + 32 * h) as *const __m256i),
                )
            };
            let v = [
                _mm256_or_si256(
                    _mm256_and_si256(ql0, m4),
                    _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4),
                ),
            ];
            for (i, vi) in v.iter().enumerate() {
                let g = 8 * h + 2 * i;
                // SAFETY: 32 activation quants for elements 128h + 32i ...
                let xv = unsafe {
                    _mm256_loadu_si256(q8.as_ptr().add(128 * h + 32 * i) as *const __m256i)
                };
                let prod = _mm256_maddubs_epi16(*vi, xv);
                // i16 lanes 0..8 cover group g, lanes 8..16 group g + 1.
                let (sa, sb) = (sc[g] as i8 as i16, sc[g + 1] as i8 as i16);
                let scales = _mm256_setr_epi16(
                    sa, sa, sa, sa, sa, sa, sa, sa, sb, sb, sb, sb, sb, sb, sb, sb,
                );
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, scales));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc_offset += d * (32 * offset) as f32;
    }
    hsum(acc) - acc_offset
}

/// f32 query · f16 K row.
pub fn dot_f32_f16(q: &[f32], k: &[half::f16]) -> f32 {
    let n = q.len().min(k.len());
    // SAFETY: features detected by the kernel table; `n` elements of each.
    unsafe { dot_f16_f32_impl(super::f16_bytes(&k[..n]), &q[..n]) }
}

/// `out += w * v` for an f16 V row.
pub fn axpy_f16(out: &mut [f32], w: f32, v: &[half::f16]) {
    let n = out.len().min(v.len());
    // SAFETY: as in `dot_f32_f16`.
    unsafe { axpy_f16_impl(&mut out[..n], w, super::f16_bytes(&v[..n])) }
}

/// # Safety
/// Call only once the CPU's AVX2, FMA and F16C support is known (the kernel
/// table hands out the safe wrapper only then), with every slice and pointer
/// covering the whole blocks or elements the wrapper checked.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn axpy_f16_impl(out: &mut [f32], w: f32, v: &[u8]) {
    let n = out.len();
    let wv = _mm256_set1_ps(w);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n elements remain in both slices.
        unsafe {
            let h = _mm_loadu_si128(v.as_ptr().add(2 * i) as *const __m128i);
            let o = _mm256_loadu_ps(out.as_ptr().add(i));
            _mm256_storeu_ps(
                out.as_mut_ptr().add(i),
                _mm256_fmadd_ps(wv, _mm256_cvtph_ps(h), o),
            );
        }
        i += 8;
    }
    while i < n {
        out[i] += w * read_f16(&v[2 * i..]);
        i += 1;
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_0_nibbles(bw: &[u8]) -> __m256i {
    // SAFETY: a Q4_0 block holds 16 nibble bytes after its scale.
    let packed = unsafe { _mm_loadu_si128(bw.as_ptr().add(2) as *const __m128i) };
    let both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0f))
}

/// Q5_0 quants as unsigned 0..32 (the stored value before the -16 offset).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5_0_unsigned(bw: &[u8]) -> __m256i {
    // The signed form is `u - 16`; flipping bit 4 and keeping 5 bits gives `u`.
    _mm256_and_si256(
        _mm256_xor_si256(q5_0_weights(bw), _mm256_set1_epi8(0x10)),
        _mm256_set1_epi8(0x1f),
    )
}

/// One (weight block, activation block) product before the weight scale,
/// for weights stored unsigned with an offset `o` subtracted (Q4_0: 8,
/// Q5_0: 16): `ds` holds `-o * d * sum(q) / 8` in each of the 8 lanes that
/// `hsum` adds up.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_unsigned(w: __m256i, qx: __m256i, _ax: __m256i, dx: __m256, ds: __m256) -> __m256 {
    let f = _mm256_cvtepi32_ps(_mm256_madd_epi16(
        _mm256_maddubs_epi16(w, qx),
        _mm256_set1_epi16(1),
    ));
    _mm256_fmadd_ps(dx, f, ds)
}

/// The same for signed weights (Q8_0), with the sign trick on the activation side.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_signed(w: __m256i, qx: __m256i, ax: __m256i, dx: __m256, _ds: __m256) -> __m256 {
    let p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w, qx));
    _mm256_mul_ps(
        dx,
        _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1))),
    )
}

/// Generates a register tile: four weight rows against `$rn` activation
/// rows, each weight block loaded and unpacked once for all `$rn` rows and
/// each activation block once for all four weight rows.
///
/// Unsigned weights (Q4_0, Q5_0, [`pair_unsigned`]) are used as stored
/// (0..16, 0..32) by `maddubs` directly; their offset comes back through the
/// activation block's `ds` term: `sum((w - o) * x) = sum(w * x) - o * sum(x)`.
/// Signed weights (Q8_0, [`pair_signed`]) take the sign trick on the activation side.
macro_rules! tile {
    ($name:ident, $impl_name:ident, $rn:expr, $wbytes:expr, $weights:ident, $pair:ident) => {
        /// Four weight rows times activation rows (see [`tile!`]).
        pub fn $name(w: [&[u8]; 4], x: [Q8Row<'_>; $rn]) -> [[f32; $rn]; 4] {
            let nb = w.iter().fold(usize::MAX, |m, r| m.min(r.len() / $wbytes));
            let nb = x.iter().fold(nb, |m, r| {
                m.min(r.q.len() / 34).min(r.d.len()).min(r.ds.len())
            });
            // SAFETY: features detected by the kernel table; every slice holds `nb` whole blocks.
            unsafe { $impl_name(w.map(|r| &r[..nb * $wbytes]), x, nb) }
        }

        /// # Safety
        /// Call only once the CPU's AVX2, FMA and F16C support is known (the
        /// kernel table hands out the safe wrapper only then), with every
        /// slice and pointer covering the whole blocks or elements the
        /// wrapper checked.
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $impl_name(w: [&[u8]; 4], x: [Q8Row<'_>; $rn], nb: usize) -> [[f32; $rn]; 4] {
            super::align_frame!();
            let mut acc = [[_mm256_setzero_ps(); $rn]; 4];
            for b in 0..nb {
                let mut qx = [_mm256_setzero_si256(); $rn];
                let mut ax = [_mm256_setzero_si256(); $rn];
                let mut dx = [_mm256_setzero_ps(); $rn];
                let mut ds = [_mm256_setzero_ps(); $rn];
                for j in 0..$rn {
                    // SAFETY: block `b < nb` of each activation row exists (checked by the caller).
                    unsafe {
                        qx[j] =
                            _mm256_loadu_si256(x[j].q.as_ptr().add(34 * b + 2) as *const __m256i);
                        dx[j] = _mm256_set1_ps(*x[j].d.get_unchecked(b));
                        ds[j] = _mm256_set1_ps(*x[j].ds.get_unchecked(b));
                    }
                    ax[j] = _mm256_sign_epi8(qx[j], qx[j]);
                }
                for i in 0..4 {
                    // SAFETY: block `b < nb` of each weight row exists.
                    let bw = unsafe { w[i].get_unchecked($wbytes * b..$wbytes * (b + 1)) };
                    let wv = $weights(bw);
                    let dw = _mm256_set1_ps(f16c(bw));
                    for j in 0..$rn {
                        let v = $pair(wv, qx[j], ax[j], dx[j], ds[j]);
                        acc[i][j] = _mm256_fmadd_ps(dw, v, acc[i][j]);
                    }
                }
            }
            let mut out = [[0.0f32; $rn]; 4];
            for i in 0..4 {
                for j in 0..$rn {
                    out[i][j] = hsum(acc[i][j]);
                }
            }
            out
        }
    };
}

use crate::rows::{Q8Row, TILE_N};
tile!(
    tile_q8_0_1,
    tile_q8_0_1_impl,
    1,
    34,
    q8_0_weights,
    pair_signed
);
tile!(
    tile_q8_0_n,
    tile_q8_0_n_impl,
    TILE_N,
    34,
    q8_0_weights,
    pair_signed
);
tile!(
    tile_q4_0_1,
    tile_q4_0_1_impl,
    1,
    18,
    q4_0_nibbles,
    pair_unsigned
);
tile!(
    tile_q4_0_n,
    tile_q4_0_n_impl,
    TILE_N,
    18,
    q4_0_nibbles,
    pair_unsigned
);
tile!(
    tile_q5_0_1,
    tile_q5_0_1_impl,
    1,
    22,
    q5_0_unsigned,
    pair_unsigned
);
tile!(
    tile_q5_0_n,
    tile_q5_0_n_impl,
    TILE_N,
    22,
    q5_0_unsigned,
    pair_unsigned
);

/// SwiGLU gate `gate = silu(gate) * up` with a polynomial `exp`, eight
/// lanes at a time (the tail zero-padded).
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    // SAFETY: features detected by the kernel table.
    super::chunks_padded::<8>(gate, up, |g, u| unsafe { silu_mul8(g, u) });
}

/// Eight lanes of `g * u / (1 + exp(-g))`, written back to `g`.
///
/// # Safety
/// Call only once the CPU's AVX2, FMA and F16C support is known (the kernel
/// table hands out the safe wrapper only then), with every slice and pointer
/// covering the whole blocks or elements the wrapper checked.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn silu_mul8(g: &mut [f32; 8], u: &[f32; 8]) {
    // SAFETY: both arrays hold 8 floats.
    let (gv, uv) = unsafe { (_mm256_loadu_ps(g.as_ptr()), _mm256_loadu_ps(u.as_ptr())) };
    let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
    let r = _mm256_div_ps(_mm256_mul_ps(gv, uv), _mm256_add_ps(_mm256_set1_ps(1.0), e));
    // SAFETY: as above.
    unsafe { _mm256_storeu_ps(g.as_mut_ptr(), r) };
}

/// GeGLU gate `gate = gelu_tanh(gate) * up` with a polynomial `exp`,
/// eight lanes at a time (the tail zero-padded).
pub fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    // SAFETY: features detected by the kernel table.
    super::chunks_padded::<8>(gate, up, |g, u| unsafe { gelu_mul8(g, u) });
}

/// Eight lanes of `g * u / (1 + exp(-2k(g + c g^3)))` (tanh-GELU as a
/// sigmoid), written back to `g`.
///
/// # Safety
/// As [`silu_mul8`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gelu_mul8(g: &mut [f32; 8], u: &[f32; 8]) {
    use crate::ops::{GELU_C, GELU_K};
    // SAFETY: both arrays hold 8 floats.
    let (gv, uv) = unsafe { (_mm256_loadu_ps(g.as_ptr()), _mm256_loadu_ps(u.as_ptr())) };
    let g3 = _mm256_mul_ps(_mm256_mul_ps(gv, gv), gv);
    let inner = _mm256_fmadd_ps(_mm256_set1_ps(GELU_C), g3, gv);
    let e = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0 * GELU_K), inner));
    let r = _mm256_div_ps(_mm256_mul_ps(gv, uv), _mm256_add_ps(_mm256_set1_ps(1.0), e));
    // SAFETY: as above.
    unsafe { _mm256_storeu_ps(g.as_mut_ptr(), r) };
}

/// `exp(x)` per lane (Cephes' range reduction and degree-5 polynomial,
/// within a few ulp); arguments are clamped to about ±88.38, so large ones
/// give the largest finite result instead of infinity and small ones 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn exp8(x: __m256) -> __m256 {
    use super::exp_poly::*;
    let x = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(-EXP_MAX)),
        _mm256_set1_ps(EXP_MAX),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    // x - n ln 2, with ln 2 split in two so the product is exact.
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(P0);
    for c in P {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let y = _mm256_add_ps(
        _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
        _mm256_set1_ps(1.0),
    );
    // 2^n through the exponent field (n in [-127, 127]; -127 gives 0).
    let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    _mm256_mul_ps(y, _mm256_castsi256_ps(pow2))
}
