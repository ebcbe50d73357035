//! Re-encoding the chat path's SSE stream for another API's events (the
//! Messages and Responses adapters): each `data:` payload goes through a
//! converter, whose output (whole SSE frames) is sent on; comments pass.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use futures_util::StreamExt;

/// `resp`'s SSE body with every `data:` payload replaced by `convert(payload)`
/// (frames that convert to nothing are dropped). Comments pass as they are:
/// the keep-alives and the `: queued` / `: prefill` notes (SSE readers, the
/// SDKs' included, skip them).
pub fn rewrite_sse(
    resp: Response,
    convert: impl FnMut(&str) -> String + Send + 'static,
) -> Response {
    let body = resp.into_body().into_data_stream();
    let state = (body, String::new(), convert);
    let out = futures_util::stream::unfold(state, |(mut body, mut buf, mut convert)| async move {
        loop {
            // Whole frames first; then more bytes.
            if let Some(end) = buf.find("\n\n") {
                let frame: String = buf.drain(..end + 2).collect();
                let text: String = frame
                    .lines()
                    .filter_map(|l| match l.strip_prefix("data:") {
                        Some(d) => Some(convert(d.trim_start())),
                        None => l.starts_with(':').then(|| format!("{l}\n\n")),
                    })
                    .collect();
                if text.is_empty() {
                    continue;
                }
                return Some((
                    Ok::<_, std::convert::Infallible>(Bytes::from(text)),
                    (body, buf, convert),
                ));
            }
            match body.next().await {
                Some(Ok(chunk)) => buf.push_str(&String::from_utf8_lossy(&chunk)),
                _ => return None,
            }
        }
    });
    let mut r = Response::new(Body::from_stream(out));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
