//! The web page (`/` and `/ui/...`, compiled into the binary; `--no-ui`
//! leaves them out) and `GET /info`, the model card it shows: what was
//! loaded, how it runs (context, KV cache, kernel tier, threads).
//!
//! The page is plain ES modules under `crates/server/ui/` with no build
//! step; third-party files are pinned copies in `ui/vendor/` (see
//! `scripts/vendor-ui.sh`).

use crate::error::{Error, Result};
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// What `GET /info` says about the loaded model and how it runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModelInfo {
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_mb: Option<f64>,
    /// How the weights are stored (quantization and bits per weight).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layers: Option<usize>,
    pub context_length: usize,
    pub kv_tokens: usize,
    pub kv_type: String,
    pub kv_bytes_per_token: usize,
    pub speculation: String,
    pub threads: usize,
    /// The kernel tier that runs (`avx512`, `avx2`, `neon`, `scalar`).
    pub kernels: String,
}

/// One file of the page: its path under `/ui/`, type and bytes.
struct Asset {
    path: &'static str,
    mime: &'static str,
    bytes: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $mime:expr) => {
        Asset {
            path: $path,
            mime: $mime,
            bytes: include_bytes!(concat!("../ui/", $path)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.css", CSS),
    asset!("errors.js", JS),
    asset!("app.js", JS),
    asset!("sse.js", JS),
    asset!("chat.js", JS),
    asset!("store.js", JS),
    asset!("markdown.js", JS),
    asset!("timeline.js", JS),
    asset!("server.js", JS),
    asset!("bench.js", JS),
    asset!("vendor/uPlot.iife.min.js", JS),
    asset!("vendor/uPlot.min.css", CSS),
    asset!("vendor/marked.esm.js", JS),
    asset!("vendor/highlight.core.min.js", JS),
    asset!("vendor/highlight.languages.js", JS),
    asset!("vendor/hl-github.min.css", CSS),
    asset!("vendor/hl-github-dark.min.css", CSS),
];

/// Bytes the page adds to the binary.
pub fn asset_bytes() -> usize {
    ASSETS.iter().map(|a| a.bytes.len()).sum()
}

/// The page's scripts come only from this server, and model output it
/// renders can neither run scripts nor load anything from elsewhere.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

fn serve_asset(path: &str) -> Response {
    let Some(a) = ASSETS.iter().find(|a| a.path == path) else {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    };
    let mut r = a.bytes.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(a.mime));
    // Small files from loopback or a LAN: always revalidate, so an upgraded
    // server never runs with yesterday's scripts.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

pub async fn index() -> Response {
    serve_asset("index.html")
}

pub async fn file(Path(path): Path<String>) -> Response {
    serve_asset(&path)
}

pub async fn info(State(st): State<AppState>) -> Result<Json<ModelInfo>> {
    Ok(Json(st.backend()?.info.clone()))
}

/// See [`crate::Backend::estimator`]: returns the estimate as JSON, or why
/// it could not be made.
pub type Estimator =
    std::sync::Arc<dyn Fn() -> std::result::Result<serde_json::Value, String> + Send + Sync>;

/// `POST /info/estimate`: the estimate for this model on this machine,
/// probed once (a few seconds on every thread; concurrent calls wait for
/// the first) and then kept.
pub async fn estimate(State(st): State<AppState>) -> Result<Json<serde_json::Value>> {
    let b = st.backend()?;
    let Some(f) = b.estimator.clone() else {
        return Err(Error::NotFound {
            message: "this server has no estimator".into(),
            code: "not_found",
        });
    };
    let mut kept = b.estimate.lock().await;
    if let Some(v) = kept.as_ref() {
        return Ok(Json(v.clone()));
    }
    let v = tokio::task::spawn_blocking(move || f())
        .await
        .map_err(|e| Error::Internal(format!("the estimate panicked: {e}")))?
        .map_err(|e| Error::Internal(format!("estimating: {e}")))?;
    *kept = Some(v.clone());
    Ok(Json(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_file_is_served_and_the_assets_stay_small() {
        // Every file the page references is in the table (a missing one
        // is a console error in the browser tests too).
        let html = std::str::from_utf8(ASSETS[0].bytes).unwrap();
        for a in ASSETS.iter().skip(1) {
            let referenced = html.contains(&format!("/ui/{}", a.path))
                || ASSETS.iter().any(|b| {
                    std::str::from_utf8(b.bytes).is_ok_and(|t| t.contains(&format!("./{}", a.path)))
                });
            assert!(referenced, "{} is never loaded", a.path);
        }
        assert!(asset_bytes() < 500_000, "{} bytes", asset_bytes());
        assert_eq!(serve_asset("nope.js").status(), StatusCode::NOT_FOUND);
        let r = serve_asset("app.js");
        assert_eq!(r.headers()[header::CONTENT_TYPE], JS);
        assert!(r.headers().contains_key(header::CONTENT_SECURITY_POLICY));
    }
}
