//! Opening a model from a path: a `.gguf` file, or a Hugging Face checkpoint
//! directory (`config.json`, safetensors, `tokenizer.json`,
//! `tokenizer_config.json`). Returns the model, its tokenizer and its chat
//! template, ready to run.

use crate::chat::ChatTemplate;
use crate::config::Config;
use crate::gguf::GgufFile;
use crate::llama::{Model, Naming};
use crate::safetensors::{read_text, SafetensorsDir};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};
use std::path::Path;

/// Everything needed to turn text into text.
#[derive(Debug)]
pub struct LoadedModel {
    pub model: Model,
    pub tokenizer: Tokenizer,
    pub template: Option<ChatTemplate>,
    /// Where it came from, for logs.
    pub name: String,
    /// Size of the weight files in bytes.
    pub file_bytes: u64,
    /// How the weights are stored, for people: a GGUF file's dominant
    /// matrix type and bits per weight ("Q4_0, 4.63 bits/weight"), or
    /// "safetensors".
    pub format: String,
}

impl LoadedModel {
    /// Uses `source` as the chat template instead of the model's (vLLM's
    /// and llama-server's `--chat-template`), with the vocabulary's BOS and
    /// EOS texts.
    pub fn set_template(&mut self, source: &str) -> Result<()> {
        let t = &self.tokenizer;
        let text = |id: Option<u32>| id.map(|i| t.piece(i)).unwrap_or_default();
        self.template = Some(ChatTemplate::new(
            source,
            &text(t.bos),
            &text(t.eos.first().copied()),
        )?);
        Ok(())
    }
}

/// Loads the model at `path` (a GGUF file, or a checkpoint directory / a
/// `.safetensors` file inside one).
pub fn load(path: &Path) -> Result<LoadedModel> {
    load_with(path, None)
}

/// [`load`], run at a context of `ctx_size` tokens instead of the trained
/// one (`--ctx-size`; at most the trained context: RoPE scaling in the
/// file already says how far the model reaches). The context decides
/// which LongRoPE factors apply, as in llama.cpp.
pub fn load_with(path: &Path, ctx_size: Option<usize>) -> Result<LoadedModel> {
    let meta = std::fs::metadata(path).map_err(|err| Error::Io {
        path: path.to_owned(),
        err,
    })?;
    if meta.is_dir() {
        return load_hf_dir(path, ctx_size);
    }
    if path.extension().is_some_and(|e| e == "safetensors") {
        return load_hf_dir(path.parent().unwrap_or(Path::new(".")), ctx_size);
    }
    load_gguf(path, ctx_size)
}

/// Sets the context to run at, refusing one above the trained context.
fn run_context(mut config: Config, ctx_size: Option<usize>, file: &str) -> Result<Config> {
    match ctx_size {
        None => {}
        Some(n) if n >= 1 && n <= config.context_length => config.context_length = n,
        Some(n) => {
            return Err(Error::Config {
                file: file.to_owned(),
                what: format!(
                    "a context of {n} tokens is outside 1..={} (the model's trained context)",
                    config.context_length
                ),
            })
        }
    }
    Ok(config)
}

fn load_gguf(path: &Path, ctx_size: Option<usize>) -> Result<LoadedModel> {
    let f = GgufFile::open(path)?;
    let tokenizer = Tokenizer::from_gguf(&f.header, &f.name)?;
    let config = Config::from_gguf(&f.header, &f.name, tokenizer.vocab_size())?;
    let config = run_context(config, ctx_size, &f.name)?;
    if tokenizer.vocab_size() > config.vocab_size {
        return Err(Error::Config {
            file: f.name.clone(),
            what: format!(
                "tokenizer has {} tokens but the model only {}",
                tokenizer.vocab_size(),
                config.vocab_size
            ),
        });
    }
    let model = Model::load(&f, config, Naming::Gguf)?;
    let text = |id: Option<u32>| {
        id.map(|i| String::from_utf8_lossy(&piece_text(&tokenizer, i)).into_owned())
            .unwrap_or_default()
    };
    let template = match f
        .header
        .get("tokenizer.chat_template")
        .and_then(|v| v.as_str())
    {
        Some(src) => Some(ChatTemplate::new(
            src,
            &text(tokenizer.bos),
            &text(tokenizer.eos.first().copied()),
        )?),
        None => None,
    };
    let file_bytes = f.bytes().as_slice().len() as u64;
    let h = &f.header;
    let format = match (h.dominant_matmul_type(), h.bits_per_weight()) {
        (Some(t), Some(b)) => format!("{}, {b:.2} bits/weight", t.name()),
        _ => "GGUF".to_owned(),
    };
    Ok(LoadedModel {
        model,
        tokenizer,
        template,
        name: f.name,
        file_bytes,
        format,
    })
}

/// The vocabulary text of a special token (its bytes render empty).
fn piece_text(t: &Tokenizer, id: u32) -> Vec<u8> {
    t.piece(id).into_bytes()
}

fn load_hf_dir(dir: &Path, ctx_size: Option<usize>) -> Result<LoadedModel> {
    let name = dir.display().to_string();
    let config_path = dir.join("config.json");
    let config = Config::from_hf_json(
        &read_text(&config_path)?,
        &config_path.display().to_string(),
    )?;
    let config = run_context(config, ctx_size, &config_path.display().to_string())?;
    let st = SafetensorsDir::open(dir)?;
    let model = Model::load(&st, config, Naming::HuggingFace)?;
    let tc_path = dir.join("tokenizer_config.json");
    let tc: serde_json::Value = if tc_path.exists() {
        serde_json::from_str(&read_text(&tc_path)?).map_err(|e| Error::Malformed {
            file: tc_path.display().to_string(),
            what: e.to_string(),
        })?
    } else {
        serde_json::Value::Null
    };
    let token_str = |key: &str| -> Option<String> {
        match tc.get(key)? {
            serde_json::Value::String(s) => Some(s.clone()),
            v => v.get("content")?.as_str().map(str::to_owned),
        }
    };
    let bos = token_str("bos_token");
    let eos: Vec<String> = token_str("eos_token").into_iter().collect();
    let add_bos = tc
        .get("add_bos_token")
        .and_then(|v| v.as_bool())
        .unwrap_or(bos.is_some());
    let tj = dir.join("tokenizer.json");
    let tokenizer = Tokenizer::from_hf_json(&read_text(&tj)?, bos.as_deref(), &eos, add_bos)?;
    let template_src = match tc.get("chat_template") {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        // A list of named templates: take "default".
        Some(serde_json::Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|t| t.get("template")?.as_str().map(str::to_owned)),
        _ => None,
    };
    let template = match template_src {
        Some(src) => Some(ChatTemplate::new(
            &src,
            bos.as_deref().unwrap_or(""),
            eos.first().map_or("", String::as_str),
        )?),
        None => None,
    };
    let file_bytes = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    Ok(LoadedModel {
        model,
        tokenizer,
        template,
        name,
        file_bytes,
        format: "safetensors".to_owned(),
    })
}
