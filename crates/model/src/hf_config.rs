//! Resolving a Hugging Face `config.json` into a [`Config`]: the same
//! variation points as GGUF metadata, under `transformers`' names.

use crate::config::{every_nth_without_rope, Arch, Config, Moe, Scales, Swa};
use crate::{Error, Result};
use hasten_kernels::ops::{RopeStyle, Yarn};
use serde::Deserialize;

impl Config {
    /// Resolves a Hugging Face `config.json`.
    pub fn from_hf_json(json: &str, file: &str) -> Result<Self> {
        let bad = |what: String| Error::Config {
            file: file.to_owned(),
            what,
        };
        let v: serde_json::Value = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
        let c: HfConfig =
            serde_json::from_value(text_model_config(v)).map_err(|e| bad(e.to_string()))?;
        let arch_name = c
            .architectures
            .first()
            .cloned()
            .or(c.model_type.clone())
            .unwrap_or_default();
        let arch = Arch::from_hf(&arch_name).ok_or_else(|| Error::UnknownArchitecture {
            file: file.to_owned(),
            arch: arch_name.clone(),
        })?;
        let fam = arch.family();
        let n_kv_heads = c.num_key_value_heads.unwrap_or(c.num_attention_heads);
        let head_dim = c.head_dim.unwrap_or(
            c.hidden_size
                .checked_div(c.num_attention_heads)
                .unwrap_or(0),
        );
        let rope_dims = match c.partial_rotary_factor {
            Some(f) if f > 0.0 && f < 1.0 => (head_dim as f32 * f) as usize,
            _ => head_dim,
        };
        let rope_base = c.rope_theta.unwrap_or(10000.0);
        let context_length = c.max_position_embeddings.unwrap_or(2048);
        let mut attn_factor = 1.0f32;
        let (mut freq_scale, mut factors, mut yarn) = (1.0, None, None);
        if let Some(s) = &c.rope_scaling {
            match s.kind.as_deref().or(s.rope_type.as_deref()) {
                Some("linear") => freq_scale = 1.0 / s.factor.unwrap_or(1.0),
                Some("llama3") => factors = Some(llama3_freq_factors(head_dim, rope_base, s)),
                Some("longrope" | "su") => {
                    let orig = c
                        .original_max_position_embeddings
                        .or(s.original_max_position_embeddings.map(|v| v as usize))
                        .unwrap_or(context_length);
                    // As llama.cpp: the long factors once the context
                    // exceeds the original one, for every position.
                    let chosen = if context_length > orig {
                        &s.long_factor
                    } else {
                        &s.short_factor
                    };
                    factors = chosen.clone();
                    let scale = context_length as f32 / orig as f32;
                    attn_factor = s.attention_factor.unwrap_or(if scale > 1.0 {
                        (1.0 + scale.ln() / (orig as f32).ln()).sqrt()
                    } else {
                        1.0
                    });
                }
                Some("yarn") => {
                    let factor = s.factor.unwrap_or(1.0);
                    freq_scale = 1.0 / factor;
                    let orig = s
                        .original_max_position_embeddings
                        .map(|v| v as usize)
                        .or(c.original_max_position_embeddings)
                        .unwrap_or(context_length);
                    yarn = Some(Yarn {
                        orig_context: orig,
                        beta_fast: s.beta_fast.unwrap_or(32.0),
                        beta_slow: s.beta_slow.unwrap_or(1.0),
                    });
                    // Hugging Face's default: `get_mscale(factor, mscale) /
                    // get_mscale(factor, mscale_all_dim)` where both are
                    // given (DeepSeek), else `1 + 0.1 ln(factor)`.
                    let m = |k: f32| 1.0 + k * (Yarn::mscale(factor) - 1.0);
                    attn_factor =
                        s.attention_factor
                            .unwrap_or(match (s.mscale, s.mscale_all_dim) {
                                (Some(a), Some(b)) if a > 0.0 && b > 0.0 => m(a) / m(b),
                                _ => Yarn::mscale(factor),
                            });
                }
                Some("default") | None => {}
                Some(other) => {
                    return Err(Error::Config {
                        file: file.to_owned(),
                        what: format!("rope_scaling type {other:?} is not supported"),
                    })
                }
            }
        }
        let moe = match arch {
            Arch::Qwen3Moe | Arch::Qwen2Moe | Arch::Mixtral => {
                Some(hf_moe(&c, file, arch == Arch::Mixtral)?)
            }
            _ => None,
        };
        let mut scales = Scales {
            embedding: c.embedding_multiplier.unwrap_or(1.0),
            residual: c.residual_multiplier.unwrap_or(1.0),
            attention: c.attention_multiplier.filter(|&s| s != 0.0),
            logit: c.logits_scaling.unwrap_or(1.0),
            attn_softcap: c.attn_logit_softcapping.filter(|&s| s > 0.0),
            final_softcap: c.final_logit_softcapping.filter(|&s| s > 0.0),
        };
        if fam.embed_sqrt_dim {
            scales.embedding = (c.hidden_size as f32).sqrt();
        }
        if let Some(q) = c.query_pre_attn_scalar.filter(|&q| q > 0.0) {
            scales.attention = Some(1.0 / q.sqrt());
        }
        let swa = hf_swa(&c, arch, rope_base, freq_scale);
        Config {
            pooling_type: None,
            arch,
            vocab_size: c.vocab_size,
            dim: c.hidden_size,
            n_layers: c.num_hidden_layers,
            n_heads: c.num_attention_heads,
            n_kv_heads,
            head_dim,
            ffn_dim: c
                .intermediate_size
                .or(moe.map(|m| m.expert_ffn_dim))
                .unwrap_or(0),
            norm_eps: c.rms_norm_eps.unwrap_or(1e-6),
            context_length,
            rope_base,
            // Hugging Face checkpoints keep Q/K unpermuted: rotate halves.
            rope_style: RopeStyle::Neox,
            rope_dims,
            rope_freq_scale: freq_scale,
            rope_freq_factors: factors,
            rope_attn_factor: attn_factor,
            rope_orig_context: None,
            rope_yarn: yarn,
            qkv_bias: fam.qkv_bias || c.attention_bias.unwrap_or(false),
            qk_norm: fam.qk_norm,
            norms: fam.norms,
            act: fam.act,
            scales,
            // `no_rope_layers[i]` is 1 where layer i uses RoPE.
            no_rope: match (&c.no_rope_layers, arch) {
                (Some(v), _) => v.iter().map(|&r| r == 0).collect(),
                (None, Arch::SmolLM3) => every_nth_without_rope(
                    c.num_hidden_layers,
                    c.no_rope_layer_interval.unwrap_or(4),
                ),
                (None, _) => Vec::new(),
            },
            swa,
            moe,
        }
        .validate(file)
    }
}

/// The language model's part of a `config.json`. A multimodal checkpoint
/// (`Gemma3ForConditionalGeneration`) keeps it under `text_config`, which
/// names the text model by `model_type` (`gemma3_text`) and takes the
/// top-level `tie_word_embeddings` and token ids where it has none. Keys a
/// `gemma3_text` config leaves out get `transformers`' `Gemma3TextConfig`
/// defaults (a Gemma 3 4B `text_config` gives only six keys).
fn text_model_config(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(serde_json::Value::Object(mut text)) = v.get("text_config").cloned() {
        for key in ["tie_word_embeddings", "bos_token_id", "eos_token_id"] {
            if let Some(x) = v.get(key).filter(|_| !text.contains_key(key)) {
                text.insert(key.to_owned(), x.clone());
            }
        }
        // The text model is named by its model_type, not the wrapper class.
        text.remove("architectures");
        v = serde_json::Value::Object(text);
    }
    if v.get("model_type").and_then(|t| t.as_str()) == Some("gemma3_text") {
        let defaults = serde_json::json!({
            "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
            "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
            "head_dim": 256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
            "rope_theta": 1_000_000.0, "rope_local_base_freq": 10000.0,
            "query_pre_attn_scalar": 256, "sliding_window": 4096,
            "sliding_window_pattern": 6, "tie_word_embeddings": true,
        });
        if let (Some(obj), serde_json::Value::Object(d)) = (v.as_object_mut(), defaults) {
            for (k, x) in d {
                obj.entry(k).or_insert(x);
            }
        }
    }
    v
}

/// The sliding window of a `config.json`: Gemma's interleaved local
/// layers (`layer_types`, else `sliding_window_pattern`, else the family's
/// period), or Mistral's window over every layer. Qwen2's
/// `use_sliding_window: false` turns it off.
fn hf_swa(c: &HfConfig, arch: Arch, rope_base: f32, freq_scale: f32) -> Option<Swa> {
    let window = c.sliding_window.filter(|&w| w > 0)?;
    if c.use_sliding_window == Some(false) {
        return None;
    }
    let n = c.num_hidden_layers;
    let layers = match (&c.layer_types, arch.family().swa_period) {
        (Some(t), _) => t.iter().map(|t| t == "sliding_attention").collect(),
        (None, Some(p)) => Swa::pattern(n, c.sliding_window_pattern.unwrap_or(p)),
        (None, None) if arch == Arch::Llama => vec![true; n],
        (None, None) => return None,
    };
    Some(match arch {
        Arch::Gemma3 => Swa {
            window,
            layers,
            rope_base: c.rope_local_base_freq.unwrap_or(10000.0),
            rope_freq_scale: 1.0,
        },
        _ => Swa {
            window,
            layers,
            rope_base,
            rope_freq_scale: freq_scale,
        },
    })
}

/// The subset of a Hugging Face `config.json` that Llama-family models use.
#[derive(Debug, Deserialize)]
pub struct HfConfig {
    #[serde(default)]
    pub architectures: Vec<String>,
    pub model_type: Option<String>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: Option<usize>,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub rms_norm_eps: Option<f32>,
    pub rope_theta: Option<f32>,
    pub max_position_embeddings: Option<usize>,
    pub rope_scaling: Option<RopeScaling>,
    pub tie_word_embeddings: Option<bool>,
    pub attention_bias: Option<bool>,
    /// SmolLM3's NoPE layers: 1 where a layer uses RoPE, else its period.
    pub no_rope_layers: Option<Vec<u8>>,
    pub no_rope_layer_interval: Option<usize>,
    /// Granite's multipliers.
    pub embedding_multiplier: Option<f32>,
    pub residual_multiplier: Option<f32>,
    pub attention_multiplier: Option<f32>,
    pub logits_scaling: Option<f32>,
    /// Qwen2-MoE's shared expert.
    pub shared_expert_intermediate_size: Option<usize>,
    /// Qwen3-MoE's experts (Mixtral: `num_local_experts`).
    pub num_experts: Option<usize>,
    pub num_local_experts: Option<usize>,
    pub num_experts_per_tok: Option<usize>,
    pub moe_intermediate_size: Option<usize>,
    pub norm_topk_prob: Option<bool>,
    pub decoder_sparse_step: Option<usize>,
    #[serde(default)]
    pub mlp_only_layers: Vec<usize>,
    /// Gemma: `1 / sqrt(query_pre_attn_scalar)` scales the scores.
    pub query_pre_attn_scalar: Option<f32>,
    pub attn_logit_softcapping: Option<f32>,
    pub final_logit_softcapping: Option<f32>,
    /// Sliding windows: Gemma's local layers, Mistral's every layer.
    pub sliding_window: Option<usize>,
    pub use_sliding_window: Option<bool>,
    pub sliding_window_pattern: Option<usize>,
    pub layer_types: Option<Vec<String>>,
    pub rope_local_base_freq: Option<f32>,
    /// Phi-3: rotary dimensions as a fraction of the head, and LongRoPE's
    /// original context.
    pub partial_rotary_factor: Option<f32>,
    pub original_max_position_embeddings: Option<usize>,
    pub bos_token_id: Option<serde_json::Value>,
    pub eos_token_id: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
pub struct RopeScaling {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub rope_type: Option<String>,
    pub factor: Option<f32>,
    pub low_freq_factor: Option<f32>,
    pub high_freq_factor: Option<f32>,
    pub original_max_position_embeddings: Option<f32>,
    /// LongRoPE (Phi-3): per-pair divisors for short and long contexts.
    pub short_factor: Option<Vec<f32>>,
    pub long_factor: Option<Vec<f32>>,
    pub attention_factor: Option<f32>,
    /// YaRN's ramp (32 and 1 by default) and DeepSeek's attention scales.
    pub beta_fast: Option<f32>,
    pub beta_slow: Option<f32>,
    pub mscale: Option<f32>,
    pub mscale_all_dim: Option<f32>,
}

/// Llama 3's frequency factors, as `convert_hf_to_gguf.py` writes them into
/// `rope_freqs.weight`: the divisor of each pair's base frequency.
pub fn llama3_freq_factors(head_dim: usize, base: f32, s: &RopeScaling) -> Vec<f32> {
    let factor = s.factor.unwrap_or(8.0);
    let low = s.low_freq_factor.unwrap_or(1.0);
    let high = s.high_freq_factor.unwrap_or(4.0);
    let old_ctx = s.original_max_position_embeddings.unwrap_or(8192.0);
    let (low_wavelen, high_wavelen) = (old_ctx / low, old_ctx / high);
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / base.powf(2.0 * i as f32 / head_dim as f32);
            let wavelen = 2.0 * std::f32::consts::PI / freq;
            if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

/// The experts of a Qwen3-MoE or (`mixtral`) Mixtral `config.json`;
/// models that mix dense and MoE layers (`decoder_sparse_step` > 1,
/// `mlp_only_layers`) are refused. Mixtral's experts have the dense width
/// and always renormalize their weights.
fn hf_moe(c: &HfConfig, file: &str, mixtral: bool) -> Result<Moe> {
    let missing = |key: &str| Error::MissingKey {
        file: file.to_owned(),
        key: key.to_owned(),
    };
    if c.decoder_sparse_step.unwrap_or(1) != 1 || !c.mlp_only_layers.is_empty() {
        return Err(Error::Config {
            file: file.to_owned(),
            what: "models mixing dense and mixture-of-experts layers are not supported".into(),
        });
    }
    if mixtral {
        return Ok(Moe {
            n_experts: c
                .num_local_experts
                .ok_or_else(|| missing("num_local_experts"))?,
            top_k: c
                .num_experts_per_tok
                .ok_or_else(|| missing("num_experts_per_tok"))?,
            expert_ffn_dim: c
                .intermediate_size
                .ok_or_else(|| missing("intermediate_size"))?,
            norm_topk: true,
            shared_ffn_dim: 0,
        });
    }
    Ok(Moe {
        n_experts: c.num_experts.ok_or_else(|| missing("num_experts"))?,
        top_k: c
            .num_experts_per_tok
            .ok_or_else(|| missing("num_experts_per_tok"))?,
        expert_ffn_dim: c
            .moe_intermediate_size
            .ok_or_else(|| missing("moe_intermediate_size"))?,
        norm_topk: c.norm_topk_prob.unwrap_or(false),
        shared_ffn_dim: match c.shared_expert_intermediate_size {
            Some(w) => w,
            None if arch_has_shared(c) => return Err(missing("shared_expert_intermediate_size")),
            None => 0,
        },
    })
}

/// Whether the checkpoint's class has a shared expert (Qwen2-MoE).
fn arch_has_shared(c: &HfConfig) -> bool {
    let name = c.architectures.first().or(c.model_type.as_ref());
    name.and_then(|n| Arch::from_hf(n)) == Some(Arch::Qwen2Moe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::QkNorm;

    fn qwen3moe_json(extra: &str) -> String {
        format!(
            r#"{{"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 100,
            "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_experts": 8, "moe_intermediate_size": 32 {extra}}}"#
        )
    }

    #[test]
    fn mixtures_of_experts_are_checked() {
        let c = Config::from_hf_json(
            &qwen3moe_json(r#", "num_experts_per_tok": 2, "norm_topk_prob": true"#),
            "c",
        )
        .unwrap();
        let want = Moe {
            n_experts: 8,
            top_k: 2,
            expert_ffn_dim: 32,
            norm_topk: true,
            shared_ffn_dim: 0,
        };
        assert_eq!(c.moe, Some(want));
        assert_eq!(c.qk_norm, QkNorm::PerHead);
        // The dense width defaults to the experts' where the file has none.
        assert_eq!(c.ffn_dim, 32);
        let err = |extra: &str| {
            Config::from_hf_json(&qwen3moe_json(extra), "c")
                .unwrap_err()
                .to_string()
        };
        assert!(err("").contains("num_experts_per_tok"), "{}", err(""));
        assert!(err(r#", "num_experts_per_tok": 9"#).contains("9 of 8 experts"));
        let mixed = err(r#", "num_experts_per_tok": 2, "mlp_only_layers": [1]"#);
        assert!(mixed.contains("mixing dense"), "{mixed}");
        // Mixtral: experts of the dense width, always renormalized.
        let c = Config::from_hf_json(
            r#"{"architectures": ["MixtralForCausalLM"], "vocab_size": 100,
            "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_local_experts": 8, "num_experts_per_tok": 2}"#,
            "c",
        )
        .unwrap();
        assert_eq!(c.arch, Arch::Mixtral);
        let want = Moe {
            expert_ffn_dim: 96,
            ..want
        };
        assert_eq!(c.moe, Some(want));
        assert_eq!(c.qk_norm, QkNorm::None);
    }

    /// Gemma 3 4B's `config.json` (multimodal): six text keys, the rest
    /// from `Gemma3TextConfig`'s defaults.
    #[test]
    fn a_gemma3_multimodal_config_resolves_its_text_model() {
        let json = r#"{"architectures": ["Gemma3ForConditionalGeneration"],
            "model_type": "gemma3", "boi_token_index": 255999,
            "eos_token_id": [1, 106], "image_token_index": 262144,
            "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                "model_type": "gemma3_text", "num_hidden_layers": 34,
                "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                "sliding_window": 1024},
            "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}}"#;
        let c = Config::from_hf_json(json, "config.json").unwrap();
        assert_eq!(c.arch, Arch::Gemma3);
        assert_eq!((c.dim, c.ffn_dim, c.n_layers), (2560, 10240, 34));
        assert_eq!((c.n_heads, c.n_kv_heads, c.head_dim), (8, 4, 256));
        assert_eq!((c.vocab_size, c.context_length), (262208, 131072));
        assert_eq!((c.rope_base, c.rope_freq_scale), (1e6, 0.125));
        assert_eq!(c.scales.attention, Some(1.0 / 16.0));
        let swa = c.swa.unwrap();
        assert_eq!(
            (swa.window, swa.rope_base, swa.rope_freq_scale),
            (1024, 1e4, 1.0)
        );
        // Five local layers, then a global one.
        assert_eq!(&swa.layers[..6], &[true, true, true, true, true, false]);
        // A wrapper whose text model is unknown names that model.
        let err = Config::from_hf_json(
            r#"{"architectures": ["FooForConditionalGeneration"],
                "text_config": {"model_type": "foo_text", "vocab_size": 10,
                "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1}}"#,
            "config.json",
        )
        .unwrap_err();
        assert!(err.to_string().contains("foo_text"), "{err}");
    }
}
