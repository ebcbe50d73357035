//! Request traces (`--otlp-endpoint`) received by an in-process OTLP/HTTP
//! collector on loopback: span names, parent/child links, the caller's
//! `traceparent` kept (trace id and parent), the server span's own
//! `traceparent` on the response, and no spans for probes.

use crate::common;

use axum::routing::post;
use common::live::Live;
use common::*;
use hasten_server::ServerConfig;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Spans received, flattened from OTLP JSON export requests.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Value>>>);

impl Collector {
    async fn start(&self) -> String {
        let spans = self.0.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            post(move |body: axum::body::Bytes| {
                let spans = spans.clone();
                async move {
                    let v: Value = serde_json::from_slice(&body).expect("OTLP JSON");
                    for rs in v["resourceSpans"].as_array().into_iter().flatten() {
                        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                            for s in ss["spans"].as_array().into_iter().flatten() {
                                spans.lock().unwrap().push(s.clone());
                            }
                        }
                    }
                    "{}"
                }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await });
        format!("http://{addr}")
    }

    /// Waits (bounded) for `n` spans of trace `trace`.
    async fn trace(&self, trace: &str, n: usize) -> Vec<Value> {
        let t0 = Instant::now();
        loop {
            let got: Vec<Value> = self
                .0
                .lock()
                .unwrap()
                .iter()
                .filter(|s| s["traceId"].as_str() == Some(trace))
                .cloned()
                .collect();
            if got.len() >= n {
                return got;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{} spans of {trace}: {got:?}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn nanos(s: &Value, field: &str) -> u128 {
    match &s[field] {
        Value::String(t) => t.parse().unwrap(),
        v => v.as_u64().unwrap() as u128,
    }
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER: &str = "b7ad6b7169203331";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_traced_under_its_callers_span() {
    let collector = Collector::default();
    let cfg = ServerConfig {
        otlp_endpoint: Some(collector.start().await),
        otlp_flush: Duration::from_millis(50),
        ..ServerConfig::default()
    };
    let live = Live::start(cfg, engine_config(), model_path()).await;
    for stream in [false, true] {
        let trace = if stream {
            TRACE.replace('0', "1")
        } else {
            TRACE.to_owned()
        };
        let resp = live
            .http
            .post(live.url("/v1/chat/completions"))
            .header("traceparent", format!("00-{trace}-{CALLER}-01"))
            .json(
                &json!({"messages": [{"role": "user", "content": "Once upon a time"}],
                "max_tokens": 8, "stream": stream}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let back = resp.headers()["traceparent"].to_str().unwrap().to_owned();
        let _ = resp.text().await.unwrap();
        let spans = collector.trace(&trace, 4).await;
        let server = named(&spans, "POST /v1/chat/completions");
        assert_eq!(server.len(), 1, "{spans:?}");
        let server = server[0];
        // The caller's span is the parent; the response names the server span.
        assert_eq!(server["parentSpanId"], CALLER);
        assert_eq!(server["kind"], 2, "SERVER");
        let id = server["spanId"].as_str().unwrap();
        assert_eq!(back, format!("00-{trace}-{id}-01"));
        let mut last_end = 0;
        let mut prev_end = None;
        for name in ["queue", "prefill", "decode"] {
            let s = named(&spans, name);
            assert_eq!(s.len(), 1, "{name}: {spans:?}");
            let s = s[0];
            assert_eq!(s["parentSpanId"], id, "{name}");
            let (a, b) = (nanos(s, "startTimeUnixNano"), nanos(s, "endTimeUnixNano"));
            assert!(a <= b, "{name}");
            if let Some(p) = prev_end {
                // Consecutive phases (within a microsecond of rounding).
                assert!((a as i128 - p as i128).abs() < 1_000, "{name}");
            }
            prev_end = Some(b);
            last_end = b;
            assert!(
                a >= nanos(server, "startTimeUnixNano") - 5_000_000,
                "{name}"
            );
        }
        // The server span covers the answer (for a stream, past its head).
        assert!(nanos(server, "endTimeUnixNano") + 5_000_000 >= last_end);
    }
    // Probes and metrics are not traced; a request with no traceparent
    // starts its own trace.
    let n = collector.0.lock().unwrap().len();
    assert_eq!(live.get("/health").await.status(), 200);
    let resp = live
        .post(
            "/v1/completions",
            &json!({"prompt": "Once", "max_tokens": 2}),
        )
        .await;
    let back = resp.headers()["traceparent"].to_str().unwrap().to_owned();
    let fresh = back.split('-').nth(1).unwrap().to_owned();
    assert!(fresh != TRACE && fresh.len() == 32);
    let spans = collector.trace(&fresh, 4).await;
    assert!(named(&spans, "POST /v1/completions")[0]
        .get("parentSpanId")
        .is_none_or(|p| p.as_str().is_none_or(str::is_empty)));
    let all = collector.0.lock().unwrap().clone();
    assert!(
        all[n..].iter().all(|s| s["traceId"] == fresh.as_str()),
        "{all:?}"
    );
}
