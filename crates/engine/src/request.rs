//! What goes into the engine (a validated [`Request`]) and what comes out
//! (a stream of [`Event`]s ending in a [`Finish`]).
//!
//! Field names for times follow `latency-vocabulary.md`: queue time is
//! arrival until the first prompt token enters a forward pass, prefill time
//! from then until the first output token's logits exist, decode time from
//! then to the last token.

use crate::error::{Error, Result};
use hasten_model::sampler::SamplingParams;
use std::time::{Duration, Instant};

/// The most `top_logprobs` a request may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// A request as the caller describes it; [`Request::validate`] checks it.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    pub max_tokens: usize,
    /// Stop before any of these strings (not included in the output).
    pub stop: Vec<String>,
    /// Extra token ids that end generation (besides the model's EOS).
    pub stop_tokens: Vec<u32>,
    /// Keep generating through end-of-sequence tokens (benchmarks).
    pub ignore_eos: bool,
    /// Reject the request rather than start it when its first token cannot
    /// arrive before this instant.
    pub deadline: Option<Instant>,
    /// Log-probabilities of each sampled token and of this many alternatives.
    pub logprobs: Option<usize>,
    /// Hold the token events until the request ends and send them with
    /// its `Finished` (for a caller that reads the answer whole: no wake-up
    /// per token). Cancellation still works: it watches the receiver.
    pub deliver_at_end: bool,
    /// What the output must match (compiled by [`crate::Engine::validate`]).
    pub grammar: Option<crate::constraint::Grammar>,
    /// Show control tokens (e.g. Mistral's `[TOOL_CALLS]`) as their
    /// vocabulary text, as vLLM's `skip_special_tokens: false` does; the
    /// tokens that end the output never show.
    pub special_text: bool,
    /// Which drafter speculative decoding uses for this request (a
    /// request's `"speculate"`).
    pub speculate: Speculate,
}

/// A request's choice of speculative decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Speculate {
    /// The engine's own: its draft model if it has one, else prompt
    /// lookup, if it speculates at all.
    #[default]
    Auto,
    /// No drafts: one token per step.
    Off,
    /// Prompt lookup (free: no second model), on any speculating engine.
    Ngram,
    /// The engine's draft model (needs one).
    Model,
}

impl RequestSpec {
    /// Greedy decoding of `prompt` for `max_tokens` tokens.
    pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Self {
        RequestSpec {
            prompt,
            params: SamplingParams::greedy(),
            max_tokens,
            stop: Vec::new(),
            stop_tokens: Vec::new(),
            ignore_eos: false,
            deadline: None,
            logprobs: None,
            deliver_at_end: false,
            grammar: None,
            special_text: false,
            speculate: Speculate::Auto,
        }
    }
}

/// What the model and engine allow; requests are checked against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub vocab_size: usize,
    pub context_length: usize,
    /// Tokens the whole KV cache holds (a request must fit on its own).
    pub kv_tokens: usize,
    /// The engine drafts and verifies tokens (speculative decoding).
    pub speculates: bool,
    /// It has a draft model (`"speculate": "draft"`).
    pub draft_model: bool,
    /// How KV rows are stored, and the bytes one token's rows take (both
    /// models'): for the start-up line.
    pub kv_type: hasten_kernels::attention::KvType,
    pub kv_bytes_per_token: usize,
    /// Bytes of the sliding-window layers' own pool (0 when every layer
    /// keeps every position in the main pool).
    pub kv_windowed_bytes: usize,
}

/// A request the engine accepts: only [`Request::validate`] makes one.
#[derive(Debug, Clone)]
pub struct Request {
    pub(crate) spec: RequestSpec,
    /// The compiled grammar, if the spec has one.
    pub(crate) constraint: Option<crate::constraint::Constraint>,
}

impl Request {
    pub fn validate(spec: RequestSpec, limits: &Limits) -> Result<Request> {
        if spec.prompt.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        let vocab = limits.vocab_size;
        if let Some(&token) = spec
            .prompt
            .iter()
            .chain(&spec.stop_tokens)
            .find(|&&t| t as usize >= vocab)
        {
            return Err(Error::TokenOutOfRange { token, vocab });
        }
        if spec.max_tokens == 0 {
            return Err(Error::ZeroMaxTokens);
        }
        let needed = spec.prompt.len().saturating_add(spec.max_tokens);
        if needed > limits.context_length {
            return Err(Error::ContextLengthExceeded {
                prompt: spec.prompt.len(),
                max_tokens: spec.max_tokens,
                context: limits.context_length,
            });
        }
        if needed > limits.kv_tokens {
            return Err(Error::KvCapacity {
                needed,
                capacity: limits.kv_tokens,
            });
        }
        if let Some(n) = spec.logprobs {
            if n > MAX_TOP_LOGPROBS {
                return Err(Error::TooManyLogprobs {
                    got: n,
                    max: MAX_TOP_LOGPROBS,
                });
            }
        }
        spec.params
            .validate(vocab)
            .map_err(|e| Error::BadParams(e.to_string()))?;
        Ok(Request {
            spec,
            constraint: None,
        })
    }

    pub fn spec(&self) -> &RequestSpec {
        &self.spec
    }
}

/// One output token.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    pub id: u32,
    /// Text that became safe to show with this token (may be empty while
    /// a multi-byte character or a possible stop string is held back).
    pub text: String,
    /// 0 for the first output token.
    pub index: usize,
    /// When the engine produced it.
    pub at: Instant,
    pub logprobs: Option<TokenLogprobs>,
}

/// Log-probabilities from the model's distribution (before sampling settings).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    pub logprob: f32,
    /// The most likely tokens, best first.
    pub top: Vec<(u32, f32)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// End of sequence, a stop token or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The deadline could no longer be met before the first token.
    Deadline,
}

impl FinishReason {
    /// OpenAI's name (`stop`, `length`); deadlines report `length` there.
    pub fn as_openai(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length | FinishReason::Deadline => "length",
        }
    }
}

/// The server-side latency breakdown of one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub received: Instant,
    pub queue: Duration,
    pub prefill: Duration,
    pub decode: Duration,
    /// Times the sequence was preempted and recomputed.
    pub preemptions: u32,
}

/// The last event of every stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    pub reason: FinishReason,
    /// Text held back until the end (an incomplete stop-string prefix).
    pub text: String,
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_prompt_tokens: usize,
    pub output_tokens: usize,
    /// Speculative decoding: tokens drafted for this request, and accepted.
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
    /// The stop string that ended the output, if one did (vLLM's
    /// `stop_reason`).
    pub stop: Option<String>,
    pub timing: Timing,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A prompt chunk was computed: `done` of `total` prompt tokens have KV
    /// (sent while prefill is unfinished, so streams can show progress).
    Prefill {
        done: usize,
        total: usize,
    },
    Token(TokenEvent),
    Finished(Finish),
    /// The forward pass failed; the stream ends here.
    Failed(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits {
        vocab_size: 100,
        context_length: 64,
        kv_tokens: 48,
        speculates: false,
        draft_model: false,
        kv_type: hasten_kernels::attention::KvType::F16,
        kv_bytes_per_token: 0,
        kv_windowed_bytes: 0,
    };

    #[test]
    fn validation_names_the_problem() {
        let ok = RequestSpec::greedy(vec![1, 2, 3], 8);
        assert!(Request::validate(ok.clone(), &L).is_ok());
        let bad = |f: &dyn Fn(&mut RequestSpec)| {
            let mut s = ok.clone();
            f(&mut s);
            Request::validate(s, &L).unwrap_err()
        };
        assert!(matches!(bad(&|s| s.prompt.clear()), Error::EmptyPrompt));
        assert!(matches!(
            bad(&|s| s.prompt[1] = 100),
            Error::TokenOutOfRange { token: 100, .. }
        ));
        assert!(matches!(bad(&|s| s.max_tokens = 0), Error::ZeroMaxTokens));
        assert!(matches!(
            bad(&|s| s.max_tokens = 62),
            Error::ContextLengthExceeded {
                prompt: 3,
                max_tokens: 62,
                context: 64
            }
        ));
        assert!(matches!(
            bad(&|s| s.max_tokens = 50),
            Error::KvCapacity { .. }
        ));
        assert!(matches!(
            bad(&|s| s.logprobs = Some(21)),
            Error::TooManyLogprobs { .. }
        ));
        assert!(matches!(
            bad(&|s| s.params.temperature = -1.0),
            Error::BadParams(_)
        ));
        assert!(matches!(
            bad(&|s| s.stop_tokens = vec![500]),
            Error::TokenOutOfRange { .. }
        ));
    }
}
