//! Constrained decoding through the threaded engine on a random-weight
//! model: whatever the weights, a grammar makes the output valid, the
//! sequence ends when the grammar does, grammars that cannot be enforced are
//! refused at validation, and an unconstrained neighbour in the same batch
//! is unaffected.

use hasten_engine::constraint::Grammar;
use hasten_engine::{Engine, EngineConfig, Error, FinishReason, RequestSpec};
use hasten_kernels::quant::GgmlType;
use hasten_kernels::threads::Threads;
use hasten_model::sampler::SamplingParams;
use hasten_model::testing::Fixture;
use serde_json::{json, Value};
use std::sync::Arc;

fn engine() -> Engine {
    engine_with(true)
}

/// `mask_thread`: masks beside the forward pass, or before it.
fn engine_with(mask_thread: bool) -> Engine {
    let lm = hasten_model::testing::load_fixture(&Fixture::tiny(GgmlType::Q8_0)).unwrap();
    let cfg = EngineConfig {
        max_step_tokens: 64,
        max_running: 8,
        mask_thread,
        ..EngineConfig::new(8192, Threads::ONE)
    };
    Engine::start(Arc::new(lm.model), Arc::new(lm.tokenizer), cfg).unwrap()
}

/// Sampled (not greedy) so that random weights wander: only the grammar
/// keeps the output in shape.
fn spec(grammar: Option<Grammar>, seed: u64, max: usize) -> RequestSpec {
    RequestSpec {
        params: SamplingParams {
            temperature: 1.0,
            seed,
            ..SamplingParams::default()
        },
        grammar,
        ..RequestSpec::greedy(vec![1, 15043, 3186], max)
    }
}

fn run(e: &Engine, s: RequestSpec) -> (String, FinishReason) {
    let (toks, fin) = e.submit(e.validate(s).unwrap()).unwrap().wait().unwrap();
    let mut text: String = toks.iter().map(|t| t.text.as_str()).collect();
    text.push_str(&fin.text);
    (text, fin.reason)
}

#[test]
fn a_json_schema_makes_random_weights_answer_valid_json() {
    let e = engine();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 3},
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false,
    });
    for seed in 0..4 {
        let (text, reason) = run(
            &e,
            spec(Some(Grammar::JsonSchema(schema.clone())), seed, 400),
        );
        assert_eq!(reason, FinishReason::Stop, "{text:?}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("{text:?}: {err}"));
        let o = v.as_object().unwrap();
        assert_eq!(o.len(), 3, "{text}");
        assert!(o["name"].as_str().unwrap().chars().count() <= 12, "{text}");
        let age = o["age"].as_i64().unwrap();
        assert!((0..=150).contains(&age), "{text}");
        let tags = o["tags"].as_array().unwrap();
        assert!(
            tags.len() <= 3 && tags.iter().all(|t| t == "red" || t == "green"),
            "{text}"
        );
    }
}

#[test]
fn a_regex_bounds_the_output_and_a_neighbour_is_unaffected() {
    let e = engine();
    let rx = regex_lite(r"[0-9]{3}-[a-z]{2}");
    let free = spec(None, 9, 12);
    let (alone, _) = run(&e, free.clone());
    // Both in flight at once: the constrained one must not mask the other.
    let a = e
        .submit(e.validate(spec(Some(rx), 3, 50)).unwrap())
        .unwrap();
    let b = e.submit(e.validate(free).unwrap()).unwrap();
    let (ta, fa) = a.wait().unwrap();
    let (tb, _) = b.wait().unwrap();
    let text: String = ta.iter().map(|t| t.text.as_str()).collect::<String>() + &fa.text;
    assert_eq!(fa.reason, FinishReason::Stop);
    let c: Vec<char> = text.chars().collect();
    assert_eq!(c.len(), 6, "{text:?}");
    assert!(
        c[..3].iter().all(char::is_ascii_digit) && c[3] == '-',
        "{text:?}"
    );
    assert!(c[4..].iter().all(char::is_ascii_lowercase), "{text:?}");
    let neighbour: String = tb.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(neighbour, alone);
}

#[test]
fn masks_beside_the_pass_and_before_it_give_the_same_answers() {
    let (beside, before) = (engine_with(true), engine_with(false));
    let g = Grammar::Regex("[a-z]{2,6}( [a-z]{2,6}){3}".into());
    for seed in 0..3 {
        let s = spec(Some(g.clone()), seed, 60);
        assert_eq!(run(&beside, s.clone()), run(&before, s));
    }
}

fn regex_lite(r: &str) -> Grammar {
    Grammar::Regex(r.to_owned())
}

#[test]
fn grammars_that_cannot_be_enforced_are_refused_with_the_reason() {
    let e = engine();
    for g in [
        Grammar::Regex("(unclosed".into()),
        Grammar::JsonSchema(json!({"type": "object", "properties": {"x": {"type": "fancy"}}})),
        Grammar::Lark("start: undefined_rule".into()),
    ] {
        match e.validate(spec(Some(g.clone()), 0, 10)) {
            Err(Error::Grammar(why)) => assert!(!why.is_empty(), "{g:?}"),
            other => panic!("{g:?}: {other:?}"),
        }
    }
}
