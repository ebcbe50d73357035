//! Engine events to OpenAI bodies: the SSE stream as a pure state machine
//! ([`StreamEncoder`]: events in, frames out, no I/O) and the whole
//! response of a non-streaming request ([`Collected`] per choice).

use crate::answer::{self, Whole};
use crate::params::LogprobStyle;
use hasten_engine::{Event, Finish, TokenEvent};
use hasten_model::output::{OutputSpec, OutputStream};
use hasten_protocol::chat::{
    ChatChoice, ChatCompletion, ChatCompletionChunk, ChatLogprobs, ChunkChoice, Delta,
    TokenLogprob, TopLogprob,
};
use hasten_protocol::completions::{Completion, CompletionChoice, CompletionLogprobs};
use hasten_protocol::{CompletionTokensDetails, ErrorBody, PromptTokensDetails, Timing, Usage};
use std::sync::Arc;

/// Which endpoint's shapes to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Completion,
}

/// The display text of a token id (for logprobs).
pub type TokenText = Arc<dyn Fn(u32) -> String + Send + Sync>;

/// Fields every body of one response repeats.
#[derive(Debug, Clone)]
pub struct Header {
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// One SSE frame: a comment (`: text`) or a `data:` payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Comment(String),
    Data(String),
}

pub fn timing_of(f: &Finish) -> Timing {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    Timing {
        queue_ms: ms(f.timing.queue),
        prefill_ms: ms(f.timing.prefill),
        decode_ms: ms(f.timing.decode),
        prompt_tokens: f.prompt_tokens as u64,
        cached_prompt_tokens: f.cached_prompt_tokens as u64,
        drafted_tokens: f.drafted_tokens as u64,
        accepted_tokens: f.accepted_tokens as u64,
    }
}

/// Usage summed over choices; a prompt shared by `n` choices counts once
/// per distinct prompt (OpenAI counts the prompt once).
fn usage_of(fins: &[(usize, &Finish)], n_per_prompt: usize, reasoning: Option<u64>) -> Usage {
    let mut u = Usage::default();
    let mut cached = 0;
    for &(i, f) in fins {
        if i % n_per_prompt.max(1) == 0 {
            u.prompt_tokens += f.prompt_tokens as u64;
            cached += f.cached_prompt_tokens as u64;
        }
        u.completion_tokens += f.output_tokens as u64;
    }
    u.total_tokens = u.prompt_tokens + u.completion_tokens;
    u.prompt_tokens_details = Some(PromptTokensDetails {
        cached_tokens: cached,
    });
    u.completion_tokens_details = reasoning.map(|r| CompletionTokensDetails {
        reasoning_tokens: r,
    });
    u
}

fn chat_logprob(t: &TokenEvent, text: &TokenText) -> Option<TokenLogprob> {
    let lp = t.logprobs.as_ref()?;
    let tok = text(t.id);
    Some(TokenLogprob {
        bytes: Some(tok.as_bytes().to_vec()),
        token: tok,
        logprob: lp.logprob,
        top_logprobs: lp
            .top
            .iter()
            .map(|&(id, logprob)| {
                let s = text(id);
                TopLogprob {
                    bytes: Some(s.as_bytes().to_vec()),
                    token: s,
                    logprob,
                }
            })
            .collect(),
    })
}

fn legacy_push(out: &mut CompletionLogprobs, t: &TokenEvent, text: &TokenText, offset: usize) {
    let Some(lp) = &t.logprobs else { return };
    out.tokens.push(text(t.id));
    out.token_logprobs.push(lp.logprob);
    out.top_logprobs
        .push(lp.top.iter().map(|&(id, l)| (text(id), l)).collect());
    out.text_offset.push(offset as u64);
}

#[derive(Debug, Default, Clone)]
struct ChoiceState {
    finish: Option<Finish>,
    /// Output tokens produced so far.
    tokens: u64,
    failed: bool,
    text_len: usize,
    /// Splits a chat answer into reasoning, text and tool calls.
    parts: Option<OutputStream>,
}

/// The SSE stream of one response with `n` choices.
pub struct StreamEncoder {
    kind: Kind,
    head: Header,
    include_usage: bool,
    /// Prompt tokens per choice, when every chunk carries usage.
    continuous: Option<Vec<u64>>,
    logprobs: LogprobStyle,
    n_per_prompt: usize,
    text: TokenText,
    choices: Vec<ChoiceState>,
    done: bool,
    /// Chat answers are split into parts.
    split: bool,
}

impl StreamEncoder {
    pub fn new(
        kind: Kind,
        head: Header,
        choices: usize,
        n_per_prompt: usize,
        include_usage: bool,
        logprobs: LogprobStyle,
        text: TokenText,
    ) -> Self {
        StreamEncoder {
            kind,
            head,
            include_usage,
            continuous: None,
            logprobs,
            n_per_prompt,
            text,
            choices: vec![ChoiceState::default(); choices],
            done: false,
            split: false,
        }
    }

    /// Splits each chat answer into reasoning, text and tool calls.
    pub fn with_output(mut self, spec: &OutputSpec) -> Self {
        if self.kind == Kind::Chat {
            self.split = true;
            for c in &mut self.choices {
                c.parts = Some(OutputStream::new(spec.clone()));
            }
        }
        self
    }

    /// Puts usage (tokens so far) on every chunk, vLLM's
    /// `continuous_usage_stats`; `prompt_tokens` per choice.
    pub fn with_continuous_usage(mut self, prompt_tokens: Vec<u64>) -> Self {
        self.continuous = Some(prompt_tokens);
        self
    }

    /// Usage so far, for a chunk of choice `i` (all choices' output counted).
    fn running_usage(&self, i: usize) -> Option<Usage> {
        let prompt = *self.continuous.as_ref()?.get(i)?;
        let completion = self.choices.iter().map(|c| c.tokens).sum::<u64>();
        Some(Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            ..Usage::default()
        })
    }

    /// Frames before any event: chat streams open each choice with its role.
    pub fn start(&mut self) -> Vec<Frame> {
        match self.kind {
            Kind::Completion => Vec::new(),
            Kind::Chat => (0..self.choices.len())
                .map(|i| {
                    let delta = Delta {
                        role: Some("assistant".into()),
                        content: Some(String::new()),
                        ..Delta::default()
                    };
                    self.chat_chunk(i, delta, None, None, None)
                })
                .collect(),
        }
    }

    /// True once `[DONE]` has been produced.
    pub fn is_done(&self) -> bool {
        self.done
    }

    pub fn event(&mut self, i: usize, ev: Event) -> Vec<Frame> {
        if self.done || self.choices[i].finish.is_some() || self.choices[i].failed {
            return Vec::new();
        }
        let mut out = Vec::new();
        match ev {
            Event::Prefill { done, total } => {
                out.push(Frame::Comment(format!("prefill done={done} total={total}")))
            }
            Event::Token(t) => {
                self.choices[i].tokens = t.index as u64 + 1;
                if self.choices[i].parts.is_some() {
                    out.extend(self.parts(i, &t.text, Some(&t), false));
                } else if !t.text.is_empty() || self.logprobs != LogprobStyle::None {
                    out.push(self.content(i, &t.text, Some(&t)));
                }
            }
            Event::Finished(f) => {
                self.choices[i].tokens = f.output_tokens as u64;
                let mut reason = f.reason.as_openai().to_owned();
                if self.choices[i].parts.is_some() {
                    // The last pieces first: a call may close only now.
                    out.extend(self.parts(i, &f.text, None, true));
                    let called = self.choices[i]
                        .parts
                        .as_ref()
                        .is_some_and(OutputStream::called);
                    reason = answer::finish_reason(&reason, called);
                } else if !f.text.is_empty() {
                    out.push(self.content(i, &f.text, None));
                }
                let timing = Some(timing_of(&f));
                out.push(match self.kind {
                    Kind::Chat => {
                        let end = Some((reason, f.stop.clone()));
                        self.chat_chunk(i, Delta::default(), None, end, timing)
                    }
                    Kind::Completion => {
                        self.completion_chunk(i, String::new(), None, Some(reason), timing)
                    }
                });
                self.choices[i].finish = Some(f);
            }
            Event::Failed(m) => {
                tracing::error!("generation failed: {m}");
                self.choices[i].failed = true;
                let body = ErrorBody {
                    error: crate::error::Error::Internal(m).body(),
                };
                out.push(Frame::Data(json(&body)));
            }
        }
        if self.choices.iter().all(|c| c.finish.is_some() || c.failed) {
            out.extend(self.close());
        }
        out
    }

    /// Ends the stream early with an error event (timeouts).
    pub fn abort(&mut self, err: &crate::error::Error) -> Vec<Frame> {
        if self.done {
            return Vec::new();
        }
        let mut out = vec![Frame::Data(json(&ErrorBody { error: err.body() }))];
        out.extend(self.close());
        out
    }

    fn close(&mut self) -> Vec<Frame> {
        self.done = true;
        let mut out = Vec::new();
        if self.include_usage {
            let fins: Vec<(usize, &Finish)> = self
                .choices
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.finish.as_ref().map(|f| (i, f)))
                .collect();
            let reasoning = self.split.then(|| {
                self.choices
                    .iter()
                    .filter_map(|c| c.parts.as_ref())
                    .map(|p| p.reasoning_tokens() as u64)
                    .sum()
            });
            let usage = Some(usage_of(&fins, self.n_per_prompt, reasoning));
            out.push(Frame::Data(match self.kind {
                Kind::Chat => json(&ChatCompletionChunk {
                    id: self.head.id.clone(),
                    object: "chat.completion.chunk".into(),
                    created: self.head.created,
                    model: self.head.model.clone(),
                    choices: Vec::new(),
                    usage,
                    timing: None,
                }),
                Kind::Completion => json(&Completion {
                    id: self.head.id.clone(),
                    object: "text_completion".into(),
                    created: self.head.created,
                    model: self.head.model.clone(),
                    choices: Vec::new(),
                    usage,
                    timing: None,
                }),
            }));
        }
        out.push(Frame::Data("[DONE]".into()));
        out
    }

    /// The chunks of one token's text (or the final text, `last`) of a
    /// split chat answer; the token's logprobs ride on the first.
    fn parts(&mut self, i: usize, text: &str, t: Option<&TokenEvent>, last: bool) -> Vec<Frame> {
        let Some(p) = self.choices[i].parts.as_mut() else {
            return Vec::new();
        };
        let mut pieces = p.push(text);
        if last {
            pieces.extend(p.finish());
        }
        let mut lp = t
            .and_then(|t| chat_logprob(t, &self.text))
            .map(|l| ChatLogprobs { content: vec![l] });
        let mut out = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let d = answer::delta(piece, &self.head.id, i);
            out.push(self.chat_chunk(i, d, lp.take(), None, None));
        }
        if let Some(lp) = lp {
            out.push(self.chat_chunk(i, Delta::default(), Some(lp), None, None));
        }
        out
    }

    fn content(&mut self, i: usize, text: &str, t: Option<&TokenEvent>) -> Frame {
        let offset = self.choices[i].text_len;
        self.choices[i].text_len += text.len();
        match self.kind {
            Kind::Chat => {
                let lp = t
                    .and_then(|t| chat_logprob(t, &self.text))
                    .map(|l| ChatLogprobs { content: vec![l] });
                let delta = Delta {
                    content: Some(text.to_owned()),
                    ..Delta::default()
                };
                self.chat_chunk(i, delta, lp, None, None)
            }
            Kind::Completion => {
                let lp = t.filter(|t| t.logprobs.is_some()).map(|t| {
                    let mut l = CompletionLogprobs::default();
                    legacy_push(&mut l, t, &self.text, offset);
                    l
                });
                self.completion_chunk(i, text.to_owned(), lp, None, None)
            }
        }
    }

    fn chat_chunk(
        &self,
        i: usize,
        delta: Delta,
        logprobs: Option<ChatLogprobs>,
        // The finish reason and the stop string that ended the answer.
        end: Option<(String, Option<String>)>,
        timing: Option<Timing>,
    ) -> Frame {
        let (finish_reason, stop_reason) = end.map_or((None, None), |(r, s)| (Some(r), s));
        Frame::Data(json(&ChatCompletionChunk {
            id: self.head.id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.head.created,
            model: self.head.model.clone(),
            choices: vec![ChunkChoice {
                index: i as u32,
                delta,
                logprobs,
                finish_reason,
                stop_reason,
            }],
            usage: self.running_usage(i),
            timing,
        }))
    }

    fn completion_chunk(
        &self,
        i: usize,
        text: String,
        logprobs: Option<CompletionLogprobs>,
        finish_reason: Option<String>,
        timing: Option<Timing>,
    ) -> Frame {
        Frame::Data(json(&Completion {
            id: self.head.id.clone(),
            object: "text_completion".into(),
            created: self.head.created,
            model: self.head.model.clone(),
            choices: vec![CompletionChoice {
                index: i as u32,
                text,
                logprobs,
                finish_reason,
            }],
            usage: self.running_usage(i),
            timing,
        }))
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("protocol types always serialize")
}

/// One choice of a non-streaming response, gathered from its events.
#[derive(Debug, Default)]
pub struct Collected {
    pub text: String,
    pub tokens: Vec<TokenEvent>,
    pub finish: Option<Finish>,
    pub failed: Option<String>,
}

impl Collected {
    /// Applies one event; returns true when the choice has ended.
    pub fn push(&mut self, ev: Event) -> bool {
        match ev {
            Event::Prefill { .. } => false,
            Event::Token(t) => {
                self.text.push_str(&t.text);
                self.tokens.push(t);
                false
            }
            Event::Finished(f) => {
                self.text.push_str(&f.text);
                self.finish = Some(f);
                true
            }
            Event::Failed(m) => {
                self.failed = Some(m);
                true
            }
        }
    }
}

/// The slowest choice's queue, prefill and decode times (choices run
/// concurrently), and the request's prompt figures.
pub fn overall_timing(choices: &[Collected]) -> Option<Timing> {
    let mut it = choices
        .iter()
        .filter_map(|c| c.finish.as_ref())
        .map(timing_of);
    let first = it.next()?;
    Some(it.fold(first, |a, b| Timing {
        queue_ms: a.queue_ms.max(b.queue_ms),
        prefill_ms: a.prefill_ms.max(b.prefill_ms),
        decode_ms: a.decode_ms.max(b.decode_ms),
        prompt_tokens: a.prompt_tokens,
        cached_prompt_tokens: a.cached_prompt_tokens.min(b.cached_prompt_tokens),
        drafted_tokens: a.drafted_tokens + b.drafted_tokens,
        accepted_tokens: a.accepted_tokens + b.accepted_tokens,
    }))
}

/// The `Server-Timing` header value for a breakdown.
pub fn server_timing(t: &Timing) -> String {
    format!(
        "queue;dur={:.3}, prefill;dur={:.3}, decode;dur={:.3}, prompt_tokens;desc=\"{}\", cached_prompt_tokens;desc=\"{}\"",
        t.queue_ms, t.prefill_ms, t.decode_ms, t.prompt_tokens, t.cached_prompt_tokens
    )
}

fn finished(choices: &[Collected]) -> Vec<(usize, &Finish)> {
    choices
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.finish.as_ref().map(|f| (i, f)))
        .collect()
}

fn reason(c: &Collected) -> Option<String> {
    c.finish.as_ref().map(|f| f.reason.as_openai().to_owned())
}

/// The whole answer of one choice, split when `output` says so.
fn whole(c: &Collected, output: Option<&OutputSpec>, id: &str, i: usize) -> Whole {
    match output {
        Some(spec) => {
            let last = c.finish.as_ref().map(|f| f.text.as_str());
            let texts = c.tokens.iter().map(|t| t.text.as_str()).chain(last);
            Whole::of(spec, texts, id, i)
        }
        None => Whole {
            content: c.text.clone(),
            ..Whole::default()
        },
    }
}

pub fn chat_response(
    head: Header,
    choices: &[Collected],
    n_per_prompt: usize,
    style: LogprobStyle,
    text: &TokenText,
    output: Option<&OutputSpec>,
) -> ChatCompletion {
    let wholes: Vec<Whole> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| whole(c, output, &head.id, i))
        .collect();
    let reasoning = output.map(|_| wholes.iter().map(|w| w.reasoning_tokens as u64).sum());
    ChatCompletion {
        usage: usage_of(&finished(choices), n_per_prompt, reasoning),
        id: head.id,
        object: "chat.completion".into(),
        created: head.created,
        model: head.model,
        timing: overall_timing(choices),
        choices: choices
            .iter()
            .zip(wholes)
            .enumerate()
            .map(|(i, (c, w))| ChatChoice {
                index: i as u32,
                stop_reason: c.finish.as_ref().and_then(|f| f.stop.clone()),
                finish_reason: reason(c).map(|r| answer::finish_reason(&r, !w.calls.is_empty())),
                message: w.message(),
                logprobs: (style != LogprobStyle::None).then(|| ChatLogprobs {
                    content: c
                        .tokens
                        .iter()
                        .filter_map(|t| chat_logprob(t, text))
                        .collect(),
                }),
            })
            .collect(),
    }
}

pub fn completion_response(
    head: Header,
    choices: &[Collected],
    n_per_prompt: usize,
    style: LogprobStyle,
    text: &TokenText,
) -> Completion {
    Completion {
        id: head.id,
        object: "text_completion".into(),
        created: head.created,
        model: head.model,
        usage: Some(usage_of(&finished(choices), n_per_prompt, None)),
        timing: overall_timing(choices),
        choices: choices
            .iter()
            .enumerate()
            .map(|(i, c)| CompletionChoice {
                index: i as u32,
                text: c.text.clone(),
                logprobs: (style != LogprobStyle::None).then(|| {
                    let mut l = CompletionLogprobs::default();
                    let mut offset = 0;
                    for t in &c.tokens {
                        legacy_push(&mut l, t, text, offset);
                        offset += t.text.len();
                    }
                    l
                }),
                finish_reason: reason(c),
            })
            .collect(),
    }
}

#[cfg(test)]
#[path = "respond_tests.rs"]
mod tests;
