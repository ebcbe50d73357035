//! One request's measurements, as `--out` writes them. Latencies are from
//! the request's **intended** send time (its place in the schedule), so a
//! late send shows up as latency, never disappears.

use hasten_client::{Error as ClientError, Failure, Output};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The server's own breakdown of one request, when it sent one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ServerTiming {
    pub queue_ms: f64,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// Speculative decoding: tokens drafted for the answer, and accepted.
    #[serde(default)]
    pub drafted_tokens: u64,
    #[serde(default)]
    pub accepted_tokens: u64,
}

/// Every field of one request. Times are milliseconds; `*_at_ms` are from
/// the start of its load level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Position in the schedule (0-based, warm-up included).
    pub index: usize,
    /// Sent during warm-up: excluded from every figure.
    pub warmup: bool,
    /// When the schedule wanted it sent.
    pub intended_at_ms: f64,
    /// Schedule lag: actual send − intended send.
    pub lag_ms: f64,
    /// When its last byte arrived (or it failed).
    pub done_at_ms: f64,
    /// Finished with a complete answer.
    pub ok: bool,
    /// `timeout`, `http`, `connect`, `broken`, `stream` or `protocol`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Intended send → first byte of the first event with output text.
    pub ttft_ms: Option<f64>,
    /// Intended send → last byte.
    pub e2e_ms: f64,
    /// (E2E − TTFT) / (output tokens − 1).
    pub tpot_ms: Option<f64>,
    /// One sample per token after the first (an event with k tokens gives
    /// k samples of gap/k).
    pub itl_ms: Vec<f64>,
    /// Gaps between events after the first token.
    pub icl_ms: Vec<f64>,
    pub prompt_tokens: Option<u64>,
    pub cached_prompt_tokens: Option<u64>,
    pub output_tokens: u64,
    /// The ITL samples account for every output token (the server gave
    /// per-event token counts, or sent one token per event).
    pub tokens_exact: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerTiming>,
    /// Client E2E − server time (queue + prefill + decode): network,
    /// parsing and the client's own delays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_ms: Option<f64>,
    pub attempts: u32,
    /// The endpoint that gave the answer (with several `--url`s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Attempts that moved to another endpoint (failover).
    #[serde(default)]
    pub failovers: u32,
    /// The replica that answered, when it names itself (`x-hasten-instance`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn kind(e: &ClientError) -> (&'static str, Option<u16>) {
    match e {
        ClientError::ConnectTimeout(_)
        | ClientError::FirstTokenTimeout(_)
        | ClientError::IdleTimeout(_)
        | ClientError::TotalTimeout(_) => ("timeout", None),
        ClientError::Status { status, .. } => ("http", Some(*status)),
        ClientError::Connect { .. }
        | ClientError::Certificate { .. }
        | ClientError::Request(_)
        | ClientError::Config(_) => ("connect", None),
        ClientError::Broken { .. } => ("broken", None),
        ClientError::Stream(_) => ("stream", None),
        ClientError::Protocol(_) => ("protocol", None),
    }
}

impl Record {
    /// The record of request `index`, sent `lag` after it was due (at
    /// `intended` from the level's start) and done at `done`.
    pub fn new(
        index: usize,
        warmup: bool,
        intended: Duration,
        lag: Duration,
        done: Duration,
        result: Result<Output, Failure>,
    ) -> Record {
        let (out, error) = match result {
            Ok(o) => (o, None),
            Err(f) => (f.partial, Some(f.error)),
        };
        let s = &out.stats;
        let output_tokens = out.usage.map_or(s.output_tokens, |u| {
            u.completion_tokens.max(s.output_tokens)
        });
        let server = s.server.map(|t| ServerTiming {
            queue_ms: t.queue_ms,
            prefill_ms: t.prefill_ms,
            decode_ms: t.decode_ms,
            drafted_tokens: t.drafted_tokens,
            accepted_tokens: t.accepted_tokens,
        });
        let (error_kind, status) = match &error {
            Some(e) => {
                let (k, st) = kind(e);
                (Some(k.to_string()), st)
            }
            None => (None, None),
        };
        Record {
            index,
            warmup,
            intended_at_ms: ms(intended),
            lag_ms: ms(lag),
            done_at_ms: ms(done),
            ok: error.is_none(),
            error_kind,
            error: error.map(|e| e.to_string()),
            status,
            ttft_ms: s.ttft.map(|t| ms(lag + t)),
            e2e_ms: ms(lag + s.e2e),
            tpot_ms: s.tpot().map(ms),
            itl_ms: s.itl.iter().copied().map(ms).collect(),
            icl_ms: s.icl.iter().copied().map(ms).collect(),
            prompt_tokens: out.usage.map(|u| u.prompt_tokens),
            cached_prompt_tokens: s.server.map(|t| t.cached_prompt_tokens).or_else(|| {
                out.usage
                    .and_then(|u| u.prompt_tokens_details)
                    .map(|d| d.cached_tokens)
            }),
            output_tokens,
            tokens_exact: s.per_event_token_counts || s.itl.len() as u64 + 1 == output_tokens,
            finish_reason: out.choices.first().and_then(|c| c.finish_reason.clone()),
            request_id: s.request_id.clone(),
            server,
            network_ms: s.network().map(ms),
            attempts: s.attempts,
            endpoint: s.endpoint.clone(),
            failovers: s.failovers,
            instance: s.instance.clone(),
        }
    }
}
