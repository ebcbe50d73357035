//! The resolved model configuration, read from GGUF metadata or a Hugging
//! Face `config.json`, with every default filled in and every value checked.

pub use crate::arch::{Act, Arch, Norms, QkNorm};
use crate::gguf::GgufHeader;
use crate::{Error, Result};
use hasten_kernels::ops::{RopeStyle, Yarn};

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
    /// Dimensions of each head that RoPE rotates (the first ones; all of
    /// them unless the model uses partial rotary embeddings).
    pub rope_dims: usize,
    /// 1 / linear scaling factor.
    pub rope_freq_scale: f32,
    /// Frequency factors (one per rotated pair: Llama 3's, or the LongRoPE
    /// factors Phi-3 picks for its context), if any.
    pub rope_freq_factors: Option<Vec<f32>>,
    /// Multiplies the rotated dimensions of Q and K (LongRoPE's attention
    /// factor; 1 otherwise).
    pub rope_attn_factor: f32,
    /// The context the model was trained at before LongRoPE extended it:
    /// contexts beyond it use the long factors (GGUF files carry both).
    pub rope_orig_context: Option<usize>,
    /// YaRN scaling (`rope_freq_scale` is then 1/factor, blended per pair;
    /// `rope_attn_factor` includes YaRN's attention factor).
    pub rope_yarn: Option<Yarn>,
    pub qkv_bias: bool,
    /// RMSNorm of Q and K before RoPE.
    pub qk_norm: QkNorm,
    /// Where the RMSNorms of each block sit.
    pub norms: Norms,
    /// The FFN's activation.
    pub act: Act,
    /// Constant factors and caps (all neutral for most families).
    pub scales: Scales,
    /// Layers whose Q and K are not rotated (SmolLM3's NoPE layers); empty
    /// when every layer uses RoPE.
    pub no_rope: Vec<bool>,
    /// Sliding-window attention, if some layers use it.
    pub swa: Option<Swa>,
    /// Mixture-of-experts FFNs (every layer), if the model has them.
    pub moe: Option<Moe>,
    /// How the file says its hidden states pool into one embedding
    /// (GGUF `{arch}.pooling_type`, llama.cpp's numbers: 0 none, 1 mean,
    /// 2 CLS, 3 last, 4 rank), if it says.
    pub pooling_type: Option<usize>,
}

/// Sliding-window attention: the listed layers see the last `window`
/// positions only, with their own RoPE base and scale.
#[derive(Debug, Clone, PartialEq)]
pub struct Swa {
    pub window: usize,
    /// One entry per layer: true where the window applies.
    pub layers: Vec<bool>,
    pub rope_base: f32,
    pub rope_freq_scale: f32,
}

impl Swa {
    /// Every layer but each `period`-th (llama.cpp's `set_swa_pattern`;
    /// period 0 or 1: every layer).
    pub fn pattern(n_layers: usize, period: usize) -> Vec<bool> {
        (0..n_layers)
            .map(|i| period <= 1 || i % period < period - 1)
            .collect()
    }
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
    /// Hidden width of the shared expert every token also runs, behind a
    /// sigmoid gate (Qwen2-MoE); 0 where there is none.
    pub shared_ffn_dim: usize,
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
    /// Soft cap of the attention scores, `cap * tanh(s / cap)` (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Soft cap of the logits (Gemma 2).
    pub final_softcap: Option<f32>,
}

impl Default for Scales {
    fn default() -> Self {
        Scales {
            embedding: 1.0,
            residual: 1.0,
            attention: None,
            logit: 1.0,
            attn_softcap: None,
            final_softcap: None,
        }
    }
}

impl Config {
    /// Bytes of f16 K and V per token across all layers.
    pub fn kv_bytes_per_token(&self) -> usize {
        self.kv_bytes_per_token_as(hasten_kernels::attention::KvType::F16)
    }

    /// Bytes of K and V per token across all layers, rows stored as `ty`.
    pub fn kv_bytes_per_token_as(&self, ty: hasten_kernels::attention::KvType) -> usize {
        crate::kv::kv_bytes_per_token(self.n_layers, self.n_kv_heads, self.head_dim, ty)
    }

    /// Bytes of K and V per token of the layers without a sliding window
    /// and of those with one, rows stored as `ty` (all in the first when
    /// the model has no windowed layers).
    pub fn kv_bytes_per_token_split(
        &self,
        ty: hasten_kernels::attention::KvType,
    ) -> (usize, usize) {
        let local = self
            .swa
            .as_ref()
            .map_or(0, |w| w.layers.iter().filter(|&&l| l).count());
        let per =
            |layers| crate::kv::kv_bytes_per_token(layers, self.n_kv_heads, self.head_dim, ty);
        (per(self.n_layers - local), per(local))
    }

    /// Bytes of K and V one decode step reads at `ctx` positions: every
    /// position in layers without a window, the last `window` in the
    /// others (rows stored as `ty`).
    pub fn kv_bytes_read(&self, ctx: usize, ty: hasten_kernels::attention::KvType) -> usize {
        let (main, local) = self.kv_bytes_per_token_split(ty);
        let seen = self.swa.as_ref().map_or(ctx, |w| ctx.min(w.window));
        main * ctx + local * seen
    }

    /// A plain Llama of these shapes (pre-norms, SwiGLU, RoPE over whole
    /// heads, no biases), validated: what `hasten estimate`'s probes run
    /// when they know a model by its dimensions only.
    pub fn plain_llama(
        dim: usize,
        n_layers: usize,
        (n_heads, n_kv_heads, head_dim): (usize, usize, usize),
        ffn_dim: usize,
        context_length: usize,
    ) -> Result<Self> {
        let fam = Arch::Llama.family();
        Config {
            arch: Arch::Llama,
            vocab_size: 1,
            dim,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim,
            norm_eps: 1e-5,
            context_length,
            rope_base: 10000.0,
            rope_style: fam.gguf_rope,
            rope_dims: head_dim,
            rope_freq_scale: 1.0,
            rope_freq_factors: None,
            rope_attn_factor: 1.0,
            rope_orig_context: None,
            rope_yarn: None,
            qkv_bias: fam.qkv_bias,
            qk_norm: fam.qk_norm,
            norms: fam.norms,
            act: fam.act,
            scales: Scales::default(),
            no_rope: Vec::new(),
            swa: None,
            moe: None,
            pooling_type: None,
        }
        .validate("(plain llama shapes)")
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub(crate) fn validate(self, file: &str) -> Result<Self> {
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
        if !(self.norm_eps > 0.0
            && self.rope_base > 0.0
            && self.rope_freq_scale > 0.0
            && self.rope_attn_factor > 0.0)
        {
            return bad("eps, rope base and rope scale must be positive".into());
        }
        if let Some(y) = self.rope_yarn {
            if y.orig_context == 0 || !(y.beta_fast > 0.0 && y.beta_slow > 0.0) {
                return bad(format!(
                    "YaRN over an original context of {} (beta {} / {}) is not valid",
                    y.orig_context, y.beta_fast, y.beta_slow
                ));
            }
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
        if self.rope_dims > self.head_dim || !self.rope_dims.is_multiple_of(2) {
            return bad(format!(
                "RoPE over {} dimensions of heads of {}",
                self.rope_dims, self.head_dim
            ));
        }
        if let Some(f) = &self.rope_freq_factors {
            if f.len() != self.rope_dims / 2 {
                return bad(format!(
                    "{} RoPE frequency factors for {} rotated pairs",
                    f.len(),
                    self.rope_dims / 2
                ));
            }
        }
        if let Some(w) = &self.swa {
            if w.window == 0
                || w.layers.len() != self.n_layers
                || w.rope_base.is_nan()
                || w.rope_base <= 0.0
            {
                return bad(format!(
                    "sliding window {} over {} of {} layers (RoPE base {}) is not valid",
                    w.window,
                    w.layers.len(),
                    self.n_layers,
                    w.rope_base
                ));
            }
        }
        let sc = self.scales;
        if ![
            sc.embedding,
            sc.residual,
            sc.logit,
            sc.attention.unwrap_or(1.0),
            sc.attn_softcap.unwrap_or(1.0),
            sc.final_softcap.unwrap_or(1.0),
        ]
        .iter()
        .all(|v| v.is_finite() && *v > 0.0)
        {
            return bad(format!("scales and soft caps must be positive, got {sc:?}"));
        }
        Ok(self)
    }

    /// Reads `{arch}.*` keys of a GGUF header. `vocab_fallback` is the token
    /// count of the file's vocabulary, used when `{arch}.vocab_size` is absent.
    pub fn from_gguf(h: &GgufHeader, file: &str, vocab_fallback: usize) -> Result<Self> {
        let arch_name = str_key(h, file, "general.architecture")?;
        let arch = Arch::from_gguf_name(arch_name).ok_or_else(|| Error::UnknownArchitecture {
            file: file.to_owned(),
            arch: arch_name.to_owned(),
        })?;
        let k = |s: &str| format!("{arch_name}.{s}");
        let dim = usize_key(h, file, &k("embedding_length"))?;
        let n_heads = usize_key(h, file, &k("attention.head_count"))?;
        let n_kv_heads = opt_usize(h, file, &k("attention.head_count_kv"))?.unwrap_or(n_heads);
        let head_dim = opt_usize(h, file, &k("attention.key_length"))?
            .unwrap_or(dim.checked_div(n_heads).unwrap_or(0));
        let n_layers = usize_key(h, file, &k("block_count"))?;
        // Mixtral is `llama` with experts (of the dense FFN width, unless
        // the file says otherwise).
        let arch = match opt_usize(h, file, &k("expert_count"))? {
            Some(n) if n > 0 && arch == Arch::Llama => Arch::Mixtral,
            _ => arch,
        };
        let fam = arch.family();
        let moe = match arch {
            Arch::Qwen3Moe | Arch::Mixtral | Arch::Qwen2Moe => Some(Moe {
                n_experts: usize_key(h, file, &k("expert_count"))?,
                top_k: usize_key(h, file, &k("expert_used_count"))?,
                expert_ffn_dim: match opt_usize(h, file, &k("expert_feed_forward_length"))? {
                    Some(w) => w,
                    None => usize_key(h, file, &k("feed_forward_length"))?,
                },
                // llama.cpp renormalizes Qwen3-MoE's and Mixtral's top-k
                // weights, never Qwen2-MoE's (no key says so).
                norm_topk: arch != Arch::Qwen2Moe,
                shared_ffn_dim: match arch {
                    Arch::Qwen2Moe => {
                        match opt_usize(h, file, &k("expert_shared_feed_forward_length"))? {
                            Some(w) => w,
                            None => usize_key(h, file, &k("feed_forward_length"))?,
                        }
                    }
                    _ => 0,
                },
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
        let factor = opt_f32(h, file, &k("rope.scaling.factor"))?.unwrap_or(1.0);
        let rope_orig_context = opt_usize(h, file, &k("rope.scaling.original_context_length"))?;
        let context_length = opt_usize(h, file, &k("context_length"))?.unwrap_or(2048);
        let rope_yarn = match scaling {
            "yarn" => Some(Yarn {
                orig_context: rope_orig_context.unwrap_or(context_length),
                beta_fast: opt_f32(h, file, &k("rope.scaling.yarn_beta_fast"))?.unwrap_or(32.0),
                beta_slow: opt_f32(h, file, &k("rope.scaling.yarn_beta_slow"))?.unwrap_or(1.0),
            }),
            _ => None,
        };
        // LongRoPE's magnitude correction of the rotated dimensions; YaRN's
        // `1 + 0.1 ln(factor)` on top of it (ggml's rope with ext_factor 1).
        let mut rope_attn_factor = opt_f32(h, file, &k("rope.scaling.attn_factor"))?.unwrap_or(1.0);
        if rope_yarn.is_some() {
            rope_attn_factor *= Yarn::mscale(factor);
        }
        let rope_freq_scale = match scaling {
            "linear" | "yarn" => 1.0 / factor,
            // llama3 scaling is carried by the `rope_freqs.weight` tensor.
            _ => 1.0,
        };
        let rope_base = opt_f32(h, file, &k("rope.freq_base"))?.unwrap_or(10000.0);
        let mut scales = Scales {
            embedding: opt_f32(h, file, &k("embedding_scale"))?.unwrap_or(1.0),
            residual: opt_f32(h, file, &k("residual_scale"))?.unwrap_or(1.0),
            attention: opt_f32(h, file, &k("attention.scale"))?.filter(|&s| s != 0.0),
            logit: opt_f32(h, file, &k("logit_scale"))?.unwrap_or(1.0),
            attn_softcap: None,
            final_softcap: opt_f32(h, file, &k("final_logit_softcapping"))?.filter(|&s| s != 0.0),
        };
        if fam.embed_sqrt_dim {
            scales.embedding = (dim as f32).sqrt();
        }
        if matches!(arch, Arch::Gemma2 | Arch::Gemma3) {
            // llama.cpp: the 27B models scale queries by `(dim / heads)^-1/2`,
            // the others by `head_dim^-1/2` (no key says which).
            let big = (arch == Arch::Gemma2 && n_layers == 46) || n_layers == 62;
            if big && n_heads > 0 {
                scales.attention = Some(1.0 / (dim as f32 / n_heads as f32).sqrt());
            }
        }
        if arch == Arch::Gemma2 {
            scales.attn_softcap =
                Some(opt_f32(h, file, &k("attn_logit_softcapping"))?.unwrap_or(50.0));
            scales.final_softcap = Some(scales.final_softcap.unwrap_or(30.0));
        }
        let swa =
            match (
                fam.swa_period,
                opt_usize(h, file, &k("attention.sliding_window"))?,
            ) {
                (Some(period), window) => {
                    // Gemma 2 files written before the key existed mean 4096.
                    let window = window.unwrap_or(if arch == Arch::Gemma2 { 4096 } else { 0 });
                    let period = opt_usize(h, file, &k("attention.sliding_window_pattern"))?
                        .unwrap_or(period);
                    // Gemma 3's local layers: base 10k unscaled; Gemma 2's: as global.
                    let gemma3 = arch == Arch::Gemma3;
                    let base_swa = opt_f32(h, file, &k("rope.freq_base_swa"))?
                        .unwrap_or(if gemma3 { 10000.0 } else { rope_base });
                    (window > 0).then(|| Swa {
                        window,
                        layers: Swa::pattern(n_layers, period),
                        rope_base: base_swa,
                        rope_freq_scale: if gemma3 { 1.0 } else { rope_freq_scale },
                    })
                }
                // Other families' windows are ignored by llama.cpp too (Phi-3's,
                // Mistral's: the files do not say which layers).
                (None, _) => None,
            };
        Config {
            pooling_type: opt_usize(h, file, &k("pooling_type"))?,
            arch,
            vocab_size: opt_usize(h, file, &k("vocab_size"))?.unwrap_or(vocab_fallback),
            dim,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim,
            norm_eps: opt_f32(h, file, &k("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-5),
            context_length,
            rope_base,
            rope_style: fam.gguf_rope,
            rope_dims: opt_usize(h, file, &k("rope.dimension_count"))?.unwrap_or(head_dim),
            rope_freq_scale,
            rope_freq_factors: None,
            rope_attn_factor,
            rope_orig_context,
            rope_yarn,
            qkv_bias: fam.qkv_bias,
            qk_norm: fam.qk_norm,
            norms: fam.norms,
            act: fam.act,
            scales,
            // llama.cpp fixes SmolLM3's period at 4 (no GGUF key says it).
            no_rope: match arch {
                Arch::SmolLM3 => every_nth_without_rope(n_layers, 4),
                _ => Vec::new(),
            },
            swa,
            moe,
        }
        .validate(file)
    }
}

/// Layers `n - 1, 2n - 1, ...` (1-based: every `n`-th) without RoPE.
pub(crate) fn every_nth_without_rope(layers: usize, n: usize) -> Vec<bool> {
    (0..layers).map(|i| n > 0 && (i + 1) % n == 0).collect()
}

pub(crate) fn str_key<'a>(h: &'a GgufHeader, file: &str, key: &str) -> Result<&'a str> {
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

pub(crate) fn opt_usize(h: &GgufHeader, file: &str, key: &str) -> Result<Option<usize>> {
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

pub(crate) fn usize_key(h: &GgufHeader, file: &str, key: &str) -> Result<usize> {
    opt_usize(h, file, key)?.ok_or_else(|| Error::MissingKey {
        file: file.to_owned(),
        key: key.to_owned(),
    })
}

pub(crate) fn opt_f32(h: &GgufHeader, file: &str, key: &str) -> Result<Option<f32>> {
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
    use crate::gguf::{GgufFile, GgufWriter, Value};

    #[test]
    fn an_unsupported_architecture_is_named_with_the_supported_list() {
        let mut w = GgufWriter::new();
        w.kv("general.architecture", Value::String("phi2".into()));
        let mut bytes = Vec::new();
        w.write_to(&mut bytes).unwrap();
        let f = GgufFile::from_bytes("m.gguf", bytes).unwrap();
        let err = Config::from_gguf(&f.header, "m.gguf", 10)
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"phi2\" is not supported"), "{err}");
        for a in Arch::ALL {
            assert!(err.contains(a.name()), "{err}");
        }
        let err = Config::from_hf_json(
            r#"{"architectures": ["BertModel"], "vocab_size": 1,
            "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1}"#,
            "c",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("BertModel") && err.contains("gemma3"), "{err}");
    }

    #[test]
    fn gemma_windows_and_phi_rope_are_read_from_gguf_keys() {
        let mut w = GgufWriter::new();
        let u = |v: u32| Value::U32(v);
        for (k, v) in [
            ("general.architecture", Value::String("gemma3".into())),
            ("gemma3.embedding_length", u(64)),
            ("gemma3.block_count", u(7)),
            ("gemma3.attention.head_count", u(2)),
            ("gemma3.attention.key_length", u(32)),
            ("gemma3.feed_forward_length", u(96)),
            ("gemma3.attention.sliding_window", u(16)),
            ("gemma3.rope.freq_base", Value::F32(1e6)),
        ] {
            w.kv(k, v);
        }
        let mut bytes = Vec::new();
        w.write_to(&mut bytes).unwrap();
        let f = GgufFile::from_bytes("m.gguf", bytes).unwrap();
        let c = Config::from_gguf(&f.header, "m.gguf", 10).unwrap();
        let swa = c.swa.unwrap();
        assert_eq!(swa.window, 16);
        assert_eq!(swa.layers, [true, true, true, true, true, false, true]);
        assert_eq!((swa.rope_base, c.rope_base), (10000.0, 1e6));
        assert_eq!(c.scales.embedding, 8.0);
        assert_eq!(
            (c.norms, c.act, c.qk_norm),
            (Norms::Sandwich, Act::GeGlu, QkNorm::PerHead)
        );
    }
}
