//! Answers in each family's real tool-call format (strings from the
//! models' documentation and chat templates), whole and split into
//! pieces of every size.

use super::*;

/// An answer put together from its pieces.
#[derive(Debug, Default, PartialEq, Eq)]
struct Answer {
    reasoning: String,
    content: String,
    calls: Vec<(String, String)>,
}

fn assemble(pieces: impl IntoIterator<Item = Piece>) -> Answer {
    let mut a = Answer::default();
    for p in pieces {
        match p {
            Piece::Reasoning(t) => a.reasoning.push_str(&t),
            Piece::Content(t) => a.content.push_str(&t),
            Piece::Call { index, name } => {
                assert_eq!(index, a.calls.len(), "calls are numbered in order");
                a.calls.push((name, String::new()));
            }
            Piece::Args { index, text } => a.calls[index].1.push_str(&text),
        }
    }
    a
}

/// Feeds `text` in chunks of `size` bytes (on char boundaries).
fn run(spec: &OutputSpec, text: &str, size: usize) -> Answer {
    let mut s = OutputStream::new(spec.clone());
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut n = size.min(rest.len());
        while !rest.is_char_boundary(n) {
            n += 1;
        }
        pieces.extend(s.push(&rest[..n]));
        rest = &rest[n..];
    }
    pieces.extend(s.finish());
    assemble(pieces)
}

fn tools(syntax: ToolSyntax) -> OutputSpec {
    OutputSpec {
        thinking: None,
        tools: Some((
            syntax,
            vec![
                "get_current_temperature".into(),
                "get_weather".into(),
                "get_temperature_date".into(),
            ],
        )),
        single_call: false,
    }
}

/// The answer is the same whatever the chunking.
fn check(spec: &OutputSpec, text: &str, want: &Answer) {
    for size in [usize::MAX, 1, 2, 3, 5, 7, 16] {
        let got = run(spec, text, size);
        assert_eq!(&got, want, "chunks of {size}: {text:?}");
    }
}

fn calls(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, a)| (n.to_string(), a.to_string()))
        .collect()
}

#[test]
fn qwen_hermes_calls_with_text_around() {
    // Qwen2.5's function-calling guide, two parallel calls.
    let text = "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"San Francisco, CA, USA\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_temperature_date\", \"arguments\": {\"location\": \"San Francisco, CA, USA\", \"date\": \"2024-10-01\"}}\n</tool_call>";
    let want = Answer {
        calls: calls(&[
            (
                "get_current_temperature",
                r#"{"location": "San Francisco, CA, USA"}"#,
            ),
            (
                "get_temperature_date",
                r#"{"location": "San Francisco, CA, USA", "date": "2024-10-01"}"#,
            ),
        ]),
        ..Answer::default()
    };
    check(&tools(ToolSyntax::Hermes), text, &want);
    let around = format!("Let me check the weather.\n{text}\nDone <tool");
    let want = Answer {
        content: "Let me check the weather.\nDone <tool".into(),
        ..want
    };
    check(&tools(ToolSyntax::Hermes), &around, &want);
    // One call only when parallel calls are off.
    let one = OutputSpec {
        single_call: true,
        ..tools(ToolSyntax::Hermes)
    };
    assert_eq!(run(&one, text, 3).calls.len(), 1);
}

#[test]
fn qwen3_reasoning_then_a_call() {
    let text = "<think>\nThe user wants the weather. I'll call get_weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let spec = OutputSpec {
        thinking: Some(false),
        ..tools(ToolSyntax::Hermes)
    };
    let want = Answer {
        reasoning: "\nThe user wants the weather. I'll call get_weather.\n".into(),
        content: String::new(),
        calls: calls(&[("get_weather", r#"{"city": "Paris"}"#)]),
    };
    check(&spec, text, &want);
}

#[test]
fn deepseek_r1_answers_start_inside_the_block() {
    let spec = OutputSpec {
        thinking: Some(true),
        ..OutputSpec::default()
    };
    let want = Answer {
        reasoning: "2 and 2 make 4.\n".into(),
        content: "The answer is 4.".into(),
        calls: Vec::new(),
    };
    check(
        &spec,
        "2 and 2 make 4.\n</think>\n\nThe answer is 4.",
        &want,
    );
    // Cut off while thinking: all of it is reasoning.
    let cut = run(&spec, "Let me see </thi", 2);
    assert_eq!(cut.reasoning, "Let me see </thi");
    assert!(opens_thinking("<|Assistant|><think>\n"));
    assert!(!opens_thinking("<think>\n\n</think>\n\n"));
    // No block at all: all of it is the answer.
    let spec = OutputSpec {
        thinking: Some(false),
        ..OutputSpec::default()
    };
    assert_eq!(run(&spec, "  <thin k", 1).content, "  <thin k");
}

#[test]
fn llama3_json_and_python_tag_calls() {
    // Llama 3.1's model card: JSON with "parameters".
    let text = r#"{"name": "get_current_temperature", "parameters": {"location": "San Francisco, CA", "unit": "Fahrenheit"}}"#;
    let want = Answer {
        calls: calls(&[(
            "get_current_temperature",
            r#"{"location": "San Francisco, CA", "unit": "Fahrenheit"}"#,
        )]),
        ..Answer::default()
    };
    check(&tools(ToolSyntax::Llama3), text, &want);
    check(
        &tools(ToolSyntax::Llama3),
        &format!("<|python_tag|>{text}"),
        &want,
    );
    // JSON that names no tool is an ordinary answer.
    let plain = r#"{"name": "Alice", "age": 3}"#;
    let got = run(&tools(ToolSyntax::Llama3), plain, 4);
    assert_eq!(got.content, plain);
    assert!(got.calls.is_empty());
    // Two calls separated by ';'.
    let two = format!("{text}; {text}");
    assert_eq!(run(&tools(ToolSyntax::Llama3), &two, 5).calls.len(), 2);
}

#[test]
fn mistral_granite_phi4_lists() {
    let mistral = r#"[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris, France", "format": "celsius"}, "id": "abc123def"}, {"name": "get_current_temperature", "arguments": {}}]"#;
    let want = Answer {
        calls: calls(&[
            (
                "get_weather",
                r#"{"location": "Paris, France", "format": "celsius"}"#,
            ),
            ("get_current_temperature", "{}"),
        ]),
        ..Answer::default()
    };
    check(&tools(ToolSyntax::Mistral), mistral, &want);
    let granite = r#"<|tool_call|>[{"name": "get_weather", "arguments": {"location": "Paris, France", "format": "celsius"}}, {"name": "get_current_temperature", "arguments": {}}]"#;
    check(&tools(ToolSyntax::Granite), granite, &want);
    let phi = r#"functools[{"name": "get_weather", "arguments": {"location": "Paris, France", "format": "celsius"}}, {"name": "get_current_temperature", "arguments": {}}]"#;
    check(&tools(ToolSyntax::Phi4), phi, &want);
}

#[test]
fn generic_json_calls_and_answers() {
    let spec = tools(ToolSyntax::Json);
    let one = r#"  {"name": "get_weather", "arguments": {"city": "Oslo"}}"#;
    check(
        &spec,
        one,
        &Answer {
            calls: calls(&[("get_weather", r#"{"city": "Oslo"}"#)]),
            ..Answer::default()
        },
    );
    // Arguments given as a JSON string are passed on decoded.
    let s = r#"{"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}"#;
    assert_eq!(run(&spec, s, 3).calls[0].1, r#"{"city": "Oslo"}"#);
    for text in [
        "Sure: {\"name\": 1}",
        "{\"a\": [1, 2]}",
        "{broken",
        "  ",
        "",
    ] {
        let got = run(&spec, text, 2);
        assert_eq!(got.content, text);
        assert!(got.calls.is_empty());
    }
}

#[test]
fn a_call_cut_off_keeps_what_was_read() {
    let text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
    let got = run(&tools(ToolSyntax::Hermes), text, 4);
    assert_eq!(got.calls, calls(&[("get_weather", "{\"city\": \"Par")]));
    // A marker with no call after it stays text.
    let got = run(&tools(ToolSyntax::Hermes), "Hi <tool_call>\n{\"na", 4);
    assert_eq!(got.content, "Hi <tool_call>\n{\"na");
}

#[test]
fn every_prefix_only_adds() {
    let text = "ok <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"n\": [1, {\"a\": \"}\"}]}}\n</tool_call> bye";
    let spec = tools(ToolSyntax::Hermes);
    let mut s = OutputStream::new(spec.clone());
    let mut seen = Vec::new();
    for c in text.chars() {
        seen.extend(s.push(&c.to_string()));
        let a = assemble(seen.clone());
        let whole = run(&spec, text, usize::MAX);
        assert!(whole.content.starts_with(&a.content));
        for (i, (n, args)) in a.calls.iter().enumerate() {
            assert_eq!(n, &whole.calls[i].0);
            assert!(whole.calls[i].1.starts_with(args.as_str()));
        }
    }
}
