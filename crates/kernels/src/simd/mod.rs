//! SIMD tiers of the kernels in [`crate::quant::dot`]. Each public function
//! here has the same signature and meaning as its scalar reference, checks
//! lengths like it, and is only reachable through [`crate::cpu::kernels`],
//! which hands it out only when the CPU supports its instructions.

#[cfg(target_arch = "x86_64")]
pub mod amx;
#[cfg(target_arch = "x86_64")]
pub mod amx_k;
#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx2_attn;
#[cfg(target_arch = "x86_64")]
pub mod avx2_lowk;
#[cfg(target_arch = "x86_64")]
pub mod avx2_x8;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
#[cfg(target_arch = "x86_64")]
pub mod avx512_attn;
#[cfg(target_arch = "x86_64")]
mod avx512_attn_f16;
#[cfg(target_arch = "x86_64")]
mod avx512_attn_v;
#[cfg(target_arch = "x86_64")]
pub mod avx512_k16;
#[cfg(target_arch = "x86_64")]
mod avx512_rows;
#[cfg(target_arch = "x86_64")]
mod avx512_scores_f16;
#[cfg(target_arch = "x86_64")]
pub mod avx512_x16;
#[cfg(target_arch = "x86_64")]
pub mod avx512_x8;
#[cfg(target_arch = "aarch64")]
pub mod neon;
#[cfg(target_arch = "aarch64")]
pub mod neon_k8;
#[cfg(target_arch = "x86_64")]
pub mod x86_iq4;

/// A 64-byte-aligned stack object: [`align_frame`] puts one in a kernel's
/// frame so the compiler realigns that frame.
#[cfg(target_arch = "x86_64")]
#[repr(align(64))]
pub(crate) struct FrameAlign(pub [u8; 64]);

/// Makes the calling function realign its stack frame to 64 bytes.
///
/// x86-64 only promises 16-byte stack alignment; kernels that hold more
/// 256-bit values than there are registers spill them with unaligned
/// 32-byte moves into slots whose alignment is then the caller's luck.
/// Where a thread's stack happens to sit at 16 mod 32 (it depends on the
/// thread and on the binary's thread-local storage size), half the spill
/// slots straddle a cache line and every reload misses store forwarding:
/// the prefill of the same model in the same binary measured 1.35x slower
/// on the engine thread than on the main thread. An aligned local that
/// escapes forces the prologue to realign (`and rsp, -64`), so the spill
/// slots are aligned on every thread. Costs one store per call.
#[cfg(target_arch = "x86_64")]
macro_rules! align_frame {
    () => {
        let frame = $crate::simd::FrameAlign([0; 64]);
        std::hint::black_box(&frame.0);
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use align_frame;

/// How far ahead of the weights being read a decode kernel prefetches.
/// One call covers one row (or one eight-row group) and the hardware
/// prefetcher does not run ahead across calls: prefetching what follows in
/// memory took 1.1B-shape decode on a 2-vCPU Xeon from 12 to 17 GB/s
/// (Q2_K) and Q4_0 from 29 to 37 tokens/s. 1 KiB measured slower, 4 KiB
/// the same.
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH_AHEAD: usize = 2048;

/// Prefetches the cache lines of `len` bytes at [`PREFETCH_AHEAD`] past
/// `p`. A prefetch never faults, so running past the weights is harmless
/// (the address is computed with wrapping arithmetic, never dereferenced).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_ahead(p: *const u8, len: usize) {
    prefetch_lines::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.wrapping_add(PREFETCH_AHEAD), len)
}

/// How far ahead [`prefetch_far`] fetches into L2 in Q4_0 weights (144
/// bytes per eight rows of 32); [`far_distance`] scales it to a layout.
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH_FAR: usize = 12 * 1024;

/// [`PREFETCH_FAR`] for units of `unit` bytes holding `weights` weights:
/// the same number of weights ahead, so the same time ahead at a kernel's
/// rate of products whatever the bits per weight (Q8_0 goes 22.7 KiB
/// ahead, Q4_K 12.3 KiB).
#[cfg(target_arch = "x86_64")]
pub(crate) const fn far_distance(unit: usize, weights: usize) -> usize {
    (PREFETCH_FAR * unit * 256 / (144 * weights)).next_multiple_of(64)
}

/// Prefetches the cache lines of `len` bytes at `dist` past `p` into L2
/// (`dist` from [`far_distance`]), for batched kernels (the 32-element
/// 16-row ones beside [`prefetch_ahead`] into L1). A kernel that multiplies each weight block
/// by many activation rows (batched decode, prefill) consumes weights
/// slowly enough for 2 KiB ahead to be too few requests in flight to keep
/// memory busy, and further ahead into L1 evicts the activation rows: the
/// two distances together cut the 8-sequence step of a 1b Q4_0 model by a
/// tenth to a fifth and of a Q8_0 one by a quarter (BENCHMARKS); in the
/// one-row decode kernels it made the step slower and is not used there.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_far(p: *const u8, len: usize, dist: usize) {
    prefetch_lines::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.wrapping_add(dist), len)
}

/// [`prefetch_far`] of part `part` of `parts` of a `unit`-byte weight unit
/// at `p`: kernels whose units are large (the 256-element K-quants, over
/// a KiB per group) spread a unit's prefetches over its chunks, since a
/// whole unit's at once overflowed the miss queues and were lost (a
/// DRAM-resident Q4_K matrix times 8 rows: 147 -> 276 GMAC/s on one
/// thread, BENCHMARKS), and leave L1 to the hardware.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_far_part(p: *const u8, unit: usize, part: usize, parts: usize, dist: usize) {
    let (lo, hi) = (
        unit * part / parts / 64 * 64,
        unit * (part + 1) / parts / 64 * 64,
    );
    let hi = if part + 1 == parts { unit } else { hi };
    prefetch_far(p.wrapping_add(lo), hi - lo, dist)
}

/// Prefetches the cache lines of `len` bytes from `a` with cache hint `HINT`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch_lines<const HINT: i32>(a: *const u8, len: usize) {
    let mut o = 0;
    while o < len {
        // SAFETY: SSE is part of x86-64 itself; a prefetch reads nothing
        // architecturally and cannot fault, whatever the address (computed
        // with wrapping arithmetic, never dereferenced).
        unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(a.wrapping_add(o) as *const i8) };
        o += 64;
    }
}

/// Prefetches the first [`PREFETCH_AHEAD`] bytes at `p` (at most `len`):
/// what [`prefetch_ahead`] of the blocks before `p` would have fetched
/// had the stream not started at this call (a kernel reading two weight
/// groups at once starts its second stream cold).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(unsafe_code)]
pub(crate) fn prefetch_start(p: *const u8, len: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let mut o = 0;
    while o < len.min(PREFETCH_AHEAD) {
        // SAFETY: as in `prefetch_ahead`: a prefetch cannot fault.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o) as *const i8) };
        o += 64;
    }
}

/// Runs a tier's Q8_K block quantizer over `x` (a multiple of 256 values)
/// and `out`, block by block: the one loop of every tier's `quantize_q8_k`.
#[cfg(target_arch = "x86_64")]
pub(crate) fn q8k_blocks(x: &[f32], out: &mut [u8], block: impl Fn(&[f32; 256], &mut [u8])) {
    use crate::quant::dot::Q8_K_BYTES;
    for (xb, ob) in x.chunks_exact(256).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
        block(xb.try_into().expect("exact chunk"), ob);
    }
}

/// The constants of every tier's polynomial `exp` (Cephes' `expf`): inputs
/// are clamped to `±EXP_MAX`, `n = round(x log2 e)`, `r = x - n ln 2` with
/// ln 2 split in two (`LN2_HI + LN2_LO`) so the product is exact, and
/// `exp(r) = 1 + r + r^2 P(r)` with `P`'s coefficients highest first.
#[allow(dead_code)] // each architecture uses them from its own tier
pub(crate) mod exp_poly {
    pub const EXP_MAX: f32 = 88.376_26;
    pub const LN2_HI: f32 = 0.693_359_4;
    pub const LN2_LO: f32 = -2.121_944_4e-4;
    pub const P0: f32 = 1.987_569_1e-4;
    pub const P: [f32; 5] = [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ];
}

/// The little-endian bytes of an f16 slice (both SIMD architectures are
/// little-endian), for kernels that widen halves from raw bytes.
#[allow(unsafe_code)]
pub(crate) fn f16_bytes(v: &[half::f16]) -> &[u8] {
    // SAFETY: `half::f16` is `repr(transparent)` over u16, so the slice is
    // `2 * len` initialized bytes; u8 needs no alignment.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, 2 * v.len()) }
}

/// Runs `f` over the `W`-element chunks of `a` (written back) and `b`; a
/// tail shorter than `W` goes through `f` zero-padded, so an element's
/// result never depends on where it sits in the slice.
pub(crate) fn chunks_padded<const W: usize>(
    a: &mut [f32],
    b: &[f32],
    f: impl Fn(&mut [f32; W], &[f32; W]),
) {
    let n = a.len().min(b.len());
    let (mut ac, mut bc) = (a[..n].chunks_exact_mut(W), b[..n].chunks_exact(W));
    for (x, y) in (&mut ac).zip(&mut bc) {
        f(
            x.try_into().expect("exact chunk"),
            y.try_into().expect("exact chunk"),
        );
    }
    let (ta, tb) = (ac.into_remainder(), bc.remainder());
    if !ta.is_empty() {
        let (mut x, mut y) = ([0f32; W], [0f32; W]);
        x[..ta.len()].copy_from_slice(ta);
        y[..tb.len()].copy_from_slice(tb);
        f(&mut x, &y);
        ta.copy_from_slice(&x[..ta.len()]);
    }
}
