//! The 32-element block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//!
//! Byte layouts (little-endian), as in ggml's `block_q*` structs:
//! - Q4_0: `d: f16, qs: [u8; 16]` (18 bytes), value = (nibble - 8) * d
//! - Q4_1: `d: f16, m: f16, qs: [u8; 16]` (20 bytes), value = nibble * d + m
//! - Q5_0: `d: f16, qh: u32, qs: [u8; 16]` (22 bytes), value = (q5 - 16) * d
//! - Q5_1: `d: f16, m: f16, qh: u32, qs: [u8; 16]` (24 bytes), value = q5 * d + m
//! - Q8_0: `d: f16, qs: [i8; 32]` (34 bytes), value = q * d
//!
//! Low nibbles hold elements 0..16 of a block, high nibbles 16..32.

use super::{read_f16, write_f16};

pub const QK: usize = 32;
pub const Q4_0_BYTES: usize = 18;
pub const Q4_1_BYTES: usize = 20;
pub const Q5_0_BYTES: usize = 22;
pub const Q5_1_BYTES: usize = 24;
pub const Q8_0_BYTES: usize = 34;

/// Returns (value with the largest magnitude, signed) over a block, as ggml.
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        min = min.min(v);
        max = max.max(v);
    }
    (min, max)
}

fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

pub fn quantize_q4_0(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q4_0_BYTES)) {
        let d = signed_absmax(x) / -8.0;
        let id = inverse(d);
        write_f16(&mut y[0..2], d);
        for j in 0..QK / 2 {
            let x0 = x[j] * id;
            let x1 = x[QK / 2 + j] * id;
            // C: MIN(15, (int8_t)(x + 8.5f)); `as i8` truncates like the C cast here.
            let xi0 = ((x0 + 8.5) as i8).min(15) as u8;
            let xi1 = ((x1 + 8.5) as i8).min(15) as u8;
            y[2 + j] = xi0 | (xi1 << 4);
        }
    }
}

pub fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q4_0_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(&b[0..2]);
        for j in 0..QK / 2 {
            let q = b[2 + j];
            y[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
            y[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

pub fn quantize_q4_1(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q4_1_BYTES)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inverse(d);
        write_f16(&mut y[0..2], d);
        write_f16(&mut y[2..4], min);
        for j in 0..QK / 2 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[QK / 2 + j] - min) * id;
            let xi0 = ((x0 + 0.5) as i8).min(15) as u8;
            let xi1 = ((x1 + 0.5) as i8).min(15) as u8;
            y[4 + j] = xi0 | (xi1 << 4);
        }
    }
}

pub fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q4_1_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(&b[0..2]);
        let m = read_f16(&b[2..4]);
        for j in 0..QK / 2 {
            let q = b[4 + j];
            y[j] = (q & 0x0f) as f32 * d + m;
            y[j + QK / 2] = (q >> 4) as f32 * d + m;
        }
    }
}

/// Packs 32 five-bit values: low nibbles into `qs`, fifth bits into `qh`.
fn pack_q5(l: &[u8; QK], qh_out: &mut [u8], qs: &mut [u8]) {
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let (xi0, xi1) = (l[j], l[QK / 2 + j]);
        qs[j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
        qh |= (((xi0 & 0x10) >> 4) as u32) << j;
        qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK / 2);
    }
    qh_out[..4].copy_from_slice(&qh.to_le_bytes());
}

/// Unpacks the 32 five-bit values of a Q5 block.
fn unpack_q5(qh: &[u8], qs: &[u8]) -> [u8; QK] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut l = [0u8; QK];
    for j in 0..QK / 2 {
        let xh0 = (((qh >> j) << 4) & 0x10) as u8;
        let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
        l[j] = (qs[j] & 0x0f) | xh0;
        l[j + QK / 2] = (qs[j] >> 4) | xh1;
    }
    l
}

pub fn quantize_q5_0(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q5_0_BYTES)) {
        let d = signed_absmax(x) / -16.0;
        let id = inverse(d);
        write_f16(&mut y[0..2], d);
        let mut l = [0u8; QK];
        for (li, &v) in l.iter_mut().zip(x) {
            *li = ((v * id + 16.5) as i8).min(31) as u8;
        }
        let (qh, qs) = y[2..].split_at_mut(4);
        pack_q5(&l, qh, qs);
    }
}

pub fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q5_0_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(&b[0..2]);
        let l = unpack_q5(&b[2..6], &b[6..]);
        for (yi, &q) in y.iter_mut().zip(&l) {
            *yi = (q as i32 - 16) as f32 * d;
        }
    }
}

pub fn quantize_q5_1(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q5_1_BYTES)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inverse(d);
        write_f16(&mut y[0..2], d);
        write_f16(&mut y[2..4], min);
        let mut l = [0u8; QK];
        for (li, &v) in l.iter_mut().zip(x) {
            // C: (uint8_t)(x0 + 0.5f); the value is in [0, 31.5], so `as u8` matches.
            *li = ((v - min) * id + 0.5) as u8;
        }
        let (qh, qs) = y[4..].split_at_mut(4);
        pack_q5(&l, qh, qs);
    }
}

pub fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q5_1_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(&b[0..2]);
        let m = read_f16(&b[2..4]);
        let l = unpack_q5(&b[4..8], &b[8..]);
        for (yi, &q) in y.iter_mut().zip(&l) {
            *yi = q as f32 * d + m;
        }
    }
}

pub fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q8_0_BYTES)) {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = inverse(d);
        write_f16(&mut y[0..2], d);
        for (q, &v) in y[2..].iter_mut().zip(x) {
            // C: roundf (half away from zero), which is Rust's f32::round.
            *q = ((v * id).round() as i8) as u8;
        }
    }
}

pub fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q8_0_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(&b[0..2]);
        for (yi, &q) in y.iter_mut().zip(&b[2..]) {
            *yi = (q as i8) as f32 * d;
        }
    }
}
