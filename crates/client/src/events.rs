//! Reading one stream event of any API the client speaks: a chat or
//! completions chunk as it is, or an OpenAI Responses event
//! (`response.output_text.delta`, `response.completed`, ...) as the chat
//! chunk it amounts to, so the rest of the client (stats, seams, usage)
//! knows one shape.

use crate::request::Wire;
use crate::Error;
use serde_json::{json, Value};

/// One decoded data event.
#[derive(Debug)]
pub(crate) enum Event {
    /// `[DONE]`.
    Done,
    /// One chunk; two for a Responses final event (its finish, then its
    /// usage, as a chat stream sends them).
    Chunks(Vec<Wire>),
    /// A Responses final event's chunks, after which the stream has ended
    /// (it has no `[DONE]`), with or without usage.
    Last(Vec<Wire>),
}

/// A stream's decoder; it remembers the Responses function calls opened
/// so far (their argument deltas name the output item, not the call).
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    calls: Vec<u64>,
}

impl Decoder {
    pub fn decode(&mut self, data: &str) -> Result<Event, Error> {
        if data.trim() == "[DONE]" {
            return Ok(Event::Done);
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| Error::Protocol(format!("a stream event is not JSON: {e}")))?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
        let last = matches!(kind, "response.completed" | "response.incomplete");
        let chunks = match kind {
            t if t == "error" || t.starts_with("response.") => self.responses(t, &v),
            _ => vec![v],
        };
        let chunks = chunks
            .into_iter()
            .map(serde_json::from_value)
            .collect::<Result<Vec<Wire>, _>>()
            .map_err(|e| Error::Protocol(format!("a stream event is not a chunk: {e}")))?;
        Ok(if last {
            Event::Last(chunks)
        } else {
            Event::Chunks(chunks)
        })
    }

    /// The chat chunks a Responses event amounts to (`{}` for events that
    /// carry no output: `response.created`, `...added`, `...done`).
    fn responses(&mut self, kind: &str, v: &Value) -> Vec<Value> {
        if let "response.completed" | "response.incomplete" = kind {
            // The finish, then the usage on its own, as a chat stream ends.
            let mut last = finished(&v["response"]);
            let usage = last.as_object_mut().and_then(|o| o.remove("usage"));
            return [Some(last), usage.map(|u| json!({"usage": u}))]
                .into_iter()
                .flatten()
                .collect();
        }
        vec![self.event(kind, v)]
    }

    fn event(&mut self, kind: &str, v: &Value) -> Value {
        let delta = |d: Value| json!({"choices": [{"index": 0, "delta": d}]});
        let text = || v.get("delta").cloned().unwrap_or(json!(""));
        match kind {
            "response.output_text.delta" => delta(json!({"content": text()})),
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                delta(json!({"reasoning_content": text()}))
            }
            "response.output_item.added" if v["item"]["type"] == "function_call" => {
                self.calls.push(v["output_index"].as_u64().unwrap_or(0));
                let call = json!({"index": self.calls.len() - 1, "id": v["item"]["call_id"],
                    "function": {"name": v["item"]["name"]}});
                delta(json!({"tool_calls": [call]}))
            }
            "response.function_call_arguments.delta" => {
                let at = v["output_index"].as_u64().unwrap_or(0);
                match self.calls.iter().position(|&o| o == at) {
                    Some(i) => {
                        let call = json!({"index": i, "function": {"arguments": text()}});
                        delta(json!({"tool_calls": [call]}))
                    }
                    None => json!({}),
                }
            }
            "response.failed" => {
                let e = &v["response"]["error"];
                let message = e["message"].as_str().unwrap_or("the response failed");
                json!({"error": {"message": message, "type": "server_error",
                    "code": e.get("code").cloned().unwrap_or(Value::Null)}})
            }
            "error" => json!({"error": {"message": v["message"].as_str().unwrap_or("error"),
                "type": "server_error", "code": v.get("code").cloned().unwrap_or(Value::Null)}}),
            _ => json!({}),
        }
    }
}

/// A whole answer in the chat completion's shape: a Responses object
/// (`"object": "response"`) becomes one choice whose message holds its
/// output text, reasoning and function calls; anything else is as it is.
pub(crate) fn whole(v: Value) -> Value {
    if v["object"] != "response" {
        return v;
    }
    let (mut text, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
    for item in v["output"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    text.push_str(part["text"].as_str().unwrap_or_default());
                }
            }
            Some("reasoning") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    reasoning.push_str(part["text"].as_str().unwrap_or_default());
                }
            }
            Some("function_call") => calls.push(json!({"id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]}})),
            _ => {}
        }
    }
    let mut c = finished(&v);
    let mut message = json!({"role": "assistant", "content": text});
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    c["choices"][0]["message"] = message;
    c["choices"][0].as_object_mut().map(|o| o.remove("delta"));
    c
}

/// The final chunk of a finished Responses object: finish reason, usage
/// (input/output tokens as prompt/completion tokens) and hasten's timing.
fn finished(r: &Value) -> Value {
    let calls = r["output"]
        .as_array()
        .is_some_and(|o| o.iter().any(|i| i["type"] == "function_call"));
    let finish = match (r["status"].as_str(), calls) {
        (Some("incomplete"), _) => match r["incomplete_details"]["reason"].as_str() {
            Some("content_filter") => "content_filter",
            _ => "length",
        },
        (_, true) => "tool_calls",
        _ => "stop",
    };
    let u = &r["usage"];
    let mut chunk = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]});
    if u.is_object() {
        chunk["usage"] = json!({
            "prompt_tokens": u["input_tokens"].as_u64().unwrap_or(0),
            "completion_tokens": u["output_tokens"].as_u64().unwrap_or(0),
            "prompt_tokens_details": {
                "cached_tokens": u["input_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0)},
            "completion_tokens_details": {
                "reasoning_tokens": u["output_tokens_details"]["reasoning_tokens"].as_u64().unwrap_or(0)},
        });
    }
    if r["timing"].is_object() {
        chunk["timing"] = r["timing"].clone();
    }
    chunk
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(d: &mut Decoder, v: Value) -> Vec<Wire> {
        match d.decode(&v.to_string()).unwrap() {
            Event::Chunks(w) | Event::Last(w) => w,
            Event::Done => panic!("done"),
        }
    }

    fn chunk(d: &mut Decoder, v: Value) -> Wire {
        let mut w = chunks(d, v);
        assert_eq!(w.len(), 1);
        w.remove(0)
    }

    #[test]
    fn responses_events_read_as_chat_chunks() {
        let mut d = Decoder::default();
        let w = chunk(
            &mut d,
            json!({"type": "response.created", "response": {"status": "in_progress"}}),
        );
        assert!(w.choices.is_empty() && w.usage.is_none());
        let w = chunk(
            &mut d,
            json!({"type": "response.output_text.delta", "delta": "Hel"}),
        );
        assert_eq!(w.choices[0].text(), "Hel");
        let w = chunk(
            &mut d,
            json!({"type": "response.reasoning_text.delta", "delta": "hmm"}),
        );
        assert_eq!(
            w.choices[0].part().unwrap().reasoning_content.as_deref(),
            Some("hmm")
        );
        // Two calls after a message item: indexes 0 and 1, arguments routed
        // by output_index.
        chunk(
            &mut d,
            json!({"type": "response.output_item.added", "output_index": 1,
            "item": {"type": "function_call", "call_id": "c1", "name": "f"}}),
        );
        chunk(
            &mut d,
            json!({"type": "response.output_item.added", "output_index": 2,
            "item": {"type": "function_call", "call_id": "c2", "name": "g"}}),
        );
        let w = chunk(
            &mut d,
            json!({"type": "response.function_call_arguments.delta",
            "output_index": 2, "delta": "{}"}),
        );
        let calls = w.choices[0].part().unwrap().tool_calls.as_ref().unwrap();
        assert_eq!(calls[0].index, Some(1));
        assert_eq!(calls[0].function.arguments.as_deref(), Some("{}"));
        let w = chunks(
            &mut d,
            json!({"type": "response.incomplete", "response": {
            "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
            "output": [], "usage": {"input_tokens": 7, "output_tokens": 3,
                "input_tokens_details": {"cached_tokens": 4}},
            "timing": {"queue_ms": 1.0, "prefill_ms": 2.0, "decode_ms": 3.0,
                "prompt_tokens": 7, "cached_prompt_tokens": 4}}}),
        );
        // The finish (with the timing), then the usage alone.
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].choices[0].finish_reason.as_deref(), Some("length"));
        assert!(w[0].usage.is_none() && w[1].choices.is_empty());
        let u = w[1].usage.unwrap().usage();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (7, 3));
        assert_eq!(u.prompt_tokens_details.unwrap().cached_tokens, 4);
        assert_eq!(w[0].timing.unwrap().cached_prompt_tokens, 4);
        let w = chunk(
            &mut d,
            json!({"type": "response.completed", "response": {
            "status": "completed", "output": [{"type": "function_call"}]}}),
        );
        assert_eq!(w.choices[0].finish_reason.as_deref(), Some("tool_calls"));
        assert!(w.usage.is_none());
        let w = chunk(
            &mut d,
            json!({"type": "error", "code": "server_error", "message": "boom"}),
        );
        assert_eq!(
            crate::request::error_body(w.error.as_ref().unwrap())
                .error
                .message,
            "boom"
        );
        assert!(matches!(d.decode(" [DONE]").unwrap(), Event::Done));
        // A final event ends the stream, usage or not.
        let done = json!({"type": "response.completed", "response": {"status": "completed"}});
        assert!(matches!(d.decode(&done.to_string()).unwrap(), Event::Last(w) if w.len() == 1));
        assert!(d.decode("{").is_err());
    }

    #[test]
    fn a_whole_response_reads_as_a_completion() {
        let v = whole(
            json!({"object": "response", "status": "completed", "output": [
            {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "r"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "Hi"}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}],
            "usage": {"input_tokens": 2, "output_tokens": 5}}),
        );
        let w: Wire = serde_json::from_value(v).unwrap();
        let c = &w.choices[0];
        assert_eq!(c.text(), "Hi");
        assert_eq!(c.part().unwrap().reasoning_content.as_deref(), Some("r"));
        assert_eq!(c.part().unwrap().tool_calls.as_ref().unwrap().len(), 1);
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(w.usage.unwrap().completion_tokens, 5);
        let chat = json!({"choices": []});
        assert_eq!(whole(chat.clone()), chat);
    }

    #[test]
    fn chat_chunks_pass_through() {
        let mut d = Decoder::default();
        let w = chunk(
            &mut d,
            json!({"choices": [{"index": 0, "delta": {"content": "x"}}]}),
        );
        assert_eq!(w.choices[0].text(), "x");
    }
}
