//! `response_format`: what the output must match, as the grammar the
//! engine enforces ([`hasten_engine::constraint::Grammar`]). OpenAI's
//! `text`, `json_object` and `json_schema` (the schema under
//! `json_schema.schema`; `strict` is always honoured: the output is
//! constrained token by token), and two extensions: `{"type": "regex",
//! "regex": R}` and `{"type": "grammar", "grammar": LARK}`. Whether a
//! schema can be enforced is the engine's check (a 400 naming the
//! feature), made when the request is validated.

use crate::error::{Error, Result};
use hasten_engine::constraint::Grammar;
use hasten_protocol::Extra;
use serde_json::Value;

const FIELD: &str = "response_format";

/// Takes `response_format` out of `extra` (so that no other check sees
/// it) and returns its grammar, if it asks for one.
pub fn response_format(extra: &mut Extra) -> Result<Option<Grammar>> {
    let Some(v) = extra.remove(FIELD).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let bad = |m: &str| Error::bad(format!("{FIELD}: {m}"), FIELD);
    let str_field = |key: &str| -> Result<String> {
        v.get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| bad(&format!("\"{key}\" must be a string")))
    };
    let kind = v
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("an object with a \"type\" is required"))?;
    Ok(match kind {
        "text" => None,
        "json_object" => Some(Grammar::JsonSchema(serde_json::json!({"type": "object"}))),
        "json_schema" => {
            let js = v
                .get("json_schema")
                .filter(|j| j.is_object())
                .ok_or_else(|| bad("type json_schema needs a \"json_schema\" object"))?;
            match js.get("schema") {
                // No schema: any JSON value.
                None | Some(Value::Null) => Some(Grammar::JsonSchema(serde_json::json!({}))),
                Some(s @ (Value::Object(_) | Value::Bool(_))) => {
                    Some(Grammar::JsonSchema(s.clone()))
                }
                Some(_) => return Err(bad("json_schema.schema must be a JSON Schema object")),
            }
        }
        "regex" => Some(Grammar::Regex(str_field("regex")?)),
        "grammar" => Some(Grammar::Lark(str_field("grammar")?)),
        other => {
            return Err(bad(&format!(
                "type {other:?} is not one of text, json_object, json_schema, regex, grammar"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(j: &str) -> Result<Option<Grammar>> {
        let mut extra: Extra = serde_json::from_str(j).unwrap();
        let g = response_format(&mut extra);
        assert!(!extra.contains_key(FIELD));
        g
    }

    #[test]
    fn formats_become_grammars_and_bad_ones_name_the_field() {
        assert_eq!(parse(r#"{}"#).unwrap(), None);
        assert_eq!(
            parse(r#"{"response_format":{"type":"text"}}"#).unwrap(),
            None
        );
        let schema =
            serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let j = serde_json::json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "x", "strict": true, "schema": schema}}});
        assert_eq!(
            parse(&j.to_string()).unwrap(),
            Some(Grammar::JsonSchema(schema))
        );
        assert_eq!(
            parse(r#"{"response_format":{"type":"regex","regex":"[a-z]+"}}"#).unwrap(),
            Some(Grammar::Regex("[a-z]+".into()))
        );
        for bad in [
            r#"{"response_format":{"type":"yaml"}}"#,
            r#"{"response_format":{"type":"json_schema"}}"#,
            r#"{"response_format":{"type":"json_schema","json_schema":{"schema":3}}}"#,
            r#"{"response_format":{"type":"regex"}}"#,
            r#"{"response_format":"json"}"#,
        ] {
            match parse(bad) {
                Err(Error::BadRequest { param, .. }) => assert_eq!(param.as_deref(), Some(FIELD)),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
