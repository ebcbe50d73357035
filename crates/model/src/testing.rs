//! Seeded synthetic models for tests, goldens and benchmarks.
//!
//! A [`Fixture`] describes a model shape of one of the supported families
//! (mixtures of experts included); its weights are drawn
//! from a ChaCha RNG in Hugging Face layout, then written either as GGUF
//! (llama.cpp names, Q/K rows permuted for `llama` as llama.cpp's converter
//! does, quantized to the chosen type) or as safetensors + `config.json`.
//! The same seed gives the same model in both formats, bit for bit.

use crate::config::{Arch, Moe, Scales};
use crate::gguf::{GgufFile, GgufWriter, Value};
use crate::{Error, Result};
use hasten_kernels::quant::quantize_row;
use hasten_kernels::threads::{par_chunks, Threads};
use hasten_kernels::GgmlType;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

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
    /// Granite's multipliers, written for `Arch::Granite` only.
    pub scales: Scales,
    /// The experts of `Arch::Qwen3Moe` (every layer's FFN).
    pub moe: Option<Moe>,
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
            scales: Scales::default(),
            moe: None,
        }
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
            }),
            ..Self::tiny_qwen3(ty)
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
            for t in 0..self.vocab_size {
                let succ = (t * 7919 + 13) % self.vocab_size;
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
            if self.arch == Arch::Qwen2 {
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
            if matches!(self.arch, Arch::Qwen3 | Arch::Qwen3Moe) {
                for norm in ["q_norm", "k_norm"] {
                    let v: Vec<f32> = (0..hd).map(|_| 1.0 + 0.1 * gaussian(&mut rng)).collect();
                    out.push((format!("{p}.self_attn.{norm}.weight"), vec![hd], v));
                }
            }
            for norm in ["input_layernorm", "post_attention_layernorm"] {
                let v: Vec<f32> = (0..d).map(|_| 1.0 + 0.1 * gaussian(&mut rng)).collect();
                out.push((format!("{p}.{norm}.weight"), vec![d], v));
            }
        }
        let v = (0..d).map(|_| 1.0 + 0.1 * gaussian(&mut rng)).collect();
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
        out
    }

    fn config_keys(&self, w: &mut GgufWriter) {
        let a = self.arch.gguf_name();
        let u = |v: usize| Value::U32(v as u32);
        w.kv("general.architecture", Value::String(a.into()))
            .kv(
                "general.name",
                Value::String(format!("hasten synthetic {a} {}", self.ty)),
            )
            .kv(&format!("{a}.context_length"), u(self.context_length))
            .kv(&format!("{a}.embedding_length"), u(self.dim))
            .kv(&format!("{a}.block_count"), u(self.n_layers))
            .kv(&format!("{a}.feed_forward_length"), u(self.ffn_dim))
            .kv(&format!("{a}.attention.head_count"), u(self.n_heads))
            .kv(&format!("{a}.attention.head_count_kv"), u(self.n_kv_heads))
            .kv(
                &format!("{a}.attention.layer_norm_rms_epsilon"),
                Value::F32(1e-5),
            )
            .kv(&format!("{a}.rope.freq_base"), Value::F32(10000.0))
            .kv(&format!("{a}.rope.dimension_count"), u(self.head_dim))
            .kv(&format!("{a}.vocab_size"), u(self.vocab_size));
        if self.arch == Arch::Granite {
            let sc = self.scales;
            w.kv(&format!("{a}.embedding_scale"), Value::F32(sc.embedding))
                .kv(&format!("{a}.residual_scale"), Value::F32(sc.residual))
                .kv(
                    &format!("{a}.attention.scale"),
                    Value::F32(sc.attention.unwrap_or(0.0)),
                )
                .kv(&format!("{a}.logit_scale"), Value::F32(sc.logit));
        }
        if let Some(m) = self.moe {
            w.kv(&format!("{a}.expert_count"), u(m.n_experts))
                .kv(&format!("{a}.expert_used_count"), u(m.top_k));
            // Mixtral files leave the experts' width to feed_forward_length.
            if self.arch != Arch::Mixtral {
                w.kv(
                    &format!("{a}.expert_feed_forward_length"),
                    u(m.expert_ffn_dim),
                );
            }
        }
        if self.head_dim * self.n_heads != self.dim {
            w.kv(&format!("{a}.attention.key_length"), u(self.head_dim))
                .kv(&format!("{a}.attention.value_length"), u(self.head_dim));
        }
    }

    /// Writes the model as GGUF, with the `tokenizer.*` metadata of `vocab`
    /// (a vocab-only GGUF such as testdata's `ggml-vocab-llama-spm.gguf`).
    pub fn write_gguf(&self, vocab: &Path, out: &Path) -> Result<()> {
        self.write_gguf_with(&GgufFile::open(vocab)?, out)
    }

    /// [`Fixture::write_gguf`] with a vocabulary already parsed (e.g. one
    /// built into a binary, [`GgufFile::from_bytes`]).
    pub fn write_gguf_with(&self, v: &GgufFile, out: &Path) -> Result<()> {
        let mut w = GgufWriter::new();
        self.config_keys(&mut w);
        for (k, val) in &v.header.metadata {
            if k.starts_with("tokenizer.") {
                w.kv(k, val.clone());
            }
        }
        let hd = self.head_dim;
        // llama.cpp permutes Q/K rows for its interleaved RoPE (`llama` only).
        let permute = matches!(
            self.arch,
            Arch::Llama | Arch::Granite | Arch::SmolLM3 | Arch::Mixtral
        );
        for (name, shape, data) in stack_experts(self.hf_weights()) {
            let gname = gguf_name(&name);
            let data = match name.rsplit('.').nth(1) {
                Some("q_proj") if permute && name.ends_with("weight") => {
                    permute_rows(&data, shape[0] / hd, hd, shape[1])
                }
                Some("k_proj") if permute && name.ends_with("weight") => {
                    permute_rows(&data, shape[0] / hd, hd, shape[1])
                }
                _ => data,
            };
            let dims: Vec<usize> = shape.iter().rev().copied().collect();
            // Norms, biases and routers stay f32, as llama.cpp's quantizer leaves them.
            let ty = if shape.len() == 1 || gname.ends_with("ffn_gate_inp.weight") {
                GgmlType::F32
            } else {
                self.ty
            };
            w.tensor(&gname, &dims, ty, encode(ty, &data, dims[0])?);
        }
        let file = std::fs::File::create(out).map_err(|err| Error::Io {
            path: out.to_owned(),
            err,
        })?;
        w.write_to(&mut std::io::BufWriter::new(file))
            .map_err(|err| Error::Io {
                path: out.to_owned(),
                err,
            })
    }

    /// Writes `config.json` and `model.safetensors` (f32) into `dir`.
    pub fn write_safetensors(&self, dir: &Path) -> Result<()> {
        let io = |err| Error::Io {
            path: dir.to_owned(),
            err,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let arch = match self.arch {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
            Arch::Granite => "GraniteForCausalLM",
            Arch::SmolLM3 => "SmolLM3ForCausalLM",
            Arch::Qwen3Moe => "Qwen3MoeForCausalLM",
            Arch::Mixtral => "MixtralForCausalLM",
        };
        let config = serde_json::json!({
            "architectures": [arch], "vocab_size": self.vocab_size, "hidden_size": self.dim,
            "intermediate_size": self.ffn_dim, "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads, "num_key_value_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": self.context_length,
            "tie_word_embeddings": self.tied, "bos_token_id": 1, "eos_token_id": 2,
        });
        let mut config = config;
        if self.arch == Arch::SmolLM3 {
            let uses: Vec<u8> = (0..self.n_layers)
                .map(|i| u8::from((i + 1) % 4 != 0))
                .collect();
            config["no_rope_layers"] = uses.into();
        }
        match (self.moe, self.arch) {
            (Some(m), Arch::Mixtral) => {
                config["num_local_experts"] = m.n_experts.into();
                config["num_experts_per_tok"] = m.top_k.into();
                config["intermediate_size"] = m.expert_ffn_dim.into();
            }
            (Some(m), _) => {
                config["num_experts"] = m.n_experts.into();
                config["num_experts_per_tok"] = m.top_k.into();
                config["moe_intermediate_size"] = m.expert_ffn_dim.into();
                config["norm_topk_prob"] = m.norm_topk.into();
            }
            (None, _) => {}
        }
        if self.arch == Arch::Granite {
            let sc = self.scales;
            config["embedding_multiplier"] = sc.embedding.into();
            config["residual_multiplier"] = sc.residual.into();
            config["attention_multiplier"] = sc.attention.unwrap_or(0.0).into();
            config["logits_scaling"] = sc.logit.into();
        }
        std::fs::write(dir.join("config.json"), config.to_string()).map_err(io)?;
        let weights = self.hf_weights();
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = weights
            .into_iter()
            .map(|(n, s, v)| (n, s, v.iter().flat_map(|x| x.to_le_bytes()).collect()))
            .collect();
        let views = bytes
            .iter()
            .map(|(n, s, b)| {
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                    .map(|v| (n.clone(), v))
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::Malformed {
                file: dir.display().to_string(),
                what: e.to_string(),
            })?;
        safetensors::tensor::serialize_to_file(views, &None, &dir.join("model.safetensors"))
            .map_err(|e| Error::Malformed {
                file: dir.display().to_string(),
                what: e.to_string(),
            })
    }
}

/// The Hugging Face weights with each layer's per-expert matrices joined
/// into llama.cpp's stacked 3-D tensors (`[n_experts, rows, cols]`, named
/// `model.layers.i.mlp.experts.gate_proj.weight` and the like, which
/// [`gguf_name`] maps to `blk.i.ffn_*_exps.weight`); other tensors pass.
fn stack_experts(
    weights: Vec<(String, Vec<usize>, Vec<f32>)>,
) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut out: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for (name, shape, data) in weights {
        let Some((prefix, rest)) = name.split_once(".experts.") else {
            out.push((name, shape, data));
            continue;
        };
        let (e, part) = rest.split_once('.').unwrap_or(("0", rest));
        let stacked = format!("{prefix}.experts.{part}");
        match out.iter_mut().find(|(n, _, _)| *n == stacked) {
            Some((_, s, d)) if e != "0" => {
                s[0] += 1;
                d.extend_from_slice(&data);
            }
            _ => out.push((stacked, [vec![1], shape].concat(), data)),
        }
    }
    out
}

/// Encodes rows of `row_len` values as `ty`, in parallel.
fn encode(ty: GgmlType, data: &[f32], row_len: usize) -> Result<Vec<u8>> {
    let rb = ty.row_bytes(row_len)?;
    let rows = data.len() / row_len;
    let mut out = vec![0u8; rb * rows];
    par_chunks(&mut out, rb, Threads::available(), |r0, piece| {
        for (i, dst) in piece.chunks_exact_mut(rb).enumerate() {
            let r = r0 + i;
            // Lengths are consistent by construction.
            let _ = quantize_row(ty, &data[r * row_len..(r + 1) * row_len], dst);
        }
    });
    Ok(out)
}

/// llama.cpp's reordering of Q/K rows for its interleaved RoPE: within each
/// head, row `c * hd/2 + i` (half c, pair i) moves to row `2i + c`.
fn permute_rows(w: &[f32], n_heads: usize, hd: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; w.len()];
    for h in 0..n_heads {
        for c in 0..2 {
            for i in 0..hd / 2 {
                let src = h * hd + c * (hd / 2) + i;
                let dst = h * hd + 2 * i + c;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&w[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// The project's test data (tokenizer vocabularies and vectors, chat
/// templates; see `testdata/README.md`): `HASTEN_TESTDATA` when set (CI
/// points it at `../shared/testdata` as a cross-check), else the copy
/// committed at the repository root, so tests pass on a bare clone.
pub fn testdata_dir() -> std::path::PathBuf {
    match std::env::var_os("HASTEN_TESTDATA").filter(|d| !d.is_empty()) {
        Some(d) => d.into(),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata"),
    }
}

/// Hugging Face tensor name to llama.cpp's.
pub fn gguf_name(hf: &str) -> String {
    let map = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = map.iter().find(|(h, _)| *h == hf) {
        return (*g).to_owned();
    }
    let rest = hf.strip_prefix("model.layers.").unwrap_or(hf);
    let (i, part) = rest.split_once('.').unwrap_or(("0", rest));
    let part = match part {
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.q_proj.bias" => "attn_q.bias",
        "self_attn.k_proj.bias" => "attn_k.bias",
        "self_attn.v_proj.bias" => "attn_v.bias",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "self_attn.q_norm.weight" => "attn_q_norm.weight",
        "self_attn.k_norm.weight" => "attn_k_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        "mlp.gate.weight" => "ffn_gate_inp.weight",
        "mlp.experts.gate_proj.weight" => "ffn_gate_exps.weight",
        "mlp.experts.up_proj.weight" => "ffn_up_exps.weight",
        "mlp.experts.down_proj.weight" => "ffn_down_exps.weight",
        "block_sparse_moe.gate.weight" => "ffn_gate_inp.weight",
        "block_sparse_moe.experts.w1.weight" => "ffn_gate_exps.weight",
        "block_sparse_moe.experts.w3.weight" => "ffn_up_exps.weight",
        "block_sparse_moe.experts.w2.weight" => "ffn_down_exps.weight",
        other => other,
    };
    format!("blk.{i}.{part}")
}

/// A standard normal sample (Box-Muller).
fn gaussian(rng: &mut ChaCha8Rng) -> f32 {
    let u1: f32 = rng.gen_range(f32::EPSILON..1.0);
    let u2: f32 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}
