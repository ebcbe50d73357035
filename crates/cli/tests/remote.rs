//! The client side against the real `hasten serve` (built-in model): a
//! stream cut mid-answer comes back whole through a resume, or through a
//! continuation when the server has already forgotten it; and `hasten
//! chat` driven in a pseudo-terminal (two turns, `/stats`, Ctrl-C).

mod common;

use common::{metric, Faults, Proxy, Serve};
use expectrl::{ControlCode, Session};
use hasten_client::{Client, Config, OnBreak, Request};
use hasten_protocol::chat::{ChatCompletionRequest, ChatMessage};
use std::process::Command;
use std::time::Duration;

fn greedy(max_tokens: i64) -> Request {
    let mut r = ChatCompletionRequest {
        messages: vec![ChatMessage::new(
            "user",
            "Who made the heaven and the earth?",
        )],
        ..Default::default()
    };
    r.sampling.max_tokens = Some(max_tokens);
    r.sampling.temperature = Some(0.0);
    r.into()
}

fn client(url: String, on_break: OnBreak) -> Client {
    let mut c = Config::new(url);
    c.on_break = on_break;
    c.timeouts.first_token = Duration::from_secs(30);
    c.timeouts.idle = Duration::from_secs(10);
    Client::new(c).unwrap()
}

#[tokio::test]
async fn a_stream_cut_mid_answer_is_resumed_and_arrives_exactly_once() {
    let server = Serve::start(&[]);
    let reference = client(server.url(), OnBreak::Fail)
        .stream(greedy(60))
        .collect()
        .await
        .unwrap();
    assert!(reference.text().len() > 40, "{:?}", reference.text());
    let proxy = Proxy::start(
        &server.addr,
        Faults {
            cut_first_after_events: Some(10),
            ..Faults::default()
        },
    );
    let out = client(proxy.url(), OnBreak::Resume)
        .stream(greedy(60))
        .collect()
        .await
        .unwrap();
    assert_eq!(out.text(), reference.text());
    assert_eq!((out.stats.resumes, out.stats.continuations), (1, 0));
    let reqs = proxy.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    let rid = out.stats.request_id.clone().unwrap();
    assert!(
        reqs[1].starts_with(&format!("GET /v1/streams/{rid} ")),
        "{}",
        reqs[1]
    );
    // The id of the last event that got through: a number, not empty.
    let last = reqs[1]
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("last-event-id:")
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default();
    assert!(last.parse::<u64>().is_ok_and(|n| n >= 9), "{}", reqs[1]);
}

#[tokio::test]
async fn a_forgotten_stream_is_continued_without_repeating_text() {
    // With no grace period the server forgets a stream as soon as it sees
    // its client gone: it cancels an unfinished one, and drops a finished
    // one (on a fast CPU all 60 tokens are out before the cut). Either way
    // the resume fails and the client continues. The proxy holds the
    // resume until the server has forgotten the stream: a client can notice
    // the cut before the server does, and a resume that arrives first still
    // finds the stream (it did under a loaded CI machine).
    let server = Serve::start(&["--resume-grace", "0"]);
    let reference = client(server.url(), OnBreak::Fail)
        .stream(greedy(60))
        .collect()
        .await
        .unwrap();
    let proxy = Proxy::start_gated(
        &server.addr,
        Faults {
            cut_first_after_events: Some(10),
            ..Faults::default()
        },
    );
    let opener = open_when_forgotten(&proxy, &server.addr);
    let out = client(proxy.url(), OnBreak::Continue)
        .stream(greedy(60))
        .collect()
        .await
        .unwrap();
    opener.join().unwrap();
    assert_eq!(
        (out.stats.resumes, out.stats.continuations),
        (1, 1),
        "{:?}",
        out.stats
    );
    let reqs = proxy.requests();
    assert_eq!(reqs.len(), 3, "POST, failed resume, continuation: {reqs:?}");
    assert!(reqs[1].starts_with("GET /v1/streams/"));
    let body: serde_json::Value =
        serde_json::from_str(reqs[2].split_once("\r\n\r\n").unwrap().1).unwrap();
    let prefix = body["messages"][1]["content"].as_str().unwrap().to_string();
    assert_eq!(body["messages"][1]["role"], "assistant");
    assert!(!prefix.is_empty() && out.text().starts_with(&prefix));
    assert_eq!(
        body["max_tokens"],
        60 - out.stats.extra_prompt_tokens as i64
    );
    // Greedy decoding continues the same text from the same prefix.
    assert_eq!(out.text(), reference.text());
}

fn chat(url: &str, extra: &[&str]) -> Session {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hasten"));
    cmd.args(["chat", "--url", url, "--temperature", "0"])
        .args(extra);
    cmd.env("TERM", "xterm");
    let mut s = Session::spawn(cmd).unwrap();
    s.set_expect_timeout(Some(Duration::from_secs(60)));
    s
}

#[test]
fn hasten_chat_keeps_a_conversation_and_ctrl_c_stops_an_answer() {
    let server = Serve::start(&[]);
    // Two turns and the stats.
    let proxy = Proxy::start(&server.addr, Faults::default());
    let kwargs = r#"{"enable_thinking":false}"#;
    let mut s = chat(
        &proxy.url(),
        &["-n", "16", "--chat-template-kwargs", kwargs],
    );
    s.expect("> ").unwrap();
    s.send("Who made the heaven and the earth?\r").unwrap();
    let first = s.expect("> ").unwrap();
    let first = String::from_utf8_lossy(first.before()).to_string();
    assert!(first.split_whitespace().count() >= 4, "{first:?}");
    s.send("And what did he say?\r").unwrap();
    s.expect("> ").unwrap();
    s.send("/stats\r").unwrap();
    s.expect("TTFT").unwrap();
    s.expect("attempts").unwrap();
    s.expect("> ").unwrap();
    s.send("/quit\r").unwrap();
    s.expect(expectrl::Eof).unwrap();
    let reqs = proxy.requests();
    let posts: Vec<&String> = reqs.iter().filter(|r| r.starts_with("POST")).collect();
    assert_eq!(posts.len(), 2, "{reqs:?}");
    let second: serde_json::Value =
        serde_json::from_str(posts[1].split_once("\r\n\r\n").unwrap().1).unwrap();
    let msgs = second["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3, "the second turn carries the first: {msgs:?}");
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(msgs[2]["content"], "And what did he say?");
    assert_eq!(second["chat_template_kwargs"]["enable_thinking"], false);

    // A slow link makes a long answer take seconds; Ctrl-C stops it and
    // the chat goes on.
    let slow = Proxy::start(
        &server.addr,
        Faults {
            delay: Duration::from_millis(30),
            read_size: 128,
            ..Faults::default()
        },
    );
    let mut s = chat(&slow.url(), &["-n", "400"]);
    s.expect("> ").unwrap();
    let t0 = std::time::Instant::now();
    s.send("Tell me of the kings of Israel\r").unwrap();
    // Wait for some of the answer (past the echoed question), then interrupt.
    s.expect("Israel").unwrap();
    s.expect(expectrl::Regex("[a-z]{3}")).unwrap();
    s.send(ControlCode::EndOfText).unwrap();
    s.expect("[stopped]").unwrap();
    s.expect("> ").unwrap();
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    s.send("/stats\r").unwrap();
    s.expect("output tokens").unwrap();
    s.send("/quit\r").unwrap();
    s.expect(expectrl::Eof).unwrap();
}

fn weather_call() -> Request {
    let mut r = greedy(200);
    r.set(
        "tools",
        serde_json::json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                "required": ["city"], "additionalProperties": false}}}]),
    );
    r.set("tool_choice", serde_json::json!("required"));
    r.set("parallel_tool_calls", serde_json::json!(false));
    r
}

#[tokio::test]
async fn tool_calls_assemble_alike_streamed_unary_and_resumed() {
    let server = Serve::start(&[]);
    let c = client(server.url(), OnBreak::Fail);
    let unary = c.send(weather_call()).await.unwrap();
    let calls = &unary.choices[0].tool_calls;
    assert_eq!(calls.len(), 1, "{unary:?}");
    assert_eq!(calls[0].function.name, "get_weather");
    let args: serde_json::Value = serde_json::from_str(&calls[0].function.arguments).unwrap();
    assert!(args["city"].is_string(), "{args}");
    assert_eq!(
        unary.choices[0].finish_reason.as_deref(),
        Some("tool_calls")
    );
    let streamed = c.stream(weather_call()).collect().await.unwrap();
    let names_args = |o: &hasten_client::Output| -> Vec<(String, String)> {
        o.choices[0]
            .tool_calls
            .iter()
            .map(|t| (t.function.name.clone(), t.function.arguments.clone()))
            .collect()
    };
    assert_eq!(names_args(&streamed), names_args(&unary));
    assert!(streamed.choices[0].tool_calls[0].id.starts_with("call_"));
    // Cut mid-call: a resume replays the rest exactly once; a continuation
    // (which cannot send a partial call back) fails with what arrived.
    let proxy = Proxy::start(
        &server.addr,
        Faults {
            cut_first_after_events: Some(4),
            ..Faults::default()
        },
    );
    let resumed = client(proxy.url(), OnBreak::Resume)
        .stream(weather_call())
        .collect()
        .await
        .unwrap();
    assert_eq!(names_args(&resumed), names_args(&unary));
    assert_eq!(resumed.stats.resumes, 1, "{resumed:?} {unary:?}");
    // The resume is held until the server has forgotten the stream (see
    // `a_forgotten_stream_is_continued_without_repeating_text`): one that
    // arrives before the server noticed the cut still finds it.
    let forgetful = Serve::start(&["--resume-grace", "0"]);
    let proxy = Proxy::start_gated(
        &forgetful.addr,
        Faults {
            cut_first_after_events: Some(4),
            ..Faults::default()
        },
    );
    let opener = open_when_forgotten(&proxy, &forgetful.addr);
    let failed = client(proxy.url(), OnBreak::Continue)
        .stream(weather_call())
        .collect()
        .await
        .unwrap_err();
    opener.join().unwrap();
    let partial = &failed.partial.choices[0].tool_calls;
    assert_eq!(partial.len(), 1);
    assert!(calls[0]
        .function
        .arguments
        .starts_with(&partial[0].function.arguments));
    assert_eq!(failed.partial.stats.continuations, 0);
}

#[test]
fn complete_json_schema_prints_a_checked_object() {
    let server = Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("person.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120}},
            "required": ["name", "age"], "additionalProperties": false}"#,
    )
    .unwrap();
    let url = server.url();
    let o = common::hasten(&[
        "complete",
        "--url",
        &url,
        "--json-schema",
        schema.to_str().unwrap(),
        "A person",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(out.lines().count(), 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["name"].is_string() && v["age"].as_u64().unwrap() <= 120,
        "{v}"
    );
}

/// Opens `proxy`'s gate once a second connection waits at it (the client
/// saw the cut) and the server at `addr` has no live stream (it forgot the
/// cut one), so a resume cannot race the server's noticing the cut.
fn open_when_forgotten(proxy: &Proxy, addr: &str) -> std::thread::JoinHandle<()> {
    let (addr, gate, conns) = (addr.to_string(), proxy.gate(), proxy.connections.clone());
    std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        while conns.load(std::sync::atomic::Ordering::SeqCst) < 2
            || metric(&addr, "hasten_streams_live").unwrap_or(1.0) > 0.0
        {
            assert!(t0.elapsed() < Duration::from_secs(60), "never forgotten");
            std::thread::sleep(Duration::from_millis(2));
        }
        gate.open();
    })
}
