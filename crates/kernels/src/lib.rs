//! hasten-kernels: the arithmetic of inference, with no I/O and no async.
//!
//! This crate owns the quantized block formats of ggml (bit-exact scalar
//! quantize/dequantize references), the matrix-vector and matrix-matrix
//! products over those formats, the elementwise kernels of a Llama block
//! (RMSNorm, RoPE, softmax, SiLU) and attention over a paged KV cache.
//!
//! Every kernel has a plain scalar reference (`quant/`, `attention`,
//! `ops`); the SIMD tiers in `simd/` (AVX2, NEON with and without `SDOT`)
//! are tested against them on random inputs of awkward sizes on every tier
//! the CPU runs. [`cpu`] detects the tier and holds the one table that
//! knows them all; [`rows`] holds the shapes they share. `unsafe` is
//! allowed only in `simd/`, [`threads`] and [`hugepages`].

pub mod attention;
pub mod attention_q8;
pub mod attention_split;
pub mod cpu;
pub mod error;
pub mod hugepages;
pub mod matmul;
mod matmul_amx;
pub mod ops;
pub mod probe;
pub mod quant;
pub mod rows;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod simd;
pub mod threads;

pub use error::{Error, Result};
pub use quant::GgmlType;
