//! `/v1/completions` (legacy text completions): request, response and the
//! stream chunks, which use the same `text_completion` object.

use crate::{Extra, Sampling, Timing, Usage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub prompt: Prompt,
    /// Log-probabilities of this many alternatives per token (0 = only the chosen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<i64>,
    #[serde(flatten)]
    pub sampling: Sampling,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A text, a batch of texts, token ids, or a batch of token-id lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

impl Default for Prompt {
    fn default() -> Self {
        Prompt::Text(String::new())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    /// Absent on stream chunks except the usage chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<String>,
}

/// The legacy logprobs shape: parallel arrays, one entry per token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<BTreeMap<String, f32>>,
    pub text_offset: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_of_every_shape() {
        let p = |s: &str| serde_json::from_str::<Prompt>(s).unwrap();
        assert_eq!(p("\"hi\""), Prompt::Text("hi".into()));
        assert_eq!(
            p("[\"a\",\"b\"]"),
            Prompt::Texts(vec!["a".into(), "b".into()])
        );
        assert_eq!(p("[1,2]"), Prompt::Tokens(vec![1, 2]));
        assert_eq!(
            p("[[1],[2,3]]"),
            Prompt::TokenLists(vec![vec![1], vec![2, 3]])
        );
        assert!(serde_json::from_str::<Prompt>("[1,\"a\"]").is_err());
    }
}
