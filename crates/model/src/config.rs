//! The resolved model configuration, read from GGUF metadata or a Hugging
//! Face `config.json`, with every default filled in and every value checked.

use crate::gguf::GgufHeader;
use crate::{Error, Result};
use hasten_kernels::ops::RopeStyle;
use serde::Deserialize;

/// Model families hasten runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2/3, Mistral, TinyLlama, SmolLM.
    Llama,
    /// Qwen2 / Qwen2.5: Llama with biases on Q, K and V.
    Qwen2,
    /// Qwen3 (dense): no biases, an RMSNorm over each head of Q and K
    /// before RoPE, heads often wider than `dim / n_heads`.
    Qwen3,
    /// IBM Granite 3: Llama with embedding, residual, attention and logit
    /// multipliers ([`Scales`]).
    Granite,
    /// Hugging Face SmolLM3: Llama with no RoPE on every 4th layer (NoPE).
    SmolLM3,
    /// Qwen3 mixture of experts (Qwen3-30B-A3B): Qwen3 attention, every
    /// FFN a softmax-routed set of experts ([`Moe`]).
    Qwen3Moe,
    /// Mixtral: Llama attention, every FFN a mixture of experts (GGUF
    /// writes it as `llama` with an expert count).
    Mixtral,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Granite => "granite",
            Arch::SmolLM3 => "smollm3",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Mixtral => "mixtral",
        }
    }

    /// The `general.architecture` of this family's GGUF files (and the
    /// prefix of their keys).
    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::Mixtral => "llama",
            a => a.name(),
        }
    }
}

/// Resolved hyperparameters of a Llama-family model.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub vocab_size: usize,
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub norm_eps: f32,
    pub context_length: usize,
    pub rope_base: f32,
    pub rope_style: RopeStyle,
    /// 1 / linear scaling factor.
    pub rope_freq_scale: f32,
    /// Llama 3 frequency factors (one per rotated pair), if any.
    pub rope_freq_factors: Option<Vec<f32>>,
    pub qkv_bias: bool,
    /// RMSNorm over each head of Q and K (weights of `head_dim`) before RoPE.
    pub qk_norm: bool,
    /// Granite's multipliers (all neutral for other families).
    pub scales: Scales,
    /// Layers whose Q and K are not rotated (SmolLM3's NoPE layers); empty
    /// when every layer uses RoPE.
    pub no_rope: Vec<bool>,
    /// Mixture-of-experts FFNs (every layer), if the model has them.
    pub moe: Option<Moe>,
}

/// A mixture-of-experts FFN: a router picks `top_k` of `n_experts` SwiGLU
/// experts per token by softmax probability; their outputs are summed,
/// weighted by those probabilities (renormalized to sum 1 if `norm_topk`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moe {
    pub n_experts: usize,
    pub top_k: usize,
    /// Hidden width of each expert.
    pub expert_ffn_dim: usize,
    pub norm_topk: bool,
}

/// Constant factors some families apply around the standard blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scales {
    /// Multiplies the token embeddings.
    pub embedding: f32,
    /// Multiplies each block's output before it is added to the residual.
    pub residual: f32,
    /// The attention softmax scale (default `1 / sqrt(head_dim)`).
    pub attention: Option<f32>,
    /// Divides the logits.
    pub logit: f32,
}

impl Default for Scales {
    fn default() -> Self {
        Scales {
            embedding: 1.0,
            residual: 1.0,
            attention: None,
            logit: 1.0,
        }
    }
}

impl Config {
    /// Bytes of f16 K and V per token across all layers.
    pub fn kv_bytes_per_token(&self) -> usize {
        2 * self.n_layers * self.kv_dim() * 2
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    fn validate(self, file: &str) -> Result<Self> {
        let bad = |what: String| {
            Err(Error::Config {
                file: file.to_owned(),
                what,
            })
        };
        // Named as GGUF (after the architecture prefix) and config.json call them.
        for (v, name) in [
            (self.dim, "embedding_length (hidden_size)"),
            (self.n_layers, "block_count (num_hidden_layers)"),
            (self.n_heads, "attention.head_count (num_attention_heads)"),
            (
                self.n_kv_heads,
                "attention.head_count_kv (num_key_value_heads)",
            ),
            (self.ffn_dim, "feed_forward_length (intermediate_size)"),
            (self.vocab_size, "vocab_size"),
            (
                self.context_length,
                "context_length (max_position_embeddings)",
            ),
        ] {
            if v == 0 {
                return bad(format!("{name} must be > 0, got 0"));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "{} heads is not a multiple of {} KV heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "head dimension {} must be even and positive",
                self.head_dim
            ));
        }
        if self.dim > 1 << 20 || self.n_layers > 4096 || self.context_length > 1 << 24 {
            return bad("dimensions are implausibly large".into());
        }
        if !(self.norm_eps > 0.0 && self.rope_base > 0.0 && self.rope_freq_scale > 0.0) {
            return bad("eps, rope base and rope scale must be positive".into());
        }
        if !self.no_rope.is_empty() && self.no_rope.len() != self.n_layers {
            return bad(format!(
                "no_rope_layers lists {} layers, the model has {}",
                self.no_rope.len(),
                self.n_layers
            ));
        }
        if let Some(m) = self.moe {
            if m.n_experts == 0 || m.top_k == 0 || m.top_k > m.n_experts || m.expert_ffn_dim == 0 {
                return bad(format!(
                    "{} of {} experts (width {}) is not a valid mixture",
                    m.top_k, m.n_experts, m.expert_ffn_dim
                ));
            }
            if m.n_experts > 1024 {
                return bad(format!("{} experts is implausibly many", m.n_experts));
            }
        }
        let sc = self.scales;
        if ![
            sc.embedding,
            sc.residual,
            sc.logit,
            sc.attention.unwrap_or(1.0),
        ]
        .iter()
        .all(|v| v.is_finite() && *v > 0.0)
        {
            return bad(format!(
                "embedding, residual, attention and logit scales must be positive, got {sc:?}"
            ));
        }
        Ok(self)
    }

    /// Reads `{arch}.*` keys of a GGUF header. `vocab_fallback` is the token
    /// count of the file's vocabulary, used when `{arch}.vocab_size` is absent.
    pub fn from_gguf(h: &GgufHeader, file: &str, vocab_fallback: usize) -> Result<Self> {
        let arch_name = str_key(h, file, "general.architecture")?;
        let arch = match arch_name {
            "llama" | "mistral" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "granite" => Arch::Granite,
            "smollm3" => Arch::SmolLM3,
            "qwen3moe" => Arch::Qwen3Moe,
            other => {
                return Err(Error::UnknownArchitecture {
                    file: file.to_owned(),
                    arch: other.to_owned(),
                })
            }
        };
        let k = |s: &str| format!("{arch_name}.{s}");
        let dim = usize_key(h, file, &k("embedding_length"))?;
        let n_heads = usize_key(h, file, &k("attention.head_count"))?;
        let n_kv_heads = opt_usize(h, file, &k("attention.head_count_kv"))?.unwrap_or(n_heads);
        let head_dim = opt_usize(h, file, &k("attention.key_length"))?
            .unwrap_or(dim.checked_div(n_heads).unwrap_or(0));
        let rope_dims = opt_usize(h, file, &k("rope.dimension_count"))?.unwrap_or(head_dim);
        if rope_dims != head_dim && n_heads > 0 && head_dim > 0 {
            return Err(Error::Config {
                file: file.to_owned(),
                what: format!("partial RoPE ({rope_dims} of {head_dim} dims) is not supported"),
            });
        }
        let n_layers = usize_key(h, file, &k("block_count"))?;
        // Mixtral is `llama` with experts (of the dense FFN width, unless
        // the file says otherwise).
        let arch = match opt_usize(h, file, &k("expert_count"))? {
            Some(n) if n > 0 && arch == Arch::Llama => Arch::Mixtral,
            _ => arch,
        };
        let moe = match arch {
            Arch::Qwen3Moe | Arch::Mixtral => Some(Moe {
                n_experts: usize_key(h, file, &k("expert_count"))?,
                top_k: usize_key(h, file, &k("expert_used_count"))?,
                expert_ffn_dim: match opt_usize(h, file, &k("expert_feed_forward_length"))? {
                    Some(w) => w,
                    None => usize_key(h, file, &k("feed_forward_length"))?,
                },
                // llama.cpp renormalizes both families' top-k weights (no key says so).
                norm_topk: true,
            }),
            _ => None,
        };
        // MoE files may leave the (unused) dense width out.
        let ffn_dim = match moe {
            Some(m) => opt_usize(h, file, &k("feed_forward_length"))?.unwrap_or(m.expert_ffn_dim),
            None => usize_key(h, file, &k("feed_forward_length"))?,
        };
        let scaling = h
            .get(&k("rope.scaling.type"))
            .and_then(|v| v.as_str())
            .unwrap_or("none");
        let rope_freq_scale = match scaling {
            "linear" => 1.0 / opt_f32(h, file, &k("rope.scaling.factor"))?.unwrap_or(1.0),
            // llama3 scaling is carried by the `rope_freqs.weight` tensor.
            _ => 1.0,
        };
        Config {
            arch,
            vocab_size: opt_usize(h, file, &k("vocab_size"))?.unwrap_or(vocab_fallback),
            dim,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim,
            norm_eps: opt_f32(h, file, &k("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-5),
            context_length: opt_usize(h, file, &k("context_length"))?.unwrap_or(2048),
            rope_base: opt_f32(h, file, &k("rope.freq_base"))?.unwrap_or(10000.0),
            rope_style: match arch {
                Arch::Llama | Arch::Granite | Arch::SmolLM3 | Arch::Mixtral => RopeStyle::Normal,
                Arch::Qwen2 | Arch::Qwen3 | Arch::Qwen3Moe => RopeStyle::Neox,
            },
            rope_freq_scale,
            rope_freq_factors: None,
            qkv_bias: arch == Arch::Qwen2,
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Qwen3Moe),
            scales: Scales {
                embedding: opt_f32(h, file, &k("embedding_scale"))?.unwrap_or(1.0),
                residual: opt_f32(h, file, &k("residual_scale"))?.unwrap_or(1.0),
                attention: opt_f32(h, file, &k("attention.scale"))?.filter(|&s| s != 0.0),
                logit: opt_f32(h, file, &k("logit_scale"))?.unwrap_or(1.0),
            },
            // llama.cpp fixes SmolLM3's period at 4 (no GGUF key says it).
            no_rope: match arch {
                Arch::SmolLM3 => every_nth_without_rope(n_layers, 4),
                _ => Vec::new(),
            },
            moe,
        }
        .validate(file)
    }

    /// Resolves a Hugging Face `config.json`.
    pub fn from_hf_json(json: &str, file: &str) -> Result<Self> {
        let c: HfConfig = serde_json::from_str(json).map_err(|e| Error::Config {
            file: file.to_owned(),
            what: e.to_string(),
        })?;
        let arch_name = c
            .architectures
            .first()
            .cloned()
            .or(c.model_type.clone())
            .unwrap_or_default();
        let arch = match arch_name.as_str() {
            "LlamaForCausalLM" | "MistralForCausalLM" | "llama" | "mistral" => Arch::Llama,
            "Qwen2ForCausalLM" | "qwen2" => Arch::Qwen2,
            "Qwen3ForCausalLM" | "qwen3" => Arch::Qwen3,
            "GraniteForCausalLM" | "granite" => Arch::Granite,
            "SmolLM3ForCausalLM" | "smollm3" => Arch::SmolLM3,
            "Qwen3MoeForCausalLM" | "qwen3_moe" => Arch::Qwen3Moe,
            "MixtralForCausalLM" | "mixtral" => Arch::Mixtral,
            other => {
                return Err(Error::UnknownArchitecture {
                    file: file.to_owned(),
                    arch: other.to_owned(),
                })
            }
        };
        let n_kv_heads = c.num_key_value_heads.unwrap_or(c.num_attention_heads);
        let head_dim = c.head_dim.unwrap_or(
            c.hidden_size
                .checked_div(c.num_attention_heads)
                .unwrap_or(0),
        );
        let rope_base = c.rope_theta.unwrap_or(10000.0);
        let (mut freq_scale, mut factors) = (1.0, None);
        if let Some(s) = &c.rope_scaling {
            match s.kind.as_deref().or(s.rope_type.as_deref()) {
                Some("linear") => freq_scale = 1.0 / s.factor.unwrap_or(1.0),
                Some("llama3") => factors = Some(llama3_freq_factors(head_dim, rope_base, s)),
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
            Arch::Qwen3Moe | Arch::Mixtral => Some(hf_moe(&c, file, arch == Arch::Mixtral)?),
            _ => None,
        };
        Config {
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
            context_length: c.max_position_embeddings.unwrap_or(2048),
            rope_base,
            // Hugging Face checkpoints keep Q/K unpermuted: rotate halves.
            rope_style: RopeStyle::Neox,
            rope_freq_scale: freq_scale,
            rope_freq_factors: factors,
            qkv_bias: arch == Arch::Qwen2 || c.attention_bias.unwrap_or(false),
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Qwen3Moe),
            scales: Scales {
                embedding: c.embedding_multiplier.unwrap_or(1.0),
                residual: c.residual_multiplier.unwrap_or(1.0),
                attention: c.attention_multiplier.filter(|&s| s != 0.0),
                logit: c.logits_scaling.unwrap_or(1.0),
            },
            // `no_rope_layers[i]` is 1 where layer i uses RoPE.
            no_rope: match (&c.no_rope_layers, arch) {
                (Some(v), _) => v.iter().map(|&r| r == 0).collect(),
                (None, Arch::SmolLM3) => every_nth_without_rope(
                    c.num_hidden_layers,
                    c.no_rope_layer_interval.unwrap_or(4),
                ),
                (None, _) => Vec::new(),
            },
            moe,
        }
        .validate(file)
    }
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
    /// Qwen3-MoE's experts (Mixtral: `num_local_experts`).
    pub num_experts: Option<usize>,
    pub num_local_experts: Option<usize>,
    pub num_experts_per_tok: Option<usize>,
    pub moe_intermediate_size: Option<usize>,
    pub norm_topk_prob: Option<bool>,
    pub decoder_sparse_step: Option<usize>,
    #[serde(default)]
    pub mlp_only_layers: Vec<usize>,
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
    })
}

/// Layers `n - 1, 2n - 1, ...` (1-based: every `n`-th) without RoPE.
fn every_nth_without_rope(layers: usize, n: usize) -> Vec<bool> {
    (0..layers).map(|i| n > 0 && (i + 1) % n == 0).collect()
}

fn str_key<'a>(h: &'a GgufHeader, file: &str, key: &str) -> Result<&'a str> {
    let v = h.get(key).ok_or_else(|| Error::MissingKey {
        file: file.to_owned(),
        key: key.to_owned(),
    })?;
    v.as_str().ok_or_else(|| Error::KeyType {
        file: file.to_owned(),
        key: key.to_owned(),
        want: "string",
    })
}

fn opt_usize(h: &GgufHeader, file: &str, key: &str) -> Result<Option<usize>> {
    match h.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| usize::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| Error::KeyType {
                file: file.to_owned(),
                key: key.to_owned(),
                want: "unsigned integer",
            }),
    }
}

fn usize_key(h: &GgufHeader, file: &str, key: &str) -> Result<usize> {
    opt_usize(h, file, key)?.ok_or_else(|| Error::MissingKey {
        file: file.to_owned(),
        key: key.to_owned(),
    })
}

fn opt_f32(h: &GgufHeader, file: &str, key: &str) -> Result<Option<f32>> {
    match h.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|x| Some(x as f32))
            .ok_or_else(|| Error::KeyType {
                file: file.to_owned(),
                key: key.to_owned(),
                want: "number",
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        assert_eq!(c.moe, Some(want));
        assert!(c.qk_norm);
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
        assert!(!c.qk_norm);
    }
}
