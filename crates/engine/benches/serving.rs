//! Serving benchmarks of the engine on a GGUF file (no HTTP): aggregate
//! decode throughput by concurrency, inter-token latency of running streams
//! while a long prompt arrives (with and without the ITL-steered budget),
//! and TTFT with a cached vs uncached prefix. Times are the engine's token
//! timestamps.
//!
//! `cargo bench -p hasten-engine --bench serving -- FILE.gguf [THREADS]`
//! (e.g. a `hasten synth --shape 135m --type q4_0` file).

use hasten_engine::{Engine, EngineConfig, Event, RequestSpec, TokenEvent};
use hasten_kernels::threads::Threads;
use hasten_model::loader;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn tokens(n: usize, seed: u64) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (3 + x % 31_000) as u32
        })
        .collect()
}

fn spec(prompt: Vec<u32>, max: usize) -> RequestSpec {
    RequestSpec {
        ignore_eos: true,
        ..RequestSpec::greedy(prompt, max)
    }
}

fn percentile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let Some(path) = args.first() else {
        eprintln!("usage: serving FILE.gguf [THREADS]");
        return;
    };
    let threads = Threads::new(args.get(1).and_then(|t| t.parse().ok()).unwrap_or(2)).unwrap();
    let lm = loader::load(std::path::Path::new(path)).expect("load the model");
    let (model, tok) = (Arc::new(lm.model), Arc::new(lm.tokenizer));
    let ctx = model.config.context_length;
    let start = |c: EngineConfig| Engine::start(model.clone(), tok.clone(), c).unwrap();
    let base = EngineConfig {
        max_running: 16,
        ..EngineConfig::new(ctx * 8, threads)
    };
    println!(
        "model {path}, {} threads, KV {} tokens\n",
        threads.get(),
        base.kv_tokens
    );

    // 1. Aggregate decode throughput by concurrency.
    println!("| concurrent sequences | output tokens/s | vs 1 | step p50 ms |");
    println!("|---|---|---|---|");
    let mut single = 0.0;
    for n in [1usize, 4, 8, 16] {
        let e = start(base.clone());
        // Warm-up, so the cost model and pages are warm.
        let _ = e
            .submit(e.validate(spec(tokens(8, 99), 4)).unwrap())
            .unwrap()
            .wait();
        let max = 64;
        let t0 = Instant::now();
        let streams: Vec<_> = (0..n)
            .map(|i| {
                e.submit(e.validate(spec(tokens(16, i as u64), max)).unwrap())
                    .unwrap()
            })
            .collect();
        let total: usize = streams
            .into_iter()
            .map(|s| s.wait().unwrap().1.output_tokens)
            .sum();
        let tps = total as f64 / t0.elapsed().as_secs_f64();
        if n == 1 {
            single = tps;
        }
        let m = e.metrics();
        let p50 = m.step_time.quantile(0.5).unwrap_or(f64::NAN) * 1e3;
        println!("| {n} | {tps:.1} | {:.2}x | ≤{p50:.0} |", tps / single);
    }

    // 2. A long prompt arrives while 4 streams decode.
    let long = 2000.min(ctx.saturating_sub(64));
    println!("\n{long}-token prompt arriving while 4 streams decode (ITL of the 4 streams while it is prefilled):\n");
    println!("| scheduler | ITL target ms | p50 ITL ms | p99 ITL ms | max ITL ms | long prompt TTFT ms |");
    println!("|---|---|---|---|---|---|");
    for (name, c) in [
        ("ITL-steered budget", base.clone()),
        (
            "ITL-steered budget",
            EngineConfig {
                itl_target: Duration::from_millis(100),
                ..base.clone()
            },
        ),
        (
            "fixed 512-token chunks",
            EngineConfig {
                itl_target: Duration::from_secs(3600),
                ..base.clone()
            },
        ),
    ] {
        let target = c.itl_target;
        let e = start(EngineConfig {
            prefix_cache: false,
            ..c
        });
        let _ = e
            .submit(e.validate(spec(tokens(8, 98), 8)).unwrap())
            .unwrap()
            .wait();
        let streams: Vec<_> = (0..4)
            .map(|i| {
                e.submit(e.validate(spec(tokens(16, 10 + i), 150)).unwrap())
                    .unwrap()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let sent = Instant::now();
        let big = e
            .submit(e.validate(spec(tokens(long, 7), 2)).unwrap())
            .unwrap();
        let (bt, _) = big.wait().unwrap();
        let first = bt[0].at;
        let mut gaps = Vec::new();
        for s in streams {
            let (ts, _): (Vec<TokenEvent>, _) = s.wait().unwrap();
            for w in ts.windows(2) {
                if w[1].at >= sent && w[0].at <= first {
                    gaps.push(w[1].at.duration_since(w[0].at).as_secs_f64() * 1e3);
                }
            }
        }
        let ttft = first.duration_since(sent).as_secs_f64() * 1e3;
        let t = if target > Duration::from_secs(60) {
            "-".to_string()
        } else {
            format!("{}", target.as_millis())
        };
        let p50 = percentile(&mut gaps, 0.5);
        let p99 = percentile(&mut gaps, 0.99);
        let max = percentile(&mut gaps, 1.0);
        println!("| {name} | {t} | {p50:.1} | {p99:.1} | {max:.1} | {ttft:.0} |");
    }

    // 3. TTFT with a cached prefix.
    let prefix = 1500.min(ctx.saturating_sub(64));
    let e = start(base.clone());
    let shared = tokens(prefix, 5);
    let ttft = |suffix_seed: u64| {
        let mut p = shared.clone();
        p.extend(tokens(16, suffix_seed));
        let t0 = Instant::now();
        let mut s = e.submit(e.validate(spec(p, 1)).unwrap()).unwrap();
        loop {
            match s.blocking_recv() {
                Some(Event::Token(t)) => break (t.at.duration_since(t0), s),
                Some(Event::Prefill { .. }) => {}
                _ => panic!("no token"),
            }
        }
    };
    let (cold, s) = ttft(1);
    let fin_cold = s.wait().unwrap().1;
    let (warm, s) = ttft(2);
    let fin_warm = s.wait().unwrap().1;
    println!(
        "\nTTFT, {prefix}-token shared prefix + 16 new tokens: uncached {:.0} ms ({} cached), cached {:.1} ms ({} cached): {:.1}x\n",
        cold.as_secs_f64() * 1e3,
        fin_cold.cached_prompt_tokens,
        warm.as_secs_f64() * 1e3,
        fin_warm.cached_prompt_tokens,
        cold.as_secs_f64() / warm.as_secs_f64()
    );
}
