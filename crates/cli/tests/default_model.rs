//! The out-of-the-box path: `hasten serve` with no model argument serves
//! the built-in demo model, ready within seconds, and answers a chat in
//! English (most words are words of its training corpus, the KJV Bible).

mod common;

use common::{hasten, http, Serve};

#[test]
fn serve_with_no_arguments_answers_in_english() {
    let server = Serve::start(&[]);
    let addr = server.addr.clone();
    let (status, models) = http(&addr, "GET", "/v1/models", "").unwrap();
    assert_eq!(status, 200);
    assert!(models.contains("\"hasten-default\""), "{models}");
    let req = r#"{"messages": [{"role": "user", "content": "Who made the heaven and the earth?"}], "max_tokens": 48, "temperature": 0}"#;
    let (status, body) = http(&addr, "POST", "/v1/chat/completions", req).unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    eprintln!("reply: {text}");
    let vocab: std::collections::HashSet<&str> =
        include_str!("data/kjv-words.txt").lines().collect();
    let words: Vec<String> = text
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let known = words.iter().filter(|w| vocab.contains(w.as_str())).count();
    assert!(words.len() >= 5, "too few words: {text:?}");
    assert!(
        known * 10 >= words.len() * 8,
        "only {known} of {} words are English (KJV) words: {text:?}",
        words.len()
    );
}

/// `--kv-type q8_0`: the start-up line and `/metrics` report the type and
/// its bytes per token (34 bytes per 32 values: 4 layers x 4 heads x 34 x
/// 2 for K and V = 1088 on the default model, against f16's 2048), the
/// same MiB hold more tokens, and it still answers.
#[test]
fn serve_with_a_q8_0_kv_cache() {
    let server = Serve::start(&["--kv-type", "q8_0", "--kv-cache-mib", "1"]);
    server.wait_log(0, "(q8_0, 1088 bytes/token)");
    // The gauges are published after a step.
    let req = r#"{"messages": [{"role": "user", "content": "Who made the heaven and the earth?"}], "max_tokens": 8, "temperature": 0}"#;
    let (status, body) = http(&server.addr, "POST", "/v1/chat/completions", req).unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.metric("hasten_kv_bytes_per_token"), 1088.0);
    // 1 MiB / 1088 bytes = 963 tokens, rounded up to whole 16-token blocks
    // (f16: 512).
    assert_eq!(server.metric("hasten_kv_capacity_tokens"), 976.0);
}

#[test]
fn an_unknown_kv_type_is_refused_with_the_choices() {
    let o = common::hasten(&["serve", "--kv-type", "q5_1"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("f16, q8_0 or q4_0"), "{err}");
}

/// `--ctx-size`: the server runs the model at a smaller context (the
/// start-up line and `/v1/models` say so, and a longer prompt is refused
/// as vLLM refuses it); above the trained context `hasten run` refuses to
/// start and names the trained one.
#[test]
fn ctx_size_shrinks_the_context_and_refuses_more_than_trained() {
    let server = Serve::start(&["--ctx-size", "64"]);
    server.wait_log(0, "context 64)");
    let (status, models) = http(&server.addr, "GET", "/v1/models", "").unwrap();
    assert_eq!(status, 200);
    assert!(models.contains("\"max_model_len\":64"), "{models}");
    let long = "In the beginning God created the heaven and the earth. ".repeat(10);
    let req =
        format!(r#"{{"messages": [{{"role": "user", "content": "{long}"}}], "max_tokens": 4}}"#);
    let (status, body) = http(&server.addr, "POST", "/v1/chat/completions", &req).unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("context_length_exceeded"), "{body}");
    let o = common::hasten(&["run", "--ctx-size", "100000000", "-p", "hi"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("(the model's trained context)"), "{err}");
}

/// A model with sliding-window layers (the tiny Gemma 3: five of six
/// layers see 8 positions) keeps only their windows: the start-up line
/// names that pool, the same MiB hold three times the context or more
/// (the two caps here: 16 MiB at 512 bytes per token, or twice 16
/// sequences at full context), and the answer is `--swa-full`'s.
#[test]
fn serve_keeps_only_the_window_of_sliding_window_layers() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("gemma3.gguf");
    let model = model.to_str().unwrap();
    let o = hasten(&["synth", "--arch", "gemma3", "-o", model]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let req = r#"{"messages": [{"role": "user", "content": "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep."}], "max_tokens": 24, "temperature": 0}"#;
    let mut answers = Vec::new();
    let mut capacity = Vec::new();
    for full in [false, true] {
        let mut args = vec!["--model", model, "--kv-cache-mib", "16"];
        if full {
            args.push("--swa-full");
        }
        let server = Serve::start(&args);
        if !full {
            server.wait_log(0, "for sliding-window layers' windows");
        }
        let (status, body) = http(&server.addr, "POST", "/v1/chat/completions", req).unwrap();
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        answers.push(v["choices"][0]["message"]["content"].clone());
        capacity.push(server.metric("hasten_kv_capacity_tokens"));
        assert_eq!(
            server.metric("hasten_kv_bytes_per_token"),
            if full { 3072.0 } else { 512.0 }
        );
        // 17 sequences' (8 + 8) / 16 + 2 blocks, and 512 / 16 for a step.
        let windowed = server.metric("hasten_kv_windowed_blocks_total");
        assert_eq!(windowed, if full { 0.0 } else { 17.0 * 3.0 + 32.0 });
        assert_eq!(server.metric("hasten_kv_windowed_blocks_used"), 0.0);
    }
    assert_eq!(answers[0], answers[1]);
    assert_eq!(capacity, [16384.0, 5472.0]);
}
