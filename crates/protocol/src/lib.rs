//! hasten-protocol: the OpenAI HTTP API's JSON bodies as plain serde types,
//! shared by the server (which reads requests and writes responses), the
//! client and the bench (which do the opposite).
//!
//! Types here only describe the wire format: no defaults are applied and
//! nothing is validated beyond JSON types. Fields OpenAI defines that we do
//! not model land in each request's `extra` map, so the server can refuse
//! the ones that would change the result instead of ignoring them.
//!
//! Modules: [`anthropic`] (`/v1/messages`), [`chat`] (`/v1/chat/completions`), [`completions`]
//! (`/v1/completions`), and this file's shared parts: errors, usage, the
//! `timing` extension, models, tokenize.

pub mod anthropic;
pub mod chat;
pub mod completions;
pub mod responses;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Fields of a request we do not model, by name.
pub type Extra = Map<String, Value>;

/// `stop`: one string or several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
    /// vLLM's extension: usage (tokens so far) on every chunk, so a client
    /// knows how many tokens each event carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous_usage_stats: Option<bool>,
}

/// Sampling fields shared by both completion endpoints (flattened into each).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// vLLM's extension; 0 or -1 disable it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    /// Token id (as a string, OpenAI's shape) to a bias in [-100, 100].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logit_bias: Option<std::collections::BTreeMap<String, f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Extension: generate through end-of-sequence (benchmarks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

/// Output tokens by kind: `reasoning_tokens` were in the thinking block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionTokensDetails {
    pub reasoning_tokens: u64,
}

/// hasten's server-side latency breakdown of one choice (milliseconds), as
/// `latency-vocabulary.md` defines queue, prefill and decode time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub queue_ms: f64,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub prompt_tokens: u64,
    pub cached_prompt_tokens: u64,
    /// Speculative decoding: tokens drafted for this answer, and those
    /// accepted (absent without speculation).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drafted_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub accepted_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `{"error": {...}}`, OpenAI's error body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    pub object: String,
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub owned_by: String,
    /// Extension (as vLLM): the context length in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
}

/// `POST /tokenize`: a text, or chat messages rendered with the template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenizeRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<chat::ChatMessage>>,
    /// Add BOS as the model does (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_special_tokens: Option<bool>,
    /// With `messages`: what a chat request renders with (`tools`,
    /// `chat_template_kwargs`, `add_generation_prompt`,
    /// `continue_final_message`, `tool_choice`).
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenizeResponse {
    pub tokens: Vec<u32>,
    pub count: u64,
    pub max_model_len: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetokenizeRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub tokens: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetokenizeResponse {
    pub prompt: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_is_one_or_many() {
        let one: Stop = serde_json::from_str("\"x\"").unwrap();
        let many: Stop = serde_json::from_str("[\"a\",\"b\"]").unwrap();
        assert_eq!(one.into_vec(), vec!["x"]);
        assert_eq!(many.into_vec(), vec!["a", "b"]);
    }

    #[test]
    fn error_body_has_openai_field_names() {
        let e = ErrorBody {
            error: ErrorObject {
                message: "m".into(),
                kind: "invalid_request_error".into(),
                param: Some("n".into()),
                code: None,
            },
        };
        let v: Value = serde_json::to_value(&e).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "n");
        assert!(v["error"]["code"].is_null());
    }
}

/// `POST /v1/embeddings`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub input: EmbeddingInput,
    /// `float` (default) or `base64` (little-endian f32s).
    #[serde(default)]
    pub encoding_format: Option<String>,
    /// Keep the first N values (renormalized).
    #[serde(default)]
    pub dimensions: Option<i64>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A text, texts, a token list or token lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}
