//! Where `hasten estimate`'s model comes from: a preset name, a GGUF file
//! (dimensions from its metadata, bits per weight from its tensor bytes), a
//! Hugging Face `config.json` (or a directory holding one), or explicit
//! dimension flags, which also override any of the others.

use anyhow::{bail, Context, Result};
use hasten_estimate::{presets, DType, Model};
use hasten_kernels::GgmlType;
use hasten_model::gguf::GgufFile;
use std::borrow::Cow;
use std::path::Path;

/// Dimension flags; each set one replaces the model's figure.
#[derive(clap::Args, Default)]
pub struct Dims {
    /// Transformer layers (overrides the model's).
    #[arg(long)]
    pub layers: Option<u64>,
    /// Hidden size (embedding width).
    #[arg(long)]
    pub hidden: Option<u64>,
    /// Attention (query) heads.
    #[arg(long)]
    pub heads: Option<u64>,
    /// Key/value heads (fewer than --heads for grouped-query attention).
    #[arg(long)]
    pub kv_heads: Option<u64>,
    /// Dimension of one head (default: hidden / heads).
    #[arg(long)]
    pub head_dim: Option<u64>,
    /// Feed-forward (intermediate) size.
    #[arg(long)]
    pub ffn: Option<u64>,
    /// Vocabulary size.
    #[arg(long)]
    pub vocab: Option<u64>,
    /// Output projection shares the embedding matrix.
    #[arg(long)]
    pub tied: Option<bool>,
}

impl Dims {
    fn any(&self) -> bool {
        [
            self.layers,
            self.hidden,
            self.heads,
            self.kv_heads,
            self.head_dim,
            self.ffn,
            self.vocab,
        ]
        .iter()
        .any(Option::is_some)
            || self.tied.is_some()
    }
}

/// A model with what its source says about its weights.
pub struct Source {
    pub model: Model,
    /// The file's own bits per weight (GGUF) or stored dtype (config.json).
    pub weights: Option<DType>,
    /// The matmul weight type that dominates a GGUF file, for `--measure`.
    pub ggml_type: Option<GgmlType>,
}

pub fn resolve(spec: Option<&str>, dims: &Dims) -> Result<Source> {
    let mut src = match spec {
        None if dims.any() => {
            let (Some(layers), Some(hidden), Some(heads), Some(ffn), Some(vocab)) =
                (dims.layers, dims.hidden, dims.heads, dims.ffn, dims.vocab)
            else {
                bail!(
                    "without --model, give at least --layers, --hidden, --heads, --ffn and --vocab"
                );
            };
            Source {
                model: llama("custom", layers, hidden, heads, heads, ffn, vocab, false),
                weights: None,
                ggml_type: None,
            }
        }
        None => preset("llama-2-7b")?,
        Some(s) => {
            let p = Path::new(s);
            if p.is_dir() {
                from_config_json(&p.join("config.json"))?
            } else if p.extension().is_some_and(|e| e == "gguf") {
                from_gguf(p)?
            } else if p.extension().is_some_and(|e| e == "json") {
                from_config_json(p)?
            } else if p.exists() {
                bail!("{s}: not a .gguf file, a config.json or a directory holding one")
            } else {
                preset(s)?
            }
        }
    };
    let m = &mut src.model;
    let before = m.clone();
    let set = |v: Option<u64>, f: &mut u64| *f = v.unwrap_or(*f);
    set(dims.layers, &mut m.layers);
    set(dims.hidden, &mut m.hidden);
    set(dims.heads, &mut m.heads);
    set(dims.kv_heads, &mut m.kv_heads);
    set(dims.ffn, &mut m.ffn);
    set(dims.vocab, &mut m.vocab);
    m.tied = dims.tied.unwrap_or(m.tied);
    m.head_dim = match dims.head_dim {
        Some(d) => d,
        None if m.heads != before.heads || m.hidden != before.hidden => m.hidden / m.heads.max(1),
        None => m.head_dim,
    };
    if *m != before && m.name != "custom" {
        m.name = format!("{} (modified)", m.name);
    }
    check(m)?;
    Ok(src)
}

fn check(m: &Model) -> Result<()> {
    for (what, v) in [
        ("layers", m.layers),
        ("hidden", m.hidden),
        ("heads", m.heads),
        ("KV heads", m.kv_heads),
        ("head dimension", m.head_dim),
        ("FFN", m.ffn),
        ("vocabulary", m.vocab),
    ] {
        if v == 0 || v > 1 << 24 {
            bail!("{what} must be between 1 and 16777216, got {v}");
        }
    }
    if !m.heads.is_multiple_of(m.kv_heads) {
        bail!(
            "{} heads cannot be shared by {} KV heads",
            m.heads,
            m.kv_heads
        );
    }
    Ok(())
}

fn preset(name: &str) -> Result<Source> {
    Ok(Source {
        model: presets::model(name).with_context(|| {
            format!("unknown model {name:?}: a preset (--list), a .gguf file or a config.json")
        })?,
        weights: None,
        ggml_type: None,
    })
}

#[allow(clippy::too_many_arguments)]
fn llama(
    name: &str,
    layers: u64,
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    ffn: u64,
    vocab: u64,
    tied: bool,
) -> Model {
    Model {
        name: name.into(),
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim: hidden / heads.max(1),
        ffn,
        vocab,
        tied,
        ffn_mats: 3,
        experts: 1,
        active_experts: 1,
        window: None,
    }
}

/// The sliding window of `c`'s local layers, if it has any.
fn window_of(c: &hasten_model::config::Config) -> Option<hasten_estimate::Window> {
    let w = c.swa.as_ref()?;
    Some(hasten_estimate::Window {
        size: w.window as u64,
        layers: w.layers.iter().filter(|&&l| l).count() as u64,
    })
}

/// Dimensions from the metadata; bits per weight from the tensor bytes the
/// file actually holds (so mixed formats such as Q4_K_M are exact).
fn from_gguf(path: &Path) -> Result<Source> {
    let file = GgufFile::open(path).with_context(|| format!("reading {}", path.display()))?;
    let h = &file.header;
    let vocab_fallback = h
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .map_or(0, |a| a.len());
    let c = hasten_model::config::Config::from_gguf(h, &file.name, vocab_fallback)?;
    let name = h
        .get("general.name")
        .and_then(|v| v.as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| {
            path.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        });
    let mut m = llama(
        &name,
        c.n_layers as u64,
        c.dim as u64,
        c.n_heads as u64,
        c.n_kv_heads as u64,
        c.ffn_dim as u64,
        c.vocab_size as u64,
        h.tensors.iter().all(|t| t.name != "output.weight"),
    );
    m.head_dim = c.head_dim as u64;
    m.window = window_of(&c);
    if let Some(moe) = c.moe {
        m.ffn = moe.expert_ffn_dim as u64;
        m.experts = moe.n_experts as u64;
        m.active_experts = moe.top_k as u64;
    }
    let ggml_type = h.dominant_matmul_type();
    let label = match ggml_type {
        Some(t) => format!("{} (file)", t.name().to_ascii_lowercase()),
        None => "file".to_owned(),
    };
    Ok(Source {
        model: m,
        weights: h.bits_per_weight().map(|bits| DType {
            name: Cow::Owned(label),
            bits,
        }),
        ggml_type,
    })
}

/// The Llama-family keys of a Hugging Face `config.json`, plus Mixtral's
/// and Qwen3-MoE's expert counts.
fn from_config_json(path: &Path) -> Result<Source> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let key = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
    let need = |k: &str| key(k).with_context(|| format!("{}: no number {k:?}", path.display()));
    let heads = need("num_attention_heads")?;
    let name = v
        .get("_name_or_path")
        .and_then(|n| n.as_str())
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| path.display().to_string());
    let mut m = llama(
        &name,
        need("num_hidden_layers")?,
        need("hidden_size")?,
        heads,
        key("num_key_value_heads").unwrap_or(heads),
        need("intermediate_size")?,
        need("vocab_size")?,
        v.get("tie_word_embeddings")
            .and_then(|t| t.as_bool())
            .unwrap_or(false),
    );
    if let Some(d) = key("head_dim") {
        m.head_dim = d;
    }
    // The families hasten runs resolve their windows as the loader does.
    if let Ok(c) = hasten_model::config::Config::from_hf_json(&text, &path.display().to_string()) {
        m.window = window_of(&c);
    }
    if let Some(e) = key("num_local_experts") {
        m.experts = e;
        m.active_experts = key("num_experts_per_tok").unwrap_or(2);
    }
    // Qwen3-MoE: `intermediate_size` is a dense width no layer uses.
    if let (Some(e), Some(w)) = (key("num_experts"), key("moe_intermediate_size")) {
        m.experts = e;
        m.active_experts = key("num_experts_per_tok").unwrap_or(8);
        m.ffn = w;
    }
    let weights = v
        .get("torch_dtype")
        .and_then(|d| d.as_str())
        .and_then(|d| presets::dtype(&d.replace("float", "f")));
    Ok(Source {
        model: m,
        weights,
        ggml_type: None,
    })
}
