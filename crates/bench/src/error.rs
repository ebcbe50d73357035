//! The bench crate's one error type.

/// What can go wrong before or around a run (a failed request is not an
/// error: it is a [`crate::Record`] with `ok: false`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(String),
    #[error("reading {path}: {message}")]
    Input { path: String, message: String },
    #[error("the probe request (one short request before the run) failed: {0}")]
    Probe(hasten_client::Error),
    #[error("writing {path}: {message}")]
    Output { path: String, message: String },
}

pub type Result<T> = std::result::Result<T, Error>;
