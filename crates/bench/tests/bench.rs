//! `hasten-bench` against a scripted loopback server with known timing, on
//! a paused tokio clock: the reported TTFT, TPOT, ITL, ICL and throughput
//! match the script; a server slower than the offered load shows rising
//! latency while requests still go out on schedule.

use hasten_bench::load::{self, Arrivals, Level, Load, Stop};
use hasten_bench::summary::{summarize, Slo};
use hasten_bench::{Endpoint, Item, Lengths, Record, Sampling, Source};
use hasten_client::{Client, Config};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What every response does: wait `ttft`, then send one event per entry of
/// `tokens` (that many tokens each) `gap` apart, with running usage.
#[derive(Clone)]
struct Script {
    ttft: Duration,
    gap: Duration,
    tokens: Vec<u64>,
    /// Serve one request at a time (a server with a single slot).
    serial: bool,
}

async fn read_request(s: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return;
            }
        }
    }
}

fn chunk(content: Option<&str>, finish: Option<&str>, completion: u64) -> String {
    let delta = content.map_or("{}".to_string(), |c| format!("{{\"content\":\"{c}\"}}"));
    let fin = finish.map_or("null".to_string(), |f| format!("\"{f}\""));
    format!(
        "data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{fin}}}],\"usage\":{{\"prompt_tokens\":5,\"completion_tokens\":{completion},\"total_tokens\":{}}}}}\n\n",
        5 + completion
    )
}

async fn respond(mut s: TcpStream, sc: Script) {
    read_request(&mut s).await;
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    if s.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    tokio::time::sleep(sc.ttft).await;
    let mut n = 0;
    for (i, &k) in sc.tokens.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(sc.gap).await;
        }
        n += k;
        let _ = s
            .write_all(chunk(Some(&"ab".repeat(k as usize)), None, n).as_bytes())
            .await;
    }
    let _ = s.write_all(chunk(None, Some("length"), n).as_bytes()).await;
    let _ = s.write_all(b"data: [DONE]\n\n").await;
    let _ = s.shutdown().await;
}

async fn serve(sc: Script) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            if sc.serial {
                respond(s, sc.clone()).await;
            } else {
                tokio::spawn(respond(s, sc.clone()));
            }
        }
    });
    addr
}

fn level(addr: SocketAddr, load: Load, warmup: usize, requests: usize) -> Level {
    let items = hasten_bench::workload::build(
        &Source::Random {
            input: Lengths::fixed(8),
        },
        Some(Lengths::fixed(14)),
        4,
        0,
    )
    .unwrap();
    let mut cfg = Config::new(format!("http://{addr}"));
    cfg.retry.max_retries = 0;
    Level {
        client: Client::new(cfg).unwrap(),
        items: Arc::<[Item]>::from(items),
        endpoint: Endpoint::Chat,
        sampling: Arc::new(Sampling {
            continuous_usage: true,
            ..Sampling::default()
        }),
        load,
        warmup,
        stop: Stop {
            requests: Some(requests),
            duration: None,
        },
        seed: 1,
        offset: 0,
    }
}

fn near(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[tokio::test(start_paused = true)]
async fn figures_match_a_server_with_known_timing() {
    // 100 ms to the first token, then an event every 10 ms; two of the ten
    // events carry three tokens: 14 tokens, 190 ms end to end.
    let addr = serve(Script {
        ttft: Duration::from_millis(100),
        gap: Duration::from_millis(10),
        tokens: vec![1, 1, 3, 1, 1, 1, 3, 1, 1, 1],
        serial: false,
    })
    .await;
    let records: Vec<Record> =
        load::run(level(addr, Load::Concurrency { n: 1 }, 1, 5), |_| {}).await;
    assert_eq!(records.len(), 6);
    assert!(records[0].warmup && records[1..].iter().all(|r| !r.warmup));
    for r in &records {
        assert!(r.ok, "{r:?}");
        assert_eq!(r.output_tokens, 14);
        assert!(r.tokens_exact);
        assert!(near(r.ttft_ms.unwrap(), 100.0, 2.0), "{r:?}");
        assert!(near(r.e2e_ms, 190.0, 3.0), "{r:?}");
        assert!(near(r.tpot_ms.unwrap(), 90.0 / 13.0, 0.3), "{r:?}");
        // One ITL sample per token after the first: 7 gaps of 10 ms and
        // 2 events of 3 tokens giving 3 samples of 10/3 ms each.
        assert_eq!(r.itl_ms.len(), 13);
        let tens = r.itl_ms.iter().filter(|&&x| near(x, 10.0, 1.0)).count();
        let thirds = r
            .itl_ms
            .iter()
            .filter(|&&x| near(x, 10.0 / 3.0, 0.5))
            .count();
        assert_eq!((tens, thirds), (7, 6), "{:?}", r.itl_ms);
        // ICL: one sample per event after the first.
        assert_eq!(r.icl_ms.len(), 9);
        assert!(
            r.icl_ms.iter().all(|&x| near(x, 10.0, 1.0)),
            "{:?}",
            r.icl_ms
        );
    }
    let s = summarize(
        Load::Concurrency { n: 1 },
        &records,
        Slo::parse("ttft=150ms,tpot=5ms").unwrap(),
    );
    assert_eq!((s.requests, s.ok, s.failed), (5, 5, 0));
    // Five back-to-back requests of 190 ms: 70 tokens in 0.95 s.
    assert!(near(s.window_s, 0.95, 0.02), "{}", s.window_s);
    assert!(
        near(s.output_tokens_per_s, 70.0 / 0.95, 2.0),
        "{}",
        s.output_tokens_per_s
    );
    assert!(near(s.ttft.as_ref().unwrap().p50, 100.0, 2.0));
    assert_eq!(s.itl.as_ref().unwrap().count, 65);
    // TPOT (6.9 ms) misses the 5 ms objective: no goodput.
    assert_eq!(s.goodput_per_s, Some(0.0));
    let s = summarize(
        Load::Concurrency { n: 1 },
        &records,
        Slo::parse("ttft=150ms,tpot=8ms").unwrap(),
    );
    assert!(near(s.goodput_per_s.unwrap(), 5.0 / 0.95, 0.2));
    // Five samples: p99 is called out as resting on too few.
    assert!(
        s.warnings.iter().any(|w| w.starts_with("TTFT")),
        "{:?}",
        s.warnings
    );
}

#[tokio::test(start_paused = true)]
async fn an_overloaded_server_shows_rising_latency_not_a_falling_send_rate() {
    // One request at a time, 100 ms each: capacity 10/s, offered 20/s.
    let addr = serve(Script {
        ttft: Duration::from_millis(50),
        gap: Duration::from_millis(10),
        tokens: vec![1; 6],
        serial: true,
    })
    .await;
    let load = Load::Rate {
        per_s: 20.0,
        arrivals: Arrivals::Constant,
    };
    let records = load::run(level(addr, load, 0, 30), |_| {}).await;
    assert_eq!(
        records.len(),
        30,
        "every scheduled request is sent and recorded"
    );
    for (i, r) in records.iter().enumerate() {
        assert!(r.ok, "{r:?}");
        // Sent on schedule: at i × 50 ms, whatever the server does.
        assert!(near(r.intended_at_ms, i as f64 * 50.0, 0.5), "{r:?}");
        assert!(r.lag_ms < 2.0, "{r:?}");
    }
    // Request i waits for the i before it: TTFT grows by ~50 ms a request.
    let ttft: Vec<f64> = records.iter().map(|r| r.ttft_ms.unwrap()).collect();
    assert!(ttft.windows(2).all(|w| w[1] > w[0]), "{ttft:?}");
    assert!(
        near(ttft[0], 50.0, 3.0) && near(ttft[29], 50.0 + 29.0 * 50.0, 30.0),
        "{ttft:?}"
    );
    let s = summarize(load, &records, Slo::default());
    // Served at capacity: 30 requests in about 3 s.
    assert!(near(s.requests_per_s, 10.0, 0.5), "{}", s.requests_per_s);
    assert!(s.lag.as_ref().unwrap().p99 < 2.0);
}

#[tokio::test(start_paused = true)]
async fn failures_are_counted_not_dropped() {
    // Nothing listens: every request fails to connect.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let records = load::run(level(addr, Load::Concurrency { n: 2 }, 0, 4), |_| {}).await;
    assert_eq!(records.len(), 4);
    assert!(records
        .iter()
        .all(|r| !r.ok && r.error_kind.as_deref() == Some("connect")));
    let s = summarize(Load::Concurrency { n: 2 }, &records, Slo::default());
    assert_eq!((s.requests, s.ok, s.failed), (4, 0, 4));
    assert!(s.ttft.is_none());
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("4 of 4 requests failed")),
        "{:?}",
        s.warnings
    );
}

#[tokio::test(start_paused = true)]
async fn a_duration_ends_a_level_and_every_sent_request_is_kept() {
    let addr = serve(Script {
        ttft: Duration::from_millis(100),
        gap: Duration::from_millis(10),
        tokens: vec![1; 10],
        serial: false,
    })
    .await;
    let by_time = |load| {
        let mut l = level(addr, load, 1, 0);
        l.stop = Stop {
            requests: None,
            duration: Some(Duration::from_secs(1)),
        };
        l
    };
    // Closed loop, one at a time, 190 ms each: the warm-up, then requests
    // started within the second after it (six: at 0, 190, ..., 950 ms).
    let records = load::run(by_time(Load::Concurrency { n: 1 }), |_| {}).await;
    let measured: Vec<_> = records.iter().filter(|r| !r.warmup).collect();
    assert_eq!(measured.len(), 6, "{records:?}");
    assert!(records.iter().all(|r| r.ok));
    // Open loop at 10/s: the warm-up at 0, then every 100 ms for 1 s from
    // the first measured send (100 ms), all of them answered.
    let load = Load::Rate {
        per_s: 10.0,
        arrivals: Arrivals::Constant,
    };
    let records = load::run(by_time(load), |_| {}).await;
    assert_eq!(
        records.iter().filter(|r| !r.warmup).count(),
        10,
        "{records:?}"
    );
    assert!(records.iter().all(|r| r.ok));
}
