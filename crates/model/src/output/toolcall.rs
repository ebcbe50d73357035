//! Tool calls in the syntax of each model family, read from the whole
//! text so far: the answer text around the calls and each call's name and
//! arguments, with text that may still become a call held back. Reading
//! a longer text never takes back what a shorter one gave (content and
//! arguments only grow), so a stream can send the difference.

use super::held;
use super::json::{scan_call, skip_ws, CallScan, Draft};

/// How a model family writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSyntax {
    /// Qwen 2.5/3, Hermes, SmolLM3: each call `<tool_call>\n{"name": …,
    /// "arguments": {…}}\n</tool_call>`.
    Hermes,
    /// Llama 3.1/3.2: `{"name": …, "parameters": {…}}` as the answer,
    /// several separated by `;`, optionally after `<|python_tag|>`.
    Llama3,
    /// Mistral: `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`.
    Mistral,
    /// Granite 3.x: `<|tool_call|>[{"name": …, "arguments": {…}}, …]`.
    Granite,
    /// Phi-4-mini: `functools[{"name": …, "arguments": {…}}, …]`.
    Phi4,
    /// Any other template: the answer is a call object (or a list of
    /// them) naming one of the request's tools.
    Json,
}

/// How the calls after a marker are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// One object per marker, then an optional closing tag.
    Object,
    /// A JSON list of objects.
    List,
    /// Objects separated by `;`.
    Semicolons,
}

struct Form {
    /// The text that opens the calls; empty: the calls are the answer.
    marker: &'static str,
    /// With no marker, the answer is a call if it starts with `{` or `[`.
    at_start: bool,
    body: Body,
    closer: &'static str,
    args_keys: &'static [&'static str],
}

impl ToolSyntax {
    /// The syntax a chat template teaches, from its text.
    pub fn detect(template: &str) -> ToolSyntax {
        if template.contains("<tool_call>") {
            ToolSyntax::Hermes
        } else if template.contains("[TOOL_CALLS]") {
            ToolSyntax::Mistral
        } else if template.contains("<|tool_call|>") {
            ToolSyntax::Granite
        } else if template.contains("<|python_tag|>")
            || (template.contains("<|start_header_id|>") && template.contains("\"parameters\""))
        {
            ToolSyntax::Llama3
        } else if template.contains("<|tool|>") {
            ToolSyntax::Phi4
        } else {
            ToolSyntax::Json
        }
    }

    fn form(self) -> Form {
        const ARGS: &[&str] = &["arguments", "parameters"];
        let f = |marker, body, closer| Form {
            marker,
            at_start: marker.is_empty(),
            body,
            closer,
            args_keys: ARGS,
        };
        match self {
            ToolSyntax::Hermes => f("<tool_call>", Body::Object, "</tool_call>"),
            ToolSyntax::Llama3 => Form {
                at_start: true,
                ..f("<|python_tag|>", Body::Semicolons, "")
            },
            ToolSyntax::Mistral => f("[TOOL_CALLS]", Body::List, ""),
            ToolSyntax::Granite => f("<|tool_call|>", Body::List, ""),
            ToolSyntax::Phi4 => f("functools", Body::List, ""),
            ToolSyntax::Json => Form {
                at_start: true,
                ..f("", Body::List, "")
            },
        }
    }

    /// The marker text that opens calls (empty for [`ToolSyntax::Json`]).
    pub fn marker(self) -> &'static str {
        self.form().marker
    }

    /// The text a call is written as, and between and around calls, for
    /// grammars that force calls: (before the first call, between calls,
    /// after the last, the object's arguments key, whether the calls sit
    /// in a JSON list).
    pub fn layout(self) -> Layout {
        let (open, sep, close, key, list) = match self {
            ToolSyntax::Hermes => (
                "<tool_call>\n",
                "\n</tool_call>\n<tool_call>\n",
                "\n</tool_call>",
                "arguments",
                false,
            ),
            ToolSyntax::Llama3 => ("", "; ", "", "parameters", false),
            ToolSyntax::Mistral => ("[TOOL_CALLS]", ", ", "", "arguments", true),
            ToolSyntax::Granite => ("<|tool_call|>", ", ", "", "arguments", true),
            ToolSyntax::Phi4 => ("functools", ", ", "", "arguments", true),
            ToolSyntax::Json => ("", ", ", "", "arguments", true),
        };
        Layout {
            open,
            sep,
            close,
            args_key: key,
            list,
        }
    }
}

/// How forced calls are written (see [`ToolSyntax::layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub open: &'static str,
    pub sep: &'static str,
    pub close: &'static str,
    pub args_key: &'static str,
    pub list: bool,
}

/// What a text holds so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Answer text that can be shown (text that may still turn out to
    /// open a call is held back until the text is final).
    pub content: String,
    /// Calls with their names known (the last may be cut off).
    pub calls: Vec<Draft>,
}

/// Reads `text` in `syntax`. `names` are the request's tools: a call
/// without a marker must name one of them. `last` says no more text comes.
pub fn parse(syntax: ToolSyntax, text: &str, names: &[String], last: bool) -> Parsed {
    let form = syntax.form();
    let start = skip_ws(text, 0);
    if form.at_start && matches!(text.as_bytes().get(start), Some(b'{' | b'[')) {
        return match calls(&form, text, start, names, last, true) {
            Some(p) => p,
            None => whole(text),
        };
    }
    if form.at_start && start == text.len() && !last {
        return Parsed::default();
    }
    if !form.marker.is_empty() {
        if let Some(k) = text.find(form.marker) {
            let mut p = match calls(&form, text, k + form.marker.len(), names, last, false) {
                Some(p) => p,
                None => return whole(text),
            };
            p.content.insert_str(0, &text[..k]);
            return p;
        }
        if !last {
            return Parsed {
                content: text[..text.len() - held(text, form.marker)].to_owned(),
                calls: Vec::new(),
            };
        }
    }
    whole(text)
}

fn whole(text: &str) -> Parsed {
    Parsed {
        content: text.to_owned(),
        calls: Vec::new(),
    }
}

/// The calls from `i` on (right after the marker, or at the answer's
/// start when `bare`). `None`: this is not a call after all, the text is
/// answer text.
fn calls(
    form: &Form,
    text: &str,
    mut i: usize,
    names: &[String],
    last: bool,
    bare: bool,
) -> Option<Parsed> {
    let b = text.as_bytes();
    let mut p = Parsed::default();
    let known = |d: &Draft| !bare || d.name.as_ref().is_some_and(|n| names.contains(n));
    let in_list = if bare {
        b.get(skip_ws(text, i)) == Some(&b'[')
    } else {
        form.body == Body::List
    };
    if in_list {
        i = skip_ws(text, i);
        match b.get(i) {
            None => return (!last).then_some(p),
            Some(b'[') => i += 1,
            Some(_) => return None,
        }
    }
    loop {
        match scan_call(text, i, form.args_keys) {
            CallScan::Bad => return None,
            CallScan::More(d) => {
                if last {
                    // Cut off for good: calls already named stay.
                    if d.name.is_none() || !known(&d) {
                        return if p.calls.is_empty() { None } else { Some(p) };
                    }
                }
                if d.name.is_some() && !known(&d) {
                    return None;
                }
                if d.name.is_some() {
                    p.calls.push(d);
                }
                return Some(p);
            }
            CallScan::Done(d, end) => {
                if !known(&d) {
                    return None;
                }
                p.calls.push(d);
                i = skip_ws(text, end);
            }
        }
        // Between calls: a separator, a closer, the list's end.
        let rest = &text[i..];
        let sep = if form.body == Body::Semicolons {
            ";"
        } else {
            ""
        };
        if in_list {
            if rest.is_empty() {
                return Some(p);
            }
            if let Some(r) = rest.strip_prefix(',') {
                i = text.len() - r.len();
                continue;
            }
            if rest.starts_with(']') {
                i += 1;
                break;
            }
            return None;
        }
        if !sep.is_empty() && rest.starts_with(sep) {
            i += sep.len();
            continue;
        }
        if !form.closer.is_empty() {
            if rest.starts_with(form.closer) {
                i += form.closer.len();
            } else if form.closer.starts_with(rest) && !last {
                return Some(p);
            }
        }
        // Another marker may open the next call.
        let j = skip_ws(text, i);
        if !form.marker.is_empty() && form.body == Body::Object {
            if text[j..].starts_with(form.marker) {
                i = j + form.marker.len();
                continue;
            }
            if !last && form.marker.starts_with(&text[j..]) {
                return Some(p);
            }
        }
        break;
    }
    // What follows the calls is answer text (leading whitespace dropped).
    let j = skip_ws(text, i);
    if j < text.len() || last {
        p.content = text[j..].to_owned();
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_name_their_syntax() {
        assert_eq!(
            ToolSyntax::detect("{{ '<tool_call>' }}"),
            ToolSyntax::Hermes
        );
        assert_eq!(ToolSyntax::detect("[TOOL_CALLS]"), ToolSyntax::Mistral);
        assert_eq!(ToolSyntax::detect("x"), ToolSyntax::Json);
    }

    #[test]
    fn held_marker_prefixes() {
        assert_eq!(held("abc<tool_", "<tool_call>"), 6);
        assert_eq!(held("abc<x", "<tool_call>"), 0);
        assert_eq!(held("é", "<tool_call>"), 0);
    }
}
