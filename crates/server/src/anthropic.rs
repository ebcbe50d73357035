//! Anthropic's Messages API over the chat path. A Messages request becomes
//! a chat completion request (same template, sampling, tools and grammar,
//! same engine), and what the chat path answers is rewritten into
//! Anthropic's shapes: the message, the stream's events
//! (`message_start`, `content_block_*`, `message_delta`, `message_stop`,
//! `ping`) and the error body. `count_tokens` renders the same prompt.

use crate::error::{Error, Result};
use crate::middleware::RequestId;
use crate::AppState;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use hasten_protocol::anthropic::{
    Block, Blocks, CountTokensRequest, Message, MessageResponse, MessageUsage, MessagesRequest,
    Tool, ToolChoice,
};
use hasten_protocol::chat::ChatCompletion;
use serde_json::{json, Map, Value};

/// `POST /v1/messages`.
pub async fn messages(
    State(st): State<AppState>,
    Extension(rid): Extension<RequestId>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let req: MessagesRequest = crate::routes::parse(body, st.body_limit())?;
    let max_tokens = req
        .max_tokens
        .ok_or_else(|| Error::bad("max_tokens: Field required", "max_tokens"))?;
    let stream = req.stream.unwrap_or(false);
    let mut chat = chat_body(
        &req.model,
        &req.system,
        &req.messages,
        &req.tools,
        &req.tool_choice,
        &req.thinking,
    )?;
    let o = chat.as_object_mut().expect("an object");
    o.insert("max_tokens".into(), json!(max_tokens));
    for (k, v) in [
        ("temperature", req.temperature.map(|v| json!(v))),
        ("top_p", req.top_p.map(|v| json!(v))),
        ("top_k", req.top_k.map(|v| json!(v))),
    ] {
        if let Some(v) = v {
            o.insert(k.into(), v);
        }
    }
    if let Some(s) = &req.stop_sequences {
        o.insert("stop".into(), json!(s));
    }
    if stream {
        o.insert("stream".into(), json!(true));
        o.insert(
            "stream_options".into(),
            json!({"include_usage": true, "continuous_usage_stats": true}),
        );
    }
    let id = format!("msg_{}", rid.0);
    let bytes = Bytes::from(serde_json::to_vec(&chat).map_err(|e| Error::Internal(e.to_string()))?);
    let resp = crate::routes::chat(State(st), Extension(rid), Ok(bytes)).await?;
    if !resp.status().is_success() {
        return Ok(resp);
    }
    if stream {
        return Ok(stream_response(resp, id));
    }
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .map_err(|e| Error::Internal(format!("reading the chat answer: {e}")))?;
    let c: ChatCompletion = serde_json::from_slice(&body)
        .map_err(|e| Error::Internal(format!("the chat answer: {e}")))?;
    Ok(Json(message_of(&c, id)).into_response())
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, the prompt a
/// Messages request with these fields would have.
pub async fn count_tokens(
    State(st): State<AppState>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let req: CountTokensRequest = crate::routes::parse(body, st.body_limit())?;
    let chat = chat_body(
        &req.model,
        &req.system,
        &req.messages,
        &req.tools,
        &req.tool_choice,
        &req.thinking,
    )?;
    let mut tok = Map::new();
    for k in [
        "model",
        "messages",
        "tools",
        "tool_choice",
        "chat_template_kwargs",
    ] {
        if let Some(v) = chat.get(k) {
            tok.insert(k.into(), v.clone());
        }
    }
    tok.insert("add_generation_prompt".into(), json!(true));
    let bytes = Bytes::from(serde_json::to_vec(&tok).map_err(|e| Error::Internal(e.to_string()))?);
    let Json(r) = crate::routes::tokenize(State(st), Ok(bytes)).await?;
    Ok(Json(json!({ "input_tokens": r.count })))
}

fn text_of(b: &Blocks, at: &str) -> Result<String> {
    match b {
        Blocks::Text(s) => Ok(s.clone()),
        Blocks::Blocks(v) => v
            .iter()
            .map(|b| match b {
                Block::Text { text } => Ok(text.as_str()),
                _ => Err(Error::bad(
                    format!("{at}: only text blocks are allowed here"),
                    at,
                )),
            })
            .collect::<Result<Vec<_>>>()
            .map(|v| v.join("\n")),
    }
}

/// The chat completion request for a Messages request's conversation,
/// tools and thinking setting (sampling fields are added by the caller).
fn chat_body(
    model: &Option<String>,
    system: &Option<Blocks>,
    messages: &[Message],
    tools: &Option<Vec<Tool>>,
    tool_choice: &Option<ToolChoice>,
    thinking: &Option<Value>,
) -> Result<Value> {
    let mut out = Vec::new();
    if let Some(s) = system {
        out.push(json!({"role": "system", "content": text_of(s, "system")?}));
    }
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}].content");
        let blocks = match &m.content {
            Blocks::Text(s) => vec![Block::Text { text: s.clone() }],
            Blocks::Blocks(v) => v.clone(),
        };
        let (mut text, mut calls) = (Vec::new(), Vec::new());
        for b in blocks {
            match b {
                Block::Text { text: t } => text.push(t),
                // Earlier turns' thinking is not sent back to the template
                // (Anthropic strips it from the context too).
                Block::Thinking { .. } | Block::RedactedThinking { .. } => {}
                Block::ToolUse { id, name, input } => calls.push(json!({
                    "id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()},
                })),
                Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => {
                    let mut c = match &content {
                        Some(b) => text_of(b, &at)?,
                        None => String::new(),
                    };
                    if is_error == Some(true) {
                        c = format!("Error: {c}");
                    }
                    out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": c}));
                }
                Block::Image { .. } | Block::Document { .. } => {
                    return Err(Error::bad(
                        format!("{at}: image and document blocks are not supported"),
                        &at,
                    ))
                }
            }
        }
        match m.role.as_str() {
            "user" if !text.is_empty() => {
                out.push(json!({"role": "user", "content": text.join("\n")}))
            }
            "user" => {}
            "assistant" => {
                let mut a = json!({"role": "assistant", "content": text.join("\n")});
                if !calls.is_empty() {
                    a["tool_calls"] = json!(calls);
                }
                out.push(a);
            }
            r => {
                return Err(Error::bad(
                    format!("messages[{i}].role: {r:?} is not one of user, assistant"),
                    &format!("messages[{i}].role"),
                ))
            }
        }
    }
    let mut chat = json!({"messages": out});
    if let Some(m) = model {
        chat["model"] = json!(m);
    }
    if let Some(ts) = tools {
        let mut list = Vec::new();
        for (i, t) in ts.iter().enumerate() {
            if t.kind.as_deref().is_some_and(|k| k != "custom") {
                return Err(Error::bad(
                    format!(
                        "tools[{i}]: server tools ({}) are not supported",
                        t.kind.as_deref().unwrap_or("")
                    ),
                    &format!("tools[{i}].type"),
                ));
            }
            list.push(json!({"type": "function", "function": {
                "name": t.name,
                "description": t.description.clone().unwrap_or_default(),
                "parameters": t.input_schema.clone().unwrap_or(json!({"type": "object"})),
            }}));
        }
        if !list.is_empty() {
            chat["tools"] = json!(list);
        }
    }
    let parallel = |d: &Option<bool>| d.map(|d| !d);
    let (choice, par) = match tool_choice {
        None => (None, None),
        Some(ToolChoice::Auto {
            disable_parallel_tool_use: d,
        }) => (Some(json!("auto")), parallel(d)),
        Some(ToolChoice::Any {
            disable_parallel_tool_use: d,
        }) => (Some(json!("required")), parallel(d)),
        Some(ToolChoice::Tool {
            name,
            disable_parallel_tool_use: d,
        }) => (
            Some(json!({"type": "function", "function": {"name": name}})),
            parallel(d),
        ),
        Some(ToolChoice::None) => (Some(json!("none")), None),
    };
    if let Some(c) = choice {
        chat["tool_choice"] = c;
    }
    if let Some(p) = par {
        chat["parallel_tool_calls"] = json!(p);
    }
    if let Some(t) = thinking {
        let on = t.get("type").and_then(|v| v.as_str()) == Some("enabled");
        chat["chat_template_kwargs"] = json!({"enable_thinking": on});
    }
    Ok(chat)
}

fn stop_reason(finish: Option<&str>) -> Option<&'static str> {
    Some(match finish? {
        "length" => "max_tokens",
        "tool_calls" => "tool_use",
        _ => "end_turn",
    })
}

fn usage(u: &hasten_protocol::Usage) -> MessageUsage {
    let cached = u
        .prompt_tokens_details
        .as_ref()
        .map_or(0, |d| d.cached_tokens);
    MessageUsage {
        input_tokens: u.prompt_tokens.saturating_sub(cached),
        output_tokens: u.completion_tokens,
        cache_read_input_tokens: cached,
        cache_creation_input_tokens: 0,
    }
}

/// The chat answer as an Anthropic message.
fn message_of(c: &ChatCompletion, id: String) -> MessageResponse {
    let mut content = Vec::new();
    let choice = c.choices.first();
    if let Some(ch) = choice {
        let m = &ch.message;
        if let Some(r) = m.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
            content.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
        }
        let calls = m.tool_calls.as_deref().unwrap_or_default();
        match m.content.as_deref() {
            Some(t) if !t.is_empty() || calls.is_empty() => {
                content.push(json!({"type": "text", "text": t}))
            }
            None if calls.is_empty() => content.push(json!({"type": "text", "text": ""})),
            _ => {}
        }
        for call in calls {
            let input: Value = serde_json::from_str(&call.function.arguments).unwrap_or(json!({}));
            content.push(json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input}));
        }
    }
    MessageResponse {
        id,
        kind: "message".into(),
        role: "assistant".into(),
        model: c.model.clone(),
        content,
        stop_reason: match choice.and_then(|c| c.stop_reason.as_ref()) {
            Some(_) => Some("stop_sequence".into()),
            None => stop_reason(choice.and_then(|c| c.finish_reason.as_deref())).map(Into::into),
        },
        stop_sequence: choice.and_then(|c| c.stop_reason.clone()),
        usage: usage(&c.usage),
    }
}

/// The chat path's SSE stream rewritten as Anthropic's events.
fn stream_response(resp: Response, id: String) -> Response {
    let mut conv = StreamConv::new(id);
    crate::rewrite::rewrite_sse(resp, move |d| conv.data(d))
}

/// The state of one stream's rewriting: the open content block and what
/// the end needs.
struct StreamConv {
    id: String,
    started: bool,
    /// The open block: its index and kind (`text`, `thinking`, `tool_use`).
    open: Option<(usize, &'static str)>,
    next: usize,
    stop: Option<&'static str>,
    /// The stop sequence that ended the answer.
    stop_sequence: Option<String>,
    output_tokens: u64,
}

fn event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

impl StreamConv {
    fn new(id: String) -> Self {
        StreamConv {
            id,
            started: false,
            open: None,
            next: 0,
            stop: None,
            stop_sequence: None,
            output_tokens: 0,
        }
    }

    fn close(&mut self, out: &mut String) {
        if let Some((i, _)) = self.open.take() {
            out.push_str(&event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": i}),
            ));
        }
    }

    /// Opens a block of `kind` unless one is open (`force`: always a new one).
    fn block(&mut self, kind: &'static str, start: Value, force: bool, out: &mut String) -> usize {
        if let Some((i, k)) = self.open {
            if k == kind && !force {
                return i;
            }
        }
        self.close(out);
        let i = self.next;
        self.next += 1;
        self.open = Some((i, kind));
        out.push_str(&event(
            "content_block_start",
            json!({"type": "content_block_start", "index": i, "content_block": start}),
        ));
        i
    }

    /// One `data:` payload of the chat stream; returns the events it makes.
    fn data(&mut self, d: &str) -> String {
        use crate::rewrite::{chat_data, ChatData, DeltaPart};
        let mut out = String::new();
        let c = match chat_data(d) {
            None => return out,
            Some(ChatData::Done) => {
                self.close(&mut out);
                out.push_str(&event("message_delta", json!({
                    "type": "message_delta",
                    "delta": {"stop_reason": self.stop.unwrap_or("end_turn"), "stop_sequence": self.stop_sequence},
                    "usage": {"output_tokens": self.output_tokens},
                })));
                out.push_str(&event("message_stop", json!({"type": "message_stop"})));
                return out;
            }
            Some(ChatData::Error(msg)) => {
                out.push_str(&event(
                    "error",
                    json!({"type": "error", "error": {"type": "api_error", "message": msg}}),
                ));
                return out;
            }
            Some(ChatData::Chunk(c)) => c,
        };
        if let Some(u) = &c.usage {
            self.output_tokens = u.completion_tokens;
        }
        if !self.started {
            self.started = true;
            let usage = c.usage.as_ref().map(usage).unwrap_or_default();
            out.push_str(&event(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant",
                    "model": c.json.get("model").cloned().unwrap_or(Value::Null),
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": usage.input_tokens, "output_tokens": 0,
                              "cache_read_input_tokens": usage.cache_read_input_tokens,
                              "cache_creation_input_tokens": 0},
                }}),
            ));
            out.push_str(&event("ping", json!({"type": "ping"})));
        }
        let Some(ch) = c.choice else {
            return out;
        };
        for part in ch.parts {
            let (i, delta) = match part {
                DeltaPart::Reasoning(r) => {
                    let start = json!({"type": "thinking", "thinking": ""});
                    let i = self.block("thinking", start, false, &mut out);
                    (i, json!({"type": "thinking_delta", "thinking": r}))
                }
                DeltaPart::Text(t) => {
                    let start = json!({"type": "text", "text": ""});
                    let i = self.block("text", start, false, &mut out);
                    (i, json!({"type": "text_delta", "text": t}))
                }
                DeltaPart::ToolCall { id, name } => {
                    let start = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                    self.block("tool_use", start, true, &mut out);
                    continue;
                }
                DeltaPart::ToolArguments(a) => {
                    let start = json!({"type": "tool_use", "id": "", "name": "", "input": {}});
                    let i = self.block("tool_use", start, false, &mut out);
                    (i, json!({"type": "input_json_delta", "partial_json": a}))
                }
            };
            out.push_str(&event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": i, "delta": delta}),
            ));
        }
        if let Some(f) = ch.finish_reason.as_deref() {
            self.stop = stop_reason(Some(f));
        }
        if let Some(s) = ch.stop_reason {
            self.stop = Some("stop_sequence");
            self.stop_sequence = Some(s);
        }
        out
    }
}

/// Rewrites an error response's OpenAI body into Anthropic's
/// `{"type": "error", "error": {"type", "message"}}` (route layer of the
/// Messages routes, so authentication failures are rewritten too).
pub async fn errors(resp: Response) -> Response {
    let status = resp.status();
    if status.is_success() {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let message = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
    let kind = match status {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => "invalid_request_error",
        StatusCode::UNAUTHORIZED => "authentication_error",
        StatusCode::FORBIDDEN => "permission_error",
        StatusCode::NOT_FOUND => "not_found_error",
        StatusCode::PAYLOAD_TOO_LARGE => "request_too_large",
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
        StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
        _ => "api_error",
    };
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body.to_string()))
}
