//! OpenAI's Responses API over the chat path, as [`crate::anthropic`] does
//! for Anthropic's: input items become chat messages (after the stored
//! conversation of `previous_response_id`), tools, `text.format` and
//! `reasoning` become their chat fields, and the chat answer or stream
//! becomes a response object or Responses events (`response.created`,
//! `response.output_item.added`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`, ..., `response.completed`).
//! Conversations are kept in memory, bounded ([`ResponseStore`]).

use crate::error::{Error, Result};
use crate::middleware::RequestId;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use hasten_protocol::chat::ChatCompletion;
use hasten_protocol::responses::{Input, Item, MessageContent, ResponsesRequest, TypedItem};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod stream;
use stream::{stream_response, Conv, Echo};

/// Conversations kept for `previous_response_id`: the newest
/// [`ResponseStore::CAP`], each for [`ResponseStore::TTL`] after it ended.
/// A background response still queued or running is never evicted (its
/// answer would be lost); the engine's queue limit bounds how many there
/// are, so the store exceeds its cap by those at most.
#[derive(Default)]
pub struct ResponseStore {
    kept: Mutex<VecDeque<Stored>>,
}

/// One stored response: the conversation up to and including it (for
/// `previous_response_id`), the response object (`GET`), and its own input
/// items (`GET .../input_items`).
#[derive(Debug, Clone)]
struct Stored {
    id: String,
    at: Instant,
    messages: Vec<Value>,
    response: Value,
    input: Vec<Value>,
    /// A background response's task (`None` once it ended, and for others).
    task: Option<tokio::task::AbortHandle>,
    background: bool,
}

impl Stored {
    fn new(id: String, messages: Vec<Value>, response: Value, input: Vec<Value>) -> Stored {
        Stored {
            id,
            at: Instant::now(),
            messages,
            response,
            input,
            task: None,
            background: false,
        }
    }

    /// Still queued or running (a background response).
    fn pending(&self) -> bool {
        matches!(
            self.response["status"].as_str(),
            Some("queued" | "in_progress")
        )
    }

    /// Ended more than [`ResponseStore::TTL`] ago (`at` is when it ended).
    fn expired(&self) -> bool {
        !self.pending() && self.at.elapsed() >= ResponseStore::TTL
    }
}

impl ResponseStore {
    pub const CAP: usize = 1024;
    pub const TTL: Duration = Duration::from_secs(3600);

    fn find(&self, id: &str) -> Option<Stored> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter().find(|s| s.id == id && !s.expired()).cloned()
    }

    fn put(&self, s: Stored) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|k| !k.expired());
        while kept.len() >= Self::CAP {
            // The oldest that has ended; none: only pending ones are kept.
            let Some(i) = kept.iter().position(|k| !k.pending()) else {
                break;
            };
            kept.remove(i);
        }
        kept.push_back(s);
    }

    /// Changes the kept `id` (nothing if it is gone).
    fn update(&self, id: &str, f: impl FnOnce(&mut Stored)) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = kept.iter_mut().find(|s| s.id == id) {
            f(s);
        }
    }

    /// Forgets `id`; whether it was kept.
    fn delete(&self, id: &str) -> bool {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let before = kept.len();
        kept.retain(|s| {
            if s.id == id {
                if let Some(t) = &s.task {
                    t.abort();
                }
            }
            s.id != id
        });
        kept.len() < before
    }
}

fn not_stored(id: &str) -> Error {
    Error::NotFound {
        message: format!(
            "no stored response {id} (expired, deleted, stored with store: false, or never made)"
        ),
        code: "response_not_found",
    }
}

/// `GET /v1/responses/{id}`: a stored response as it was returned.
pub async fn retrieve(State(st): State<AppState>, Path(id): Path<String>) -> Result<Response> {
    let s = st.responses.find(&id).ok_or_else(|| not_stored(&id))?;
    Ok(Json(s.response).into_response())
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(State(st): State<AppState>, Path(id): Path<String>) -> Result<Response> {
    if !st.responses.delete(&id) {
        return Err(not_stored(&id));
    }
    Ok(Json(json!({"id": id, "object": "response", "deleted": true})).into_response())
}

/// `POST /v1/responses/{id}/cancel`: stops a background response that is
/// still queued or running (its engine request is cancelled) and returns it
/// as `cancelled`; one that already ended is returned as it is.
pub async fn cancel(State(st): State<AppState>, Path(id): Path<String>) -> Result<Response> {
    let s = st.responses.find(&id).ok_or_else(|| not_stored(&id))?;
    if !s.background {
        return Err(Error::bad(
            format!("{id} is not a background response; only those can be cancelled"),
            "response_id",
        ));
    }
    let mut out = s.response.clone();
    st.responses.update(&id, |s| {
        if s.pending() {
            if let Some(t) = s.task.take() {
                t.abort();
            }
            s.response["status"] = json!("cancelled");
            s.at = Instant::now();
        }
        out = s.response.clone();
    });
    Ok(Json(out).into_response())
}

/// `GET /v1/responses/{id}/input_items`: the input items of that request
/// (not of earlier turns), oldest first, in one page.
pub async fn input_items(State(st): State<AppState>, Path(id): Path<String>) -> Result<Response> {
    let s = st.responses.find(&id).ok_or_else(|| not_stored(&id))?;
    let first = s
        .input
        .first()
        .and_then(|i| i["id"].as_str())
        .map(str::to_owned);
    let last = s
        .input
        .last()
        .and_then(|i| i["id"].as_str())
        .map(str::to_owned);
    Ok(Json(json!({
        "object": "list", "data": s.input, "first_id": first, "last_id": last, "has_more": false
    }))
    .into_response())
}

/// `input` as the list of items `input_items` returns, each with an id.
fn input_list(input: &Input, id: &str) -> Vec<Value> {
    let items: Vec<Value> = match input {
        Input::Text(t) => vec![json!({
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]
        })],
        Input::Items(v) => v
            .iter()
            .filter_map(|i| serde_json::to_value(i).ok())
            .collect(),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(k, mut v)| {
            if v.get("id").is_none_or(Value::is_null) {
                v["id"] = json!(format!("msg_{}_in{k}", id.trim_start_matches("resp_")));
            }
            v
        })
        .collect()
}

/// `POST /v1/responses`.
pub async fn responses(
    State(st): State<AppState>,
    Extension(rid): Extension<RequestId>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let req: ResponsesRequest = crate::routes::parse(body, st.body_limit())?;
    let mut history = match &req.previous_response_id {
        Some(id) => {
            let s = st.responses.find(id).ok_or_else(|| Error::NotFound {
                message: format!(
                    "no stored response {id} (expired, deleted, stored with store: false, or never made)"
                ),
                code: "previous_response_not_found",
            })?;
            if s.pending() {
                return Err(Error::bad(
                    format!(
                        "{id} is still {}; continue it once it has ended",
                        s.response["status"]
                    ),
                    "previous_response_id",
                ));
            }
            s.messages
        }
        None => Vec::new(),
    };
    history.extend(input_messages(&req.input)?);
    let mut messages = Vec::new();
    if let Some(i) = &req.instructions {
        messages.push(json!({"role": "system", "content": i}));
    }
    messages.extend(history.iter().cloned());
    let chat = chat_body(&req, messages)?;
    let stream = req.stream.unwrap_or(false);
    let id = format!("resp_{}", rid.0);
    let echo = Echo::of(&req);
    let bytes = Bytes::from(serde_json::to_vec(&chat).map_err(|e| Error::Internal(e.to_string()))?);
    let keep = req.store != Some(false);
    let input = input_list(&req.input, &id);
    if req.background == Some(true) {
        if !keep {
            return Err(Error::bad(
                "a background response must be stored (store: true)",
                "store",
            ));
        }
        if stream {
            return Err(Error::bad(
                "background responses are not streamed here; poll GET /v1/responses/{id}",
                "stream",
            ));
        }
        let model = st.backend()?.model_id.clone();
        let queued = echo.response(&id, "queued", &model, Vec::new(), None, None);
        return Ok(background(
            st,
            rid,
            bytes,
            Stored::new(id, history, queued, input),
            echo,
        ));
    }
    let resp = crate::routes::chat(State(st.clone()), Extension(rid), Ok(bytes)).await?;
    if !resp.status().is_success() {
        return Ok(resp);
    }
    if stream {
        return Ok(stream_response(
            resp,
            Conv::new(id, echo),
            move |id, items, response| {
                if keep {
                    let messages = [history, vec![assistant_message(items)]].concat();
                    st.responses.put(Stored::new(id, messages, response, input));
                }
            },
        ));
    }
    let (response, items) = unary(resp, &id, &echo).await?;
    if keep {
        let messages = [history, vec![assistant_message(&items)]].concat();
        st.responses
            .put(Stored::new(id, messages, response.clone(), input));
    }
    Ok(Json(response).into_response())
}

/// The Responses object of a unary chat answer `resp`, and its output items.
async fn unary(resp: Response, id: &str, echo: &Echo) -> Result<(Value, Vec<Value>)> {
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .map_err(|e| Error::Internal(format!("reading the chat answer: {e}")))?;
    let c: ChatCompletion = serde_json::from_slice(&body)
        .map_err(|e| Error::Internal(format!("the chat answer: {e}")))?;
    let items = output_items(&c);
    let usage = usage_json(
        c.usage.prompt_tokens,
        cached(&c.usage),
        c.usage.completion_tokens,
        reasoning(&c.usage),
    );
    let finish = c.choices.first().and_then(|c| c.finish_reason.clone());
    let mut response = echo.response(
        id,
        "completed",
        &c.model,
        items.clone(),
        Some(usage),
        finish.as_deref(),
    );
    if let Some(t) = c.timing {
        response["timing"] = json!(t);
    }
    Ok((response, items))
}

/// Keeps `s` (a `queued` response) and runs its chat request `bytes` in a
/// task that fills it in: `in_progress`, then the answer, or `failed`.
/// Returns the queued response.
fn background(st: AppState, rid: RequestId, bytes: Bytes, s: Stored, echo: Echo) -> Response {
    let (id, queued) = (s.id.clone(), s.response.clone());
    st.responses.put(Stored {
        background: true,
        ..s
    });
    let task = {
        let (st, id) = (st.clone(), id.clone());
        tokio::spawn(async move {
            st.responses
                .update(&id, |s| s.response["status"] = json!("in_progress"));
            let answer =
                match crate::routes::chat(State(st.clone()), Extension(rid), Ok(bytes)).await {
                    Ok(r) if r.status().is_success() => unary(r, &id, &echo).await,
                    Ok(r) => Err(Error::Internal(format!(
                        "the chat request failed: {}",
                        r.status()
                    ))),
                    Err(e) => Err(e),
                };
            st.responses.update(&id, |s| {
                s.task = None;
                if !s.pending() {
                    return; // cancelled while the answer was being read
                }
                s.at = Instant::now();
                match answer {
                    Ok((response, items)) => {
                        s.messages.push(assistant_message(&items));
                        s.response = response;
                    }
                    Err(e) => {
                        s.response["status"] = json!("failed");
                        s.response["error"] =
                            json!({"code": "server_error", "message": e.to_string()});
                    }
                }
            });
        })
    };
    st.responses.update(&id, |s| {
        if s.pending() {
            s.task = Some(task.abort_handle());
        }
    });
    Json(queued).into_response()
}

fn cached(u: &hasten_protocol::Usage) -> u64 {
    u.prompt_tokens_details
        .as_ref()
        .map_or(0, |d| d.cached_tokens)
}

fn reasoning(u: &hasten_protocol::Usage) -> u64 {
    u.completion_tokens_details
        .as_ref()
        .map_or(0, |d| d.reasoning_tokens)
}

fn usage_json(input: u64, cached: u64, output: u64, reasoning: u64) -> Value {
    json!({
        "input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input + output,
    })
}

/// The input as chat messages (system/developer, user, assistant with
/// calls, tool results).
fn input_messages(input: &Input) -> Result<Vec<Value>> {
    let items = match input {
        Input::Text(t) => return Ok(vec![json!({"role": "user", "content": t})]),
        Input::Items(v) => v,
    };
    let mut out: Vec<Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let typed = match item {
            Item::Typed(t) => t.clone(),
            Item::Message(m) => TypedItem::Message(m.clone()),
        };
        match typed {
            TypedItem::Message(m) => {
                let text = match &m.content {
                    MessageContent::Text(t) => t.clone(),
                    MessageContent::Parts(parts) => parts
                        .iter()
                        .map(|p| match (p.kind.as_str(), &p.text) {
                            ("input_text" | "output_text" | "text", Some(t)) => Ok(t.as_str()),
                            (k, _) => Err(Error::bad(
                                format!("{at}.content: {k} parts are not supported"),
                                &at,
                            )),
                        })
                        .collect::<Result<Vec<_>>>()?
                        .join("\n"),
                };
                let role = match m.role.as_str() {
                    "developer" | "system" => "system",
                    "user" => "user",
                    "assistant" => "assistant",
                    r => {
                        return Err(Error::bad(
                            format!("{at}.role: {r:?} is not user, assistant, system or developer"),
                            &at,
                        ))
                    }
                };
                out.push(json!({"role": role, "content": text}));
            }
            TypedItem::FunctionCall {
                call_id,
                name,
                arguments,
                ..
            } => {
                let call = json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}});
                // Calls made in one turn join that turn's assistant message.
                match out.last_mut() {
                    Some(last) if last["role"] == "assistant" => {
                        let calls = last
                            .as_object_mut()
                            .expect("an object")
                            .entry("tool_calls")
                            .or_insert(json!([]));
                        calls.as_array_mut().expect("a list").push(call);
                    }
                    _ => {
                        out.push(json!({"role": "assistant", "content": "", "tool_calls": [call]}))
                    }
                }
            }
            TypedItem::FunctionCallOutput {
                call_id, output, ..
            } => {
                let text = match output {
                    Value::String(s) => s,
                    v => v.to_string(),
                };
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": text}));
            }
            TypedItem::Reasoning { .. } => {}
        }
    }
    Ok(out)
}

/// Chat sampling fields a Responses request may carry beyond its own.
const SAMPLING_EXTRAS: &[&str] = &[
    "seed",
    "top_k",
    "min_p",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "ignore_eos",
    "speculate",
];

fn chat_body(req: &ResponsesRequest, messages: Vec<Value>) -> Result<Value> {
    let mut chat = json!({"messages": messages});
    let o = chat.as_object_mut().expect("an object");
    if let Some(m) = &req.model {
        o.insert("model".into(), json!(m));
    }
    if let Some(n) = req.max_output_tokens {
        o.insert("max_tokens".into(), json!(n));
    }
    for (k, v) in [("temperature", req.temperature), ("top_p", req.top_p)] {
        if let Some(v) = v {
            o.insert(k.into(), json!(v));
        }
    }
    if let Some(p) = req.parallel_tool_calls {
        o.insert("parallel_tool_calls".into(), json!(p));
    }
    // Chat's sampling extensions pass through (the SDKs send them as
    // `extra_body`); other unknown fields (`include`, `truncation`,
    // `prompt_cache_key`, ...) are ignored, as the Codex CLI sends them.
    for k in SAMPLING_EXTRAS {
        if let Some(v) = req.extra.get(*k) {
            o.insert((*k).into(), v.clone());
        }
    }
    if let Some(ts) = &req.tools {
        let mut list = Vec::new();
        for (i, t) in ts.iter().enumerate() {
            let name = match (t.kind.as_str(), &t.name) {
                ("function", Some(n)) => n,
                ("function", None) => {
                    return Err(Error::bad(
                        format!("tools[{i}].name: required"),
                        &format!("tools[{i}].name"),
                    ))
                }
                (k, _) => {
                    return Err(Error::bad(
                        format!("tools[{i}]: {k} tools are not supported (function tools are)"),
                        &format!("tools[{i}].type"),
                    ))
                }
            };
            let mut f = json!({"name": name, "parameters": t.parameters.clone().unwrap_or(json!({"type": "object"}))});
            if let Some(d) = &t.description {
                f["description"] = json!(d);
            }
            if let Some(s) = t.strict {
                f["strict"] = json!(s);
            }
            list.push(json!({"type": "function", "function": f}));
        }
        if !list.is_empty() {
            o.insert("tools".into(), json!(list));
        }
    }
    if let Some(c) = &req.tool_choice {
        let c = match c {
            Value::Object(m) if m.get("type").and_then(|t| t.as_str()) == Some("function") => {
                json!({"type": "function", "function": {"name": m.get("name").cloned().unwrap_or(Value::Null)}})
            }
            c => c.clone(),
        };
        o.insert("tool_choice".into(), c);
    }
    if let Some(f) = req.text.as_ref().and_then(|t| t.get("format")) {
        let rf = match f.get("type").and_then(|t| t.as_str()) {
            Some("text") | None => None,
            Some("json_object") => Some(json!({"type": "json_object"})),
            Some("json_schema") => Some(json!({"type": "json_schema", "json_schema": {
                "name": f.get("name").cloned().unwrap_or(json!("response")),
                "schema": f.get("schema").cloned().unwrap_or(json!({})),
                "strict": f.get("strict").cloned().unwrap_or(json!(false)),
            }})),
            Some(k) => {
                return Err(Error::bad(
                    format!("text.format.type: {k} is not text, json_object or json_schema"),
                    "text.format.type",
                ))
            }
        };
        if let Some(rf) = rf {
            o.insert("response_format".into(), rf);
        }
    }
    if let Some(e) = req
        .reasoning
        .as_ref()
        .and_then(|r| r.get("effort"))
        .and_then(|e| e.as_str())
    {
        o.insert(
            "chat_template_kwargs".into(),
            json!({"enable_thinking": e != "none"}),
        );
    }
    if req.stream == Some(true) {
        o.insert("stream".into(), json!(true));
        o.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(chat)
}

/// The chat answer's output items: reasoning, the message, function calls.
fn output_items(c: &ChatCompletion) -> Vec<Value> {
    let mut items = Vec::new();
    let Some(ch) = c.choices.first() else {
        return items;
    };
    let m = &ch.message;
    if let Some(r) = m.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
        items.push(reasoning_item(0, r));
    }
    let calls = m.tool_calls.as_deref().unwrap_or_default();
    let text = m.content.clone().unwrap_or_default();
    if !text.is_empty() || calls.is_empty() {
        items.push(message_item(items.len(), &text, "completed"));
    }
    for call in calls {
        items.push(call_item(
            items.len(),
            &call.id,
            &call.function.name,
            &call.function.arguments,
            "completed",
        ));
    }
    items
}

fn reasoning_item(i: usize, text: &str) -> Value {
    json!({"type": "reasoning", "id": format!("rs_{i}"), "summary": [], "content": [{"type": "reasoning_text", "text": text}]})
}

fn message_item(i: usize, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": format!("msg_{i}"), "status": status, "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn call_item(i: usize, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{i}"), "call_id": call_id, "name": name,
           "arguments": arguments, "status": status})
}

/// The assistant turn the output items make, for the stored conversation.
fn assistant_message(items: &[Value]) -> Value {
    let text: String = items
        .iter()
        .filter(|i| i["type"] == "message")
        .filter_map(|i| i["content"][0]["text"].as_str())
        .collect();
    let calls: Vec<Value> = items
        .iter()
        .filter(|i| i["type"] == "function_call")
        .map(|i| json!({"id": i["call_id"], "type": "function", "function": {"name": i["name"], "arguments": i["arguments"]}}))
        .collect();
    let mut m = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        m["tool_calls"] = json!(calls);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(id: &str, status: &str) -> Stored {
        Stored::new(
            id.into(),
            Vec::new(),
            json!({ "status": status }),
            Vec::new(),
        )
    }

    #[test]
    fn a_running_background_response_outlives_the_cap() {
        let store = ResponseStore::default();
        store.put(stored("running", "in_progress"));
        let cap = ResponseStore::CAP;
        for i in 0..cap + 10 {
            store.put(stored(&format!("r{i}"), "completed"));
        }
        assert!(
            store.find("running").is_some(),
            "a pending answer was dropped"
        );
        // The oldest ended ones made room; the cap holds.
        assert!(store.find("r0").is_none());
        assert!(store.find(&format!("r{}", cap + 9)).is_some());
        assert_eq!(store.kept.lock().unwrap().len(), cap);
        // Once it ended, it is evicted like any other.
        store.update("running", |s| s.response["status"] = json!("completed"));
        store.put(stored("last", "completed"));
        assert!(store.find("running").is_none());
    }
}
