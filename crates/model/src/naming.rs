//! How files name a decoder's tensors: llama.cpp's GGUF names and Hugging
//! Face's, for every part a layer of any supported family may have.

/// How a file names its tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// llama.cpp names: `blk.N.attn_q.weight`.
    Gguf,
    /// Hugging Face names: `model.layers.N.self_attn.q_proj.weight`.
    HuggingFace,
}

impl Naming {
    pub(crate) fn global(self, part: &str) -> &'static str {
        match (self, part) {
            (Naming::Gguf, "embed") => "token_embd.weight",
            (Naming::Gguf, "norm") => "output_norm.weight",
            (Naming::Gguf, "output") => "output.weight",
            (Naming::HuggingFace, "embed") => "model.embed_tokens.weight",
            (Naming::HuggingFace, "norm") => "model.norm.weight",
            (Naming::HuggingFace, "output") => "lm_head.weight",
            _ => unreachable!("unknown global tensor {part}"),
        }
    }

    /// Layer `i`'s tensor `part`: `(GGUF suffix, Hugging Face suffix)` of
    /// each part in [`LAYER_PARTS`].
    pub(crate) fn layer(self, i: usize, part: &str) -> String {
        let (gguf, hf) = LAYER_PARTS
            .iter()
            .find(|(p, _, _)| *p == part)
            .map(|&(_, g, h)| (g, h))
            .unwrap_or_else(|| unreachable!("unknown layer tensor {part}"));
        match self {
            Naming::Gguf => format!("blk.{i}.{gguf}"),
            Naming::HuggingFace => format!("model.layers.{i}.{hf}"),
        }
    }
}

/// Every per-layer part: (name in the code, GGUF suffix, Hugging Face suffix).
/// Hugging Face calls Llama's pre-FFN norm `post_attention_layernorm`, the
/// name Gemma and OLMo 2 give their norm after attention: the loader asks
/// for `ffn_norm` or `attn_post_norm` according to the family's placement.
pub(crate) const LAYER_PARTS: &[(&str, &str, &str)] = &[
    ("attn_norm", "attn_norm.weight", "input_layernorm.weight"),
    ("q", "attn_q.weight", "self_attn.q_proj.weight"),
    ("k", "attn_k.weight", "self_attn.k_proj.weight"),
    ("v", "attn_v.weight", "self_attn.v_proj.weight"),
    ("qkv", "attn_qkv.weight", "self_attn.qkv_proj.weight"),
    ("q_bias", "attn_q.bias", "self_attn.q_proj.bias"),
    ("k_bias", "attn_k.bias", "self_attn.k_proj.bias"),
    ("v_bias", "attn_v.bias", "self_attn.v_proj.bias"),
    ("q_norm", "attn_q_norm.weight", "self_attn.q_norm.weight"),
    ("k_norm", "attn_k_norm.weight", "self_attn.k_norm.weight"),
    ("o", "attn_output.weight", "self_attn.o_proj.weight"),
    (
        "ffn_norm",
        "ffn_norm.weight",
        "post_attention_layernorm.weight",
    ),
    (
        "pre_ffn_norm",
        "ffn_norm.weight",
        "pre_feedforward_layernorm.weight",
    ),
    (
        "attn_post_norm",
        "post_attention_norm.weight",
        "post_attention_layernorm.weight",
    ),
    (
        "ffn_post_norm",
        "post_ffw_norm.weight",
        "post_feedforward_layernorm.weight",
    ),
    ("gate", "ffn_gate.weight", "mlp.gate_proj.weight"),
    ("up", "ffn_up.weight", "mlp.up_proj.weight"),
    ("gate_up", "ffn_up.weight", "mlp.gate_up_proj.weight"),
    ("down", "ffn_down.weight", "mlp.down_proj.weight"),
];
