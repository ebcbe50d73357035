//! Q5_K in eight-row groups ("x8", see [`super::repack`]): units of
//! [`Q5K_UNIT`] bytes per 256-column block are the Q4_K unit (`d`, `dmin`,
//! decoded sub-block scales and minimums, the low nibbles in the Q4_K
//! arrangement) followed by the fifth bits: for each 64-element chunk `c`
//! and half `h` (`k = 4h + kk`, `kk < 4`), 32 bytes at
//! `1184 + 64c + 32h` whose byte `4r + e` holds, at bit `2kk`, the fifth bit
//! of row `r`'s element `64c + 4k + e` (the low nibble of quant byte
//! `32c + 4k + e`) and, at bit `2kk + 1`, that of element `64c + 32 + 4k + e`
//! (its high nibble). 180 bytes per row and block against the file's 176.

use super::dot::{q8k_parts, Q8_K_BYTES};
use super::read_f16;
use super::repack::{fill_q4k, repack_with, Q4K_UNIT};

/// Bytes of one 256-column block of one eight-row Q5_K group.
pub const Q5K_UNIT: usize = Q4K_UNIT + 256;

/// Bytes of one Q5_K block in the file.
const BLOCK: usize = 176;

/// Repacks Q5_K rows; `None` unless `rows % 8 == 0`, `cols % 256 == 0` and
/// `data` holds exactly the rows.
pub fn repack_q5_kx8(data: &[u8], rows: usize, cols: usize) -> Option<super::repack::Aligned> {
    repack_with(data, rows, cols, (256, BLOCK, Q5K_UNIT), |u, r, blk| {
        let (qh, qs) = (&blk[16..48], &blk[48..176]);
        fill_q4k(u, r, &blk[..16], qs);
        for c in 0..4 {
            for k in 0..8 {
                let (h, kk) = (k / 4, k % 4);
                for e in 0..4 {
                    // qh[l] bit 2c: element 64c + l; bit 2c + 1: element 64c + 32 + l.
                    let l = 4 * k + e;
                    let lo = (qh[l] >> (2 * c)) & 1;
                    let hi = (qh[l] >> (2 * c + 1)) & 1;
                    u[Q4K_UNIT + 64 * c + 32 * h + 4 * r + e] |=
                        (lo << (2 * kk)) | (hi << (2 * kk + 1));
                }
            }
        }
    })
}

/// The value of row `r`'s element `64c + 32 * high + 4k + e` in a Q4_K unit,
/// or with `five` a Q5_K one (the fifth bit above the nibble).
fn value(five: bool, u: &[u8], r: usize, (c, high): (usize, bool), k: usize, e: usize) -> u8 {
    let byte = u[160 + 256 * c + 32 * k + 4 * r + e];
    let nibble = if high { byte >> 4 } else { byte & 0x0f };
    if !five {
        return nibble;
    }
    let bits = u[Q4K_UNIT + 64 * c + 32 * (k / 4) + 4 * r + e];
    nibble | (((bits >> (2 * (k % 4) + high as usize)) & 1) << 4)
}

/// One eight-row Q5_K group times one Q8_K activation row.
pub fn dot_q5_kx8(group: &[u8], x: &[u8]) -> [f32; 8] {
    dot_q45_kx8(true, group, x)
}

/// One eight-row Q4_K (or, with `five`, Q5_K) group times one Q8_K activation row.
pub(crate) fn dot_q45_kx8(five: bool, group: &[u8], x: &[u8]) -> [f32; 8] {
    let unit = if five { Q5K_UNIT } else { Q4K_UNIT };
    let mut acc = [0f32; 8];
    for (u, bx) in group.chunks_exact(unit).zip(x.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, bsums) = q8k_parts(bx);
        for (r, a) in acc.iter_mut().enumerate() {
            let (mut total, mut mins) = (0i32, 0i32);
            for j in 0..8 {
                let mut s = 0i32;
                for k in 0..8 {
                    for e in 0..4 {
                        let q = value(five, u, r, (j / 2, j % 2 == 1), k, e);
                        s += q as i32 * q8[32 * j + 4 * k + e] as i8 as i32;
                    }
                }
                total += u[32 + 8 * j + r] as i32 * s;
                mins += u[96 + 8 * j + r] as i32 * (bsums[2 * j] + bsums[2 * j + 1]);
            }
            let d = read_f16(&u[2 * r..2 * r + 2]) * dx;
            let dmin = read_f16(&u[16 + 2 * r..18 + 2 * r]) * dx;
            *a += d * total as f32 - dmin * mins as f32;
        }
    }
    acc
}
