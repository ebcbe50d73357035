//! AArch64 NEON + dot-product (`SDOT`, ARMv8.2's FEAT_DotProd) kernels:
//! Apple M1 and later, AWS Graviton 2 and later, Ampere Altra, Cortex-A76
//! and later; see below for CPUs without `SDOT`.
//!
//! The eight-row interleaved layouts of [`crate::quant::repack`] fit `SDOT`
//! as they fit AVX2's `maddubs`: a 16-byte load holds four quant bytes of
//! four rows, and one `SDOT` against the activation's four bytes
//! broadcast gives those four rows' partial sums in its four lanes, so the
//! integer sums here are exactly the AVX2 tier's (unsigned 4/5/6-bit
//! values against signed 8-bit activations, the zero offset carried by
//! `ds` or the block sums) and the float steps are the same fused
//! multiply-adds.
//!
//! `SDOT` and the f16 widening `FCVTL` are written as inline assembly
//! (Rust has no stable intrinsic for `SDOT`, and `FCVTL` needs the
//! unstable `f16` type). Every kernel that multiplies bytes comes in two
//! instances: `D = true` uses `SDOT` and is handed out by
//! [`crate::cpu::Kernels::for_isa`] only after
//! `is_aarch64_feature_detected!("dotprod")`; `D = false` computes the same
//! sums with widening multiplies for CPUs without it (Cortex-A72 of the
//! Raspberry Pi 4, A53), the `neon` tier. NEON itself is part of every
//! AArch64 CPU.

#![allow(unsafe_code)]

use crate::quant::read_f16;
use crate::rows::{Q8Row, X8_N};
use std::arch::aarch64::*;
use std::arch::asm;

const QK: usize = 32;

/// `acc + (a . b)` per 32-bit lane over four signed byte products: with
/// `D` the `SDOT` instruction, else its equivalent from widening multiplies
/// and pairwise adds (for AArch64 CPUs without the dot-product extension).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn sdot<const D: bool>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if !D {
        let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
        let hi = vmull_high_s8(a, b);
        return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
    }
    let mut acc = acc;
    // SAFETY: SDOT reads and writes only these registers; kernels
    // instantiated with `D` are handed out only after the dotprod feature
    // was detected.
    unsafe {
        asm!(
            ".arch_extension dotprod",
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// Four IEEE halves (as bits) widened to f32, exactly.
#[inline]
#[target_feature(enable = "neon")]
fn widen_f16(h: uint16x4_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: FCVTL (half to single) is base AArch64 SIMD; registers only.
    unsafe {
        asm!(
            "fcvtl {o:v}.4s, {h:v}.4h",
            o = out(vreg) out,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    out
}

/// Eight little-endian f16 values at `p` as two f32 vectors.
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn load_f16x8(p: *const u8) -> [float32x4_t; 2] {
    // SAFETY: callers pass 16 readable bytes.
    let h = unsafe { vld1q_u16(p as *const u16) };
    [widen_f16(vget_low_u16(h)), widen_f16(vget_high_u16(h))]
}

/// Four bytes at `q` repeated in the four lanes.
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn bcast4(q: *const u8) -> int8x16_t {
    // SAFETY: callers pass 4 readable bytes.
    vreinterpretq_s8_s32(vdupq_n_s32(unsafe { (q as *const i32).read_unaligned() }))
}

/// Quantizes activations to Q8_0 blocks, bit-exact with the reference
/// (`round` half away from zero is `FCVTAS`).
pub fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    let n = (x.len() / QK).min(out.len() / 34);
    // SAFETY: NEON is part of every AArch64 CPU; `n` whole blocks.
    unsafe { quantize_q8_0_impl(&x[..n * QK], &mut out[..n * 34]) }
}

/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[target_feature(enable = "neon")]
unsafe fn quantize_q8_0_impl(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(QK).zip(out.chunks_exact_mut(34)) {
        // SAFETY: `xb` holds 32 floats.
        let v: [float32x4_t; 8] =
            std::array::from_fn(|i| unsafe { vld1q_f32(xb.as_ptr().add(4 * i)) });
        let mut m = vabsq_f32(v[0]);
        for vi in &v[1..] {
            m = vmaxq_f32(m, vabsq_f32(*vi));
        }
        let d = vmaxvq_f32(m) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        ob[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        let mut q = [0i8; 32];
        for i in 0..4 {
            let a = vcvtaq_s32_f32(vmulq_n_f32(v[2 * i], id));
            let b = vcvtaq_s32_f32(vmulq_n_f32(v[2 * i + 1], id));
            let h = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
            // SAFETY: 8 bytes at 8i of the 32.
            unsafe { vst1_s8(q.as_mut_ptr().add(8 * i), vqmovn_s16(h)) };
        }
        for (o, &v) in ob[2..].iter_mut().zip(&q) {
            *o = v as u8;
        }
    }
}

/// Q8_0 weights · Q8_0 activations (`D`: with `SDOT`).
pub fn dot_q8_0_q8_0<const D: bool>(w: &[u8], x: &[u8]) -> f32 {
    let n = (w.len() / 34).min(x.len() / 34);
    // SAFETY: the kernel table hands out `D` only with dotprod detected; `n` whole blocks.
    unsafe { dot_q_q8_0_impl::<34, D>(&w[..n * 34], &x[..n * 34]) }
}

/// Q4_0 weights · Q8_0 activations (`D`: with `SDOT`).
pub fn dot_q4_0_q8_0<const D: bool>(w: &[u8], x: &[u8]) -> f32 {
    let n = (w.len() / 18).min(x.len() / 34);
    // SAFETY: as above.
    unsafe { dot_q_q8_0_impl::<18, D>(&w[..n * 18], &x[..n * 34]) }
}

/// One weight row (Q8_0 blocks of 34 bytes or Q4_0 of 18) times a Q8_0 row.
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[target_feature(enable = "neon")]
unsafe fn dot_q_q8_0_impl<const WB: usize, const D: bool>(w: &[u8], x: &[u8]) -> f32 {
    let mut acc = vdupq_n_f32(0.0);
    for (bw, bx) in w.chunks_exact(WB).zip(x.chunks_exact(34)) {
        // SAFETY: a Q8_0 block holds 32 quant bytes after its scale.
        let (x0, x1) = unsafe {
            (
                vld1q_s8(bx.as_ptr().add(2) as *const i8),
                vld1q_s8(bx.as_ptr().add(18) as *const i8),
            )
        };
        let (w0, w1) = if WB == 34 {
            // SAFETY: as above, for the weight block.
            unsafe {
                (
                    vld1q_s8(bw.as_ptr().add(2) as *const i8),
                    vld1q_s8(bw.as_ptr().add(18) as *const i8),
                )
            }
        } else {
            // SAFETY: a Q4_0 block holds 16 nibble bytes after its scale.
            let p = unsafe { vld1q_u8(bw.as_ptr().add(2)) };
            let eight = vdupq_n_s8(8);
            (
                vsubq_s8(vreinterpretq_s8_u8(vandq_u8(p, vdupq_n_u8(0x0f))), eight),
                vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(p)), eight),
            )
        };
        let s = sdot::<D>(sdot::<D>(vdupq_n_s32(0), w0, x0), w1, x1);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(s), read_f16(bw) * read_f16(bx));
    }
    vaddvq_f32(acc)
}

/// f16 weights · f32 activations.
pub fn dot_f16_f32(w: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 2).min(x.len());
    // SAFETY: NEON is always present; `n` elements of each.
    unsafe { dot_half_impl::<false>(&w[..2 * n], &x[..n]) }
}

/// bf16 weights · f32 activations (a bf16 widens by a 16-bit shift).
pub fn dot_bf16_f32(w: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 2).min(x.len());
    // SAFETY: as above.
    unsafe { dot_half_impl::<true>(&w[..2 * n], &x[..n]) }
}

/// f16 (or, with `BF16`, bf16) row · f32 row.
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[target_feature(enable = "neon")]
unsafe fn dot_half_impl<const BF16: bool>(w: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    let (mut a0, mut a1) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n elements remain in both slices.
        unsafe {
            let [h0, h1] = if BF16 {
                let h = vld1q_u16(w.as_ptr().add(2 * i) as *const u16);
                [
                    vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(h))),
                    vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_high_u16(h))),
                ]
            } else {
                load_f16x8(w.as_ptr().add(2 * i))
            };
            a0 = vfmaq_f32(a0, h0, vld1q_f32(x.as_ptr().add(i)));
            a1 = vfmaq_f32(a1, h1, vld1q_f32(x.as_ptr().add(i + 4)));
        }
        i += 8;
    }
    let mut sum = vaddvq_f32(vaddq_f32(a0, a1));
    while i < n {
        let bits = u16::from_le_bytes([w[2 * i], w[2 * i + 1]]);
        let wi = if BF16 {
            f32::from_bits((bits as u32) << 16)
        } else {
            read_f16(&w[2 * i..])
        };
        sum += wi * x[i];
        i += 1;
    }
    sum
}

/// f32 query · f16 K row.
pub fn dot_f32_f16(q: &[f32], k: &[half::f16]) -> f32 {
    let n = q.len().min(k.len());
    // SAFETY: NEON is always present; `n` elements of each.
    unsafe { dot_half_impl::<false>(super::f16_bytes(&k[..n]), &q[..n]) }
}

/// `out += w * v` for an f16 V row.
pub fn axpy_f16(out: &mut [f32], w: f32, v: &[half::f16]) {
    let n = out.len().min(v.len());
    // SAFETY: as in `dot_f32_f16`.
    unsafe { axpy_f16_impl(&mut out[..n], w, super::f16_bytes(&v[..n])) }
}

/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[target_feature(enable = "neon")]
unsafe fn axpy_f16_impl(out: &mut [f32], w: f32, v: &[u8]) {
    let n = out.len();
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n elements remain in both slices.
        unsafe {
            let [h0, h1] = load_f16x8(v.as_ptr().add(2 * i));
            let p = out.as_mut_ptr().add(i);
            vst1q_f32(p, vfmaq_n_f32(vld1q_f32(p), h0, w));
            vst1q_f32(p.add(4), vfmaq_n_f32(vld1q_f32(p.add(4)), h1, w));
        }
        i += 8;
    }
    while i < n {
        out[i] += w * read_f16(&v[2 * i..]);
        i += 1;
    }
}

/// SwiGLU gate `gate = silu(gate) * up` with the polynomial `exp` of the
/// AVX2 tier, four lanes at a time (the tail zero-padded).
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    // SAFETY: NEON is part of every AArch64 CPU.
    super::chunks_padded::<4>(gate, up, |g, u| unsafe { silu_mul4(g, u) });
}

/// Four lanes of `g * u / (1 + exp(-g))`, written back to `g`.
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[target_feature(enable = "neon")]
unsafe fn silu_mul4(g: &mut [f32; 4], u: &[f32; 4]) {
    // SAFETY: both arrays hold 4 floats.
    let (gv, uv) = unsafe { (vld1q_f32(g.as_ptr()), vld1q_f32(u.as_ptr())) };
    let e = exp4(vnegq_f32(gv));
    let r = vdivq_f32(vmulq_f32(gv, uv), vaddq_f32(vdupq_n_f32(1.0), e));
    // SAFETY: as above.
    unsafe { vst1q_f32(g.as_mut_ptr(), r) };
}

/// GeGLU gate `gate = gelu_tanh(gate) * up`, four lanes at a time (the
/// tail zero-padded).
pub fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    // SAFETY: NEON is part of every AArch64 CPU.
    super::chunks_padded::<4>(gate, up, |g, u| unsafe { gelu_mul4(g, u) });
}

/// Four lanes of `g * u / (1 + exp(-2k(g + c g^3)))`, written back to `g`.
///
/// # Safety
/// As [`silu_mul4`].
#[target_feature(enable = "neon")]
unsafe fn gelu_mul4(g: &mut [f32; 4], u: &[f32; 4]) {
    use crate::ops::{GELU_C, GELU_K};
    // SAFETY: both arrays hold 4 floats.
    let (gv, uv) = unsafe { (vld1q_f32(g.as_ptr()), vld1q_f32(u.as_ptr())) };
    let g3 = vmulq_f32(vmulq_f32(gv, gv), gv);
    let inner = vfmaq_f32(gv, vdupq_n_f32(GELU_C), g3);
    let e = exp4(vmulq_n_f32(inner, -2.0 * GELU_K));
    let r = vdivq_f32(vmulq_f32(gv, uv), vaddq_f32(vdupq_n_f32(1.0), e));
    // SAFETY: as above.
    unsafe { vst1q_f32(g.as_mut_ptr(), r) };
}

/// `exp(x)` per lane: the AVX2 tier's `exp8` (Cephes' range reduction and
/// polynomial, arguments clamped to about ±88.38).
#[inline]
#[target_feature(enable = "neon")]
fn exp4(x: float32x4_t) -> float32x4_t {
    use super::exp_poly::*;
    let x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-EXP_MAX)), vdupq_n_f32(EXP_MAX));
    let n = vrndnq_f32(vmulq_n_f32(x, std::f32::consts::LOG2_E));
    let r = vfmsq_f32(x, n, vdupq_n_f32(LN2_HI));
    let r = vfmsq_f32(r, n, vdupq_n_f32(LN2_LO));
    let mut p = vdupq_n_f32(P0);
    for c in P {
        p = vfmaq_f32(vdupq_n_f32(c), p, r);
    }
    let y = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.0));
    let pow2 = vshlq_n_s32::<23>(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)));
    vmulq_f32(y, vreinterpretq_f32_s32(pow2))
}

const Q4_UNIT: usize = 16 + 8 * 16;
const Q5_UNIT: usize = crate::quant::repack::Q5_0_UNIT;
const Q8_UNIT: usize = 16 + 8 * 32;
const Q4_1_UNIT: usize = crate::quant::repack::Q4_1_UNIT;
const Q5_1_UNIT: usize = crate::quant::repack::Q5_1_UNIT;

/// Integer sums of rows 0..4 and 4..8 of a group for one activation block.
type Sums = [int32x4_t; 2];

/// Q4_0 / Q5_0: the unit's values of elements `4k..4k + 4` (`w[k]`) and
/// `16 + 4k..` (`w[4 + k]`) for rows 0..4 and 4..8, as unsigned bytes.
type Prepped = [[int8x16_t; 2]; 8];

/// Q4_0 (`OFF` 16) and Q4_1 (`OFF` 32, after the minimums).
#[inline]
#[target_feature(enable = "neon")]
fn prep_q4_at<const OFF: usize>(u: *const u8) -> Prepped {
    let m4 = vdupq_n_u8(0x0f);
    let mut w = [[vdupq_n_s8(0); 2]; 8];
    for k in 0..4 {
        for h in 0..2 {
            // SAFETY: the unit holds 128 quant bytes from `OFF`.
            let v = unsafe { vld1q_u8(u.add(OFF + 32 * k + 16 * h)) };
            w[k][h] = vreinterpretq_s8_u8(vandq_u8(v, m4));
            w[4 + k][h] = vreinterpretq_s8_u8(vshrq_n_u8::<4>(v));
        }
    }
    w
}

/// Q5_0 (`OFF` 16) and Q5_1 (`OFF` 32): 32 bit bytes at `OFF`, then 128 quant bytes.
#[inline]
#[target_feature(enable = "neon")]
fn prep_q5_at<const OFF: usize>(u: *const u8) -> Prepped {
    let (m4, m1) = (vdupq_n_u8(0x0f), vdupq_n_u8(1));
    let mut w = [[vdupq_n_s8(0); 2]; 8];
    for h in 0..2 {
        // SAFETY: the unit holds 32 bit bytes at `OFF` and 128 quant bytes after them.
        let bits = unsafe { vld1q_u8(u.add(OFF + 16 * h)) };
        for k in 0..4 {
            // SAFETY: as above.
            let v = unsafe { vld1q_u8(u.add(OFF + 32 + 32 * k + 16 * h)) };
            let lo_bit = vandq_u8(vshlq_u8(bits, vdupq_n_s8(-(2 * k as i8))), m1);
            let hi_bit = vandq_u8(vshlq_u8(bits, vdupq_n_s8(-(2 * k as i8 + 1))), m1);
            w[k][h] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v, m4), vshlq_n_u8::<4>(lo_bit)));
            w[4 + k][h] =
                vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8::<4>(v), vshlq_n_u8::<4>(hi_bit)));
        }
    }
    w
}

#[inline]
#[target_feature(enable = "neon")]
fn prep_q4(u: *const u8) -> Prepped {
    prep_q4_at::<16>(u)
}

#[inline]
#[target_feature(enable = "neon")]
fn prep_q4_1(u: *const u8) -> Prepped {
    prep_q4_at::<32>(u)
}

#[inline]
#[target_feature(enable = "neon")]
fn prep_q5(u: *const u8) -> Prepped {
    prep_q5_at::<16>(u)
}

#[inline]
#[target_feature(enable = "neon")]
fn prep_q5_1(u: *const u8) -> Prepped {
    prep_q5_at::<32>(u)
}

/// IQ4_NL (Q4_0's layout): each nibble looked up in the level table, so
/// the weights are signed and need no zero offset (the table's IQ4_NL
/// offset is 0).
#[inline]
#[target_feature(enable = "neon")]
fn prep_iq4nl(u: *const u8) -> Prepped {
    // SAFETY: LEVELS holds 16 bytes.
    let t = unsafe { vld1q_s8(crate::quant::iquants::LEVELS.as_ptr()) };
    let mut w = prep_q4(u);
    for pair in w.iter_mut() {
        for n in pair.iter_mut() {
            *n = vqtbl1q_s8(t, vreinterpretq_u8_s8(*n));
        }
    }
    w
}

/// Q4_0 / Q5_0: the eight rows' integer sums for the block quants at `q`.
#[inline]
#[target_feature(enable = "neon")]
fn sums_q45<const D: bool>(w: &Prepped, _u: *const u8, q: *const u8) -> Sums {
    let mut s = [vdupq_n_s32(0); 2];
    for k in 0..4 {
        // SAFETY: `q` points at the block's 32 quant bytes.
        let (xl, xh) = unsafe { (bcast4(q.add(4 * k)), bcast4(q.add(16 + 4 * k))) };
        for h in 0..2 {
            s[h] = sdot::<D>(sdot::<D>(s[h], w[k][h], xl), w[4 + k][h], xh);
        }
    }
    s
}

/// Q8_0 needs nothing prepared: the signed bytes are read per token.
#[inline]
#[target_feature(enable = "neon")]
fn prep_q8(_u: *const u8) {}

#[inline]
#[target_feature(enable = "neon")]
fn sums_q8<const D: bool>(_w: &(), u: *const u8, q: *const u8) -> Sums {
    let mut s = [vdupq_n_s32(0); 2];
    for k in 0..8 {
        // SAFETY: a Q8_0 unit holds 256 quant bytes after its scales; `q` 32 bytes.
        let x = unsafe { bcast4(q.add(4 * k)) };
        for h in 0..2 {
            // SAFETY: as above.
            let w = unsafe { vld1q_s8(u.add(16 + 32 * k + 16 * h) as *const i8) };
            s[h] = sdot::<D>(s[h], w, x);
        }
    }
    s
}

/// The kernels of a 32-element x8 layout (as the AVX2 tier's `x8!`): per
/// block column, the weights are prepared once for all activation rows.
macro_rules! x8 {
    ($name:ident, $impl_name:ident, $rn:expr, $unit:expr, $prep:ident, $sums:ident) => {
        x8!(@ false, $name, $impl_name, $rn, $unit, $prep, $sums);
    };
    // Q4_1 / Q5_1: the rows' minimums follow the scales and multiply `8 ds`.
    ($name:ident, $impl_name:ident, $rn:expr, $unit:expr, $prep:ident, $sums:ident, mins) => {
        x8!(@ true, $name, $impl_name, $rn, $unit, $prep, $sums);
    };
    (@ $mins:literal, $name:ident, $impl_name:ident, $rn:expr, $unit:expr, $prep:ident, $sums:ident) => {
        /// One eight-row group times activation rows (see the module
        /// docs; `D`: with `SDOT`).
        pub fn $name<const D: bool>(group: &[u8], x: [Q8Row<'_>; $rn]) -> [[f32; 8]; $rn] {
            let nb = x.iter().fold(group.len() / $unit, |m, r| {
                m.min(r.q.len() / 34).min(r.d.len()).min(r.ds.len())
            });
            // SAFETY: the kernel table hands out `D` only with dotprod
            // detected; every slice holds `nb` whole blocks.
            unsafe { $impl_name::<D>(&group[..nb * $unit], x, nb) }
        }

        /// # Safety
        /// NEON is part of every AArch64 CPU; where `D` is true the caller
        /// must have detected `dotprod`. Every pointer must cover the bytes
        /// the loads above read, every slice the whole blocks the safe
        /// wrapper checked.
        #[target_feature(enable = "neon")]
        unsafe fn $impl_name<const D: bool>(
            group: &[u8],
            x: [Q8Row<'_>; $rn],
            nb: usize,
        ) -> [[f32; 8]; $rn] {
            let mut acc = [[vdupq_n_f32(0.0); 2]; $rn];
            for b in 0..nb {
                // SAFETY: unit `b < nb` lies inside `group`.
                let u = unsafe { group.as_ptr().add(b * $unit) };
                // SAFETY: a unit starts with the 8 rows' f16 scales (16 bytes).
                let dw = unsafe { load_f16x8(u) };
                // SAFETY: units of the types with minimums hold them at 16.
                let mw = if $mins { unsafe { load_f16x8(u.add(16)) } } else { dw };
                let w = $prep(u);
                for j in 0..$rn {
                    let r = &x[j];
                    // SAFETY: block `b < nb` of each activation row exists.
                    let qj = unsafe { r.q.as_ptr().add(34 * b + 2) };
                    let s = $sums::<D>(&w, u, qj);
                    let (dx, ds8) = (r.d[b], 8.0 * r.ds[b]);
                    for h in 0..2 {
                        if $mins {
                            let v = vmulq_n_f32(vcvtq_f32_s32(s[h]), dx);
                            acc[j][h] = vfmaq_f32(acc[j][h], dw[h], v);
                            acc[j][h] = vfmaq_n_f32(acc[j][h], mw[h], ds8);
                        } else {
                            let v = vfmaq_n_f32(vdupq_n_f32(ds8), vcvtq_f32_s32(s[h]), dx);
                            acc[j][h] = vfmaq_f32(acc[j][h], dw[h], v);
                        }
                    }
                }
            }
            store_rows(acc)
        }
    };
}

/// The eight-row accumulators (rows 0..4 and 4..8) of each activation row as arrays.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn store_rows<const N: usize>(acc: [[float32x4_t; 2]; N]) -> [[f32; 8]; N] {
    let mut out = [[0f32; 8]; N];
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: `o` holds 8 floats.
        unsafe {
            vst1q_f32(o.as_mut_ptr(), a[0]);
            vst1q_f32(o.as_mut_ptr().add(4), a[1]);
        }
    }
    out
}

x8!(gemv_q4_0x8, gemv_q4_0x8_impl, 1, Q4_UNIT, prep_q4, sums_q45);
x8!(
    gemm_q4_0x8,
    gemm_q4_0x8_impl,
    X8_N,
    Q4_UNIT,
    prep_q4,
    sums_q45
);
x8!(
    gemv_iq4_nlx8,
    gemv_iq4_nlx8_impl,
    1,
    Q4_UNIT,
    prep_iq4nl,
    sums_q45
);
x8!(
    gemm_iq4_nlx8,
    gemm_iq4_nlx8_impl,
    X8_N,
    Q4_UNIT,
    prep_iq4nl,
    sums_q45
);
x8!(gemv_q5_0x8, gemv_q5_0x8_impl, 1, Q5_UNIT, prep_q5, sums_q45);
x8!(
    gemm_q5_0x8,
    gemm_q5_0x8_impl,
    X8_N,
    Q5_UNIT,
    prep_q5,
    sums_q45
);
x8!(gemv_q8_0x8, gemv_q8_0x8_impl, 1, Q8_UNIT, prep_q8, sums_q8);
x8!(
    gemm_q8_0x8,
    gemm_q8_0x8_impl,
    X8_N,
    Q8_UNIT,
    prep_q8,
    sums_q8
);
x8!(
    gemv_q4_1x8,
    gemv_q4_1x8_impl,
    1,
    Q4_1_UNIT,
    prep_q4_1,
    sums_q45,
    mins
);
x8!(
    gemm_q4_1x8,
    gemm_q4_1x8_impl,
    X8_N,
    Q4_1_UNIT,
    prep_q4_1,
    sums_q45,
    mins
);
x8!(
    gemv_q5_1x8,
    gemv_q5_1x8_impl,
    1,
    Q5_1_UNIT,
    prep_q5_1,
    sums_q45,
    mins
);
x8!(
    gemm_q5_1x8,
    gemm_q5_1x8_impl,
    X8_N,
    Q5_1_UNIT,
    prep_q5_1,
    sums_q45,
    mins
);
