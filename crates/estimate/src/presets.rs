//! Published dimensions: models (from their config.json files), weight and
//! KV formats (exact bits per weight, block scales included), and devices
//! (vendor datasheets: memory, bandwidth, dense f16 tensor rate).

use crate::{DType, Hardware, Model};
use std::borrow::Cow;

/// (name, layers, hidden, heads, kv heads, ffn, vocab, tied, ffn matrices, experts, active)
type Row = (
    &'static str,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    bool,
    u64,
    u64,
    u64,
);

const MODELS: &[Row] = &[
    ("gpt-3-175b", 96, 12288, 96, 96, 49152, 50257, true, 2, 1, 1),
    ("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, false, 3, 1, 1),
    (
        "llama-2-13b",
        40,
        5120,
        40,
        40,
        13824,
        32000,
        false,
        3,
        1,
        1,
    ),
    ("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, false, 3, 1, 1),
    ("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, false, 3, 1, 1),
    (
        "llama-3-70b",
        80,
        8192,
        64,
        8,
        28672,
        128256,
        false,
        3,
        1,
        1,
    ),
    (
        "llama-3-405b",
        126,
        16384,
        128,
        8,
        53248,
        128256,
        false,
        3,
        1,
        1,
    ),
    ("mistral-7b", 32, 4096, 32, 8, 14336, 32000, false, 3, 1, 1),
    (
        "mixtral-8x7b",
        32,
        4096,
        32,
        8,
        14336,
        32000,
        false,
        3,
        8,
        2,
    ),
    ("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, false, 3, 1, 1),
    (
        "qwen2.5-72b",
        80,
        8192,
        64,
        8,
        29568,
        152064,
        false,
        3,
        1,
        1,
    ),
    ("smollm2-135m", 30, 576, 9, 3, 1536, 49152, true, 3, 1, 1),
    ("smollm2-360m", 32, 960, 15, 5, 2560, 49152, true, 3, 1, 1),
    ("smollm2-1.7b", 24, 2048, 32, 32, 8192, 49152, true, 3, 1, 1),
    (
        "tinyllama-1.1b",
        22,
        2048,
        32,
        4,
        5632,
        32000,
        false,
        3,
        1,
        1,
    ),
];

/// Names `model` knows.
pub fn model_names() -> Vec<&'static str> {
    MODELS.iter().map(|r| r.0).collect()
}

/// A preset by name (`llama-3-8b`; `llama-3.1-8b` and friends too).
pub fn model(name: &str) -> Option<Model> {
    let n = name.to_ascii_lowercase().replace(['_', ' '], "-");
    let n = n
        .replace("llama-3.1-", "llama-3-")
        .replace("llama-3.2-", "llama-3-")
        .replace("llama-3.3-", "llama-3-");
    let &(name, layers, hidden, heads, kv_heads, ffn, vocab, tied, ffn_mats, experts, active) =
        MODELS.iter().find(|r| r.0 == n)?;
    Some(Model {
        name: name.into(),
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim: hidden / heads,
        ffn,
        vocab,
        tied,
        ffn_mats,
        experts,
        active_experts: active,
        window: None,
    })
}

const DTYPES: &[DType] = &[
    DType {
        name: Cow::Borrowed("f32"),
        bits: 32.0,
    },
    DType {
        name: Cow::Borrowed("f16"),
        bits: 16.0,
    },
    DType {
        name: Cow::Borrowed("bf16"),
        bits: 16.0,
    },
    DType {
        name: Cow::Borrowed("fp8"),
        bits: 8.0,
    },
    DType {
        name: Cow::Borrowed("int8"),
        bits: 8.0,
    },
    // ggml blocks: 32 weights + an f16 scale (and min for _1 types).
    DType {
        name: Cow::Borrowed("q8_0"),
        bits: 8.5,
    },
    DType {
        name: Cow::Borrowed("q5_1"),
        bits: 6.0,
    },
    DType {
        name: Cow::Borrowed("q5_0"),
        bits: 5.5,
    },
    DType {
        name: Cow::Borrowed("q4_1"),
        bits: 5.0,
    },
    DType {
        name: Cow::Borrowed("q4_0"),
        bits: 4.5,
    },
    // K-quants: 256-weight super-blocks.
    DType {
        name: Cow::Borrowed("q6_k"),
        bits: 6.5625,
    },
    DType {
        name: Cow::Borrowed("q5_k"),
        bits: 5.5,
    },
    DType {
        name: Cow::Borrowed("q4_k"),
        bits: 4.5,
    },
    // A mix (mostly Q4_K, some Q6_K): llama.cpp's figure for Llama 2 7B.
    DType {
        name: Cow::Borrowed("q4_k_m"),
        bits: 4.85,
    },
    DType {
        name: Cow::Borrowed("q5_k_m"),
        bits: 5.69,
    },
];

pub fn dtype_names() -> Vec<&'static str> {
    DTYPES.iter().map(|d| d.name.as_ref()).collect()
}

pub fn dtype(name: &str) -> Option<DType> {
    let n = name.to_ascii_lowercase();
    DTYPES.iter().find(|d| d.name == n).cloned()
}

/// (name, memory GB, bandwidth GB/s, dense f16 TFLOP/s, dense int8 TOP/s
/// where the device has an int8 matrix unit; datasheet figures without
/// sparsity)
const HARDWARE: &[(&str, f64, f64, f64, Option<f64>)] = &[
    ("a100-40gb", 40.0, 1555.0, 312.0, Some(624.0)),
    ("a100-80gb", 80.0, 2039.0, 312.0, Some(624.0)),
    ("h100-sxm", 80.0, 3350.0, 989.0, Some(1979.0)),
    ("h100-pcie", 80.0, 2000.0, 756.0, Some(1513.0)),
    ("h200", 141.0, 4800.0, 989.0, Some(1979.0)),
    ("l4", 24.0, 300.0, 121.0, Some(242.5)),
    ("rtx-4090", 24.0, 1008.0, 165.2, Some(660.6)),
    ("m2-max", 96.0, 400.0, 13.6, None),
    ("m2-ultra", 192.0, 800.0, 27.2, None),
    ("m3-max", 128.0, 400.0, 16.4, None),
];

pub fn hardware_names() -> Vec<&'static str> {
    HARDWARE.iter().map(|h| h.0).collect()
}

pub fn hardware(name: &str) -> Option<Hardware> {
    let n = name.to_ascii_lowercase();
    let &(name, memory_gb, bandwidth_gbs, tflops, int8_tops) =
        HARDWARE.iter().find(|h| h.0 == n)?;
    Some(Hardware {
        name: name.into(),
        memory_gb,
        bandwidth_gbs,
        tflops,
        int8_tops,
        attention_tflops: None,
        decode_attention_tflops: None,
        llc_bytes: None,
        llc_bandwidth_gbs: None,
        step_fixed_s: 0.0,
        prefill_token_layer_s: 0.0,
        serial_phases: false,
    })
}
