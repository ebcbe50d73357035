//! Responses objects and events: what a response repeats of its request
//! ([`Echo`]), and the chat SSE stream rewritten as Responses events
//! ([`stream_response`]).

use super::{cached, call_item, message_item, reasoning, reasoning_item, usage_json};
use axum::response::Response;
use hasten_protocol::responses::ResponsesRequest;
use serde_json::{json, Value};

/// What a response object repeats of its request.
#[derive(Clone)]
pub(super) struct Echo(Value);

impl Echo {
    pub(super) fn of(r: &ResponsesRequest) -> Echo {
        Echo(json!({
            "instructions": r.instructions, "max_output_tokens": r.max_output_tokens,
            "parallel_tool_calls": r.parallel_tool_calls.unwrap_or(true),
            "previous_response_id": r.previous_response_id, "temperature": r.temperature,
            "top_p": r.top_p, "tool_choice": r.tool_choice.clone().unwrap_or(json!("auto")),
            "tools": r.tools.clone().unwrap_or_default(), "store": r.store.unwrap_or(true),
            "metadata": r.metadata.clone().unwrap_or(json!({})),
            "text": r.text.clone().unwrap_or(json!({"format": {"type": "text"}})),
            "reasoning": r.reasoning.clone().unwrap_or(json!({"effort": null, "summary": null})),
        }))
    }

    /// The response object; a `length` finish makes it incomplete.
    pub(super) fn response(
        &self,
        id: &str,
        status: &str,
        model: &str,
        output: Vec<Value>,
        usage: Option<Value>,
        finish: Option<&str>,
    ) -> Value {
        let mut r = self.0.clone();
        let (status, incomplete) = match (status, finish) {
            ("completed", Some("length")) => ("incomplete", json!({"reason": "max_output_tokens"})),
            (s, _) => (s, Value::Null),
        };
        let o = r.as_object_mut().expect("an object");
        for (k, v) in [
            ("id", json!(id)),
            ("object", json!("response")),
            ("created_at", json!(crate::unix_now())),
            ("status", json!(status)),
            ("error", Value::Null),
            ("incomplete_details", incomplete),
            ("model", json!(model)),
            ("output", json!(output)),
            ("usage", usage.unwrap_or(Value::Null)),
        ] {
            o.insert(k.into(), v);
        }
        r
    }
}

/// The chat SSE stream rewritten as Responses events; `done` gets the
/// response id and its output items at the end.
pub(super) fn stream_response(
    resp: Response,
    mut conv: Conv,
    done: impl FnOnce(String, &[Value], Value) + Send + 'static,
) -> Response {
    let mut done = Some(done);
    crate::rewrite::rewrite_sse(resp, move |d| {
        let out = conv.data(d);
        if conv.finished {
            if let (Some(f), Some(r)) = (done.take(), conv.last.take()) {
                f(conv.id.clone(), &conv.items, r);
            }
        }
        out
    })
}

/// One stream's rewriting: the items so far (the last may be open).
pub(super) struct Conv {
    id: String,
    echo: Echo,
    model: String,
    seq: u64,
    started: bool,
    finished: bool,
    items: Vec<Value>,
    /// The open item's index.
    open: Option<usize>,
    finish: Option<String>,
    usage: Option<Value>,
    /// hasten's timing breakdown from the last chunk (an extension field of
    /// the final response, as on chat completions).
    timing: Option<Value>,
    /// The final response object, once the stream ended.
    last: Option<Value>,
}

impl Conv {
    pub(super) fn new(id: String, echo: Echo) -> Conv {
        Conv {
            id,
            echo,
            model: String::new(),
            seq: 0,
            started: false,
            finished: false,
            items: Vec::new(),
            open: None,
            finish: None,
            usage: None,
            timing: None,
            last: None,
        }
    }

    fn event(&mut self, kind: &str, mut data: Value) -> String {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        format!("event: {kind}\ndata: {data}\n\n")
    }

    fn close(&mut self, out: &mut String) {
        let Some(i) = self.open.take() else { return };
        let item = &mut self.items[i];
        item["status"] = json!("completed");
        let item = item.clone();
        let id = item["id"].clone();
        match item["type"].as_str() {
            Some("message") => {
                let part = item["content"][0].clone();
                let text = part["text"].clone();
                out.push_str(&self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "text": text}),
                ));
                out.push_str(&self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "part": part}),
                ));
            }
            Some("function_call") => {
                let args = item["arguments"].clone();
                out.push_str(&self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": i, "arguments": args}),
                ));
            }
            _ => {}
        }
        out.push_str(&self.event(
            "response.output_item.done",
            json!({"output_index": i, "item": item}),
        ));
    }

    /// Opens `item` (closing the open one) unless an item of its type is open and `force` is off.
    fn open(&mut self, item: Value, force: bool, out: &mut String) -> usize {
        if let Some(i) = self.open {
            if self.items[i]["type"] == item["type"] && !force {
                return i;
            }
        }
        self.close(out);
        let i = self.items.len();
        self.items.push(item.clone());
        self.open = Some(i);
        out.push_str(&self.event(
            "response.output_item.added",
            json!({"output_index": i, "item": item}),
        ));
        if self.items[i]["type"] == "message" {
            let part = json!({"type": "output_text", "text": "", "annotations": []});
            out.push_str(&self.event("response.content_part.added", json!({"item_id": self.items[i]["id"], "output_index": i, "content_index": 0, "part": part})));
        }
        i
    }

    fn data(&mut self, d: &str) -> String {
        use crate::rewrite::{chat_data, ChatData, DeltaPart};
        let mut out = String::new();
        let c = match chat_data(d) {
            None => return out,
            Some(ChatData::Done) => {
                self.done(&mut out);
                return out;
            }
            Some(ChatData::Error(msg)) => {
                out.push_str(&self.event("error", json!({"code": "server_error", "message": msg})));
                return out;
            }
            Some(ChatData::Chunk(c)) => c,
        };
        if !self.started {
            self.started = true;
            self.model = c.json["model"].as_str().unwrap_or_default().to_owned();
            let r =
                self.echo
                    .response(&self.id, "in_progress", &self.model, Vec::new(), None, None);
            out.push_str(&self.event("response.created", json!({"response": r})));
            out.push_str(&self.event("response.in_progress", json!({"response": r})));
        }
        if let Some(u) = &c.usage {
            self.usage = Some(usage_json(
                u.prompt_tokens,
                cached(u),
                u.completion_tokens,
                reasoning(u),
            ));
        }
        if let Some(t) = c.json.get("timing").filter(|t| t.is_object()) {
            self.timing = Some(t.clone());
        }
        let Some(ch) = c.choice else {
            return out;
        };
        for part in ch.parts {
            match part {
                DeltaPart::Reasoning(r) => {
                    let i = self.open(reasoning_item(self.items.len(), ""), false, &mut out);
                    let id = self.append(i, &["content", "0", "text"], &r);
                    out.push_str(&self.event(
                        "response.reasoning_text.delta",
                        json!({"item_id": id, "output_index": i, "content_index": 0, "delta": r}),
                    ));
                }
                DeltaPart::Text(t) => {
                    let item = message_item(self.items.len(), "", "in_progress");
                    let i = self.open(item, false, &mut out);
                    let id = self.append(i, &["content", "0", "text"], &t);
                    out.push_str(&self.event("response.output_text.delta", json!({"item_id": id, "output_index": i, "content_index": 0, "delta": t, "logprobs": []})));
                }
                DeltaPart::ToolCall { id, name } => {
                    let item = call_item(self.items.len(), &id, &name, "", "in_progress");
                    self.open(item, true, &mut out);
                }
                DeltaPart::ToolArguments(a) => {
                    let Some(i) = self.open else { continue };
                    let id = self.append(i, &["arguments"], &a);
                    out.push_str(&self.event(
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": i, "delta": a}),
                    ));
                }
            }
        }
        if let Some(f) = ch.finish_reason {
            self.finish = Some(f);
            // A finished answer with no item still has its (empty) message.
            if self.items.is_empty() {
                self.open(message_item(0, "", "in_progress"), false, &mut out);
            }
        }
        out
    }

    /// Appends `s` to the string at `path` in item `i`; returns the item's id.
    fn append(&mut self, i: usize, path: &[&str], s: &str) -> Value {
        let mut v = &mut self.items[i];
        for k in path {
            v = match k.parse::<usize>() {
                Ok(n) => &mut v[n],
                Err(_) => &mut v[*k],
            };
        }
        let prev = v.as_str().unwrap_or_default().to_owned();
        *v = json!(prev + s);
        self.items[i]["id"].clone()
    }

    /// The end of the chat stream: the last item closes and the final
    /// response goes out.
    fn done(&mut self, out: &mut String) {
        self.close(out);
        self.finished = true;
        let mut r = self.echo.response(
            &self.id,
            "completed",
            &self.model,
            self.items.clone(),
            self.usage.clone(),
            self.finish.as_deref(),
        );
        if let Some(t) = self.timing.take() {
            r["timing"] = t;
        }
        let kind = if r["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        out.push_str(&self.event(kind, json!({"response": r})));
        self.last = Some(r);
    }
}
