//! The HTTP routes and their handlers. Handlers parse, refuse overload
//! before any tokenization, plan on the blocking pool (template rendering
//! and tokenization), submit to the engine, then either hand the engine
//! streams to the replay buffers (SSE) or gather the whole answer.

use crate::error::{Error, Result};
use crate::middleware::{self, RequestId};
use crate::params::{self, Plan};
use crate::respond::{self, Collected, Frame, Header, Kind, StreamEncoder, TokenText};
use crate::{prom, AppState, Backend};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method};
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use hasten_engine::RequestStream;
use hasten_protocol::chat::ChatCompletionRequest;
use hasten_protocol::completions::CompletionRequest;
use hasten_protocol::{
    DetokenizeRequest, DetokenizeResponse, ModelCard, ModelList, Sampling, TokenizeRequest,
    TokenizeResponse,
};
use serde::de::DeserializeOwned;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

/// The whole app for `st`.
pub fn router(st: AppState) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/responses", post(crate::responses::responses))
        .route(
            "/v1/responses/{id}",
            get(crate::responses::retrieve).delete(crate::responses::delete),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(crate::responses::input_items),
        )
        .route("/v1/responses/{id}/cancel", post(crate::responses::cancel))
        .route("/v1/embeddings", post(crate::embeddings::embeddings))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/v1/streams/{id}", get(resume))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/info", get(crate::ui::info))
        .route("/info/estimate", post(crate::ui::estimate))
        .route_layer(from_fn_with_state(st.clone(), middleware::body_deadline))
        .route_layer(from_fn_with_state(st.clone(), middleware::api_key))
        .route_layer(from_fn_with_state(st.clone(), middleware::count));
    let mut open = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics));
    if st.cfg.ui {
        open = open
            .route("/", get(crate::ui::index))
            .route("/ui/{*path}", get(crate::ui::file));
    }
    let open = open.route_layer(from_fn_with_state(st.clone(), middleware::count));
    // Anthropic's Messages API: the same layers, errors in its shape.
    let messages = Router::new()
        .route("/v1/messages", post(crate::anthropic::messages))
        .route(
            "/v1/messages/count_tokens",
            post(crate::anthropic::count_tokens),
        )
        .route_layer(from_fn_with_state(st.clone(), middleware::body_deadline))
        .route_layer(from_fn_with_state(st.clone(), middleware::api_key))
        .route_layer(axum::middleware::map_response(crate::anthropic::errors))
        .route_layer(from_fn_with_state(st.clone(), middleware::count));
    let mut app = api
        .merge(open)
        .merge(messages)
        .fallback(not_found)
        .method_not_allowed_fallback(|| async { Error::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(
            st.cfg.max_body_bytes.unwrap_or(MAX_BODY_CAP),
        ))
        .layer(from_fn(middleware::request_id));
    if !st.cfg.cors_origins.is_empty() {
        let origins = if st.cfg.cors_origins.iter().any(|o| o == "*") {
            AllowOrigin::any()
        } else {
            AllowOrigin::list(
                st.cfg
                    .cors_origins
                    .iter()
                    .filter_map(|o| HeaderValue::from_str(o).ok()),
            )
        };
        app = app.layer(
            CorsLayer::new()
                .allow_origin(origins)
                .allow_methods([Method::GET, Method::POST, Method::DELETE])
                .allow_headers(Any)
                .expose_headers([
                    header::HeaderName::from_static("x-request-id"),
                    header::HeaderName::from_static("server-timing"),
                    header::RETRY_AFTER,
                ]),
        );
    }
    app.with_state(st)
}

async fn not_found() -> Error {
    Error::NotFound {
        message: "no such route".into(),
        code: "not_found",
    }
}

/// The largest body accepted when neither `--max-body-bytes` nor a model
/// says otherwise.
pub const MAX_BODY_CAP: usize = 64 << 20;

/// Parses a JSON body; errors name the offending field's path.
pub(crate) fn parse<T: DeserializeOwned>(
    body: std::result::Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<T> {
    let bytes = body.map_err(|e| match e {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            Error::PayloadTooLarge { limit }
        }
        other => Error::bad(other.body_text(), "body"),
    })?;
    // Straight into the request type (no JSON tree beside it): the body is
    // the only other copy. The tree is built only to explain an error.
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    let err = match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(t) => {
            return de
                .end()
                .map(|()| t)
                .map_err(|e| Error::bad(format!("the body is not valid JSON: {e}"), "body"))
        }
        Err(e) if e.inner().is_syntax() || e.inner().is_eof() => {
            return Err(Error::bad(
                format!("the body is not valid JSON: {}", e.inner()),
                "body",
            ))
        }
        Err(e) => e,
    };
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let mut path = err.path().to_string();
    if path == "." {
        // Fields of flattened parts lose their path; the shared sampling
        // fields are the usual suspects, so look for the culprit there.
        if let Err(e) = serde_path_to_error::deserialize::<_, Sampling>(&value) {
            path = e.path().to_string();
        }
    }
    Err(Error::BadRequest {
        message: format!("invalid request body: {}", err.inner()),
        param: (path != ".").then_some(path),
        code: None,
    })
}

pub(crate) fn check_model(b: &Backend, model: Option<&str>) -> Result<()> {
    match model {
        Some(m) if !m.is_empty() && m != b.model_id => Err(Error::NotFound {
            message: format!(
                "the model '{m}' does not exist; this server serves '{}'",
                b.model_id
            ),
            code: "model_not_found",
        }),
        _ => Ok(()),
    }
}

/// Refuses (429) when the engine cannot take `n` more, before any
/// tokenization, with the wait the engine forecasts for a free slot; and
/// (400) an `n` that could never be taken, which no retry would cure.
fn admit(b: &Backend, n: Option<i64>) -> Result<()> {
    let want = n.unwrap_or(1).clamp(1, params::MAX_CHOICES as i64) as usize;
    let capacity = b.engine.capacity();
    if want > capacity {
        return Err(Error::BadRequest {
            message: format!(
                "n = {want} asks for more sequences than this server holds at once \
                 ({capacity}: --max-running plus --max-waiting)"
            ),
            param: Some("n".into()),
            code: None,
        });
    }
    if b.engine.room() < want {
        let retry_after = b.engine.retry_after();
        return Err(Error::Overloaded {
            message: format!(
                "the server is at capacity ({} requests waiting); retry in about {} ms",
                b.engine.waiting(),
                retry_after.as_millis()
            ),
            retry_after,
        });
    }
    Ok(())
}

fn token_text(b: &Backend) -> TokenText {
    let tok = b.tokenizer.clone();
    Arc::new(move |id| {
        let bytes = tok.token_bytes(id);
        if bytes.is_empty() {
            tok.piece(id)
        } else {
            String::from_utf8_lossy(bytes).into_owned()
        }
    })
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Internal(format!("planning task failed: {e}")))?
}

/// The shared path of both completion endpoints: parse, refuse unknown
/// models and overload before any work, plan on the blocking pool, run.
async fn complete<R: DeserializeOwned + Send + 'static>(
    st: AppState,
    rid: RequestId,
    body: std::result::Result<Bytes, BytesRejection>,
    kind: Kind,
    head: fn(&R) -> (Option<&str>, Option<i64>),
    plan: fn(&R, &Backend, &params::ServerLimits) -> Result<Plan>,
) -> Result<Response> {
    let req: R = parse(body, st.body_limit())?;
    let b = st.backend()?;
    let (model, n) = head(&req);
    check_model(&b, model)?;
    admit(&b, n)?;
    // Choices per prompt: usage counts each prompt once, as OpenAI does.
    let n_per_prompt = n.unwrap_or(1).max(1) as usize;
    let (b2, sl) = (b.clone(), st.cfg.limits);
    let field = match kind {
        Kind::Chat => "messages",
        Kind::Completion => "prompt",
    };
    // Planning, tokenizing and compiling grammars all run here, off the
    // async threads.
    let (plan, reqs) = blocking(move || {
        let mut p = plan(&req, &b2, &sl)?;
        let grammar_err = |e: hasten_engine::Error, at: &str| match e {
            hasten_engine::Error::Grammar(m) => Error::bad(format!("{at}: {m}"), at),
            e => Error::from(e).in_prompt_field(field),
        };
        for (at, g) in &p.schemas {
            b2.engine.check_grammar(g).map_err(|e| grammar_err(e, at))?;
        }
        let reqs = std::mem::take(&mut p.specs)
            .into_iter()
            .map(|s| {
                b2.engine
                    .validate(s)
                    .map_err(|e| grammar_err(e, p.grammar_field))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((p, reqs))
    })
    .await?;
    run(st, b, rid, kind, (plan, reqs), n_per_prompt).await
}

pub(crate) async fn chat(
    State(st): State<AppState>,
    Extension(rid): Extension<RequestId>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    complete::<ChatCompletionRequest>(
        st,
        rid,
        body,
        Kind::Chat,
        |r| (r.model.as_deref(), r.sampling.n),
        |r, b, sl| params::plan_chat(r, &b.template, &b.tokenizer, &b.engine.limits(), sl),
    )
    .await
}

async fn completions(
    State(st): State<AppState>,
    Extension(rid): Extension<RequestId>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    complete::<CompletionRequest>(
        st,
        rid,
        body,
        Kind::Completion,
        |r| (r.model.as_deref(), r.sampling.n),
        |r, b, sl| params::plan_completion(r, &b.tokenizer, &b.engine.limits(), sl),
    )
    .await
}

/// Counts a non-streaming request whose client left before the answer
/// (the handler future is dropped, and with it the engine streams).
struct Unary {
    st: AppState,
    armed: bool,
}

impl Drop for Unary {
    fn drop(&mut self) {
        if self.armed {
            self.st.unary_disconnects.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn collect(mut s: RequestStream) -> Collected {
    let mut c = Collected::default();
    loop {
        match s.recv().await {
            Some(ev) => {
                if c.push(ev) {
                    return c;
                }
            }
            None => {
                c.failed = Some("the engine stopped".into());
                return c;
            }
        }
    }
}

async fn run(
    st: AppState,
    b: Arc<Backend>,
    rid: RequestId,
    kind: Kind,
    (plan, reqs): (Plan, Vec<hasten_engine::Request>),
    n_per_prompt: usize,
) -> Result<Response> {
    if plan.stream && st.replays.contains(&rid.0) {
        return Err(Error::BadRequest {
            message: format!(
                "a stream with request id {} is live; use a fresh x-request-id",
                rid.0
            ),
            param: None,
            code: Some("duplicate_request_id"),
        });
    }
    let position = b.engine.waiting();
    let eta = b.engine.queue_eta();
    let mut streams = Vec::with_capacity(reqs.len());
    let prompt_tokens: Vec<u64> = reqs.iter().map(|r| r.spec().prompt.len() as u64).collect();
    let trace = crate::otel::current();
    for (i, req) in reqs.into_iter().enumerate() {
        // On an error the streams already submitted are dropped: cancelled.
        let s = b.engine.submit(req)?;
        streams.push(match trace.clone() {
            // The closure keeps the server span open until this choice ends.
            Some((o, cx)) => s.on_finish(move |f| o.finished(&cx, i, f)),
            None => s,
        });
    }
    let prefix = match kind {
        Kind::Chat => "chatcmpl",
        Kind::Completion => "cmpl",
    };
    let head = Header {
        id: format!("{prefix}-{}", rid.0),
        created: crate::unix_now(),
        model: b.model_id.clone(),
    };
    let text = token_text(&b);
    if plan.stream {
        let enc = StreamEncoder::new(
            kind,
            head,
            streams.len(),
            n_per_prompt,
            plan.include_usage,
            plan.logprobs,
            text,
        );
        let enc = if plan.continuous_usage {
            enc.with_continuous_usage(prompt_tokens)
        } else {
            enc
        };
        let enc = match &plan.output {
            Some(o) => enc.with_output(o),
            None => enc,
        };
        let first = vec![Frame::Comment(format!(
            "queued position={position} eta_ms={}",
            eta.as_millis()
        ))];
        let body = st
            .replays
            .start(rid.0, streams, enc, first, st.cfg.request_timeout);
        return Ok(Sse::new(body)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
            .into_response());
    }
    let mut guard = Unary {
        st: st.clone(),
        armed: true,
    };
    let all = futures_util::future::join_all(streams.into_iter().map(collect));
    let choices = match st.cfg.request_timeout {
        Some(t) => tokio::time::timeout(t, all)
            .await
            .map_err(|_| Error::Timeout(t))?,
        None => all.await,
    };
    guard.armed = false;
    if let Some(m) = choices.iter().find_map(|c| c.failed.clone()) {
        return Err(Error::Internal(m));
    }
    let timing = respond::overall_timing(&choices);
    let mut resp = match kind {
        Kind::Chat => Json(respond::chat_response(
            head,
            &choices,
            n_per_prompt,
            plan.logprobs,
            &text,
            plan.output.as_ref(),
        ))
        .into_response(),
        Kind::Completion => Json(respond::completion_response(
            head,
            &choices,
            n_per_prompt,
            plan.logprobs,
            &text,
        ))
        .into_response(),
    };
    if let Some(v) = timing.and_then(|t| HeaderValue::from_str(&respond::server_timing(&t)).ok()) {
        resp.headers_mut().insert("server-timing", v);
    }
    Ok(resp)
}

async fn resume(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response> {
    let last = match headers.get("last-event-id") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .ok_or_else(|| {
                    Error::bad(
                        "Last-Event-ID must be an event id this server sent",
                        "Last-Event-ID",
                    )
                })?,
        ),
    };
    let body = st
        .replays
        .resume(&id, last)
        .ok_or_else(|| Error::NotFound {
            message: format!(
                "no live stream with request id {id} (finished and forgotten, or never started)"
            ),
            code: "stream_not_found",
        })?;
    Ok(Sse::new(body)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
        .into_response())
}

fn card(b: &Backend) -> ModelCard {
    ModelCard {
        id: b.model_id.clone(),
        object: "model".into(),
        created: b.created,
        owned_by: "hasten".into(),
        max_model_len: Some(b.engine.limits().context_length as u64),
    }
}

async fn models(State(st): State<AppState>) -> Result<Json<ModelList>> {
    let b = st.backend()?;
    Ok(Json(ModelList {
        object: "list".into(),
        data: vec![card(&b)],
    }))
}

async fn model(State(st): State<AppState>, Path(id): Path<String>) -> Result<Json<ModelCard>> {
    let b = st.backend()?;
    check_model(&b, Some(&id))?;
    Ok(Json(card(&b)))
}

pub(crate) async fn tokenize(
    State(st): State<AppState>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<TokenizeResponse>> {
    let req: TokenizeRequest = parse(body, st.body_limit())?;
    let b = st.backend()?;
    check_model(&b, req.model.as_deref())?;
    let b2 = b.clone();
    let tokens = blocking(move || {
        let tok = &b2.tokenizer;
        let special = req.add_special_tokens.unwrap_or(true);
        let mut extra = req.extra.clone();
        match (&req.prompt, &req.messages) {
            (Some(p), None) => {
                params::check_extra(&extra, "")?;
                tok.encode(p, special && tok.add_bos, false)
                    .map_err(|e| Error::Internal(e.to_string()))
            }
            (None, Some(m)) => {
                let (msgs, how, vars, _) = params::template_input(m, &mut extra)?;
                params::check_extra(&extra, "")?;
                params::chat_prompt(&msgs, &b2.template, tok, how, &vars).map(|(t, _)| t)
            }
            _ => Err(Error::bad(
                "give exactly one of prompt and messages",
                "prompt",
            )),
        }
    })
    .await?;
    Ok(Json(TokenizeResponse {
        count: tokens.len() as u64,
        tokens,
        max_model_len: b.engine.limits().context_length as u64,
    }))
}

async fn detokenize(
    State(st): State<AppState>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<DetokenizeResponse>> {
    let req: DetokenizeRequest = parse(body, st.body_limit())?;
    let b = st.backend()?;
    check_model(&b, req.model.as_deref())?;
    let vocab = b.engine.limits().vocab_size;
    if let Some(t) = req.tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(Error::bad(
            format!("token id {t} is outside the vocabulary of {vocab}"),
            "tokens",
        ));
    }
    Ok(Json(DetokenizeResponse {
        prompt: b.tokenizer.decode(&req.tokens),
    }))
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

async fn ready(State(st): State<AppState>) -> Result<Json<serde_json::Value>> {
    if st.draining.load(Ordering::Relaxed) {
        return Err(Error::ShuttingDown);
    }
    st.backend()?;
    Ok(Json(serde_json::json!({"status": "ready"})))
}

async fn metrics(State(st): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        prom::render(&st),
    )
        .into_response()
}
