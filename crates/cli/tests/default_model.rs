//! The out-of-the-box path: `hasten serve` with no model argument serves
//! the built-in demo model, ready within seconds, and answers a chat in
//! English (most words are words of its training corpus, the KJV Bible).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One HTTP/1.1 exchange with `Connection: close`; returns (status, body).
fn http(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let status = resp.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = resp.split_once("\r\n\r\n").map_or("", |p| p.1).to_owned();
    Ok((status, body))
}

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serve_with_no_arguments_answers_in_english() {
    let cache = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_hasten"))
            .args(["serve", "--port", "0"])
            .env("HASTEN_CACHE", cache.path())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.0.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("hasten serve exited").unwrap();
        if let Some(a) = line.split("listening on http://").nth(1) {
            break a.trim().to_owned();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    loop {
        if let Ok((200, _)) = http(&addr, "GET", "/ready", "") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "not ready after 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("ready {} ms after start", t0.elapsed().as_millis());
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
