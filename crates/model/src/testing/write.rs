//! Writing a [`Fixture`] to disk: GGUF as llama.cpp's converter would
//! (its names, Q/K rows permuted for `llama`, Gemma's norms with the one
//! added, quantized to the chosen type), or safetensors + `config.json`.

use super::{Fixture, RopeScalingFx};
use crate::config::{Arch, Norms};
use crate::gguf::{GgufFile, GgufWriter, Value};
use crate::{Error, Result};
use hasten_kernels::ops::RopeStyle;
use hasten_kernels::quant::quantize_row;
use hasten_kernels::threads::{par_chunks, Threads};
use hasten_kernels::GgmlType;
use std::path::Path;

impl Fixture {
    fn config_keys(&self, w: &mut GgufWriter) {
        let a = self.arch.gguf_name();
        let u = |v: usize| Value::U32(v as u32);
        w.kv("general.architecture", Value::String(a.into()))
            .kv(
                "general.name",
                // llama.cpp gives special tokens Phi-3's attributes when
                // the name says "phi3", and then needs Phi-3's vocabulary.
                Value::String(format!(
                    "hasten synthetic {} {}",
                    a.replace("phi3", "Phi 3"),
                    self.ty
                )),
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
            .kv(&format!("{a}.rope.freq_base"), Value::F32(self.rope_base))
            .kv(&format!("{a}.rope.dimension_count"), u(self.rot_dims()))
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
            if m.shared_ffn_dim > 0 {
                w.kv(
                    &format!("{a}.expert_shared_feed_forward_length"),
                    u(m.shared_ffn_dim),
                );
            }
        }
        if let Some(win) = self.sliding_window {
            w.kv(&format!("{a}.attention.sliding_window"), u(win));
        }
        if let Some(orig) = self.longrope_orig {
            w.kv(
                &format!("{a}.rope.scaling.attn_factor"),
                Value::F32(self.longrope_attn_factor()),
            )
            .kv(
                &format!("{a}.rope.scaling.original_context_length"),
                u(orig),
            );
        }
        if let (Some(RopeScalingFx::Yarn { factor }), Some(orig)) =
            (self.rope_scaling, self.rope_orig_context())
        {
            w.kv(
                &format!("{a}.rope.scaling.type"),
                Value::String("yarn".into()),
            )
            .kv(&format!("{a}.rope.scaling.factor"), Value::F32(factor))
            .kv(
                &format!("{a}.rope.scaling.original_context_length"),
                u(orig),
            );
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
        let fam = self.arch.family();
        // llama.cpp permutes Q/K rows for its interleaved RoPE (`llama` only).
        let permute = fam.gguf_rope == RopeStyle::Normal;
        if let Some([short, long]) = self.longrope_factors() {
            let n = short.len();
            w.tensor(
                "rope_factors_short.weight",
                &[n],
                GgmlType::F32,
                encode(GgmlType::F32, &short, n)?,
            );
            w.tensor(
                "rope_factors_long.weight",
                &[n],
                GgmlType::F32,
                encode(GgmlType::F32, &long, n)?,
            );
        }
        if let Some(RopeScalingFx::Llama3 { .. }) = self.rope_scaling {
            // As convert_hf_to_gguf.py: Llama 3's factors as a tensor.
            let hf: crate::hf_config::RopeScaling = serde_json::from_value(
                self.hf_rope_scaling().unwrap_or_default(),
            )
            .map_err(|e| Error::Malformed {
                file: "fixture rope_scaling".into(),
                what: e.to_string(),
            })?;
            let f = crate::hf_config::llama3_freq_factors(self.rot_dims(), self.rope_base, &hf);
            let n = f.len();
            w.tensor(
                "rope_freqs.weight",
                &[n],
                GgmlType::F32,
                encode(GgmlType::F32, &f, n)?,
            );
        }
        for (name, shape, data) in stack_experts(self.hf_weights()) {
            let gname = gguf_name(self.arch, &name);
            // The shared expert's gate is a vector in llama.cpp's files.
            let shape = if gname.ends_with("ffn_gate_inp_shexp.weight") {
                vec![shape.iter().product()]
            } else {
                shape
            };
            // The converter adds Gemma's one to its norms.
            let data = if fam.hf_norm_offset && name.ends_with("norm.weight") {
                data.iter().map(|v| v + 1.0).collect()
            } else {
                data
            };
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
        let config = serde_json::json!({
            "architectures": [self.arch.hf_class()], "vocab_size": self.vocab_size,
            "hidden_size": self.dim,
            "intermediate_size": self.ffn_dim, "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads, "num_key_value_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": 1e-5, "rope_theta": self.rope_base,
            "max_position_embeddings": self.context_length,
            "tie_word_embeddings": self.tied, "bos_token_id": 1, "eos_token_id": 2,
        });
        let mut config = config;
        if let Some(win) = self.sliding_window {
            config["sliding_window"] = win.into();
        }
        match self.arch {
            Arch::Gemma2 => {
                config["attn_logit_softcapping"] = 50.0.into();
                config["final_logit_softcapping"] = 30.0.into();
                config["query_pre_attn_scalar"] = self.head_dim.into();
            }
            Arch::Gemma3 => {
                config["query_pre_attn_scalar"] = self.head_dim.into();
                config["rope_local_base_freq"] = 10000.0.into();
            }
            _ => {}
        }
        if let Some(orig) = self.longrope_orig {
            let [short, long] = self.longrope_factors().unwrap_or_default();
            config["partial_rotary_factor"] =
                (self.rot_dims() as f32 / self.head_dim as f32).into();
            config["original_max_position_embeddings"] = orig.into();
            config["rope_scaling"] = serde_json::json!({
                "type": "longrope", "short_factor": short, "long_factor": long,
            });
        }
        if let Some(rs) = self.hf_rope_scaling() {
            config["rope_scaling"] = rs;
        }
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
                if m.shared_ffn_dim > 0 {
                    config["shared_expert_intermediate_size"] = m.shared_ffn_dim.into();
                }
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

/// Hugging Face tensor name to llama.cpp's, for a model of `arch` (whose
/// norm placement decides what `post_attention_layernorm` is).
pub fn gguf_name(arch: Arch, hf: &str) -> String {
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
        "post_attention_layernorm.weight" if arch.family().norms != Norms::Pre => {
            "post_attention_norm.weight"
        }
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "pre_feedforward_layernorm.weight" => "ffn_norm.weight",
        "post_feedforward_layernorm.weight" => "post_ffw_norm.weight",
        "self_attn.qkv_proj.weight" => "attn_qkv.weight",
        "mlp.gate_up_proj.weight" => "ffn_up.weight",
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
        "mlp.shared_expert_gate.weight" => "ffn_gate_inp_shexp.weight",
        "mlp.shared_expert.gate_proj.weight" => "ffn_gate_shexp.weight",
        "mlp.shared_expert.up_proj.weight" => "ffn_up_shexp.weight",
        "mlp.shared_expert.down_proj.weight" => "ffn_down_shexp.weight",
        other => other,
    };
    format!("blk.{i}.{part}")
}
