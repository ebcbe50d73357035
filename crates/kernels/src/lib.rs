//! hasten-kernels: the arithmetic of inference, with no I/O and no async.
//!
//! This crate owns the quantized block formats of ggml (bit-exact scalar
//! quantize/dequantize references), the matrix-vector and matrix-matrix
//! products over those formats, the elementwise kernels of a Llama block
//! (RMSNorm, RoPE, softmax, SiLU) and attention over a paged KV cache.
//!
//! Every kernel here is a plain, obviously-correct reference. Faster
//! variants added later must be tested against these on random inputs.

pub mod attention;
pub mod cpu;
pub mod error;
pub mod matmul;
pub mod ops;
pub mod probe;
pub mod quant;
pub mod rows;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod simd;
pub mod threads;

pub use error::{Error, Result};
pub use quant::GgmlType;
