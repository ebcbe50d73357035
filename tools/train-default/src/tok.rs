//! The default model's tokenizer: byte-level BPE (GPT-2 pre-tokenizer)
//! trained on the corpus with the `tokenizers` crate, and its GGUF keys.

use crate::corpus::SPECIALS;
use anyhow::{anyhow, Result};
use hasten_model::gguf::{GgufWriter, Value};
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, Model, TokenizerBuilder, TokenizerImpl};

pub type Tok = TokenizerImpl<BPE, NormalizerWrapper, ByteLevel, PostProcessorWrapper, ByteLevel>;

pub fn train(files: &[String], vocab: usize) -> Result<Tok> {
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab)
        .min_frequency(2)
        .show_progress(false)
        .special_tokens(
            SPECIALS
                .iter()
                .map(|s| AddedToken::from(*s, true))
                .collect(),
        )
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut tk: Tok = TokenizerBuilder::new()
        .with_model(BPE::default())
        .with_normalizer(None)
        .with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)))
        .with_post_processor(None)
        .with_decoder(Some(ByteLevel::default()))
        .build()
        .map_err(|e| anyhow!("{e}"))?;
    tk.train_from_files(&mut trainer, files.to_vec())
        .map_err(|e| anyhow!("{e}"))?;
    Ok(tk)
}

/// Writes `tokenizer.ggml.*` (model `gpt2`, pre `gpt-2`) and the template.
pub fn gguf_keys(tk: &Tok, w: &mut GgufWriter, chat_template: &str) -> Result<()> {
    let model = tk.get_model();
    let n = model.get_vocab_size();
    let mut tokens = vec![String::new(); n];
    for (s, id) in model.get_vocab() {
        tokens[id as usize] = s;
    }
    // Merges from the serialized model (strings "a b" or pairs, by version).
    let json: serde_json::Value =
        serde_json::from_str(&tk.to_string(false).map_err(|e| anyhow!("{e}"))?)?;
    let merges: Vec<String> = json["model"]["merges"]
        .as_array()
        .ok_or_else(|| anyhow!("no merges in the trained tokenizer"))?
        .iter()
        .map(|m| match m {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(p) => format!(
                "{} {}",
                p[0].as_str().unwrap_or(""),
                p[1].as_str().unwrap_or("")
            ),
            _ => String::new(),
        })
        .collect();
    let id = |s: &str| {
        model
            .token_to_id(s)
            .ok_or_else(|| anyhow!("{s} not in the vocabulary"))
    };
    let types: Vec<Value> = tokens
        .iter()
        .map(|t| Value::I32(if SPECIALS.contains(&t.as_str()) { 3 } else { 1 }))
        .collect();
    let strs = |v: Vec<String>| Value::Array(v.into_iter().map(Value::String).collect());
    w.kv("tokenizer.ggml.model", Value::String("gpt2".into()))
        .kv("tokenizer.ggml.pre", Value::String("gpt-2".into()))
        .kv("tokenizer.ggml.tokens", strs(tokens))
        .kv("tokenizer.ggml.token_type", Value::Array(types))
        .kv("tokenizer.ggml.merges", strs(merges))
        .kv(
            "tokenizer.ggml.eos_token_id",
            Value::U32(id(crate::corpus::END)?),
        )
        .kv(
            "tokenizer.ggml.padding_token_id",
            Value::U32(id(crate::corpus::END)?),
        )
        .kv("tokenizer.ggml.add_bos_token", Value::Bool(false))
        .kv(
            "tokenizer.chat_template",
            Value::String(chat_template.into()),
        );
    Ok(())
}
