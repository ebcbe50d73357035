//! Overload on a real loopback socket: 150 concurrent streams against 16
//! running + 64 waiting slots; admission reaches that capacity, every
//! admitted request completes, and each refused client's Retry-After is
//! within 2x of when its retry actually gets in (in one of at most two
//! bursts: see the test). Alone in its test binary:
//! the forecast is only as good as the step times it measured, and tests
//! running beside it on the same CPUs would change them mid-test.

mod common;

use common::live::Live;
use common::*;
use hasten_engine::EngineConfig;
use hasten_server::ServerConfig;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// One client that honours `retry-after-ms` until it is admitted (a
/// stream's response head comes when the engine takes the request): the
/// first wait it was told and how long admission really took (`None` if
/// admitted at once). Reads every admitted stream to its end.
async fn patient(http: reqwest::Client, url: String, req: Value) -> Option<(Duration, Duration)> {
    let t0 = Instant::now();
    let mut first = None;
    for _ in 0..200 {
        let r = http.post(&url).json(&req).send().await.unwrap();
        match r.status().as_u16() {
            200 => {
                let admitted = t0.elapsed();
                let body = r.text().await.unwrap();
                assert!(body.contains("\"completion_tokens\":200"), "{body}");
                return first.map(|told| (told, admitted));
            }
            429 => {
                let ms: u64 = r.headers()["retry-after-ms"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                let secs: u64 = r.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                let v: Value = r.json().await.unwrap();
                assert_eq!(v["error"]["code"], "server_overloaded");
                assert_eq!(secs, ms.div_ceil(1000).max(1));
                let wait = Duration::from_millis(ms);
                first.get_or_insert(wait);
                tokio::time::sleep(wait).await;
            }
            s => panic!("status {s}"),
        }
    }
    panic!("never admitted");
}

/// One burst of 150 patient clients: the peak of running + waiting seen
/// in its first 2 s, and each refused client's (told, took).
async fn burst(live: &Live, req: &Value) -> (usize, Vec<(Duration, Duration)>) {
    let clients: Vec<_> = (0..150)
        .map(|_| {
            let (http, url, req) = (live.http.clone(), live.url("/v1/completions"), req.clone());
            tokio::spawn(patient(http, url, req))
        })
        .collect();
    let t0 = Instant::now();
    let mut peak = 0;
    while t0.elapsed() < Duration::from_secs(2) {
        let m = live.metrics();
        peak = peak.max(m.running + m.waiting);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut refused = Vec::new();
    for c in clients {
        refused.extend(c.await.unwrap());
    }
    (peak, refused)
}

/// How many refused clients were told within 2x of their real wait.
fn within_2x(refused: &[(Duration, Duration)]) -> usize {
    let within = refused
        .iter()
        .filter(|(told, took)| *told * 2 >= *took && *told <= *took * 2)
        .count();
    let worst = refused
        .iter()
        .map(|(told, took)| {
            let r = told.as_secs_f64() / took.as_secs_f64();
            r.max(1.0 / r)
        })
        .fold(0.0, f64::max);
    eprintln!(
        "{within} of {} refused clients were told within 2x of their real wait (worst {worst:.2}x)",
        refused.len()
    );
    within
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_fills_capacity_and_retry_after_tells_when_a_retry_gets_in() {
    let ec = EngineConfig {
        max_running: 16,
        max_waiting: 64,
        ..engine_config()
    };
    let live = Live::start(ServerConfig::default(), ec, model_path()).await;
    // Warm the cost model so the first forecast has numbers.
    let warm = json!({"prompt": "Once upon a time", "max_tokens": 16});
    assert_eq!(live.post("/v1/completions", &warm).await.status(), 200);
    let req = json!({"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": true,
        "stream": true, "stream_options": {"include_usage": true}});
    // A forecast extrapolates the step times measured so far: a shared VM
    // that slows down mid-burst (seen in CI: told 0.4-0.9 s, waited 3-6 s,
    // the burst taking 3x its usual time) makes any forecast wrong. So a
    // burst that misses gets one more try; two misses are a failure.
    let mut bursts: u64 = 0;
    loop {
        let (peak, refused) = burst(&live, &req).await;
        bursts += 1;
        // Admission reaches the configured capacity (16 running + 64 waiting).
        assert_eq!(peak, 80, "{:?}", live.metrics());
        assert!(refused.len() >= 50, "{}", refused.len());
        let within = within_2x(&refused);
        if within * 10 >= refused.len() * 9 {
            break;
        }
        assert!(bursts < 2, "{within} of {}: {refused:?}", refused.len());
    }
    let m = live.idle_kv(1 + 150 * bursts).await;
    assert_eq!(m.requests_finished, 1 + 150 * bursts);
}
