//! Every route and every error through the router itself (`oneshot`, no
//! socket): status codes, OpenAI error shapes, headers, and the bodies of
//! streaming and non-streaming answers.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use common::*;
use hasten_server::{router, ServerConfig, Shared};
use serde_json::{json, Value};
use tower::ServiceExt;

async fn call(st: &hasten_server::AppState, req: Request<Body>) -> Response {
    router(st.clone()).oneshot(req).await.unwrap()
}

fn post(path: &str, body: &Value) -> Request<Body> {
    Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn body(r: Response) -> String {
    let b = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .unwrap();
    String::from_utf8(b.to_vec()).unwrap()
}

async fn json_of(r: Response) -> Value {
    serde_json::from_str(&body(r).await).unwrap()
}

/// Status, error type/param/code of a request expected to fail.
async fn fails(st: &hasten_server::AppState, req: Request<Body>) -> (StatusCode, Value) {
    let r = call(st, req).await;
    let status = r.status();
    let v = json_of(r).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    assert!(v["error"]["type"].is_string(), "{v}");
    (status, v["error"].clone())
}

fn chat(extra: Value) -> Value {
    let mut v = json!({"model": "tiny", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 6, "seed": 3});
    v.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    v
}

#[tokio::test]
async fn health_ready_and_models() {
    let empty = Shared::new(ServerConfig::default());
    assert_eq!(
        call(&empty, Request::get("/health").body(Body::empty()).unwrap())
            .await
            .status(),
        StatusCode::OK
    );
    let (s, e) = fails(&empty, Request::get("/ready").body(Body::empty()).unwrap()).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(e["code"], "unavailable");
    let (s, _) = fails(&empty, post("/v1/chat/completions", &chat(json!({})))).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);

    let st = state();
    assert_eq!(
        call(&st, Request::get("/ready").body(Body::empty()).unwrap())
            .await
            .status(),
        StatusCode::OK
    );
    let m = json_of(call(&st, Request::get("/v1/models").body(Body::empty()).unwrap()).await).await;
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], "tiny");
    assert_eq!(m["data"][0]["max_model_len"], 512);
    let one = call(
        &st,
        Request::get("/v1/models/tiny").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(one.status(), StatusCode::OK);
    let (s, e) = fails(
        &st,
        Request::get("/v1/models/gpt-5")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("model_not_found"))
    );
}

#[tokio::test]
async fn chat_completion_with_breakdown_and_request_id() {
    let st = state();
    let mut req = post("/v1/chat/completions", &chat(json!({})));
    req.headers_mut()
        .insert("x-request-id", "client-id-1".parse().unwrap());
    let r = call(&st, req).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-request-id"], "client-id-1");
    let timing = r.headers()["server-timing"].to_str().unwrap().to_owned();
    for part in [
        "queue;dur=",
        "prefill;dur=",
        "decode;dur=",
        "prompt_tokens;desc=",
        "cached_prompt_tokens;desc=",
    ] {
        assert!(timing.contains(part), "{timing}");
    }
    let v = json_of(r).await;
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["id"], "chatcmpl-client-id-1");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 6);
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(timing.contains(&format!("prompt_tokens;desc=\"{prompt}\"")));
    assert_eq!(v["usage"]["total_tokens"].as_u64(), Some(prompt + 6));

    // Without a (sane) id, one is generated.
    let mut req = post("/v1/chat/completions", &chat(json!({})));
    req.headers_mut()
        .insert("x-request-id", "bad id!".parse().unwrap());
    let r = call(&st, req).await;
    let id = r.headers()["x-request-id"].to_str().unwrap();
    assert!(id.starts_with("req-"), "{id}");
}

#[tokio::test]
async fn seeds_reproduce_and_n_choices_differ() {
    let st = state();
    let text = |v: &Value, i: usize| {
        v["choices"][i]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // The tiny model is nearly deterministic; a flat bias
    // over 64 tokens makes sampling matter.
    let bias: serde_json::Map<String, Value> =
        (1000..1064).map(|t| (t.to_string(), json!(100))).collect();
    let flat = json!({"temperature": 1.0, "logit_bias": bias, "max_tokens": 12});
    let with = |extra: Value| {
        let mut v = chat(flat.clone());
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let a = json_of(
        call(
            &st,
            post("/v1/chat/completions", &with(json!({"seed": 11}))),
        )
        .await,
    )
    .await;
    let b = json_of(
        call(
            &st,
            post("/v1/chat/completions", &with(json!({"seed": 11}))),
        )
        .await,
    )
    .await;
    let c = json_of(
        call(
            &st,
            post("/v1/chat/completions", &with(json!({"seed": 12}))),
        )
        .await,
    )
    .await;
    assert_eq!(text(&a, 0), text(&b, 0));
    assert_ne!(text(&a, 0), text(&c, 0));
    let n = json_of(call(&st, post("/v1/chat/completions", &with(json!({"n": 3})))).await).await;
    let choices = n["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    assert_eq!(n["usage"]["completion_tokens"], 36);
    // The prompt is counted once, not once per choice.
    assert_eq!(n["usage"]["prompt_tokens"], a["usage"]["prompt_tokens"]);
    // Choice j of seed s samples as a single request of seed s + j.
    let n = json_of(
        call(
            &st,
            post("/v1/chat/completions", &with(json!({"n": 2, "seed": 11}))),
        )
        .await,
    )
    .await;
    assert_eq!(text(&n, 0), text(&a, 0));
    assert_eq!(text(&n, 1), text(&c, 0));
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
    }
}

#[tokio::test]
async fn completions_accept_every_prompt_shape() {
    let st = state();
    let base = json!({"max_tokens": 3, "temperature": 0});
    let with = |p: Value| {
        let mut v = base.clone();
        v["prompt"] = p;
        v
    };
    let one = json_of(
        call(
            &st,
            post("/v1/completions", &with(json!("Once upon a time"))),
        )
        .await,
    )
    .await;
    assert_eq!(one["object"], "text_completion");
    assert_eq!(one["choices"][0]["finish_reason"], "length");
    let batch = json_of(
        call(
            &st,
            post(
                "/v1/completions",
                &with(json!(["Once upon a time", "Hello"])),
            ),
        )
        .await,
    )
    .await;
    assert_eq!(batch["choices"].as_array().unwrap().len(), 2);
    // Greedy: the first prompt of the batch gives the same text as alone.
    assert_eq!(batch["choices"][0]["text"], one["choices"][0]["text"]);
    let ids = json_of(
        call(
            &st,
            post("/tokenize", &json!({"prompt": "Once upon a time"})),
        )
        .await,
    )
    .await;
    let toks = ids["tokens"].clone();
    assert_eq!(
        ids["count"].as_u64(),
        Some(toks.as_array().unwrap().len() as u64)
    );
    let by_ids = json_of(call(&st, post("/v1/completions", &with(toks.clone()))).await).await;
    assert_eq!(by_ids["choices"][0]["text"], one["choices"][0]["text"]);
    let lists = json_of(
        call(
            &st,
            post("/v1/completions", &with(json!([toks, [1, 15043]]))),
        )
        .await,
    )
    .await;
    assert_eq!(lists["choices"].as_array().unwrap().len(), 2);
    // Legacy logprobs: one entry per token.
    let mut lp = with(json!("Hello"));
    lp["logprobs"] = json!(2);
    let v = json_of(call(&st, post("/v1/completions", &lp)).await).await;
    let l = &v["choices"][0]["logprobs"];
    assert_eq!(l["tokens"].as_array().unwrap().len(), 3);
    assert_eq!(l["top_logprobs"][0].as_object().unwrap().len(), 2);
}

#[tokio::test]
async fn tokenize_and_detokenize_round_trip() {
    let st = state();
    let t = json_of(call(&st, post("/tokenize", &json!({"prompt": "Hello world"}))).await).await;
    let tokens = t["tokens"].clone();
    assert_eq!(tokens[0], 1, "BOS first: {t}");
    let d = json_of(call(&st, post("/detokenize", &json!({"tokens": tokens}))).await).await;
    assert!(d["prompt"].as_str().unwrap().contains("Hello world"), "{d}");
    let chat = json_of(
        call(
            &st,
            post(
                "/tokenize",
                &json!({"messages": [{"role": "user", "content": "hi"}]}),
            ),
        )
        .await,
    )
    .await;
    assert!(chat["count"].as_u64().unwrap() > 2);
    let (s, e) = fails(&st, post("/detokenize", &json!({"tokens": [99999999]}))).await;
    assert_eq!(
        (s, e["param"].as_str()),
        (StatusCode::BAD_REQUEST, Some("tokens"))
    );
    let (s, _) = fails(&st, post("/tokenize", &json!({}))).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn streams_are_spec_correct() {
    let st = state();
    let req =
        chat(json!({"stream": true, "stream_options": {"include_usage": true}, "max_tokens": 5}));
    let r = call(&st, post("/v1/chat/completions", &req)).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let text = body(r).await;
    let mut ids = Vec::new();
    let mut datas = Vec::new();
    for ev in text.split("\n\n").filter(|e| !e.is_empty()) {
        let mut data = None;
        for line in ev.lines() {
            if let Some(id) = line.strip_prefix("id: ") {
                ids.push(id.parse::<usize>().unwrap());
            } else if let Some(d) = line.strip_prefix("data: ") {
                data = Some(d.to_owned());
            } else {
                assert!(line.starts_with(':'), "unexpected line {line:?}");
            }
        }
        datas.extend(data);
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids increase: {ids:?}");
    assert_eq!(datas.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = datas[..datas.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"].as_array().unwrap().len(), 0);
    assert_eq!(last["usage"]["completion_tokens"], 5);
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c.get("usage").is_none()));
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    assert!(fin["timing"]["decode_ms"].as_f64().is_some());
    assert!(text.starts_with(": queued position="), "{text}");

    // The same request without streaming gives the same text (same seed).
    let whole = json_of(
        call(
            &st,
            post("/v1/chat/completions", &chat(json!({"max_tokens": 5}))),
        )
        .await,
    )
    .await;
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(
        whole["choices"][0]["message"]["content"].as_str(),
        Some(streamed.as_str())
    );
}

#[tokio::test]
async fn bad_requests_name_their_problem() {
    let st = state();
    let raw = |s: &str| {
        Request::post("/v1/chat/completions")
            .header("content-type", "application/json")
            .body(Body::from(s.to_owned()))
            .unwrap()
    };
    let (s, e) = fails(&st, raw("{not json")).await;
    assert_eq!(
        (s, e["type"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_request_error"))
    );
    let (s, e) = fails(
        &st,
        post("/v1/chat/completions", &chat(json!({"temperature": "hot"}))),
    )
    .await;
    assert_eq!(
        (s, e["param"].as_str()),
        (StatusCode::BAD_REQUEST, Some("temperature")),
        "{e}"
    );
    for (extra, param) in [
        (json!({"temperature": 2.5}), "temperature"),
        (json!({"top_p": 0}), "top_p"),
        (json!({"n": 100}), "n"),
        (json!({"max_tokens": 0}), "max_tokens"),
        (json!({"presence_penalty": 3}), "presence_penalty"),
        (json!({"logit_bias": {"abc": 1}}), "logit_bias"),
        (json!({"stop": ["a", "b", "c", "d", "e"]}), "stop"),
        (json!({"top_logprobs": 3}), "top_logprobs"),
        (
            json!({"logprobs": true, "top_logprobs": 50}),
            "top_logprobs",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f"}}],
                   "tool_choice": {"type": "function", "function": {"name": "g"}}}),
            "tool_choice",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f",
                   "parameters": {"type": "fancy"}}}]}),
            "tools[0].function.parameters",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f"}}],
                   "tool_choice": "required", "response_format": {"type": "json_object"}}),
            "response_format",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "fancy"}}}}),
            "response_format",
        ),
        (
            json!({"stream_options": {"include_usage": true}}),
            "stream_options",
        ),
        (json!({"messages": []}), "messages"),
        (
            json!({"messages": [{"role": "function", "content": "x"}]}),
            "messages[0].role",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
            "messages[0].tool_calls",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            "messages[0].content[0].type",
        ),
    ] {
        let (s, e) = fails(&st, post("/v1/chat/completions", &chat(extra.clone()))).await;
        assert_eq!(
            (s, e["param"].as_str()),
            (StatusCode::BAD_REQUEST, Some(param)),
            "{extra}: {e}"
        );
    }
    let (s, e) = fails(
        &st,
        post("/v1/chat/completions", &chat(json!({"model": "nope"}))),
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("model_not_found"))
    );
    let (s, e) = fails(
        &st,
        Request::get("/v1/nothing").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (s, _) = fails(
        &st,
        Request::get("/v1/chat/completions")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    // Prompt plus max_tokens beyond the 512-token context.
    let (s, e) = fails(
        &st,
        post("/v1/chat/completions", &chat(json!({"max_tokens": 600}))),
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("context_length_exceeded")),
        "{e}"
    );
    assert!(e["message"].as_str().unwrap().contains("512"));
    let long = "word ".repeat(700);
    let (s, e) = fails(
        &st,
        post("/v1/completions", &json!({"prompt": long, "max_tokens": 1})),
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("context_length_exceeded"))
    );
    let (s, e) = fails(
        &st,
        post("/v1/completions", &json!({"prompt": "x", "echo": true})),
    )
    .await;
    assert_eq!(
        (s, e["param"].as_str()),
        (StatusCode::BAD_REQUEST, Some("echo"))
    );
    let (s, e) = fails(
        &st,
        post(
            "/v1/completions",
            &json!({"prompt": [99999999], "max_tokens": 1}),
        ),
    )
    .await;
    assert_eq!(
        (s, e["param"].as_str()),
        (StatusCode::BAD_REQUEST, Some("prompt"))
    );
    let (s, _) = fails(&st, post("/v1/streams/unknown", &json!({}))).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    let (s, e) = fails(
        &st,
        Request::get("/v1/streams/unknown")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("stream_not_found"))
    );
}

#[tokio::test]
async fn limits_keys_and_overload() {
    let cfg = ServerConfig {
        api_keys: vec!["sk-right".into(), "sk-other".into()],
        max_body_bytes: Some(2048),
        limits: hasten_server::params::ServerLimits {
            max_prompt_tokens: Some(64),
            max_output_tokens: Some(32),
        },
        ..ServerConfig::default()
    };
    let st = state_with(cfg, engine_config());
    let authed = |mut r: Request<Body>, key: &str| {
        r.headers_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
        r
    };
    let (s, e) = fails(&st, post("/v1/chat/completions", &chat(json!({})))).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("invalid_api_key"))
    );
    let (s, _) = fails(
        &st,
        authed(post("/v1/chat/completions", &chat(json!({}))), "sk-wrong"),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let r = call(
        &st,
        authed(post("/v1/chat/completions", &chat(json!({}))), "sk-other"),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    // Health and metrics stay open.
    assert_eq!(
        call(&st, Request::get("/health").body(Body::empty()).unwrap())
            .await
            .status(),
        StatusCode::OK
    );
    let big = chat(json!({"messages": [{"role": "user", "content": "x".repeat(4000)}]}));
    let (s, e) = fails(&st, authed(post("/v1/chat/completions", &big), "sk-right")).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("request_too_large"))
    );
    let (s, e) = fails(
        &st,
        authed(
            post("/v1/chat/completions", &chat(json!({"max_tokens": 33}))),
            "sk-right",
        ),
    )
    .await;
    assert_eq!(
        (s, e["param"].as_str()),
        (StatusCode::BAD_REQUEST, Some("max_tokens"))
    );
    let long = chat(json!({"messages": [{"role": "user", "content": "word ".repeat(100)}]}));
    let (s, e) = fails(&st, authed(post("/v1/chat/completions", &long), "sk-right")).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("context_length_exceeded"))
    );

    // An engine full to capacity (one running, no queue): 429 with
    // Retry-After, before any work.
    let mut ec = engine_config();
    (ec.max_running, ec.max_waiting) = (1, 0);
    let st = state_with(ServerConfig::default(), ec);
    let engine = &st.backend().unwrap().engine;
    let mut spec = hasten_engine::RequestSpec::greedy(vec![1, 2, 3], 400);
    spec.ignore_eos = true;
    // More choices than the engine ever holds: 400 naming `n`, as no
    // retry would cure it (checked first, even while not full).
    let r = call(&st, post("/v1/chat/completions", &chat(json!({"n": 2})))).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let v = json_of(r).await;
    assert_eq!(v["error"]["param"], "n");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-running"));
    let _held = engine.submit(engine.validate(spec).unwrap()).unwrap();
    let r = call(&st, post("/v1/chat/completions", &chat(json!({})))).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let secs: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&secs));
    let v = json_of(r).await;
    assert_eq!(v["error"]["type"], "rate_limit_error");
    let m = body(call(&st, Request::get("/metrics").body(Body::empty()).unwrap()).await).await;
    assert!(
        m.contains("hasten_http_responses_total{route=\"/v1/chat/completions\",status=\"429\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn metrics_are_prometheus_text() {
    let st = state();
    call(&st, post("/v1/chat/completions", &chat(json!({})))).await;
    let r = call(&st, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let mut m = body(r).await;
    // Gauges are published at the end of the engine step that finished the
    // request, which may be just after the answer went out.
    for _ in 0..100 {
        if m.lines().any(|l| l == "hasten_kv_blocks_used 0") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        m = body(call(&st, Request::get("/metrics").body(Body::empty()).unwrap()).await).await;
    }
    for line in [
        "hasten_requests_finished_total 1",
        "# TYPE hasten_time_to_first_token_seconds histogram",
        "hasten_time_to_first_token_seconds_count 1",
        "hasten_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1",
        "hasten_kv_blocks_used 0",
        "hasten_http_responses_total{route=\"/v1/chat/completions\",status=\"200\"} 1",
    ] {
        assert!(m.lines().any(|l| l == line), "missing {line:?} in\n{m}");
    }
}

#[tokio::test]
async fn cors_is_off_unless_configured() {
    let pre = || {
        Request::builder()
            .method("OPTIONS")
            .uri("/v1/models")
            .header("origin", "http://example.com")
            .header("access-control-request-method", "GET")
            .body(Body::empty())
            .unwrap()
    };
    let st = state();
    let r = call(&st, pre()).await;
    assert!(r.headers().get("access-control-allow-origin").is_none());
    let cfg = ServerConfig {
        cors_origins: vec!["http://example.com".into()],
        ..ServerConfig::default()
    };
    let st = state_with(cfg, engine_config());
    let r = call(&st, pre()).await;
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://example.com"
    );
}

#[tokio::test]
async fn the_request_timeout_cuts_unary_and_streaming_answers() {
    let cfg = ServerConfig {
        request_timeout: Some(std::time::Duration::from_millis(50)),
        ..ServerConfig::default()
    };
    let st = state_with(cfg, engine_config());
    let long = chat(json!({"max_tokens": 400, "ignore_eos": true}));
    let (s, e) = fails(&st, post("/v1/chat/completions", &long)).await;
    assert_eq!(
        (s, e["code"].as_str()),
        (StatusCode::REQUEST_TIMEOUT, Some("request_timeout"))
    );
    let mut sreq = long.clone();
    sreq["stream"] = json!(true);
    let text = body(call(&st, post("/v1/chat/completions", &sreq)).await).await;
    assert!(text.contains("\"code\":\"request_timeout\""), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    // Both sequences were cancelled, not run to the end.
    let b = st.backend().unwrap();
    let t0 = std::time::Instant::now();
    while b.engine.metrics().requests_cancelled < 2 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            b.engine.metrics()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(b.engine.metrics().requests_finished, 0);
}

/// A key given twice is refused, naming it, rather than one copy silently
/// winning: for the request's own fields and the shared sampling ones.
#[tokio::test]
async fn duplicate_keys_are_refused() {
    let st = state();
    for (body, key) in [
        (
            r#"{"model":"tiny","model":"tiny","messages":[{"role":"user","content":"Hi"}]}"#,
            "model",
        ),
        (
            r#"{"messages":[{"role":"user","content":"Hi"}],"temperature":1,"temperature":0}"#,
            "temperature",
        ),
        (
            r#"{"prompt":"Hi","max_tokens":2,"max_tokens":3}"#,
            "max_tokens",
        ),
    ] {
        let path = if body.contains("messages") {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        };
        let req = Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let (s, e) = fails(&st, req).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {e}");
        let msg = e["message"].as_str().unwrap();
        assert!(
            msg.contains("duplicate") && msg.contains(key),
            "{body}: {msg}"
        );
    }
}
