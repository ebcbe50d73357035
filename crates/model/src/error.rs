//! The one error type of hasten-model. Every variant names the file, key or
//! tensor it is about, so a user can tell what to fix.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{file}: not a GGUF file (magic {magic:?})")]
    BadMagic { file: String, magic: [u8; 4] },
    #[error("{file}: GGUF version {version} is not supported (2 and 3 are)")]
    UnsupportedVersion { file: String, version: u32 },
    #[error("{file}: truncated while reading {what} at byte {offset}")]
    Truncated {
        file: String,
        what: String,
        offset: usize,
    },
    #[error("{file}: {what}")]
    Malformed { file: String, what: String },
    #[error("{file}: metadata key {key:?} is not valid UTF-8")]
    InvalidUtf8 { file: String, key: String },
    #[error("{file}: tensor {tensor:?} has type {type_name}, which hasten does not support")]
    UnsupportedTensorType {
        file: String,
        tensor: String,
        type_name: String,
    },
    #[error("{file}: missing metadata key {key:?}")]
    MissingKey { file: String, key: String },
    #[error("{file}: metadata key {key:?} has the wrong type (want {want})")]
    KeyType {
        file: String,
        key: String,
        want: &'static str,
    },
    #[error("{file}: missing tensor {tensor:?}")]
    MissingTensor { file: String, tensor: String },
    #[error("{file}: tensor {tensor:?} has shape {got:?}, expected {want:?}")]
    TensorShape {
        file: String,
        tensor: String,
        got: Vec<usize>,
        want: Vec<usize>,
    },
    #[error(
        "{file}: architecture {arch:?} is not supported (supported: {})",
        crate::arch::Arch::names()
    )]
    UnknownArchitecture { file: String, arch: String },
    #[error("{file}: invalid model configuration: {what}")]
    Config { file: String, what: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("sequence needs {needed} positions but the context holds {max}")]
    ContextOverflow { needed: usize, max: usize },
    #[error("batch: {0}")]
    Batch(String),
    #[error("sampling: {0}")]
    Sampling(String),
    #[error(transparent)]
    Kernel(#[from] hasten_kernels::Error),
}

pub type Result<T> = std::result::Result<T, Error>;
