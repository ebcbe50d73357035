//! Oversized prompts cost bounded memory: they are refused by their
//! declared size or by a bound on their token count before any template
//! renders or tokenizer runs. Alone in its test binary, so the process's
//! peak RSS (`VmHWM`) is this test's.

mod common;

use common::live::Live;
use common::*;
use hasten_server::ServerConfig;
use reqwest::header::CONTENT_TYPE;
use std::time::Duration;

/// A `/proc/self/status` field in KiB.
fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// A chat body whose one message is `n` bytes of prose.
fn chat_body(n: usize) -> axum::body::Bytes {
    let words = "the quick brown fox jumps over a lazy dog ";
    let text: String = words.repeat(n / words.len() + 1)[..n].to_owned();
    let body =
        serde_json::json!({"messages": [{"role": "user", "content": text}], "max_tokens": 4});
    serde_json::to_vec(&body).unwrap().into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_prompts_are_refused_before_they_cost_memory() {
    let live = Live::start(ServerConfig::default(), engine_config(), model_path()).await;
    let limit = live.st.body_limit();
    assert_eq!(
        limit,
        1 << 20,
        "the tiny model's context gives the 1 MiB floor"
    );
    // Warm up the paths once so their one-time allocations are not counted.
    let small = chat_body(10);
    let r = live
        .http
        .post(live.url("/v1/chat/completions"))
        .header(CONTENT_TYPE, "application/json")
        .body(small)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let big = chat_body(4 << 20); // over the body limit: 413 by Content-Length
    let near = chat_body(limit - 1024); // under it: 400 by the token bound
    let before = status_kib("VmHWM:");
    for body in [big, near] {
        let sends: Vec<_> = (0..16)
            .map(|_| {
                let (http, url, body) = (
                    live.http.clone(),
                    live.url("/v1/chat/completions"),
                    body.clone(),
                );
                tokio::spawn(async move {
                    let r = http
                        .post(url)
                        .header(CONTENT_TYPE, "application/json")
                        .body(body)
                        .timeout(Duration::from_secs(30))
                        .send()
                        .await;
                    match r {
                        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                        // Refused by its declared size, the server may close
                        // before the client has finished sending.
                        Err(e) => (0, e.to_string()),
                    }
                })
            })
            .collect();
        for s in sends {
            let (status, text) = s.await.unwrap();
            match status {
                413 => assert!(text.contains("request_too_large"), "{text}"),
                400 => assert!(
                    text.contains("context_length_exceeded")
                        && text.contains("at least")
                        && text.contains("\"param\":\"messages\""),
                    "{text}"
                ),
                0 => {}
                s => panic!("{s}: {text}"),
            }
        }
    }
    let grew_mib = (status_kib("VmHWM:") - before) as f64 / 1024.0;
    assert!(grew_mib < 100.0, "peak RSS grew by {grew_mib:.0} MiB");
    eprintln!("peak RSS grew by {grew_mib:.1} MiB over 32 oversized requests");
}
