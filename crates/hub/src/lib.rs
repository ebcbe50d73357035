//! hasten-hub: `--model hf:OWNER/REPO[:QUANT|:FILE]` to a local path.
//!
//! Files come through the `hf-hub` crate into the standard Hugging Face
//! cache (`$HF_HOME/hub`, shared with Python tools), with a progress bar,
//! resumed downloads after a dropped connection, `HF_TOKEN` for gated
//! repositories and `HF_ENDPOINT` for mirrors. Offline (`HF_HUB_OFFLINE=1`)
//! only the cache is read.
//!
//! A GGUF repository needs a quantization (`:Q4_K_M`, matched against the
//! file names) or a file name (`:model-q8_0.gguf`) unless it holds one GGUF
//! file; a safetensors repository yields its snapshot directory (config,
//! tokenizer, weights and shards).

use hf_hub::api::sync::{ApiBuilder, ApiRepo};
use hf_hub::Cache;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0:?} is not a model reference: use hf:OWNER/REPO, hf:OWNER/REPO:QUANT or hf:OWNER/REPO:FILE.gguf")]
    BadRef(String),
    #[error("{repo} needs a Hugging Face token: it is gated or private. Accept its terms on the Hub, then set HF_TOKEN")]
    Unauthorized { repo: String },
    #[error("{repo}: {what} was not found on the Hub")]
    NotFound { repo: String, what: String },
    #[error("offline (HF_HUB_OFFLINE): {repo} {what} is not in the cache at {cache}")]
    NotCached {
        repo: String,
        what: String,
        cache: PathBuf,
    },
    #[error("{repo} has several GGUF files; choose one with :QUANT or :FILE ({choices})")]
    Ambiguous { repo: String, choices: String },
    #[error(
        "{repo} has neither GGUF files nor a safetensors checkpoint (config.json + *.safetensors)"
    )]
    NoModel { repo: String },
    #[error("downloading {repo}: {message}")]
    Download { repo: String, message: String },
    #[error("cache: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

/// A parsed `hf:` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRef {
    pub repo: String,
    /// A quantization name (`Q4_K_M`) or an exact file name.
    pub pick: Option<String>,
}

impl HubRef {
    /// `None` when `s` is not an `hf:` reference (a local path).
    pub fn parse(s: &str) -> Option<Result<HubRef>> {
        let rest = s.strip_prefix("hf:")?;
        let (repo, pick) = match rest.split_once(':') {
            Some((r, p)) => (r, Some(p.to_owned())),
            None => (rest, None),
        };
        let ok = repo.split('/').count() == 2
            && repo.split('/').all(|p| !p.is_empty())
            && pick.as_deref() != Some("");
        Some(if ok {
            Ok(HubRef {
                repo: repo.to_owned(),
                pick,
            })
        } else {
            Err(Error::BadRef(s.to_owned()))
        })
    }
}

/// Where and how to fetch (defaults from the environment, as the Python
/// `huggingface_hub` reads it).
#[derive(Debug, Clone)]
pub struct Options {
    pub endpoint: String,
    pub token: Option<String>,
    /// The hub cache folder (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`).
    pub cache: PathBuf,
    pub offline: bool,
    pub progress: bool,
    /// Retries after a failed or dropped transfer (each resumes where it stopped).
    pub retries: usize,
}

impl Options {
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let cache = var("HF_HUB_CACHE").map(PathBuf::from).unwrap_or_else(|| {
            var("HF_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(var("HOME").unwrap_or_else(|| ".".into()))
                        .join(".cache")
                        .join("huggingface")
                })
                .join("hub")
        });
        Options {
            endpoint: var("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".into()),
            token: var("HF_TOKEN").or_else(|| var("HUGGING_FACE_HUB_TOKEN")),
            cache,
            offline: var("HF_HUB_OFFLINE").is_some_and(|v| v != "0" && v.to_lowercase() != "false"),
            progress: true,
            retries: 5,
        }
    }
}

fn is_gguf(f: &str) -> bool {
    f.to_lowercase().ends_with(".gguf")
}

/// The GGUF file among `files` that `pick` names (exactly, or as the
/// quantization part of the name); the only one when `pick` is `None`.
pub fn choose_gguf(repo: &str, files: &[String], pick: Option<&str>) -> Result<Option<String>> {
    let ggufs: Vec<&String> = files.iter().filter(|f| is_gguf(f)).collect();
    let pick = match pick {
        None if ggufs.len() == 1 => return Ok(Some(ggufs[0].clone())),
        None if ggufs.is_empty() => return Ok(None),
        None => {
            return Err(Error::Ambiguous {
                repo: repo.into(),
                choices: ggufs
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
        Some(p) => p,
    };
    if let Some(f) = ggufs.iter().find(|f| f.as_str() == pick) {
        return Ok(Some((*f).clone()));
    }
    let q = pick.to_lowercase();
    let hits: Vec<&&String> = ggufs
        .iter()
        .filter(|f| {
            let stem = f.to_lowercase();
            let stem = stem.trim_end_matches(".gguf");
            // The quant is the last `-` or `.` separated part(s) of the name.
            stem.ends_with(&format!("-{q}"))
                || stem.ends_with(&format!(".{q}"))
                || stem.ends_with(&format!("_{q}"))
        })
        .collect();
    match hits.as_slice() {
        [one] => Ok(Some((**one).clone())),
        [] => Err(Error::NotFound {
            repo: repo.into(),
            what: format!(
                "a GGUF file for {pick:?} (files: {})",
                ggufs
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
        many => Err(Error::Ambiguous {
            repo: repo.into(),
            choices: many
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Files of a safetensors checkpoint to fetch, from the repository listing.
fn checkpoint_files(files: &[String]) -> Option<Vec<String>> {
    let has = |f: &str| files.iter().any(|x| x == f);
    if !has("config.json") || !files.iter().any(|f| f.ends_with(".safetensors")) {
        return None;
    }
    let mut want: Vec<String> = [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "model.safetensors.index.json",
    ]
    .iter()
    .filter(|f| has(f))
    .map(|f| f.to_string())
    .collect();
    want.extend(
        files
            .iter()
            .filter(|f| f.ends_with(".safetensors") && !f.contains('/'))
            .cloned(),
    );
    Some(want)
}

fn download_error(repo: &str, e: hf_hub::api::sync::ApiError) -> Error {
    use hf_hub::api::sync::ApiError;
    let status = match &e {
        ApiError::RequestError(r) => match r.as_ref() {
            ureq::Error::Status(code, _) => Some(*code),
            ureq::Error::Transport(_) => None,
        },
        _ => None,
    };
    match status {
        Some(401 | 403) => Error::Unauthorized { repo: repo.into() },
        Some(404) => Error::NotFound {
            repo: repo.into(),
            what: "the repository or file".into(),
        },
        _ => Error::Download {
            repo: repo.into(),
            message: e.to_string(),
        },
    }
}

/// The cached snapshot's files (offline listing).
fn cached_files(cache: &Path, repo: &str) -> Option<(PathBuf, Vec<String>)> {
    let dir = cache.join(format!("models--{}", repo.replace('/', "--")));
    let commit = std::fs::read_to_string(dir.join("refs").join("main")).ok()?;
    let snap = dir.join("snapshots").join(commit.trim());
    let files = std::fs::read_dir(&snap)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    Some((snap, files))
}

/// Resolves `r` to a local GGUF file or checkpoint directory.
pub fn fetch(r: &HubRef, o: &Options) -> Result<PathBuf> {
    let repo = &r.repo;
    if o.offline {
        let not_cached = |what: &str| Error::NotCached {
            repo: repo.clone(),
            what: what.into(),
            cache: o.cache.clone(),
        };
        let (snap, files) =
            cached_files(&o.cache, repo).ok_or_else(|| not_cached("(no snapshot)"))?;
        if let Some(f) = choose_gguf(repo, &files, r.pick.as_deref())? {
            return Ok(snap.join(f));
        }
        return checkpoint_files(&files)
            .map(|_| snap)
            .ok_or_else(|| not_cached("a model"));
    }
    let api = ApiBuilder::from_cache(Cache::new(o.cache.clone()))
        .with_endpoint(o.endpoint.clone())
        .with_token(o.token.clone())
        .with_progress(o.progress)
        .with_retries(o.retries)
        .build()
        .map_err(|e| download_error(repo, e))?;
    let handle: ApiRepo = api.model(repo.clone());
    // An exact file name needs no listing.
    if let Some(p) = r.pick.as_deref().filter(|p| is_gguf(p)) {
        return handle.get(p).map_err(|e| download_error(repo, e));
    }
    let info = handle.info().map_err(|e| download_error(repo, e))?;
    let files: Vec<String> = info.siblings.into_iter().map(|s| s.rfilename).collect();
    if let Some(f) = choose_gguf(repo, &files, r.pick.as_deref())? {
        return handle.get(&f).map_err(|e| download_error(repo, e));
    }
    let want = checkpoint_files(&files).ok_or_else(|| Error::NoModel { repo: repo.clone() })?;
    let mut dir = None;
    for f in &want {
        let p = handle.get(f).map_err(|e| download_error(repo, e))?;
        dir = p.parent().map(Path::to_path_buf);
    }
    dir.ok_or_else(|| Error::NoModel { repo: repo.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse() {
        assert!(HubRef::parse("models/x.gguf").is_none());
        let r = HubRef::parse("hf:a/b:Q4_K_M").unwrap().unwrap();
        assert_eq!(
            (r.repo.as_str(), r.pick.as_deref()),
            ("a/b", Some("Q4_K_M"))
        );
        assert_eq!(HubRef::parse("hf:a/b").unwrap().unwrap().pick, None);
        for bad in ["hf:a", "hf:a/b/c", "hf:/b", "hf:a/b:"] {
            assert!(HubRef::parse(bad).unwrap().is_err(), "{bad}");
        }
    }

    #[test]
    fn quantizations_pick_one_file() {
        let files: Vec<String> = ["README.md", "m-Q4_K_M.gguf", "m-Q8_0.gguf", "m-Q4_K_S.gguf"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            choose_gguf("r", &files, Some("q4_k_m")).unwrap().as_deref(),
            Some("m-Q4_K_M.gguf")
        );
        assert_eq!(
            choose_gguf("r", &files, Some("m-Q8_0.gguf"))
                .unwrap()
                .as_deref(),
            Some("m-Q8_0.gguf")
        );
        assert!(matches!(
            choose_gguf("r", &files, None),
            Err(Error::Ambiguous { .. })
        ));
        assert!(matches!(
            choose_gguf("r", &files, Some("Q2_K")),
            Err(Error::NotFound { .. })
        ));
        assert_eq!(
            choose_gguf("r", &files[..2], None).unwrap().as_deref(),
            Some("m-Q4_K_M.gguf")
        );
        assert_eq!(choose_gguf("r", &files[..1], None).unwrap(), None);
    }
}
