//! The client against a fault-injecting loopback server on a paused tokio
//! clock: for every fault, the text is exactly right (nothing duplicated or
//! lost), attempts and their spacing are as configured, and timeouts fire
//! as their own errors.

mod fault;

use fault::{done, error_json, finish, role, text, text_with, usage, Server, Step};
use hasten_client::{Client, Config, Error, Hedge, OnBreak, Request};
use std::time::Duration;
use tokio::time::Instant;

const PIECES: [&str; 12] = [
    "Once", " upon", " a", " time", ",", " a", " small", " engine", " ran", " very", " fast", ".",
];

fn full() -> String {
    PIECES.concat()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The whole answer from piece `from` on, event ids starting at `id0` when given.
fn stream_from(from: usize, chunked: bool, id0: Option<usize>) -> Vec<Step> {
    let mut s = vec![Step::Head { chunked }, Step::Send(role())];
    let id = |k: usize| id0.map(|i| i + k);
    for (k, p) in PIECES[from..].iter().enumerate() {
        s.push(Step::Send(text_with(id(k), p, None)));
    }
    s.push(Step::Send(finish(id(PIECES.len() - from), "stop")));
    s.push(Step::Send(done()));
    if chunked {
        s.push(Step::End);
    }
    s
}

/// The first `k` pieces, then the connection drops.
fn cut_after(k: usize, chunked: bool, ids: bool) -> Vec<Step> {
    let mut s = vec![Step::Head { chunked }, Step::Send(role())];
    for (i, p) in PIECES[..k].iter().enumerate() {
        s.push(Step::Send(text_with(ids.then_some(i), p, None)));
    }
    s.push(Step::Close);
    s
}

fn config(url: String) -> Config {
    let mut c = Config::new(url);
    c.retry.initial_backoff = ms(100);
    c.retry.max_backoff = ms(1000);
    c.retry.jitter = 0.0;
    c.timeouts.first_token = Duration::from_secs(5);
    c.timeouts.idle = Duration::from_secs(2);
    c
}

fn chat() -> Request {
    Request::chat(Some("m"), "tell me a story")
}

fn gaps(s: &Server) -> Vec<Duration> {
    let r = s.records();
    r.windows(2)
        .map(|w| w[1].accepted - w[0].accepted)
        .collect()
}

fn close_to(a: Duration, b: Duration) -> bool {
    a.abs_diff(b) <= ms(20)
}

#[tokio::test(start_paused = true)]
async fn resets_before_headers_are_retried_with_exponential_backoff() {
    let s = Server::start(vec![
        vec![Step::Reset],
        vec![Step::Reset],
        stream_from(0, true, None),
    ])
    .await;
    let c = Client::new(config(s.url())).unwrap();
    let out = c.stream(chat()).collect().await.unwrap();
    assert_eq!(out.text(), full());
    assert_eq!((out.stats.attempts, out.stats.retries), (3, 2));
    let g = gaps(&s);
    assert!(close_to(g[0], ms(100)) && close_to(g[1], ms(200)), "{g:?}");
}

#[tokio::test(start_paused = true)]
async fn retry_after_and_retry_after_ms_are_obeyed() {
    let s = Server::start(vec![
        vec![Step::Status(
            429,
            vec![("retry-after-ms", "1500".into())],
            error_json("slow down", "rate_limit_error"),
        )],
        vec![Step::Status(
            503,
            vec![("retry-after", "2".into())],
            error_json("busy", "server_error"),
        )],
        stream_from(0, false, None),
    ])
    .await;
    let c = Client::new(config(s.url())).unwrap();
    let out = c.stream(chat()).collect().await.unwrap();
    assert_eq!(out.text(), full());
    let g = gaps(&s);
    assert!(
        close_to(g[0], ms(1500)) && close_to(g[1], ms(2000)),
        "{g:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_the_cap_ends_the_retries() {
    let s = Server::start(vec![vec![Step::Status(
        429,
        vec![("retry-after", "600".into())],
        error_json("later", "rate_limit_error"),
    )]])
    .await;
    let c = Client::new(config(s.url())).unwrap();
    let err = c.stream(chat()).collect().await.unwrap_err();
    assert!(
        matches!(err.error, Error::Status { status: 429, retry_after: Some(d), .. } if d == Duration::from_secs(600)),
        "{err:?}"
    );
    assert_eq!(s.records().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn client_errors_are_not_retried_and_keep_the_servers_body() {
    let s = Server::start(vec![vec![Step::Status(
        400,
        vec![],
        error_json("max_tokens must be positive", "invalid_request_error"),
    )]])
    .await;
    let c = Client::new(config(s.url())).unwrap();
    let err = c.stream(chat()).collect().await.unwrap_err();
    match &err.error {
        Error::Status {
            status: 400,
            body: Some(b),
            ..
        } => {
            assert_eq!(b.error.message, "max_tokens must be positive");
            assert_eq!(b.error.kind, "invalid_request_error");
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(s.records().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_the_limit_and_at_the_budget() {
    let fail = || {
        vec![Step::Status(
            500,
            vec![],
            error_json("boom", "server_error"),
        )]
    };
    let s = Server::start((0..10).map(|_| fail()).collect()).await;
    let mut cfg = config(s.url());
    cfg.retry.max_retries = 2;
    let c = Client::new(cfg).unwrap();
    let err = c.stream(chat()).collect().await.unwrap_err();
    assert!(matches!(err.error, Error::Status { status: 500, .. }));
    assert_eq!(err.partial.stats.attempts, 3);
    assert_eq!(s.records().len(), 3);

    // A budget of one retry, earning none: the first request retries once,
    // the second (from a clone, which shares the budget) not at all.
    let s = Server::start((0..10).map(|_| fail()).collect()).await;
    let mut cfg = config(s.url());
    cfg.retry.max_retries = 5;
    cfg.retry.budget_burst = 1.0;
    cfg.retry.budget_ratio = 0.0;
    let c = Client::new(cfg).unwrap();
    let a = c.stream(chat()).collect().await.unwrap_err();
    let b = c.clone().stream(chat()).collect().await.unwrap_err();
    assert_eq!((a.partial.stats.attempts, b.partial.stats.attempts), (2, 1));
    assert!(a.partial.stats.retry_budget_exhausted && b.partial.stats.retry_budget_exhausted);
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_a_connect_error_after_retries() {
    // Bind then drop: nothing listens on the port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = config(format!("http://127.0.0.1:{port}"));
    cfg.retry.max_retries = 2;
    let c = Client::new(cfg).unwrap();
    let t0 = Instant::now();
    let err = c.stream(chat()).collect().await.unwrap_err();
    assert!(matches!(err.error, Error::Connect { .. }), "{err:?}");
    assert_eq!(err.partial.stats.retries, 2);
    assert!(close_to(t0.elapsed(), ms(300)), "{:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_ends_before_any_output_is_retried() {
    let s = Server::start(vec![
        vec![
            Step::Head { chunked: false },
            Step::Send(role()),
            Step::Close,
        ],
        stream_from(0, true, None),
    ])
    .await;
    let c = Client::new(config(s.url())).unwrap();
    let out = c.stream(chat()).collect().await.unwrap();
    assert_eq!(out.text(), full());
    assert_eq!(out.stats.retries, 1);
}

async fn continue_after_cut(chunked: bool, echo: bool) {
    let k = 5;
    let mut rest = stream_from(k, chunked, None);
    if echo {
        // Some servers send the assistant prefix back before the new text.
        rest.insert(2, Step::Send(text(&PIECES[..k].concat())));
    }
    let s = Server::start(vec![cut_after(k, chunked, false), rest]).await;
    let c = Client::new(config(s.url())).unwrap();
    let mut st = c.stream(chat());
    let mut seen = String::new();
    while let Some(d) = st.next().await.unwrap() {
        seen.push_str(&d.text);
    }
    assert_eq!(seen, full(), "chunked {chunked} echo {echo}");
    let out = st.output();
    assert_eq!(out.text(), full());
    assert_eq!(
        (out.stats.continuations, out.stats.extra_prompt_tokens),
        (1, k as u64)
    );
    let r = s.records();
    let body: serde_json::Value = serde_json::from_str(&r[1].body).unwrap();
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(msgs[1]["content"], PIECES[..k].concat());
}

#[tokio::test(start_paused = true)]
async fn a_close_delimited_body_cut_after_k_events_is_continued_exactly() {
    continue_after_cut(false, false).await;
}

#[tokio::test(start_paused = true)]
async fn a_chunked_body_cut_short_is_continued_exactly() {
    continue_after_cut(true, false).await;
}

#[tokio::test(start_paused = true)]
async fn a_continuation_that_echoes_the_prefix_is_deduplicated() {
    continue_after_cut(true, true).await;
}

#[tokio::test(start_paused = true)]
async fn a_space_repeated_at_the_seam_is_dropped() {
    // The first attempt ends in " a"; a template that trims the prefix
    // makes the model start with " small" again after "... a ".
    let pieces = ["Once", " upon", " a "];
    let mut first = vec![Step::Head { chunked: true }];
    for p in pieces {
        first.push(Step::Send(text(p)));
    }
    first.push(Step::Close);
    let rest = vec![
        Step::Head { chunked: true },
        Step::Send(text(" time.")),
        Step::Send(finish(None, "stop")),
        Step::Send(done()),
        Step::End,
    ];
    let s = Server::start(vec![first, rest]).await;
    let c = Client::new(config(s.url())).unwrap();
    let out = c.stream(chat()).collect().await.unwrap();
    assert_eq!(out.text(), "Once upon a time.");
}

#[tokio::test(start_paused = true)]
async fn a_stream_with_event_ids_is_resumed_with_last_event_id() {
    let k = 4;
    let s = Server::start(vec![
        cut_after(k, true, true),
        stream_from(k, true, Some(k)),
    ])
    .await;
    let c = Client::new(config(s.url())).unwrap();
    let out = c.stream(chat()).collect().await.unwrap();
    assert_eq!(out.text(), full());
    assert_eq!((out.stats.resumes, out.stats.continuations), (1, 0));
    let r = s.records();
    let rid = r[0].header("x-request-id").unwrap();
    assert_eq!(
        r[1].request_line(),
        format!("GET /v1/streams/{rid} HTTP/1.1")
    );
    assert_eq!(r[1].header("last-event-id").as_deref(), Some("3"));
}

#[tokio::test(start_paused = true)]
async fn the_fail_policy_returns_the_partial_text() {
    let s = Server::start(vec![cut_after(5, true, true)]).await;
    let mut cfg = config(s.url());
    cfg.on_break = OnBreak::Fail;
    let c = Client::new(cfg).unwrap();
    let err = c.stream(chat()).collect().await.unwrap_err();
    assert!(matches!(err.error, Error::Broken { .. }), "{err:?}");
    assert_eq!(err.partial.text(), PIECES[..5].concat());
    assert_eq!(s.records().len(), 1);

    // Resume-only against a server without event ids: no regeneration either.
    let s = Server::start(vec![cut_after(5, false, false)]).await;
    let mut cfg = config(s.url());
    cfg.on_break = OnBreak::Resume;
    let err = Client::new(cfg)
        .unwrap()
        .stream(chat())
        .collect()
        .await
        .unwrap_err();
    assert_eq!(err.partial.text(), PIECES[..5].concat());
    assert_eq!(s.records().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stall_before_the_first_token_is_a_first_token_timeout() {
    let mut stall = vec![Step::Head { chunked: true }, Step::Send(role())];
    // Keep-alive comments are not output.
    for _ in 0..10 {
        stall.push(Step::Sleep(ms(1000)));
        stall.push(Step::Send(": keep-alive\n\n".into()));
    }
    let s = Server::start(vec![stall]).await;
    let mut cfg = config(s.url());
    cfg.retry.max_retries = 0;
    let c = Client::new(cfg).unwrap();
    let t0 = Instant::now();
    let err = c.stream(chat()).collect().await.unwrap_err();
    assert!(
        matches!(err.error, Error::FirstTokenTimeout(d) if d == Duration::from_secs(5)),
        "{err:?}"
    );
    assert!(close_to(t0.elapsed(), ms(5000)), "{:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_stall_between_events_is_an_idle_timeout_despite_keep_alives() {
    let mut s = vec![
        Step::Head { chunked: true },
        Step::Send(text("Once")),
        Step::Send(text(" upon")),
    ];
    for _ in 0..10 {
        s.push(Step::Sleep(ms(500)));
        s.push(Step::Send(": keep-alive\n\n".into()));
    }
    let s = Server::start(vec![s]).await;
    let mut cfg = config(s.url());
    cfg.on_break = OnBreak::Fail;
    let c = Client::new(cfg).unwrap();
    let t0 = Instant::now();
    let err = c.stream(chat()).collect().await.unwrap_err();
    assert!(
        matches!(err.error, Error::IdleTimeout(d) if d == Duration::from_secs(2)),
        "{err:?}"
    );
    assert_eq!(err.partial.text(), "Once upon");
    assert!(close_to(t0.elapsed(), ms(2000)), "{:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_slow_stream_hits_the_total_timeout() {
    let mut s = vec![Step::Head { chunked: true }];
    for p in PIECES {
        s.push(Step::Send(text(p)));
        s.push(Step::Sleep(ms(1000)));
    }
    let s = Server::start(vec![s]).await;
    let mut cfg = config(s.url());
    cfg.timeouts.total = Some(ms(3500));
    let c = Client::new(cfg).unwrap();
    let t0 = Instant::now();
    let err = c.stream(chat()).collect().await.unwrap_err();
    assert!(matches!(err.error, Error::TotalTimeout(_)), "{err:?}");
    assert_eq!(err.partial.text(), PIECES[..4].concat());
    assert!(close_to(t0.elapsed(), ms(3500)), "{:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn an_error_event_mid_stream_fails_with_the_partial_text() {
    let s = Server::start(vec![vec![
        Step::Head { chunked: true },
        Step::Send(text("Once")),
        Step::Send(format!(
            "data: {}\n\n",
            error_json("the engine failed", "server_error")
        )),
        Step::Send(done()),
        Step::End,
    ]])
    .await;
    let c = Client::new(config(s.url())).unwrap();
    let err = c.stream(chat()).collect().await.unwrap_err();
    assert!(
        matches!(&err.error, Error::Stream(b) if b.error.message == "the engine failed"),
        "{err:?}"
    );
    assert_eq!(err.partial.text(), "Once");
    assert_eq!(s.records().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn reading_stops_at_done_without_waiting_for_the_server_to_close() {
    let mut steps = stream_from(0, true, None);
    steps.pop(); // no chunked terminator
    steps.push(Step::Hang);
    let s = Server::start(vec![steps]).await;
    let c = Client::new(config(s.url())).unwrap();
    let t0 = Instant::now();
    let out = c.stream(chat()).collect().await.unwrap();
    assert_eq!(out.text(), full());
    assert!(t0.elapsed() < ms(50), "{:?}", t0.elapsed());
    // The connection is closed by us, right away.
    tokio::time::sleep(ms(10)).await;
    assert!(s.records()[0].client_closed.is_some());
}

#[tokio::test(start_paused = true)]
async fn reading_stops_at_the_final_chunk_with_usage() {
    let s = Server::start(vec![vec![
        Step::Head { chunked: true },
        Step::Send(text("Hi")),
        Step::Send(finish(None, "length")),
        Step::Send(usage(7, 1)),
        Step::Hang,
    ]])
    .await;
    let c = Client::new(config(s.url())).unwrap();
    let mut req = hasten_protocol::chat::ChatCompletionRequest {
        messages: vec![hasten_protocol::chat::ChatMessage::new("user", "x")],
        ..Default::default()
    };
    req.sampling.stream_options = Some(hasten_protocol::StreamOptions {
        include_usage: Some(true),
        ..Default::default()
    });
    let t0 = Instant::now();
    let out = c.stream(req).collect().await.unwrap();
    assert!(t0.elapsed() < ms(50));
    assert_eq!(out.choices[0].finish_reason.as_deref(), Some("length"));
    assert_eq!(out.usage.unwrap().prompt_tokens, 7);
}

#[tokio::test(start_paused = true)]
async fn itl_counts_every_token_of_an_event_that_carries_several() {
    // First token at 100 ms, then one event per 10 ms, the third carrying 3 tokens.
    let s = Server::start(vec![vec![
        Step::Head { chunked: true },
        Step::Sleep(ms(100)),
        Step::Send(text_with(None, "a", Some(1))),
        Step::Sleep(ms(10)),
        Step::Send(text_with(None, "b", Some(2))),
        Step::Sleep(ms(30)),
        Step::Send(text_with(None, "cde", Some(5))),
        Step::Sleep(ms(10)),
        Step::Send(text_with(None, "f", Some(6))),
        Step::Send(finish(None, "stop")),
        Step::Send(done()),
        Step::End,
    ]])
    .await;
    let c = Client::new(config(s.url())).unwrap();
    let out = c.stream(chat()).collect().await.unwrap();
    let st = &out.stats;
    assert_eq!(out.text(), "abcdef");
    assert!(close_to(st.ttft.unwrap(), ms(100)), "{st:?}");
    let itl: Vec<u128> = st.itl.iter().map(|d| d.as_millis()).collect();
    assert_eq!(itl, vec![10, 10, 10, 10, 10], "{st:?}");
    assert_eq!(st.icl.len(), 3); // b, cde, f (the finish chunk carries no text)
    assert!(st.per_event_token_counts);
    assert_eq!(st.output_tokens, 6);
    assert!(close_to(st.tpot().unwrap(), ms(10)), "{st:?}");
}

#[tokio::test(start_paused = true)]
async fn a_hedge_wins_and_the_slow_request_is_cancelled_at_once() {
    let slow = vec![
        Step::Head { chunked: true },
        Step::Send(role()),
        Step::Sleep(Duration::from_secs(30)),
    ];
    let s = Server::start(vec![slow, stream_from(0, true, None)]).await;
    let mut cfg = config(s.url());
    cfg.hedge = Some(Hedge::fixed(ms(300)));
    cfg.timeouts.first_token = Duration::from_secs(60);
    let c = Client::new(cfg).unwrap();
    let out = c.stream(chat()).collect().await.unwrap();
    assert_eq!(out.text(), full());
    assert_eq!(
        (out.stats.hedges, out.stats.hedge_won, out.stats.attempts),
        (1, true, 2)
    );
    tokio::time::sleep(ms(5)).await;
    let r = s.records();
    assert!(close_to(r[1].accepted - r[0].accepted, ms(300)));
    let closed = r[0].client_closed.expect("the slow request was cancelled");
    let fast_first_token = r[1].sent[1];
    assert!(
        closed.saturating_duration_since(fast_first_token) <= ms(5),
        "{:?}",
        closed - fast_first_token
    );
}

#[tokio::test(start_paused = true)]
async fn non_streaming_requests_retry_and_read_server_timing() {
    let body = serde_json::json!({"id":"x","object":"chat.completion","created":0,"model":"m",
        "choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],
        "usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}})
    .to_string();
    let timing = "queue;dur=1.000, prefill;dur=2.000, decode;dur=3.000, prompt_tokens;desc=\"3\", cached_prompt_tokens;desc=\"0\"";
    let s = Server::start(vec![
        vec![Step::Status(
            503,
            vec![],
            error_json("busy", "server_error"),
        )],
        vec![Step::Status(
            200,
            vec![("server-timing", timing.into())],
            body,
        )],
    ])
    .await;
    let c = Client::new(config(s.url())).unwrap();
    let out = c.send(chat()).await.unwrap();
    assert_eq!(out.text(), "Hello");
    assert_eq!(out.stats.retries, 1);
    assert_eq!(out.stats.server.unwrap().decode_ms, 3.0);
    assert_eq!(out.usage.unwrap().completion_tokens, 1);
    assert!(
        !serde_json::from_str::<serde_json::Value>(&s.records()[1].body).unwrap()["stream"]
            .as_bool()
            .unwrap()
    );
}

/// A client for replicas `servers` (in order), as `config` sets it up.
fn replicas(servers: &[&Server]) -> Client {
    let mut cfg = config(servers[0].url());
    cfg.fallback_urls = servers[1..].iter().map(|s| s.url()).collect();
    Client::new(cfg).unwrap()
}

fn overloaded() -> Step {
    Step::Status(
        503,
        vec![("retry-after", "30".into())],
        error_json("draining", "server_error"),
    )
}

#[tokio::test(start_paused = true)]
async fn requests_take_the_replicas_in_turn() {
    let a = Server::start(vec![stream_from(0, true, None)]).await;
    let b = Server::start(vec![stream_from(0, true, None)]).await;
    let c = replicas(&[&a, &b]);
    for s in [&a, &b] {
        let out = c.stream(chat()).collect().await.unwrap();
        assert_eq!(out.text(), full());
        assert_eq!(out.stats.endpoint.as_deref(), Some(s.url().as_str()));
        assert_eq!((out.stats.failovers, out.stats.retries), (0, 0));
    }
    assert_eq!((a.records().len(), b.records().len()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_refusal_fails_over_to_the_next_replica_without_its_retry_after() {
    let a = Server::start(vec![vec![overloaded()]]).await;
    let b = Server::start(vec![stream_from(0, true, None)]).await;
    let c = replicas(&[&a, &b]);
    let t0 = Instant::now();
    let out = c.stream(chat()).collect().await.unwrap();
    assert_eq!(out.text(), full());
    assert_eq!(out.stats.endpoint.as_deref(), Some(b.url().as_str()));
    assert_eq!((out.stats.failovers, out.stats.retries), (1, 1));
    // The first backoff (100 ms), not A's 30 s.
    assert!(t0.elapsed() < ms(500), "{:?}", t0.elapsed());
    // Non-streaming too, and a dead replica counts like a refusal.
    let b2 = Server::start(vec![vec![Step::Status(
        200,
        vec![("content-type", "application/json".into())],
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#.into(),
    )]])
    .await;
    let mut cfg = config(dead_url());
    cfg.fallback_urls = vec![b2.url()];
    let out = Client::new(cfg).unwrap().send(chat()).await.unwrap();
    assert_eq!(out.text(), "hi");
    assert_eq!(out.stats.failovers, 1);
}

/// A loopback URL nothing listens on.
fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}")
}

#[tokio::test(start_paused = true)]
async fn an_answer_cut_on_one_replica_is_continued_exactly_on_the_next() {
    let k = 5;
    let a = Server::start(vec![cut_after(k, true, false)]).await;
    let b = Server::start(vec![stream_from(k, true, None)]).await;
    let c = replicas(&[&a, &b]);
    let out = c.stream(chat()).collect().await.unwrap();
    assert_eq!(out.text(), full());
    assert_eq!(out.stats.continuations, 1);
    assert_eq!(out.stats.failovers, 1);
    assert_eq!(out.stats.endpoint.as_deref(), Some(b.url().as_str()));
    let body: serde_json::Value = serde_json::from_str(&b.records()[0].body).unwrap();
    assert_eq!(body["messages"][1]["content"], PIECES[..k].concat());
}

#[tokio::test(start_paused = true)]
async fn a_hedge_goes_to_the_next_replica() {
    let slow = vec![
        Step::Head { chunked: true },
        Step::Sleep(Duration::from_secs(3)),
    ];
    let a = Server::start(vec![slow]).await;
    let b = Server::start(vec![stream_from(0, true, None)]).await;
    let mut cfg = config(a.url());
    cfg.fallback_urls = vec![b.url()];
    cfg.hedge = Some(Hedge::fixed(ms(200)));
    let out = Client::new(cfg)
        .unwrap()
        .stream(chat())
        .collect()
        .await
        .unwrap();
    assert_eq!(out.text(), full());
    assert!(out.stats.hedge_won);
    assert_eq!(out.stats.endpoint.as_deref(), Some(b.url().as_str()));
    assert_eq!((a.records().len(), b.records().len()), (1, 1));
}
