//! Connection hygiene on a real loopback socket: idle sockets cannot lock
//! out probes or requests, slow heads and bodies are cut off at their
//! deadlines, idle keep-alive connections close, every slot busy still
//! answers `/health`, and the protocol surfaces we decided on (HTTP/1.1
//! only, a half-close is a disconnect). Every wait is bounded.

use crate::common;

use common::live::Live;
use common::*;
use hasten_server::listen::ConnConfig;
use hasten_server::ServerConfig;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn conns(max: usize, idle_s: f64) -> ConnConfig {
    ConnConfig {
        max,
        per_client: 0,
        idle_timeout: Duration::from_secs_f64(idle_s),
    }
}

async fn start(max: usize, idle_s: f64, cfg: ServerConfig) -> Live {
    Live::start_with(cfg, engine_config(), model_path(), conns(max, idle_s)).await
}

/// Reads until the server closes the connection (or `limit` passes);
/// returns what arrived and when the close came.
async fn read_to_close(s: &mut TcpStream, limit: Duration) -> (String, Option<Instant>) {
    let mut out = Vec::new();
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (String::from_utf8_lossy(&out).into(), Some(Instant::now()))
            }
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&out).into(), None),
        }
    }
}

/// The soft limit on open files, from /proc (the test holds ~2,000 sockets:
/// its own ends and the in-process server's).
fn open_file_limit() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_sockets_lock_out_neither_probes_nor_requests() {
    assert!(
        open_file_limit() >= 2300,
        "this test needs `ulimit -n` of at least 2300"
    );
    let live = start(64, 5.0, ServerConfig::default()).await;
    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.push(TcpStream::connect(live.addr).await.unwrap());
    }
    let held = Instant::now();
    // Requests complete while the sockets are held.
    let req = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8});
    let requests: Vec<_> = (0..20)
        .map(|_| {
            let (http, url) = (live.http.clone(), live.url("/v1/chat/completions"));
            let req = req.clone();
            tokio::spawn(async move { http.post(url).json(&req).send().await.unwrap().status() })
        })
        .collect();
    // /health on a fresh connection every 100 ms for 30 s.
    let mut worst = Duration::ZERO;
    let mut probes = 0;
    while held.elapsed() < Duration::from_secs(30) {
        let t0 = Instant::now();
        let r = live.get("/health").await;
        assert_eq!(r.status(), 200);
        worst = worst.max(t0.elapsed());
        probes += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for r in requests {
        assert_eq!(r.await.unwrap(), 200);
    }
    assert!(probes > 100, "{probes}");
    assert!(
        worst < Duration::from_millis(100),
        "slowest /health took {worst:?}"
    );
    // The server has closed every idle socket by now: reclaimed at the
    // limit or timed out.
    for s in idle.iter_mut().take(50) {
        let (_, closed) = read_to_close(s, Duration::from_millis(200)).await;
        assert!(closed.is_some());
    }
    let page = live.get("/metrics").await.text().await.unwrap();
    let reclaimed = metric(&page, "hasten_connections_reclaimed_total");
    let timed_out = metric(&page, "hasten_connections_timed_out_total");
    assert!(reclaimed >= 900.0 && timed_out >= 1.0, "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_loris_head_is_cut_off_at_the_deadline() {
    let live = start(64, 1.0, ServerConfig::default()).await;
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    let t0 = Instant::now();
    let head =
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
    let mut cut = None;
    for &b in head.iter() {
        if s.write_all(&[b]).await.is_err() {
            cut = Some(t0.elapsed());
            break;
        }
        let (_, closed) = read_to_close(&mut s, Duration::from_millis(250)).await;
        if closed.is_some() {
            cut = Some(t0.elapsed());
            break;
        }
    }
    let cut = cut.expect("the server never cut the slow head off");
    assert!(
        cut >= Duration::from_millis(900) && cut < Duration::from_millis(2500),
        "{cut:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed() {
    let live = start(64, 1.0, ServerConfig::default()).await;
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let t0 = Instant::now();
    let (text, closed) = read_to_close(&mut s, Duration::from_secs(5)).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let closed = closed.expect("the idle connection stayed open");
    let after = closed - t0;
    assert!(
        after >= Duration::from_millis(800) && after < Duration::from_millis(2500),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_oversized_bodies_are_refused() {
    let cfg = ServerConfig {
        body_timeout: Duration::from_secs(1),
        max_body_bytes: Some(1 << 20),
        ..ServerConfig::default()
    };
    let live = start(64, 5.0, cfg).await;
    // A body that stops arriving: 408 at the body deadline.
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
        .await
        .unwrap();
    let t0 = Instant::now();
    let (text, _) = read_to_close(&mut s, Duration::from_secs(5)).await;
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("request_timeout"), "{text}");
    assert!(t0.elapsed() < Duration::from_secs(3));
    // A declared size over the limit: 413 before a byte of body is sent.
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4194304\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
        .await
        .expect("no answer before the body")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_slot_busy_probes_are_still_answered() {
    let live = start(2, 5.0, ServerConfig::default()).await;
    // Two streams hold both slots.
    let req = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 400,
        "ignore_eos": true, "stream": true});
    let mut streams = Vec::new();
    for _ in 0..2 {
        let r = live.post("/v1/chat/completions", &req).await;
        assert_eq!(r.status(), 200);
        streams.push(r);
    }
    let r = live.get("/health").await;
    assert_eq!(r.status(), 200);
    let r = live.get("/v1/models").await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "too_many_connections");
    drop(streams);
    // Once the streams are gone a slot frees.
    let t0 = Instant::now();
    while live.get("/v1/models").await.status() != 200 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no slot freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let page = live.get("/metrics").await.text().await.unwrap();
    assert!(metric(&page, "hasten_connections_overflow_total") >= 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_prior_knowledge_is_not_served() {
    let live = start(64, 5.0, ServerConfig::default()).await;
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let (text, closed) = read_to_close(&mut s, Duration::from_secs(3)).await;
    assert!(closed.is_some());
    // Either an HTTP/1.1 refusal or a plain close; never an HTTP/2 frame.
    assert!(text.is_empty() || text.starts_with("HTTP/1.1 "), "{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_close_after_the_request_is_a_disconnect() {
    let live = start(64, 5.0, ServerConfig::default()).await;
    let body = json!({"prompt": "Hi", "max_tokens": 400, "ignore_eos": true}).to_string();
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    s.shutdown().await.unwrap();
    let (text, closed) = read_to_close(&mut s, Duration::from_secs(10)).await;
    assert!(closed.is_some() && text.is_empty(), "{text}");
    // Cancelled wherever it was (planning or in the engine): nothing runs on.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let m = live.metrics();
    assert_eq!((m.requests_finished, m.running), (0, 0), "{m:?}");
    // Cancelled before the engine saw it (0, 0), while it waited in the
    // engine's queue (0 admitted, 1 cancelled: a CI run caught this), or
    // after admission (1, 1); never admitted without being cancelled.
    assert!(
        m.requests_admitted <= m.requests_cancelled && m.requests_cancelled <= 1,
        "{m:?}"
    );
}
