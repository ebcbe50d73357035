//! Speculative decoding (prompt lookup and draft models) through the
//! threaded engine on a model with a planted pattern (its greedy text loops
//! every 8 tokens, so drafts are accepted) and on plain random weights
//! (drafts mostly rejected): every request's tokens are exactly those of
//! the same request without speculation, greedy or seeded-sampled, with
//! stop strings, grammars, several requests at once and the prefix cache;
//! and sampled outputs follow the model's own distribution (chi-square).

use hasten_engine::constraint::Grammar;
use hasten_engine::{Engine, EngineConfig, FinishReason, RequestSpec, Speculate};
use hasten_kernels::quant::GgmlType;
use hasten_kernels::threads::Threads;
use hasten_model::loader;
use hasten_model::sampler::SamplingParams;
use hasten_model::testing::Fixture;
use std::sync::Arc;

fn load(fx: &Fixture) -> loader::LoadedModel {
    hasten_model::testing::load_fixture(fx).unwrap()
}

fn engine(fx: &Fixture, max_draft: usize) -> Engine {
    engine_with(fx, max_draft, None)
}

/// An engine over `fx` drafting up to `max_draft` tokens, with `draft`
/// as its draft model if given.
fn engine_with(fx: &Fixture, max_draft: usize, draft: Option<&Fixture>) -> Engine {
    let lm = load(fx);
    let draft_model = draft.map(|d| {
        let dm = load(d);
        hasten_engine::draft::check_draft_model(&lm.model, &lm.tokenizer, &dm.model, &dm.tokenizer)
            .unwrap();
        Arc::new(dm.model)
    });
    let cfg = EngineConfig {
        max_step_tokens: 64,
        max_running: 8,
        max_draft,
        draft_model,
        ..EngineConfig::new(2048, Threads::ONE)
    };
    Engine::start(Arc::new(lm.model), Arc::new(lm.tokenizer), cfg).unwrap()
}

/// A draft model for [`pattern`]: one layer, the same planted successors
/// (they come from the seed), pulled hard.
fn small_pattern() -> Fixture {
    Fixture {
        n_layers: 1,
        ..pattern(2.0)
    }
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
        same_tokens_with_drafts(&fx, None, kind);
    }
}

/// Runs [`requests`] twice without speculation and twice drafting (by
/// prompt lookup, or with `draft` as the draft model): the same tokens,
/// and drafts that fare as `kind` says (`loop`: mostly accepted, in fewer
/// steps; `mixed`: some accepted, some not; else: a draft model was tried).
fn same_tokens_with_drafts(fx: &Fixture, draft: Option<&Fixture>, kind: &str) {
    let e0 = engine(fx, 0);
    let plain = run_all(&e0);
    run_all(&e0);
    let e = engine_with(fx, 6, draft);
    assert_eq!(e.limits().draft_model, draft.is_some());
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
        // Prompt lookup may find nothing to draft on random text.
        _ => assert!(
            draft.is_none() || d > 0,
            "{kind}: the draft model was tried"
        ),
    }
    assert_eq!(m.generated_tokens, e0.metrics().generated_tokens);
}

#[test]
fn a_request_can_turn_speculation_off_and_reports_its_drafts() {
    let e = engine(&pattern(2.0), 6);
    let spec = |speculate| RequestSpec {
        ignore_eos: true,
        speculate,
        ..RequestSpec::greedy(vec![1, 15043, 3186], 60)
    };
    let on = e
        .submit(e.validate(spec(Speculate::Auto)).unwrap())
        .unwrap();
    let off = e.submit(e.validate(spec(Speculate::Off)).unwrap()).unwrap();
    let (a, fa) = on.wait().unwrap();
    let (b, fb) = off.wait().unwrap();
    let ids = |t: &[hasten_engine::TokenEvent]| t.iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(ids(&a), ids(&b));
    assert!(fa.drafted_tokens > 0 && fa.accepted_tokens > 0, "{fa:?}");
    assert_eq!((fb.drafted_tokens, fb.accepted_tokens), (0, 0));
    assert_eq!(e.metrics().drafted_tokens as usize, fa.drafted_tokens);
}

#[test]
fn draft_models_change_no_token() {
    // A draft that knows the loop: accepted. The loop drafted for a
    // target that strays: some accepted. A random draft for random
    // weights: rejected, until the sequences give the model up.
    let random_draft = Fixture {
        n_layers: 1,
        seed: 9,
        ..Fixture::tiny(GgmlType::Q8_0)
    };
    let cases = [
        (pattern(2.0), small_pattern(), "loop"),
        (pattern(0.3), small_pattern(), "mixed"),
        (Fixture::tiny(GgmlType::Q8_0), random_draft, "random"),
    ];
    for (fx, draft, kind) in cases {
        same_tokens_with_drafts(&fx, Some(&draft), kind);
    }
}

#[test]
fn a_request_picks_its_drafter() {
    let e = engine_with(&pattern(2.0), 6, Some(&small_pattern()));
    let spec = |speculate| RequestSpec {
        ignore_eos: true,
        speculate,
        ..RequestSpec::greedy(vec![1, 15043, 3186], 40)
    };
    let mut outs = Vec::new();
    for s in [Speculate::Model, Speculate::Ngram, Speculate::Off] {
        let (toks, fin) = e
            .submit(e.validate(spec(s)).unwrap())
            .unwrap()
            .wait()
            .unwrap();
        outs.push(toks.iter().map(|t| t.id).collect::<Vec<_>>());
        // The draft model drafts from the first token; prompt lookup needs
        // the loop to have come round once.
        match s {
            Speculate::Off => assert_eq!(fin.drafted_tokens, 0),
            _ => assert!(fin.accepted_tokens > 0, "{s:?}: {fin:?}"),
        }
    }
    assert!(outs.iter().all(|o| *o == outs[0]));
}

/// The sampler's distribution for temperature [`TEMP`] and `top_k`:
/// softmax over the k largest logits.
fn top_k_probs(logits: &[f32], k: usize) -> Vec<(u32, f64)> {
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    idx.sort_by(|a, b| logits[*b as usize].total_cmp(&logits[*a as usize]));
    idx.truncate(k);
    let max = logits[idx[0] as usize] as f64;
    let w: Vec<f64> = idx
        .iter()
        .map(|&i| ((logits[i as usize] as f64 - max) / TEMP as f64).exp())
        .collect();
    let sum: f64 = w.iter().sum();
    idx.into_iter()
        .zip(w.into_iter().map(|x| x / sum))
        .collect()
}

const TEMP: f32 = 2.0;

/// The next-token logits of `model` after `tokens`.
fn next_logits(model: &hasten_model::llama::Model, tokens: &[u32]) -> Vec<f32> {
    use hasten_model::kv::KvCache;
    use hasten_model::llama::{Scratch, SeqBatch};
    let c = &model.config;
    let mut kv = KvCache::new(c, 4, 16);
    let mut scratch = Scratch::new(c, 64, 1);
    let batch = [SeqBatch {
        tokens,
        start_pos: 0,
        block_table: &[0, 1, 2, 3],
        local_table: &[],
        logits: 1,
    }];
    model
        .forward(&batch, &mut kv, &mut scratch, Threads::ONE)
        .unwrap()
        .to_vec()
}

#[test]
fn sampled_outputs_follow_the_models_distribution() {
    // Sampling (temperature 2, top-k 3) with drafts from a model that
    // agrees with the target only partly: the (second, third) tokens after
    // the likeliest first one must be distributed as the target's own
    // P(t2 | t1) · P(t3 | t1, t2), whatever was drafted and rejected.
    let target = pattern(0.4);
    let prompt = vec![1, 15043, 3186];
    let k = 3;
    let lm = load(&target);
    let first = top_k_probs(&next_logits(&lm.model, &prompt), k)[0].0;
    let mut p1 = prompt.clone();
    p1.push(first);
    let mut expect = Vec::new();
    for (t2, q2) in top_k_probs(&next_logits(&lm.model, &p1), k) {
        let mut p2 = p1.clone();
        p2.push(t2);
        for (t3, q3) in top_k_probs(&next_logits(&lm.model, &p2), k) {
            expect.push(((t2, t3), q2 * q3));
        }
    }
    let e = engine_with(&target, 4, Some(&small_pattern()));
    let n = 1200;
    let mut counts = std::collections::HashMap::new();
    // In waves the waiting queue holds.
    for wave in 0..n / 200 {
        let streams: Vec<_> = (wave * 200..(wave + 1) * 200)
            .map(|seed| {
                let spec = RequestSpec {
                    ignore_eos: true,
                    params: SamplingParams {
                        temperature: TEMP,
                        top_k: k,
                        top_p: 1.0,
                        min_p: 0.0,
                        seed,
                        ..SamplingParams::default()
                    },
                    ..RequestSpec::greedy(prompt.clone(), 4)
                };
                e.submit(e.validate(spec).unwrap()).unwrap()
            })
            .collect();
        for s in streams {
            let (toks, _) = s.wait().unwrap();
            // The first token is sampled before any draft; the second is
            // and third are verified against drafts (two at most: the pass
            // samples one more than it drafts).
            if toks[0].id == first {
                *counts.entry((toks[1].id, toks[2].id)).or_insert(0usize) += 1;
            }
        }
    }
    let m = e.metrics();
    assert!(
        m.accepted_tokens > 0 && m.accepted_tokens < m.drafted_tokens,
        "drafts both accepted and rejected: {} of {}",
        m.accepted_tokens,
        m.drafted_tokens
    );
    let n: usize = counts.values().sum();
    assert!(n > 300, "{n} outputs began with the likeliest token");
    let seen: usize = expect
        .iter()
        .map(|(c, _)| counts.get(c).copied().unwrap_or(0))
        .sum();
    assert_eq!(seen, n, "every output is in the top-k support: {counts:?}");
    // Cells expected fewer than 5 times are pooled (chi-square's rule).
    let (mut chi2, mut cells, mut rest_o, mut rest_e) = (0.0, 0, 0.0, 0.0);
    for (c, p) in &expect {
        let e = p * n as f64;
        let o = counts.get(c).copied().unwrap_or(0) as f64;
        if e < 5.0 {
            (rest_o, rest_e) = (rest_o + o, rest_e + e);
        } else {
            chi2 += (o - e).powi(2) / e;
            cells += 1;
        }
    }
    if rest_e > 0.0 {
        chi2 += (rest_o - rest_e).powi(2) / rest_e.max(1.0);
        cells += 1;
    }
    // 0.1% critical values by degrees of freedom (cells - 1).
    let critical = [
        10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88,
    ];
    assert!(
        cells >= 3 && chi2 < critical[cells - 2],
        "chi-square {chi2:.1} over {cells} cells: {counts:?} vs {expect:?}"
    );
}
