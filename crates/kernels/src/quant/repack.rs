//! Q4_0 weights interleaved in groups of eight rows ("Q4_0x8"), so one
//! 32-byte load holds four elements of each of eight rows and the integer
//! sums of eight rows land in the eight lanes of one register (as ggml's
//! `Q4_0_8x8` repacking does for the same reason).
//!
//! A matrix of `rows` (a multiple of 8) by `cols` (a multiple of 32) becomes
//! `rows / 8` groups; group `g` is `cols / 32` units of [`X8_UNIT`] bytes,
//! one per block column `b`:
//!
//! - bytes `0..16`: the f16 scales of rows `8g..8g + 8` for block `b`;
//! - bytes `16 + 32k + 4r + e` (`k < 4`, `r < 8`, `e < 4`): byte `4k + e` of
//!   row `r`'s nibbles, i.e. element `4k + e` in the low nibble and element
//!   `16 + 4k + e` in the high one (the bytes themselves are unchanged).
//!
//! The scalar reference here is what the SIMD tiers are tested against.

use crate::cpu::Q8Row;

/// Bytes of one block column of one eight-row group.
pub const X8_UNIT: usize = 16 + 128;

/// Repacks `rows` Q4_0 rows of `cols` elements; `None` unless `rows % 8 == 0`
/// and `data` holds exactly the rows (`cols` a multiple of 32).
pub fn repack_q4_0x8(data: &[u8], rows: usize, cols: usize) -> Option<Vec<u8>> {
    let nb = cols / 32;
    if !rows.is_multiple_of(8)
        || !cols.is_multiple_of(32)
        || data.len() != rows * nb * 18
        || rows == 0
    {
        return None;
    }
    let row_bytes = nb * 18;
    let mut out = vec![0u8; rows / 8 * nb * X8_UNIT];
    for (g, group) in out.chunks_exact_mut(nb * X8_UNIT).enumerate() {
        for (b, unit) in group.chunks_exact_mut(X8_UNIT).enumerate() {
            for r in 0..8 {
                let blk = &data[(8 * g + r) * row_bytes + 18 * b..][..18];
                unit[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
                for k in 0..4 {
                    unit[16 + 32 * k + 4 * r..][..4].copy_from_slice(&blk[2 + 4 * k..6 + 4 * k]);
                }
            }
        }
    }
    Some(out)
}

/// One eight-row group (`cols / 32` units) times one activation row whose
/// `ds` terms were made for Q4_0 (see [`crate::cpu::q8_row_terms`]).
pub fn dot_q4_0x8(group: &[u8], x: Q8Row<'_>) -> [f32; 8] {
    let mut acc = [0f32; 8];
    for (b, unit) in group.chunks_exact(X8_UNIT).enumerate() {
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
    use crate::cpu::q8_row_terms;
    use crate::quant::dot::{dot_q4_0_q8_0, quantize_q8_0_act};
    use crate::quant::{quantize_row, GgmlType};
    use rand::{Rng, SeedableRng};

    #[test]
    fn every_tier_matches_the_reference() {
        use crate::cpu::{supported, Isa, Kernels, X8_N};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
        for blocks in [1, 2, 7, 18] {
            let cols = 32 * blocks;
            let mut w = vec![0u8; 8 * 18 * blocks];
            for r in w.chunks_exact_mut(18 * blocks) {
                let src: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
                quantize_row(GgmlType::Q4_0, &src, r).unwrap();
            }
            let packed = repack_q4_0x8(&w, 8, cols).unwrap();
            let mut xq = vec![0u8; 34 * blocks * X8_N];
            for r in xq.chunks_exact_mut(34 * blocks) {
                // Extreme activations: the 16-bit sums must not overflow.
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
            q8_row_terms(GgmlType::Q4_0, &xq, &mut d, &mut ds);
            let x: [Q8Row<'_>; X8_N] = std::array::from_fn(|j| Q8Row {
                q: &xq[34 * blocks * j..34 * blocks * (j + 1)],
                d: &d[blocks * j..blocks * (j + 1)],
                ds: &ds[blocks * j..blocks * (j + 1)],
            });
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                if isa > supported() {
                    continue;
                }
                let (gemv, gemm) = Kernels::for_isa(isa).q4_0x8;
                let many = gemm(&packed, x);
                for j in 0..X8_N {
                    let want = dot_q4_0x8(&packed, x[j]);
                    let [one] = gemv(&packed, [x[j]]);
                    for r in 0..8 {
                        let tol = 1e-5 * want[r].abs().max(1.0) * blocks as f32;
                        assert!((many[j][r] - want[r]).abs() <= tol, "{isa:?} {blocks}");
                        assert!((one[r] - want[r]).abs() <= tol, "{isa:?} {blocks}");
                    }
                }
            }
        }
    }

    #[test]
    fn repacked_groups_give_the_row_dots() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for (rows, blocks) in [(8, 1), (16, 3), (24, 9)] {
            let cols = 32 * blocks;
            let rb = 18 * blocks;
            let mut w = vec![0u8; rows * rb];
            for r in w.chunks_exact_mut(rb) {
                let src: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
                quantize_row(GgmlType::Q4_0, &src, r).unwrap();
            }
            let packed = repack_q4_0x8(&w, rows, cols).unwrap();
            assert_eq!(packed.len(), w.len(), "same bytes, new order");
            let xs: Vec<f32> = (0..cols).map(|_| rng.gen_range(-3.0..3.0)).collect();
            let mut xq = vec![0u8; 34 * blocks];
            quantize_q8_0_act(&xs, &mut xq);
            let (mut d, mut ds) = (Vec::new(), Vec::new());
            q8_row_terms(GgmlType::Q4_0, &xq, &mut d, &mut ds);
            let x = Q8Row {
                q: &xq,
                d: &d,
                ds: &ds,
            };
            for (g, group) in packed.chunks_exact(blocks * X8_UNIT).enumerate() {
                let got = dot_q4_0x8(group, x);
                for (r, v) in got.iter().enumerate() {
                    let want = dot_q4_0_q8_0(&w[(8 * g + r) * rb..][..rb], &xq);
                    assert!(
                        (v - want).abs() <= 1e-4 * want.abs().max(1.0),
                        "{rows}x{cols} row {r}: {v} vs {want}"
                    );
                }
            }
        }
        assert!(repack_q4_0x8(&[0; 18 * 7], 7, 32).is_none());
        assert!(repack_q4_0x8(&[0; 18 * 8], 8, 33).is_none());
        assert!(repack_q4_0x8(&[0; 18 * 8], 8, 31).is_none());
    }
}
