//! `tools`, `tool_choice` and `parallel_tool_calls`: checked (each error
//! names the field), shown to the model through the chat template's
//! `tools` variable, enforced by a grammar in the model family's call
//! syntax when a call is required (`required` or a named function), and
//! read back from the answer by [`hasten_model::output`].
//!
//! Choices: `tool_choice: "none"` leaves the tools out of the prompt (the
//! model is not told of them, so it does not try to call them); `auto`
//! with a JSON `response_format` lets the answer be either calls or the
//! JSON; legacy `functions`/`function_call` are refused.

use crate::error::{Error, Result};
use hasten_engine::constraint::{bounded_whitespace, Grammar};
use hasten_model::output::ToolSyntax;
use hasten_model::tokenizer::Tokenizer;
use hasten_protocol::Extra;
use serde_json::{json, Value};

/// What the request allows the model to do with its tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    None,
    Auto,
    Required,
    /// Must call the tool at this index.
    Named(usize),
}

/// A request's tools.
#[derive(Debug, Clone)]
pub struct Tools {
    /// As given, for the template.
    pub list: Vec<Value>,
    pub names: Vec<String>,
    /// Each function's `parameters` (an object schema when absent).
    pub params: Vec<Value>,
    pub choice: Choice,
    pub parallel: bool,
}

fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.')
}

/// Takes the tool fields out of `extra`; `None` when the request has no
/// tools (a `tool_choice` other than `none` without tools is an error).
pub fn take(extra: &mut Extra) -> Result<Option<Tools>> {
    let list = match extra.remove("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(Error::bad("tools must be an array", "tools")),
    };
    let parallel = match extra.remove("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => b,
        Some(_) => {
            return Err(Error::bad(
                "parallel_tool_calls must be a boolean",
                "parallel_tool_calls",
            ))
        }
    };
    let mut names = Vec::with_capacity(list.len());
    let mut params = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = |f: &str| format!("tools[{i}]{f}");
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(Error::bad(
                format!(
                    "{}: only tools of type \"function\" are supported",
                    at(".type")
                ),
                &at(".type"),
            ));
        }
        let f = t.get("function").filter(|f| f.is_object()).ok_or_else(|| {
            Error::bad(
                format!("{} must be an object", at(".function")),
                &at(".function"),
            )
        })?;
        let name = f.get("name").and_then(Value::as_str).unwrap_or("");
        if !valid_name(name) {
            return Err(Error::bad(
                format!(
                    "{}: {name:?} must be 1 to 64 letters, digits, '_', '-' or '.'",
                    at(".function.name")
                ),
                &at(".function.name"),
            ));
        }
        if names.iter().any(|n| n == name) {
            return Err(Error::bad(
                format!("{}: two tools are named {name:?}", at(".function.name")),
                &at(".function.name"),
            ));
        }
        let p = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => {
                return Err(Error::bad(
                    format!(
                        "{} must be a JSON Schema object",
                        at(".function.parameters")
                    ),
                    &at(".function.parameters"),
                ))
            }
        };
        names.push(name.to_owned());
        params.push(p);
    }
    let choice = choice(extra.remove("tool_choice"), &names)?;
    if list.is_empty() {
        return match choice {
            Choice::None | Choice::Auto => Ok(None),
            _ => Err(Error::bad(
                "tool_choice asks for a call but tools is empty",
                "tool_choice",
            )),
        };
    }
    Ok(Some(Tools {
        list,
        names,
        params,
        choice,
        parallel,
    }))
}

fn choice(v: Option<Value>, names: &[String]) -> Result<Choice> {
    const F: &str = "tool_choice";
    Ok(match v {
        None | Some(Value::Null) => Choice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => Choice::None,
            "auto" => Choice::Auto,
            "required" => Choice::Required,
            other => {
                return Err(Error::bad(
                    format!("{F} {other:?} is not none, auto, required or a named function"),
                    F,
                ))
            }
        },
        Some(o @ Value::Object(_)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|_| o.get("type").and_then(Value::as_str) == Some("function"))
                .ok_or_else(|| {
                    Error::bad(
                        format!(
                            "{F} must be {{\"type\": \"function\", \"function\": {{\"name\": …}}}}"
                        ),
                        F,
                    )
                })?;
            let i = names.iter().position(|n| n == name).ok_or_else(|| {
                Error::bad(
                    format!("{F} names {name:?}, which is not one of the tools"),
                    F,
                )
            })?;
            Choice::Named(i)
        }
        Some(_) => return Err(Error::bad(format!("{F} must be a string or an object"), F)),
    })
}

impl Tools {
    /// The tools the template is shown (none for `tool_choice: none`).
    pub fn for_template(&self) -> Option<Value> {
        (self.choice != Choice::None).then(|| Value::Array(self.list.clone()))
    }

    /// Each function's parameters as a grammar to check, with its field.
    pub fn schemas(&self) -> impl Iterator<Item = (String, Grammar)> + '_ {
        self.params.iter().enumerate().map(|(i, p)| {
            (
                format!("tools[{i}].function.parameters"),
                Grammar::JsonSchema(p.clone()),
            )
        })
    }

    /// The grammar the answer must match: calls in `syntax` when a call is
    /// required, calls or the `answer` JSON when both are allowed; `None`
    /// when the answer is free. `answer` is the `response_format` grammar.
    pub fn grammar(
        &self,
        syntax: ToolSyntax,
        tok: &Tokenizer,
        answer: Option<&Grammar>,
    ) -> Result<Option<Grammar>> {
        let calls = match &self.choice {
            Choice::None => return Ok(answer.cloned()),
            Choice::Auto if answer.is_none() => return Ok(None),
            Choice::Auto | Choice::Required => self.calls_rule(syntax, tok, None),
            Choice::Named(i) => self.calls_rule(syntax, tok, Some(*i)),
        };
        let start = match (&self.choice, answer) {
            (Choice::Auto, Some(Grammar::JsonSchema(s))) => {
                format!("start: calls | %json {}\n", bounded_whitespace(s))
            }
            (Choice::Auto, Some(_)) => {
                return Err(Error::bad(
                    "with tools and tool_choice auto, response_format can be json_object or json_schema, not a regex or grammar",
                    "response_format",
                ))
            }
            (_, Some(_)) => {
                return Err(Error::bad(
                    "response_format cannot apply when tool_choice requires a call",
                    "response_format",
                ))
            }
            _ => "start: calls\n".to_owned(),
        };
        Ok(Some(Grammar::Lark(format!("{start}{calls}"))))
    }

    /// `calls: …` in Lark: the family's markers around one call, or (when
    /// parallel calls are allowed) one or more.
    fn calls_rule(&self, syntax: ToolSyntax, tok: &Tokenizer, only: Option<usize>) -> String {
        let l = syntax.layout();
        let objects: Vec<Value> = self
            .names
            .iter()
            .zip(&self.params)
            .enumerate()
            .filter(|(i, _)| only.is_none_or(|o| o == *i))
            .map(|(_, (name, params))| {
                let mut props = serde_json::Map::new();
                props.insert("name".into(), json!({"const": name}));
                props.insert(l.args_key.into(), params.clone());
                json!({"type": "object", "properties": props,
                       "required": ["name", l.args_key], "additionalProperties": false})
            })
            .collect();
        // Calls are written on one line in every family's template (and so
        // in training): at most one space between JSON tokens.
        let call = json!({"anyOf": objects,
            "x-guidance": {"whitespace_pattern": r"[\x20]?"}});
        let lit = |text: &str| lark_literal(text, syntax, tok);
        let (open, close) = match l.list {
            true => (format!("{} \"[\"", lit(l.open)), "\"]\"".to_owned()),
            false => (lit(l.open), lit(l.close)),
        };
        let more = if self.parallel {
            format!("({} call)*", lit(l.sep))
        } else {
            String::new()
        };
        format!("calls: {open} call {more} {close}\ncall: %json {call}\n")
    }
}

/// `text` as a Lark terminal; the family's marker as its control token
/// when the vocabulary has it as one (e.g. Mistral's `[TOOL_CALLS]`).
fn lark_literal(text: &str, syntax: ToolSyntax, tok: &Tokenizer) -> String {
    let marker = syntax.marker();
    if !marker.is_empty() && text.starts_with(marker) {
        if let Some(id) = tok
            .token_id(marker)
            .filter(|&id| tok.token_bytes(id).is_empty())
        {
            let rest = &text[marker.len()..];
            return if rest.is_empty() {
                format!("<[{id}]>")
            } else {
                format!("<[{id}]> {}", Value::String(rest.into()))
            };
        }
    }
    if text.is_empty() {
        "\"\"".into()
    } else {
        Value::String(text.into()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Option<Tools>> {
        let mut e: Extra = serde_json::from_str(s).unwrap();
        take(&mut e)
    }

    const TWO: &str = r#""tools": [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "get_time"}}]"#;

    #[test]
    fn tool_fields_are_checked_by_name() {
        let t = parse(&format!("{{{TWO}}}")).unwrap().unwrap();
        assert_eq!(t.names, ["get_weather", "get_time"]);
        assert_eq!(t.choice, Choice::Auto);
        let t = parse(&format!(
            r#"{{{TWO}, "tool_choice": {{"type": "function", "function": {{"name": "get_time"}}}}}}"#
        ))
        .unwrap()
        .unwrap();
        assert_eq!(t.choice, Choice::Named(1));
        for (body, want) in [
            (
                format!(
                    r#"{{{TWO}, "tool_choice": {{"type": "function", "function": {{"name": "nope"}}}}}}"#
                ),
                "tool_choice",
            ),
            (
                format!(r#"{{{TWO}, "tool_choice": "sometimes"}}"#),
                "tool_choice",
            ),
            (
                r#"{"tools": [{"type": "retrieval"}]}"#.into(),
                "tools[0].type",
            ),
            (
                r#"{"tools": [{"type": "function", "function": {"name": "a b"}}]}"#.into(),
                "tools[0].function.name",
            ),
            (
                r#"{"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]}"#
                    .into(),
                "tools[0].function.parameters",
            ),
            (
                r#"{"tools": [], "tool_choice": "required"}"#.into(),
                "tool_choice",
            ),
            (r#"{"tools": {}}"#.into(), "tools"),
        ] {
            match parse(&body) {
                Err(Error::BadRequest { param, .. }) => assert_eq!(param.as_deref(), Some(want)),
                other => panic!("{body}: {other:?}"),
            }
        }
        assert!(parse(r#"{"tools": [], "tool_choice": "none"}"#)
            .unwrap()
            .is_none());
    }
}
