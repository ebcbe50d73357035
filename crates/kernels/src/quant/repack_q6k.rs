//! Q6_K in eight-row groups ("x8", see [`super::repack`]), with the 6-bit
//! values widened to bytes: units of [`Q6K_UNIT`] bytes per 256-column block
//! hold `d` of the 8 rows (f16, 16 bytes), the 16 group scales `sc[g][r]`
//! (i8, 128 bytes), then for each 32-element sub-block `s` and `k < 8` the
//! values of elements `32s + 4k .. 32s + 4k + 4` of each row (unsigned,
//! 0..64, 2048 bytes). Bytes instead of 6-bit fields cost 30% more memory
//! for these tensors and spare the kernels all unpacking.

use super::dot::{q8k_parts, Q8_K_BYTES};
use super::read_f16;
use super::repack::repack_with;

/// Bytes of one 256-column block of one eight-row Q6_K group.
pub const Q6K_UNIT: usize = 16 + 128 + 2048;

/// Repacks Q6_K rows; `None` unless `rows % 8 == 0`, `cols % 256 == 0` and
/// `data` holds exactly the rows.
pub fn repack_q6_kx8(data: &[u8], rows: usize, cols: usize) -> Option<super::repack::Aligned> {
    repack_with(data, rows, cols, (256, 210, Q6K_UNIT), |u, r, bw| {
        let (ql, qh, sc) = (&bw[0..128], &bw[128..192], &bw[192..208]);
        u[2 * r..2 * r + 2].copy_from_slice(&bw[208..210]);
        for (j, &s) in sc.iter().enumerate() {
            u[16 + 8 * j + r] = s;
        }
        let mut q6 = [0u8; 256];
        for h in 0..2 {
            for l in 0..32 {
                let (a, c, hb) = (ql[64 * h + l], ql[64 * h + 32 + l], qh[32 * h + l]);
                q6[128 * h + l] = (a & 0xf) | ((hb & 3) << 4);
                q6[128 * h + 32 + l] = (c & 0xf) | (((hb >> 2) & 3) << 4);
                q6[128 * h + 64 + l] = (a >> 4) | (((hb >> 4) & 3) << 4);
                q6[128 * h + 96 + l] = (c >> 4) | (((hb >> 6) & 3) << 4);
            }
        }
        for s in 0..8 {
            for k in 0..8 {
                u[144 + 256 * s + 32 * k + 4 * r..][..4]
                    .copy_from_slice(&q6[32 * s + 4 * k..32 * s + 4 * k + 4]);
            }
        }
    })
}

/// One eight-row Q6_K group times one Q8_K activation row.
pub fn dot_q6_kx8(group: &[u8], x: &[u8]) -> [f32; 8] {
    let mut acc = [0f32; 8];
    for (u, bx) in group.chunks_exact(Q6K_UNIT).zip(x.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, _) = q8k_parts(bx);
        for (r, a) in acc.iter_mut().enumerate() {
            let mut total = 0i32;
            for g in 0..16 {
                let mut s = 0i32;
                for l in 0..16 {
                    let i = 16 * g + l;
                    let v = u[144 + 256 * (i / 32) + 32 * ((i % 32) / 4) + 4 * r + i % 4] as i32;
                    s += (v - 32) * q8[i] as i8 as i32;
                }
                total += u[16 + 8 * g + r] as i8 as i32 * s;
            }
            *a += read_f16(&u[2 * r..2 * r + 2]) * dx * total as f32;
        }
    }
    acc
}

// Tested with Q4_K by `super::repack`'s `check_k_quant_x8`.
