//! A chat answer's parts (reasoning, text, tool calls) in OpenAI's
//! shapes: stream deltas and the whole message, both made from the same
//! [`Piece`]s, so a streamed answer assembles to the unary one.

use hasten_model::output::{OutputSpec, OutputStream, Piece};
use hasten_protocol::chat::{
    AssistantMessage, Delta, FunctionCall, FunctionDelta, ToolCall, ToolCallDelta,
};
use std::hash::{Hash, Hasher};

/// The id of call `index` of choice `choice` of response `response`:
/// `call_` and 24 hex digits, the same each time (a resumed stream
/// repeats it).
pub fn call_id(response: &str, choice: usize, index: usize) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (response, choice, index).hash(&mut h);
    let a = h.finish();
    (a, 1u8).hash(&mut h);
    format!("call_{a:016x}{:08x}", h.finish() as u32)
}

/// One piece as a stream delta.
pub fn delta(p: Piece, response: &str, choice: usize) -> Delta {
    let mut d = Delta::default();
    match p {
        Piece::Content(t) => d.content = Some(t),
        Piece::Reasoning(t) => d.reasoning_content = Some(t),
        Piece::Call { index, name } => {
            d.tool_calls = Some(vec![ToolCallDelta {
                index: index as u32,
                id: Some(call_id(response, choice, index)),
                kind: Some("function".into()),
                function: FunctionDelta {
                    name: Some(name),
                    arguments: Some(String::new()),
                },
            }])
        }
        Piece::Args { index, text } => {
            d.tool_calls = Some(vec![ToolCallDelta {
                index: index as u32,
                id: None,
                kind: None,
                function: FunctionDelta {
                    name: None,
                    arguments: Some(text),
                },
            }])
        }
    }
    d
}

/// A whole answer, put together from its pieces.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Whole {
    pub content: String,
    pub reasoning: String,
    pub calls: Vec<ToolCall>,
    pub reasoning_tokens: usize,
}

impl Whole {
    /// Splits an answer given as its tokens' texts.
    pub fn of<'a>(
        spec: &OutputSpec,
        texts: impl IntoIterator<Item = &'a str>,
        response: &str,
        choice: usize,
    ) -> Whole {
        let mut s = OutputStream::new(spec.clone());
        let mut w = Whole::default();
        for t in texts {
            w.add(s.push(t), response, choice);
        }
        w.add(s.finish(), response, choice);
        w.reasoning_tokens = s.reasoning_tokens();
        w
    }

    fn add(&mut self, pieces: Vec<Piece>, response: &str, choice: usize) {
        for p in pieces {
            match p {
                Piece::Content(t) => self.content.push_str(&t),
                Piece::Reasoning(t) => self.reasoning.push_str(&t),
                Piece::Call { index, name } => self.calls.push(ToolCall {
                    id: call_id(response, choice, index),
                    kind: "function".into(),
                    function: FunctionCall {
                        name,
                        arguments: String::new(),
                    },
                }),
                Piece::Args { index, text } => self.calls[index].function.arguments.push_str(&text),
            }
        }
    }

    /// The message, as OpenAI shows it: no `content` when the answer is
    /// only calls.
    pub fn message(self) -> AssistantMessage {
        let calls = !self.calls.is_empty();
        AssistantMessage {
            role: "assistant".into(),
            content: (!(calls && self.content.is_empty())).then_some(self.content),
            reasoning_content: (!self.reasoning.is_empty()).then_some(self.reasoning),
            tool_calls: calls.then_some(self.calls),
        }
    }
}

/// `finish_reason` of an answer: `tool_calls` when it ended by itself
/// after calling tools.
pub fn finish_reason(reason: &str, called: bool) -> String {
    if called && reason == "stop" {
        "tool_calls".into()
    } else {
        reason.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hasten_model::output::ToolSyntax;

    #[test]
    fn streamed_deltas_assemble_to_the_whole_message() {
        let spec = OutputSpec {
            thinking: Some(false),
            tools: Some((ToolSyntax::Hermes, vec!["f".into()])),
            single_call: false,
        };
        let text = "<think>hm</think>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}\n</tool_call>";
        let toks: Vec<String> = text.chars().map(String::from).collect();
        let whole = Whole::of(&spec, toks.iter().map(String::as_str), "r", 0);
        assert_eq!(whole.calls.len(), 1);
        assert_eq!(whole.calls[0].function.arguments, r#"{"a": [1, 2]}"#);
        assert_eq!(whole.reasoning, "hm");
        assert!(whole.reasoning_tokens >= 10);
        // The deltas: id and name once, then argument fragments.
        let mut s = OutputStream::new(spec);
        let mut deltas = Vec::new();
        for t in &toks {
            deltas.extend(s.push(t).into_iter().map(|p| delta(p, "r", 0)));
        }
        deltas.extend(s.finish().into_iter().map(|p| delta(p, "r", 0)));
        let calls: Vec<&ToolCallDelta> = deltas
            .iter()
            .filter_map(|d| d.tool_calls.as_ref())
            .flatten()
            .collect();
        assert_eq!(calls[0].id.as_deref(), Some(whole.calls[0].id.as_str()));
        assert!(calls[1..]
            .iter()
            .all(|c| c.id.is_none() && c.function.name.is_none()));
        let args: String = calls
            .iter()
            .filter_map(|c| c.function.arguments.clone())
            .collect();
        assert_eq!(args, whole.calls[0].function.arguments);
        let m = whole.message();
        assert_eq!(m.content, None);
        assert_ne!(call_id("r", 0, 0), call_id("r", 0, 1));
    }
}
