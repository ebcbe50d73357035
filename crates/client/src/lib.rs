//! hasten-client: a client for any OpenAI-compatible server (hasten,
//! llama-server, vLLM, OpenAI) that keeps the promises of
//! `latency-vocabulary.md`:
//!
//! - retries only where safe (connection errors, 408/409/429/5xx, before
//!   any output), capped exponential backoff with jitter, `Retry-After`
//!   honoured, a retry budget shared by clones of a [`Client`];
//! - after output began, a broken stream is resumed, continued or failed
//!   with its partial text, as [`OnBreak`] says; never regenerated;
//! - connect, first-token, idle and total timeouts, each its own [`Error`];
//! - optional hedging ([`Hedge`]);
//! - reading stops at `[DONE]` or the final chunk;
//! - every answer carries [`Stats`]: TTFT, ITL, ICL, E2E, TPOT, attempts,
//!   and the server's timing breakdown when it sends one.
//!
//! ```no_run
//! # async fn demo() -> hasten_client::Result<()> {
//! use hasten_client::{Client, Config, Request};
//! let client = Client::new(Config::new("http://127.0.0.1:8080"))?;
//! let mut stream = client.stream(Request::chat(None, "Why is the sky blue?"));
//! while let Some(delta) = stream.next().await? {
//!     print!("{}", delta.text);
//! }
//! let stats = &stream.output().stats;
//! println!("\nTTFT {:?}, E2E {:?}, retries {}", stats.ttft, stats.e2e, stats.retries);
//! # Ok(())
//! # }
//! ```
//!
//! Modules: [`config`] (settings), [`error`], `sse` (event parser),
//! `policy` (backoff, budgets), `request` (bodies, continuation, lenient
//! response readers), `events` (stream events of every API as chat chunks), `attempt` (one HTTP attempt, the hedge race),
//! `stream` ([`Streaming`]), [`stats`].

mod attempt;
pub mod config;
pub mod error;
mod events;
mod policy;
mod request;
pub mod sse;
pub mod stats;
mod stream;

pub use config::{Config, Hedge, HedgeDelay, OnBreak, Retry, Timeouts};
pub use error::{Error, Result};
pub use request::Request;
pub use stats::{percentile, ChoiceOutput, Delta, Output, Stats};
pub use stream::Streaming;

use attempt::{Deadline, Target, Timeout};
use policy::{Backoff, Budget, TtftWindow};
use request::{error_body, parse_server_timing, Wire};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::time::Instant;

/// A request that failed, with what arrived before it failed.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Failure {
    #[source]
    pub error: Error,
    pub partial: Output,
}

/// A client for one endpoint. Cheap to clone; clones share connections,
/// budgets and the TTFT window.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub http: reqwest::Client,
    pub cfg: Config,
    /// The endpoints' base URLs, each ending in `/v1`, without a trailing
    /// slash: `base_url` first, then `fallback_urls`.
    pub bases: Vec<String>,
    /// The endpoint the next request starts at (round robin).
    turn: std::sync::atomic::AtomicUsize,
    pub retry_budget: Budget,
    pub hedge_budget: Option<Budget>,
    pub backoff: Backoff,
    pub ttft: TtftWindow,
    id_prefix: String,
    next_id: AtomicU64,
}

impl Inner {
    /// A fresh `x-request-id` per attempt (hedges and retries must not
    /// share one: hasten keys resumable streams by it).
    pub fn request_id(&self) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.id_prefix)
    }

    /// The base URL of endpoint `i` (taken modulo their number).
    pub fn base(&self, i: usize) -> &str {
        &self.bases[i % self.bases.len()]
    }

    /// The endpoint a new request starts at: each in turn.
    pub fn next_start(&self) -> usize {
        self.turn.fetch_add(1, Ordering::Relaxed) % self.bases.len()
    }
}

/// `url` as a base URL: trimmed, `http(s)://`, ending in `/v1`.
fn base_url(url: &str) -> Result<String> {
    let mut base = url.trim().trim_end_matches('/').to_string();
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(Error::Config(format!(
            "the base URL must start with http:// or https://, got {base:?}"
        )));
    }
    if !base.ends_with("/v1") {
        base.push_str("/v1");
    }
    Ok(base)
}

impl Client {
    pub fn new(cfg: Config) -> Result<Client> {
        let bases = std::iter::once(&cfg.base_url)
            .chain(&cfg.fallback_urls)
            .map(|u| base_url(u))
            .collect::<Result<Vec<_>>>()?;
        let mut http = reqwest::Client::builder();
        if let Some(pem) = &cfg.ca_pem {
            let roots = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| {
                Error::Config(format!("the CA certificates: {}", attempt::chain(&e)))
            })?;
            if roots.is_empty() {
                return Err(Error::Config(
                    "the CA file holds no PEM `CERTIFICATE` block".into(),
                ));
            }
            for r in roots {
                http = http.add_root_certificate(r);
            }
        }
        let http = http
            .connect_timeout(cfg.timeouts.connect)
            .tcp_nodelay(true)
            // Below the 5 s keep-alive of common servers (uvicorn, cpp-httplib),
            // so an idle pooled connection is dropped before the server drops it.
            .pool_idle_timeout(std::time::Duration::from_secs(4))
            .user_agent(concat!("hasten-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Config(attempt::chain(&e)))?;
        let r = &cfg.retry;
        if !(r.budget_ratio >= 0.0 && r.budget_burst >= 0.0 && (0.0..=1.0).contains(&r.jitter)) {
            return Err(Error::Config(
                "retry budget ratio and burst must be >= 0 and jitter in [0, 1]".into(),
            ));
        }
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                bases,
                turn: Default::default(),
                retry_budget: Budget::new(r.budget_ratio, r.budget_burst),
                hedge_budget: cfg
                    .hedge
                    .map(|h| Budget::new(h.budget_ratio, h.budget_burst)),
                backoff: Backoff::new(cfg.jitter_seed),
                ttft: TtftWindow::default(),
                id_prefix: format!("hc-{:012x}", rand::random::<u64>() >> 16),
                next_id: AtomicU64::new(0),
                cfg,
            }),
        })
    }

    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// Retries the shared budget allows right now.
    pub fn retry_budget(&self) -> f64 {
        self.inner.retry_budget.balance()
    }

    /// Starts a streaming request (nothing is sent until the first
    /// [`Streaming::next`]).
    pub fn stream(&self, req: impl Into<Request>) -> Streaming {
        Streaming::new(self.inner.clone(), req.into())
    }

    /// A non-streaming request, retried as a stream's would be before
    /// output (all of a non-streaming response is output, so nothing is
    /// retried once its body began).
    pub async fn send(&self, req: impl Into<Request>) -> Result<Output> {
        let req = req.into();
        let inner = &self.inner;
        let started = Instant::now();
        inner.retry_budget.earn();
        let total = inner
            .cfg
            .timeouts
            .total
            .map(|d| Deadline::after(started, Timeout::Total(d)));
        let body = req.body(false).map_err(|e| Error::Request(e.to_string()))?;
        let target = Target::Post {
            path: req.path(),
            body: body.into(),
        };
        let (mut attempts, mut retries) = (0, 0);
        let start = inner.next_start();
        loop {
            attempts += 1;
            // Retries fail over to the next endpoint.
            let at = start + retries as usize;
            let id = inner.request_id();
            let deadline = Deadline::after(
                Instant::now(),
                Timeout::FirstToken(inner.cfg.timeouts.first_token),
            )
            .min(total);
            let e = match attempt::send(inner, at, &target, &id, false, deadline).await {
                Ok(resp) => {
                    let mut out = self.read_whole(resp, &req, started, total).await?;
                    out.stats.attempts = attempts;
                    out.stats.retries = retries;
                    out.stats.request_id = Some(id);
                    out.stats.endpoint = Some(inner.base(at).to_owned());
                    out.stats.failovers = if inner.bases.len() > 1 { retries } else { 0 };
                    return Ok(out);
                }
                Err(e) => e,
            };
            let r = &inner.cfg.retry;
            if !e.retryable() || retries >= r.max_retries {
                return Err(e);
            }
            let wait = match e.retry_after() {
                // The retry goes to another replica: see `Streaming::open`.
                Some(d) if inner.bases.len() > 1 => d.min(inner.backoff.delay(r, 0)),
                Some(d) if d > r.max_retry_after => return Err(e),
                Some(d) => d,
                None => inner.backoff.delay(r, retries),
            };
            if total.is_some_and(|t| Instant::now() + wait >= t.at) || !inner.retry_budget.spend() {
                return Err(e);
            }
            retries += 1;
            tokio::time::sleep(wait).await;
        }
    }

    async fn read_whole(
        &self,
        resp: reqwest::Response,
        req: &Request,
        started: Instant,
        total: Option<Deadline>,
    ) -> Result<Output> {
        use futures_util::StreamExt;
        let instance = attempt::instance_of(resp.headers());
        let header_timing = resp
            .headers()
            .get("server-timing")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_server_timing);
        let mut body = resp.bytes_stream();
        let mut bytes = Vec::new();
        let mut first = None;
        let idle = self.inner.cfg.timeouts.idle;
        loop {
            let d = Deadline::after(Instant::now(), Timeout::Idle(idle)).min(total);
            match tokio::time::timeout_at(d.at, body.next()).await {
                Err(_) => return Err(d.error()),
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    return Err(Error::Broken {
                        reason: format!("the response body broke: {}", attempt::chain(&e)),
                    })
                }
                Ok(Some(Ok(b))) => {
                    first.get_or_insert_with(Instant::now);
                    bytes.extend_from_slice(&b);
                }
            }
        }
        let e2e = started.elapsed();
        let v: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Protocol(format!("the response is not JSON: {e}")))?;
        if v.get("error").is_some() {
            return Err(Error::Stream(Box::new(error_body(&v))));
        }
        let w: Wire = serde_json::from_value(events::whole(v))
            .map_err(|e| Error::Protocol(format!("the response is not a completion: {e}")))?;
        let mut choices = vec![ChoiceOutput::default(); req.choices()];
        for c in &w.choices {
            let i = c.index as usize;
            if i >= choices.len() {
                choices.resize(i + 1, ChoiceOutput::default());
            }
            choices[i].text = c.text().to_string();
            if let Some(p) = c.part() {
                choices[i].absorb(p);
            }
            choices[i].finish_reason = c.finish_reason.clone();
        }
        let usage = w.usage.map(|u| u.usage());
        let stats = Stats {
            ttft: first.map(|f| f.saturating_duration_since(started)),
            e2e,
            output_tokens: usage.map_or(0, |u| u.completion_tokens),
            // The body's breakdown also carries the speculation counts.
            server: w.timing.or(header_timing),
            instance,
            ..Stats::default()
        };
        Ok(Output {
            choices,
            usage,
            stats,
        })
    }

    /// `GET /v1/models`: the ids the server serves (the first endpoint
    /// that answers; the others are asked only when one cannot be reached
    /// or answers with an error).
    pub async fn models(&self) -> Result<Vec<String>> {
        let mut last = None;
        for i in 0..self.inner.bases.len() {
            match self.models_at(i).await {
                Ok(m) => return Ok(m),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one endpoint"))
    }

    async fn models_at(&self, endpoint: usize) -> Result<Vec<String>> {
        let inner = &self.inner;
        let url = format!("{}/models", inner.base(endpoint));
        let mut b = inner.http.get(&url);
        if let Some(k) = &inner.cfg.api_key {
            b = b.bearer_auth(k);
        }
        let t = inner.cfg.timeouts.first_token;
        let resp = match tokio::time::timeout(t, b.send()).await {
            Err(_) => return Err(Error::FirstTokenTimeout(t)),
            Ok(Err(e)) => return Err(Error::connect(url, &e)),
            Ok(Ok(r)) => r,
        };
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .await
            .map_err(|e| Error::Protocol(attempt::chain(&e)))?;
        if !(200..300).contains(&status) {
            let v = serde_json::from_str::<serde_json::Value>(&text).ok();
            return Err(Error::Status {
                status,
                body: v.as_ref().map(|v| Box::new(error_body(v))),
                raw: text,
                retry_after: None,
            });
        }
        let list: hasten_protocol::ModelList = serde_json::from_str(&text)
            .map_err(|e| Error::Protocol(format!("not a model list: {e}")))?;
        Ok(list.data.into_iter().map(|m| m.id).collect())
    }
}
