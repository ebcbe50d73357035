//! Memory goes back to the system after a burst of large prompts: the
//! binary's allocator (jemalloc with background purging) returns what 16
//! concurrent 250 KB prompts took, where glibc's kept ~140 MB of it
//! (BENCHMARKS.md, "Memory after a burst"). The purge delay is shortened
//! through jemalloc's own setting so the test takes seconds.

mod common;

use common::{hasten, http, Serve};
use std::time::{Duration, Instant};

#[test]
fn memory_returns_after_a_burst_of_large_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("long.gguf");
    let model = model.to_str().unwrap();
    let o = hasten(&["synth", "--context", "65536", "-o", model]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = Serve::start_with_env(
        &["--model", model],
        &[("_RJEM_MALLOC_CONF", "dirty_decay_ms:300,muzzy_decay_ms:0")],
    );
    // Under the body limit, tokenized, then refused: over 65536 tokens.
    let words: String = (0..40_000).map(|i| format!("w{i} ")).collect();
    let body = serde_json::json!({"messages": [{"role": "user", "content": &words[..250_000]}],
        "max_tokens": 1})
    .to_string();
    assert_eq!(
        http(&s.addr, "POST", "/v1/chat/completions", &body)
            .unwrap()
            .0,
        400
    );
    std::thread::sleep(Duration::from_millis(500));
    let before = s.status_kib("VmRSS:");
    std::thread::scope(|sc| {
        for _ in 0..16 {
            sc.spawn(|| {
                let (status, text) = http(&s.addr, "POST", "/v1/chat/completions", &body).unwrap();
                assert!(
                    status == 400 && text.contains("context_length_exceeded"),
                    "{text}"
                );
            });
        }
    });
    let peak = s.status_kib("VmHWM:");
    assert!(
        peak > before + 60 * 1024,
        "the burst took too little to tell: {before} → {peak} KiB"
    );
    let t0 = Instant::now();
    loop {
        let now = s.status_kib("VmRSS:");
        if now < before + 16 * 1024 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "RSS {before} KiB before the burst, {peak} at its peak, still {now} after 10 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
