//! Where `--model` points: a local GGUF file or checkpoint directory, a
//! Hugging Face Hub reference (`hf:OWNER/REPO[:QUANT|:FILE]`, fetched into
//! the standard HF cache by `hasten-hub`), or, with no `--model`, the demo
//! model built into the binary (written once to the user's cache directory,
//! so it works from any working directory and after `cargo install`).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The default model's GGUF, trained by `tools/train-default` (see
/// `crates/cli/assets/MODEL_CARD.md`).
const DEFAULT_GGUF: &[u8] = include_bytes!("../assets/hasten-default.gguf");
pub const DEFAULT_NAME: &str = "hasten-default";

/// FNV-1a, to name the cached copy by content (a changed model gets a new file).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("HASTEN_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("hasten");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => PathBuf::from(h).join(".cache").join("hasten"),
        None => std::env::temp_dir().join("hasten"),
    }
}

/// The built-in model as a file (written on first use; atomic rename, so
/// concurrent first runs are safe).
pub fn default_model_path() -> Result<PathBuf> {
    let dir = cache_dir();
    let path = dir.join(format!("{DEFAULT_NAME}-{:016x}.gguf", fnv(DEFAULT_GGUF)));
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == DEFAULT_GGUF.len() as u64) {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{DEFAULT_NAME}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, DEFAULT_GGUF).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The model file or directory to load, and the name to serve it under.
pub fn resolve(model: Option<&Path>) -> Result<(PathBuf, String)> {
    match model {
        None => Ok((default_model_path()?, DEFAULT_NAME.to_owned())),
        Some(p) => {
            if let Some(r) = p.to_str().and_then(hasten_hub::HubRef::parse) {
                let r = r?;
                let path = hasten_hub::fetch(&r, &hasten_hub::Options::from_env())?;
                let name = match &r.pick {
                    Some(q) => format!("{}:{q}", r.repo),
                    None => r.repo.clone(),
                };
                return Ok((path, name));
            }
            let name = p
                .file_stem()
                .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
            Ok((p.to_owned(), name))
        }
    }
}
