//! Per-request layers: the request id (`x-request-id`, echoed when the
//! client sends a sane one, generated otherwise), API-key checks in
//! constant time, and response counting (and a log line) by route and status.

use crate::error::Error;
use crate::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The id of the request being handled (in request extensions).
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// Responses by (route, status).
#[derive(Debug, Default)]
pub struct HttpCounters {
    pub by_route: Mutex<BTreeMap<(String, u16), u64>>,
}

fn sane(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

pub fn new_request_id() -> String {
    format!(
        "req-{:016x}{:08x}",
        rand::random::<u64>(),
        rand::random::<u32>()
    )
}

pub async fn request_id(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|s| sane(s))
        .map_or_else(new_request_id, str::to_owned);
    req.extensions_mut().insert(RequestId(id.clone()));
    let mut resp = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// Compares without an early exit, so timing does not reveal a prefix.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    diff == 0
}

/// Requires `Authorization: Bearer KEY` with a configured key (every key is
/// compared, so timing does not reveal which one nearly matched).
pub async fn api_key(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if st.cfg.api_keys.is_empty() {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        // Anthropic's clients send the key as `x-api-key`.
        .or_else(|| req.headers().get("x-api-key").and_then(|v| v.to_str().ok()))
        .unwrap_or("")
        .trim();
    let mut ok = false;
    for k in &st.cfg.api_keys {
        ok |= ct_eq(given.as_bytes(), k.as_bytes());
    }
    if ok {
        next.run(req).await
    } else {
        Error::Unauthorized.into_response()
    }
}

/// Reads the request body under the server's size limit and body deadline
/// (a slow-loris body is cut off with 408), refusing by `Content-Length`
/// before reading a byte; handlers then see the buffered body.
pub async fn body_deadline(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let limit = st.body_limit();
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Error::PayloadTooLarge { limit }.into_response();
    }
    let bytes =
        match tokio::time::timeout(st.cfg.body_timeout, axum::body::to_bytes(body, limit)).await {
            Err(_) => return Error::BodyTimeout(st.cfg.body_timeout).into_response(),
            Ok(Err(e)) => {
                let too_large = std::error::Error::source(&e)
                    .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
                return if too_large {
                    Error::PayloadTooLarge { limit }.into_response()
                } else {
                    Error::bad(format!("reading the request body: {e}"), "body").into_response()
                };
            }
            Ok(Ok(b)) => b,
        };
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

pub async fn count(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |m| m.as_str())
        .to_owned();
    let (method, t0) = (req.method().clone(), std::time::Instant::now());
    let id = req
        .extensions()
        .get::<RequestId>()
        .map(|r| r.0.clone())
        .unwrap_or_default();
    // A server span for the API's routes (not probes, metrics or the page).
    let traced = st.otel.as_ref().filter(|_| {
        route.starts_with("/v1/")
            || route.starts_with("/tokenize")
            || route.starts_with("/detokenize")
    });
    let resp = match traced {
        Some(o) => {
            let cx = o.start(req.headers(), format!("{method} {route}"), &id);
            let mut resp = crate::otel::scope((o.clone(), cx.clone()), next.run(req)).await;
            crate::otel::Otel::inject(&cx, resp.headers_mut());
            crate::otel::Otel::status(&cx, resp.status().as_u16());
            resp
        }
        None => next.run(req).await,
    };
    let mut resp = resp;
    if let Some(v) = st
        .cfg
        .instance
        .as_deref()
        .and_then(|i| HeaderValue::from_str(i).ok())
    {
        resp.headers_mut().insert("x-hasten-instance", v);
    }
    let status = resp.status().as_u16();
    // For streams this is the time to the response head, not to the end.
    tracing::info!(target: "hasten::http", "{id} {method} {route} {status} {:.1} ms", t0.elapsed().as_secs_f64() * 1e3);
    let mut m = st.http.by_route.lock().unwrap_or_else(|p| p.into_inner());
    *m.entry((route, status)).or_default() += 1;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_equality_is_equality() {
        assert!(ct_eq(b"secret", b"secret"));
        assert!(!ct_eq(b"secret", b"secreT"));
        assert!(!ct_eq(b"secret", b"secret2"));
        assert!(!ct_eq(b"", b"x"));
        assert!(ct_eq(b"", b""));
    }

    #[test]
    fn only_sane_ids_are_echoed() {
        assert!(sane("abc-123_x.y:z"));
        assert!(!sane("has space"));
        assert!(!sane(""));
        assert!(!sane(&"x".repeat(129)));
        assert!(sane(&new_request_id()));
    }
}
