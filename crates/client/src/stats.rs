//! What a finished (or failed) request reports: its text per choice, usage,
//! and client-side latency in the terms of `latency-vocabulary.md`: TTFT,
//! ITL (per token, from server token counts where the server gives them),
//! ICL (per event), E2E, TPOT, plus what the client did to get the answer
//! (attempts, retries, hedges, resumes, continuations).

use hasten_protocol::chat::{FunctionCall, ToolCall};
use hasten_protocol::{Timing, Usage};
use std::time::Duration;

/// One streamed piece of text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    /// The choice it belongs to.
    pub choice: u32,
    pub text: String,
    /// Tokens the server says this event carried (1 when it does not say).
    pub tokens: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChoiceOutput {
    pub text: String,
    /// `reasoning_content`, put together from its deltas.
    pub reasoning: String,
    /// Tool calls, put together from their deltas (id and name from the
    /// first piece of each index, arguments appended) or taken whole.
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    /// hasten's server-side breakdown for this choice, when sent.
    pub timing: Option<Timing>,
}

impl ChoiceOutput {
    /// Adds a chat message's or delta's reasoning and tool calls (its text
    /// is the caller's: continuations may trim it). True if it had any.
    pub(crate) fn absorb(&mut self, part: &crate::request::WireText) -> bool {
        let mut any = false;
        if let Some(r) = part.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
            self.reasoning.push_str(r);
            any = true;
        }
        for c in part.tool_calls.iter().flatten() {
            any = true;
            // A message's calls have no index: they come whole, in order.
            let i = c.index.map_or(self.tool_calls.len(), |i| i as usize);
            if i >= self.tool_calls.len() {
                self.tool_calls.resize(
                    i + 1,
                    ToolCall {
                        id: String::new(),
                        kind: "function".into(),
                        function: FunctionCall {
                            name: String::new(),
                            arguments: String::new(),
                        },
                    },
                );
            }
            let t = &mut self.tool_calls[i];
            if let Some(id) = &c.id {
                t.id.clone_from(id);
            }
            if let Some(n) = &c.function.name {
                t.function.name.push_str(n);
            }
            if let Some(a) = &c.function.arguments {
                t.function.arguments.push_str(a);
            }
        }
        any
    }
}

/// The answer: text per choice, usage, stats.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    pub choices: Vec<ChoiceOutput>,
    /// As the server reported it, with continuations folded in (the
    /// prompt the caller sent, every token generated).
    pub usage: Option<Usage>,
    pub stats: Stats,
}

impl Output {
    /// The first choice's text.
    pub fn text(&self) -> &str {
        self.choices.first().map_or("", |c| c.text.as_str())
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Send → first byte of the first event carrying output text.
    pub ttft: Option<Duration>,
    /// Send → the last byte read (`[DONE]`, a final chunk, or the body end).
    pub e2e: Duration,
    /// One sample per token after the first: an event carrying k tokens
    /// after a gap g gives k samples of g/k.
    pub itl: Vec<Duration>,
    /// Gaps between consecutive events that carry output text (chunks),
    /// after the first token.
    pub icl: Vec<Duration>,
    /// Every event's token count came from the server (usage on each
    /// chunk), so `itl` is token-accurate; otherwise an event counts as
    /// one token.
    pub per_event_token_counts: bool,
    /// Output tokens (the server's count when it gave one).
    pub output_tokens: u64,
    /// HTTP requests made, hedges and resumes included.
    pub attempts: u32,
    pub retries: u32,
    pub hedges: u32,
    /// Whether the hedged (second) request produced the answer.
    pub hedge_won: bool,
    pub resumes: u32,
    pub continuations: u32,
    /// Output tokens sent back to the server as prompt by continuations.
    pub extra_prompt_tokens: u64,
    /// A retry was wanted but the shared retry budget was empty.
    pub retry_budget_exhausted: bool,
    /// The `x-request-id` of the attempt that produced the answer.
    pub request_id: Option<String>,
    /// The base URL of the endpoint that produced the answer (the last,
    /// after resumes and continuations).
    pub endpoint: Option<String>,
    /// Attempts sent to another endpoint than the attempt before them
    /// (retries, and continuations after a replica broke).
    pub failovers: u32,
    /// The replica that gave the answer, when it names itself
    /// (`x-hasten-instance`; through a gateway the endpoint is the gateway).
    pub instance: Option<String>,
    /// The server's breakdown (first choice's, or the `Server-Timing`
    /// header of a non-streaming response).
    pub server: Option<Timing>,
}

impl Stats {
    /// (E2E − TTFT) / (output tokens − 1); `None` for one-token outputs.
    pub fn tpot(&self) -> Option<Duration> {
        let ttft = self.ttft?;
        if self.output_tokens < 2 {
            return None;
        }
        Some(self.e2e.saturating_sub(ttft) / (self.output_tokens - 1) as u32)
    }

    /// Client time not spent in the server: E2E − (queue + prefill +
    /// decode), when the server sent its breakdown.
    pub fn network(&self) -> Option<Duration> {
        let s = self.server?;
        let server =
            Duration::from_secs_f64((s.queue_ms + s.prefill_ms + s.decode_ms).max(0.0) / 1e3);
        Some(self.e2e.saturating_sub(server))
    }
}

/// The `q`-quantile (0..=1, nearest rank) of `samples`.
pub fn percentile(samples: &[Duration], q: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort();
    let rank = ((v.len() as f64) * q.clamp(0.0, 1.0)).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tpot_follows_the_vocabulary() {
        let mut s = Stats {
            ttft: Some(Duration::from_millis(100)),
            e2e: Duration::from_millis(190),
            output_tokens: 10,
            ..Stats::default()
        };
        assert_eq!(s.tpot(), Some(Duration::from_millis(10)));
        s.output_tokens = 1;
        assert_eq!(s.tpot(), None);
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            percentile(&ms(&[5, 1, 3, 2, 4]), 0.5),
            Some(Duration::from_millis(3))
        );
        assert_eq!(
            percentile(&ms(&[5, 1, 3, 2, 4]), 1.0),
            Some(Duration::from_millis(5))
        );
        assert_eq!(percentile(&[], 0.5), None);
    }
}
