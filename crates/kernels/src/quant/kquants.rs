//! The 256-element "k-quant" super-block formats: Q4_K, Q5_K, Q6_K.
//!
//! Byte layouts (little-endian), as in ggml's `block_q*_K` structs:
//! - Q4_K: `d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]` (144 bytes).
//!   Eight sub-blocks of 32 with 6-bit scale and min each;
//!   value = d * sc * q4 - dmin * m.
//! - Q5_K: `d, dmin, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]` (176 bytes),
//!   like Q4_K with a fifth bit per element in `qh`.
//! - Q6_K: `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16` (210 bytes).
//!   Sixteen sub-blocks of 16 with an 8-bit signed scale; value = d * sc * (q6 - 32).
//!
//! The quantizers are line-by-line ports of ggml's `quantize_row_q*_K_ref`
//! (including the float evaluation order) so their output is bit-exact.

use super::{nearest_int, read_f16, write_f16};

pub const QK_K: usize = 256;
pub const Q4_K_BYTES: usize = 144;
pub const Q5_K_BYTES: usize = 176;
pub const Q6_K_BYTES: usize = 210;
const GROUP_MAX_EPS: f32 = 1e-15;

/// Unpacks the 6-bit (scale, min) pair of sub-block `j` from the 12 packed bytes.
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// ggml's `make_qkx2_quants`: a weighted search for the (scale, min) of an
/// asymmetric `nmax`-level quantization, by squared or (`use_mad`)
/// absolute error. Returns (scale, -min).
#[allow(clippy::too_many_arguments)]
pub(super) fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.clamp(0, nmax) as u8;
        let diff = scale * l_out[i] as f32 + min - x[i];
        let diff = if use_mad { diff.abs() } else { diff * diff };
        best_error += weights[i] * diff;
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                let diff = if use_mad { diff.abs() } else { diff * diff };
                cur_error += weights[i] * diff;
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// ggml's `make_qx_quants` with `rmse_type = 1` and no importance weights:
/// a symmetric search for the scale of an `nmax`-level quantization.
fn make_qx_quants_rmse1(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let (max, amax) = super::signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = -nmaxf / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (i, &v) in x.iter().enumerate() {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        l_out[i] = (l + nmax) as i8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1f32 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
            let w = v * v;
            sumlx += w * v * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (i, &v) in x.iter().enumerate() {
                let l = nearest_int(iscale * v);
                l_out[i] = (nmax + l.clamp(-nmax, nmax - 1)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// The shared first half of Q4_K/Q5_K quantization: per-sub-block scales
/// and mins, packed into `scales` (12 bytes), plus `d`/`dmin` written to
/// `head` (4 bytes); returns the final levels in `l`.
fn quantize_k_scales(
    x: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
    head: &mut [u8],
    scales_out: &mut [u8],
    l: &mut [u8; QK_K],
) {
    let mut laux = [0u8; 32];
    let mut weights = [0f32; 32];
    let mut mins = [0f32; 8];
    let mut scales = [0f32; 8];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..QK_K / 32 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx2_quants(
            nmax,
            xs,
            &weights,
            &mut l[32 * j..32 * j + 32],
            &mut laux,
            rmin,
            0.1,
            nstep,
            false,
        );
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    scales_out[..12].fill(0);
    for j in 0..QK_K / 32 {
        // C assigns the int to a uint8_t before MIN, so truncate first.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            scales_out[j] = ls;
            scales_out[j + 4] = lm;
        } else {
            scales_out[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
            scales_out[j - 4] |= (ls >> 4) << 6;
            scales_out[j] |= (lm >> 4) << 6;
        }
    }
    write_f16(&mut head[0..2], max_scale / 63.0);
    write_f16(&mut head[2..4], max_min / 63.0);
    let d_all = read_f16(&head[0..2]);
    let dmin_all = read_f16(&head[2..4]);
    for j in 0..QK_K / 32 {
        let (sc, m) = scale_min_k4(j, scales_out);
        let d = d_all * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * m as f32;
        for ii in 0..32 {
            let q = nearest_int((x[32 * j + ii] + dm) / d);
            l[32 * j + ii] = q.clamp(0, nmax) as u8;
        }
    }
}

pub fn quantize_q4_k(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q4_K_BYTES)) {
        let mut l = [0u8; QK_K];
        let (head, rest) = y.split_at_mut(4);
        let (scales, qs) = rest.split_at_mut(12);
        quantize_k_scales(x, 15, -1.0, 20, head, scales, &mut l);
        for (c, j) in (0..QK_K).step_by(64).enumerate() {
            for i in 0..32 {
                qs[32 * c + i] = l[j + i] | (l[j + i + 32] << 4);
            }
        }
    }
}

pub fn dequantize_q4_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q4_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(&b[0..2]);
        let min = read_f16(&b[2..4]);
        let scales = &b[4..16];
        let qs = &b[16..];
        for c in 0..4 {
            let (sc1, m1) = scale_min_k4(2 * c, scales);
            let (sc2, m2) = scale_min_k4(2 * c + 1, scales);
            let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
            let q = &qs[32 * c..32 * c + 32];
            for l in 0..32 {
                y[64 * c + l] = d1 * (q[l] & 0xf) as f32 - m1;
                y[64 * c + 32 + l] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }
}

pub fn quantize_q5_k(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q5_K_BYTES)) {
        let mut l = [0u8; QK_K];
        let (head, rest) = y.split_at_mut(4);
        let (scales, rest) = rest.split_at_mut(12);
        let (qh, ql) = rest.split_at_mut(32);
        quantize_k_scales(x, 31, -0.5, 15, head, scales, &mut l);
        qh.fill(0);
        let (mut m1, mut m2) = (1u8, 2u8);
        for (c, n) in (0..QK_K).step_by(64).enumerate() {
            for j in 0..32 {
                let mut l1 = l[n + j];
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                let mut l2 = l[n + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[32 * c + j] = l1 | (l2 << 4);
            }
            m1 = m1.wrapping_shl(2);
            m2 = m2.wrapping_shl(2);
        }
    }
}

pub fn dequantize_q5_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q5_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(&b[0..2]);
        let min = read_f16(&b[2..4]);
        let scales = &b[4..16];
        let qh = &b[16..48];
        let qs = &b[48..];
        for c in 0..4 {
            let (sc1, m1) = scale_min_k4(2 * c, scales);
            let (sc2, m2) = scale_min_k4(2 * c + 1, scales);
            let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
            let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
            let q = &qs[32 * c..32 * c + 32];
            for l in 0..32 {
                let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                y[64 * c + l] = d1 * ((q[l] & 0xf) + h1) as f32 - m1;
                y[64 * c + 32 + l] = d2 * ((q[l] >> 4) + h2) as f32 - m2;
            }
        }
    }
}

pub fn quantize_q6_k(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q6_K_BYTES)) {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; QK_K / 16];
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for ib in 0..QK_K / 16 {
            let s =
                make_qx_quants_rmse1(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
            scales[ib] = s;
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            y.fill(0);
            continue;
        }
        let (ql, rest) = y.split_at_mut(128);
        let (qh, rest) = rest.split_at_mut(64);
        let (sc, dbytes) = rest.split_at_mut(16);
        let iscale = -128.0f32 / max_scale;
        write_f16(dbytes, 1.0 / iscale);
        for ib in 0..QK_K / 16 {
            sc[ib] = (nearest_int(iscale * scales[ib]).min(127) as i8) as u8;
        }
        let d_all = read_f16(dbytes);
        for j in 0..QK_K / 16 {
            let d = d_all * (sc[j] as i8) as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
                l[16 * j + ii] = (q + 32) as i8;
            }
        }
        let l = l.map(|v| v as u8);
        for (c, j) in (0..QK_K).step_by(128).enumerate() {
            let (ql, qh) = (&mut ql[64 * c..64 * c + 64], &mut qh[32 * c..32 * c + 32]);
            for i in 0..32 {
                let q1 = l[j + i] & 0xf;
                let q2 = l[j + i + 32] & 0xf;
                let q3 = l[j + i + 64] & 0xf;
                let q4 = l[j + i + 96] & 0xf;
                ql[i] = q1 | (q3 << 4);
                ql[i + 32] = q2 | (q4 << 4);
                qh[i] = (l[j + i] >> 4)
                    | ((l[j + i + 32] >> 4) << 2)
                    | ((l[j + i + 64] >> 4) << 4)
                    | ((l[j + i + 96] >> 4) << 6);
            }
        }
    }
}

pub fn dequantize_q6_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q6_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let ql_all = &b[0..128];
        let qh_all = &b[128..192];
        let sc_all = &b[192..208];
        let d = read_f16(&b[208..210]);
        for c in 0..2 {
            let ql = &ql_all[64 * c..];
            let qh = &qh_all[32 * c..];
            let sc = &sc_all[8 * c..];
            let y = &mut y[128 * c..];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
            }
        }
    }
}
