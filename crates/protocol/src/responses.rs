//! OpenAI's Responses API (`POST /v1/responses`): the request as the
//! `openai` SDKs and the Codex CLI send it. Answers and stream events are
//! written as JSON by the server (their shapes are wide and mostly echoes).

use crate::Extra;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponsesRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub input: Input,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub tools: Option<Vec<Tool>>,
    /// `"auto"`, `"none"`, `"required"` or `{"type": "function", "name": ...}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", ...}}`.
    #[serde(default)]
    pub text: Option<Value>,
    /// `{"effort": ..., "summary": ...}`.
    #[serde(default)]
    pub reasoning: Option<Value>,
    #[serde(default)]
    pub max_output_tokens: Option<i64>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub stream: Option<bool>,
    /// Keep the conversation for `previous_response_id` (default true).
    #[serde(default)]
    pub store: Option<bool>,
    #[serde(default)]
    pub previous_response_id: Option<String>,
    /// Run in the background: answered at once with a `queued` response;
    /// poll `GET /v1/responses/{id}`, cancel with `POST .../cancel`.
    #[serde(default)]
    pub background: Option<bool>,
    #[serde(default)]
    pub metadata: Option<Value>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Text, or a list of items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Input {
    Text(String),
    Items(Vec<Item>),
}

/// One input item. A message may come without `"type"` (the easy form).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Item {
    Typed(TypedItem),
    Message(MessageItem),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TypedItem {
    Message(MessageItem),
    FunctionCall {
        call_id: String,
        name: String,
        arguments: String,
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        status: Option<String>,
    },
    FunctionCallOutput {
        call_id: String,
        output: Value,
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        status: Option<String>,
    },
    /// A reasoning item sent back: dropped (the template strips thinking).
    Reasoning {
        #[serde(flatten)]
        rest: Extra,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageItem {
    pub role: String,
    pub content: MessageContent,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<Part>),
}

/// `input_text`, `output_text` (and others, refused by the server).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Option<Value>,
    #[serde(default)]
    pub strict: Option<bool>,
}
