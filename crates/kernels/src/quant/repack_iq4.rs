//! IQ4_NL and IQ4_XS in eight-row groups ("x8", see [`super::repack`]).
//!
//! - IQ4_NL has Q4_0's block shape (an f16 scale and 16 nibble bytes per
//!   32 values), so its groups are Q4_0's layout byte for byte (built by
//!   [`super::repack::repack_x8`]'s common path); only the kernels differ:
//!   each nibble is looked up in [`LEVELS`] instead of having 8 taken off.
//! - IQ4_XS units of [`IQ4XS_UNIT`] bytes per 256-column block hold `d` of
//!   the 8 rows (f16, 16 bytes), the sub-block multipliers `ls - 32` as
//!   signed bytes `sc[j][r]` at `16 + 8j + r` (64 bytes), then for each
//!   32-element sub-block `j` and `k < 4` the quant bytes `16j + 4k ..
//!   16j + 4k + 4` of each row at `80 + 128j + 32k + 4r` (1024 bytes): low
//!   nibbles are elements `32j + 4k + e`, high ones `32j + 16 + 4k + e`.
//!   138 bytes per row and block against the file's 136.
//!
//! The scalar references here are what the SIMD tiers are tested against.

use super::dot::{q8k_parts, Q8_K_BYTES};
use super::iquants::{xs_scales, IQ4_XS_BYTES, LEVELS};
use super::read_f16;
use super::repack::{repack_with, Aligned};
use crate::rows::Q8Row;

/// Bytes of one 32-column block of one eight-row IQ4_NL group (Q4_0's).
pub const IQ4NL_UNIT: usize = 16 + 8 * 16;

/// Bytes of one 256-column block of one eight-row IQ4_XS group.
pub const IQ4XS_UNIT: usize = 16 + 64 + 1024;

/// Repacks IQ4_XS rows; `None` unless `rows % 8 == 0`, `cols % 256 == 0`
/// and `data` holds exactly the rows.
pub fn repack_iq4_xsx8(data: &[u8], rows: usize, cols: usize) -> Option<Aligned> {
    repack_with(
        data,
        rows,
        cols,
        (256, IQ4_XS_BYTES, IQ4XS_UNIT),
        |u, r, b| {
            u[2 * r..2 * r + 2].copy_from_slice(&b[..2]);
            for (j, ls) in xs_scales(b).iter().enumerate() {
                u[16 + 8 * j + r] = *ls as i8 as u8;
            }
            for j in 0..8 {
                for k in 0..4 {
                    u[80 + 128 * j + 32 * k + 4 * r..][..4]
                        .copy_from_slice(&b[8 + 16 * j + 4 * k..][..4]);
                }
            }
        },
    )
}

/// One eight-row IQ4_NL group times one activation row (`ds` made for
/// offset 0, or the offset the tier's kernels expect: the `8 ds` term is
/// added as for the other 32-element types).
pub fn dot_iq4_nlx8(group: &[u8], x: Q8Row<'_>) -> [f32; 8] {
    let mut acc = [0f32; 8];
    for (b, unit) in group.chunks_exact(IQ4NL_UNIT).enumerate() {
        let xq = &x.q[34 * b + 2..34 * b + 34];
        for (r, a) in acc.iter_mut().enumerate() {
            let mut sum = 0i32;
            for k in 0..4 {
                for e in 0..4 {
                    let byte = unit[16 + 32 * k + 4 * r + e];
                    sum += LEVELS[(byte & 0x0f) as usize] as i32 * xq[4 * k + e] as i8 as i32;
                    sum += LEVELS[(byte >> 4) as usize] as i32 * xq[16 + 4 * k + e] as i8 as i32;
                }
            }
            let dw = read_f16(&unit[2 * r..2 * r + 2]);
            *a += dw * (x.d[b] * sum as f32 + 8.0 * x.ds[b]);
        }
    }
    acc
}

/// One eight-row IQ4_XS group times one Q8_K activation row.
pub fn dot_iq4_xsx8(group: &[u8], x: &[u8]) -> [f32; 8] {
    let mut acc = [0f32; 8];
    for (u, bx) in group
        .chunks_exact(IQ4XS_UNIT)
        .zip(x.chunks_exact(Q8_K_BYTES))
    {
        let (dx, q8, _) = q8k_parts(bx);
        for (r, a) in acc.iter_mut().enumerate() {
            let mut total = 0i32;
            for j in 0..8 {
                let mut s = 0i32;
                for k in 0..4 {
                    for e in 0..4 {
                        let byte = u[80 + 128 * j + 32 * k + 4 * r + e];
                        let i = 32 * j + 4 * k + e;
                        s += LEVELS[(byte & 0x0f) as usize] as i32 * q8[i] as i8 as i32;
                        s += LEVELS[(byte >> 4) as usize] as i32 * q8[i + 16] as i8 as i32;
                    }
                }
                total += u[16 + 8 * j + r] as i8 as i32 * s;
            }
            *a += read_f16(&u[2 * r..2 * r + 2]) * dx * total as f32;
        }
    }
    acc
}

// Tested by `super::repack`'s tests with the other x8 layouts.
