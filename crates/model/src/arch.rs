//! The model families hasten runs, and what sets each apart from Llama:
//! one [`Family`] record per architecture, read once when a configuration
//! is resolved. The forward pass (`crate::llama`) knows variation points,
//! never family names.

use hasten_kernels::ops::RopeStyle;

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
    /// multipliers (`Scales`).
    Granite,
    /// Hugging Face SmolLM3: Llama with no RoPE on every 4th layer (NoPE).
    SmolLM3,
    /// Qwen3 mixture of experts (Qwen3-30B-A3B): Qwen3 attention, every
    /// FFN a softmax-routed set of experts (`Moe`).
    Qwen3Moe,
    /// Qwen1.5/Qwen2 mixture of experts (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B):
    /// Qwen2 attention, softmax-routed experts whose weights are not
    /// renormalized, plus a shared expert behind a sigmoid gate.
    Qwen2Moe,
    /// Mixtral: Llama attention, every FFN a mixture of experts (GGUF
    /// writes it as `llama` with an expert count).
    Mixtral,
    /// Gemma 2: embeddings scaled by `sqrt(dim)`, GeGLU, norms before and
    /// after attention and FFN, every other layer a sliding window,
    /// soft-capped attention scores and logits.
    Gemma2,
    /// Gemma 3 (text): Gemma 2 with Q/K norms instead of soft-capping, five
    /// sliding-window layers (RoPE base 10k) per global one.
    Gemma3,
    /// Phi-3 / Phi-3.5 / Phi-4-mini: fused QKV and gate-up matrices,
    /// LongRoPE frequency factors, partial rotary dimensions.
    Phi3,
    /// OLMo 2: norms after attention and FFN only, RMSNorm over all of Q
    /// and all of K.
    Olmo2,
}

/// Where a family puts its RMSNorms around attention and the FFN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Norms {
    /// `x += f(norm(x))` (Llama).
    Pre,
    /// `x += post_norm(f(pre_norm(x)))` (Gemma 2/3).
    Sandwich,
    /// `x += post_norm(f(x))` (OLMo 2).
    Post,
}

/// How Q and K are normalized before RoPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkNorm {
    None,
    /// An RMSNorm over each head (weights of `head_dim`): Qwen3, Gemma 3.
    PerHead,
    /// One RMSNorm over all heads of Q and of K (weights of `q_dim` and
    /// `kv_dim`): OLMo 2.
    Full,
}

/// The FFN's gated activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// `silu(gate) * up`.
    SwiGlu,
    /// `gelu_tanh(gate) * up` (Gemma).
    GeGlu,
}

/// What sets a family apart, as data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Family {
    /// RoPE pairing of the family's GGUF files (llama.cpp's converter
    /// permutes Q/K rows of the `Normal` ones); Hugging Face files are
    /// always `Neox`.
    pub gguf_rope: RopeStyle,
    pub qkv_bias: bool,
    pub qk_norm: QkNorm,
    pub norms: Norms,
    pub act: Act,
    /// Embeddings multiplied by `sqrt(dim)` (Gemma).
    pub embed_sqrt_dim: bool,
    /// Hugging Face checkpoints store RMSNorm weights minus one (Gemma's
    /// `x * (1 + w)`); GGUF files hold them with the one added.
    pub hf_norm_offset: bool,
    /// Period of the sliding-window layers where the file does not list
    /// them (every layer but each `n`-th; llama.cpp's default).
    pub swa_period: Option<usize>,
}

const LLAMA: Family = Family {
    gguf_rope: RopeStyle::Normal,
    qkv_bias: false,
    qk_norm: QkNorm::None,
    norms: Norms::Pre,
    act: Act::SwiGlu,
    embed_sqrt_dim: false,
    hf_norm_offset: false,
    swa_period: None,
};

const QWEN3: Family = Family {
    gguf_rope: RopeStyle::Neox,
    qk_norm: QkNorm::PerHead,
    ..LLAMA
};

const GEMMA2: Family = Family {
    gguf_rope: RopeStyle::Neox,
    norms: Norms::Sandwich,
    act: Act::GeGlu,
    embed_sqrt_dim: true,
    hf_norm_offset: true,
    swa_period: Some(2),
    ..LLAMA
};

impl Arch {
    pub const ALL: [Arch; 12] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Granite,
        Arch::SmolLM3,
        Arch::Qwen3Moe,
        Arch::Qwen2Moe,
        Arch::Mixtral,
        Arch::Gemma2,
        Arch::Gemma3,
        Arch::Phi3,
        Arch::Olmo2,
    ];

    /// hasten's name (`hasten synth --arch`).
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Granite => "granite",
            Arch::SmolLM3 => "smollm3",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Qwen2Moe => "qwen2moe",
            Arch::Mixtral => "mixtral",
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3 => "gemma3",
            Arch::Phi3 => "phi3",
            Arch::Olmo2 => "olmo2",
        }
    }

    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The names of every family, for error messages.
    pub fn names() -> String {
        Arch::ALL.map(Arch::name).join(", ")
    }

    /// The `general.architecture` of this family's GGUF files (and the
    /// prefix of their keys).
    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::Mixtral => "llama",
            a => a.name(),
        }
    }

    /// The family of a GGUF `general.architecture` (`llama` files with
    /// experts are told apart as Mixtral later).
    pub fn from_gguf_name(name: &str) -> Option<Arch> {
        match name {
            "mistral" => Some(Arch::Llama),
            "mixtral" => None,
            n => Arch::from_name(n),
        }
    }

    /// The `architectures[0]` class of this family's Hugging Face checkpoints.
    pub fn hf_class(self) -> &'static str {
        match self {
            Arch::Llama => "LlamaForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
            Arch::Granite => "GraniteForCausalLM",
            Arch::SmolLM3 => "SmolLM3ForCausalLM",
            Arch::Qwen3Moe => "Qwen3MoeForCausalLM",
            Arch::Qwen2Moe => "Qwen2MoeForCausalLM",
            Arch::Mixtral => "MixtralForCausalLM",
            Arch::Gemma2 => "Gemma2ForCausalLM",
            Arch::Gemma3 => "Gemma3ForCausalLM",
            Arch::Phi3 => "Phi3ForCausalLM",
            Arch::Olmo2 => "Olmo2ForCausalLM",
        }
    }

    /// The family of a `config.json`'s class or `model_type`.
    pub fn from_hf(name: &str) -> Option<Arch> {
        let by_type = match name {
            "mistral" | "MistralForCausalLM" => Some(Arch::Llama),
            "qwen3_moe" => Some(Arch::Qwen3Moe),
            "qwen2_moe" => Some(Arch::Qwen2Moe),
            "gemma3_text" => Some(Arch::Gemma3),
            _ => None,
        };
        by_type.or_else(|| {
            Arch::ALL
                .into_iter()
                .find(|a| a.hf_class() == name || a.name() == name)
        })
    }

    pub fn family(self) -> Family {
        match self {
            Arch::Llama | Arch::Granite | Arch::SmolLM3 | Arch::Mixtral => LLAMA,
            Arch::Qwen2 | Arch::Qwen2Moe => Family {
                gguf_rope: RopeStyle::Neox,
                qkv_bias: true,
                ..LLAMA
            },
            Arch::Qwen3 | Arch::Qwen3Moe => QWEN3,
            Arch::Gemma2 => GEMMA2,
            Arch::Gemma3 => Family {
                qk_norm: QkNorm::PerHead,
                swa_period: Some(6),
                ..GEMMA2
            },
            Arch::Phi3 => Family {
                gguf_rope: RopeStyle::Neox,
                ..LLAMA
            },
            Arch::Olmo2 => Family {
                gguf_rope: RopeStyle::Neox,
                qk_norm: QkNorm::Full,
                norms: Norms::Post,
                ..LLAMA
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in Arch::ALL {
            assert_eq!(Arch::from_name(a.name()), Some(a));
            assert_eq!(Arch::from_hf(a.hf_class()), Some(a));
        }
        assert_eq!(Arch::from_gguf_name("mistral"), Some(Arch::Llama));
        assert_eq!(Arch::from_gguf_name("gemma3"), Some(Arch::Gemma3));
        assert_eq!(Arch::from_gguf_name("bert"), None);
        assert!(Arch::names().contains("olmo2"));
    }
}
