//! The non-linear 4-bit formats IQ4_NL and IQ4_XS: each 4-bit code indexes
//! a fixed table of 16 signed levels (denser near zero) instead of standing
//! for itself.
//!
//! - IQ4_NL: `d: f16, qs: [u8; 16]` per 32 values (18 bytes); value =
//!   `d * LEVELS[code]`, the low nibbles holding values 0..16 and the high
//!   nibbles 16..32, as in Q4_0.
//! - IQ4_XS: per 256 values `d: f16, scales_h: u16, scales_l: [u8; 4],
//!   qs: [u8; 128]` (136 bytes): eight 32-value sub-blocks, each with a
//!   6-bit scale `ls` (low 4 bits in `scales_l`, high 2 in `scales_h`);
//!   value = `d * (ls - 32) * LEVELS[code]`.
//!
//! Quantization follows ggml's `quantize_row_iq4_{nl,xs}_ref` (no importance
//! weights): per sub-block, the scale that maps the largest magnitude onto
//! an end of the table, fitted by weighted least squares; IQ4_XS also tries
//! 15 nearby scales and keeps the best fit, then quantizes the sub-block
//! scales to 6 bits and the values again. Goldens from ggml's own routines
//! check both bit for bit (`tools/goldens/quant_goldens.py`).

use super::kquants::QK_K;
use super::{nearest_int, read_f16};
use half::f16;

/// The 16 levels a code stands for (ggml's `kvalues_iq4nl`).
pub const LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

pub const IQ4_NL_BYTES: usize = 18;
pub const IQ4_XS_BYTES: usize = 2 + 2 + QK_K / 64 + QK_K / 2;

const QK: usize = 32;
/// Scale candidates tried on each side of the first guess.
const TRIES: i32 = 7;
/// Sub-blocks with no value larger than this quantize to zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// The index of the level nearest to `x` (the upper one on a tie).
fn nearest_level(x: f32) -> u8 {
    let v = |i: usize| LEVELS[i] as f32;
    if x <= v(0) {
        return 0;
    }
    if x >= v(15) {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < v(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - v(hi - 1) < v(hi) - x {
        (hi - 1) as u8
    } else {
        hi as u8
    }
}

/// Weighted fit of codes for `x` at inverse scale `id`: (Σ w q x, Σ w q²).
fn fit(x: &[f32], id: f32) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for &v in x {
        let q = LEVELS[nearest_level(id * v) as usize] as f32;
        let w = v * v;
        sumqx += w * q * v;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The scale of one 32-value sub-block (0 for an all-zero one) and the
/// codes of the first guess. With `tries > 0` the first guess puts the
/// largest magnitude at the table's far negative end and `2 * tries + 1`
/// scales around it are tried; with `tries <= 0` (IQ4_NL's reference
/// quantizer) the first guess maps it the other way and is kept.
fn block_scale(x: &[f32], tries: i32) -> (f32, [u8; QK]) {
    let (max, amax) = super::signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        return (0.0, [0; QK]);
    }
    let first = LEVELS[0] as f32;
    let guess = if tries > 0 { -max / first } else { max / first };
    let id = 1.0 / guess;
    let first_codes = codes(x, id);
    let (sumqx, sumq2) = fit(x, id);
    let mut d = sumqx / sumq2;
    let mut best = d * sumqx;
    for t in -tries..=tries {
        let (sumqx, sumq2) = fit(x, (t as f32 + first) / max);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    (d, first_codes)
}

/// Packs 32 codes as `qs`: value j's code low, value j + 16's high.
fn pack(codes: &[u8], qs: &mut [u8]) {
    for j in 0..QK / 2 {
        qs[j] = codes[j] | (codes[j + QK / 2] << 4);
    }
}

fn codes(x: &[f32], id: f32) -> [u8; QK] {
    let mut c = [0u8; QK];
    for (c, &v) in c.iter_mut().zip(x) {
        *c = nearest_level(id * v);
    }
    c
}

/// As ggml's `quantize_row_iq4_nl_ref`: the fitted scale of the first
/// guess, with that guess's codes (no search).
pub fn quantize_iq4_nl(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(IQ4_NL_BYTES)) {
        let (d, codes) = block_scale(x, -1);
        y[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        pack(&codes, &mut y[2..]);
    }
}

pub fn dequantize_iq4_nl(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(IQ4_NL_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(&b[0..2]);
        for j in 0..QK / 2 {
            y[j] = d * LEVELS[(b[2 + j] & 0x0f) as usize] as f32;
            y[j + QK / 2] = d * LEVELS[(b[2 + j] >> 4) as usize] as f32;
        }
    }
}

pub fn quantize_iq4_xs(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src
        .chunks_exact(QK_K)
        .zip(dst.chunks_exact_mut(IQ4_XS_BYTES))
    {
        let mut scales = [0.0f32; QK_K / QK];
        let mut max_scale = 0.0f32;
        for (s, xb) in scales.iter_mut().zip(x.chunks_exact(QK)) {
            *s = block_scale(xb, TRIES).0;
            if s.abs() > max_scale.abs() {
                max_scale = *s;
            }
        }
        let d = -max_scale / 32.0;
        y[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let (mut scales_h, mut scales_l) = (0u16, [0u8; QK_K / 64]);
        for (ib, xb) in x.chunks_exact(QK).enumerate() {
            let l = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * l as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            pack(&codes(xb, idl), &mut y[8 + ib * 16..8 + (ib + 1) * 16]);
            let l = (l + 32) as u8;
            scales_l[ib / 2] |= (l & 0x0f) << (4 * (ib % 2));
            scales_h |= ((l >> 4) as u16) << (2 * ib);
        }
        y[2..4].copy_from_slice(&scales_h.to_le_bytes());
        y[4..8].copy_from_slice(&scales_l);
    }
}

/// The eight sub-block multipliers `ls - 32` of an IQ4_XS block.
pub(crate) fn xs_scales(b: &[u8]) -> [i32; QK_K / QK] {
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    std::array::from_fn(|ib| {
        let lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0f;
        let hi = ((scales_h >> (2 * ib)) & 3) as u8;
        (lo | (hi << 4)) as i32 - 32
    })
}

pub fn dequantize_iq4_xs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ4_XS_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = read_f16(&b[0..2]);
        for (ib, (ls, yb)) in xs_scales(b).iter().zip(y.chunks_exact_mut(QK)).enumerate() {
            let dl = d * *ls as f32;
            let qs = &b[8 + ib * 16..8 + (ib + 1) * 16];
            for j in 0..QK / 2 {
                yb[j] = dl * LEVELS[(qs[j] & 0x0f) as usize] as f32;
                yb[j + QK / 2] = dl * LEVELS[(qs[j] >> 4) as usize] as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_level_breaks_ties_upward_and_clamps() {
        assert_eq!(nearest_level(-500.0), 0);
        assert_eq!(nearest_level(500.0), 15);
        assert_eq!(nearest_level(0.0), 8); // 1 is nearer than -10
        assert_eq!(nearest_level(-4.5), 8); // halfway between -10 and 1: upper
        assert_eq!(nearest_level(-4.6), 7);
        for (i, &v) in LEVELS.iter().enumerate() {
            assert_eq!(nearest_level(v as f32) as usize, i);
        }
    }
}
