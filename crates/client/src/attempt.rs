//! One HTTP attempt: send the request (or a resume), check the status,
//! and read SSE items under a deadline. `to_first_output` reads until the
//! first event that carries output, which is the point a retry stops being
//! safe and a hedge race is decided; [`race`] runs that race.

use crate::sse::{Item, Parser};
use crate::{Error, Inner};
use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A point in time a wait must end at, and the error it means.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    pub at: Instant,
    pub kind: Timeout,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timeout {
    FirstToken(Duration),
    Idle(Duration),
    Total(Duration),
}

impl Deadline {
    pub fn after(from: Instant, kind: Timeout) -> Self {
        let d = match kind {
            Timeout::FirstToken(d) | Timeout::Idle(d) | Timeout::Total(d) => d,
        };
        Deadline { at: from + d, kind }
    }

    /// The earlier of `self` and `other`.
    pub fn min(self, other: Option<Deadline>) -> Deadline {
        match other {
            Some(o) if o.at < self.at => o,
            _ => self,
        }
    }

    pub fn error(&self) -> Error {
        match self.kind {
            Timeout::FirstToken(d) => Error::FirstTokenTimeout(d),
            Timeout::Idle(d) => Error::IdleTimeout(d),
            Timeout::Total(d) => Error::TotalTimeout(d),
        }
    }
}

/// What an attempt asks for.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// POST the request body to `path` (relative to the base URL).
    Post { path: &'static str, body: Bytes },
    /// hasten's `GET /v1/streams/{id}` with `Last-Event-ID`.
    Resume { id: String, last_event_id: String },
}

pub(crate) enum Read {
    Item(Item),
    /// The body ended; `cut` when it stopped inside an event.
    End,
    Timeout,
    Io(String),
}

/// An open streaming response.
pub(crate) struct Conn {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    parser: Parser,
    pending: VecDeque<Item>,
    /// The id this attempt was sent with (servers echo it).
    pub request_id: String,
    /// The endpoint it went to (an index into the client's endpoints).
    pub endpoint: usize,
    /// The replica that answered, when it names itself (`x-hasten-instance`).
    pub instance: Option<String>,
}

impl Conn {
    pub async fn next(&mut self, deadline: Instant) -> Read {
        loop {
            if let Some(i) = self.pending.pop_front() {
                return Read::Item(i);
            }
            let chunk = match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => return Read::Timeout,
                Ok(None) => return Read::End,
                Ok(Some(Err(e))) => return Read::Io(chain(&e)),
                Ok(Some(Ok(b))) => b,
            };
            let mut out = Vec::new();
            self.parser.feed(&chunk, Instant::now(), &mut out);
            self.pending.extend(out);
        }
    }

    /// Reads what is already buffered so a finished HTTP/1.1 body can go
    /// back to the connection pool, without waiting for the peer.
    pub fn finish(mut self) {
        for _ in 0..4 {
            match self.body.next().now_or_never() {
                Some(Some(Ok(_))) => continue,
                _ => break,
            }
        }
    }
}

/// The error's message with its causes ("connection refused", ...).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        src = c.source();
    }
    s
}

/// Sends `target` to endpoint `endpoint` and returns the response once its
/// headers arrived with a success status. `deadline` bounds the wait for
/// the headers.
pub(crate) async fn send(
    inner: &Inner,
    endpoint: usize,
    target: &Target,
    request_id: &str,
    stream: bool,
    deadline: Deadline,
) -> Result<reqwest::Response, Error> {
    let (url, builder) = match target {
        Target::Post { path, body } => {
            let url = format!("{}/{path}", inner.base(endpoint));
            let b = inner
                .http
                .post(&url)
                .header("content-type", "application/json")
                .body(body.clone());
            (url, b)
        }
        Target::Resume { id, last_event_id } => {
            let url = format!("{}/streams/{id}", inner.base(endpoint));
            let b = inner.http.get(&url).header("last-event-id", last_event_id);
            (url, b)
        }
    };
    let mut builder = builder.header("x-request-id", request_id);
    if stream {
        builder = builder.header("accept", "text/event-stream");
    }
    if let Some(key) = &inner.cfg.api_key {
        builder = builder.bearer_auth(key);
    }
    let resp = match tokio::time::timeout_at(deadline.at, builder.send()).await {
        Err(_) => return Err(deadline.error()),
        Ok(Err(e)) if e.is_connect() && e.is_timeout() => {
            return Err(Error::ConnectTimeout(inner.cfg.timeouts.connect))
        }
        Ok(Err(e)) if e.is_builder() => return Err(Error::Request(chain(&e))),
        Ok(Err(e)) => return Err(Error::connect(url, &e)),
        Ok(Ok(r)) => r,
    };
    if resp.status().is_success() {
        return Ok(resp);
    }
    Err(status_error(resp, deadline).await)
}

/// An error status as [`Error::Status`], with the body if it arrives in time.
async fn status_error(resp: reqwest::Response, deadline: Deadline) -> Error {
    let status = resp.status().as_u16();
    let retry_after = crate::policy::retry_after(resp.headers());
    let raw = match tokio::time::timeout_at(deadline.at, resp.bytes()).await {
        Ok(Ok(b)) => String::from_utf8_lossy(&b[..b.len().min(4096)]).into_owned(),
        _ => String::new(),
    };
    let body = serde_json::from_str::<serde_json::Value>(&raw)
        .ok()
        .filter(|v| v.get("error").is_some())
        .map(|v| Box::new(crate::request::error_body(&v)));
    Error::Status {
        status,
        body,
        raw,
        retry_after,
    }
}

/// Sends a streaming attempt and reads until its first output event (text,
/// reasoning or a tool call, a `finish_reason`, `[DONE]`), which stays
/// buffered in the returned
/// connection with everything before it.
pub(crate) async fn to_first_output(
    inner: Arc<Inner>,
    endpoint: usize,
    target: Target,
    request_id: String,
    total: Option<Deadline>,
) -> Result<Conn, Error> {
    let start = Instant::now();
    let deadline =
        Deadline::after(start, Timeout::FirstToken(inner.cfg.timeouts.first_token)).min(total);
    let mut conn = open(&inner, endpoint, &target, request_id, deadline).await?;
    let mut seen = Vec::new();
    loop {
        match conn.next(deadline.at).await {
            Read::Timeout => return Err(deadline.error()),
            Read::End => {
                return Err(Error::Broken {
                    reason: "the body ended before any output".into(),
                })
            }
            Read::Io(m) => {
                return Err(Error::Broken {
                    reason: format!("the connection broke before any output: {m}"),
                })
            }
            Read::Item(item) => {
                let output = match &item {
                    Item::Comment { .. } => false,
                    Item::Event { data, .. } => is_output(data)?,
                };
                seen.push(item);
                if output {
                    conn.pending = seen.into_iter().chain(conn.pending).collect();
                    return Ok(conn);
                }
            }
        }
    }
}

/// Sends `target` to `endpoint` and wraps the streaming body (no reading
/// yet).
pub(crate) async fn open(
    inner: &Inner,
    endpoint: usize,
    target: &Target,
    request_id: String,
    deadline: Deadline,
) -> Result<Conn, Error> {
    let resp = send(inner, endpoint, target, &request_id, true, deadline).await?;
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if !ct.starts_with("text/event-stream") {
        return Err(Error::Protocol(format!(
            "expected an event stream, got content-type {ct:?}"
        )));
    }
    let instance = instance_of(resp.headers());
    Ok(Conn {
        instance,
        body: resp.bytes_stream().boxed(),
        parser: Parser::new(),
        pending: VecDeque::new(),
        request_id,
        endpoint: endpoint % inner.bases.len(),
    })
}

/// The replica's name from its `x-hasten-instance` header.
pub(crate) fn instance_of(h: &reqwest::header::HeaderMap) -> Option<String> {
    h.get("x-hasten-instance")?.to_str().ok().map(str::to_owned)
}

/// Whether a data event carries output; an error event is an error.
fn is_output(data: &str) -> Result<bool, Error> {
    let ws = match crate::events::Decoder::default().decode(data)? {
        crate::events::Event::Done | crate::events::Event::Last(_) => return Ok(true),
        crate::events::Event::Chunks(ws) => ws,
    };
    if let Some(e) = ws.iter().find_map(|w| w.error.as_ref()) {
        return Err(Error::Stream(Box::new(crate::request::error_body(e))));
    }
    Ok(ws.iter().flat_map(|w| &w.choices).any(|c| {
        let parts = c.part().is_some_and(|p| {
            p.tool_calls.as_ref().is_some_and(|t| !t.is_empty())
                || p.reasoning_content.as_ref().is_some_and(|r| !r.is_empty())
        });
        !c.text().is_empty() || parts || c.finish_reason.is_some()
    }))
}

/// Which attempt of a hedged pair produced the output.
pub(crate) struct Won {
    pub conn: Conn,
    pub hedged: bool,
}

/// Runs `primary`; if `hedge_after` is given and passes with no output,
/// starts `secondary` too. The first to produce output wins and the other
/// is dropped at once (which closes its connection).
pub(crate) async fn race<F, G>(
    primary: F,
    hedge_after: Option<Duration>,
    secondary: impl FnOnce() -> Option<G>,
) -> (Result<Won, Error>, u32)
where
    F: std::future::Future<Output = Result<Conn, Error>>,
    G: std::future::Future<Output = Result<Conn, Error>>,
{
    tokio::pin!(primary);
    let won = |conn, hedged| Won { conn, hedged };
    let Some(delay) = hedge_after else {
        return (primary.await.map(|c| won(c, false)), 1);
    };
    tokio::select! {
        r = &mut primary => return (r.map(|c| won(c, false)), 1),
        () = tokio::time::sleep(delay) => {}
    }
    let Some(secondary) = secondary() else {
        return (primary.await.map(|c| won(c, false)), 1);
    };
    tokio::pin!(secondary);
    tokio::select! {
        r = &mut primary => match r {
            Ok(c) => (Ok(won(c, false)), 2),
            Err(_) => (secondary.await.map(|c| won(c, true)), 2),
        },
        r = &mut secondary => match r {
            Ok(c) => (Ok(won(c, true)), 2),
            Err(_) => (primary.await.map(|c| won(c, false)), 2),
        },
    }
}
