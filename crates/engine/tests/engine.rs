//! The engine against a real (synthetic) GGUF model: batch invariance with
//! and without the prefix cache and under preemption, cancellation, block
//! leaks under random interleavings, finish reasons, and the threaded
//! handle's refusals.

use hasten_engine::testing::Core;
use hasten_engine::{Engine, EngineConfig, Error, Event, FinishReason, RequestSpec};
use hasten_kernels::quant::GgmlType;
use hasten_kernels::threads::Threads;
use hasten_model::llama::Model;
use hasten_model::testing::Fixture;
use hasten_model::tokenizer::Tokenizer;
use rand::{Rng, SeedableRng};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// The tiny fixture (dim 256, 2 layers, 32000 vocab, context 512), loaded once.
fn model() -> (Arc<Model>, Arc<Tokenizer>) {
    static M: OnceLock<(Arc<Model>, Arc<Tokenizer>)> = OnceLock::new();
    M.get_or_init(|| {
        let lm = hasten_model::testing::load_fixture(&Fixture::tiny(GgmlType::Q8_0)).unwrap();
        (Arc::new(lm.model), Arc::new(lm.tokenizer))
    })
    .clone()
}

mod common;
use common::{collect, prompt, spec, Driver};

impl Driver {
    fn new(c: EngineConfig) -> Self {
        Driver::with_model(c, model())
    }
}

fn cfg(kv_tokens: usize) -> EngineConfig {
    EngineConfig {
        max_step_tokens: 64,
        max_running: 8,
        ..EngineConfig::new(kv_tokens, Threads::ONE)
    }
}

fn alone(s: &RequestSpec) -> Vec<u32> {
    let mut d = Driver::new(EngineConfig {
        prefix_cache: false,
        ..cfg(4096)
    });
    let mut rx = d.submit(s.clone());
    d.run_to_idle();
    collect(&mut rx).0
}

#[test]
fn a_request_read_whole_gets_its_tokens_with_its_end() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let p = prompt(&mut rng, 30);
    let mut d = Driver::new(cfg(4096));
    let mut streamed = d.submit(spec(p.clone(), 12));
    let mut whole = d.submit(RequestSpec {
        deliver_at_end: true,
        ..spec(p, 12)
    });
    let mut steps = 0;
    while !d.core.is_idle() {
        d.core.step();
        steps += 1;
        // Nothing but prefill progress arrives before the end.
        if !d.core.is_idle() {
            while let Ok(ev) = whole.try_recv() {
                assert!(matches!(ev, Event::Prefill { .. }), "{ev:?}");
            }
        }
    }
    assert!(steps >= 12, "{steps}");
    let (a, fa) = collect(&mut streamed);
    let (b, fb) = collect(&mut whole);
    assert_eq!(a, b);
    assert_eq!(fb.output_tokens, 12);
    assert_eq!((fa.text, fa.output_tokens), (fb.text, fb.output_tokens));
}

/// Requests of mixed lengths arriving at random steps.
fn workload(seed: u64, n: usize) -> Vec<(usize, RequestSpec)> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    // Two requests share a long prefix so the prefix cache has work.
    let shared = prompt(&mut rng, 40);
    (0..n)
        .map(|i| {
            let len = rng.gen_range(1..120);
            let mut p = prompt(&mut rng, len);
            if i % 3 == 0 {
                p.splice(0..0, shared.iter().copied());
            }
            (rng.gen_range(0..6), spec(p, rng.gen_range(1..24)))
        })
        .collect()
}

fn run_concurrently(c: EngineConfig, work: &[(usize, RequestSpec)]) -> (Vec<Vec<u32>>, Core) {
    let mut d = Driver::new(c);
    let mut rxs: Vec<Option<UnboundedReceiver<Event>>> = (0..work.len()).map(|_| None).collect();
    let mut step = 0;
    while rxs.iter().any(Option::is_none) || !d.core.is_idle() {
        for (i, (at, s)) in work.iter().enumerate() {
            if *at == step && rxs[i].is_none() {
                rxs[i] = Some(d.submit(s.clone()));
            }
        }
        d.core.step();
        step += 1;
        assert!(step < 100_000);
    }
    let outs = rxs
        .iter_mut()
        .map(|r| collect(r.as_mut().unwrap()).0)
        .collect();
    (outs, d.core)
}

#[test]
fn concurrent_requests_match_each_request_alone() {
    let work = workload(1, 9);
    let want: Vec<Vec<u32>> = work.iter().map(|(_, s)| alone(s)).collect();
    for prefix_cache in [false, true] {
        // Two threads here, one alone: thread count must not change outputs either.
        let (got, core) = run_concurrently(
            EngineConfig {
                prefix_cache,
                threads: Threads::new(2).unwrap(),
                ..cfg(4096)
            },
            &work,
        );
        assert_eq!(got, want, "prefix_cache={prefix_cache}");
        let m = core.metrics();
        assert!(
            m.batch_size.quantile(1.0).unwrap() >= 4.0,
            "requests really ran together"
        );
        if prefix_cache {
            assert!(m.prefix_cache_hit_tokens > 0);
        }
    }
}

#[test]
fn preemption_under_a_tiny_kv_pool_keeps_outputs_identical() {
    let work = workload(2, 8);
    let want: Vec<Vec<u32>> = work.iter().map(|(_, s)| alone(s)).collect();
    // Room for about two of these requests at a time; with speculation on
    // too: by prompt lookup, and by a draft model (the model itself, its
    // rows in the blocks that preemption takes back). Drafts wait while
    // preempted sequences do, so few are made here; the leak property
    // test below mixes them with cancellations.
    for (max_draft, draft_model) in [(0, None), (6, None), (6, Some(model().0))] {
        let by_model = draft_model.is_some();
        let (got, core) = run_concurrently(
            EngineConfig {
                max_draft,
                draft_model,
                ..cfg(320)
            },
            &work,
        );
        assert_eq!(got, want, "max_draft {max_draft}, draft model {by_model}");
        let m = core.metrics();
        assert!(m.preemptions > 0, "the pool was meant to run out");
        let st = core.pool().stats();
        assert_eq!(st.used, 0);
        assert_eq!(st.free + st.cached_idle, st.total);
    }
}

#[test]
fn a_cached_prefix_is_reported_and_changes_nothing() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let base = prompt(&mut rng, 100);
    let mut longer = base.clone();
    longer.extend(prompt(&mut rng, 7));
    let mut d = Driver::new(cfg(4096));
    let mut a = d.submit(spec(base.clone(), 5));
    d.run_to_idle();
    let (_, fa) = collect(&mut a);
    assert_eq!(fa.cached_prompt_tokens, 0);
    let mut b = d.submit(spec(longer.clone(), 12));
    d.run_to_idle();
    let (ids, fb) = collect(&mut b);
    // 100 tokens = 6 full 16-token blocks.
    assert_eq!(fb.cached_prompt_tokens, 96);
    assert_eq!(fb.prompt_tokens, 107);
    assert_eq!(ids, alone(&spec(longer, 12)));
    // The identical prompt again: everything but the last block's tokens is cached.
    let mut c = d.submit(spec(base.clone(), 5));
    d.run_to_idle();
    assert_eq!(collect(&mut c).1.cached_prompt_tokens, 96);
}

#[test]
fn cancelling_frees_blocks_within_one_step() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
    for steps_before in [1, 4, 8] {
        let mut d = Driver::new(EngineConfig {
            prefix_cache: false,
            ..cfg(4096)
        });
        // 300 prompt tokens at 64 per step: several prefill steps, then decode.
        let rx = d.submit(spec(prompt(&mut rng, 300), 50));
        for _ in 0..steps_before {
            d.core.step();
        }
        assert!(d.core.pool().stats().used > 0);
        drop(rx);
        d.core.step();
        assert_eq!(d.core.pool().stats().used, 0, "after {steps_before} steps");
        assert!(d.core.is_idle());
        assert_eq!(d.core.metrics().requests_cancelled, 1);
    }
}

#[test]
fn random_submit_cancel_finish_interleavings_leak_no_block() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    // Rounds 2 and 3 draft by prompt lookup, 4 and 5 with a draft model.
    for round in 0..6 {
        let mut d = Driver::new(EngineConfig {
            max_step_tokens: 48,
            max_draft: if round < 2 { 0 } else { 5 },
            draft_model: (round >= 4).then(|| model().0),
            ..cfg(if round % 2 == 0 { 256 } else { 1024 })
        });
        common::churn(&mut d, &mut rng, 400);
        let st = d.core.pool().stats();
        assert_eq!(st.used, 0, "round {round}: {st:?}");
        assert_eq!(st.free + st.cached_idle, st.total, "round {round}: {st:?}");
    }
}

#[test]
fn finish_reasons_stop_strings_and_logprobs() {
    let (_, tok) = model();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(6);
    let p = prompt(&mut rng, 10);
    let free = alone(&spec(p.clone(), 12));
    let mut d = Driver::new(cfg(4096));
    // Length.
    let mut rx = d.submit(spec(p.clone(), 12));
    d.run_to_idle();
    let (ids, f) = collect(&mut rx);
    assert_eq!(
        (ids.len(), f.reason, f.output_tokens),
        (12, FinishReason::Length, 12)
    );
    // A stop token: the 4th output token ends it, unshown.
    let mut s = spec(p.clone(), 12);
    s.stop_tokens = vec![free[3]];
    let first = free.iter().position(|&t| t == free[3]).unwrap();
    let mut rx = d.submit(s);
    d.run_to_idle();
    let (ids, f) = collect(&mut rx);
    assert_eq!(
        (ids.as_slice(), f.reason),
        (&free[..first], FinishReason::Stop)
    );
    // A stop string: the text of tokens 2..4 (when it is non-empty).
    let text = tok.decode(&free[2..4]);
    if !text.trim().is_empty() {
        let mut s = spec(p.clone(), 12);
        s.stop = vec![text.clone()];
        let mut rx = d.submit(s);
        d.run_to_idle();
        let mut shown = String::new();
        let fin = loop {
            match rx.try_recv().unwrap() {
                Event::Token(t) => shown.push_str(&t.text),
                Event::Finished(f) => break f,
                Event::Failed(m) => panic!("{m}"),
                Event::Prefill { .. } => {}
            }
        };
        assert_eq!(fin.reason, FinishReason::Stop);
        assert!(
            !shown.contains(&text),
            "{shown:?} shows the stop string {text:?}"
        );
    }
    // A stop token while a possible stop-string prefix is held back: the
    // held text comes out in the final record, nothing is lost.
    let cut = free.iter().position(|&t| t == free[5]).unwrap();
    if cut >= 2 {
        let mut full_text = |stop: Vec<String>| {
            let mut s = spec(p.clone(), 12);
            s.stop_tokens = vec![free[5]];
            s.stop = stop;
            let mut rx = d.submit(s);
            d.run_to_idle();
            let mut shown = String::new();
            loop {
                match rx.try_recv().unwrap() {
                    Event::Token(t) => shown.push_str(&t.text),
                    Event::Finished(f) => return (shown, f.text, f.reason),
                    Event::Failed(m) => panic!("{m}"),
                    Event::Prefill { .. } => {}
                }
            }
        };
        let (plain, plain_tail, _) = full_text(vec![]);
        let last = tok.decode(&free[cut - 1..cut]);
        let (held, tail, reason) = full_text(vec![format!("{last}\u{1}never")]);
        assert_eq!(reason, FinishReason::Stop);
        assert_eq!(
            held.clone() + &tail,
            plain.clone() + &plain_tail,
            "held {held:?} + {tail:?}"
        );
    }
    // Log-probabilities: the greedy token is the best alternative.
    let mut s = spec(p, 3);
    s.logprobs = Some(4);
    let mut rx = d.submit(s);
    d.run_to_idle();
    while let Ok(Event::Token(t)) = rx.try_recv() {
        let lp = t.logprobs.unwrap();
        assert_eq!(lp.top.len(), 4);
        assert_eq!(lp.top[0].0, t.id);
        assert!((lp.top[0].1 - lp.logprob).abs() < 1e-6 && lp.logprob <= 0.0);
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
    }
}

#[test]
fn threaded_engine_streams_and_refuses_honestly() {
    let (m, t) = model();
    let engine = Engine::start(
        m.clone(),
        t.clone(),
        EngineConfig {
            max_waiting: 2,
            max_running: 1,
            ..cfg(4096)
        },
    )
    .unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let p = prompt(&mut rng, 20);
    let want = alone(&spec(p.clone(), 16));
    let (toks, fin) = engine
        .submit(engine.validate(spec(p.clone(), 16)).unwrap())
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(toks.iter().map(|t| t.id).collect::<Vec<_>>(), want);
    assert!(toks.windows(2).all(|w| w[0].at <= w[1].at));
    assert_eq!(fin.output_tokens, 16);
    assert!(fin.timing.prefill > Duration::ZERO);
    // Validation errors come from the handle, before the engine sees anything.
    assert!(matches!(
        engine.validate(spec(p.clone(), 600)),
        Err(Error::ContextLengthExceeded { .. })
    ));
    // A deadline already past is refused up front.
    let mut late = spec(p.clone(), 4);
    late.deadline = Some(Instant::now());
    std::thread::sleep(Duration::from_millis(2));
    assert!(matches!(
        engine.submit(engine.validate(late).unwrap()),
        Err(Error::DeadlineUnreachable { .. })
    ));
    // One running, two waiting: the fourth request is refused with a retry hint.
    let mut held = Vec::new();
    let mut refused = None;
    for _ in 0..6 {
        match engine.submit(engine.validate(spec(p.clone(), 200)).unwrap()) {
            Ok(s) => held.push(s),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    match refused {
        Some(Error::QueueFull { retry_after, .. }) => {
            assert!(retry_after >= Duration::from_millis(100))
        }
        other => panic!(
            "expected QueueFull, got {other:?} after {} accepted",
            held.len()
        ),
    }
    assert!(held.len() <= 3);
    drop(held);
    let m = engine.metrics();
    assert!(m.requests_rejected >= 2);
    engine.shutdown();
}

#[test]
fn serving_engines_are_sized_from_operator_options() {
    let (m, _) = model();
    let per_token = m.config.kv_bytes_per_token();
    let mut o = hasten_engine::EngineOptions::new(Threads::ONE);
    // A small budget is honoured to the token.
    o.kv_bytes = 100 * per_token + per_token / 2;
    let c = EngineConfig::for_model(&m, &o);
    assert_eq!(c.kv_tokens, 100);
    // A large one is capped at twice what the running sequences can use.
    o.kv_bytes = 1 << 40;
    o.max_running = 3;
    let c = EngineConfig::for_model(&m, &o);
    assert_eq!(c.kv_tokens, 2 * 3 * m.config.context_length);
    assert_eq!(c.max_step_tokens, 512);
    // A step holds at least one token of every running sequence.
    o.max_step_tokens = Some(2);
    assert_eq!(EngineConfig::for_model(&m, &o).max_step_tokens, 3);
    // `hasten run`'s engine: one sequence, no prefix cache.
    let s = EngineConfig::single(40, Threads::ONE);
    assert_eq!((s.max_running, s.prefix_cache, s.kv_tokens), (1, false, 40));
}

/// `--kv-type q8_0`: the same bytes hold twice the tokens (and then some:
/// 34 bytes per 32 values against 64), the engine generates, its metrics
/// report the bytes per token, and a head dimension the blocks do not
/// divide is a clear start-up error.
#[test]
fn quantized_kv_caches_hold_more_tokens_and_generate() {
    use hasten_kernels::attention::KvType;
    let (m, t) = model();
    let (f16, q8, q4) = (
        m.config.kv_bytes_per_token_as(KvType::F16),
        m.config.kv_bytes_per_token_as(KvType::Q8_0),
        m.config.kv_bytes_per_token_as(KvType::Q4_0),
    );
    assert_eq!((q8 * 64, q4 * 64), (f16 * 34, f16 * 18));
    let mut o = hasten_engine::EngineOptions::new(Threads::ONE);
    o.kv_bytes = 100 * f16;
    o.kv_type = KvType::Q8_0;
    assert_eq!(EngineConfig::for_model(&m, &o).kv_tokens, 100 * f16 / q8);
    for ty in [KvType::Q8_0, KvType::Q4_0] {
        let engine = Engine::start(
            m.clone(),
            t.clone(),
            EngineConfig {
                kv_type: ty,
                ..cfg(256)
            },
        )
        .unwrap();
        assert_eq!(
            engine.limits().kv_bytes_per_token,
            m.config.kv_bytes_per_token_as(ty)
        );
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (toks, fin) = engine
            .submit(engine.validate(spec(prompt(&mut rng, 20), 12)).unwrap())
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!((toks.len(), fin.output_tokens), (12, 12));
        let metrics = engine.metrics();
        assert_eq!(
            metrics.kv_bytes_per_token,
            m.config.kv_bytes_per_token_as(ty)
        );
        assert_eq!(metrics.kv_capacity_tokens, 256);
        engine.shutdown();
    }
    // Heads of 48 values are not whole 32-value blocks.
    let odd = hasten_model::testing::load_fixture(&Fixture {
        head_dim: 48,
        ..Fixture::tiny(GgmlType::Q8_0)
    })
    .unwrap();
    let e = Engine::start(
        Arc::new(odd.model),
        Arc::new(odd.tokenizer),
        EngineConfig {
            kv_type: KvType::Q8_0,
            ..cfg(256)
        },
    )
    .err()
    .expect("a 48-value head cannot be cached as q8_0");
    assert!(e.to_string().contains("multiple of 32"), "{e}");
}
