//! Speculative decoding (prompt lookup) through the threaded engine on a
//! model with a planted pattern (its greedy text loops every 8 tokens, so
//! drafts are accepted) and on plain random weights (drafts mostly
//! rejected): every request's tokens are exactly those of the same request
//! without speculation, greedy or seeded-sampled, with stop strings,
//! grammars, several requests at once and the prefix cache.

use hasten_engine::constraint::Grammar;
use hasten_engine::{Engine, EngineConfig, FinishReason, RequestSpec};
use hasten_kernels::quant::GgmlType;
use hasten_kernels::threads::Threads;
use hasten_model::loader;
use hasten_model::sampler::SamplingParams;
use hasten_model::testing::Fixture;
use std::sync::Arc;

fn engine(fx: &Fixture, max_draft: usize) -> Engine {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let vocab = hasten_model::testing::testdata_dir().join("tokenizer/ggml-vocab-llama-spm.gguf");
    fx.write_gguf(&vocab, &path).unwrap();
    let lm = loader::load(&path).unwrap();
    std::mem::forget(dir);
    let cfg = EngineConfig {
        max_step_tokens: 64,
        max_running: 8,
        max_draft,
        ..EngineConfig::new(2048, Threads::ONE)
    };
    Engine::start(Arc::new(lm.model), Arc::new(lm.tokenizer), cfg).unwrap()
}

/// Successors in cycles of 8, pulled with `strength` (2.0: a clean loop;
/// 1.0: it strays now and then, so some drafts are rejected).
fn pattern(strength: f32) -> Fixture {
    Fixture {
        cycle: Some(8),
        bigram: strength,
        ..Fixture::tiny(GgmlType::Q8_0)
    }
}

/// Requests of every kind, all submitted at once.
fn requests() -> Vec<RequestSpec> {
    let greedy = |p: Vec<u32>, n| RequestSpec {
        ignore_eos: true,
        ..RequestSpec::greedy(p, n)
    };
    let sampled = |seed, temperature, top_k| RequestSpec {
        params: SamplingParams {
            temperature,
            top_k,
            seed,
            repetition_penalty: 1.1,
            ..SamplingParams::default()
        },
        ..greedy(vec![1, 450, 4996, 17354], 60)
    };
    vec![
        greedy(vec![1, 15043, 3186], 80),
        greedy((0..40).map(|i| 100 + i % 5).collect(), 50),
        sampled(7, 1.0, 0),
        sampled(8, 0.7, 40),
        RequestSpec {
            stop: vec!["ed".into()],
            ..greedy(vec![1, 910, 338], 70)
        },
        RequestSpec {
            grammar: Some(Grammar::Regex("[a-z ]{10,40}".into())),
            params: SamplingParams {
                temperature: 1.0,
                seed: 3,
                ..SamplingParams::default()
            },
            ..greedy(vec![1, 15043], 60)
        },
    ]
}

fn run_all(e: &Engine) -> Vec<(Vec<u32>, FinishReason)> {
    let streams: Vec<_> = requests()
        .into_iter()
        .map(|s| e.submit(e.validate(s).unwrap()).unwrap())
        .collect();
    streams
        .into_iter()
        .map(|s| {
            let (toks, fin) = s.wait().unwrap();
            (toks.iter().map(|t| t.id).collect(), fin.reason)
        })
        .collect()
}

#[test]
fn drafts_change_no_token_and_are_accepted_where_text_repeats() {
    // A clean loop: drafts accepted, fewer steps. A weak pattern: some
    // accepted, some rejected. Random weights: whatever there is.
    let cases = [
        (pattern(2.0), "loop"),
        (pattern(0.3), "mixed"),
        (Fixture::tiny(GgmlType::Q8_0), "random"),
    ];
    for (fx, kind) in cases {
        let e0 = engine(&fx, 0);
        let plain = run_all(&e0);
        run_all(&e0);
        let e = engine(&fx, 6);
        // Twice: the second run also meets the first's cached prefixes.
        assert_eq!(run_all(&e), plain, "{kind}");
        assert_eq!(run_all(&e), plain, "{kind}");
        let m = e.metrics();
        let (a, d) = (m.accepted_tokens, m.drafted_tokens);
        match kind {
            "loop" => {
                assert!(a * 10 > d * 6, "{kind}: {a} of {d} drafts accepted");
                assert!(m.steps < e0.metrics().steps, "fewer steps with drafts");
            }
            "mixed" => assert!(a > 0 && a < d, "{kind}: {a} of {d} drafts accepted"),
            _ => {}
        }
        assert_eq!(m.generated_tokens, e0.metrics().generated_tokens);
    }
}

#[test]
fn a_request_can_turn_speculation_off_and_reports_its_drafts() {
    let e = engine(&pattern(2.0), 6);
    let spec = |speculate| RequestSpec {
        ignore_eos: true,
        speculate,
        ..RequestSpec::greedy(vec![1, 15043, 3186], 60)
    };
    let on = e.submit(e.validate(spec(true)).unwrap()).unwrap();
    let off = e.submit(e.validate(spec(false)).unwrap()).unwrap();
    let (a, fa) = on.wait().unwrap();
    let (b, fb) = off.wait().unwrap();
    let ids = |t: &[hasten_engine::TokenEvent]| t.iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(ids(&a), ids(&b));
    assert!(fa.drafted_tokens > 0 && fa.accepted_tokens > 0, "{fa:?}");
    assert_eq!((fb.drafted_tokens, fb.accepted_tokens), (0, 0));
    assert_eq!(e.metrics().drafted_tokens as usize, fa.drafted_tokens);
}
