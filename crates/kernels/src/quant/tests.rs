//! Quantization tests: bit-exactness against committed goldens from ggml and
//! `gguf.quants` (tools/goldens/quant_goldens.py), and error bounds on
//! random rows of awkward lengths.

use super::*;
use rand::{Rng, SeedableRng};

const GOLDEN: &str = include_str!("../../tests/golden/quants.json");

fn bits_to_f32(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|b| f32::from_bits(b.as_u64().unwrap() as u32))
        .collect()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn quantize_and_dequantize_are_bit_exact_with_ggml() {
    let golden: serde_json::Value = serde_json::from_str(GOLDEN).unwrap();
    let obj = golden.as_object().unwrap();
    assert_eq!(obj.len(), 14, "goldens cover every non-f32 type");
    for (name, cases) in obj {
        let ty = GgmlType::from_name(name).unwrap();
        for (i, case) in cases.as_array().unwrap().iter().enumerate() {
            let x = bits_to_f32(&case["input_bits"]);
            let want_q = hex(case["quantized_hex"].as_str().unwrap());
            let want_d = bits_to_f32(&case["dequantized_bits"]);
            let mut q = vec![0u8; ty.row_bytes(x.len()).unwrap()];
            quantize_row(ty, &x, &mut q).unwrap();
            if let Some(pos) = q.iter().zip(&want_q).position(|(a, b)| a != b) {
                panic!(
                    "{name} case {i}: quantized byte {pos} differs ({} vs {})",
                    q[pos], want_q[pos]
                );
            }
            let mut d = vec![0f32; x.len()];
            dequantize_row(ty, &want_q, &mut d).unwrap();
            for (j, (a, b)) in d.iter().zip(&want_d).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{name} case {i}: dequantized element {j}: {a} vs {b}"
                );
            }
        }
    }
}

/// Per-type bound on RMS error relative to the row's RMS, for gaussian data.
fn rel_rms_bound(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::F32 => 0.0,
        GgmlType::F16 => 1e-3,
        GgmlType::BF16 => 8e-3,
        GgmlType::Q8_0 => 0.01,
        GgmlType::Q6K => 0.03,
        GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q5K => 0.07,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4K => 0.14,
        GgmlType::IQ4NL | GgmlType::IQ4XS => 0.12,
        GgmlType::Q3K => 0.3,
        GgmlType::Q2K => 0.5,
    }
}

#[test]
fn round_trip_error_is_bounded_for_every_type() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    for ty in GgmlType::ALL {
        for blocks in [1usize, 3, 7] {
            let n = ty.block_size().max(32) * blocks;
            let x: Vec<f32> = (0..n)
                .map(|_| {
                    let u: f32 = rng.gen_range(-1.0..1.0);
                    u * u * u.signum() * 3.0 + rng.gen_range(-0.5..0.5)
                })
                .collect();
            let mut q = vec![0u8; ty.row_bytes(n).unwrap()];
            quantize_row(ty, &x, &mut q).unwrap();
            let mut y = vec![0f32; n];
            dequantize_row(ty, &q, &mut y).unwrap();
            let err: f32 = x
                .iter()
                .zip(&y)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f32>()
                .sqrt();
            let norm: f32 = x.iter().map(|a| a * a).sum::<f32>().sqrt();
            assert!(
                err <= rel_rms_bound(ty) * norm,
                "{ty}: relative rms error {}",
                err / norm
            );
        }
    }
}

#[test]
fn zero_rows_stay_zero() {
    for ty in GgmlType::ALL {
        let n = ty.block_size().max(32) * 2;
        let mut q = vec![0xAAu8; ty.row_bytes(n).unwrap()];
        quantize_row(ty, &vec![0.0; n], &mut q).unwrap();
        let mut y = vec![1f32; n];
        dequantize_row(ty, &q, &mut y).unwrap();
        assert!(y.iter().all(|&v| v == 0.0), "{ty}");
    }
}

#[test]
fn lengths_are_checked() {
    let mut q = vec![0u8; 18];
    assert!(matches!(
        quantize_row(GgmlType::Q4_0, &[0.0; 31], &mut q),
        Err(Error::RowNotBlockMultiple { .. })
    ));
    assert!(matches!(
        quantize_row(GgmlType::Q4_0, &[0.0; 64], &mut q),
        Err(Error::ByteLength { .. })
    ));
    let mut y = vec![0f32; 256];
    assert!(dequantize_row(GgmlType::Q6K, &[0u8; 209], &mut y).is_err());
    assert!(GgmlType::from_id(19).is_err());
}

#[test]
fn block_geometry_matches_ggml() {
    let want = [
        (GgmlType::Q4_0, 32, 18),
        (GgmlType::Q4_1, 32, 20),
        (GgmlType::Q5_0, 32, 22),
        (GgmlType::Q5_1, 32, 24),
        (GgmlType::Q8_0, 32, 34),
        (GgmlType::Q2K, 256, 84),
        (GgmlType::Q3K, 256, 110),
        (GgmlType::Q4K, 256, 144),
        (GgmlType::Q5K, 256, 176),
        (GgmlType::Q6K, 256, 210),
    ];
    for (ty, bs, bb) in want {
        assert_eq!((ty.block_size(), ty.block_bytes()), (bs, bb), "{ty}");
    }
    assert!((GgmlType::Q4K.bits_per_weight() - 4.5).abs() < 1e-9);
}
