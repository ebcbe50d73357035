//! Sliding-window layers that keep only their window: the tokens are
//! those of a cache keeping every position (prefill in chunks, batching,
//! preemption, prefix-cache hits, speculative decoding), blocks that fall
//! out of the window go back to their pool, a prefix hit needs the
//! window's blocks too, and the memory saved becomes context.

mod common;

use common::{prompt, spec, Driver};
use hasten_engine::{EngineConfig, EngineOptions, Event, RequestSpec};
use hasten_kernels::attention::KvType;
use hasten_kernels::quant::GgmlType;
use hasten_kernels::threads::Threads;
use hasten_model::llama::Model;
use hasten_model::testing::Fixture;
use hasten_model::tokenizer::Tokenizer;
use rand::SeedableRng;
use std::sync::{Arc, OnceLock};
use tokio::sync::mpsc::UnboundedReceiver;

type Loaded = (Arc<Model>, Arc<Tokenizer>);

fn load(fx: &Fixture) -> Loaded {
    let lm = hasten_model::testing::load_fixture(fx).unwrap();
    (Arc::new(lm.model), Arc::new(lm.tokenizer))
}

/// The tiny Gemma 3: five layers with a window of 8 positions, one global.
fn gemma3() -> Loaded {
    static M: OnceLock<Loaded> = OnceLock::new();
    M.get_or_init(|| load(&Fixture::tiny_gemma3(GgmlType::Q8_0)))
        .clone()
}

/// The same with planted successors in cycles of 8 that it mostly
/// follows: prompt lookup drafts, some drafts are rejected.
fn gemma3_pattern() -> Loaded {
    load(&Fixture {
        cycle: Some(8),
        bigram: 1.0,
        ..Fixture::tiny_gemma3(GgmlType::Q8_0)
    })
}

/// 4-token blocks and 16-token steps, so prompts cross many blocks and
/// chunks beyond the window (8 positions, and 8 of slack).
fn cfg(kv_tokens: usize, max_running: usize, swa_full: bool) -> EngineConfig {
    EngineConfig {
        block_size: 4,
        max_step_tokens: 16,
        max_running,
        swa_full,
        ..EngineConfig::new(kv_tokens, Threads::ONE)
    }
}

fn driver(c: EngineConfig, m: Loaded) -> Driver {
    let windowed = c.windowed_blocks(&m.0).is_some();
    let d = Driver::with_model(c, m);
    assert_eq!(d.core.windowed_pool().is_some(), windowed);
    d
}

/// One token and the log-probabilities of it and the likeliest five.
type Scored = (u32, Vec<f32>);

/// Each request's tokens, and its cached prompt tokens; the most windowed
/// blocks held at once; the engine.
type Outcome = (Vec<(Vec<Scored>, usize)>, usize, Driver);

/// Runs `specs` (all submitted at once) on the tiny Gemma 3 and returns
/// each one's tokens and cached prompt tokens, the most windowed blocks
/// held at once, and the engine.
fn run(c: EngineConfig, specs: &[RequestSpec]) -> Outcome {
    run_on(gemma3(), c, specs)
}

fn run_on(m: Loaded, c: EngineConfig, specs: &[RequestSpec]) -> Outcome {
    let mut d = driver(c, m);
    // The log-probabilities of the chosen and the 5 likeliest tokens: the
    // same rows must give the same logits, not only the same argmax.
    let with_logprobs = |s: &RequestSpec| RequestSpec {
        logprobs: Some(5),
        ..s.clone()
    };
    let mut rxs: Vec<_> = specs.iter().map(|s| d.submit(with_logprobs(s))).collect();
    let mut peak = 0;
    let mut steps = 0;
    while !d.core.is_idle() {
        d.core.step();
        if let Some(p) = d.core.windowed_pool() {
            peak = peak.max(p.stats().used);
        }
        steps += 1;
        assert!(steps < 10_000, "no progress");
    }
    let out = rxs.iter_mut().map(logprobs).collect();
    (out, peak, d)
}

/// A finished stream's tokens with their log-probabilities, and its
/// cached prompt tokens.
fn logprobs(rx: &mut UnboundedReceiver<Event>) -> (Vec<Scored>, usize) {
    let mut toks = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        match ev {
            Event::Token(t) => {
                let l = t.logprobs.expect("asked for");
                let top = l.top.iter().map(|x| x.1);
                toks.push((t.id, std::iter::once(l.logprob).chain(top).collect()));
            }
            Event::Finished(f) => return (toks, f.cached_prompt_tokens),
            Event::Failed(m) => panic!("failed: {m}"),
            Event::Prefill { .. } => {}
        }
    }
    panic!("stream did not finish")
}

type Tokens = Vec<Vec<Scored>>;

fn tokens(r: &[(Vec<Scored>, usize)]) -> Tokens {
    r.iter().map(|(t, _)| t.clone()).collect()
}

/// The same tokens with log-probabilities within float rounding (the
/// same rows read from other addresses).
fn assert_same(a: &Tokens, b: &Tokens) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        let ids = |v: &Vec<Scored>| v.iter().map(|t| t.0).collect::<Vec<_>>();
        assert_eq!(ids(x), ids(y));
        for (p, q) in x.iter().zip(y) {
            let close = p.1.iter().zip(&q.1).all(|(a, b)| (a - b).abs() <= 1e-4);
            assert!(close, "log-probabilities {:?} vs {:?}", p.1, q.1);
        }
    }
}

#[test]
fn windowed_layers_give_the_tokens_of_a_full_cache_and_hold_only_their_window() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let specs = [
        spec(prompt(&mut rng, 150), 24),
        spec(prompt(&mut rng, 97), 30),
    ];
    for ty in [KvType::Q8_0, KvType::Q4_0] {
        // The integer tiles start reading below the window.
        let typed = |full| EngineConfig {
            kv_type: ty,
            ..cfg(1024, 2, full)
        };
        let (full, _, _) = run(typed(true), &specs);
        let (win, _, _) = run(typed(false), &specs);
        assert_same(&tokens(&win), &tokens(&full));
    }
    let (full, _, _) = run(cfg(1024, 2, true), &specs);
    let (win, peak, d) = run(cfg(1024, 2, false), &specs);
    assert_same(&tokens(&win), &tokens(&full));
    // Each sequence holds at most (8 + 8 + 16) / 4 + 2 windowed blocks,
    // where the main pool holds all of its 174 positions (44 blocks).
    assert!(peak > 0 && peak <= 2 * 10, "peak {peak}");
    let pool = d.core.windowed_pool().unwrap();
    assert_eq!(pool.stats().used, 0, "windowed blocks leaked");
    assert_eq!(d.core.pool().stats().used, 0);
    assert!(pool.stats().total < d.core.pool().stats().total);
}

#[test]
fn preemption_and_recomputation_keep_the_tokens() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
    let specs: Vec<_> = (0..3)
        .map(|i| spec(prompt(&mut rng, 130 + 7 * i), 20))
        .collect();
    let (full, _, _) = run(cfg(4096, 3, true), &specs);
    // 100 main blocks for 3 x ~40: someone is preempted.
    let (win, _, d) = run(cfg(400, 3, false), &specs);
    assert!(d.core.metrics().preemptions > 0);
    assert_same(&tokens(&win), &tokens(&full));
    assert_eq!(d.core.windowed_pool().unwrap().stats().used, 0);
}

#[test]
fn a_prefix_hit_needs_the_blocks_of_its_last_window() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(13);
    let shared = prompt(&mut rng, 150);
    let ask = |rng: &mut rand_chacha::ChaCha8Rng| {
        let mut p = shared.clone();
        p.extend(prompt(rng, 21));
        RequestSpec {
            logprobs: Some(5),
            ..spec(p, 12)
        }
    };
    let (a, b) = (ask(&mut rng), ask(&mut rng));
    let (alone, _, _) = run(
        EngineConfig {
            prefix_cache: false,
            ..cfg(2048, 2, true)
        },
        std::slice::from_ref(&b),
    );
    let mut d = driver(cfg(2048, 2, false), gemma3());
    let mut rx = d.submit(a);
    d.run_to_idle();
    logprobs(&mut rx);
    let mut rx = d.submit(b.clone());
    d.run_to_idle();
    let (toks, cached) = logprobs(&mut rx);
    assert_same(&vec![toks], &tokens(&alone));
    assert_eq!(cached, 148, "every full block of the shared prefix");
    // Without the window's blocks the main pool's are no use: no hit,
    // the same tokens.
    d.core.windowed_pool().unwrap().clear_cache();
    let mut rx = d.submit(b);
    d.run_to_idle();
    let (toks, cached) = logprobs(&mut rx);
    assert_same(&vec![toks], &tokens(&alone));
    assert_eq!(cached, 0);
    assert_eq!(d.core.windowed_pool().unwrap().stats().used, 0);
}

#[test]
fn drafted_tokens_verified_over_a_windowed_cache_are_the_plain_ones() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(14);
    let specs = [
        spec(prompt(&mut rng, 120), 60),
        spec(prompt(&mut rng, 90), 50),
    ];
    let m = gemma3_pattern();
    let (plain, _, _) = run_on(m.clone(), cfg(2048, 2, true), &specs);
    let (drafted, _, d) = run_on(
        m,
        EngineConfig {
            max_draft: 4,
            ..cfg(2048, 2, false)
        },
        &specs,
    );
    assert!(d.core.metrics().drafted_tokens > 0, "nothing was drafted");
    assert_same(&tokens(&drafted), &tokens(&plain));
    assert_eq!(d.core.windowed_pool().unwrap().stats().used, 0);
}

#[test]
fn the_memory_a_window_saves_becomes_context() {
    let (m, _) = gemma3();
    let mut o = EngineOptions::new(Threads::ONE);
    o.kv_bytes = 2 << 20;
    o.max_running = 2;
    o.max_step_tokens = Some(64);
    let win = EngineConfig::for_model(&m, &o);
    let full = EngineConfig::for_model(
        &m,
        &EngineOptions {
            swa_full: true,
            ..o.clone()
        },
    );
    assert!(win.windowed_blocks(&m).is_some() && full.windowed_blocks(&m).is_none());
    let (per_token, pool) = win.kv_bytes(&m);
    assert!(
        per_token * 6 == full.kv_bytes(&m).0,
        "one layer of six is global"
    );
    assert!(win.kv_tokens * per_token + pool <= o.kv_bytes);
    assert!(
        win.kv_tokens > 2 * full.kv_tokens,
        "{} vs {}",
        win.kv_tokens,
        full.kv_tokens
    );
    // A disk tier keeps the window too (each pool's blocks have files of
    // their own, `tests/prefix_disk.rs`).
    let disk = EngineConfig {
        prefix_disk: Some(hasten_engine::disk::DiskCacheConfig {
            dir: std::env::temp_dir(),
            max_bytes: 1 << 20,
        }),
        ..win.clone()
    };
    assert_eq!(disk.windowed_blocks(&m), win.windowed_blocks(&m));
}

/// Random submissions, cancellations and steps (with prompt-lookup drafts
/// in odd rounds) return every block of both pools.
#[test]
fn random_interleavings_leak_no_windowed_block() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(15);
    for round in 0..4 {
        let mut d = driver(
            EngineConfig {
                max_step_tokens: 48,
                max_draft: if round % 2 == 0 { 0 } else { 5 },
                ..cfg(if round < 2 { 400 } else { 1600 }, 4, false)
            },
            gemma3(),
        );
        common::churn(&mut d, &mut rng, 300);
        for (name, st) in [
            ("main", d.core.pool().stats()),
            ("windowed", d.core.windowed_pool().unwrap().stats()),
        ] {
            assert_eq!(st.used, 0, "round {round}, {name}: {st:?}");
            assert_eq!(
                st.free + st.cached_idle,
                st.total,
                "round {round}, {name}: {st:?}"
            );
        }
    }
}
