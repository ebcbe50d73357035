//! The AMX panels of Q4_K and Q5_K weights (see [`super::amx`]): each
//! 256-element block's eight sub-blocks of 32 become eight panel blocks,
//! so the tiles and their scaling are those of the 32-element types.
//!
//! A Q4_K weight is `d * sc * q - dmin * m` with `q` in 0..16 and a 6-bit
//! scale `sc` and minimum `m` per sub-block. The panel stores `q`
//! (unsigned, for `tdpbsud`), the scale `d * sc` and the minimum term
//! `dmin * m`, which the tiles multiply by the activation row's quant sum
//! of the sub-block: `sum(w x) = d sc sum(q x) - dmin m sum(x)`. Q5_K is
//! the same with `q` in 0..32 (its fifth bits ORed in at bit 4).
//!
//! Reached only through [`crate::cpu::Kernels::amx`] (see
//! [`super::amx`]'s safety condition).

#![allow(unsafe_code)]

use super::amx::put_block;
use super::avx512_x16::{join, join_f16};
use crate::quant::repack::Q4K_UNIT;
use crate::quant::repack_q5k::Q5K_UNIT;
use crate::rows::AMX_B_TILE;
use std::arch::x86_64::*;

/// [`crate::rows::AmxPanel`] for Q4_K: `nb` counts 32-element sub-blocks
/// (a multiple of 8).
pub fn panel_q4_k(pair: [&[u8]; 2], nb: usize, q: &mut [u8], d: &mut [f32], m: &mut [f32]) {
    panel_k::<false>(pair, nb, q, d, m)
}

/// [`crate::rows::AmxPanel`] for Q5_K, as [`panel_q4_k`].
pub fn panel_q5_k(pair: [&[u8]; 2], nb: usize, q: &mut [u8], d: &mut [f32], m: &mut [f32]) {
    panel_k::<true>(pair, nb, q, d, m)
}

fn panel_k<const FIVE: bool>(
    pair: [&[u8]; 2],
    nb: usize,
    q: &mut [u8],
    d: &mut [f32],
    m: &mut [f32],
) {
    let unit = if FIVE { Q5K_UNIT } else { Q4K_UNIT };
    assert!(nb.is_multiple_of(8));
    assert!(pair.iter().all(|g| g.len() >= nb / 8 * unit));
    assert!(q.len() >= nb * AMX_B_TILE && d.len() >= nb * 16 && m.len() >= nb * 16);
    // SAFETY: features detected by the kernel table; lengths checked above.
    unsafe { panel_k_impl::<FIVE>(pair, nb / 8, q, d, m) }
}

/// Eight bytes at `a + off` and eight at `b + off`, widened to floats.
///
/// # Safety
/// Both must have 8 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn join_u8(a: *const u8, b: *const u8, off: usize) -> __m512 {
    // SAFETY: the caller's contract.
    let v = unsafe {
        _mm_unpacklo_epi64(
            _mm_loadl_epi64(a.add(off) as *const __m128i),
            _mm_loadl_epi64(b.add(off) as *const __m128i),
        )
    };
    _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v))
}

/// # Safety
/// The features named in `target_feature` must be present and the
/// lengths [`panel_k`] checks hold for `blocks` 256-element blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn panel_k_impl<const FIVE: bool>(
    pair: [&[u8]; 2],
    blocks: usize,
    q: &mut [u8],
    d: &mut [f32],
    m: &mut [f32],
) {
    let (m4, one) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(1));
    let unit = if FIVE { Q5K_UNIT } else { Q4K_UNIT };
    for blk in 0..blocks {
        // SAFETY: unit `blk < blocks` of both groups (checked by the caller).
        let (ua, ub) = unsafe {
            (
                pair[0].as_ptr().add(blk * unit),
                pair[1].as_ptr().add(blk * unit),
            )
        };
        for u in [ua, ub] {
            super::prefetch_far(u, unit, super::far_distance(unit, 2048));
        }
        // SAFETY: a unit starts with the rows' d and dmin (f16), then the
        // sub-block scales and minimums as bytes, then the quants.
        let (dw, dmin) = unsafe { (join_f16(ua, ub, 0), join_f16(ua, ub, 16)) };
        for sb in 0..8 {
            // SAFETY: as above.
            let (sc, mn) = unsafe { (join_u8(ua, ub, 32 + 8 * sb), join_u8(ua, ub, 96 + 8 * sb)) };
            let scale = _mm512_mul_ps(dw, sc);
            let min = _mm512_mul_ps(dmin, mn);
            let (chunk, high) = (sb / 2, sb % 2 == 1);
            let w: [__m512i; 8] = std::array::from_fn(|k| {
                // SAFETY: chunk `sb / 2` of the unit's quants.
                let v = unsafe { join(ua, ub, 160 + 256 * chunk + 32 * k) };
                let v = if high { _mm512_srli_epi16::<4>(v) } else { v };
                let v = _mm512_and_si512(v, m4);
                if !FIVE {
                    return v;
                }
                // SAFETY: a Q5_K unit's fifth bits follow its Q4_K part.
                let bits = unsafe { join(ua, ub, Q4K_UNIT + 64 * chunk + 32 * (k / 4)) };
                let shift = _mm_cvtsi32_si128((2 * (k % 4) + high as usize) as i32);
                let fifth = _mm512_and_si512(_mm512_srl_epi16(bits, shift), one);
                _mm512_or_si512(v, _mm512_slli_epi16::<4>(fifth))
            });
            let b = 8 * blk + sb;
            // SAFETY: panel block `b < 8 blocks` (checked by the caller).
            unsafe {
                put_block(q.as_mut_ptr(), d.as_mut_ptr(), b, w, 0, scale);
                _mm512_storeu_ps(m.as_mut_ptr().add(16 * b), min);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::cpu::{Isa, Kernels};
    use crate::quant::dot::{quantize_q8_k_act, Q8_K_BYTES};
    use crate::quant::repack::{dot_q4_kx8, repack_x8};
    use crate::quant::repack_q5k::dot_q5_kx8;
    use crate::quant::{quantize_row, GgmlType};
    use crate::rows::{AMX_B_TILE, AMX_ROWS};
    use rand::{Rng, SeedableRng};

    /// The Q4_K and Q5_K panels through the shared tiles against the x8
    /// reference dot of each group (Q8_K activations), one and three
    /// 256-element blocks, one and two passes.
    #[test]
    fn k_quant_tiles_match_the_reference() {
        if !crate::cpu::tiers().contains(&Isa::Amx) {
            eprintln!("skipped: this CPU has no AMX tier");
            return;
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(26);
        let cases = [
            (GgmlType::Q4K, dot_q4_kx8 as fn(&[u8], &[u8]) -> [f32; 8]),
            (GgmlType::Q5K, dot_q5_kx8),
        ];
        for ((ty, reference), blocks) in cases.into_iter().flat_map(|c| [(c, 1), (c, 3)]) {
            let (panel, gemm) = Kernels::for_isa(Isa::Amx).amx_path(ty).unwrap();
            let (cols, nb) = (256 * blocks, 8 * blocks);
            let rb = ty.row_bytes(cols).unwrap();
            let mut w = vec![0u8; 32 * rb];
            for r in w.chunks_exact_mut(rb) {
                // Shifted ranges, so the minimums matter.
                let src: Vec<f32> = (0..cols)
                    .map(|c| rng.gen_range(-0.5..1.0) + (c / 32) as f32 * 0.1)
                    .collect();
                quantize_row(ty, &src, r).unwrap();
            }
            let packed = repack_x8(ty, &w, 32, cols).unwrap();
            let groups: Vec<&[u8]> = packed.chunks_exact(packed.len() / 4).collect();
            let mut q = [vec![0u8; nb * AMX_B_TILE], vec![0u8; nb * AMX_B_TILE]];
            let mut d = [vec![0f32; nb * 16], vec![0f32; nb * 16]];
            let mut m = [vec![0f32; nb * 16], vec![0f32; nb * 16]];
            for k in 0..2 {
                panel(
                    [groups[2 * k], groups[2 * k + 1]],
                    nb,
                    &mut q[k],
                    &mut d[k],
                    &mut m[k],
                );
            }
            for n in [32, 64] {
                let row = blocks * Q8_K_BYTES;
                let mut xq = vec![0u8; n * row];
                for r in xq.chunks_exact_mut(row) {
                    let src: Vec<f32> = (0..cols).map(|_| rng.gen_range(-3.0..3.0)).collect();
                    quantize_q8_k_act(&src, r);
                }
                // Pass p, sub-block b, row i: index (p nb + b) 32 + i % 32.
                let (mut xa, mut dx, mut xs) = (
                    vec![0u8; 32 * n * nb],
                    vec![0f32; n * nb],
                    vec![0f32; n * nb],
                );
                for k in 0..n * nb {
                    let (i, b, p) = (k % AMX_ROWS, k / AMX_ROWS % nb, k / AMX_ROWS / nb);
                    let blk = &xq[(AMX_ROWS * p + i) * row + Q8_K_BYTES * (b / 8)..][..Q8_K_BYTES];
                    let qs = &blk[4 + 32 * (b % 8)..][..32];
                    xa[32 * k..32 * k + 32].copy_from_slice(qs);
                    dx[k] = f32::from_le_bytes(blk[..4].try_into().unwrap());
                    xs[k] = qs.iter().map(|&v| v as i8 as f32).sum();
                }
                let mut out = vec![[0f32; 32]; n];
                let panels = [0, 1].map(|k| (&q[k][..], &d[k][..], &m[k][..]));
                gemm(panels, &xa, &dx, &xs, nb, &mut out);
                for (i, got) in out.iter().enumerate() {
                    let x = &xq[i * row..(i + 1) * row];
                    let want: Vec<f32> = groups.iter().flat_map(|g| reference(g, x)).collect();
                    for r in 0..32 {
                        let tol = 2e-4 * want[r].abs().max(1.0) * nb as f32;
                        assert!(
                            (got[r] - want[r]).abs() <= tol,
                            "{ty} blocks {blocks} n {n} ({i},{r}): {} vs {}",
                            got[r],
                            want[r]
                        );
                    }
                }
            }
        }
    }
}
