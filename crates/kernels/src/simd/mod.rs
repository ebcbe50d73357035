//! SIMD tiers of the kernels in [`crate::quant::dot`]. Each public function
//! here has the same signature and meaning as its scalar reference, checks
//! lengths like it, and is only reachable through [`crate::cpu::kernels`],
//! which hands it out only when the CPU supports its instructions.

pub mod avx2;
pub mod avx2_attn;
pub mod avx2_x8;
