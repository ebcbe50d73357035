//! A bounded soak of a running `hasten serve` on loopback: N concurrent
//! clients stream chat completions for a fixed time, some leaving mid-way
//! at random, some non-streaming, and some sending faults: malformed JSON
//! (must get 400), bodies over the size limit (413) and prompts too long
//! for the context (400 `context_length_exceeded`). A restart of the server
//! (SIGTERM, then a new process on the same port; `scripts/soak.sh` does it)
//! may refuse or reset connections: those count as restart errors, apart
//! from unexpected ones. At the end it checks there were no unexpected
//! errors, the server's KV pool is idle (no leaked blocks), and reports the
//! server's RSS over time (the PID is re-read from PID_FILE each sample).
//!
//! `cargo run --release -p hasten-server --example soak -- URL PID_FILE SECS CLIENTS`
//! (see `scripts/soak.sh`, which starts and restarts the server).

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    completed: AtomicU64,
    left_early: AtomicU64,
    refused: AtomicU64,
    faults: AtomicU64,
    restart_errors: AtomicU64,
    errors: AtomicU64,
    tokens: AtomicU64,
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

async fn metric(http: &reqwest::Client, url: &str, name: &str) -> Option<f64> {
    let page = http
        .get(format!("{url}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// One request; returns Err(description) for anything unexpected.
/// A faulty request: it must be refused with `want` and the right code.
async fn fault(
    http: &reqwest::Client,
    url: &str,
    rng: &mut rand_chacha::ChaCha8Rng,
    t: &Tally,
) -> Result<(), String> {
    let (body, want): (Vec<u8>, &[u16]) = match rng.gen_range(0..3) {
        0 => (
            b"{\"messages\": [{\"role\": \"user\", \"content\": ".to_vec(),
            &[400],
        ),
        1 => (vec![b'x'; 8 << 20], &[413]),
        _ => {
            let text = "word ".repeat(50_000);
            let v = json!({"messages": [{"role": "user", "content": text}]});
            (serde_json::to_vec(&v).unwrap(), &[400])
        }
    };
    t.requests.fetch_add(1, Ordering::Relaxed);
    let r = http
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    let r = match r {
        Ok(r) => r,
        // Refused by Content-Length, the server may close before the
        // client has finished sending.
        Err(_) if want == [413] => {
            t.faults.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        Err(e) => return Err(format!("send: {e}")),
    };
    let s = r.status().as_u16();
    if s == 503 {
        return Err(format!(
            "unavailable: {}",
            r.text().await.unwrap_or_default()
        ));
    }
    if !want.contains(&s) {
        return Err(format!(
            "fault got {s}, wanted {want:?}: {}",
            r.text().await.unwrap_or_default()
        ));
    }
    t.faults.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Whether `e` is what a restarting server does to a client: its
/// connection refused, reset or cut short.
fn restart_error(e: &str) -> bool {
    e.starts_with("send:")
        || e.starts_with("unavailable:")
        || e.starts_with("stream:")
        || e.contains("without [DONE]")
        || e.contains("body:")
}

async fn one(
    http: &reqwest::Client,
    url: &str,
    rng: &mut rand_chacha::ChaCha8Rng,
    t: &Tally,
) -> Result<(), String> {
    if rng.gen_bool(0.05) {
        return fault(http, url, rng, t).await;
    }
    let max_tokens = rng.gen_range(8..96);
    let stream = rng.gen_bool(0.85);
    let leave_after = rng
        .gen_bool(0.25)
        .then(|| rng.gen_range(0..max_tokens / 2 + 1));
    let words = rng.gen_range(1..60);
    let prompt: String = (0..words)
        .map(|i| format!("word{} ", (i * 7 + words) % 50))
        .collect();
    let body = json!({
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "stream": stream, "temperature": 0.8,
        "seed": rng.gen::<u32>(), "ignore_eos": true,
    });
    t.requests.fetch_add(1, Ordering::Relaxed);
    let mut r = http
        .post(format!("{url}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("send: {e}"))?;
    match r.status().as_u16() {
        200 => {}
        429 => {
            t.refused.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        // Draining or still loading: the restart.
        503 => {
            return Err(format!(
                "unavailable: {}",
                r.text().await.unwrap_or_default()
            ))
        }
        s => {
            return Err(format!(
                "status {s}: {}",
                r.text().await.unwrap_or_default()
            ))
        }
    }
    if !stream {
        let v: Value = r.json().await.map_err(|e| format!("body: {e}"))?;
        let n = v["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        if n != max_tokens as u64 {
            return Err(format!("unary answer has {n} tokens, wanted {max_tokens}"));
        }
        t.tokens.fetch_add(n, Ordering::Relaxed);
        t.completed.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    let mut buf = String::new();
    let mut chunks = 0usize;
    loop {
        let c = tokio::time::timeout(Duration::from_secs(60), r.chunk())
            .await
            .map_err(|_| "stream stalled for 60 s".to_string())?
            .map_err(|e| format!("stream: {e}"))?;
        let Some(c) = c else {
            return Err("stream ended without [DONE]".into());
        };
        buf.push_str(std::str::from_utf8(&c).map_err(|e| e.to_string())?);
        while let Some(end) = buf.find("\n\n") {
            let ev: String = buf.drain(..end + 2).collect();
            let Some(data) = ev.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            if data == "[DONE]" {
                t.completed.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            let v: Value =
                serde_json::from_str(data).map_err(|e| format!("bad chunk {data}: {e}"))?;
            if v.get("error").is_some() {
                return Err(format!("error event: {data}"));
            }
            if v["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
            {
                chunks += 1;
                t.tokens.fetch_add(1, Ordering::Relaxed);
            }
            if leave_after.is_some_and(|k| chunks >= k) {
                t.left_early.fetch_add(1, Ordering::Relaxed);
                return Ok(()); // dropping `r` closes the connection
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() != 4 {
        eprintln!("usage: soak URL PID_FILE SECS CLIENTS");
        std::process::exit(2);
    }
    let url = a[0].trim_end_matches('/').to_owned();
    let pid_file = a[1].clone();
    let pid = move || -> u32 {
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let secs: u64 = a[2].parse().expect("secs");
    let clients: u64 = a[3].parse().expect("clients");
    let http = reqwest::Client::new();
    let tally = Arc::new(Tally::default());
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, url, tally) = (http.clone(), url.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(c);
            let mut errors = Vec::new();
            while Instant::now() < end {
                if let Err(e) = one(&http, &url, &mut rng, &tally).await {
                    if restart_error(&e) {
                        tally.restart_errors.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    } else {
                        tally.errors.fetch_add(1, Ordering::Relaxed);
                        errors.push(e);
                    }
                }
            }
            errors
        }));
    }
    let mut rss = vec![(0u64, rss_kib(pid()))];
    while Instant::now() < end {
        tokio::time::sleep(
            Duration::from_secs(10).min(end.saturating_duration_since(Instant::now())),
        )
        .await;
        rss.push((t0.elapsed().as_secs(), rss_kib(pid())));
    }
    let mut errors = Vec::new();
    for t in tasks {
        errors.extend(t.await.expect("client task"));
    }
    let wall = t0.elapsed().as_secs_f64();
    // Cancelled sequences are freed within a step; give the last ones a moment.
    let mut used = f64::NAN;
    for _ in 0..100 {
        used = metric(&http, &url, "hasten_kv_blocks_used")
            .await
            .unwrap_or(f64::NAN);
        let running = metric(&http, &url, "hasten_requests_running")
            .await
            .unwrap_or(f64::NAN);
        if used == 0.0 && running == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cancelled = metric(&http, &url, "hasten_requests_cancelled_total")
        .await
        .unwrap_or(f64::NAN);
    let g = |x: &AtomicU64| x.load(Ordering::Relaxed);
    let t = &tally;
    println!("soak: {clients} clients, {wall:.0} s against {url}");
    println!(
        "requests {} | completed {} | left early {} | refused (429) {} | faults refused as they should {} | restart errors {} | unexpected errors {}",
        g(&t.requests),
        g(&t.completed),
        g(&t.left_early),
        g(&t.refused),
        g(&t.faults),
        g(&t.restart_errors),
        g(&t.errors)
    );
    println!(
        "streamed/generated tokens seen by clients {} ({:.1}/s) | server cancellations {cancelled} | KV blocks in use at the end {used}",
        g(&t.tokens),
        g(&t.tokens) as f64 / wall
    );
    let first = rss[1.min(rss.len() - 1)].1;
    let last = rss.last().map_or(0, |r| r.1);
    let max = rss.iter().map(|r| r.1).max().unwrap_or(0);
    println!(
        "server RSS MiB every 10 s: {}",
        rss.iter()
            .map(|r| format!("{:.0}", r.1 as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "server RSS MiB: start {:.1}, after 10 s {:.1}, max {:.1}, end {:.1}",
        rss[0].1 as f64 / 1024.0,
        first as f64 / 1024.0,
        max as f64 / 1024.0,
        last as f64 / 1024.0
    );
    for e in errors.iter().take(10) {
        println!("error: {e}");
    }
    let leaked = used != 0.0;
    if !errors.is_empty() || leaked {
        std::process::exit(1);
    }
}
