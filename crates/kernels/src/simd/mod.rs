//! SIMD tiers of the kernels in [`crate::quant::dot`]. Each public function
//! here has the same signature and meaning as its scalar reference, checks
//! lengths like it, and is only reachable through [`crate::cpu::kernels`],
//! which hands it out only when the CPU supports its instructions.

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx2_attn;
#[cfg(target_arch = "x86_64")]
pub mod avx2_x8;
#[cfg(target_arch = "aarch64")]
pub mod neon;
#[cfg(target_arch = "aarch64")]
pub mod neon_k8;
