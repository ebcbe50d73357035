//! Re-encoding the chat path's SSE stream for another API's events (the
//! Messages and Responses adapters): each `data:` payload goes through a
//! converter, whose output (whole SSE frames) is sent on; comments pass.
//! [`chat_data`] reads a chat chunk for the converters.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use futures_util::StreamExt;

/// `resp`'s SSE body with every `data:` payload replaced by `convert(payload)`
/// (frames that convert to nothing are dropped). Comments pass as they are:
/// the keep-alives and the `: queued` / `: prefill` notes (SSE readers, the
/// SDKs' included, skip them).
pub fn rewrite_sse(
    resp: Response,
    convert: impl FnMut(&str) -> String + Send + 'static,
) -> Response {
    let body = resp.into_body().into_data_stream();
    let state = (body, String::new(), convert);
    let out = futures_util::stream::unfold(state, |(mut body, mut buf, mut convert)| async move {
        loop {
            // Whole frames first; then more bytes.
            if let Some(end) = buf.find("\n\n") {
                let frame: String = buf.drain(..end + 2).collect();
                let text: String = frame
                    .lines()
                    .filter_map(|l| match l.strip_prefix("data:") {
                        Some(d) => Some(convert(d.trim_start())),
                        None => l.starts_with(':').then(|| format!("{l}\n\n")),
                    })
                    .collect();
                if text.is_empty() {
                    continue;
                }
                return Some((
                    Ok::<_, std::convert::Infallible>(Bytes::from(text)),
                    (body, buf, convert),
                ));
            }
            match body.next().await {
                Some(Ok(chunk)) => buf.push_str(&String::from_utf8_lossy(&chunk)),
                _ => return None,
            }
        }
    });
    let mut r = Response::new(Body::from_stream(out));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// One `data:` payload of the chat stream, as the adapters read it.
pub enum ChatData {
    /// `[DONE]`.
    Done,
    /// An error event's message.
    Error(String),
    Chunk(ChatChunk),
}

/// A chat chunk: the whole JSON (model, timing, ...), its usage, and its
/// first choice's delta as parts in stream order.
pub struct ChatChunk {
    pub json: serde_json::Value,
    pub usage: Option<hasten_protocol::Usage>,
    /// `None` when the chunk has no choice.
    pub choice: Option<ChoiceDelta>,
}

/// What a choice's delta carries, in the order the adapters emit it.
pub struct ChoiceDelta {
    pub parts: Vec<DeltaPart>,
    pub finish_reason: Option<String>,
    /// The stop sequence that ended the choice (hasten's `stop_reason`).
    pub stop_reason: Option<String>,
}

pub enum DeltaPart {
    Reasoning(String),
    Text(String),
    /// A tool call starts: its id and function name.
    ToolCall {
        id: String,
        name: String,
    },
    /// More of the open tool call's arguments.
    ToolArguments(String),
}

/// Reads one `data:` payload of the chat stream (`None`: not JSON).
pub fn chat_data(d: &str) -> Option<ChatData> {
    use serde_json::Value;
    if d == "[DONE]" {
        return Some(ChatData::Done);
    }
    let json: Value = serde_json::from_str(d).ok()?;
    if let Some(e) = json.get("error") {
        let msg = e.get("message").and_then(|m| m.as_str()).unwrap_or("error");
        return Some(ChatData::Error(msg.to_owned()));
    }
    let usage = json
        .get("usage")
        .and_then(|u| serde_json::from_value(u.clone()).ok());
    let text = |v: &Value, key: &str| {
        v.get(key)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let choice = json.get("choices").and_then(|c| c.get(0)).map(|ch| {
        let delta = &ch["delta"];
        let mut parts = Vec::new();
        parts.extend(text(delta, "reasoning_content").map(DeltaPart::Reasoning));
        parts.extend(text(delta, "content").map(DeltaPart::Text));
        for tc in delta
            .get("tool_calls")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            let f = &tc["function"];
            if let (Some(id), Some(name)) = (
                tc.get("id").and_then(|v| v.as_str()),
                f.get("name").and_then(|v| v.as_str()),
            ) {
                parts.push(DeltaPart::ToolCall {
                    id: id.to_owned(),
                    name: name.to_owned(),
                });
            }
            parts.extend(text(f, "arguments").map(DeltaPart::ToolArguments));
        }
        ChoiceDelta {
            parts,
            finish_reason: ch
                .get("finish_reason")
                .and_then(|v| v.as_str())
                .map(str::to_owned),
            stop_reason: ch
                .get("stop_reason")
                .and_then(|v| v.as_str())
                .map(str::to_owned),
        }
    });
    Some(ChatData::Chunk(ChatChunk {
        json,
        usage,
        choice,
    }))
}
