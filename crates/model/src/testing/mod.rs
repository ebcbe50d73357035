//! Seeded synthetic models for tests, goldens and benchmarks.
//!
//! A [`Fixture`] describes a model shape of one of the supported families
//! (mixtures of experts included); its weights are drawn
//! from a ChaCha RNG in Hugging Face layout, then written either as GGUF
//! (llama.cpp names, Q/K rows permuted for `llama` as llama.cpp's converter
//! does, quantized to the chosen type) or as safetensors + `config.json`.
//! The same seed gives the same model in both formats, bit for bit.

use crate::config::{Arch, Moe, Norms, QkNorm, Scales};
use hasten_kernels::GgmlType;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

mod verify;
mod write;

pub use verify::first_row_logits;
pub use write::gguf_name;

/// The shape and encoding of a synthetic model.
#[derive(Debug, Clone, PartialEq)]
pub struct Fixture {
    pub arch: Arch,
    pub ty: GgmlType,
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Per-head width of Q, K and V (Qwen3 and Gemma use one wider than
    /// `dim / n_heads`).
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    pub tied: bool,
    pub seed: u64,
    /// Standard deviation of output-matrix weights: larger spreads logits,
    /// giving comfortable top-1/top-2 margins for golden comparisons.
    pub output_scale: f32,
    /// Scale of each layer's contribution to the residual stream.
    pub layer_scale: f32,
    /// How strongly each token's embedding points at one fixed successor's
    /// output row (0 = fully random weights).
    pub bigram: f32,
    /// The successors form cycles of this many tokens (`hasten synth
    /// --pattern`): a greedy continuation then repeats itself, as text
    /// that speculative decoding can draft does. `None`: one long
    /// permutation (what the goldens were made with).
    pub cycle: Option<usize>,
    /// Granite's multipliers, written for `Arch::Granite` only.
    pub scales: Scales,
    /// The experts of `Arch::Qwen3Moe` (every layer's FFN).
    pub moe: Option<Moe>,
    /// RoPE base (of the global layers).
    pub rope_base: f32,
    /// Sliding window of the family's local layers (Gemma).
    pub sliding_window: Option<usize>,
    /// Rotated dimensions per head, if fewer than `head_dim` (Phi-4-mini).
    pub rope_dims: Option<usize>,
    /// LongRoPE (Phi-3): the original context; seeded short and long
    /// factors are written with it.
    pub longrope_orig: Option<usize>,
    /// YaRN or Llama 3 scaling of RoPE (`hasten synth --rope-scaling`).
    pub rope_scaling: Option<RopeScalingFx>,
}

/// How a fixture scales RoPE beyond `context_length / factor` positions
/// (the original context it claims to have been trained at).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScalingFx {
    /// YaRN (GGUF: `rope.scaling.type = yarn`; Hugging Face: `rope_type: yarn`).
    Yarn { factor: f32 },
    /// Llama 3's frequency factors (GGUF: the `rope_freqs.weight` tensor),
    /// low and high frequency factors 1 and 4.
    Llama3 { factor: f32 },
}

impl RopeScalingFx {
    /// `yarn:FACTOR` or `llama3:FACTOR` (FACTOR > 1).
    pub fn parse(s: &str) -> Option<Self> {
        let (kind, factor) = s.split_once(':')?;
        let factor: f32 = factor.trim().parse().ok().filter(|&f: &f32| f > 1.0)?;
        match kind.trim() {
            "yarn" => Some(RopeScalingFx::Yarn { factor }),
            "llama3" => Some(RopeScalingFx::Llama3 { factor }),
            _ => None,
        }
    }

    pub fn factor(self) -> f32 {
        match self {
            RopeScalingFx::Yarn { factor } | RopeScalingFx::Llama3 { factor } => factor,
        }
    }
}

impl Fixture {
    /// A tiny Llama (2 layers, dim 256) over the 32000-token llama-spm vocabulary.
    pub fn tiny(ty: GgmlType) -> Self {
        Fixture {
            arch: Arch::Llama,
            ty,
            dim: 256,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 64,
            ffn_dim: 512,
            vocab_size: 32000,
            context_length: 512,
            tied: false,
            seed: 42,
            output_scale: 0.5,
            layer_scale: 0.3,
            bigram: 0.45,
            cycle: None,
            scales: Scales::default(),
            moe: None,
            rope_base: 10000.0,
            sliding_window: None,
            rope_dims: None,
            longrope_orig: None,
            rope_scaling: None,
        }
    }

    /// The tiny fixture of each family (`hasten synth --arch NAME`).
    pub fn tiny_arch(arch: Arch, ty: GgmlType) -> Self {
        match arch {
            Arch::Qwen3 => Self::tiny_qwen3(ty),
            Arch::Granite => Self::tiny_granite(ty),
            Arch::SmolLM3 => Self::tiny_smollm3(ty),
            Arch::Qwen3Moe => Self::tiny_qwen3moe(ty),
            Arch::Qwen2Moe => Self::tiny_qwen2moe(ty),
            Arch::Mixtral => Self::tiny_mixtral(ty),
            Arch::Gemma2 => Self::tiny_gemma2(ty),
            Arch::Gemma3 => Self::tiny_gemma3(ty),
            Arch::Phi3 => Self::tiny_phi3(ty),
            Arch::Olmo2 => Self::tiny_olmo2(ty),
            Arch::Llama | Arch::Qwen2 => Fixture {
                arch,
                ..Self::tiny(ty)
            },
        }
    }

    /// The tiny shape as Gemma 3: six layers (the last global, the others
    /// a sliding window of 8 positions, so prompts outgrow it), a global
    /// RoPE base of 1M, Q/K norms, GeGLU, sandwich norms.
    pub fn tiny_gemma3(ty: GgmlType) -> Self {
        Fixture {
            arch: Arch::Gemma3,
            n_layers: 6,
            rope_base: 1_000_000.0,
            sliding_window: Some(8),
            ..Self::tiny(ty)
        }
    }

    /// The tiny shape as Gemma 2: a local and a global layer, soft caps
    /// 50 and 30, and tied embeddings (llama.cpp reads no output matrix).
    pub fn tiny_gemma2(ty: GgmlType) -> Self {
        Fixture {
            arch: Arch::Gemma2,
            sliding_window: Some(8),
            tied: true,
            ..Self::tiny(ty)
        }
    }

    /// The tiny shape as Phi-3/Phi-4-mini: fused QKV and gate-up, RoPE
    /// over 48 of 64 dimensions, LongRoPE with an original context of 256
    /// (the context of 512 takes the long factors).
    pub fn tiny_phi3(ty: GgmlType) -> Self {
        Fixture {
            arch: Arch::Phi3,
            rope_dims: Some(48),
            longrope_orig: Some(256),
            ..Self::tiny(ty)
        }
    }

    /// The tiny shape as OLMo 2: norms after attention and FFN, RMSNorm
    /// over all of Q and K.
    pub fn tiny_olmo2(ty: GgmlType) -> Self {
        Fixture {
            arch: Arch::Olmo2,
            ..Self::tiny(ty)
        }
    }

    /// This (benchmark) shape with the family traits of `tiny`, a tiny
    /// fixture of another family: its architecture, multipliers, RoPE base,
    /// window (a quarter of the context), partial rotation (the same
    /// fraction), LongRoPE (half the context) and tying.
    pub fn with_family(self, tiny: &Fixture) -> Self {
        Fixture {
            arch: tiny.arch,
            scales: tiny.scales,
            rope_base: tiny.rope_base,
            sliding_window: tiny
                .sliding_window
                .map(|_| (self.context_length / 4).max(1)),
            rope_dims: tiny
                .rope_dims
                .map(|r| (self.head_dim * r / tiny.head_dim).next_multiple_of(2)),
            longrope_orig: tiny.longrope_orig.map(|_| self.context_length / 2),
            tied: self.tied || tiny.tied,
            ..self
        }
    }

    /// The context before `rope_scaling` extended it.
    pub fn rope_orig_context(&self) -> Option<usize> {
        let f = self.rope_scaling?.factor();
        Some(((self.context_length as f32 / f) as usize).max(1))
    }

    /// The Hugging Face `rope_scaling` object of `rope_scaling`.
    pub fn hf_rope_scaling(&self) -> Option<serde_json::Value> {
        let orig = self.rope_orig_context()?;
        Some(match self.rope_scaling? {
            RopeScalingFx::Yarn { factor } => serde_json::json!({
                "rope_type": "yarn", "factor": factor,
                "original_max_position_embeddings": orig,
            }),
            RopeScalingFx::Llama3 { factor } => serde_json::json!({
                "rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": orig,
            }),
        })
    }

    /// Dimensions RoPE rotates per head.
    pub fn rot_dims(&self) -> usize {
        self.rope_dims.unwrap_or(self.head_dim)
    }

    /// LongRoPE's attention factor, `sqrt(1 + ln(s) / ln(orig))` for the
    /// extension `s = context / orig` (as the converter computes it).
    pub fn longrope_attn_factor(&self) -> f32 {
        let orig = self.longrope_orig.unwrap_or(self.context_length) as f32;
        let s = self.context_length as f32 / orig;
        if s > 1.0 {
            (1.0 + s.ln() / orig.ln()).sqrt()
        } else {
            1.0
        }
    }

    /// Seeded short and long LongRoPE factors (one per rotated pair).
    pub fn longrope_factors(&self) -> Option<[Vec<f32>; 2]> {
        self.longrope_orig?;
        let pairs = self.rot_dims() / 2;
        let short = (0..pairs).map(|i| 1.0 + 0.05 * i as f32).collect();
        let long = (0..pairs).map(|i| 1.0 + 0.4 * i as f32).collect();
        Some([short, long])
    }

    /// The tiny Llama shape as Mixtral: 8 experts (2 per token) of the
    /// dense width, 512; layers scaled down a little more, since two
    /// experts add twice a dense FFN's spread to the residual stream.
    /// (`hasten synth --arch mixtral` writes this seed unless told another.)
    pub fn tiny_mixtral(ty: GgmlType) -> Self {
        let t = Self::tiny(ty);
        Fixture {
            arch: Arch::Mixtral,
            layer_scale: 0.2,
            // Seed 42's greedy paths reach near-ties within a few steps.
            seed: 43,
            moe: Some(Moe {
                n_experts: 8,
                top_k: 2,
                expert_ffn_dim: t.ffn_dim,
                norm_topk: true,
                shared_ffn_dim: 0,
            }),
            ..t
        }
    }

    /// The tiny Qwen3 shape with a mixture of 8 experts (2 per token) of
    /// width 128 in every layer.
    pub fn tiny_qwen3moe(ty: GgmlType) -> Self {
        Fixture {
            arch: Arch::Qwen3Moe,
            moe: Some(Moe {
                n_experts: 8,
                top_k: 2,
                expert_ffn_dim: 128,
                norm_topk: true,
                shared_ffn_dim: 0,
            }),
            ..Self::tiny_qwen3(ty)
        }
    }

    /// The tiny Qwen2 shape as Qwen2-MoE: 8 experts (2 per token, weights
    /// not renormalized) of width 128 and a shared expert of width 192.
    pub fn tiny_qwen2moe(ty: GgmlType) -> Self {
        Fixture {
            arch: Arch::Qwen2Moe,
            moe: Some(Moe {
                n_experts: 8,
                top_k: 2,
                expert_ffn_dim: 128,
                norm_topk: false,
                shared_ffn_dim: 192,
            }),
            ..Self::tiny(ty)
        }
    }

    /// The tiny shape as a SmolLM3 model with 4 layers, so that one (the
    /// last) goes without RoPE.
    pub fn tiny_smollm3(ty: GgmlType) -> Self {
        Fixture {
            arch: Arch::SmolLM3,
            n_layers: 4,
            ..Self::tiny(ty)
        }
    }

    /// The tiny shape as a Granite model, every multiplier away from 1 (and
    /// the attention scale away from `1 / sqrt(head_dim)`).
    pub fn tiny_granite(ty: GgmlType) -> Self {
        Fixture {
            arch: Arch::Granite,
            scales: Scales {
                embedding: 2.0,
                residual: 0.5,
                attention: Some(1.0 / 64.0),
                logit: 4.0,
                ..Scales::default()
            },
            ..Self::tiny(ty)
        }
    }

    /// A benchmark shape by name: `135m` (SmolLM2-135M), `1b`
    /// (TinyLlama-1.1B) or `moe` (Qwen3-30B-A3B's layers, 12 of its 48,
    /// with 32 of its 128 experts: 2.2B parameters, 0.75B active per token).
    pub fn shape(name: &str, ty: GgmlType) -> Option<Self> {
        let (dim, n_layers, n_heads, n_kv_heads, ffn_dim) = match name {
            "135m" => (576, 30, 9, 3, 1536),
            "1b" => (2048, 22, 32, 4, 5632),
            "tiny" => return Some(Self::tiny(ty)),
            "moe" => {
                return Some(Fixture {
                    arch: Arch::Qwen3Moe,
                    n_layers: 12,
                    head_dim: 128,
                    ffn_dim: 6144,
                    moe: Some(Moe {
                        n_experts: 32,
                        top_k: 8,
                        expert_ffn_dim: 768,
                        norm_topk: true,
                        shared_ffn_dim: 0,
                    }),
                    ..Self::shape("1b", ty)?
                })
            }
            _ => return None,
        };
        Some(Fixture {
            dim,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim: dim / n_heads,
            ffn_dim,
            context_length: 2048,
            tied: false,
            output_scale: 0.05,
            layer_scale: 1.0,
            bigram: 0.0,
            ..Self::tiny(ty)
        })
    }

    /// The planted successor of each token: an affine permutation, or
    /// with `cycle`, a seeded shuffle of the vocabulary cut into cycles.
    fn successors(&self) -> impl Fn(usize) -> usize {
        let v = self.vocab_size;
        let table: Option<Vec<usize>> = self.cycle.map(|len| {
            let len = len.clamp(1, v);
            let mut order: Vec<usize> = (0..v).collect();
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0xc7c1e);
            for i in (1..v).rev() {
                let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                order.swap(i, j);
            }
            let mut succ = vec![0; v];
            for (i, &t) in order.iter().enumerate() {
                let start = i - i % len;
                let end = (start + len).min(v);
                let next = if i + 1 < end { i + 1 } else { start };
                succ[t] = order[next];
            }
            succ
        });
        move |t| match &table {
            Some(s) => s[t],
            None => (t * 7919 + 13) % v,
        }
    }

    /// The tiny shape as a Qwen3 model: Q/K norms, and heads of 128 wider
    /// than `dim / n_heads` (as Qwen3-0.6B's 16 × 128 over a width of 1024).
    pub fn tiny_qwen3(ty: GgmlType) -> Self {
        Fixture {
            arch: Arch::Qwen3,
            head_dim: 128,
            ..Self::tiny(ty)
        }
    }

    /// Weights in Hugging Face naming and layout: (name, row-major shape, values).
    pub fn hf_weights(&self) -> Vec<(String, Vec<usize>, Vec<f32>)> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let hd = self.head_dim;
        let (d, f, qd, kvd) = (
            self.dim,
            self.ffn_dim,
            self.n_heads * hd,
            self.n_kv_heads * hd,
        );
        let mut out = Vec::new();
        let mat = |out: &mut Vec<_>,
                   name: String,
                   rows: usize,
                   cols: usize,
                   std: f32,
                   rng: &mut ChaCha8Rng| {
            let v = (0..rows * cols).map(|_| gaussian(rng) * std).collect();
            out.push((name, vec![rows, cols], v));
        };
        let lm_head: Option<Vec<f32>> = (!self.tied).then(|| {
            let mut rng2 = ChaCha8Rng::seed_from_u64(self.seed ^ 0x5eed);
            (0..self.vocab_size * d)
                .map(|_| gaussian(&mut rng2) * self.output_scale)
                .collect()
        });
        let mut embed: Vec<f32> = (0..self.vocab_size * d)
            .map(|_| gaussian(&mut rng))
            .collect();
        if let (Some(w), true) = (&lm_head, self.bigram > 0.0) {
            // Token t leans toward the output row of succ(t), a fixed permutation:
            // a "bigram" model whose top logit usually stands clear of the rest.
            let succ_of = self.successors();
            for t in 0..self.vocab_size {
                let succ = succ_of(t);
                let row = &w[succ * d..(succ + 1) * d];
                let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                let k = self.bigram * (d as f32).sqrt() / norm;
                for (e, r) in embed[t * d..(t + 1) * d].iter_mut().zip(row) {
                    *e += k * r;
                }
            }
        }
        out.push((
            "model.embed_tokens.weight".into(),
            vec![self.vocab_size, d],
            embed,
        ));
        let w = 1.0 / (d as f32).sqrt();
        for i in 0..self.n_layers {
            let p = format!("model.layers.{i}");
            // Layer outputs are scaled down so the residual stream is led by the
            // (exactly dequantized) embedding: perturbations from activation
            // rounding, which differ between engines, then move logits little.
            let ls = self.layer_scale;
            mat(
                &mut out,
                format!("{p}.self_attn.q_proj.weight"),
                qd,
                d,
                w,
                &mut rng,
            );
            mat(
                &mut out,
                format!("{p}.self_attn.k_proj.weight"),
                kvd,
                d,
                w,
                &mut rng,
            );
            mat(
                &mut out,
                format!("{p}.self_attn.v_proj.weight"),
                kvd,
                d,
                w,
                &mut rng,
            );
            mat(
                &mut out,
                format!("{p}.self_attn.o_proj.weight"),
                d,
                qd,
                w * ls / (qd as f32 / d as f32).sqrt(),
                &mut rng,
            );
            let ffn_names: Vec<[String; 3]> = match self.moe {
                Some(m) => {
                    // Router logits of unit spread: several experts compete.
                    let router = crate::moe::hf_router(self.arch, i);
                    mat(&mut out, router, m.n_experts, d, 2.0 * w, &mut rng);
                    (0..m.n_experts)
                        .map(|e| {
                            ["gate", "up", "down"]
                                .map(|part| crate::moe::hf_expert(self.arch, i, e, part))
                        })
                        .collect()
                }
                None => {
                    vec![["gate", "up", "down"].map(|part| format!("{p}.mlp.{part}_proj.weight"))]
                }
            };
            let f = self.moe.map_or(f, |m| m.expert_ffn_dim);
            for [gate, up, down] in ffn_names {
                mat(&mut out, gate, f, d, w, &mut rng);
                mat(&mut out, up, f, d, w, &mut rng);
                mat(&mut out, down, d, f, ls / (f as f32).sqrt(), &mut rng);
            }
            if let Some(m) = self.moe.filter(|m| m.shared_ffn_dim > 0) {
                let (sf, sp) = (m.shared_ffn_dim, format!("{p}.mlp.shared_expert"));
                // Gate logits of unit spread: the sigmoid is not saturated.
                mat(
                    &mut out,
                    format!("{p}.mlp.shared_expert_gate.weight"),
                    1,
                    d,
                    w,
                    &mut rng,
                );
                mat(
                    &mut out,
                    format!("{sp}.gate_proj.weight"),
                    sf,
                    d,
                    w,
                    &mut rng,
                );
                mat(&mut out, format!("{sp}.up_proj.weight"), sf, d, w, &mut rng);
                let s = ls / (sf as f32).sqrt();
                mat(
                    &mut out,
                    format!("{sp}.down_proj.weight"),
                    d,
                    sf,
                    s,
                    &mut rng,
                );
            }
            if self.arch.family().qkv_bias {
                mat(
                    &mut out,
                    format!("{p}.self_attn.q_proj.bias"),
                    1,
                    qd,
                    0.1,
                    &mut rng,
                );
                mat(
                    &mut out,
                    format!("{p}.self_attn.k_proj.bias"),
                    1,
                    kvd,
                    0.1,
                    &mut rng,
                );
                mat(
                    &mut out,
                    format!("{p}.self_attn.v_proj.bias"),
                    1,
                    kvd,
                    0.1,
                    &mut rng,
                );
            }
            let fam = self.arch.family();
            // Gemma's checkpoints store `w - 1`.
            let offset = if fam.hf_norm_offset { 1.0 } else { 0.0 };
            let mut norm = |out: &mut Vec<_>, name: String, n: usize, mean: f32| {
                let v = (0..n)
                    .map(|_| mean * (1.0 + 0.1 * gaussian(&mut rng)) - offset)
                    .collect();
                out.push((name, vec![n], v));
            };
            let qk = match fam.qk_norm {
                QkNorm::None => None,
                QkNorm::PerHead => Some((hd, hd)),
                QkNorm::Full => Some((qd, kvd)),
            };
            if let Some((nq, nk)) = qk {
                norm(&mut out, format!("{p}.self_attn.q_norm.weight"), nq, 1.0);
                norm(&mut out, format!("{p}.self_attn.k_norm.weight"), nk, 1.0);
            }
            // Norms after a block set its output's scale: `layer_scale`.
            let norms: &[(&str, f32)] = match fam.norms {
                Norms::Pre => &[("input_layernorm", 1.0), ("post_attention_layernorm", 1.0)],
                Norms::Sandwich => &[
                    ("input_layernorm", 1.0),
                    ("post_attention_layernorm", ls),
                    ("pre_feedforward_layernorm", 1.0),
                    ("post_feedforward_layernorm", ls),
                ],
                Norms::Post => &[
                    ("post_attention_layernorm", ls),
                    ("post_feedforward_layernorm", ls),
                ],
            };
            for &(name, mean) in norms {
                norm(&mut out, format!("{p}.{name}.weight"), d, mean);
            }
        }
        let offset = if self.arch.family().hf_norm_offset {
            1.0
        } else {
            0.0
        };
        let v = (0..d)
            .map(|_| 1.0 + 0.1 * gaussian(&mut rng) - offset)
            .collect();
        out.push(("model.norm.weight".into(), vec![d], v));
        if let Some(v) = lm_head {
            out.push(("lm_head.weight".into(), vec![self.vocab_size, d], v));
        }
        // Biases are vectors, not [1, n] matrices.
        for (name, shape, _) in out.iter_mut() {
            if name.ends_with(".bias") {
                *shape = vec![shape[1]];
            }
        }
        if self.arch == Arch::Phi3 {
            out = fuse(
                out,
                "self_attn.qkv_proj.weight",
                &[
                    "self_attn.q_proj.weight",
                    "self_attn.k_proj.weight",
                    "self_attn.v_proj.weight",
                ],
            );
            out = fuse(
                out,
                "mlp.gate_up_proj.weight",
                &["mlp.gate_proj.weight", "mlp.up_proj.weight"],
            );
        }
        out
    }
}

/// Joins each layer's `parts` (row-major matrices of equal width) into one
/// matrix `fused`, their rows in order, at the first part's place (Phi-3's
/// `qkv_proj` and `gate_up_proj`).
fn fuse(
    weights: Vec<(String, Vec<usize>, Vec<f32>)>,
    fused: &str,
    parts: &[&str],
) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut out: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for (name, shape, data) in weights {
        let Some(prefix) = parts.iter().find_map(|p| name.strip_suffix(p)) else {
            out.push((name, shape, data));
            continue;
        };
        let target = format!("{prefix}{fused}");
        match out.iter_mut().find(|(n, _, _)| *n == target) {
            Some((_, s, d)) => {
                s[0] += shape[0];
                d.extend_from_slice(&data);
            }
            None => out.push((target, shape, data)),
        }
    }
    out
}

/// The project's test data (tokenizer vocabularies and vectors, chat
/// templates; see `testdata/README.md`): `HASTEN_TESTDATA` when set (CI
/// points it at `../shared/testdata` as a cross-check), else the copy
/// committed at the repository root, so tests pass on a bare clone.
/// Writes `fx` with the llama-spm test vocabulary into a temporary
/// directory and loads it. The file is removed once loaded: the model's
/// mapping keeps its pages (Unix), so tests leave nothing behind.
pub fn load_fixture(fx: &Fixture) -> crate::Result<crate::loader::LoadedModel> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("hasten-fixture-{}-{n}.gguf", std::process::id()));
    let written = fx.write_gguf(
        &testdata_dir().join("tokenizer/ggml-vocab-llama-spm.gguf"),
        &path,
    );
    let loaded = written.and_then(|()| crate::loader::load(&path));
    let _ = std::fs::remove_file(&path);
    loaded
}

pub fn testdata_dir() -> std::path::PathBuf {
    match std::env::var_os("HASTEN_TESTDATA").filter(|d| !d.is_empty()) {
        Some(d) => d.into(),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata"),
    }
}

/// A standard normal sample (Box-Muller).
fn gaussian(rng: &mut ChaCha8Rng) -> f32 {
    let u1: f32 = rng.gen_range(f32::EPSILON..1.0);
    let u2: f32 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}
