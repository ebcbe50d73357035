//! The server on a real loopback socket: clients that leave mid-prefill and
//! mid-decode (their sequences are cancelled and the KV pool returns to
//! idle), resumed streams (exactly the full text), and graceful shutdown
//! (in-flight requests finish). Overload is `tests/overload.rs`. Every wait
//! is bounded.

use crate::common;

use common::live::Live;
use common::*;
use hasten_engine::EngineConfig;
use hasten_server::ServerConfig;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Reads SSE events (comments included) from a streaming response until
/// `until` says stop or the stream ends; returns (id, data or comment).
async fn read_events(
    resp: &mut reqwest::Response,
    buf: &mut String,
    mut until: impl FnMut(&[(Option<usize>, String)]) -> bool,
) -> Vec<(Option<usize>, String)> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        while let Some(end) = buf.find("\n\n") {
            let ev: String = buf.drain(..end + 2).collect();
            let mut id = None;
            let mut text = String::new();
            for line in ev.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.parse().unwrap());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    text = v.to_owned();
                } else if let Some(v) = line.strip_prefix(':') {
                    text = format!(":{v}");
                }
            }
            out.push((id, text));
            if until(&out) {
                return out;
            }
        }
        assert!(Instant::now() < deadline, "stream stalled");
        match tokio::time::timeout(Duration::from_secs(30), resp.chunk())
            .await
            .unwrap()
            .unwrap()
        {
            Some(c) => buf.push_str(std::str::from_utf8(&c).unwrap()),
            None => return out,
        }
    }
}

fn content(events: &[(Option<usize>, String)]) -> String {
    events
        .iter()
        .filter(|(id, d)| id.is_some() && d.starts_with('{'))
        .filter_map(|(_, d)| {
            let v: Value = serde_json::from_str(d).unwrap();
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

fn no_grace() -> ServerConfig {
    ServerConfig {
        resume_grace: Duration::ZERO,
        ..ServerConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_mid_decode_cancels_the_stream() {
    let live = Live::start(no_grace(), engine_config(), model_path()).await;
    let req = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 400, "ignore_eos": true, "stream": true, "temperature": 0});
    let mut r = live.post("/v1/chat/completions", &req).await;
    assert_eq!(r.status(), 200);
    let mut buf = String::new();
    let got = read_events(&mut r, &mut buf, |e| content(e).len() > 10).await;
    assert!(!got.is_empty());
    drop(r);
    let m = live.idle_kv(1).await;
    assert_eq!((m.requests_cancelled, m.requests_finished), (1, 0), "{m:?}");
    assert!(m.generated_tokens < 400);
    let page = live.get("/metrics").await.text().await.unwrap();
    assert!(page.contains("hasten_requests_cancelled_total 1"), "{page}");
    assert!(page.contains("hasten_streams_abandoned_total 1"), "{page}");

    // Non-streaming: the client gives up while tokens are being generated.
    // It leaves once the engine's metrics show some of its tokens decoded,
    // so the test holds at any decode speed (a fixed client timeout did not
    // once the AVX-512 kernels decoded all 400 tokens within it).
    let before = live.metrics().generated_tokens;
    let mut unary = req.clone();
    unary["stream"] = json!(false);
    let (client, url) = (live.http.clone(), live.url("/v1/chat/completions"));
    let task = tokio::spawn(async move { client.post(url).json(&unary).send().await });
    let t0 = Instant::now();
    while live.metrics().generated_tokens < before + 8 {
        assert!(
            !task.is_finished(),
            "the request ended before the client left"
        );
        assert!(t0.elapsed() < Duration::from_secs(20), "no tokens decoded");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    task.abort();
    let m = live.idle_kv(2).await;
    assert_eq!((m.requests_cancelled, m.requests_finished), (2, 0), "{m:?}");
    assert!(
        m.generated_tokens > before,
        "it was decoding when the client left"
    );
    assert!(m.generated_tokens - before < 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_mid_prefill_cancels_streaming_and_not() {
    let ec = EngineConfig {
        max_step_tokens: 32,
        ..engine_config()
    };
    let ec = EngineConfig {
        kv_tokens: 8192,
        ..ec
    };
    let live = Live::start(no_grace(), ec, long_model_path()).await;
    let ids: Vec<u32> = (0..3500).map(|i| 1000 + (i * 7919) % 20000).collect();
    // Streaming: leave at the first prefill progress comment.
    let req = json!({"prompt": ids, "max_tokens": 50, "stream": true});
    let mut r = live.post("/v1/completions", &req).await;
    let mut buf = String::new();
    let got = read_events(&mut r, &mut buf, |e| {
        e.iter().any(|(_, t)| t.starts_with(": prefill done="))
    })
    .await;
    assert!(
        got.iter().any(|(_, t)| t.starts_with(": prefill done=")),
        "{got:?}"
    );
    drop(r);
    let m = live.idle_kv(1).await;
    assert_eq!(
        (m.requests_cancelled, m.generated_tokens),
        (1, 0),
        "cancelled before any token: {m:?}"
    );

    // Non-streaming: the client gives up while the prompt is prefilled.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = client
        .post(live.url("/v1/completions"))
        .json(&json!({"prompt": ids, "max_tokens": 50}))
        .send()
        .await;
    assert!(e.unwrap_err().is_timeout());
    let m = live.idle_kv(2).await;
    assert_eq!((m.requests_cancelled, m.generated_tokens), (2, 0), "{m:?}");
    let t0 = Instant::now();
    while live
        .st
        .unary_disconnects
        .load(std::sync::atomic::Ordering::Relaxed)
        != 1
    {
        assert!(t0.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_resumes_with_exactly_the_full_text() {
    let live = Live::start(ServerConfig::default(), engine_config(), model_path()).await;
    let req = json!({"messages": [{"role": "user", "content": "Tell me"}], "max_tokens": 60, "ignore_eos": true, "temperature": 0});
    let whole: Value = live
        .post("/v1/chat/completions", &req)
        .await
        .json()
        .await
        .unwrap();
    let want = whole["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();

    let mut sreq = req.clone();
    sreq["stream"] = json!(true);
    let mut r = live
        .http
        .post(live.url("/v1/chat/completions"))
        .header("x-request-id", "resume-me")
        .json(&sreq)
        .send()
        .await
        .unwrap();
    let mut buf = String::new();
    let first = read_events(&mut r, &mut buf, |e| {
        e.iter().filter(|(id, _)| id.is_some()).count() >= 6
    })
    .await;
    drop(r);
    let last = first.iter().filter_map(|(id, _)| *id).max().unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut r = live
        .http
        .get(live.url("/v1/streams/resume-me"))
        .header("last-event-id", last.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut buf = String::new();
    let rest = read_events(&mut r, &mut buf, |e| {
        e.last().is_some_and(|(_, d)| d == "[DONE]")
    })
    .await;
    let first_resumed = rest.iter().find_map(|(id, _)| *id).unwrap();
    assert_eq!(first_resumed, last + 1, "no event skipped or repeated");
    assert_eq!(format!("{}{}", content(&first), content(&rest)), want);
    assert_eq!(live.metrics().requests_cancelled, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_stream_is_cancelled_after_the_grace_period() {
    // The grace must end well before the answer would: 450 tokens took
    // 282 ms on a fast CPU in CI, against a 300 ms grace.
    let cfg = ServerConfig {
        resume_grace: Duration::from_millis(80),
        ..ServerConfig::default()
    };
    let live = Live::start(cfg, engine_config(), model_path()).await;
    let req = json!({"prompt": "Hi", "max_tokens": 450, "ignore_eos": true, "stream": true});
    let mut r = live
        .http
        .post(live.url("/v1/completions"))
        .header("x-request-id", "gone")
        .json(&req)
        .send()
        .await
        .unwrap();
    let mut buf = String::new();
    read_events(&mut r, &mut buf, |e| {
        e.iter().filter(|(id, _)| id.is_some()).count() >= 2
    })
    .await;
    drop(r);
    let m = live.idle_kv(1).await;
    assert_eq!(m.requests_cancelled, 1, "{m:?}");
    let t0 = Instant::now();
    while live.get("/v1/streams/gone").await.status() != 404 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "stream never forgotten"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_in_flight_requests() {
    let mut live = Live::start(ServerConfig::default(), engine_config(), model_path()).await;
    let req = json!({"prompt": "Hi", "max_tokens": 100, "ignore_eos": true});
    let (http, url) = (live.http.clone(), live.url("/v1/completions"));
    let call = tokio::spawn(async move { http.post(url).json(&req).send().await.unwrap() });
    // Wait until the engine has it, then ask the server to stop.
    let t0 = Instant::now();
    while live.metrics().running == 0 {
        assert!(t0.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    live.stop.take().unwrap().send(()).unwrap();
    let r = call.await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 100);
    let res = tokio::time::timeout(Duration::from_secs(10), live.task)
        .await
        .unwrap()
        .unwrap();
    assert!(res.is_ok(), "{res:?}");
    assert!(reqwest::get(format!("http://{}/health", live.addr))
        .await
        .is_err());
}
