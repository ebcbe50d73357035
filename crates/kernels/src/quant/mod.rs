//! ggml tensor types: block geometry and the scalar reference
//! quantize/dequantize routines, bit-exact with ggml's `*_ref` functions.
//!
//! A quantized row is a byte slice of whole blocks. Every routine here works
//! on byte slices (no transmutes), so this module is safe code and serves as
//! the reference that SIMD kernels are tested against.

pub mod dot;
pub(crate) mod iquants;
pub(crate) mod kquants;
pub(crate) mod legacy;
pub(crate) mod lowk;
pub mod repack;
pub mod repack_iq4;
pub mod repack_q5k;
pub mod repack_q6k;

use crate::{Error, Result};
use half::{bf16, f16};

pub use kquants::QK_K;

/// The tensor element types hasten reads. Discriminants are ggml's type ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q2K = 10,
    Q3K = 11,
    Q4K = 12,
    Q5K = 13,
    Q6K = 14,
    IQ4NL = 20,
    IQ4XS = 23,
    BF16 = 30,
}

impl GgmlType {
    /// Every supported type, for tests and help texts.
    pub const ALL: [GgmlType; 15] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::IQ4NL,
        GgmlType::IQ4XS,
    ];

    /// Maps a ggml type id to a supported type.
    pub fn from_id(id: u32) -> Result<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|t| *t as u32 == id)
            .ok_or(Error::UnsupportedType(id))
    }

    /// The name ggml and llama.cpp print for this type.
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::BF16 => "BF16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q2K => "Q2_K",
            GgmlType::Q3K => "Q3_K",
            GgmlType::Q4K => "Q4_K",
            GgmlType::Q5K => "Q5_K",
            GgmlType::Q6K => "Q6_K",
            GgmlType::IQ4NL => "IQ4_NL",
            GgmlType::IQ4XS => "IQ4_XS",
        }
    }

    /// Parses a name as printed by [`GgmlType::name`] (case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::IQ4NL => 32,
            GgmlType::Q2K
            | GgmlType::Q3K
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
            | GgmlType::IQ4XS => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => legacy::Q4_0_BYTES,
            GgmlType::Q4_1 => legacy::Q4_1_BYTES,
            GgmlType::Q5_0 => legacy::Q5_0_BYTES,
            GgmlType::Q5_1 => legacy::Q5_1_BYTES,
            GgmlType::Q8_0 => legacy::Q8_0_BYTES,
            GgmlType::Q2K => lowk::Q2_K_BYTES,
            GgmlType::Q3K => lowk::Q3_K_BYTES,
            GgmlType::Q4K => kquants::Q4_K_BYTES,
            GgmlType::Q5K => kquants::Q5_K_BYTES,
            GgmlType::Q6K => kquants::Q6_K_BYTES,
            GgmlType::IQ4NL => iquants::IQ4_NL_BYTES,
            GgmlType::IQ4XS => iquants::IQ4_XS_BYTES,
        }
    }

    /// Bytes taken by `elements` values, or an error if `elements` is not a
    /// whole number of blocks.
    pub fn row_bytes(self, elements: usize) -> Result<usize> {
        let block = self.block_size();
        if !elements.is_multiple_of(block) {
            return Err(Error::RowNotBlockMultiple {
                ty: self.name(),
                len: elements,
                block,
            });
        }
        Ok(elements / block * self.block_bytes())
    }

    /// Average bits per weight, including block scales.
    pub fn bits_per_weight(self) -> f64 {
        self.block_bytes() as f64 * 8.0 / self.block_size() as f64
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn check_lengths(ty: GgmlType, elements: usize, bytes: usize) -> Result<()> {
    let expected = ty.row_bytes(elements)?;
    if expected != bytes {
        return Err(Error::ByteLength {
            ty: ty.name(),
            elements,
            expected,
            got: bytes,
        });
    }
    Ok(())
}

/// Decodes `src` (whole blocks of `ty`) into `dst`, one f32 per element.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    check_lengths(ty, dst.len(), src.len())?;
    match ty {
        GgmlType::F32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        GgmlType::F16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = bf16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        GgmlType::Q4_0 => legacy::dequantize_q4_0(src, dst),
        GgmlType::Q4_1 => legacy::dequantize_q4_1(src, dst),
        GgmlType::Q5_0 => legacy::dequantize_q5_0(src, dst),
        GgmlType::Q5_1 => legacy::dequantize_q5_1(src, dst),
        GgmlType::Q8_0 => legacy::dequantize_q8_0(src, dst),
        GgmlType::Q2K => lowk::dequantize_q2_k(src, dst),
        GgmlType::Q3K => lowk::dequantize_q3_k(src, dst),
        GgmlType::Q4K => kquants::dequantize_q4_k(src, dst),
        GgmlType::Q5K => kquants::dequantize_q5_k(src, dst),
        GgmlType::Q6K => kquants::dequantize_q6_k(src, dst),
        GgmlType::IQ4NL => iquants::dequantize_iq4_nl(src, dst),
        GgmlType::IQ4XS => iquants::dequantize_iq4_xs(src, dst),
    }
    Ok(())
}

/// Encodes `src` into `dst` (whole blocks of `ty`) exactly as ggml's
/// reference quantizers (`quantize_row_*_ref`) do.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    check_lengths(ty, src.len(), dst.len())?;
    match ty {
        GgmlType::F32 => {
            for (d, s) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&s.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f16::from_f32(*s).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&fp32_to_bf16_ggml(*s).to_le_bytes());
            }
        }
        GgmlType::Q4_0 => legacy::quantize_q4_0(src, dst),
        GgmlType::Q4_1 => legacy::quantize_q4_1(src, dst),
        GgmlType::Q5_0 => legacy::quantize_q5_0(src, dst),
        GgmlType::Q5_1 => legacy::quantize_q5_1(src, dst),
        GgmlType::Q8_0 => legacy::quantize_q8_0(src, dst),
        GgmlType::Q2K => lowk::quantize_q2_k(src, dst),
        GgmlType::Q3K => lowk::quantize_q3_k(src, dst),
        GgmlType::Q4K => kquants::quantize_q4_k(src, dst),
        GgmlType::Q5K => kquants::quantize_q5_k(src, dst),
        GgmlType::Q6K => kquants::quantize_q6_k(src, dst),
        GgmlType::IQ4NL => iquants::quantize_iq4_nl(src, dst),
        GgmlType::IQ4XS => iquants::quantize_iq4_xs(src, dst),
    }
    Ok(())
}

/// ggml's `ggml_compute_fp32_to_bf16`: round to nearest even, NaNs made quiet.
fn fp32_to_bf16_ggml(x: f32) -> u16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// Reads a little-endian f16 at `b[0..2]` as f32 (exact; inlined into the
/// hot loops, where a runtime-dispatched conversion per block would cost more
/// than the block's arithmetic).
#[inline(always)]
pub(crate) fn read_f16(b: &[u8]) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]))
}

/// IEEE binary16 bits to f32, exactly (every f16 is representable in f32).
#[inline(always)]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = match exp {
        0 if man == 0 => sign,
        // Subnormal: man * 2^-24, exact in f32.
        0 => {
            return f32::from_bits(sign)
                + (man as f32 * (1.0 / 16_777_216.0)) * if sign != 0 { -1.0 } else { 1.0 }
        }
        31 => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// Writes `x` as a little-endian f16 into `b[0..2]`.
#[inline]
pub(crate) fn write_f16(b: &mut [u8], x: f32) {
    b[..2].copy_from_slice(&f16::from_f32(x).to_le_bytes());
}

/// The value of largest magnitude (the first, on ties) and that magnitude:
/// the loop that opens every ggml quantizer (`max`, `amax`).
#[inline]
pub(crate) fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// ggml's `nearest_int`: round half to even through the float mantissa.
/// Valid for |x| <= 4194303, like the original.
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0f32;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod f16_tests {
    #[test]
    fn f16_conversion_is_exact_for_every_bit_pattern() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = super::f16_bits_to_f32(h);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{h:#06x}: {got} vs {want}"
            );
        }
    }
}
