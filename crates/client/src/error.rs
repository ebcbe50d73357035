//! The client's one error type. Timeouts are distinct variants; HTTP
//! errors keep the server's error body; a stream that fails after output
//! began says so (the text received so far stays on the stream).

use hasten_protocol::ErrorBody;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid client configuration: {0}")]
    Config(String),
    #[error("the request cannot be sent: {0}")]
    Request(String),
    #[error("could not connect to {url}: {message}")]
    Connect { url: String, message: String },
    /// The server's TLS certificate did not verify (not retried: it will
    /// not heal by itself).
    #[error("the TLS certificate of {url} was not accepted: {message} (for a private CA or a self-signed server, trust its certificate: `--ca-cert FILE`)")]
    Certificate { url: String, message: String },
    #[error("connecting took longer than {0:?}")]
    ConnectTimeout(Duration),
    #[error("no output within {0:?} of sending the request")]
    FirstTokenTimeout(Duration),
    #[error("the stream stalled: nothing for {0:?} after output began")]
    IdleTimeout(Duration),
    #[error("the request took longer than its total limit of {0:?}")]
    TotalTimeout(Duration),
    /// The server answered with an error status.
    #[error("HTTP {status}: {}", message(.body, .raw))]
    Status {
        status: u16,
        /// OpenAI's error shape, when the body had it.
        body: Option<Box<ErrorBody>>,
        /// The body as sent (truncated to 4 KiB).
        raw: String,
        /// The server's `Retry-After`/`retry-after-ms`.
        retry_after: Option<Duration>,
    },
    /// An `{"error": ...}` event inside a stream.
    #[error("the server reported an error mid-stream: {}", .0.error.message)]
    Stream(Box<ErrorBody>),
    /// The connection broke or the body ended before `[DONE]` / a final
    /// `finish_reason`, and the break policy did not (or could not) recover.
    #[error("the stream broke after output began ({reason}); the text received so far is kept")]
    Broken { reason: String },
    /// The body was not what the protocol says.
    #[error("unexpected response: {0}")]
    Protocol(String),
}

fn message(body: &Option<Box<ErrorBody>>, raw: &str) -> String {
    match body {
        Some(b) => b.error.message.clone(),
        None => raw.chars().take(200).collect(),
    }
}

impl Error {
    /// A failed send: a certificate the client does not trust, or any
    /// other connection failure.
    pub(crate) fn connect(url: String, e: &reqwest::Error) -> Error {
        let message = crate::attempt::chain(e);
        // rustls says "invalid peer certificate: <why>".
        match message.split_once("invalid peer certificate: ") {
            Some((_, why)) => Error::Certificate {
                url,
                message: why.to_owned(),
            },
            None => Error::Connect { url, message },
        }
    }

    /// Whether retrying before any output is safe and may help.
    pub fn retryable(&self) -> bool {
        match self {
            Error::Connect { .. } | Error::ConnectTimeout(_) | Error::FirstTokenTimeout(_) => true,
            Error::Status { status, .. } => {
                matches!(status, 408 | 409 | 429) || (500..600).contains(status)
            }
            // Broken before output: nothing reached the user yet.
            Error::Broken { .. } => true,
            _ => false,
        }
    }

    /// The server's requested delay before a retry, if it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
