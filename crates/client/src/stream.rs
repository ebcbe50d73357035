//! A streaming request across all its attempts. Before output: retries
//! (with backoff, `Retry-After` and the shared budget) and hedging. After
//! output: a break is resumed (hasten's `Last-Event-ID` replay), continued
//! (the partial text re-sent as a prefix, joined at the seam without
//! duplication) or reported with the partial text kept, as
//! [`crate::OnBreak`] says; text already delivered is never delivered again.
//! Reading stops at `[DONE]` or at the final `finish_reason` (and usage,
//! when asked for) without waiting for the server to close.

use crate::attempt::{self, Conn, Deadline, Read, Target, Timeout};
use crate::events::{Decoder, Event};
use crate::request::{error_body, Request, Wire};
use crate::sse::Item;
use crate::stats::{ChoiceOutput, Delta, Output};
use crate::{Error, Inner, OnBreak};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::time::Instant;

/// Breaks survived per request before giving up (each a resume or a
/// continuation).
const MAX_RECOVERIES: u32 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    NotStarted,
    Live,
    Done,
    Failed,
}

/// Text a continuation must not repeat: servers that echo the prefix send
/// it again first, and a template that trims the prefix makes the model
/// start its next word with the space the prefix already ends in.
struct Seam {
    before: String,
    held: String,
}

/// A streaming answer; call [`Streaming::next`] until it gives `None`.
pub struct Streaming {
    inner: Arc<Inner>,
    original: Request,
    current: Request,
    conn: Option<Conn>,
    state: State,
    queue: VecDeque<Delta>,
    out: Output,
    choices: usize,
    started: Instant,
    total: Option<Deadline>,
    /// Arrival of the last data event (idle timeout, ICL).
    last_event_at: Option<Instant>,
    /// When the last event with output text arrived (for ICL).
    last_text_at: Option<Instant>,
    /// Events with text, and those whose token count the server gave.
    events_with_text: u64,
    events_counted: u64,
    last_token_at: Vec<Option<Instant>>,
    /// The endpoint of the attempt that produced the output so far (a
    /// resume goes back to it; a continuation to the next one).
    endpoint: Option<usize>,
    /// The stream's request id and last event id, for a resume.
    request_id: Option<String>,
    last_event_id: Option<String>,
    seam: Option<Seam>,
    recoveries: u32,
    /// Output tokens counted in this attempt chain, and before the current
    /// continuation.
    tokens: u64,
    tokens_before: u64,
    /// `usage.completion_tokens` last seen in this attempt (servers that
    /// report usage on every chunk give exact per-event token counts).
    usage_seen: u64,
    usage_final: bool,
    decoder: Decoder,
}

impl Streaming {
    pub(crate) fn new(inner: Arc<Inner>, req: Request) -> Self {
        let choices = req.choices();
        Streaming {
            inner,
            current: req.clone(),
            original: req,
            conn: None,
            state: State::NotStarted,
            queue: VecDeque::new(),
            out: Output {
                choices: vec![ChoiceOutput::default(); choices],
                ..Output::default()
            },
            choices,
            started: Instant::now(),
            total: None,
            last_event_at: None,
            last_text_at: None,
            events_with_text: 0,
            events_counted: 0,
            last_token_at: vec![None; choices],
            endpoint: None,
            request_id: None,
            last_event_id: None,
            seam: None,
            recoveries: 0,
            tokens: 0,
            tokens_before: 0,
            usage_seen: 0,
            usage_final: false,
            decoder: Decoder::default(),
        }
    }

    /// What has arrived so far (all of it once `next` gave `None`).
    pub fn output(&self) -> &Output {
        &self.out
    }

    /// Reads the whole stream; on failure the error comes with the text
    /// received before it.
    pub async fn collect(mut self) -> Result<Output, crate::Failure> {
        loop {
            match self.next().await {
                Ok(Some(_)) => {}
                Ok(None) => return Ok(self.out),
                Err(error) => {
                    return Err(crate::Failure {
                        error,
                        partial: self.out,
                    })
                }
            }
        }
    }

    /// The next piece of text; `Ok(None)` when the answer is complete.
    /// After an error it returns `Ok(None)`; [`Streaming::output`] keeps
    /// what arrived.
    pub async fn next(&mut self) -> Result<Option<Delta>, Error> {
        loop {
            if let Some(d) = self.queue.pop_front() {
                return Ok(Some(d));
            }
            match self.state {
                State::Done | State::Failed => return Ok(None),
                State::NotStarted => {
                    self.state = State::Live;
                    self.started = Instant::now();
                    self.inner.retry_budget.earn();
                    if let Some(h) = &self.inner.hedge_budget {
                        h.earn();
                    }
                    self.total = self
                        .inner
                        .cfg
                        .timeouts
                        .total
                        .map(|d| Deadline::after(self.started, Timeout::Total(d)));
                    let hedge = self.inner.cfg.hedge.is_some();
                    match self.open(hedge).await {
                        Ok(()) => {}
                        Err(e) => return self.fail(e),
                    }
                    continue;
                }
                State::Live => {}
            }
            let idle = self.inner.cfg.timeouts.idle;
            let deadline = Deadline::after(
                self.last_event_at.unwrap_or_else(Instant::now),
                Timeout::Idle(idle),
            )
            .min(self.total);
            let Some(conn) = self.conn.as_mut() else {
                return self.fail(Error::Protocol("no connection".into()));
            };
            let broke = match conn.next(deadline.at).await {
                Read::Item(Item::Comment { .. }) => continue,
                Read::Item(Item::Event { id, data, at, .. }) => {
                    match self.on_event(id, &data, at) {
                        Ok(()) => continue,
                        Err(e) => return self.fail(e),
                    }
                }
                Read::Timeout if deadline.kind == Timeout::Idle(idle) => deadline.error(),
                Read::Timeout => return self.fail(deadline.error()),
                Read::End => Error::Broken {
                    reason: "the body ended before [DONE]".into(),
                },
                Read::Io(m) => Error::Broken {
                    reason: format!("the connection broke: {m}"),
                },
            };
            if let Err(e) = self.recover(broke).await {
                return self.fail(e);
            }
        }
    }

    fn fail(&mut self, e: Error) -> Result<Option<Delta>, Error> {
        self.state = State::Failed;
        self.conn = None;
        self.flush_seam();
        self.out.stats.e2e = self.started.elapsed();
        self.out.stats.output_tokens = self.tokens;
        Err(e)
    }

    /// Establishes a connection that has produced output: retries
    /// before output, hedged when asked.
    async fn open(&mut self, hedge: bool) -> Result<(), Error> {
        let inner = self.inner.clone();
        let cfg = &inner.cfg.retry;
        let body = self
            .current
            .body(true)
            .map_err(|e| Error::Request(e.to_string()))?;
        let target = Target::Post {
            path: self.current.path(),
            body: body.into(),
        };
        // A new request starts at the next endpoint in turn; a
        // continuation at the one after the replica that broke.
        let start = match self.endpoint {
            Some(e) => e + 1,
            None => inner.next_start(),
        };
        let mut k = 0;
        loop {
            let hedge_after = if hedge {
                inner.cfg.hedge.map(|h| inner.ttft.hedge_delay(h.delay))
            } else {
                None
            };
            // Retry k goes to the k-th endpoint after the first (failover);
            // a hedge to the one after its primary's.
            let at = start + k as usize;
            self.note_endpoint(at);
            let primary = attempt::to_first_output(
                inner.clone(),
                at,
                target.clone(),
                inner.request_id(),
                self.total,
            );
            let secondary = || {
                let budget = inner.hedge_budget.as_ref()?;
                budget.spend().then(|| {
                    attempt::to_first_output(
                        inner.clone(),
                        at + 1,
                        target.clone(),
                        inner.request_id(),
                        self.total,
                    )
                })
            };
            let (r, attempts) = attempt::race(primary, hedge_after, secondary).await;
            self.out.stats.attempts += attempts;
            if attempts > 1 {
                self.out.stats.hedges += 1;
            }
            let e = match r {
                Ok(won) => {
                    self.out.stats.hedge_won = won.hedged;
                    self.request_id = Some(won.conn.request_id.clone());
                    // A won hedge moved the stream (not a failover).
                    self.endpoint = Some(won.conn.endpoint);
                    self.out.stats.instance = won.conn.instance.clone();
                    self.out.stats.endpoint = Some(inner.base(won.conn.endpoint).to_owned());
                    self.last_event_id = None;
                    self.usage_seen = 0;
                    self.conn = Some(won.conn);
                    return Ok(());
                }
                Err(e) => e,
            };
            if !e.retryable() || k >= cfg.max_retries {
                return Err(e);
            }
            let wait = match e.retry_after() {
                // The retry goes to another replica, which may have room
                // now: this one's Retry-After does not hold it back.
                Some(d) if inner.bases.len() > 1 => d.min(inner.backoff.delay(cfg, 0)),
                Some(d) if d > cfg.max_retry_after => return Err(e),
                Some(d) => d,
                None => inner.backoff.delay(cfg, k),
            };
            if self.total.is_some_and(|t| Instant::now() + wait >= t.at) {
                return Err(e);
            }
            if !inner.retry_budget.spend() {
                self.out.stats.retry_budget_exhausted = true;
                return Err(e);
            }
            self.out.stats.retries += 1;
            k += 1;
            tokio::time::sleep(wait).await;
        }
    }

    /// Records that an attempt went to endpoint `at` (a failover when the
    /// previous one went elsewhere).
    fn note_endpoint(&mut self, at: usize) {
        let at = at % self.inner.bases.len();
        if self.endpoint.is_some_and(|e| e != at) {
            self.out.stats.failovers += 1;
        }
        self.endpoint = Some(at);
        self.out.stats.endpoint = Some(self.inner.base(at).to_owned());
    }

    /// After output began the stream broke with `reason`.
    async fn recover(&mut self, reason: Error) -> Result<(), Error> {
        self.conn = None;
        let policy = self.inner.cfg.on_break;
        if policy == OnBreak::Fail || self.recoveries >= MAX_RECOVERIES {
            return Err(reason);
        }
        self.recoveries += 1;
        if let (Some(id), Some(last)) = (self.request_id.clone(), self.last_event_id.clone()) {
            self.out.stats.resumes += 1;
            self.out.stats.attempts += 1;
            let now = Instant::now();
            let deadline =
                Deadline::after(now, Timeout::Idle(self.inner.cfg.timeouts.idle)).min(self.total);
            let target = Target::Resume {
                id: id.clone(),
                last_event_id: last,
            };
            let at = self.endpoint.unwrap_or(0);
            if let Ok(conn) = attempt::open(&self.inner, at, &target, id, deadline).await {
                self.out.stats.instance = conn.instance.clone();
                self.conn = Some(conn);
                self.last_event_at = Some(now);
                return Ok(());
            }
        }
        // A continuation re-sends the text as an assistant turn; reasoning
        // and tool calls cannot be sent back that way, so such an answer
        // fails with what arrived rather than lose or repeat any of it.
        let parts = self
            .out
            .choices
            .iter()
            .any(|c| !c.reasoning.is_empty() || !c.tool_calls.is_empty());
        if policy != OnBreak::Continue || parts {
            return Err(reason);
        }
        let text = self.out.text().to_string();
        let Some(next) =
            self.original
                .continued(&text, self.tokens, &self.inner.cfg.continue_fields)
        else {
            return Err(reason);
        };
        self.out.stats.continuations += 1;
        self.out.stats.extra_prompt_tokens += self.tokens;
        self.tokens_before = self.tokens;
        self.flush_seam();
        self.seam = Some(Seam {
            before: text,
            held: String::new(),
        });
        self.current = next;
        self.open(false).await
    }

    /// Handles one data event.
    fn on_event(&mut self, id: Option<String>, data: &str, at: Instant) -> Result<(), Error> {
        self.last_event_at = Some(at);
        if id.is_some() {
            self.last_event_id = id;
        }
        match self.decoder.decode(data)? {
            Event::Done => {
                self.finish(at);
                Ok(())
            }
            Event::Chunks(ws) => ws.into_iter().try_for_each(|w| self.on_chunk(w, at)),
            Event::Last(ws) => {
                ws.into_iter().try_for_each(|w| self.on_chunk(w, at))?;
                if self.state != State::Done {
                    self.finish(at);
                }
                Ok(())
            }
        }
    }

    /// Handles one chunk (a Responses event may amount to two).
    fn on_chunk(&mut self, w: Wire, at: Instant) -> Result<(), Error> {
        let mut icl_recorded = false;
        if let Some(e) = &w.error {
            return Err(Error::Stream(Box::new(error_body(e))));
        }
        // Servers that put usage on every chunk say how many tokens each
        // event carried.
        let mut event_tokens = None;
        if let Some(u) = w.usage {
            if u.completion_tokens > self.usage_seen {
                event_tokens = Some(u.completion_tokens - self.usage_seen);
                self.usage_seen = u.completion_tokens;
            }
            let mut usage = u.usage();
            usage.completion_tokens += self.tokens_before;
            usage.prompt_tokens = usage.prompt_tokens.saturating_sub(self.tokens_before);
            usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
            self.out.usage = Some(usage);
            self.usage_final = w.choices.is_empty() || self.all_finished();
        }
        for c in &w.choices {
            let i = c.index as usize;
            if i >= self.choices {
                return Err(Error::Protocol(format!(
                    "choice index {i} but {} choices were asked for",
                    self.choices
                )));
            }
            let mut text = c.text().to_string();
            if i == 0 {
                text = self.through_seam(text);
            }
            let parts = c.part().is_some_and(|p| self.out.choices[i].absorb(p));
            if !text.is_empty() || parts {
                // ICL: gaps between events that carry output text.
                if !icl_recorded {
                    icl_recorded = true;
                    if let Some(p) = self.last_text_at.replace(at) {
                        self.out.stats.icl.push(at.saturating_duration_since(p));
                    }
                }
                let k = if self.choices == 1 {
                    event_tokens.unwrap_or(1)
                } else {
                    1
                };
                self.events_with_text += 1;
                self.events_counted += u64::from(self.choices == 1 && event_tokens.is_some());
                self.out.stats.per_event_token_counts =
                    self.events_with_text == self.events_counted;
                self.token_times(i, k, at);
                self.tokens += k;
                self.out.choices[i].text.push_str(&text);
                self.queue.push_back(Delta {
                    choice: i as u32,
                    text,
                    tokens: k,
                });
            }
            if let Some(f) = &c.finish_reason {
                self.out.choices[i].finish_reason = Some(f.clone());
                if w.timing.is_some() {
                    self.out.choices[i].timing = w.timing;
                }
            }
        }
        let usage_done = !self.current.wants_usage() || self.usage_final;
        if self.all_finished() && usage_done {
            self.finish(at);
        }
        Ok(())
    }

    fn all_finished(&self) -> bool {
        self.out.choices.iter().all(|c| c.finish_reason.is_some())
    }

    fn token_times(&mut self, i: usize, k: u64, at: Instant) {
        let stats = &mut self.out.stats;
        if stats.ttft.is_none() {
            let ttft = at.saturating_duration_since(self.started);
            stats.ttft = Some(ttft);
            self.inner.ttft.record(ttft);
        } else if let Some(prev) = self.last_token_at[i] {
            let gap = at.saturating_duration_since(prev) / k.max(1) as u32;
            stats.itl.extend(std::iter::repeat_n(gap, k as usize));
        }
        self.last_token_at[i] = Some(at);
    }

    /// Filters a continuation's first text against what came before it.
    fn through_seam(&mut self, text: String) -> String {
        let Some(seam) = &mut self.seam else {
            return text;
        };
        seam.held.push_str(&text);
        if seam.held.len() < seam.before.len() && seam.before.starts_with(&seam.held) {
            // Possibly the prefix echoed back; wait for more.
            return String::new();
        }
        let Seam { before, held } = self.seam.take().expect("seam");
        if let Some(rest) = held.strip_prefix(&before) {
            return rest.to_string();
        }
        if before.ends_with(' ') {
            if let Some(rest) = held.strip_prefix(' ') {
                return rest.to_string();
            }
        }
        held
    }

    /// Text held at the seam that turned out not to be an echo.
    fn flush_seam(&mut self) {
        if let Some(seam) = self.seam.take() {
            if !seam.held.is_empty() {
                self.out.choices[0].text.push_str(&seam.held);
                self.queue.push_back(Delta {
                    choice: 0,
                    text: seam.held,
                    tokens: 1,
                });
            }
        }
    }

    fn finish(&mut self, at: Instant) {
        self.flush_seam();
        self.state = State::Done;
        if let Some(c) = self.conn.take() {
            c.finish();
        }
        let s = &mut self.out.stats;
        s.e2e = at.saturating_duration_since(self.started);
        s.output_tokens = self
            .out
            .usage
            .map_or(self.tokens, |u| u.completion_tokens.max(self.tokens));
        s.request_id = self.request_id.clone();
        s.server = self.out.choices.first().and_then(|c| c.timing);
    }
}
