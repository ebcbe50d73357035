//! Instruction-set detection and the kernel table.
//!
//! The best tier the CPU supports is detected once, at first use; the
//! environment variable `HASTEN_ISA=scalar|neon|neondot|avx2|avx512` can force a
//! lower tier (never a higher one), so tests can cover every tier on one
//! machine. x86-64 has the scalar, AVX2 and AVX-512 tiers, AArch64 the
//! scalar, NEON and NEON-with-`SDOT` ones; [`tiers`] lists those this CPU
//! can run.
//! Callers fetch function pointers from [`kernels`] instead of branching
//! on the tier per call.

use crate::quant::GgmlType;
use crate::rows::{
    AmxGemm, AmxPanel, AttendTile, F16Dot, K16Gemm, K8Gemm, K8Gemv, Q8Row, QuantDot, QuantDot4,
    QuantizeRow, Tile1, TileN, X16Gemm, X16Gemm4, X8Gemm, X8Gemv, X8_N,
};
use std::sync::OnceLock;

/// Instruction-set tiers, lowest first. Tiers of different architectures
/// are ordered only so that a forced tier maps to the highest tier of this
/// architecture at or below it (`HASTEN_ISA=avx2` on AArch64 is NEON,
/// `HASTEN_ISA=neon` on x86-64 is scalar).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    /// AArch64 Advanced SIMD (every AArch64 CPU); byte products by widening multiplies.
    Neon,
    /// AArch64 Advanced SIMD with the dot-product extension (`SDOT`).
    NeonDot,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW/VL with VNNI: the AVX2 table with `vpdpbusd` products.
    Avx512,
    /// AVX-512 plus AMX-TILE and AMX-INT8 granted by the OS: the AVX-512
    /// table with tile products for prefill (see [`AmxTable`]).
    Amx,
}

impl Isa {
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Neon => "neon",
            Isa::NeonDot => "neondot",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Amx => "amx",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Isa::Scalar),
            "neon" => Some(Isa::Neon),
            "neondot" => Some(Isa::NeonDot),
            "avx2" => Some(Isa::Avx2),
            "avx512" => Some(Isa::Avx512),
            "amx" => Some(Isa::Amx),
            _ => None,
        }
    }
}

/// The best tier this CPU supports.
pub fn supported() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c");
        let avx512 = avx2
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni");
        if avx512 && crate::simd::amx::available() {
            return Isa::Amx;
        }
        if avx512 {
            return Isa::Avx512;
        }
        if avx2 {
            return Isa::Avx2;
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            Isa::NeonDot
        } else {
            Isa::Neon
        }
    }
    #[cfg(not(target_arch = "aarch64"))]
    Isa::Scalar
}

/// The tiers this CPU can run, lowest first: what tests iterate over.
pub fn tiers() -> Vec<Isa> {
    let arch: &[Isa] = if cfg!(target_arch = "x86_64") {
        &[Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Amx]
    } else if cfg!(target_arch = "aarch64") {
        &[Isa::Scalar, Isa::Neon, Isa::NeonDot]
    } else {
        &[Isa::Scalar]
    };
    arch.iter().copied().filter(|&i| i <= supported()).collect()
}

/// The tier in use: [`supported`], lowered by `HASTEN_ISA` if set.
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        let best = supported();
        match std::env::var("HASTEN_ISA")
            .ok()
            .as_deref()
            .and_then(Isa::parse)
        {
            // The highest tier of this CPU at or below the forced one.
            Some(forced) => tiers()
                .into_iter()
                .filter(|&i| i <= forced)
                .max()
                .unwrap_or(Isa::Scalar),
            None => best,
        }
    })
}

/// The scalar-tier x8 kernels: the reference dot of [`crate::quant::repack`]
/// for one row and mapped over [`X8_N`] rows.
macro_rules! x8_ref {
    ($gemv:ident, $gemm:ident, $row:ty, $dot:path) => {
        fn $gemv(group: &[u8], x: [$row; 1]) -> [[f32; 8]; 1] {
            [$dot(group, x[0])]
        }

        fn $gemm(group: &[u8], x: [$row; X8_N]) -> [[f32; 8]; X8_N] {
            x.map(|r| $dot(group, r))
        }
    };
}

x8_ref!(
    q4_kx8_gemv_ref,
    q4_kx8_gemm_ref,
    &[u8],
    crate::quant::repack::dot_q4_kx8
);
x8_ref!(
    q5_kx8_gemv_ref,
    q5_kx8_gemm_ref,
    &[u8],
    crate::quant::repack_q5k::dot_q5_kx8
);
x8_ref!(
    q6_kx8_gemv_ref,
    q6_kx8_gemm_ref,
    &[u8],
    crate::quant::repack_q6k::dot_q6_kx8
);
x8_ref!(
    q4_0x8_gemv_ref,
    q4_0x8_gemm_ref,
    Q8Row<'_>,
    crate::quant::repack::dot_q4_0x8
);
x8_ref!(
    q5_0x8_gemv_ref,
    q5_0x8_gemm_ref,
    Q8Row<'_>,
    crate::quant::repack::dot_q5_0x8
);
x8_ref!(
    q4_1x8_gemv_ref,
    q4_1x8_gemm_ref,
    Q8Row<'_>,
    crate::quant::repack::dot_q4_1x8
);
x8_ref!(
    q5_1x8_gemv_ref,
    q5_1x8_gemm_ref,
    Q8Row<'_>,
    crate::quant::repack::dot_q5_1x8
);
x8_ref!(
    iq4_nlx8_gemv_ref,
    iq4_nlx8_gemm_ref,
    Q8Row<'_>,
    crate::quant::repack_iq4::dot_iq4_nlx8
);
x8_ref!(
    iq4_xsx8_gemv_ref,
    iq4_xsx8_gemm_ref,
    &[u8],
    crate::quant::repack_iq4::dot_iq4_xsx8
);
x8_ref!(
    q8_0x8_gemv_ref,
    q8_0x8_gemm_ref,
    Q8Row<'_>,
    crate::quant::repack::dot_q8_0x8
);

/// How the products with one weight type are computed.
#[derive(Clone, Copy)]
pub struct QuantPath {
    /// Activation block: elements and bytes (Q8_0: 32/34, Q8_K: 256/292).
    pub act_block: usize,
    pub act_block_bytes: usize,
    pub quantize: QuantizeRow,
    pub dot: QuantDot,
    /// Register tiles over [`Q8Row`]s, if the tier has them (32-element types only).
    pub tiles: Option<(Tile1, TileN)>,
    /// Four activation rows per pass over a weight row (Q2_K, Q3_K: the
    /// types without an interleaved layout), if the tier has it.
    pub dot4: Option<QuantDot4>,
}

/// Function pointers resolved once for the tier in use.
#[derive(Clone, Copy)]
pub struct Kernels {
    pub isa: Isa,
    pub q8_0: QuantPath,
    pub q4_0: QuantPath,
    pub q5_0: QuantPath,
    pub q4_1: QuantPath,
    pub q5_1: QuantPath,
    /// The 2- and 3-bit k-quants (Q8_K activations).
    pub q2_k: QuantPath,
    pub q3_k: QuantPath,
    pub q4_k: QuantPath,
    pub q5_k: QuantPath,
    pub q6_k: QuantPath,
    /// The non-linear 4-bit types (their one-row dots are scalar on every
    /// tier: their rows are repacked wherever the row count allows).
    pub iq4_nl: QuantPath,
    pub iq4_xs: QuantPath,
    /// IQ4_NL in Q4_0's eight-row layout, IQ4_XS in its own (Q8_K activations).
    pub iq4_nlx8: (X8Gemv, X8Gemm),
    pub iq4_xsx8: (K8Gemv, K8Gemm),
    /// Q4_0 and Q8_0 repacked in eight-row groups.
    pub q4_0x8: (X8Gemv, X8Gemm),
    pub q8_0x8: (X8Gemv, X8Gemm),
    pub q5_0x8: (X8Gemv, X8Gemm),
    /// Q4_1 and Q5_1 repacked in eight-row groups (minimums beside the scales).
    pub q4_1x8: (X8Gemv, X8Gemm),
    pub q5_1x8: (X8Gemv, X8Gemm),
    /// Q4_K repacked in eight-row groups (Q8_K activations).
    pub q4_kx8: (K8Gemv, K8Gemm),
    pub q5_kx8: (K8Gemv, K8Gemm),
    pub q6_kx8: (K8Gemv, K8Gemm),
    /// Two eight-row groups at once, where the tier has wide registers.
    pub x16: Option<X16Table>,
    /// Tile products of 16 activation rows, where the tier has AMX.
    pub amx: Option<AmxTable>,
    /// The zero offset the x8 and x16 kernels of the signed types (Q8_0,
    /// IQ4_NL) expect in the activation terms: 0 for signed products; 128
    /// where the weights are made unsigned (`w + 128`) for `vpdpbusd`.
    pub signed_x8_offset: f32,
    pub f16_dot: F16Dot,
    /// The same for bf16 weights.
    pub bf16_dot: F16Dot,
    /// Query · one f16 K row (attention scores).
    pub kv_dot: fn(&[f32], &[half::f16]) -> f32,
    /// `out += w * V row` (attention's weighted sum).
    pub kv_axpy: fn(&mut [f32], f32, &[half::f16]),
    /// Attention of a tile of tokens x the query heads sharing one KV head.
    pub attend_tile: AttendTile,
    /// SwiGLU gate `gate = silu(gate) * up`.
    pub silu_mul: fn(&mut [f32], &[f32]),
    /// GeGLU gate `gate = gelu_tanh(gate) * up`.
    pub gelu_mul: fn(&mut [f32], &[f32]),
}

/// The AMX products: a panel maker per weight type and the tile product
/// they share (see [`AmxGemm`]).
#[derive(Clone, Copy)]
pub struct AmxTable {
    pub q4_0: AmxPanel,
    pub q5_0: AmxPanel,
    pub q8_0: AmxPanel,
    /// Q4_K and Q5_K in 32-element sub-blocks (with minimum terms; Q8_K
    /// activations).
    pub q4_k: AmxPanel,
    pub q5_k: AmxPanel,
    pub gemm: AmxGemm,
}

/// The sixteen-row products of the 32-element types (see [`X16Gemm`]).
#[derive(Clone, Copy)]
pub struct X16Table {
    pub q4_0: X16Gemm,
    pub q4_1: X16Gemm,
    pub q5_0: X16Gemm,
    pub q5_1: X16Gemm,
    pub q8_0: X16Gemm,
    /// The same against four activation rows.
    pub q4_0_4: X16Gemm4,
    pub q4_1_4: X16Gemm4,
    pub q5_0_4: X16Gemm4,
    pub q5_1_4: X16Gemm4,
    pub q8_0_4: X16Gemm4,
    pub iq4_nl: X16Gemm,
    pub iq4_nl_4: X16Gemm4,
    pub q4_k: K16Gemm,
    pub q5_k: K16Gemm,
    pub q6_k: K16Gemm,
    pub iq4_xs: K16Gemm,
}

impl QuantPath {
    /// Bytes of one quantized activation row of `cols` elements (a multiple of the block).
    pub fn act_row_bytes(&self, cols: usize) -> usize {
        cols / self.act_block * self.act_block_bytes
    }
}

impl Kernels {
    /// The eight-row interleaved kernels for a weight type, if it has them.
    pub fn x8_path(&self, ty: GgmlType) -> Option<(X8Gemv, X8Gemm)> {
        match ty {
            GgmlType::Q4_0 => Some(self.q4_0x8),
            GgmlType::Q8_0 => Some(self.q8_0x8),
            GgmlType::Q5_0 => Some(self.q5_0x8),
            GgmlType::Q4_1 => Some(self.q4_1x8),
            GgmlType::Q5_1 => Some(self.q5_1x8),
            GgmlType::IQ4NL => Some(self.iq4_nlx8),
            _ => None,
        }
    }

    /// The zero offset the x8 and x16 kernels of a 32-element weight type
    /// expect in [`Q8Row::ds`] (see [`crate::rows::q8_row_terms`]).
    pub fn x8_zero_offset(&self, ty: GgmlType) -> f32 {
        match ty {
            GgmlType::Q8_0 | GgmlType::IQ4NL => self.signed_x8_offset,
            _ => crate::rows::zero_offset(ty),
        }
    }

    /// The sixteen-row kernel for a weight type, if the tier has one.
    pub fn x16_path(&self, ty: GgmlType) -> Option<X16Gemm> {
        let t = self.x16?;
        match ty {
            GgmlType::Q4_0 => Some(t.q4_0),
            GgmlType::Q4_1 => Some(t.q4_1),
            GgmlType::Q5_0 => Some(t.q5_0),
            GgmlType::Q5_1 => Some(t.q5_1),
            GgmlType::Q8_0 => Some(t.q8_0),
            GgmlType::IQ4NL => Some(t.iq4_nl),
            _ => None,
        }
    }

    /// The AMX panel maker and tile product for a weight type, if the tier has them.
    pub fn amx_path(&self, ty: GgmlType) -> Option<(AmxPanel, AmxGemm)> {
        let t = self.amx?;
        let panel = match ty {
            GgmlType::Q4_0 => t.q4_0,
            GgmlType::Q5_0 => t.q5_0,
            GgmlType::Q8_0 => t.q8_0,
            GgmlType::Q4K => t.q4_k,
            GgmlType::Q5K => t.q5_k,
            _ => return None,
        };
        Some((panel, t.gemm))
    }

    /// The sixteen-row kernel over four activation rows, if the tier has one.
    pub fn x16_path4(&self, ty: GgmlType) -> Option<X16Gemm4> {
        let t = self.x16?;
        match ty {
            GgmlType::Q4_0 => Some(t.q4_0_4),
            GgmlType::Q4_1 => Some(t.q4_1_4),
            GgmlType::Q5_0 => Some(t.q5_0_4),
            GgmlType::Q5_1 => Some(t.q5_1_4),
            GgmlType::Q8_0 => Some(t.q8_0_4),
            GgmlType::IQ4NL => Some(t.iq4_nl_4),
            _ => None,
        }
    }

    /// The sixteen-row K-quant kernel for a weight type, if the tier has one.
    pub fn k16_path(&self, ty: GgmlType) -> Option<K16Gemm> {
        let t = self.x16?;
        match ty {
            GgmlType::Q4K => Some(t.q4_k),
            GgmlType::Q5K => Some(t.q5_k),
            GgmlType::Q6K => Some(t.q6_k),
            GgmlType::IQ4XS => Some(t.iq4_xs),
            _ => None,
        }
    }

    /// The integer path for a weight type, if it has one.
    pub fn quant_path(&self, ty: GgmlType) -> Option<QuantPath> {
        match ty {
            GgmlType::Q8_0 => Some(self.q8_0),
            GgmlType::Q4_0 => Some(self.q4_0),
            GgmlType::Q5_0 => Some(self.q5_0),
            GgmlType::Q4_1 => Some(self.q4_1),
            GgmlType::Q5_1 => Some(self.q5_1),
            GgmlType::Q2K => Some(self.q2_k),
            GgmlType::Q3K => Some(self.q3_k),
            GgmlType::Q4K => Some(self.q4_k),
            GgmlType::Q5K => Some(self.q5_k),
            GgmlType::Q6K => Some(self.q6_k),
            GgmlType::IQ4NL => Some(self.iq4_nl),
            GgmlType::IQ4XS => Some(self.iq4_xs),
            _ => None,
        }
    }

    /// The table for a given tier (tests use this to cover every tier).
    pub fn for_isa(isa: Isa) -> Self {
        use crate::quant::dot as r;
        let q80 = |quantize, dot| QuantPath {
            act_block: 32,
            act_block_bytes: 34,
            quantize,
            dot,
            tiles: None,
            dot4: None,
        };
        let q8k = |quantize, dot| QuantPath {
            act_block: 256,
            act_block_bytes: r::Q8_K_BYTES,
            quantize,
            dot,
            tiles: None,
            dot4: None,
        };
        let scalar = Kernels {
            isa: Isa::Scalar,
            q8_0: q80(r::quantize_q8_0_act, r::dot_q8_0_q8_0),
            q4_0: q80(r::quantize_q8_0_act, r::dot_q4_0_q8_0),
            q5_0: q80(r::quantize_q8_0_act, r::dot_q5_0_q8_0),
            q4_1: q80(r::quantize_q8_0_act, r::dot_q4_1_q8_0),
            q5_1: q80(r::quantize_q8_0_act, r::dot_q5_1_q8_0),
            q2_k: q8k(r::quantize_q8_k_act, r::dot_q2_k_q8_k),
            q3_k: q8k(r::quantize_q8_k_act, r::dot_q3_k_q8_k),
            q4_k: q8k(r::quantize_q8_k_act, r::dot_q4_k_q8_k),
            q5_k: q8k(r::quantize_q8_k_act, r::dot_q5_k_q8_k),
            q6_k: q8k(r::quantize_q8_k_act, r::dot_q6_k_q8_k),
            iq4_nl: q80(r::quantize_q8_0_act, r::dot_iq4_nl_q8_0),
            iq4_xs: q8k(r::quantize_q8_k_act, r::dot_iq4_xs_q8_k),
            q4_0x8: (q4_0x8_gemv_ref, q4_0x8_gemm_ref),
            q8_0x8: (q8_0x8_gemv_ref, q8_0x8_gemm_ref),
            q5_0x8: (q5_0x8_gemv_ref, q5_0x8_gemm_ref),
            q4_1x8: (q4_1x8_gemv_ref, q4_1x8_gemm_ref),
            q5_1x8: (q5_1x8_gemv_ref, q5_1x8_gemm_ref),
            q4_kx8: (q4_kx8_gemv_ref, q4_kx8_gemm_ref),
            q5_kx8: (q5_kx8_gemv_ref, q5_kx8_gemm_ref),
            q6_kx8: (q6_kx8_gemv_ref, q6_kx8_gemm_ref),
            iq4_nlx8: (iq4_nlx8_gemv_ref, iq4_nlx8_gemm_ref),
            iq4_xsx8: (iq4_xsx8_gemv_ref, iq4_xsx8_gemm_ref),
            x16: None,
            amx: None,
            signed_x8_offset: 0.0,
            f16_dot: r::dot_f16_f32,
            bf16_dot: r::dot_bf16_f32,
            kv_dot: r::dot_f32_f16,
            kv_axpy: r::axpy_f16,
            attend_tile: crate::attention::attend_tile_reference,
            silu_mul: crate::ops::silu_mul_reference,
            gelu_mul: crate::ops::gelu_mul_reference,
        };
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx2 && supported() >= Isa::Avx2 {
            use crate::simd::avx2;
            let avx2 = Kernels {
                isa: Isa::Avx2,
                q8_0: QuantPath {
                    tiles: Some((avx2::tile_q8_0_1, avx2::tile_q8_0_n)),
                    ..q80(avx2::quantize_q8_0, avx2::dot_q8_0_q8_0)
                },
                q4_0: QuantPath {
                    tiles: Some((avx2::tile_q4_0_1, avx2::tile_q4_0_n)),
                    ..q80(avx2::quantize_q8_0, avx2::dot_q4_0_q8_0)
                },
                q5_0: QuantPath {
                    tiles: Some((avx2::tile_q5_0_1, avx2::tile_q5_0_n)),
                    ..q80(avx2::quantize_q8_0, avx2::dot_q5_0_q8_0)
                },
                // Unrepacked Q4_1/Q5_1 rows (row counts not a multiple of 8) are rare.
                q4_1: q80(avx2::quantize_q8_0, r::dot_q4_1_q8_0),
                q5_1: q80(avx2::quantize_q8_0, r::dot_q5_1_q8_0),
                q2_k: QuantPath {
                    dot4: Some(crate::simd::avx2_lowk::dot4_q2_k_q8_k),
                    ..q8k(avx2::quantize_q8_k, crate::simd::avx2_lowk::dot_q2_k_q8_k)
                },
                q3_k: QuantPath {
                    dot4: Some(crate::simd::avx2_lowk::dot4_q3_k_q8_k),
                    ..q8k(avx2::quantize_q8_k, crate::simd::avx2_lowk::dot_q3_k_q8_k)
                },
                q4_k: q8k(avx2::quantize_q8_k, avx2::dot_q4_k_q8_k),
                // Unrepacked Q5_K rows (row counts not a multiple of 8) are rare.
                q5_k: q8k(avx2::quantize_q8_k, r::dot_q5_k_q8_k),
                q6_k: q8k(avx2::quantize_q8_k, avx2::dot_q6_k_q8_k),
                iq4_nl: q80(avx2::quantize_q8_0, r::dot_iq4_nl_q8_0),
                iq4_xs: q8k(avx2::quantize_q8_k, r::dot_iq4_xs_q8_k),
                q4_0x8: (
                    crate::simd::avx2_x8::gemv_q4_0x8,
                    crate::simd::avx2_x8::gemm_q4_0x8,
                ),
                q8_0x8: (
                    crate::simd::avx2_x8::gemv_q8_0x8,
                    crate::simd::avx2_x8::gemm_q8_0x8,
                ),
                q5_0x8: (
                    crate::simd::avx2_x8::gemv_q5_0x8,
                    crate::simd::avx2_x8::gemm_q5_0x8,
                ),
                q4_1x8: (
                    crate::simd::avx2_x8::gemv_q4_1x8,
                    crate::simd::avx2_x8::gemm_q4_1x8,
                ),
                q5_1x8: (
                    crate::simd::avx2_x8::gemv_q5_1x8,
                    crate::simd::avx2_x8::gemm_q5_1x8,
                ),
                q4_kx8: (
                    crate::simd::avx2_x8::gemv_q4_kx8,
                    crate::simd::avx2_x8::gemm_q4_kx8,
                ),
                q5_kx8: (
                    crate::simd::avx2_x8::gemv_q5_kx8,
                    crate::simd::avx2_x8::gemm_q5_kx8,
                ),
                q6_kx8: (
                    crate::simd::avx2_x8::gemv_q6_kx8,
                    crate::simd::avx2_x8::gemm_q6_kx8,
                ),
                iq4_nlx8: (
                    crate::simd::x86_iq4::gemv_iq4_nlx8,
                    crate::simd::x86_iq4::gemm_iq4_nlx8,
                ),
                iq4_xsx8: (
                    crate::simd::x86_iq4::gemv_iq4_xsx8,
                    crate::simd::x86_iq4::gemm_iq4_xsx8,
                ),
                x16: None,
                amx: None,
                signed_x8_offset: 0.0,
                f16_dot: avx2::dot_f16_f32,
                bf16_dot: avx2::dot_bf16_f32,
                kv_dot: avx2::dot_f32_f16,
                kv_axpy: avx2::axpy_f16,
                attend_tile: crate::simd::avx2_attn::attend_tile,
                silu_mul: avx2::silu_mul,
                gelu_mul: avx2::gelu_mul,
            };
            if isa >= Isa::Amx && supported() >= Isa::Amx {
                use crate::simd::amx;
                return Kernels {
                    isa: Isa::Amx,
                    amx: Some(AmxTable {
                        q4_0: amx::panel_q4_0,
                        q5_0: amx::panel_q5_0,
                        q8_0: amx::panel_q8_0,
                        q4_k: crate::simd::amx_k::panel_q4_k,
                        q5_k: crate::simd::amx_k::panel_q5_k,
                        gemm: amx::gemm_tiles,
                    }),
                    ..avx512_table(avx2)
                };
            }
            if isa >= Isa::Avx512 && supported() >= Isa::Avx512 {
                return avx512_table(avx2);
            }
            return avx2;
        }
        #[cfg(target_arch = "aarch64")]
        if isa >= Isa::NeonDot && supported() >= Isa::NeonDot {
            return neon_table::<true>(scalar);
        } else if isa >= Isa::Neon {
            return neon_table::<false>(scalar);
        }
        let _ = isa;
        scalar
    }
}

/// The AVX-512 tier's table: `vpdpbusd` products for every interleaved
/// type (x8, and x16 pairs of groups for batched rows), 512-bit element
/// kernels, the attention tile built with 32 registers; the rest (the
/// 4-row tiles and one-row dots of unrepacked weights, the KV dots) is
/// the AVX2 table's.
#[cfg(target_arch = "x86_64")]
fn avx512_table(avx2: Kernels) -> Kernels {
    use crate::simd::avx512 as e;
    use crate::simd::avx512_x16 as w;
    use crate::simd::avx512_x8 as v;
    use crate::simd::x86_iq4 as iq;
    Kernels {
        isa: Isa::Avx512,
        q4_0x8: (v::gemv_q4_0x8, v::gemm_q4_0x8),
        q8_0x8: (v::gemv_q8_0x8, v::gemm_q8_0x8),
        q5_0x8: (v::gemv_q5_0x8, v::gemm_q5_0x8),
        q4_1x8: (v::gemv_q4_1x8, v::gemm_q4_1x8),
        q5_1x8: (v::gemv_q5_1x8, v::gemm_q5_1x8),
        q4_kx8: (v::gemv_q4_kx8, v::gemm_q4_kx8),
        q5_kx8: (v::gemv_q5_kx8, v::gemm_q5_kx8),
        q6_kx8: (v::gemv_q6_kx8, v::gemm_q6_kx8),
        iq4_nlx8: (iq::gemv_iq4_nlx8_vnni, iq::gemm_iq4_nlx8_vnni),
        iq4_xsx8: (iq::gemv_iq4_xsx8_vnni, iq::gemm_iq4_xsx8_vnni),
        x16: Some(X16Table {
            q4_0: w::gemm_q4_0x16,
            q4_1: w::gemm_q4_1x16,
            q5_0: w::gemm_q5_0x16,
            q5_1: w::gemm_q5_1x16,
            q8_0: w::gemm_q8_0x16,
            q4_0_4: w::gemm_q4_0x16_4,
            q4_1_4: w::gemm_q4_1x16_4,
            q5_0_4: w::gemm_q5_0x16_4,
            q5_1_4: w::gemm_q5_1x16_4,
            q8_0_4: w::gemm_q8_0x16_4,
            iq4_nl: iq::gemm_iq4_nlx16,
            iq4_nl_4: iq::gemm_iq4_nlx16_4,
            q4_k: crate::simd::avx512_k16::gemm_q4_kx16,
            q5_k: crate::simd::avx512_k16::gemm_q5_kx16,
            q6_k: crate::simd::avx512_k16::gemm_q6_kx16,
            iq4_xs: iq::gemm_iq4_xsx16,
        }),
        signed_x8_offset: 128.0,
        attend_tile: crate::simd::avx2_attn::attend_tile_avx512,
        f16_dot: e::dot_f16_f32,
        bf16_dot: e::dot_bf16_f32,
        silu_mul: e::silu_mul,
        gelu_mul: e::gelu_mul,
        q8_0: QuantPath {
            quantize: e::quantize_q8_0,
            ..avx2.q8_0
        },
        q4_0: QuantPath {
            quantize: e::quantize_q8_0,
            ..avx2.q4_0
        },
        q5_0: QuantPath {
            quantize: e::quantize_q8_0,
            ..avx2.q5_0
        },
        q4_1: QuantPath {
            quantize: e::quantize_q8_0,
            ..avx2.q4_1
        },
        q5_1: QuantPath {
            quantize: e::quantize_q8_0,
            ..avx2.q5_1
        },
        q2_k: QuantPath {
            dot4: Some(crate::simd::avx2_lowk::dot4_q2_k_q8_k_vnni),
            dot: crate::simd::avx2_lowk::dot_q2_k_q8_k_avx512,
            quantize: e::quantize_q8_k,
            ..avx2.q2_k
        },
        q3_k: QuantPath {
            dot4: Some(crate::simd::avx2_lowk::dot4_q3_k_q8_k_vnni),
            dot: crate::simd::avx2_lowk::dot_q3_k_q8_k_avx512,
            quantize: e::quantize_q8_k,
            ..avx2.q3_k
        },
        q4_k: QuantPath {
            quantize: e::quantize_q8_k,
            ..avx2.q4_k
        },
        q5_k: QuantPath {
            quantize: e::quantize_q8_k,
            ..avx2.q5_k
        },
        q6_k: QuantPath {
            quantize: e::quantize_q8_k,
            ..avx2.q6_k
        },
        iq4_xs: QuantPath {
            quantize: e::quantize_q8_k,
            ..avx2.iq4_xs
        },
        ..avx2
    }
}

/// The AArch64 tiers' table: `D` selects the `SDOT` instances (NeonDot).
#[cfg(target_arch = "aarch64")]
fn neon_table<const D: bool>(scalar: Kernels) -> Kernels {
    use crate::simd::{neon, neon_k8};
    Kernels {
        isa: if D { Isa::NeonDot } else { Isa::Neon },
        q8_0: QuantPath {
            quantize: neon::quantize_q8_0,
            dot: neon::dot_q8_0_q8_0::<D>,
            ..scalar.q8_0
        },
        q4_0: QuantPath {
            quantize: neon::quantize_q8_0,
            dot: neon::dot_q4_0_q8_0::<D>,
            ..scalar.q4_0
        },
        q5_0: QuantPath {
            quantize: neon::quantize_q8_0,
            ..scalar.q5_0
        },
        q4_1: QuantPath {
            quantize: neon::quantize_q8_0,
            ..scalar.q4_1
        },
        q5_1: QuantPath {
            quantize: neon::quantize_q8_0,
            ..scalar.q5_1
        },
        q2_k: QuantPath {
            dot: neon_k8::dot_q2_k_q8_k::<D>,
            ..scalar.q2_k
        },
        q3_k: QuantPath {
            dot: neon_k8::dot_q3_k_q8_k::<D>,
            ..scalar.q3_k
        },
        q4_0x8: (neon::gemv_q4_0x8::<D>, neon::gemm_q4_0x8::<D>),
        q8_0x8: (neon::gemv_q8_0x8::<D>, neon::gemm_q8_0x8::<D>),
        q5_0x8: (neon::gemv_q5_0x8::<D>, neon::gemm_q5_0x8::<D>),
        q4_1x8: (neon::gemv_q4_1x8::<D>, neon::gemm_q4_1x8::<D>),
        q5_1x8: (neon::gemv_q5_1x8::<D>, neon::gemm_q5_1x8::<D>),
        q4_kx8: (neon_k8::gemv_q4_kx8::<D>, neon_k8::gemm_q4_kx8::<D>),
        q5_kx8: (neon_k8::gemv_q5_kx8::<D>, neon_k8::gemm_q5_kx8::<D>),
        q6_kx8: (neon_k8::gemv_q6_kx8::<D>, neon_k8::gemm_q6_kx8::<D>),
        iq4_nlx8: (neon::gemv_iq4_nlx8::<D>, neon::gemm_iq4_nlx8::<D>),
        iq4_xsx8: (neon_k8::gemv_iq4_xsx8::<D>, neon_k8::gemm_iq4_xsx8::<D>),
        f16_dot: neon::dot_f16_f32,
        bf16_dot: neon::dot_bf16_f32,
        kv_dot: neon::dot_f32_f16,
        kv_axpy: neon::axpy_f16,
        silu_mul: neon::silu_mul,
        gelu_mul: neon::gelu_mul,
        // Unrepacked k-quant rows, Q5_0 rows and the attention tile keep
        // the references (the tile through the dots above).
        ..scalar
    }
}

/// The kernel table for [`isa`].
pub fn kernels() -> &'static Kernels {
    static K: OnceLock<Kernels> = OnceLock::new();
    K.get_or_init(|| Kernels::for_isa(isa()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `HASTEN_EXPECT_ISA` (set by `scripts/test-aarch64.sh` for each
    /// emulated CPU) names the tier detection must find, so a run cannot
    /// pass while silently testing a lower tier than intended.
    #[test]
    fn detection_finds_the_expected_tier() {
        let tiers = tiers();
        assert_eq!(tiers.first(), Some(&Isa::Scalar));
        assert_eq!(tiers.last(), Some(&supported()));
        assert!(tiers.windows(2).all(|w| w[0] < w[1]));
        // The table of the best tier is that tier's, and each lower one's its own.
        for &isa in &tiers {
            assert_eq!(Kernels::for_isa(isa).isa, isa);
        }
        if let Ok(want) = std::env::var("HASTEN_EXPECT_ISA") {
            assert_eq!(supported().name(), want.trim());
        }
    }
}
