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
//! Q4_K (256-element blocks) uses units of [`Q4K_UNIT`] bytes per block
//! column: `d` and `dmin` of the 8 rows (f16, 16 bytes each), the decoded
//! 6-bit sub-block scales `sc[j][r]` and minimums `m[j][r]` as bytes (64
//! each), then for each 64-element chunk `c` and `k < 8` the quant bytes
//! `32c + 4k .. 32c + 4k + 4` of each row (256 bytes per chunk): low nibbles
//! are sub-block `2c`, high nibbles sub-block `2c + 1`.
//!
//! The scalar references here are what the SIMD tiers are tested against.

use crate::quant::GgmlType;
use crate::rows::Q8Row;

/// Bytes whose first byte sits on a 64-byte boundary: a packed copy of
/// the weights. Where a heap allocation starts is the allocator's choice
/// (mmap'd chunks start 16 bytes past a page, heap chunks anywhere on 16),
/// so without this which of a matrix's 32-byte loads straddle two cache
/// lines would change with the allocation history of the process; now it
/// is the same in every process (the kernels' own layout decides).
#[derive(Debug, Clone)]
pub struct Aligned {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    pub const ALIGN: usize = 64;

    /// `len` zero bytes starting on a 64-byte boundary.
    pub fn zeroed(len: usize) -> Self {
        let mut buf = vec![0u8; len + Self::ALIGN - 1];
        crate::hugepages::advise(&mut buf);
        let off = buf.as_ptr().align_offset(Self::ALIGN);
        Aligned { buf, off, len }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

impl std::ops::Deref for Aligned {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// Bytes of one block column of one eight-row group, for the types that have the layout.
pub fn x8_unit(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::Q4_0 => Some(16 + 8 * 16),
        GgmlType::IQ4NL => Some(super::repack_iq4::IQ4NL_UNIT),
        GgmlType::Q5_0 => Some(Q5_0_UNIT),
        GgmlType::Q8_0 => Some(16 + 8 * 32),
        GgmlType::Q4_1 => Some(Q4_1_UNIT),
        GgmlType::Q5_1 => Some(Q5_1_UNIT),
        _ => None,
    }
}

/// Repacks `rows` rows of `cols` elements of `ty`; `None` unless the type
/// has the layout, `rows % 8 == 0`, `cols % 32 == 0` and `data` holds
/// exactly the rows.
pub fn repack_x8(ty: GgmlType, data: &[u8], rows: usize, cols: usize) -> Option<Aligned> {
    if ty == GgmlType::Q4K {
        return repack_q4_kx8(data, rows, cols);
    }
    if ty == GgmlType::Q6K {
        return super::repack_q6k::repack_q6_kx8(data, rows, cols);
    }
    if ty == GgmlType::Q5K {
        return super::repack_q5k::repack_q5_kx8(data, rows, cols);
    }
    if ty == GgmlType::IQ4XS {
        return super::repack_iq4::repack_iq4_xsx8(data, rows, cols);
    }
    if ty == GgmlType::Q5_0 {
        return repack_q5_0x8(data, rows, cols);
    }
    if ty == GgmlType::Q4_1 || ty == GgmlType::Q5_1 {
        return repack_q_1x8(ty == GgmlType::Q5_1, data, rows, cols);
    }
    let unit = x8_unit(ty)?;
    let qbytes = (unit - 16) / 8;
    repack_with(data, rows, cols, (32, qbytes + 2, unit), |u, r, blk| {
        u[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
        for k in 0..qbytes / 4 {
            u[16 + 32 * k + 4 * r..][..4].copy_from_slice(&blk[2 + 4 * k..6 + 4 * k]);
        }
    })
}

/// The frame every x8 repacking shares: checks the shape (`rows` a
/// non-zero multiple of 8, `cols` of the block's `qk` elements, `data`
/// exactly the rows of `block`-byte blocks), then calls `fill(u, r, blk)`
/// for each `unit`-byte unit `u` of each group, each row `r < 8` of the
/// group and that row's block `blk` of the unit's column.
pub(crate) fn repack_with(
    data: &[u8],
    rows: usize,
    cols: usize,
    (qk, block, unit): (usize, usize, usize),
    fill: impl Fn(&mut [u8], usize, &[u8]),
) -> Option<Aligned> {
    let nb = cols / qk;
    if rows == 0
        || !rows.is_multiple_of(8)
        || !cols.is_multiple_of(qk)
        || data.len() != rows * nb * block
    {
        return None;
    }
    let row_bytes = nb * block;
    let mut out = Aligned::zeroed(rows / 8 * nb * unit);
    for (g, group) in out.as_mut_slice().chunks_exact_mut(nb * unit).enumerate() {
        for (b, u) in group.chunks_exact_mut(unit).enumerate() {
            for r in 0..8 {
                fill(u, r, &data[(8 * g + r) * row_bytes + block * b..][..block]);
            }
        }
    }
    Some(out)
}

/// Bytes of one block column of an eight-row Q5_0 group: the scales, the
/// fifth bits (byte `4r + e` holds, at bit `2k`, that of element `4k + e` and,
/// at bit `2k + 1`, that of element `16 + 4k + e` of row `r`), then the
/// nibbles in the Q4_0 arrangement.
pub const Q5_0_UNIT: usize = 16 + 32 + 128;

/// Repacks Q5_0 rows into eight-row groups; `None` on the shapes
/// [`repack_x8`] refuses.
pub fn repack_q5_0x8(data: &[u8], rows: usize, cols: usize) -> Option<Aligned> {
    repack_with(data, rows, cols, (32, 22, Q5_0_UNIT), |u, r, blk| {
        u[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
        let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
        u[16 + 4 * r..20 + 4 * r].copy_from_slice(&fifth_bits(qh));
        for k in 0..4 {
            u[48 + 32 * k + 4 * r..][..4].copy_from_slice(&blk[6 + 4 * k..10 + 4 * k]);
        }
    })
}

/// A Q5_0/Q5_1 block's fifth bits `qh` as a row's four bytes of the x8
/// unit: byte `e` holds, at bit `2k`, the bit of element `4k + e` and, at
/// bit `2k + 1`, that of element `16 + 4k + e`.
fn fifth_bits(qh: u32) -> [u8; 4] {
    std::array::from_fn(|e| {
        (0..4).fold(0u8, |byte, k| {
            byte | ((((qh >> (4 * k + e)) & 1) as u8) << (2 * k))
                | ((((qh >> (16 + 4 * k + e)) & 1) as u8) << (2 * k + 1))
        })
    })
}

/// Bytes of one block column of an eight-row Q4_1 group: the Q4_0 unit
/// with the rows' minimums `m` (f16) after their scales.
pub const Q4_1_UNIT: usize = 32 + 128;
/// The same for Q5_1: scales, minimums, the fifth bits and nibbles as in Q5_0.
pub const Q5_1_UNIT: usize = 32 + 32 + 128;

/// Repacks Q4_1 or (`five`) Q5_1 rows; `None` on the shapes [`repack_x8`] refuses.
fn repack_q_1x8(five: bool, data: &[u8], rows: usize, cols: usize) -> Option<Aligned> {
    let (block, unit) = if five {
        (24, Q5_1_UNIT)
    } else {
        (20, Q4_1_UNIT)
    };
    repack_with(data, rows, cols, (32, block, unit), |u, r, blk| {
        u[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
        u[16 + 2 * r..18 + 2 * r].copy_from_slice(&blk[2..4]);
        let quants = if five {
            let qh = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
            u[32 + 4 * r..36 + 4 * r].copy_from_slice(&fifth_bits(qh));
            64
        } else {
            32
        };
        for k in 0..4 {
            u[quants + 32 * k + 4 * r..][..4].copy_from_slice(&blk[block - 16 + 4 * k..][..4]);
        }
    })
}

/// One eight-row Q4_1 group times one activation row whose `ds` terms were
/// made for Q4_1 (`8 ds = d_x * sum(q_x)`, see [`crate::rows::zero_offset`]).
pub fn dot_q4_1x8(group: &[u8], x: Q8Row<'_>) -> [f32; 8] {
    dot_q_1x8(false, group, x)
}

/// The same for Q5_1.
pub fn dot_q5_1x8(group: &[u8], x: Q8Row<'_>) -> [f32; 8] {
    dot_q_1x8(true, group, x)
}

fn dot_q_1x8(five: bool, group: &[u8], x: Q8Row<'_>) -> [f32; 8] {
    let (unit, quants) = if five {
        (Q5_1_UNIT, 64)
    } else {
        (Q4_1_UNIT, 32)
    };
    let mut acc = [0f32; 8];
    for (b, u) in group.chunks_exact(unit).enumerate() {
        let xq = &x.q[34 * b + 2..34 * b + 34];
        for (r, a) in acc.iter_mut().enumerate() {
            let mut sum = 0i32;
            for k in 0..4 {
                for e in 0..4 {
                    let byte = u[quants + 32 * k + 4 * r + e];
                    let (mut lo, mut hi) = (byte & 0x0f, byte >> 4);
                    if five {
                        let bits = u[32 + 4 * r + e];
                        lo |= ((bits >> (2 * k)) & 1) << 4;
                        hi |= ((bits >> (2 * k + 1)) & 1) << 4;
                    }
                    sum += lo as i32 * xq[4 * k + e] as i8 as i32;
                    sum += hi as i32 * xq[16 + 4 * k + e] as i8 as i32;
                }
            }
            let dw = super::read_f16(&u[2 * r..2 * r + 2]);
            let mw = super::read_f16(&u[16 + 2 * r..18 + 2 * r]);
            *a += dw * (x.d[b] * sum as f32) + mw * (8.0 * x.ds[b]);
        }
    }
    acc
}

/// One eight-row Q5_0 group times one activation row (`ds` made for Q5_0).
pub fn dot_q5_0x8(group: &[u8], x: Q8Row<'_>) -> [f32; 8] {
    let mut acc = [0f32; 8];
    for (b, u) in group.chunks_exact(Q5_0_UNIT).enumerate() {
        let xq = &x.q[34 * b + 2..34 * b + 34];
        for (r, a) in acc.iter_mut().enumerate() {
            let mut sum = 0i32;
            for k in 0..4 {
                for e in 0..4 {
                    let byte = u[48 + 32 * k + 4 * r + e];
                    let bits = u[16 + 4 * r + e];
                    let lo = (byte & 0x0f) | (((bits >> (2 * k)) & 1) << 4);
                    let hi = (byte >> 4) | (((bits >> (2 * k + 1)) & 1) << 4);
                    sum += lo as i32 * xq[4 * k + e] as i8 as i32;
                    sum += hi as i32 * xq[16 + 4 * k + e] as i8 as i32;
                }
            }
            let dw = super::read_f16(&u[2 * r..2 * r + 2]);
            *a += dw * (x.d[b] * sum as f32 + 8.0 * x.ds[b]);
        }
    }
    acc
}

/// Bytes of the packed form of a `rows x cols` matrix of `ty`, if it has one
/// (the shape conditions are [`repack_x8`]'s).
pub fn packed_bytes(ty: GgmlType, rows: usize, cols: usize) -> Option<usize> {
    if ty == GgmlType::Q4K {
        return Some(rows / 8 * cols / 256 * Q4K_UNIT);
    }
    if ty == GgmlType::Q6K {
        return Some(rows / 8 * cols / 256 * super::repack_q6k::Q6K_UNIT);
    }
    if ty == GgmlType::Q5K {
        return Some(rows / 8 * cols / 256 * super::repack_q5k::Q5K_UNIT);
    }
    if ty == GgmlType::IQ4XS {
        return Some(rows / 8 * cols / 256 * super::repack_iq4::IQ4XS_UNIT);
    }
    Some(rows / 8 * cols / 32 * x8_unit(ty)?)
}

/// Bytes of one 256-column block of one eight-row Q4_K group.
pub const Q4K_UNIT: usize = 32 + 128 + 1024;

/// Repacks Q4_K rows into eight-row groups (see the module docs); `None`
/// unless `rows % 8 == 0` and `data` holds exactly the rows.
pub fn repack_q4_kx8(data: &[u8], rows: usize, cols: usize) -> Option<Aligned> {
    repack_with(data, rows, cols, (256, 144, Q4K_UNIT), |u, r, blk| {
        fill_q4k(u, r, &blk[..16], &blk[16..144])
    })
}

/// Row `r`'s part of a Q4_K unit (or of the Q4_K part of a Q5_K one) from
/// the block's `d`, `dmin` and packed scales (`head`, 16 bytes) and its 128
/// nibble bytes `qs`.
pub(crate) fn fill_q4k(u: &mut [u8], r: usize, head: &[u8], qs: &[u8]) {
    u[2 * r..2 * r + 2].copy_from_slice(&head[..2]);
    u[16 + 2 * r..18 + 2 * r].copy_from_slice(&head[2..4]);
    for j in 0..8 {
        let (sc, m) = super::kquants::scale_min_k4(j, &head[4..16]);
        u[32 + 8 * j + r] = sc;
        u[96 + 8 * j + r] = m;
    }
    for c in 0..4 {
        for k in 0..8 {
            u[160 + 256 * c + 32 * k + 4 * r..][..4].copy_from_slice(&qs[32 * c + 4 * k..][..4]);
        }
    }
}

/// One eight-row Q4_K group times one Q8_K activation row.
pub fn dot_q4_kx8(group: &[u8], x: &[u8]) -> [f32; 8] {
    super::repack_q5k::dot_q45_kx8(false, group, x)
}

/// [`repack_x8`] for Q4_0.
pub fn repack_q4_0x8(data: &[u8], rows: usize, cols: usize) -> Option<Aligned> {
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
/// `ds` terms were made for Q4_0 (see [`crate::rows::q8_row_terms`]).
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

    use crate::cpu::Kernels;
    use crate::quant::dot::{dot_q4_0_q8_0, dot_q8_0_q8_0, quantize_q8_0_act};
    use crate::quant::quantize_row;
    use crate::rows::{q8_row_terms, X8_N};
    use rand::{Rng, SeedableRng};

    #[test]
    fn packed_weights_start_on_a_cache_line() {
        for len in [0, 1, 63, 64, 1000, 1 << 20] {
            let a = Aligned::zeroed(len);
            assert_eq!(a.len(), len);
            assert_eq!(a.as_ptr() as usize % Aligned::ALIGN, 0);
            assert!(a.iter().all(|&b| b == 0));
        }
        let w = vec![0u8; 8 * 34];
        let p = repack_x8(GgmlType::Q8_0, &w, 8, 32).unwrap();
        assert_eq!(p.as_ptr() as usize % Aligned::ALIGN, 0);
    }

    const TYPES: [GgmlType; 6] = [
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q4_1,
        GgmlType::Q5_1,
        GgmlType::IQ4NL,
    ];

    fn reference(ty: GgmlType) -> fn(&[u8], Q8Row<'_>) -> [f32; 8] {
        match ty {
            GgmlType::Q4_0 => dot_q4_0x8,
            GgmlType::Q5_0 => dot_q5_0x8,
            GgmlType::Q4_1 => dot_q4_1x8,
            GgmlType::Q5_1 => dot_q5_1x8,
            GgmlType::IQ4NL => crate::quant::repack_iq4::dot_iq4_nlx8,
            _ => dot_q8_0x8,
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
        let (d, ds) = terms(crate::rows::zero_offset(ty), &xq);
        (xq, d, ds)
    }

    /// The per-block terms of activation rows `xq` for a zero offset.
    fn terms(offset: f32, xq: &[u8]) -> (Vec<f32>, Vec<f32>) {
        let (mut d, mut ds) = (Vec::new(), Vec::new());
        q8_row_terms(offset, xq, &mut d, &mut ds);
        (d, ds)
    }

    /// [`X8_N`] activation rows of `blocks` blocks each.
    fn rows<'a>(xq: &'a [u8], d: &'a [f32], ds: &'a [f32], blocks: usize) -> [Q8Row<'a>; X8_N] {
        std::array::from_fn(|j| Q8Row {
            q: &xq[34 * blocks * j..34 * blocks * (j + 1)],
            d: &d[blocks * j..blocks * (j + 1)],
            ds: &ds[blocks * j..blocks * (j + 1)],
        })
    }

    #[test]
    fn every_tier_matches_the_reference() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
        for ty in TYPES {
            for blocks in [1, 2, 7, 18] {
                let cols = 32 * blocks;
                let packed = repack_x8(ty, &weights(&mut rng, ty, 8, cols), 8, cols).unwrap();
                let (xq, d, ds) = acts(&mut rng, ty, X8_N, cols);
                let x = rows(&xq, &d, &ds, blocks);
                for isa in crate::cpu::tiers() {
                    let table = Kernels::for_isa(isa);
                    let (gemv, gemm) = table.x8_path(ty).unwrap();
                    let (td, tds) = terms(table.x8_zero_offset(ty), &xq);
                    let xt = rows(&xq, &td, &tds, blocks);
                    let many = gemm(&packed, xt);
                    for j in 0..X8_N {
                        let want = reference(ty)(&packed, x[j]);
                        let [one] = gemv(&packed, [xt[j]]);
                        for r in 0..8 {
                            // The offset terms cancel a large part of the integer sum: f32 rounding shows.
                            let tol = 1e-4 * want[r].abs().max(1.0) * blocks as f32;
                            assert!(
                                (many[j][r] - want[r]).abs() <= tol,
                                "{ty} {isa:?} {blocks} ({j},{r}): {} vs {}",
                                many[j][r],
                                want[r]
                            );
                            assert!((one[r] - want[r]).abs() <= tol, "{ty} {isa:?} {blocks}");
                        }
                    }
                }
            }
        }
    }

    /// The sixteen-row kernels against the reference of each of their two groups.
    #[test]
    fn sixteen_row_kernels_match_the_reference() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(16);
        let mut covered = 0;
        for ty in TYPES {
            for blocks in [1, 3, 18] {
                let cols = 32 * blocks;
                let packed = repack_x8(ty, &weights(&mut rng, ty, 16, cols), 16, cols).unwrap();
                let (g0, g1) = packed.split_at(packed.len() / 2);
                let (xq, d, ds) = acts(&mut rng, ty, X8_N, cols);
                let x = rows(&xq, &d, &ds, blocks);
                for isa in crate::cpu::tiers() {
                    let table = Kernels::for_isa(isa);
                    let Some(gemm16) = table.x16_path(ty) else {
                        continue;
                    };
                    covered += 1;
                    let (td, tds) = terms(table.x8_zero_offset(ty), &xq);
                    let xt = rows(&xq, &td, &tds, blocks);
                    let got = gemm16([g0, g1], &xt);
                    let four =
                        table.x16_path4(ty).unwrap()([g0, g1], &[xt[0], xt[1], xt[2], xt[3]]);
                    for (j, row) in four.iter().enumerate() {
                        assert_eq!(
                            row, &got[j],
                            "{ty} {isa:?}: four rows as the first four of eight"
                        );
                    }
                    for j in 0..X8_N {
                        let want = [reference(ty)(g0, x[j]), reference(ty)(g1, x[j])].concat();
                        for r in 0..16 {
                            let tol = 1e-4 * want[r].abs().max(1.0) * blocks as f32;
                            assert!(
                                (got[j][r] - want[r]).abs() <= tol,
                                "{ty} {isa:?} {blocks} ({j},{r}): {} vs {}",
                                got[j][r],
                                want[r]
                            );
                        }
                    }
                }
            }
        }
        let wide = crate::cpu::tiers()
            .into_iter()
            .filter(|&i| i >= crate::cpu::Isa::Avx512)
            .count();
        assert_eq!(
            covered,
            wide * TYPES.len() * 3,
            "the AVX-512 tiers have every type"
        );
    }

    #[test]
    fn repacked_groups_give_the_row_dots() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for ty in TYPES {
            let row_dot = match ty {
                GgmlType::Q4_0 => dot_q4_0_q8_0,
                GgmlType::Q5_0 => crate::quant::dot::dot_q5_0_q8_0,
                GgmlType::Q4_1 => crate::quant::dot::dot_q4_1_q8_0,
                GgmlType::Q5_1 => crate::quant::dot::dot_q5_1_q8_0,
                GgmlType::IQ4NL => crate::quant::dot::dot_iq4_nl_q8_0,
                _ => dot_q8_0_q8_0,
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
        assert!(repack_x8(GgmlType::Q4_1, &[0; 20 * 7], 7, 32).is_none());
        assert!(repack_x8(GgmlType::Q5_1, &[0; 24 * 8], 8, 33).is_none());
        assert!(repack_x8(GgmlType::F16, &[0; 64 * 8], 8, 32).is_none());
    }

    /// The x8 form of a K-quant type against its row dot, and every tier's
    /// kernels against the x8 reference.
    fn check_k_quant_x8(
        ty: GgmlType,
        unit: usize,
        x8_dot: fn(&[u8], &[u8]) -> [f32; 8],
        row_dot: fn(&[u8], &[u8]) -> f32,
        tier: fn(&Kernels) -> (crate::rows::K8Gemv, crate::rows::K8Gemm),
        seed: u64,
    ) {
        use crate::quant::dot::{quantize_q8_k_act, Q8_K_BYTES};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        for (rows, blocks) in [(8, 1), (16, 3)] {
            let cols = 256 * blocks;
            let w = weights(&mut rng, ty, rows, cols);
            let rb = ty.row_bytes(cols).unwrap();
            let packed = repack_x8(ty, &w, rows, cols).unwrap();
            let mut xq = vec![0u8; Q8_K_BYTES * blocks * X8_N];
            for r in xq.chunks_exact_mut(Q8_K_BYTES * blocks) {
                let src: Vec<f32> = (0..cols)
                    .map(|i| {
                        if i % 7 == 0 {
                            50.0
                        } else {
                            rng.gen_range(-3.0..3.0)
                        }
                    })
                    .collect();
                quantize_q8_k_act(&src, r);
            }
            let x: [&[u8]; X8_N] = std::array::from_fn(|j| {
                &xq[Q8_K_BYTES * blocks * j..Q8_K_BYTES * blocks * (j + 1)]
            });
            // Float sums of a row against an activation row may cancel (the
            // minimum terms against the scaled values), so rounding is bounded
            // by the sum of |w x| over the dequantized rows, not by the result.
            let magnitude = |row: &[u8], xr: &[u8]| -> f32 {
                let mut wd = vec![0f32; cols];
                crate::quant::dequantize_row(ty, row, &mut wd).unwrap();
                let xd = xr.chunks_exact(Q8_K_BYTES).flat_map(|b| {
                    let (d, q, _) = crate::quant::dot::q8k_parts(b);
                    q.iter().map(move |&v| d * v as i8 as f32)
                });
                wd.iter().zip(xd).map(|(w, x)| (w * x).abs()).sum()
            };
            for (g, group) in packed.chunks_exact(blocks * unit).enumerate() {
                for j in 0..X8_N {
                    let got = x8_dot(group, x[j]);
                    for r in 0..8 {
                        let want = row_dot(&w[(8 * g + r) * rb..][..rb], x[j]);
                        let tol = 1e-4 * want.abs().max(1.0);
                        assert!(
                            (got[r] - want).abs() <= tol,
                            "{ty} {rows}x{cols} ({r},{j}): {} vs {want}",
                            got[r]
                        );
                    }
                    let mags: [f32; 8] =
                        std::array::from_fn(|r| magnitude(&w[(8 * g + r) * rb..][..rb], x[j]));
                    for isa in crate::cpu::tiers() {
                        let (gemv, gemm) = tier(&Kernels::for_isa(isa));
                        let [one] = gemv(group, [x[j]]);
                        let many = gemm(group, x);
                        for r in 0..8 {
                            let tol = 1e-6 * mags[r] + 1e-4 * got[r].abs().max(1.0);
                            assert!(
                                (one[r] - got[r]).abs() <= tol,
                                "{ty} {isa:?} {rows}x{cols} g{g} j{j} r{r}: {} vs {}",
                                one[r],
                                got[r]
                            );
                            assert!(
                                (many[j][r] - got[r]).abs() <= tol,
                                "{ty} {isa:?} {rows}x{cols}"
                            );
                        }
                    }
                }
            }
        }
        // The sixteen-row kernels against the eight-row reference of each group.
        let cols = 256 * 3;
        let w = weights(&mut rng, ty, 16, cols);
        let packed = repack_x8(ty, &w, 16, cols).unwrap();
        let (g0, g1) = packed.split_at(packed.len() / 2);
        let mut xq = vec![0u8; Q8_K_BYTES * 3 * X8_N];
        for r in xq.chunks_exact_mut(Q8_K_BYTES * 3) {
            let src: Vec<f32> = (0..cols).map(|_| rng.gen_range(-3.0..3.0)).collect();
            quantize_q8_k_act(&src, r);
        }
        let x: [&[u8]; X8_N] =
            std::array::from_fn(|j| &xq[Q8_K_BYTES * 3 * j..Q8_K_BYTES * 3 * (j + 1)]);
        for isa in crate::cpu::tiers() {
            let Some(gemm16) = Kernels::for_isa(isa).k16_path(ty) else {
                continue;
            };
            let got = gemm16([g0, g1], &x);
            for j in 0..X8_N {
                let want = [x8_dot(g0, x[j]), x8_dot(g1, x[j])].concat();
                for r in 0..16 {
                    let tol = 1e-4 * want[r].abs().max(1.0);
                    assert!(
                        (got[j][r] - want[r]).abs() <= tol,
                        "{ty} {isa:?} x16 ({j},{r}): {} vs {}",
                        got[j][r],
                        want[r]
                    );
                }
            }
        }
        assert!(repack_x8(ty, &vec![0; rb_of(ty) * 4], 4, 256).is_none());
    }

    fn rb_of(ty: GgmlType) -> usize {
        ty.row_bytes(256).unwrap()
    }

    #[test]
    fn q4_k_groups_match_the_row_dots_on_every_tier() {
        use crate::quant::dot::dot_q4_k_q8_k;
        check_k_quant_x8(
            GgmlType::Q4K,
            Q4K_UNIT,
            dot_q4_kx8,
            dot_q4_k_q8_k,
            |k| k.q4_kx8,
            13,
        );
    }

    #[test]
    fn q5_k_groups_match_the_row_dots_on_every_tier() {
        use crate::quant::dot::dot_q5_k_q8_k;
        use crate::quant::repack_q5k::{dot_q5_kx8, Q5K_UNIT};
        check_k_quant_x8(
            GgmlType::Q5K,
            Q5K_UNIT,
            dot_q5_kx8,
            dot_q5_k_q8_k,
            |k| k.q5_kx8,
            15,
        );
    }

    #[test]
    fn q6_k_groups_match_the_row_dots_on_every_tier() {
        use crate::quant::dot::dot_q6_k_q8_k;
        use crate::quant::repack_q6k::{dot_q6_kx8, Q6K_UNIT};
        check_k_quant_x8(
            GgmlType::Q6K,
            Q6K_UNIT,
            dot_q6_kx8,
            dot_q6_k_q8_k,
            |k| k.q6_kx8,
            14,
        );
    }

    #[test]
    fn iq4_xs_groups_match_the_row_dots_on_every_tier() {
        use crate::quant::dot::dot_iq4_xs_q8_k;
        use crate::quant::repack_iq4::{dot_iq4_xsx8, IQ4XS_UNIT};
        check_k_quant_x8(
            GgmlType::IQ4XS,
            IQ4XS_UNIT,
            dot_iq4_xsx8,
            dot_iq4_xs_q8_k,
            |k| k.iq4_xsx8,
            17,
        );
    }
}
