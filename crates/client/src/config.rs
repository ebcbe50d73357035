//! What a [`crate::Client`] is told: where the server is, the four timeouts,
//! the retry policy and budget, what to do when a stream breaks after
//! output began, and hedging. Every field has a default a chat UI can use.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Config {
    /// The API root, e.g. `http://127.0.0.1:8080/v1` or
    /// `https://api.openai.com/v1` (a missing `/v1` is added).
    pub base_url: String,
    /// More replicas of the same model beside `base_url`. Requests take
    /// the endpoints in turn; a retry before output goes to the next
    /// endpoint (failover), a hedge to the one after the primary's, a
    /// resume to the replica that served the stream, a continuation to
    /// the next after it.
    pub fallback_urls: Vec<String>,
    /// Sent as `Authorization: Bearer ...`.
    pub api_key: Option<String>,
    /// PEM certificates trusted for `https://` besides the built-in web
    /// roots: a private CA, or a self-signed server certificate.
    /// Certificates are always verified.
    pub ca_pem: Option<Vec<u8>>,
    pub timeouts: Timeouts,
    pub retry: Retry,
    pub on_break: OnBreak,
    pub hedge: Option<Hedge>,
    /// Extra fields merged into a chat request that continues a partial
    /// answer (see [`OnBreak::Continue`]); e.g. vLLM wants
    /// `{"continue_final_message": true, "add_generation_prompt": false}`.
    /// hasten and llama-server continue a final assistant message unasked.
    pub continue_fields: serde_json::Map<String, serde_json::Value>,
    /// Seed for backoff jitter (tests); `None` draws one.
    pub jitter_seed: Option<u64>,
}

impl Config {
    pub fn new(base_url: impl Into<String>) -> Self {
        Config {
            base_url: base_url.into(),
            fallback_urls: Vec::new(),
            api_key: None,
            ca_pem: None,
            timeouts: Timeouts::default(),
            retry: Retry::default(),
            on_break: OnBreak::Continue,
            hedge: None,
            continue_fields: serde_json::Map::new(),
            jitter_seed: None,
        }
    }
}

/// Each timeout is its own error, so a caller can tell a server that never
/// answered from one that stalled mid-answer.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// TCP (and TLS) connection set-up.
    pub connect: Duration,
    /// Send → the first event carrying output text (per attempt). Applies
    /// to the response headers of a non-streaming request.
    pub first_token: Duration,
    /// Between two events after the first token (SSE comments such as
    /// keep-alives do not count as progress); between body bytes of a
    /// non-streaming response.
    pub idle: Duration,
    /// The whole request, retries and resumes included.
    pub total: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            first_token: Duration::from_secs(120),
            idle: Duration::from_secs(30),
            total: None,
        }
    }
}

/// Retries of failures before any output: connection errors, 408, 409,
/// 429, 5xx, a stream that broke before its first token, and a
/// first-token timeout.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: u32,
    /// Backoff before retry k (0-based) is `min(cap, initial * 2^k)`,
    /// shortened by up to `jitter` of itself at random.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// In [0, 1]; 0 gives exact delays.
    pub jitter: f64,
    /// A server's `Retry-After`/`retry-after-ms` is obeyed up to this long;
    /// a longer one ends the retries with the server's error.
    pub max_retry_after: Duration,
    /// The retry budget, shared by every clone of a client: each request
    /// earns `budget_ratio` of a retry, each retry spends one, and the
    /// balance starts at (and never exceeds) `budget_burst`. So under a full
    /// outage retries add at most `budget_ratio` extra load.
    pub budget_ratio: f64,
    pub budget_burst: f64,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            jitter: 0.5,
            max_retry_after: Duration::from_secs(60),
            budget_ratio: 0.2,
            budget_burst: 10.0,
        }
    }
}

/// What to do when a stream breaks after output began (the connection
/// dropped, the body ended without `[DONE]`, or the idle timeout fired).
/// Never a silent regeneration: text already delivered is never sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnBreak {
    /// Fail; the error says so and the stream keeps the partial text.
    Fail,
    /// Resume where the server supports it (hasten: `GET /v1/streams/{id}`
    /// with `Last-Event-ID`), else fail.
    Resume,
    /// Resume where supported, else continue: re-issue the request with the
    /// text received so far as an assistant prefix (chat) or prompt suffix
    /// (completions), joined without duplicating the seam. Only for `n = 1`.
    Continue,
}

/// Hedging: if no token arrived after `delay`, send a second request; the
/// first to yield a token wins and the other is dropped at once (closing
/// its connection, which cancels it on servers that notice).
#[derive(Debug, Clone, Copy)]
pub struct Hedge {
    pub delay: HedgeDelay,
    /// Like the retry budget: each request earns `budget_ratio` of a hedge,
    /// starting from and capped at `budget_burst`.
    pub budget_ratio: f64,
    pub budget_burst: f64,
}

#[derive(Debug, Clone, Copy)]
pub enum HedgeDelay {
    Fixed(Duration),
    /// The 95th percentile of this client's recent TTFTs, once it has
    /// `min_samples` of them; `fallback` until then.
    P95 {
        min_samples: usize,
        fallback: Duration,
    },
}

impl Hedge {
    pub fn fixed(delay: Duration) -> Self {
        Hedge {
            delay: HedgeDelay::Fixed(delay),
            budget_ratio: 0.1,
            budget_burst: 5.0,
        }
    }
}
