//! The out-of-the-box path: `hasten serve` with no model argument serves
//! the built-in demo model, ready within seconds, and answers a chat in
//! English (most words are words of its training corpus, the KJV Bible).

mod common;

use common::{http, Serve};

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
