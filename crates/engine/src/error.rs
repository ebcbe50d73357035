//! The one error type of hasten-engine: why a request was refused.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("token id {token} is outside the vocabulary of {vocab}")]
    TokenOutOfRange { token: u32, vocab: usize },
    #[error("max_tokens must be at least 1")]
    ZeroMaxTokens,
    #[error(
        "this model's maximum context length is {context} tokens; the request asks for {prompt} prompt tokens plus {max_tokens} output tokens"
    )]
    ContextLengthExceeded {
        prompt: usize,
        max_tokens: usize,
        context: usize,
    },
    #[error("the KV cache holds {capacity} tokens; the request needs up to {needed}")]
    KvCapacity { needed: usize, capacity: usize },
    #[error("top_logprobs must be at most {max}, got {got}")]
    TooManyLogprobs { got: usize, max: usize },
    #[error("{0}")]
    BadParams(String),
    /// A grammar `llguidance` cannot compile or enforce, with its reason.
    #[error("the output format cannot be enforced: {0}")]
    Grammar(String),
    #[error("the waiting queue is full ({waiting} requests); retry in about {} ms", retry_after.as_millis())]
    QueueFull {
        waiting: usize,
        retry_after: Duration,
    },
    #[error("the deadline cannot be met: the estimated time to the first token is {} ms", eta.as_millis())]
    DeadlineUnreachable { eta: Duration },
    #[error("the engine has shut down")]
    ShutDown,
    #[error("bad engine configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Model(#[from] hasten_model::Error),
}

pub type Result<T> = std::result::Result<T, Error>;
