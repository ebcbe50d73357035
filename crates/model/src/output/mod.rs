//! The parts of a chat model's answer: reasoning (a `<think>…</think>`
//! block), answer text and tool calls in the model family's syntax, split
//! as the text streams in. [`OutputStream`] turns text deltas into
//! [`Piece`]s that never take anything back, so a streamed answer and a
//! whole one (the same pieces, joined) always agree.

pub mod json;
mod toolcall;

pub use json::Draft;
pub use toolcall::{parse, Layout, Parsed, ToolSyntax};

/// The tag that opens a thinking block.
pub const THINK_OPEN: &str = "<think>";
/// The tag that closes it.
pub const THINK_CLOSE: &str = "</think>";

/// Whether a rendered prompt leaves a thinking block open, so the answer
/// starts inside it (DeepSeek-R1's template ends with `<think>\n`).
pub fn opens_thinking(prompt: &str) -> bool {
    match (prompt.rfind(THINK_OPEN), prompt.rfind(THINK_CLOSE)) {
        (Some(o), Some(c)) => o > c,
        (Some(_), None) => true,
        _ => false,
    }
}

/// One part of an answer, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Reasoning(String),
    Content(String),
    /// A new call, numbered from 0: its name (sent once).
    Call {
        index: usize,
        name: String,
    },
    /// More of call `index`'s arguments text.
    Args {
        index: usize,
        text: String,
    },
}

/// What to look for in an answer.
#[derive(Debug, Clone, Default)]
pub struct OutputSpec {
    /// Split off a thinking block; `Some(true)`: the answer starts in one.
    pub thinking: Option<bool>,
    /// Read tool calls in this syntax, naming these tools.
    pub tools: Option<(ToolSyntax, Vec<String>)>,
    /// Keep only the first call (`parallel_tool_calls: false`).
    pub single_call: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Think {
    /// Not yet known whether the answer opens a block.
    Before,
    In,
    /// After the block: whitespace before the answer text is dropped.
    Closing,
    After,
}

/// Splits one answer's text deltas into pieces.
#[derive(Debug, Clone)]
pub struct OutputStream {
    spec: OutputSpec,
    think: Think,
    /// Text not yet split off into reasoning or passed on.
    pending: String,
    /// Answer text after the reasoning (what tool calls are read from).
    answer: String,
    sent_content: usize,
    /// Per call: its name is out, and how much of its arguments.
    sent_calls: Vec<usize>,
    reasoning_tokens: usize,
}

impl OutputStream {
    pub fn new(spec: OutputSpec) -> Self {
        let think = match spec.thinking {
            None => Think::After,
            Some(true) => Think::In,
            Some(false) => Think::Before,
        };
        OutputStream {
            spec,
            think,
            pending: String::new(),
            answer: String::new(),
            sent_content: 0,
            sent_calls: Vec::new(),
            reasoning_tokens: 0,
        }
    }

    /// Pieces from one more token's text.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        let was = self.think;
        self.pending.push_str(text);
        let mut out = Vec::new();
        self.split_thinking(false, &mut out);
        if was == Think::In || self.think == Think::In {
            self.reasoning_tokens += 1;
        }
        self.emit_answer(false, &mut out);
        out
    }

    /// The pieces held back until the end (the answer is complete).
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        self.split_thinking(true, &mut out);
        self.emit_answer(true, &mut out);
        out
    }

    /// Output tokens that were part of the reasoning.
    pub fn reasoning_tokens(&self) -> usize {
        self.reasoning_tokens
    }

    /// Any tool call was read.
    pub fn called(&self) -> bool {
        !self.sent_calls.is_empty()
    }

    fn split_thinking(&mut self, last: bool, out: &mut Vec<Piece>) {
        loop {
            match self.think {
                Think::Before => {
                    let t = self.pending.trim_start();
                    if let Some(rest) = t.strip_prefix(THINK_OPEN) {
                        self.pending = rest.to_owned();
                        self.think = Think::In;
                    } else if !last && THINK_OPEN.starts_with(t) {
                        return;
                    } else {
                        self.think = Think::After;
                    }
                }
                Think::In => {
                    if let Some(k) = self.pending.find(THINK_CLOSE) {
                        push_reasoning(out, &self.pending[..k]);
                        self.pending.drain(..k + THINK_CLOSE.len());
                        self.think = Think::Closing;
                        continue;
                    }
                    let keep = if last {
                        0
                    } else {
                        held(&self.pending, THINK_CLOSE)
                    };
                    let n = self.pending.len() - keep;
                    push_reasoning(out, &self.pending[..n]);
                    self.pending.drain(..n);
                    return;
                }
                Think::Closing => {
                    let t = self.pending.trim_start();
                    if t.is_empty() && !last {
                        self.pending.clear();
                        return;
                    }
                    self.pending = t.to_owned();
                    self.think = Think::After;
                }
                Think::After => {
                    self.answer.push_str(&self.pending);
                    self.pending.clear();
                    return;
                }
            }
        }
    }

    fn emit_answer(&mut self, last: bool, out: &mut Vec<Piece>) {
        let Some((syntax, names)) = &self.spec.tools else {
            if self.answer.len() > self.sent_content {
                out.push(Piece::Content(self.answer[self.sent_content..].to_owned()));
                self.sent_content = self.answer.len();
            }
            return;
        };
        let mut p = parse(*syntax, &self.answer, names, last);
        if self.spec.single_call {
            p.calls.truncate(1);
        }
        if p.content.len() > self.sent_content {
            out.push(Piece::Content(p.content[self.sent_content..].to_owned()));
            self.sent_content = p.content.len();
        }
        for (index, d) in p.calls.iter().enumerate() {
            let Some(name) = &d.name else { break };
            if index == self.sent_calls.len() {
                out.push(Piece::Call {
                    index,
                    name: name.clone(),
                });
                self.sent_calls.push(0);
            }
            let sent = &mut self.sent_calls[index];
            if d.args.len() > *sent {
                out.push(Piece::Args {
                    index,
                    text: d.args[*sent..].to_owned(),
                });
                *sent = d.args.len();
            }
        }
    }
}

fn push_reasoning(out: &mut Vec<Piece>, s: &str) {
    if !s.is_empty() {
        out.push(Piece::Reasoning(s.to_owned()));
    }
}

/// The length of the longest end of `text` that begins `tag`.
pub(crate) fn held(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
