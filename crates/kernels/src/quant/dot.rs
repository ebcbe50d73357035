//! Scalar references for the integer dot products of the fast matmul path:
//! activations are quantized to 8-bit blocks (Q8_0: `d: f16, qs: [i8; 32]`),
//! then each weight block contributes `d_w * d_x * sum(q_w * q_x)` with the
//! integer sum exact, as ggml's `ggml_vec_dot_*_q8_0` do.

use super::read_f16;

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

/// f16 weights times f32 activations, accumulated in f32.
pub fn dot_f16_f32(w: &[u8], x: &[f32]) -> f32 {
    w.chunks_exact(2)
        .zip(x)
        .map(|(b, &v)| read_f16(b) * v)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{supported, Isa, Kernels};
    use crate::quant::{quantize_row, GgmlType};
    use rand::{Rng, SeedableRng};

    fn tiers() -> Vec<Kernels> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|&i| i <= supported())
            .map(Kernels::for_isa)
            .collect()
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
    }

    #[test]
    fn integer_dots_match_the_reference_and_f32_on_every_tier() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0] {
            for blocks in [1, 2, 7, 33] {
                let n = 32 * blocks;
                let (wf, x) = (row(&mut rng, n), row(&mut rng, n));
                let mut w = vec![0u8; ty.row_bytes(n).unwrap()];
                quantize_row(ty, &wf, &mut w).unwrap();
                let mut xq = vec![0u8; 34 * blocks];
                quantize_q8_0_act(&x, &mut xq);
                let reference = Kernels::for_isa(Isa::Scalar).quant_path(ty).unwrap();
                let want = (reference.dot)(&w, &xq);
                // Against the f32 product of the dequantized weights: only the
                // activation rounding separates them.
                let mut wd = vec![0f32; n];
                crate::quant::dequantize_row(ty, &w, &mut wd).unwrap();
                let exact: f32 = wd.iter().zip(&x).map(|(a, b)| a * b).sum();
                let scale: f32 = wd.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum();
                assert!(
                    (want - exact).abs() <= 0.02 * scale + 1e-3,
                    "{ty} {blocks}: {want} vs {exact}"
                );
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
    fn f16_dot_matches_on_every_tier_with_tails() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for n in [1usize, 7, 16, 31, 100, 257] {
            let (wf, x) = (row(&mut rng, n), row(&mut rng, n));
            let mut w = vec![0u8; 2 * n];
            quantize_row(GgmlType::F16, &wf, &mut w).unwrap();
            let want = dot_f16_f32(&w, &x);
            let scale: f32 = wf.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum();
            for k in tiers() {
                let got = (k.f16_dot)(&w, &x);
                assert!(
                    (got - want).abs() <= 1e-5 * scale + 1e-6,
                    "{:?} n={n}: {got} vs {want}",
                    k.isa
                );
            }
        }
    }
}
