//! The one error type of hasten-server and the one place that turns errors
//! into HTTP statuses and OpenAI-shaped bodies
//! (`{"error": {"message", "type", "param", "code"}}`).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hasten_protocol::{ErrorBody, ErrorObject};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad parameter, malformed JSON, a wrong type or an out-of-range value.
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<String>,
        code: Option<&'static str>,
    },
    /// The prompt (with `max_tokens`) does not fit; `param` names the
    /// request field holding the prompt (`messages` or `prompt`).
    #[error("{message}")]
    ContextLength {
        message: String,
        param: Option<&'static str>,
    },
    #[error("invalid API key: send `Authorization: Bearer <key>`")]
    Unauthorized,
    #[error("{message}")]
    NotFound { message: String, code: &'static str },
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("the request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("{message}")]
    Overloaded {
        message: String,
        retry_after: Duration,
    },
    #[error("the model is still loading")]
    NotReady,
    /// Every connection slot is busy; only probes are answered (see `listen`).
    #[error("the server has too many open connections; retry shortly")]
    TooManyConnections,
    #[error("the request body did not arrive within {} s", .0.as_secs_f64())]
    BodyTimeout(Duration),
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("the request took longer than the server's limit of {} s", .0.as_secs_f64())]
    Timeout(Duration),
    /// Logged in full; the client sees only a generic message.
    #[error("internal error: {0}")]
    Internal(String),
    /// The model could not be loaded (start-up; ends `serve`).
    #[error("loading the model: {err}")]
    Load {
        path: std::path::PathBuf,
        err: hasten_model::Error,
    },
    /// The engine could not start (start-up; ends `serve`).
    #[error("starting the engine: {0}")]
    Engine(hasten_engine::Error),
    /// The caller's loader failed before a backend existed (resolving the
    /// model, a download): its error, kept whole.
    #[error(transparent)]
    Loader(Box<dyn std::error::Error + Send + Sync>),
    /// The TLS certificate or key could not be used (start-up or reload).
    #[error("TLS: {0}")]
    Tls(String),
    /// The listener failed.
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn bad(message: impl Into<String>, param: &str) -> Self {
        Error::BadRequest {
            message: message.into(),
            param: Some(param.to_owned()),
            code: None,
        }
    }

    pub fn unsupported(param: &str, why: &str) -> Self {
        Error::BadRequest {
            message: format!("unsupported parameter '{param}': {why}"),
            param: Some(param.to_owned()),
            code: Some("unsupported_parameter"),
        }
    }

    /// Names `field` (`messages` or `prompt`) as the culprit of an error
    /// about the prompt that did not know which endpoint it came from.
    pub fn in_prompt_field(self, field: &'static str) -> Self {
        match self {
            Error::ContextLength {
                message,
                param: None,
            } => Error::ContextLength {
                message,
                param: Some(field),
            },
            Error::BadRequest {
                message,
                param: Some(p),
                code,
            } if p == "prompt" => Error::BadRequest {
                message,
                param: Some(field.to_owned()),
                code,
            },
            e => e,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest { .. } | Error::ContextLength { .. } => StatusCode::BAD_REQUEST,
            Error::Unauthorized => StatusCode::UNAUTHORIZED,
            Error::NotFound { .. } => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Error::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::Overloaded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Error::NotReady | Error::ShuttingDown | Error::TooManyConnections => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Error::Timeout(_) | Error::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Error::Internal(_)
            | Error::Load { .. }
            | Error::Engine(_)
            | Error::Loader(_)
            | Error::Tls(_)
            | Error::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The OpenAI error object for this error.
    pub fn body(&self) -> ErrorObject {
        let (kind, param, code) = match self {
            Error::BadRequest { param, code, .. } => (
                "invalid_request_error",
                param.clone(),
                code.map(str::to_owned),
            ),
            Error::ContextLength { param, .. } => (
                "invalid_request_error",
                param.map(str::to_owned),
                Some("context_length_exceeded".to_owned()),
            ),
            Error::Unauthorized => (
                "invalid_request_error",
                None,
                Some("invalid_api_key".to_owned()),
            ),
            Error::NotFound { code, .. } => {
                ("invalid_request_error", None, Some((*code).to_owned()))
            }
            Error::MethodNotAllowed => ("invalid_request_error", None, None),
            Error::PayloadTooLarge { .. } => (
                "invalid_request_error",
                None,
                Some("request_too_large".to_owned()),
            ),
            Error::Overloaded { .. } => (
                "rate_limit_error",
                None,
                Some("server_overloaded".to_owned()),
            ),
            Error::NotReady | Error::ShuttingDown => {
                ("server_error", None, Some("unavailable".to_owned()))
            }
            Error::TooManyConnections => (
                "server_error",
                None,
                Some("too_many_connections".to_owned()),
            ),
            Error::Timeout(_) | Error::BodyTimeout(_) => {
                ("timeout_error", None, Some("request_timeout".to_owned()))
            }
            Error::Internal(_)
            | Error::Load { .. }
            | Error::Engine(_)
            | Error::Loader(_)
            | Error::Tls(_)
            | Error::Io(_) => ("server_error", None, None),
        };
        let message = match self {
            Error::Internal(_)
            | Error::Load { .. }
            | Error::Engine(_)
            | Error::Loader(_)
            | Error::Tls(_)
            | Error::Io(_) => "the server had an error while processing the request".to_owned(),
            e => e.to_string(),
        };
        ErrorObject {
            message,
            kind: kind.to_owned(),
            param,
            code,
        }
    }
}

impl From<hasten_engine::Error> for Error {
    fn from(e: hasten_engine::Error) -> Self {
        use hasten_engine::Error as E;
        match e {
            E::ContextLengthExceeded { .. } | E::KvCapacity { .. } => Error::ContextLength {
                message: e.to_string(),
                param: None,
            },
            E::EmptyPrompt => Error::bad(e.to_string(), "prompt"),
            E::TokenOutOfRange { .. } => Error::bad(e.to_string(), "prompt"),
            E::ZeroMaxTokens => Error::bad(e.to_string(), "max_tokens"),
            E::TooManyLogprobs { .. } => Error::bad(e.to_string(), "top_logprobs"),
            E::Grammar(_) => Error::bad(e.to_string(), "response_format"),
            E::BadParams(m) => Error::BadRequest {
                message: m,
                param: None,
                code: None,
            },
            E::QueueFull { retry_after, .. } | E::DeadlineUnreachable { eta: retry_after } => {
                Error::Overloaded {
                    message: e.to_string(),
                    retry_after,
                }
            }
            E::ShutDown => Error::ShuttingDown,
            E::Config(m) => Error::Internal(m),
            E::Model(m) => Error::Internal(m.to_string()),
        }
    }
}

/// Whole seconds for `Retry-After`, rounded up, at least 1.
pub fn retry_after_secs(d: Duration) -> u64 {
    d.as_secs_f64().ceil().max(1.0) as u64
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        if self.status() == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!("{self}");
        }
        let status = self.status();
        let mut resp = (status, axum::Json(ErrorBody { error: self.body() })).into_response();
        if let Error::Overloaded { retry_after, .. } = &self {
            let h = resp.headers_mut();
            h.insert(
                header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs(*retry_after)),
            );
            h.insert(
                "retry-after-ms",
                HeaderValue::from(retry_after.as_millis().max(1) as u64),
            );
        }
        if matches!(self, Error::TooManyConnections | Error::BodyTimeout(_)) {
            let h = resp.headers_mut();
            h.insert(header::CONNECTION, HeaderValue::from_static("close"));
            if matches!(self, Error::TooManyConnections) {
                h.insert(header::RETRY_AFTER, HeaderValue::from(1));
            }
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internals_are_not_leaked() {
        let e = Error::Internal("/secret/path: disk on fire".into());
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!e.body().message.contains("secret"));
    }

    #[test]
    fn engine_errors_map_to_statuses() {
        use hasten_engine::Error as E;
        let ctx: Error = E::ContextLengthExceeded {
            prompt: 10,
            max_tokens: 5,
            context: 12,
        }
        .into();
        assert_eq!(ctx.status(), StatusCode::BAD_REQUEST);
        assert_eq!(ctx.body().code.as_deref(), Some("context_length_exceeded"));
        assert!(ctx.body().message.contains("12"));
        let full: Error = E::QueueFull {
            waiting: 3,
            retry_after: Duration::from_millis(1500),
        }
        .into();
        assert_eq!(full.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(retry_after_secs(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }
}
