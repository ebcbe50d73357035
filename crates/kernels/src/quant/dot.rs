//! Scalar references for the integer dot products of the fast matmul path:
//! activations are quantized to 8-bit blocks (Q8_0: `d: f16, qs: [i8; 32]`),
//! then each weight block contributes `d_w * d_x * sum(q_w * q_x)` with the
//! integer sum exact, as ggml's `ggml_vec_dot_*_q8_0` do.

use super::iquants::{xs_scales, IQ4_NL_BYTES, IQ4_XS_BYTES, LEVELS};
use super::kquants::{scale_min_k4, QK_K};
use super::{nearest_int, read_f16};

const QK: usize = 32;

/// Quantizes activations to Q8_0 (ggml's `quantize_row_q8_0_ref`).
pub fn quantize_q8_0_act(x: &[f32], out: &mut [u8]) {
    super::legacy::quantize_q8_0(x, out);
}

/// Sum over blocks of `d_w * d_x * dot(q_w, q_x)` for Q8_0 weights.
pub fn dot_q8_0_q8_0(w: &[u8], x: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (bw, bx) in w.chunks_exact(34).zip(x.chunks_exact(34)) {
        let mut acc = 0i32;
        for j in 0..QK {
            acc += (bw[2 + j] as i8 as i32) * (bx[2 + j] as i8 as i32);
        }
        sum += read_f16(&bw[0..2]) * read_f16(&bx[0..2]) * acc as f32;
    }
    sum
}

/// The same for Q4_0 weights: nibbles minus 8, low halves first.
pub fn dot_q4_0_q8_0(w: &[u8], x: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (bw, bx) in w.chunks_exact(18).zip(x.chunks_exact(34)) {
        let mut acc = 0i32;
        for j in 0..QK / 2 {
            let q = bw[2 + j];
            acc += ((q & 0x0f) as i32 - 8) * (bx[2 + j] as i8 as i32);
            acc += ((q >> 4) as i32 - 8) * (bx[2 + QK / 2 + j] as i8 as i32);
        }
        sum += read_f16(&bw[0..2]) * read_f16(&bx[0..2]) * acc as f32;
    }
    sum
}

/// The same for Q5_0 weights: five-bit values minus 16.
pub fn dot_q5_0_q8_0(w: &[u8], x: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (bw, bx) in w.chunks_exact(22).zip(x.chunks_exact(34)) {
        let qh = u32::from_le_bytes([bw[2], bw[3], bw[4], bw[5]]);
        let mut acc = 0i32;
        for j in 0..QK / 2 {
            let q = bw[6 + j];
            let lo = (q & 0x0f) as i32 | ((((qh >> j) & 1) as i32) << 4);
            let hi = (q >> 4) as i32 | ((((qh >> (j + 16)) & 1) as i32) << 4);
            acc += (lo - 16) * (bx[2 + j] as i8 as i32);
            acc += (hi - 16) * (bx[2 + QK / 2 + j] as i8 as i32);
        }
        sum += read_f16(&bw[0..2]) * read_f16(&bx[0..2]) * acc as f32;
    }
    sum
}

/// Q4_1 weights (`d * q + m`) · Q8_0 activations: `d_w d_x sum(q_w q_x) +
/// m_w d_x sum(q_x)` per block (ggml's Q8_1 carries `d_x sum(q_x)` as `s`).
pub fn dot_q4_1_q8_0(w: &[u8], x: &[u8]) -> f32 {
    dot_q_1_q8_0(false, w, x)
}

/// The same for Q5_1 weights (five-bit `q`, the fifth bits in `qh`).
pub fn dot_q5_1_q8_0(w: &[u8], x: &[u8]) -> f32 {
    dot_q_1_q8_0(true, w, x)
}

fn dot_q_1_q8_0(five: bool, w: &[u8], x: &[u8]) -> f32 {
    let block = if five { 24 } else { 20 };
    let mut sum = 0.0f32;
    for (bw, bx) in w.chunks_exact(block).zip(x.chunks_exact(34)) {
        let qh = if five {
            u32::from_le_bytes([bw[4], bw[5], bw[6], bw[7]])
        } else {
            0
        };
        let qs = &bw[block - 16..];
        let (mut acc, mut sx) = (0i32, 0i32);
        for j in 0..QK / 2 {
            let lo = (qs[j] & 0x0f) as i32 | ((((qh >> j) & 1) as i32) << 4);
            let hi = (qs[j] >> 4) as i32 | ((((qh >> (j + 16)) & 1) as i32) << 4);
            let (x0, x1) = (bx[2 + j] as i8 as i32, bx[2 + QK / 2 + j] as i8 as i32);
            acc += lo * x0 + hi * x1;
            sx += x0 + x1;
        }
        let dx = read_f16(&bx[0..2]);
        sum += read_f16(&bw[0..2]) * dx * acc as f32 + read_f16(&bw[2..4]) * dx * sx as f32;
    }
    sum
}

/// f16 weights times f32 activations, accumulated in f32.
pub fn dot_f16_f32(w: &[u8], x: &[f32]) -> f32 {
    w.chunks_exact(2)
        .zip(x)
        .map(|(b, &v)| read_f16(b) * v)
        .sum()
}

/// bf16 weights times f32 activations, accumulated in f32 (a bf16 is the
/// top half of an f32).
pub fn dot_bf16_f32(w: &[u8], x: &[f32]) -> f32 {
    w.chunks_exact(2)
        .zip(x)
        .map(|(b, &v)| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16) * v)
        .sum()
}

/// Bytes of one Q8_K activation block: `d: f32, qs: [i8; 256], bsums: [i16; 16]`.
pub const Q8_K_BYTES: usize = 4 + QK_K + 32;

/// Quantizes activations to Q8_K (ggml's `quantize_row_q8_K_ref`); `bsums`
/// hold the sums of each 16 quants, used to apply k-quant minimums.
pub fn quantize_q8_k_act(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
        let (max, amax) = super::signed_absmax(xb);
        if amax == 0.0 {
            ob.fill(0);
            continue;
        }
        let iscale = -127.0f32 / max;
        let (head, rest) = ob.split_at_mut(4);
        let (qs, bsums) = rest.split_at_mut(QK_K);
        for (q, &v) in qs.iter_mut().zip(xb) {
            *q = (nearest_int(iscale * v).min(127) as i8) as u8;
        }
        for (j, b) in bsums.chunks_exact_mut(2).enumerate() {
            let sum: i32 = qs[16 * j..16 * j + 16]
                .iter()
                .map(|&q| q as i8 as i32)
                .sum();
            b.copy_from_slice(&(sum as i16).to_le_bytes());
        }
        head.copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

/// Parts of a Q8_K block: (d, quants, sums of each 16 quants).
#[inline]
pub(crate) fn q8k_parts(b: &[u8]) -> (f32, &[u8], [i32; 16]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let mut bsums = [0i32; 16];
    for (j, s) in bsums.iter_mut().enumerate() {
        *s = i16::from_le_bytes([b[4 + QK_K + 2 * j], b[5 + QK_K + 2 * j]]) as i32;
    }
    (d, &b[4..4 + QK_K], bsums)
}

/// Q4_K weights · Q8_K activations: per sub-block `d*sc*sum(q4*q8)`, minus
/// `dmin*m*sum(q8)` taken from the block sums.
pub fn dot_q4_k_q8_k(w: &[u8], x: &[u8]) -> f32 {
    dot_q45_k_q8_k(false, w, x)
}

/// Q5_K weights · Q8_K activations: Q4_K's sums with the fifth bit (from
/// `qh`) above each nibble.
pub fn dot_q5_k_q8_k(w: &[u8], x: &[u8]) -> f32 {
    dot_q45_k_q8_k(true, w, x)
}

fn dot_q45_k_q8_k(five: bool, w: &[u8], x: &[u8]) -> f32 {
    let block = if five { 176 } else { 144 };
    let mut sum = 0.0f32;
    for (bw, bx) in w.chunks_exact(block).zip(x.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, bsums) = q8k_parts(bx);
        let d = read_f16(&bw[0..2]) * dx;
        let dmin = read_f16(&bw[2..4]) * dx;
        let scales = &bw[4..16];
        let (qh, qs) = if five {
            (&bw[16..48], &bw[48..176])
        } else {
            (&[0u8; 32][..], &bw[16..144])
        };
        let (mut total, mut mins) = (0i32, 0i32);
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, scales);
            let chunk = &qs[32 * (j / 2)..32 * (j / 2) + 32];
            let mut s = 0i32;
            for l in 0..32 {
                let nibble = if j % 2 == 0 {
                    chunk[l] & 0x0f
                } else {
                    chunk[l] >> 4
                };
                let q = nibble | (((qh[l] >> j) & 1) << 4);
                s += q as i32 * (q8[32 * j + l] as i8 as i32);
            }
            total += sc as i32 * s;
            mins += m as i32 * (bsums[2 * j] + bsums[2 * j + 1]);
        }
        sum += d * total as f32 - dmin * mins as f32;
    }
    sum
}

/// Q2_K weights · Q8_K activations: per 16-element sub-block
/// `d*sc*sum(q2*q8)`, minus `dmin*m*sum(q8)` from the block sums.
pub fn dot_q2_k_q8_k(w: &[u8], x: &[u8]) -> f32 {
    use super::lowk::{q2_at, Q2_K_BYTES};
    let mut sum = 0.0f32;
    for (bw, bx) in w.chunks_exact(Q2_K_BYTES).zip(x.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, bsums) = q8k_parts(bx);
        let (scales, qs) = (&bw[..16], &bw[16..80]);
        let (mut total, mut mins) = (0i32, 0i32);
        for (j, &sc) in scales.iter().enumerate() {
            let s: i32 = (16 * j..16 * j + 16)
                .map(|i| q2_at(qs, i) as i32 * (q8[i] as i8 as i32))
                .sum();
            total += (sc & 0xf) as i32 * s;
            mins += (sc >> 4) as i32 * bsums[j];
        }
        sum += read_f16(&bw[80..82]) * dx * total as f32 - read_f16(&bw[82..84]) * dx * mins as f32;
    }
    sum
}

/// Q3_K weights · Q8_K activations: per 16-element sub-block
/// `d*(sc-32)*sum((q3-4)*q8)`.
pub fn dot_q3_k_q8_k(w: &[u8], x: &[u8]) -> f32 {
    use super::lowk::{q3_at, q3_scales, Q3_K_BYTES};
    let mut sum = 0.0f32;
    for (bw, bx) in w.chunks_exact(Q3_K_BYTES).zip(x.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, _) = q8k_parts(bx);
        let (hmask, qs) = (&bw[..32], &bw[32..96]);
        let mut total = 0i32;
        for (j, sc) in q3_scales(&bw[96..108]).iter().enumerate() {
            let s: i32 = (16 * j..16 * j + 16)
                .map(|i| q3_at(hmask, qs, i) as i32 * (q8[i] as i8 as i32))
                .sum();
            total += *sc as i32 * s;
        }
        sum += read_f16(&bw[108..110]) * dx * total as f32;
    }
    sum
}

/// Q6_K weights · Q8_K activations: per 16-element group `d*sc*sum(q6*q8)`.
pub fn dot_q6_k_q8_k(w: &[u8], x: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (bw, bx) in w.chunks_exact(210).zip(x.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, _) = q8k_parts(bx);
        let (ql, qh, sc) = (&bw[0..128], &bw[128..192], &bw[192..208]);
        let d = read_f16(&bw[208..210]) * dx;
        let mut q6 = [0i32; QK_K];
        for h in 0..2 {
            for l in 0..32 {
                let (a, b, hb) = (ql[64 * h + l], ql[64 * h + 32 + l], qh[32 * h + l]);
                q6[128 * h + l] = ((a & 0xf) | ((hb & 3) << 4)) as i32 - 32;
                q6[128 * h + 32 + l] = ((b & 0xf) | (((hb >> 2) & 3) << 4)) as i32 - 32;
                q6[128 * h + 64 + l] = ((a >> 4) | (((hb >> 4) & 3) << 4)) as i32 - 32;
                q6[128 * h + 96 + l] = ((b >> 4) | (((hb >> 6) & 3) << 4)) as i32 - 32;
            }
        }
        let mut total = 0i32;
        for g in 0..16 {
            let s: i32 = (0..16)
                .map(|l| q6[16 * g + l] * (q8[16 * g + l] as i8 as i32))
                .sum();
            total += (sc[g] as i8 as i32) * s;
        }
        sum += d * total as f32;
    }
    sum
}

/// IQ4_NL weights · Q8_0 activations: each code's level times the
/// activation, summed exactly per block, times `d_w * d_x`.
pub fn dot_iq4_nl_q8_0(w: &[u8], x: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (bw, bx) in w.chunks_exact(IQ4_NL_BYTES).zip(x.chunks_exact(34)) {
        let mut acc = 0i32;
        for j in 0..QK / 2 {
            let q = bw[2 + j];
            acc += LEVELS[(q & 0x0f) as usize] as i32 * (bx[2 + j] as i8 as i32);
            acc += LEVELS[(q >> 4) as usize] as i32 * (bx[2 + QK / 2 + j] as i8 as i32);
        }
        sum += read_f16(&bw[0..2]) * read_f16(&bx[0..2]) * acc as f32;
    }
    sum
}

/// IQ4_XS weights · Q8_K activations: per sub-block `(ls - 32) * sum(level
/// * q8)`, summed exactly per block, times `d_w * d_x`.
pub fn dot_iq4_xs_q8_k(w: &[u8], x: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (bw, bx) in w.chunks_exact(IQ4_XS_BYTES).zip(x.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, _) = q8k_parts(bx);
        let mut total = 0i32;
        for (ib, ls) in xs_scales(bw).iter().enumerate() {
            let (qs, a) = (
                &bw[8 + 16 * ib..8 + 16 * ib + 16],
                &q8[QK * ib..QK * ib + QK],
            );
            let mut s = 0i32;
            for j in 0..QK / 2 {
                s += LEVELS[(qs[j] & 0x0f) as usize] as i32 * (a[j] as i8 as i32);
                s += LEVELS[(qs[j] >> 4) as usize] as i32 * (a[j + QK / 2] as i8 as i32);
            }
            total += ls * s;
        }
        sum += read_f16(&bw[0..2]) * dx * total as f32;
    }
    sum
}

/// `sum(q[i] * k[i])` for an f32 query and an f16 cache row.
pub fn dot_f32_f16(q: &[f32], k: &[half::f16]) -> f32 {
    q.iter().zip(k).map(|(a, b)| a * b.to_f32()).sum()
}

/// `out[i] += w * v[i]` for an f16 cache row.
pub fn axpy_f16(out: &mut [f32], w: f32, v: &[half::f16]) {
    for (o, x) in out.iter_mut().zip(v) {
        *o += w * x.to_f32();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{Isa, Kernels};
    use crate::quant::{quantize_row, GgmlType};
    use rand::{Rng, SeedableRng};

    fn tiers() -> Vec<Kernels> {
        crate::cpu::tiers()
            .into_iter()
            .map(Kernels::for_isa)
            .collect()
    }

    /// Checks an integer dot against the f32 product of the dequantized
    /// weights (only activation rounding separates them); returns the sum of
    /// |products|, the scale for tolerances.
    fn check_against_f32(ty: GgmlType, w: &[u8], x: &[f32], got: f32) -> f32 {
        let mut wd = vec![0f32; x.len()];
        crate::quant::dequantize_row(ty, w, &mut wd).unwrap();
        let exact: f32 = wd.iter().zip(x).map(|(a, b)| a * b).sum();
        let scale: f32 = wd.iter().zip(x).map(|(a, b)| (a * b).abs()).sum();
        assert!(
            (got - exact).abs() <= 0.02 * scale + 1e-3,
            "{ty} n={}: {got} vs {exact}",
            x.len()
        );
        scale
    }

    fn row(rng: &mut rand_chacha::ChaCha8Rng, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                if i % 97 == 5 {
                    30.0
                } else {
                    rng.gen_range(-2.0f32..2.0)
                }
            })
            .collect()
    }

    #[test]
    fn activation_quantization_is_identical_on_every_tier() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for blocks in [1, 3, 17] {
            let x = row(&mut rng, 32 * blocks);
            let mut want = vec![0u8; 34 * blocks];
            quantize_q8_0_act(&x, &mut want);
            for k in tiers() {
                let mut got = vec![0u8; 34 * blocks];
                (k.q8_0.quantize)(&x, &mut got);
                assert_eq!(got, want, "{:?}", k.isa);
            }
        }
        // Q8_K: random blocks, ties of magnitude with opposite signs (the
        // first one's sign wins), a zero block, and values on rounding ties.
        for blocks in [1, 3] {
            let mut x = row(&mut rng, 256 * blocks);
            x[7] = -9.0;
            x[100] = 9.0;
            if blocks == 3 {
                x[256..512].fill(0.0);
                for (i, v) in x[512..].iter_mut().enumerate() {
                    *v = (i as f32 - 128.0) * 0.5;
                }
                x[512] = 127.0;
            }
            let mut want = vec![0u8; Q8_K_BYTES * blocks];
            quantize_q8_k_act(&x, &mut want);
            for k in tiers() {
                let mut got = vec![0u8; Q8_K_BYTES * blocks];
                (k.q4_k.quantize)(&x, &mut got);
                assert_eq!(got, want, "Q8_K {:?}", k.isa);
            }
        }
    }

    #[test]
    fn integer_dots_match_the_reference_and_f32_on_every_tier() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q5_0,
            GgmlType::Q4_1,
            GgmlType::Q5_1,
            GgmlType::IQ4NL,
        ] {
            for blocks in [1, 2, 7, 33] {
                let n = 32 * blocks;
                let (wf, x) = (row(&mut rng, n), row(&mut rng, n));
                let mut w = vec![0u8; ty.row_bytes(n).unwrap()];
                quantize_row(ty, &wf, &mut w).unwrap();
                let mut xq = vec![0u8; 34 * blocks];
                quantize_q8_0_act(&x, &mut xq);
                let reference = Kernels::for_isa(Isa::Scalar).quant_path(ty).unwrap();
                let want = (reference.dot)(&w, &xq);
                let scale = check_against_f32(ty, &w, &x, want);
                for k in tiers() {
                    let got = (k.quant_path(ty).unwrap().dot)(&w, &xq);
                    assert!(
                        (got - want).abs() <= 1e-5 * scale + 1e-6,
                        "{ty} {:?} {blocks}: {got} vs {want}",
                        k.isa
                    );
                }
            }
        }
    }

    #[test]
    fn register_tiles_match_the_one_row_dot_on_every_tier() {
        use crate::rows::{q8_row_terms, Q8Row, TILE_N};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0] {
            for blocks in [1, 3, 17] {
                let n = 32 * blocks;
                let rb = ty.row_bytes(n).unwrap();
                let mut w = vec![0u8; 4 * rb];
                for r in w.chunks_exact_mut(rb) {
                    quantize_row(ty, &row(&mut rng, n), r).unwrap();
                }
                let mut xq = vec![0u8; 34 * blocks * TILE_N];
                for r in xq.chunks_exact_mut(34 * blocks) {
                    quantize_q8_0_act(&row(&mut rng, n), r);
                }
                let (mut d, mut ds) = (Vec::new(), Vec::new());
                q8_row_terms(crate::rows::zero_offset(ty), &xq, &mut d, &mut ds);
                let x: [Q8Row<'_>; TILE_N] = std::array::from_fn(|j| Q8Row {
                    q: &xq[34 * blocks * j..34 * blocks * (j + 1)],
                    d: &d[blocks * j..blocks * (j + 1)],
                    ds: &ds[blocks * j..blocks * (j + 1)],
                });
                let wr: [&[u8]; 4] = std::array::from_fn(|i| &w[i * rb..(i + 1) * rb]);
                let reference = Kernels::for_isa(Isa::Scalar).quant_path(ty).unwrap().dot;
                for k in tiers() {
                    let Some((tile1, tile_n)) = k.quant_path(ty).unwrap().tiles else {
                        continue;
                    };
                    let many = tile_n(wr, x);
                    for i in 0..4 {
                        for j in 0..TILE_N {
                            let want = reference(wr[i], x[j].q);
                            let one = tile1(wr, [x[j]])[i][0];
                            let tol = 1e-4 * want.abs().max(1.0) * blocks as f32;
                            assert!(
                                (many[i][j] - want).abs() <= tol,
                                "{ty} {:?} {blocks} ({i},{j}): {} vs {want}",
                                k.isa,
                                many[i][j]
                            );
                            assert!(
                                (one - want).abs() <= tol,
                                "{ty} {:?} {blocks} ({i},{j}): {one} vs {want}",
                                k.isa
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn k_quant_dots_match_the_reference_and_f32_on_every_tier() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(6);
        for ty in [
            GgmlType::Q2K,
            GgmlType::Q3K,
            GgmlType::Q4K,
            GgmlType::Q5K,
            GgmlType::Q6K,
            GgmlType::IQ4XS,
        ] {
            for blocks in [1, 2, 5] {
                let n = QK_K * blocks;
                let (wf, x) = (row(&mut rng, n), row(&mut rng, n));
                let mut w = vec![0u8; ty.row_bytes(n).unwrap()];
                quantize_row(ty, &wf, &mut w).unwrap();
                let mut xq = vec![0u8; Q8_K_BYTES * blocks];
                quantize_q8_k_act(&x, &mut xq);
                let want = (Kernels::for_isa(Isa::Scalar).quant_path(ty).unwrap().dot)(&w, &xq);
                let scale = check_against_f32(ty, &w, &x, want);
                for k in tiers() {
                    let path = k.quant_path(ty).unwrap();
                    let mut xq2 = vec![0u8; Q8_K_BYTES * blocks];
                    (path.quantize)(&x, &mut xq2);
                    assert_eq!(xq2, xq, "{ty} {:?}: activation quantization differs", k.isa);
                    let got = (path.dot)(&w, &xq);
                    assert!(
                        (got - want).abs() <= 1e-5 * scale + 1e-5,
                        "{ty} {:?} {blocks}: {got} vs {want}",
                        k.isa
                    );
                    // Four activation rows at once: each the one-row result.
                    if let Some(dot4) = path.dot4 {
                        let rows: Vec<Vec<u8>> = (0..4)
                            .map(|r| {
                                let xr: Vec<f32> = x.iter().map(|v| v * (r as f32 - 1.5)).collect();
                                let mut q = vec![0u8; Q8_K_BYTES * blocks];
                                (path.quantize)(&xr, &mut q);
                                q
                            })
                            .collect();
                        let got4 = dot4(&w, [&rows[0], &rows[1], &rows[2], &rows[3]]);
                        for (r, g) in got4.iter().enumerate() {
                            let want = (path.dot)(&w, &rows[r]);
                            assert!(
                                (g - want).abs() <= 1e-5 * scale * 2.0 + 1e-5,
                                "{ty} {:?} {blocks} row {r}: {g} vs {want}",
                                k.isa
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn kv_kernels_match_on_every_tier_with_tails() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
        for n in [1usize, 8, 15, 64, 100, 128] {
            let q = row(&mut rng, n);
            let k: Vec<half::f16> = row(&mut rng, n)
                .into_iter()
                .map(half::f16::from_f32)
                .collect();
            let want = dot_f32_f16(&q, &k);
            let mut want_out = row(&mut rng, n);
            let start = want_out.clone();
            axpy_f16(&mut want_out, 0.37, &k);
            let scale: f32 = q.iter().zip(&k).map(|(a, b)| (a * b.to_f32()).abs()).sum();
            for kt in tiers() {
                let got = (kt.kv_dot)(&q, &k);
                assert!(
                    (got - want).abs() <= 1e-5 * scale + 1e-6,
                    "{:?} n={n}",
                    kt.isa
                );
                let mut out = start.clone();
                (kt.kv_axpy)(&mut out, 0.37, &k);
                for (a, b) in out.iter().zip(&want_out) {
                    assert!(
                        (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "{:?} n={n}",
                        kt.isa
                    );
                }
            }
        }
    }

    #[test]
    fn f16_and_bf16_dots_match_on_every_tier_with_tails() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        type Dot = fn(&[u8], &[f32]) -> f32;
        type Case = (GgmlType, Dot, fn(&Kernels) -> Dot);
        let cases: [Case; 2] = [
            (GgmlType::F16, dot_f16_f32, |k| k.f16_dot),
            (GgmlType::BF16, dot_bf16_f32, |k| k.bf16_dot),
        ];
        for (ty, reference, pick) in cases {
            for n in [1usize, 7, 16, 31, 100, 257] {
                let (wf, x) = (row(&mut rng, n), row(&mut rng, n));
                let mut w = vec![0u8; 2 * n];
                quantize_row(ty, &wf, &mut w).unwrap();
                let want = reference(&w, &x);
                // The reference agrees with the dequantized row.
                let mut wd = vec![0f32; n];
                crate::quant::dequantize_row(ty, &w, &mut wd).unwrap();
                let exact: f32 = wd.iter().zip(&x).map(|(a, b)| a * b).sum();
                let scale: f32 = wf.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum();
                assert!((want - exact).abs() <= 1e-5 * scale + 1e-6, "{ty} n={n}");
                for k in tiers() {
                    let got = pick(&k)(&w, &x);
                    assert!(
                        (got - want).abs() <= 1e-5 * scale + 1e-6,
                        "{ty} {:?} n={n}: {got} vs {want}",
                        k.isa
                    );
                }
            }
        }
    }
}
