//! NEON + dot-product kernels over the eight-row Q4_K, Q5_K, Q6_K and IQ4_XS layouts of
//! [`crate::quant::repack`], [`crate::quant::repack_q5k`], [`crate::quant::repack_q6k`]
//! and [`crate::quant::repack_iq4`] against Q8_K
//! activations: the integer sums of the AVX2 tier's `avx2_x8` k-quant
//! kernels, with `SDOT` producing four rows' sums per instruction and the
//! per-sub-block scales applied with 32-bit multiply-adds.
//!
//! As in [`super::neon`], `D = true` instances use `SDOT` and are handed out
//! by [`crate::cpu::Kernels::for_isa`] only after the dotprod feature was
//! detected; `D = false` ones run on every AArch64 CPU.

#![allow(unsafe_code)]

use super::neon::{bcast4, load_f16x8, sdot, store_rows};
use crate::quant::dot::Q8_K_BYTES as Q8K;
use crate::quant::repack::Q4K_UNIT;
use crate::quant::repack_iq4::IQ4XS_UNIT;
use crate::quant::repack_q5k::Q5K_UNIT;
use crate::quant::repack_q6k::Q6K_UNIT;
use crate::rows::X8_N;
use std::arch::aarch64::*;

/// Eight bytes at `p` (one per row) widened to rows 0..4 and 4..8.
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn rows_u8(p: *const u8) -> [int32x4_t; 2] {
    // SAFETY: callers pass 8 readable bytes.
    let v = vmovl_u8(unsafe { vld1_u8(p) });
    [
        vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(v))),
        vreinterpretq_s32_u32(vmovl_u16(vget_high_u16(v))),
    ]
}

/// The same for signed bytes.
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn rows_i8(p: *const u8) -> [int32x4_t; 2] {
    // SAFETY: callers pass 8 readable bytes.
    let v = vmovl_s8(unsafe { vld1_s8(p as *const i8) });
    [vmovl_s16(vget_low_s16(v)), vmovl_s16(vget_high_s16(v))]
}

/// The i16 block sum `i` of a Q8_K block at `bx`.
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[inline]
unsafe fn bsum(bx: *const u8, i: usize) -> i32 {
    // SAFETY: callers pass a whole Q8_K block; sum `i < 16` lies at 260 + 2i.
    unsafe { (bx.add(260 + 2 * i) as *const i16).read_unaligned() as i32 }
}

/// Q4_K, one Q8_K block: `d dx sum_j sc_j q.x - dmin dx sum_j m_j sum(x)`
/// for the eight rows, added to `acc`.
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn step_q4k<const D: bool>(
    u: *const u8,
    bx: *const u8,
    acc: [float32x4_t; 2],
) -> [float32x4_t; 2] {
    // SAFETY: the caller's contract.
    unsafe { step_q45k::<false, D>(u, bx, acc) }
}

/// Q5_K: as Q4_K with the fifth bits of [`crate::quant::repack_q5k`] above the nibbles.
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn step_q5k<const D: bool>(
    u: *const u8,
    bx: *const u8,
    acc: [float32x4_t; 2],
) -> [float32x4_t; 2] {
    // SAFETY: the caller's contract.
    unsafe { step_q45k::<true, D>(u, bx, acc) }
}

/// Q4_K, or with `FIVE` Q5_K (whose unit is Q4_K's plus the fifth bits).
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn step_q45k<const FIVE: bool, const D: bool>(
    u: *const u8,
    bx: *const u8,
    acc: [float32x4_t; 2],
) -> [float32x4_t; 2] {
    let (m4, m16) = (vdupq_n_u8(0x0f), vdupq_n_u8(0x10));
    // SAFETY: a Q8_K block is d (4 bytes), 256 quants, 16 i16 block sums.
    let (dx, q8) = unsafe { ((bx as *const f32).read_unaligned(), bx.add(4)) };
    let (mut isum, mut msum) = ([vdupq_n_s32(0); 2], [vdupq_n_s32(0); 2]);
    for c in 0..4 {
        let (mut lo, mut hi) = ([vdupq_n_s32(0); 2], [vdupq_n_s32(0); 2]);
        for k in 0..8 {
            // SAFETY: 4 + 256 activation bytes; the quants run 1024 bytes from 160.
            let (xl, xh) = unsafe {
                (
                    bcast4(q8.add(64 * c + 4 * k)),
                    bcast4(q8.add(64 * c + 32 + 4 * k)),
                )
            };
            for h in 0..2 {
                // SAFETY: as above.
                let v = unsafe { vld1q_u8(u.add(160 + 256 * c + 32 * k + 16 * h)) };
                let (mut l, mut hv) = (vandq_u8(v, m4), vshrq_n_u8::<4>(v));
                if FIVE {
                    // SAFETY: Q5_K units hold 64 bytes of fifth bits per chunk after Q4_K's part.
                    let bits =
                        unsafe { vld1q_u8(u.add(Q4K_UNIT + 64 * c + 32 * (k / 4) + 16 * h)) };
                    let s = 2 * (k % 4) as i8;
                    // Bit `s` of each byte moved to bit 4 (byte-wise shift).
                    let bit = |s: i8| vandq_u8(vshlq_u8(bits, vdupq_n_s8(4 - s)), m16);
                    l = vorrq_u8(l, bit(s));
                    hv = vorrq_u8(hv, bit(s + 1));
                }
                lo[h] = sdot::<D>(lo[h], vreinterpretq_s8_u8(l), xl);
                hi[h] = sdot::<D>(hi[h], vreinterpretq_s8_u8(hv), xh);
            }
        }
        // SAFETY: sub-block scales at 32 + 8j, minimums at 96 + 8j (j < 8).
        let (sl, sh, ml, mh) = unsafe {
            (
                rows_u8(u.add(32 + 16 * c)),
                rows_u8(u.add(40 + 16 * c)),
                rows_u8(u.add(96 + 16 * c)),
                rows_u8(u.add(104 + 16 * c)),
            )
        };
        // SAFETY: sums of sub-block 2c are block sums 4c, 4c + 1; of 2c + 1, 4c + 2, 4c + 3.
        let (xl, xh) = unsafe {
            (
                bsum(bx, 4 * c) + bsum(bx, 4 * c + 1),
                bsum(bx, 4 * c + 2) + bsum(bx, 4 * c + 3),
            )
        };
        for h in 0..2 {
            isum[h] = vmlaq_s32(vmlaq_s32(isum[h], lo[h], sl[h]), hi[h], sh[h]);
            msum[h] = vmlaq_n_s32(vmlaq_n_s32(msum[h], ml[h], xl), mh[h], xh);
        }
    }
    // SAFETY: d and dmin of the 8 rows open the unit (16 bytes each).
    let (d, dmin) = unsafe { (load_f16x8(u), load_f16x8(u.add(16))) };
    let mut out = acc;
    for h in 0..2 {
        out[h] = vfmaq_f32(out[h], vmulq_n_f32(d[h], dx), vcvtq_f32_s32(isum[h]));
        out[h] = vfmsq_f32(out[h], vmulq_n_f32(dmin[h], dx), vcvtq_f32_s32(msum[h]));
    }
    out
}

/// Q6_K, one Q8_K block: stored values are `q + 32`, so `32 sum_g sc_g
/// sum(x)` is taken back off before scaling by `d dx`.
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn step_q6k<const D: bool>(
    u: *const u8,
    bx: *const u8,
    acc: [float32x4_t; 2],
) -> [float32x4_t; 2] {
    // SAFETY: a Q8_K block is d (4 bytes), 256 quants, 16 i16 block sums.
    let (dx, q8) = unsafe { ((bx as *const f32).read_unaligned(), bx.add(4)) };
    let mut total = [vdupq_n_s32(0); 2];
    for g in 0..16 {
        let (s, k0) = (g / 2, 4 * (g % 2));
        let mut part = [vdupq_n_s32(0); 2];
        for k in k0..k0 + 4 {
            // SAFETY: 256 activation quants; values run 2048 bytes from 144.
            let x = unsafe { bcast4(q8.add(32 * s + 4 * k)) };
            for h in 0..2 {
                // SAFETY: as above.
                let v = unsafe { vld1q_s8(u.add(144 + 256 * s + 32 * k + 16 * h) as *const i8) };
                part[h] = sdot::<D>(part[h], v, x);
            }
        }
        // SAFETY: group scales at 16 + 8g; block sum g of the activation block.
        let (sc, off) = unsafe { (rows_i8(u.add(16 + 8 * g)), 32 * bsum(bx, g)) };
        for h in 0..2 {
            total[h] = vmlaq_s32(total[h], vsubq_s32(part[h], vdupq_n_s32(off)), sc[h]);
        }
    }
    // SAFETY: the 8 rows' d open the unit (16 bytes).
    let d = unsafe { load_f16x8(u) };
    let mut out = acc;
    for h in 0..2 {
        out[h] = vfmaq_f32(out[h], vmulq_n_f32(d[h], dx), vcvtq_f32_s32(total[h]));
    }
    out
}

/// IQ4_XS, one Q8_K block ([`crate::quant::repack_iq4`]'s layout): the
/// nibbles looked up in the level table (signed, no offset), each
/// sub-block's sums times its multiplier `ls - 32`.
///
/// # Safety
/// NEON is part of every AArch64 CPU; where `D` is true the caller must have
/// detected `dotprod`. Every pointer must cover the bytes the loads above
/// read, every slice the whole blocks the safe wrapper checked.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn step_iq4xs<const D: bool>(
    u: *const u8,
    bx: *const u8,
    acc: [float32x4_t; 2],
) -> [float32x4_t; 2] {
    let m4 = vdupq_n_u8(0x0f);
    // SAFETY: LEVELS holds 16 bytes; a Q8_K block is d (4 bytes), 256 quants, 16 i16 sums.
    let (t, dx, q8) = unsafe {
        (
            vld1q_s8(crate::quant::iquants::LEVELS.as_ptr()),
            (bx as *const f32).read_unaligned(),
            bx.add(4),
        )
    };
    let mut total = [vdupq_n_s32(0); 2];
    for j in 0..8 {
        let mut part = [vdupq_n_s32(0); 2];
        for k in 0..4 {
            // SAFETY: 256 activation quants; the nibbles run 1024 bytes from 80.
            let (xl, xh) = unsafe {
                (
                    bcast4(q8.add(32 * j + 4 * k)),
                    bcast4(q8.add(32 * j + 16 + 4 * k)),
                )
            };
            for h in 0..2 {
                // SAFETY: as above.
                let v = unsafe { vld1q_u8(u.add(80 + 128 * j + 32 * k + 16 * h)) };
                let (lo, hi) = (
                    vqtbl1q_s8(t, vandq_u8(v, m4)),
                    vqtbl1q_s8(t, vshrq_n_u8::<4>(v)),
                );
                part[h] = sdot::<D>(sdot::<D>(part[h], lo, xl), hi, xh);
            }
        }
        // SAFETY: sub-block multipliers at 16 + 8j.
        let sc = unsafe { rows_i8(u.add(16 + 8 * j)) };
        for h in 0..2 {
            total[h] = vmlaq_s32(total[h], part[h], sc[h]);
        }
    }
    // SAFETY: the 8 rows' d open the unit (16 bytes).
    let d = unsafe { load_f16x8(u) };
    let mut out = acc;
    for h in 0..2 {
        out[h] = vfmaq_f32(out[h], vmulq_n_f32(d[h], dx), vcvtq_f32_s32(total[h]));
    }
    out
}

/// Q2_K · Q8_K, one row (Q2_K has no interleaved layout; see
/// [`crate::quant::dot::dot_q2_k_q8_k`]): element `128h + 32s + i` is bits
/// `2s` of `qs[32h + i]`; each 16-element sub-block's four-lane sums are
/// scaled in the vector and reduced once per block; the minimums go
/// through the activation block sums.
pub fn dot_q2_k_q8_k<const D: bool>(w: &[u8], x: &[u8]) -> f32 {
    use crate::quant::lowk::Q2_K_BYTES;
    let n = (w.len() / Q2_K_BYTES).min(x.len() / Q8K);
    let mut sum = 0.0f32;
    for (bw, bx) in w.chunks_exact(Q2_K_BYTES).zip(x.chunks_exact(Q8K)).take(n) {
        // SAFETY: whole blocks of each; `D` handed out only with dotprod.
        sum += unsafe { block_q2_k::<D>(bw.as_ptr(), bx.as_ptr()) };
    }
    sum
}

/// # Safety
/// `bw` is a whole Q2_K block, `bx` a whole Q8_K block; where `D` is true
/// the caller must have detected `dotprod`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn block_q2_k<const D: bool>(bw: *const u8, bx: *const u8) -> f32 {
    let m3 = vdupq_n_u8(3);
    // SAFETY: a Q8_K block is d (4 bytes), 256 quants, 16 i16 sums.
    let (dx, q8) = unsafe { ((bx as *const f32).read_unaligned(), bx.add(4)) };
    let mut isum = vdupq_n_s32(0);
    let mut mins = 0i32;
    for h in 0..2 {
        // SAFETY: the block's 64 `qs` bytes follow its 16 scale bytes.
        let q = unsafe { [vld1q_u8(bw.add(16 + 32 * h)), vld1q_u8(bw.add(32 + 32 * h))] };
        for sh in 0..4 {
            for half in 0..2 {
                let j = 8 * h + 2 * sh + half;
                let v = vandq_u8(vshlq_u8(q[half], vdupq_n_s8(-2 * sh as i8)), m3);
                // SAFETY: 16 of the block's quants; scale byte `j < 16`.
                let (xv, sc) = unsafe {
                    (
                        vld1q_s8(q8.add(128 * h + 32 * sh + 16 * half) as *const i8),
                        *bw.add(j),
                    )
                };
                let p = sdot::<D>(vdupq_n_s32(0), vreinterpretq_s8_u8(v), xv);
                isum = vmlaq_n_s32(isum, p, (sc & 0xf) as i32);
                // SAFETY: block sum `j < 16`.
                mins += (sc >> 4) as i32 * unsafe { bsum(bx, j) };
            }
        }
    }
    // SAFETY: d and dmin at 80 and 82.
    let (d, dmin) = unsafe { (f16_at(bw.add(80)), f16_at(bw.add(82))) };
    d * dx * vaddvq_s32(isum) as f32 - dmin * dx * mins as f32
}

/// Q3_K · Q8_K, one row ([`crate::quant::dot::dot_q3_k_q8_k`]): the
/// value `q3 - 4` built signed from two `qs` bits and the `hmask` bit, so
/// `SDOT` needs no offset.
pub fn dot_q3_k_q8_k<const D: bool>(w: &[u8], x: &[u8]) -> f32 {
    use crate::quant::lowk::Q3_K_BYTES;
    let n = (w.len() / Q3_K_BYTES).min(x.len() / Q8K);
    let mut sum = 0.0f32;
    for (bw, bx) in w.chunks_exact(Q3_K_BYTES).zip(x.chunks_exact(Q8K)).take(n) {
        let sc = crate::quant::lowk::q3_scales(&bw[96..108]);
        // SAFETY: whole blocks of each; `D` handed out only with dotprod.
        sum += unsafe { block_q3_k::<D>(bw.as_ptr(), bx.as_ptr(), &sc) };
    }
    sum
}

/// # Safety
/// `bw` is a whole Q3_K block, `bx` a whole Q8_K block; where `D` is true
/// the caller must have detected `dotprod`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn block_q3_k<const D: bool>(bw: *const u8, bx: *const u8, sc: &[i8; 16]) -> f32 {
    let (m3, one, four) = (vdupq_n_u8(3), vdupq_n_u8(1), vdupq_n_s8(4));
    // SAFETY: a Q8_K block is d (4 bytes), 256 quants, 16 i16 sums.
    let (dx, q8) = unsafe { ((bx as *const f32).read_unaligned(), bx.add(4)) };
    // SAFETY: the block's 32 `hmask` bytes open it.
    let hm = unsafe { [vld1q_u8(bw), vld1q_u8(bw.add(16))] };
    let mut isum = vdupq_n_s32(0);
    for h in 0..2 {
        // SAFETY: the block's 64 `qs` bytes follow `hmask`.
        let q = unsafe { [vld1q_u8(bw.add(32 + 32 * h)), vld1q_u8(bw.add(48 + 32 * h))] };
        for sh in 0..4 {
            for half in 0..2 {
                let j = 8 * h + 2 * sh + half;
                let low = vandq_u8(vshlq_u8(q[half], vdupq_n_s8(-2 * sh as i8)), m3);
                let bit = vandq_u8(vshlq_u8(hm[half], vdupq_n_s8(-((4 * h + sh) as i8))), one);
                let v = vsubq_s8(
                    vreinterpretq_s8_u8(vorrq_u8(low, vshlq_n_u8::<2>(bit))),
                    four,
                );
                // SAFETY: 16 of the block's quants.
                let xv = unsafe { vld1q_s8(q8.add(128 * h + 32 * sh + 16 * half) as *const i8) };
                isum = vmlaq_n_s32(isum, sdot::<D>(vdupq_n_s32(0), v, xv), sc[j] as i32);
            }
        }
    }
    // SAFETY: d at 108.
    let d = unsafe { f16_at(bw.add(108)) };
    d * dx * vaddvq_s32(isum) as f32
}

/// The little-endian f16 at `p`.
///
/// # Safety
/// `p` points at two readable bytes.
#[inline]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller's contract.
    crate::quant::f16_bits_to_f32(unsafe { (p as *const u16).read_unaligned() })
}

/// The kernels of a k-quant x8 layout: `$step(unit, q8k_block, acc)` adds
/// one activation block's contribution for the eight rows.
macro_rules! k8 {
    ($name:ident, $impl_name:ident, $rn:expr, $unit:expr, $step:ident) => {
        /// One eight-row k-quant group times Q8_K activation rows (`D`: with `SDOT`).
        pub fn $name<const D: bool>(group: &[u8], x: [&[u8]; $rn]) -> [[f32; 8]; $rn] {
            let nb = x
                .iter()
                .fold(group.len() / $unit, |m, r| m.min(r.len() / Q8K));
            // SAFETY: the kernel table hands out `D` only with dotprod
            // detected; `nb` whole blocks everywhere.
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
            x: [&[u8]; $rn],
            nb: usize,
        ) -> [[f32; 8]; $rn] {
            let mut acc = [[vdupq_n_f32(0.0); 2]; $rn];
            for b in 0..nb {
                for j in 0..$rn {
                    // SAFETY: unit `b` and block `b` of each row exist (`b < nb`).
                    acc[j] = unsafe {
                        $step::<D>(
                            group.as_ptr().add(b * $unit),
                            x[j].as_ptr().add(b * Q8K),
                            acc[j],
                        )
                    };
                }
            }
            store_rows(acc)
        }
    };
}

k8!(gemv_q4_kx8, gemv_q4_kx8_impl, 1, Q4K_UNIT, step_q4k);
k8!(gemm_q4_kx8, gemm_q4_kx8_impl, X8_N, Q4K_UNIT, step_q4k);
k8!(gemv_q5_kx8, gemv_q5_kx8_impl, 1, Q5K_UNIT, step_q5k);
k8!(gemm_q5_kx8, gemm_q5_kx8_impl, X8_N, Q5K_UNIT, step_q5k);
k8!(gemv_q6_kx8, gemv_q6_kx8_impl, 1, Q6K_UNIT, step_q6k);
k8!(gemm_q6_kx8, gemm_q6_kx8_impl, X8_N, Q6K_UNIT, step_q6k);
k8!(gemv_iq4_xsx8, gemv_iq4_xsx8_impl, 1, IQ4XS_UNIT, step_iq4xs);
k8!(
    gemm_iq4_xsx8,
    gemm_iq4_xsx8_impl,
    X8_N,
    IQ4XS_UNIT,
    step_iq4xs
);
