//! Fuzz targets for the parsers of outside input in hasten-model (see
//! `hasten_model::fuzz`): GGUF headers with their config and tokenizer,
//! safetensors headers, `tokenizer.json`, and chat templates. Each must
//! return an error, never panic. CI runs a short campaign;
//! `HASTEN_FUZZ_ITERS=N` runs a longer one. The committed corpus is
//! regenerated with `cargo test -p hasten-model --test fuzz -- --ignored`.

use hasten_kernels::GgmlType;
use hasten_model::chat::{ChatTemplate, Message};
use hasten_model::config::Config;
use hasten_model::fuzz;
use hasten_model::gguf::{GgufFile, GgufWriter, Value};
use hasten_model::safetensors::SafetensorsDir;
use hasten_model::testing::{testdata_dir, Fixture};
use hasten_model::tokenizer::Tokenizer;
use std::path::PathBuf;

#[test]
fn gguf_headers_configs_and_tokenizers() {
    let seeds = fuzz::corpus("gguf");
    fuzz::run("gguf", &seeds, fuzz::iterations(3000), |b| {
        if let Ok(f) = GgufFile::from_bytes("fuzz.gguf", b.to_vec()) {
            let _ = Config::from_gguf(&f.header, &f.name, 300);
            if let Ok(t) = Tokenizer::from_gguf(&f.header, &f.name) {
                let _ = t.encode("Hello <s> wörld 123", true, true);
            }
        }
    });
}

#[test]
fn safetensors_headers() {
    let seeds = fuzz::corpus("safetensors");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("model.safetensors");
    fuzz::run("safetensors", &seeds, fuzz::iterations(1500), |b| {
        std::fs::write(&file, b).unwrap();
        if let Ok(s) = SafetensorsDir::open(dir.path()) {
            let _ = s.tensor_names().count();
        }
    });
}

#[test]
fn tokenizer_json() {
    let seeds = fuzz::corpus("tokenizer-json");
    fuzz::run("tokenizer-json", &seeds, fuzz::iterations(500), |b| {
        let Ok(text) = std::str::from_utf8(b) else {
            return;
        };
        if let Ok(t) = Tokenizer::from_hf_json(text, Some("<s>"), &["</s>".into()], true) {
            let _ = t.encode("Hello wörld 123", true, false);
        }
    });
}

#[test]
fn chat_templates() {
    let seeds = fuzz::corpus("chat-template");
    let msgs = [
        Message::new("system", "Be brief."),
        Message::new("user", "Hi {{ there }} {% raw %}"),
        Message::new("assistant", "Hello."),
        Message::new("user", "Again?"),
    ];
    fuzz::run("chat-template", &seeds, fuzz::iterations(1500), |b| {
        let Ok(src) = std::str::from_utf8(b) else {
            return;
        };
        if let Ok(t) = ChatTemplate::new(src, "<s>", "</s>") {
            let _ = t.render(&msgs, true);
            let _ = t.render_continuing(&msgs[..3]);
        }
    });
}

fn corpus_dir(target: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes the seed inputs: a small GGUF (llama config, the first 300
/// tokens of the llama-spm vocabulary, two tensors), a micro model's
/// safetensors, that tokenizer as tokenizer.json, and three chat templates.
#[test]
#[ignore]
fn regenerate_corpus() {
    let vocab =
        GgufFile::open(&testdata_dir().join("tokenizer/ggml-vocab-llama-spm.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in &vocab.header.metadata {
        let v = match v {
            Value::Array(a) if k.starts_with("tokenizer.ggml.") => {
                Value::Array(a[..300.min(a.len())].to_vec())
            }
            v => v.clone(),
        };
        if k.starts_with("tokenizer.") && !k.starts_with("tokenizer.chat_template") {
            w.kv(k, v);
        }
    }
    w.kv("general.architecture", Value::String("llama".into()))
        .kv("llama.embedding_length", Value::U32(32))
        .kv("llama.block_count", Value::U32(1))
        .kv("llama.attention.head_count", Value::U32(2))
        .kv("llama.attention.head_count_kv", Value::U32(1))
        .kv("llama.feed_forward_length", Value::U32(64))
        .kv("llama.context_length", Value::U32(128))
        .kv("llama.vocab_size", Value::U32(300));
    w.tensor("token_embd.weight", &[32, 2], GgmlType::F32, vec![0u8; 256]);
    w.tensor("output_norm.weight", &[32], GgmlType::Q8_0, vec![0u8; 34]);
    let bytes = w.to_bytes();
    let f = GgufFile::from_bytes("small.gguf", bytes.clone()).unwrap();
    let tok = Tokenizer::from_gguf(&f.header, &f.name).unwrap();
    std::fs::write(corpus_dir("gguf").join("small.gguf"), &bytes).unwrap();
    std::fs::write(
        corpus_dir("tokenizer-json").join("small.json"),
        tok.to_hf_json().unwrap(),
    )
    .unwrap();

    let micro = Fixture {
        dim: 32,
        n_layers: 1,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 16,
        ffn_dim: 64,
        vocab_size: 64,
        context_length: 64,
        ..Fixture::tiny(GgmlType::F32)
    };
    let dir = tempfile::tempdir().unwrap();
    micro.write_safetensors(dir.path()).unwrap();
    std::fs::copy(
        dir.path().join("model.safetensors"),
        corpus_dir("safetensors").join("micro.safetensors"),
    )
    .unwrap();

    for name in [
        "google-gemma-2-2b-it.jinja",
        "Qwen-Qwen2.5-7B-Instruct.jinja",
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    ] {
        std::fs::copy(
            testdata_dir().join("chat-templates").join(name),
            corpus_dir("chat-template").join(name),
        )
        .unwrap();
    }
}
