//! AVX-512 element kernels: f16 and bf16 weight dots, the SwiGLU gate and
//! the Q8_0 activation quantizer on 512-bit registers, tails through masked
//! loads instead of scalar loops. Same meaning and checks as the AVX2
//! versions in [`super::avx2`]; the quantizer is bit-exact with the scalar
//! reference.
//!
//! Handed out by [`crate::cpu::Kernels::for_isa`] only after AVX2, FMA,
//! F16C, AVX-512 F/BW/VL and VNNI were detected: the safety condition of
//! every function below.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

/// The lanes of a 16-lane mask for `left` remaining elements.
#[inline]
fn mask16(left: usize) -> __mmask16 {
    if left >= 16 {
        0xffff
    } else {
        ((1u32 << left) - 1) as __mmask16
    }
}

/// f16 weights (little-endian bytes) · f32 activations.
pub fn dot_f16_f32(w: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 2).min(x.len());
    // SAFETY: features detected by the kernel table; `n` elements of each.
    unsafe { dot_half_impl::<false>(&w[..n * 2], &x[..n]) }
}

/// bf16 weights (a bf16 widens by a 16-bit shift) · f32 activations.
pub fn dot_bf16_f32(w: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 2).min(x.len());
    // SAFETY: features detected by the kernel table; `n` elements of each.
    unsafe { dot_half_impl::<true>(&w[..n * 2], &x[..n]) }
}

/// Sixteen halves at `p` (those of `m`; the others 0) widened to f32.
///
/// # Safety
/// The masked lanes of `p` must be readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn widen16<const BF16: bool>(p: *const u8, m: __mmask16) -> __m512 {
    // SAFETY: the caller's contract; masked-off lanes are not read.
    let h = unsafe { _mm256_maskz_loadu_epi16(m, p as *const i16) };
    if BF16 {
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    } else {
        _mm512_cvtph_ps(h)
    }
}

/// # Safety
/// Call only once the CPU's support for the features named in
/// `target_feature` is known, with `w` holding `2 * x.len()` bytes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn dot_half_impl<const BF16: bool>(w: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut i = 0;
    while i + 32 <= n {
        // SAFETY: `i + 32 <= n` elements of `x` and halves of `w`.
        unsafe {
            let x0 = _mm512_loadu_ps(xp.add(i));
            let x1 = _mm512_loadu_ps(xp.add(i + 16));
            a0 = _mm512_fmadd_ps(widen16::<BF16>(wp.add(2 * i), 0xffff), x0, a0);
            a1 = _mm512_fmadd_ps(widen16::<BF16>(wp.add(2 * i + 32), 0xffff), x1, a1);
        }
        i += 32;
    }
    while i < n {
        let m = mask16(n - i);
        // SAFETY: the mask covers only the `n - i` elements left of both slices.
        unsafe {
            let xv = _mm512_maskz_loadu_ps(m, xp.add(i));
            a0 = _mm512_fmadd_ps(widen16::<BF16>(wp.add(2 * i), m), xv, a0);
        }
        i += 16;
    }
    _mm512_reduce_add_ps(_mm512_add_ps(a0, a1))
}

/// SwiGLU gate `gate = silu(gate) * up`, sixteen lanes at a time (the tail
/// zero-padded).
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    // SAFETY: features detected by the kernel table.
    super::chunks_padded::<16>(gate, up, |g, u| unsafe { silu_mul16(g, u) });
}

/// Sixteen lanes of `g * u / (1 + exp(-g))`, written back to `g`.
///
/// # Safety
/// Call only once the CPU's support for the features named in
/// `target_feature` is known.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn silu_mul16(g: &mut [f32; 16], u: &[f32; 16]) {
    // SAFETY: both arrays hold 16 floats.
    let (gv, uv) = unsafe { (_mm512_loadu_ps(g.as_ptr()), _mm512_loadu_ps(u.as_ptr())) };
    let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    let r = _mm512_div_ps(_mm512_mul_ps(gv, uv), _mm512_add_ps(_mm512_set1_ps(1.0), e));
    // SAFETY: as above.
    unsafe { _mm512_storeu_ps(g.as_mut_ptr(), r) };
}

/// GeGLU gate `gate = gelu_tanh(gate) * up`, sixteen lanes at a time
/// (the tail zero-padded).
pub fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    // SAFETY: features detected by the kernel table.
    super::chunks_padded::<16>(gate, up, |g, u| unsafe { gelu_mul16(g, u) });
}

/// Sixteen lanes of `g * u / (1 + exp(-2k(g + c g^3)))`, written back to `g`.
///
/// # Safety
/// As [`silu_mul16`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn gelu_mul16(g: &mut [f32; 16], u: &[f32; 16]) {
    use crate::ops::{GELU_C, GELU_K};
    // SAFETY: both arrays hold 16 floats.
    let (gv, uv) = unsafe { (_mm512_loadu_ps(g.as_ptr()), _mm512_loadu_ps(u.as_ptr())) };
    let g3 = _mm512_mul_ps(_mm512_mul_ps(gv, gv), gv);
    let inner = _mm512_fmadd_ps(_mm512_set1_ps(GELU_C), g3, gv);
    let e = exp16(_mm512_mul_ps(_mm512_set1_ps(-2.0 * GELU_K), inner));
    let r = _mm512_div_ps(_mm512_mul_ps(gv, uv), _mm512_add_ps(_mm512_set1_ps(1.0), e));
    // SAFETY: as above.
    unsafe { _mm512_storeu_ps(g.as_mut_ptr(), r) };
}

/// `exp(x)` per lane: the AVX2 tier's `exp8` (Cephes' range reduction and
/// degree-5 polynomial) on sixteen lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn exp16(x: __m512) -> __m512 {
    use super::exp_poly::EXP_MAX;
    let x = _mm512_min_ps(
        _mm512_max_ps(x, _mm512_set1_ps(-EXP_MAX)),
        _mm512_set1_ps(EXP_MAX),
    );
    let (n, y) = exp_parts(x);
    let pow2 = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    _mm512_mul_ps(y, _mm512_castsi512_ps(pow2))
}

/// [`exp16`] of `x <= 0` (a softmax's `s - max`): the same reduction and
/// polynomial with `2^n` applied by `vscalefps` (no upper clamp, no
/// exponent arithmetic in integers: four instructions fewer), so the same
/// bits wherever the result is a normal float; below that (`x < -87.3`,
/// a weight under 1e-38 of the row's largest) a denormal or 0 where
/// [`exp16`] gives 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn exp16_neg(x: __m512) -> __m512 {
    use super::exp_poly::EXP_MAX;
    // Far below any weight that counts (`2^n` underflows to 0 from here),
    // while `r` stays exact (`-inf` would make it a NaN).
    let (n, y) = exp_parts(_mm512_max_ps(x, _mm512_set1_ps(-2.0 * EXP_MAX)));
    _mm512_scalef_ps(y, n)
}

/// The range reduction and polynomial both exps share: `n = round(x log2
/// e)` and `exp(x - n ln 2)` (with ln 2 split in two, as
/// [`super::exp_poly`] says).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn exp_parts(x: __m512) -> (__m512, __m512) {
    use super::exp_poly::*;
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(P0);
    for c in P {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let y = _mm512_add_ps(
        _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
        _mm512_set1_ps(1.0),
    );
    (n, y)
}

/// Quantizes activations to Q8_0 blocks (`x.len()` a multiple of 32), bit
/// for bit as the scalar reference.
pub fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    let n = (x.len() / 32).min(out.len() / 34);
    // SAFETY: features detected by the kernel table; `n` whole blocks.
    unsafe { quantize_q8_0_impl(&x[..n * 32], &mut out[..n * 34]) }
}

/// # Safety
/// Call only once the CPU's support for the features named in
/// `target_feature` is known, with `out` holding the blocks of `x`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn quantize_q8_0_impl(x: &[f32], out: &mut [u8]) {
    // Sign handling on integer lanes (the float forms need AVX-512DQ).
    let sign_bit = _mm512_set1_epi32(i32::MIN);
    for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(34)) {
        // SAFETY: each chunk holds 32 floats.
        let v = unsafe {
            [
                _mm512_loadu_ps(xb.as_ptr()),
                _mm512_loadu_ps(xb.as_ptr().add(16)),
            ]
        };
        let amax = _mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1]));
        let max = _mm512_reduce_max_ps(amax);
        // The same float steps as the scalar reference.
        let d = max / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        ob[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        let mul = _mm512_set1_ps(id);
        for (k, vk) in v.iter().enumerate() {
            // Round half away from zero, as the reference's `roundf`.
            let s = _mm512_mul_ps(*vk, mul);
            let t = _mm512_add_ps(_mm512_abs_ps(s), _mm512_set1_ps(0.5));
            let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(t);
            let sgn = _mm512_and_si512(_mm512_castps_si512(s), sign_bit);
            let q = _mm512_cvttps_epi32(_mm512_castsi512_ps(_mm512_or_si512(
                _mm512_castps_si512(t),
                sgn,
            )));
            // SAFETY: the block has 32 quant bytes after its scale.
            unsafe {
                _mm_storeu_si128(
                    ob.as_mut_ptr().add(2 + 16 * k) as *mut __m128i,
                    _mm512_cvtsepi32_epi8(q),
                )
            };
        }
    }
}

/// Quantizes activations to Q8_K blocks (`x.len()` a multiple of 256), bit
/// for bit as the scalar reference (`crate::quant::dot::quantize_q8_k_act`):
/// one 512-bit register per sixteen values, so each of a block's sixteen
/// sums is one register's reduction.
pub fn quantize_q8_k(x: &[f32], out: &mut [u8]) {
    // SAFETY: features detected by the kernel table; whole blocks.
    super::q8k_blocks(x, out, |xb, ob| unsafe { quantize_q8_k_block(xb, ob) })
}

/// # Safety
/// Call only once the CPU's support for the features named in
/// `target_feature` is known; `ob` holds one Q8_K block.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn quantize_q8_k_block(xb: &[f32; 256], ob: &mut [u8]) {
    let p = xb.as_ptr();
    let mut amax = _mm512_setzero_ps();
    for g in 0..16 {
        // SAFETY: `xb` holds 256 floats.
        amax = _mm512_max_ps(
            amax,
            _mm512_abs_ps(unsafe { _mm512_loadu_ps(p.add(16 * g)) }),
        );
    }
    let amax = _mm512_reduce_max_ps(amax);
    if amax == 0.0 {
        ob.fill(0);
        return;
    }
    // The reference keeps the sign of the first value of largest magnitude.
    let max = xb.iter().copied().find(|v| v.abs() == amax).unwrap_or(amax);
    let iscale = -127.0f32 / max;
    let (mul, top) = (_mm512_set1_ps(iscale), _mm512_set1_epi32(127));
    let (head, rest) = ob.split_at_mut(4);
    let (qs, bsums) = rest.split_at_mut(256);
    for g in 0..16 {
        // Round half to even (the reference's `nearest_int` under the
        // default rounding mode), capped at 127.
        // SAFETY: `xb` holds 256 floats.
        let v = unsafe { _mm512_loadu_ps(p.add(16 * g)) };
        let q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, mul)), top);
        // SAFETY: `qs` holds 256 bytes.
        unsafe {
            _mm_storeu_si128(
                qs.as_mut_ptr().add(16 * g) as *mut __m128i,
                _mm512_cvtsepi32_epi8(q),
            )
        };
        let sum = _mm512_reduce_add_epi32(q) as i16;
        bsums[2 * g..2 * g + 2].copy_from_slice(&sum.to_le_bytes());
    }
    head.copy_from_slice(&(1.0 / iscale).to_le_bytes());
}

/// The int8 multiply-accumulate peak of one core: `iters` rounds of twelve
/// independent 512-bit `vpdpbusd` (64 products each), `None` without
/// AVX-512 VNNI. Returns a value derived from every accumulator so the
/// loop is not optimized away; the caller times it.
pub fn dpbusd_loop(iters: usize) -> Option<i32> {
    if !crate::cpu::tiers().contains(&crate::cpu::Isa::Avx512) {
        return None;
    }
    // SAFETY: AVX-512 F/BW/VL and VNNI were detected just above.
    Some(unsafe { dpbusd_loop_impl(iters) })
}

/// # Safety
/// Call only once the CPU's support for the features named in
/// `target_feature` is known.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn dpbusd_loop_impl(iters: usize) -> i32 {
    let a = _mm512_set1_epi8(3);
    let b = std::hint::black_box(_mm512_set1_epi8(-2));
    let mut acc = [_mm512_setzero_si512(); 12];
    for _ in 0..iters {
        for s in acc.iter_mut() {
            *s = _mm512_dpbusd_epi32(*s, a, b);
        }
    }
    acc.iter()
        .fold(0i32, |t, s| t.wrapping_add(_mm512_reduce_add_epi32(*s)))
}

#[cfg(test)]
mod tests {
    use std::arch::x86_64::*;

    /// `exp16_neg` gives `exp16`'s bits over a softmax's range wherever the
    /// result is a normal float, something below 1e-37 further down, and 0
    /// at `-inf`.
    #[test]
    fn exp16_neg_is_exp16_for_weights() {
        if !crate::cpu::tiers().contains(&crate::cpu::Isa::Avx512) {
            return;
        }
        let mut xs: Vec<f32> = (0..200_000).map(|i| -(i as f32) * 4.4e-4).collect();
        xs.extend([
            0.0, -0.0, -1e-30, -87.0, -87.3, -87.4, -88.0, -100.0, -1e4, -1e38,
        ]);
        xs.push(f32::NEG_INFINITY);
        for c in xs.chunks(16) {
            let mut x = [0.0f32; 16];
            x[..c.len()].copy_from_slice(c);
            let (mut a, mut b) = ([0.0f32; 16], [0.0f32; 16]);
            // SAFETY: AVX-512 detected above; 16 floats each.
            unsafe {
                let v = _mm512_loadu_ps(x.as_ptr());
                _mm512_storeu_ps(a.as_mut_ptr(), super::exp16(v));
                _mm512_storeu_ps(b.as_mut_ptr(), super::exp16_neg(v));
            }
            for ((&x, &a), &b) in x.iter().zip(&a).zip(&b) {
                if a.is_normal() || a == 1.0 {
                    assert_eq!(a.to_bits(), b.to_bits(), "exp({x}): {a} vs {b}");
                } else {
                    assert!((0.0..1e-37).contains(&b), "exp({x}): {a} vs {b}");
                }
            }
        }
    }
}
