//! Q4_0 and Q8_0 weights interleaved in groups of eight rows ("x8"), so one
//! 32-byte load holds four quant bytes of each of eight rows and the
//! integer sums of eight rows land in the eight lanes of one register (as
//! ggml's `Q4_0_8x8` repacking does for the same reason).
//!
//! A matrix of `rows` (a multiple of 8) by `cols` (a multiple of 32) becomes
//! `rows / 8` groups; group `g` is `cols / 32` units of [`x8_unit`] bytes,
//! one per block column `b`. With `Q` quant bytes per block (Q4_0: 16,
//! Q8_0: 32):
//!
//! - bytes `0..16`: the f16 scales of rows `8g..8g + 8` for block `b`;
//! - bytes `16 + 32k + 4r + e` (`k < Q / 4`, `r < 8`, `e < 4`): quant byte
//!   `4k + e` of row `r`, unchanged. For Q4_0 that byte holds element
//!   `4k + e` in its low nibble and element `16 + 4k + e` in its high one;
//!   for Q8_0 it is element `4k + e`.
//!
//! The scalar reference here is what the SIMD tiers are tested against.

use crate::cpu::Q8Row;
use crate::quant::GgmlType;

/// Bytes of one block column of one eight-row group, for the types that have the layout.
pub fn x8_unit(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::Q4_0 => Some(16 + 8 * 16),
        GgmlType::Q8_0 => Some(16 + 8 * 32),
        _ => None,
    }
}

/// Repacks `rows` rows of `cols` elements of `ty`; `None` unless the type
/// has the layout, `rows % 8 == 0`, `cols % 32 == 0` and `data` holds
/// exactly the rows.
pub fn repack_x8(ty: GgmlType, data: &[u8], rows: usize, cols: usize) -> Option<Vec<u8>> {
    let unit = x8_unit(ty)?;
    let qbytes = (unit - 16) / 8;
    let block = qbytes + 2;
    let nb = cols / 32;
    if !rows.is_multiple_of(8)
        || !cols.is_multiple_of(32)
        || data.len() != rows * nb * block
        || rows == 0
    {
        return None;
    }
    let row_bytes = nb * block;
    let mut out = vec![0u8; rows / 8 * nb * unit];
    for (g, group) in out.chunks_exact_mut(nb * unit).enumerate() {
        for (b, u) in group.chunks_exact_mut(unit).enumerate() {
            for r in 0..8 {
                let blk = &data[(8 * g + r) * row_bytes + block * b..][..block];
                u[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
                for k in 0..qbytes / 4 {
                    u[16 + 32 * k + 4 * r..][..4].copy_from_slice(&blk[2 + 4 * k..6 + 4 * k]);
                }
            }
        }
    }
    Some(out)
}

/// [`repack_x8`] for Q4_0.
pub fn repack_q4_0x8(data: &[u8], rows: usize, cols: usize) -> Option<Vec<u8>> {
    repack_x8(GgmlType::Q4_0, data, rows, cols)
}

/// One eight-row Q8_0 group times one activation row.
pub fn dot_q8_0x8(group: &[u8], x: Q8Row<'_>) -> [f32; 8] {
    let unit = 16 + 8 * 32;
    let mut acc = [0f32; 8];
    for (b, u) in group.chunks_exact(unit).enumerate() {
        let xq = &x.q[34 * b + 2..34 * b + 34];
        for (r, a) in acc.iter_mut().enumerate() {
            let mut sum = 0i32;
            for k in 0..8 {
                for e in 0..4 {
                    sum += u[16 + 32 * k + 4 * r + e] as i8 as i32 * xq[4 * k + e] as i8 as i32;
                }
            }
            *a += super::read_f16(&u[2 * r..2 * r + 2]) * (x.d[b] * sum as f32);
        }
    }
    acc
}

/// One eight-row group (`cols / 32` units) times one activation row whose
/// `ds` terms were made for Q4_0 (see [`crate::cpu::q8_row_terms`]).
pub fn dot_q4_0x8(group: &[u8], x: Q8Row<'_>) -> [f32; 8] {
    let mut acc = [0f32; 8];
    for (b, unit) in group.chunks_exact(16 + 8 * 16).enumerate() {
        let xq = &x.q[34 * b + 2..34 * b + 34];
        for (r, a) in acc.iter_mut().enumerate() {
            let mut sum = 0i32;
            for k in 0..4 {
                for e in 0..4 {
                    let byte = unit[16 + 32 * k + 4 * r + e];
                    sum += (byte & 0x0f) as i32 * xq[4 * k + e] as i8 as i32;
                    sum += (byte >> 4) as i32 * xq[16 + 4 * k + e] as i8 as i32;
                }
            }
            let dw = super::read_f16(&unit[2 * r..2 * r + 2]);
            // `ds` is spread over 8 lanes for the one-row tiles: the whole term is 8 * ds.
            *a += dw * (x.d[b] * sum as f32 + 8.0 * x.ds[b]);
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{q8_row_terms, supported, Isa, Kernels, X8_N};
    use crate::quant::dot::{dot_q4_0_q8_0, dot_q8_0_q8_0, quantize_q8_0_act};
    use crate::quant::quantize_row;
    use rand::{Rng, SeedableRng};

    const TYPES: [GgmlType; 2] = [GgmlType::Q4_0, GgmlType::Q8_0];

    fn reference(ty: GgmlType) -> fn(&[u8], Q8Row<'_>) -> [f32; 8] {
        if ty == GgmlType::Q4_0 {
            dot_q4_0x8
        } else {
            dot_q8_0x8
        }
    }

    fn weights(
        rng: &mut rand_chacha::ChaCha8Rng,
        ty: GgmlType,
        rows: usize,
        cols: usize,
    ) -> Vec<u8> {
        let rb = ty.row_bytes(cols).unwrap();
        let mut w = vec![0u8; rows * rb];
        for r in w.chunks_exact_mut(rb) {
            let src: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
            quantize_row(ty, &src, r).unwrap();
        }
        w
    }

    /// `n` activation rows (with extreme values: 16-bit sums must not overflow).
    fn acts(
        rng: &mut rand_chacha::ChaCha8Rng,
        ty: GgmlType,
        n: usize,
        cols: usize,
    ) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
        let mut xq = vec![0u8; 34 * cols / 32 * n];
        for r in xq.chunks_exact_mut(34 * cols / 32) {
            let src: Vec<f32> = (0..cols)
                .map(|i| {
                    if i % 5 == 0 {
                        100.0
                    } else {
                        rng.gen_range(-3.0..3.0)
                    }
                })
                .collect();
            quantize_q8_0_act(&src, r);
        }
        let (mut d, mut ds) = (Vec::new(), Vec::new());
        q8_row_terms(ty, &xq, &mut d, &mut ds);
        (xq, d, ds)
    }

    #[test]
    fn every_tier_matches_the_reference() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
        for ty in TYPES {
            for blocks in [1, 2, 7, 18] {
                let cols = 32 * blocks;
                let packed = repack_x8(ty, &weights(&mut rng, ty, 8, cols), 8, cols).unwrap();
                let (xq, d, ds) = acts(&mut rng, ty, X8_N, cols);
                let x: [Q8Row<'_>; X8_N] = std::array::from_fn(|j| Q8Row {
                    q: &xq[34 * blocks * j..34 * blocks * (j + 1)],
                    d: &d[blocks * j..blocks * (j + 1)],
                    ds: &ds[blocks * j..blocks * (j + 1)],
                });
                for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                    if isa > supported() {
                        continue;
                    }
                    let (gemv, gemm) = Kernels::for_isa(isa).x8_path(ty).unwrap();
                    let many = gemm(&packed, x);
                    for j in 0..X8_N {
                        let want = reference(ty)(&packed, x[j]);
                        let [one] = gemv(&packed, [x[j]]);
                        for r in 0..8 {
                            let tol = 1e-5 * want[r].abs().max(1.0) * blocks as f32;
                            assert!((many[j][r] - want[r]).abs() <= tol, "{ty} {isa:?} {blocks}");
                            assert!((one[r] - want[r]).abs() <= tol, "{ty} {isa:?} {blocks}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn repacked_groups_give_the_row_dots() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for ty in TYPES {
            let row_dot = if ty == GgmlType::Q4_0 {
                dot_q4_0_q8_0
            } else {
                dot_q8_0_q8_0
            };
            for (rows, blocks) in [(8, 1), (16, 3), (24, 9)] {
                let cols = 32 * blocks;
                let rb = ty.row_bytes(cols).unwrap();
                let w = weights(&mut rng, ty, rows, cols);
                let packed = repack_x8(ty, &w, rows, cols).unwrap();
                assert_eq!(packed.len(), w.len(), "same bytes, new order");
                let (xq, d, ds) = acts(&mut rng, ty, 1, cols);
                let x = Q8Row {
                    q: &xq,
                    d: &d,
                    ds: &ds,
                };
                let unit = x8_unit(ty).unwrap();
                for (g, group) in packed.chunks_exact(blocks * unit).enumerate() {
                    let got = reference(ty)(group, x);
                    for (r, v) in got.iter().enumerate() {
                        let want = row_dot(&w[(8 * g + r) * rb..][..rb], &xq);
                        assert!(
                            (v - want).abs() <= 1e-4 * want.abs().max(1.0),
                            "{ty} {rows}x{cols} row {r}: {v} vs {want}"
                        );
                    }
                }
            }
        }
        assert!(repack_q4_0x8(&[0; 18 * 7], 7, 32).is_none());
        assert!(repack_q4_0x8(&[0; 18 * 8], 8, 33).is_none());
        assert!(repack_x8(GgmlType::Q4K, &[0; 144 * 8], 8, 256).is_none());
    }
}
