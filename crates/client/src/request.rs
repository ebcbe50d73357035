//! The kinds of request (chat, legacy completions, OpenAI Responses) as
//! the client sends them, how a continuation is built from a partial answer, and
//! lenient readers for what comes back: any OpenAI-compatible server's
//! chunks and bodies, which differ in which optional fields they fill.

use hasten_protocol::chat::{ChatCompletionRequest, ChatMessage};
use hasten_protocol::completions::{CompletionRequest, Prompt};
use hasten_protocol::responses::ResponsesRequest;
use hasten_protocol::{ErrorBody, ErrorObject, Timing, Usage};
use serde::Deserialize;
use serde_json::{Map, Value};

/// What to send: `/v1/chat/completions`, `/v1/completions` or
/// `/v1/responses` (one answer; its events are read as chat chunks).
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Chat(ChatCompletionRequest),
    Completion(CompletionRequest),
    Responses(Box<ResponsesRequest>),
}

impl From<ResponsesRequest> for Request {
    fn from(r: ResponsesRequest) -> Self {
        Request::Responses(Box::new(r))
    }
}

impl From<ChatCompletionRequest> for Request {
    fn from(r: ChatCompletionRequest) -> Self {
        Request::Chat(r)
    }
}

impl From<CompletionRequest> for Request {
    fn from(r: CompletionRequest) -> Self {
        Request::Completion(r)
    }
}

impl Request {
    /// A chat request with one user message.
    pub fn chat(model: Option<&str>, user: &str) -> Self {
        Request::Chat(ChatCompletionRequest {
            model: model.map(str::to_string),
            messages: vec![ChatMessage::new("user", user)],
            ..Default::default()
        })
    }

    /// A chat request of an optional system message and one user message.
    pub fn chat_with(
        model: Option<String>,
        system: Option<&str>,
        user: &str,
        sampling: hasten_protocol::Sampling,
    ) -> Self {
        let mut messages = Vec::new();
        if let Some(s) = system {
            messages.push(ChatMessage::new("system", s));
        }
        messages.push(ChatMessage::new("user", user));
        Request::Chat(ChatCompletionRequest {
            model,
            messages,
            sampling,
            ..Default::default()
        })
    }

    /// Sets a body field beyond the typed ones (`tools`, `tool_choice`,
    /// `response_format`, `chat_template_kwargs`, ...).
    pub fn set(&mut self, field: &str, value: Value) {
        let extra = match self {
            Request::Chat(r) => &mut r.extra,
            Request::Completion(r) => &mut r.extra,
            Request::Responses(r) => &mut r.extra,
        };
        extra.insert(field.to_owned(), value);
    }

    /// Asks for an answer matching a JSON Schema (`response_format`
    /// `json_schema`, strict; `text.format` for Responses).
    pub fn json_schema(mut self, name: &str, schema: Value) -> Self {
        if let Request::Responses(r) = &mut self {
            r.text = Some(serde_json::json!({"format": {"type": "json_schema",
                "name": name, "schema": schema, "strict": true}}));
            return self;
        }
        self.set(
            "response_format",
            serde_json::json!({"type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": true}}),
        );
        self
    }

    pub(crate) fn path(&self) -> &'static str {
        match self {
            Request::Chat(_) => "chat/completions",
            Request::Completion(_) => "completions",
            Request::Responses(_) => "responses",
        }
    }

    fn sampling(&self) -> Option<&hasten_protocol::Sampling> {
        match self {
            Request::Chat(r) => Some(&r.sampling),
            Request::Completion(r) => Some(&r.sampling),
            Request::Responses(_) => None,
        }
    }

    /// How many choices the answer has.
    pub(crate) fn choices(&self) -> usize {
        let n = self.sampling().and_then(|s| s.n).unwrap_or(1).max(1) as usize;
        match self {
            Request::Chat(_) => n,
            Request::Responses(_) => 1,
            Request::Completion(r) => {
                n * match &r.prompt {
                    Prompt::Texts(v) => v.len().max(1),
                    Prompt::TokenLists(v) => v.len().max(1),
                    _ => 1,
                }
            }
        }
    }

    /// Whether the stream ends with usage (a Responses stream always does).
    pub(crate) fn wants_usage(&self) -> bool {
        let Some(s) = self.sampling() else {
            return true;
        };
        s.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }

    /// The JSON body, with `stream` set as asked.
    pub(crate) fn body(&self, stream: bool) -> Result<Vec<u8>, serde_json::Error> {
        let mut v = match self {
            Request::Chat(r) => serde_json::to_value(r)?,
            Request::Completion(r) => serde_json::to_value(r)?,
            Request::Responses(r) => serde_json::to_value(r)?,
        };
        if let Value::Object(m) = &mut v {
            if matches!(self, Request::Responses(_)) {
                // Its unset fields are absent, not null, as the SDKs send them.
                m.retain(|_, v| !v.is_null());
            }
            m.insert("stream".into(), Value::Bool(stream));
            if !stream {
                m.remove("stream_options");
            }
        }
        serde_json::to_vec(&v)
    }

    /// The request that continues after `text` (already `tokens` tokens
    /// long): the chat gets `text` as a final assistant message (plus
    /// `extra` fields), a text prompt gets it appended, and the token
    /// limit shrinks by what was received. `None` when the request cannot
    /// be continued (several choices, token-id prompts, limit reached, a
    /// Responses request: its stream has no way to continue a message).
    pub(crate) fn continued(
        &self,
        text: &str,
        tokens: u64,
        extra: &Map<String, Value>,
    ) -> Option<Request> {
        if self.choices() != 1 {
            return None;
        }
        let shrink = |s: &mut hasten_protocol::Sampling, max_new: &mut Option<i64>| -> Option<()> {
            for limit in [&mut s.max_tokens, max_new].into_iter().flatten() {
                *limit -= tokens as i64;
                if *limit <= 0 {
                    return None;
                }
            }
            Some(())
        };
        match self {
            Request::Chat(r) => {
                let mut r = r.clone();
                let mut max_new = r.max_completion_tokens;
                shrink(&mut r.sampling, &mut max_new)?;
                r.max_completion_tokens = max_new;
                r.messages.push(ChatMessage::new("assistant", text));
                for (k, v) in extra {
                    r.extra.insert(k.clone(), v.clone());
                }
                Some(Request::Chat(r))
            }
            Request::Completion(r) => {
                let mut r = r.clone();
                let mut none = None;
                shrink(&mut r.sampling, &mut none)?;
                match &mut r.prompt {
                    Prompt::Text(p) => p.push_str(text),
                    _ => return None,
                }
                Some(Request::Completion(r))
            }
            Request::Responses(_) => None,
        }
    }
}

/// One stream chunk or whole response, read leniently.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Wire {
    #[serde(default)]
    pub choices: Vec<WireChoice>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
    #[serde(default)]
    pub timing: Option<Timing>,
    #[serde(default)]
    pub error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireChoice {
    #[serde(default)]
    pub index: u32,
    /// Chat chunks.
    #[serde(default)]
    pub delta: Option<WireText>,
    /// Whole chat responses.
    #[serde(default)]
    pub message: Option<WireText>,
    /// Completions.
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

impl WireChoice {
    /// The message or delta (chat).
    pub fn part(&self) -> Option<&WireText> {
        self.delta.as_ref().or(self.message.as_ref())
    }

    pub fn text(&self) -> &str {
        let t = self.delta.as_ref().or(self.message.as_ref());
        t.and_then(|t| t.content.as_deref())
            .or(self.text.as_deref())
            .unwrap_or("")
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireText {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub reasoning_content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireCall>>,
}

/// A tool call, whole (a message's) or a piece of one (a delta's).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireCall {
    #[serde(default)]
    pub index: Option<u32>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: WireFunction,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct WireFunction {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub prompt_tokens_details: Option<hasten_protocol::PromptTokensDetails>,
    #[serde(default)]
    pub completion_tokens_details: Option<hasten_protocol::CompletionTokensDetails>,
}

impl WireUsage {
    pub fn usage(self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: self.prompt_tokens + self.completion_tokens,
            prompt_tokens_details: self.prompt_tokens_details,
            completion_tokens_details: self.completion_tokens_details,
        }
    }
}

/// An error value from a body or event, in OpenAI's shape even when the
/// server used another.
pub(crate) fn error_body(v: &Value) -> ErrorBody {
    let obj = v.get("error").unwrap_or(v);
    if let Ok(e) = serde_json::from_value::<ErrorObject>(obj.clone()) {
        return ErrorBody { error: e };
    }
    let message = obj
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| obj.to_string());
    ErrorBody {
        error: ErrorObject {
            message,
            kind: "error".into(),
            param: None,
            code: None,
        },
    }
}

/// hasten's `Server-Timing` header (`queue;dur=…, prefill;dur=…,
/// decode;dur=…, prompt_tokens;desc="…", cached_prompt_tokens;desc="…"`).
pub(crate) fn parse_server_timing(h: &str) -> Option<Timing> {
    let mut t = Timing::default();
    let mut seen = 0;
    for metric in h.split(',') {
        let mut parts = metric.split(';').map(str::trim);
        let name = parts.next()?;
        let mut value = None;
        for p in parts {
            if let Some(v) = p.strip_prefix("dur=").or_else(|| p.strip_prefix("desc=")) {
                value = v.trim_matches('"').parse::<f64>().ok();
            }
        }
        let Some(v) = value else { continue };
        seen += 1;
        match name {
            "queue" => t.queue_ms = v,
            "prefill" => t.prefill_ms = v,
            "decode" => t.decode_ms = v,
            "prompt_tokens" => t.prompt_tokens = v as u64,
            "cached_prompt_tokens" => t.cached_prompt_tokens = v as u64,
            _ => seen -= 1,
        }
    }
    (seen > 0).then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuation_appends_and_shrinks_the_limit() {
        let mut r = ChatCompletionRequest {
            messages: vec![ChatMessage::new("user", "hi")],
            ..Default::default()
        };
        r.sampling.max_tokens = Some(10);
        let mut extra = Map::new();
        extra.insert("continue_final_message".into(), Value::Bool(true));
        let Some(Request::Chat(c)) = Request::Chat(r.clone()).continued("Hel", 3, &extra) else {
            panic!()
        };
        assert_eq!(c.messages.len(), 2);
        assert_eq!(c.messages[1], ChatMessage::new("assistant", "Hel"));
        assert_eq!(c.sampling.max_tokens, Some(7));
        assert_eq!(c.extra["continue_final_message"], Value::Bool(true));
        assert!(Request::Chat(r.clone())
            .continued("x", 10, &extra)
            .is_none());
        r.sampling.n = Some(2);
        assert!(Request::Chat(r).continued("x", 1, &extra).is_none());

        let p = CompletionRequest {
            prompt: Prompt::Text("Once".into()),
            ..Default::default()
        };
        let Some(Request::Completion(c)) = Request::Completion(p).continued(" upon", 1, &extra)
        else {
            panic!()
        };
        assert_eq!(c.prompt, Prompt::Text("Once upon".into()));
        let ids = CompletionRequest {
            prompt: Prompt::Tokens(vec![1, 2]),
            ..Default::default()
        };
        assert!(Request::Completion(ids).continued("x", 1, &extra).is_none());
    }

    #[test]
    fn server_timing_round_trips_hastens_header() {
        let h = "queue;dur=1.500, prefill;dur=20.000, decode;dur=300.250, prompt_tokens;desc=\"12\", cached_prompt_tokens;desc=\"4\"";
        let t = parse_server_timing(h).unwrap();
        assert_eq!((t.queue_ms, t.prefill_ms, t.decode_ms), (1.5, 20.0, 300.25));
        assert_eq!((t.prompt_tokens, t.cached_prompt_tokens), (12, 4));
        assert!(parse_server_timing("cdn-cache;desc=HIT").is_none());
    }

    #[test]
    fn chunks_of_other_servers_parse() {
        let w: Wire = serde_json::from_str(
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}],"usage":{"completion_tokens":3}}"#,
        )
        .unwrap();
        assert_eq!(w.choices[0].text(), "");
        assert_eq!(w.usage.unwrap().completion_tokens, 3);
        let e = error_body(&serde_json::json!({"error": {"message": "boom", "code": 500}}));
        assert_eq!(e.error.message, "boom");
    }
}
