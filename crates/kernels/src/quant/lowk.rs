//! The 2- and 3-bit k-quants, Q2_K and Q3_K (256-element super-blocks of
//! sixteen 16-element sub-blocks), as ggml lays them out:
//! - Q2_K: `scales: [u8; 16]` (4-bit scale low, 4-bit min high), `qs: [u8; 64]`,
//!   `d: f16`, `dmin: f16` (84 bytes); value = `d * sc * q2 - dmin * m`.
//! - Q3_K: `hmask: [u8; 32]`, `qs: [u8; 64]`, `scales: [u8; 12]` (sixteen
//!   6-bit scales), `d: f16` (110 bytes); value = `d * (sc - 32) * (q3 - 4)`,
//!   `q3` = two low bits from `qs`, the third from `hmask`.
//!
//! In both, element `128 * h + 32 * s + 16 * k + l` (half `h`, shift `s`,
//! sub-block half `k`) takes bits `2s..2s+2` of `qs[32h + 16k + l]`, and
//! Q3_K's high bit is bit `4h + s` of `hmask[16k + l]`: sub-block
//! `8h + 2s + k`. The quantizers are line-by-line ports of ggml's
//! `quantize_row_q*_K_ref`, so their output is bit-exact.

use super::kquants::{make_qkx2_quants, QK_K};
use super::{nearest_int, read_f16, write_f16};

pub const Q2_K_BYTES: usize = 84;
pub const Q3_K_BYTES: usize = 110;
const GROUP_MAX_EPS: f32 = 1e-15;

/// The 2-bit field of element `i` (0..256) of a block's `qs`.
#[inline]
pub fn q2_at(qs: &[u8], i: usize) -> u8 {
    let (h, r) = (i / 128, i % 128);
    let (s, l) = (r / 32, r % 32);
    (qs[32 * h + l] >> (2 * s)) & 3
}

/// Q3_K's sixteen signed 6-bit scales (`sc - 32`): scale `j`'s low four
/// bits are nibble `j % 8` of bytes 0-7 (low nibbles first), its high two
/// bits are bits `2 (j / 4)` of byte `8 + j % 4`; unpacked four at a time.
#[inline]
pub fn q3_scales(packed: &[u8]) -> [i8; 16] {
    const K1: u32 = 0x0303_0303;
    const K2: u32 = 0x0f0f_0f0f;
    let word =
        |i: usize| u32::from_le_bytes([packed[i], packed[i + 1], packed[i + 2], packed[i + 3]]);
    let (a0, a1, a2) = (word(0), word(4), word(8));
    let words = [
        (a0 & K2) | ((a2 & K1) << 4),
        (a1 & K2) | (((a2 >> 2) & K1) << 4),
        ((a0 >> 4) & K2) | (((a2 >> 4) & K1) << 4),
        ((a1 >> 4) & K2) | (((a2 >> 6) & K1) << 4),
    ];
    let mut out = [0i8; 16];
    for (o, b) in out
        .iter_mut()
        .zip(words.iter().flat_map(|w| w.to_le_bytes()))
    {
        *o = b as i8 - 32;
    }
    out
}

/// Q3_K's value of element `i` before scaling: `q3 - 4`, in -4..=3.
#[inline]
pub fn q3_at(hmask: &[u8], qs: &[u8], i: usize) -> i8 {
    let (h, r) = (i / 128, i % 128);
    let (s, l) = (r / 32, r % 32);
    let low = (qs[32 * h + l] >> (2 * s)) & 3;
    let high = (hmask[l] >> (4 * h + s)) & 1;
    (low | (high << 2)) as i8 - 4
}

pub fn dequantize_q2_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q2_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let (scales, qs) = (&b[..16], &b[16..80]);
        let (d, min) = (read_f16(&b[80..82]), read_f16(&b[82..84]));
        for (i, v) in y.iter_mut().enumerate() {
            let sc = scales[i / 16];
            let (dl, ml) = (d * (sc & 0xf) as f32, min * (sc >> 4) as f32);
            *v = dl * q2_at(qs, i) as f32 - ml;
        }
    }
}

pub fn dequantize_q3_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q3_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let (hmask, qs) = (&b[..32], &b[32..96]);
        let sc = q3_scales(&b[96..108]);
        let d = read_f16(&b[108..110]);
        for (i, v) in y.iter_mut().enumerate() {
            *v = d * sc[i / 16] as f32 * q3_at(hmask, qs, i) as f32;
        }
    }
}

/// Packs 256 two-bit values as ggml's `qs`.
fn pack_q2(l: &[u8; QK_K], qs: &mut [u8]) {
    for j in (0..QK_K).step_by(128) {
        for i in 0..32 {
            qs[j / 4 + i] =
                l[j + i] | (l[j + i + 32] << 2) | (l[j + i + 64] << 4) | (l[j + i + 96] << 6);
        }
    }
}

pub fn quantize_q2_k(src: &[f32], dst: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    for (x, y) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q2_K_BYTES)) {
        let mut l = [0u8; QK_K];
        let mut laux = [0u8; 16];
        let mut weights = [0f32; 16];
        let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for j in 0..16 {
            let xs = &x[16 * j..16 * j + 16];
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let (s, m) = make_qkx2_quants(
                3,
                xs,
                &weights,
                &mut l[16 * j..16 * j + 16],
                &mut laux,
                -0.5,
                0.1,
                15,
                true,
            );
            scales[j] = s;
            mins[j] = m;
            max_scale = max_scale.max(s);
            max_min = max_min.max(m);
        }
        let (sc, rest) = y.split_at_mut(16);
        let (qs, dd) = rest.split_at_mut(64);
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            write_f16(&mut dd[0..2], max_scale / Q4SCALE);
        } else {
            sc.fill(0);
            write_f16(&mut dd[0..2], 0.0);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                sc[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
            write_f16(&mut dd[2..4], max_min / Q4SCALE);
        } else {
            write_f16(&mut dd[2..4], 0.0);
        }
        let (d, dmin) = (read_f16(&dd[0..2]), read_f16(&dd[2..4]));
        for j in 0..16 {
            let dj = d * (sc[j] & 0xf) as f32;
            if dj == 0.0 {
                continue;
            }
            let dm = dmin * (sc[j] >> 4) as f32;
            for ii in 0..16 {
                let q = nearest_int((x[16 * j + ii] + dm) / dj);
                l[16 * j + ii] = q.clamp(0, 3) as u8;
            }
        }
        pack_q2(&l, qs);
    }
}

/// ggml's `make_q3_quants` with `do_rmse`: a symmetric `nmax`-level
/// quantization refined element by element. Levels are written offset by
/// `nmax`; returns the scale.
fn make_q3_quants(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let (max, amax) = super::signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l[..x.len()].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (i, &v) in x.iter().enumerate() {
        let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        l[i] = q as i8;
        let w = v * v;
        sumlx += w * v * q as f32;
        suml2 += w * (q * q) as f32;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for (i, &v) in x.iter().enumerate() {
            let w = v * v;
            let li = l[i] as f32;
            let mut slx = sumlx - w * v * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l[i] as i32 {
                    slx += w * v * new_l as f32;
                    sl2 += w * (new_l * new_l) as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    for q in l[..x.len()].iter_mut() {
        *q += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

pub fn quantize_q3_k(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q3_K_BYTES)) {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for j in 0..16 {
            scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            if scales[j].abs() > amax {
                amax = scales[j].abs();
                max_scale = scales[j];
            }
        }
        let (hmask, rest) = y.split_at_mut(32);
        let (qs, rest) = rest.split_at_mut(64);
        let (sc, dd) = rest.split_at_mut(12);
        sc.fill(0);
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                // ggml stores nearest_int's result in an int8_t first.
                let q = (nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) as i32 + 32;
                if j < 8 {
                    sc[j] = (q & 0xf) as u8;
                } else {
                    sc[j - 8] |= ((q & 0xf) << 4) as u8;
                }
                sc[j % 4 + 8] |= ((q >> 4) << (2 * (j / 4))) as u8;
            }
            write_f16(dd, 1.0 / iscale);
        } else {
            write_f16(dd, 0.0);
        }
        let d = read_f16(dd);
        let sj = q3_scales(sc);
        let mut lu = [0u8; QK_K];
        for (i, o) in lu.iter_mut().enumerate() {
            *o = l[i] as u8;
        }
        for j in 0..16 {
            let dj = d * sj[j] as f32;
            if dj == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / dj).clamp(-4, 3);
                lu[16 * j + ii] = (q + 4) as u8;
            }
        }
        hmask.fill(0);
        let (mut m, mut hm) = (0usize, 1u8);
        for v in lu.iter_mut() {
            if *v > 3 {
                hmask[m] |= hm;
                *v -= 4;
            }
            m += 1;
            if m == QK_K / 8 {
                m = 0;
                hm <<= 1;
            }
        }
        pack_q2(&lu, qs);
    }
}
