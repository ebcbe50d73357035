//! `hf:` references against a local server imitating the Hub's routes
//! (`/api/models/{repo}/revision/{rev}` and `/{repo}/resolve/{rev}/{file}`
//! with ranges): resumed download after a dropped connection, cache hits
//! without network, offline mode, gated files, safetensors snapshots.

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hasten_hub::{fetch, Error, HubRef, Options};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

struct Hub {
    repos: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    gated: Vec<String>,
    drop_next_download: AtomicBool,
    resumed: AtomicUsize,
}

fn authorized(hub: &Hub, repo: &str, h: &HeaderMap) -> bool {
    !hub.gated.iter().any(|g| g == repo)
        || h.get("authorization").and_then(|v| v.to_str().ok()) == Some("Bearer hf_secret")
}

async fn info(
    State(hub): State<Arc<Hub>>,
    Path((owner, name, _rev)): Path<(String, String, String)>,
    h: HeaderMap,
) -> Response {
    let repo = format!("{owner}/{name}");
    if !authorized(&hub, &repo, &h) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    match hub.repos.get(&repo) {
        None => StatusCode::NOT_FOUND.into_response(),
        Some(files) => {
            let siblings: Vec<_> = files
                .keys()
                .map(|f| serde_json::json!({"rfilename": f}))
                .collect();
            axum::Json(serde_json::json!({"id": repo, "sha": SHA, "siblings": siblings}))
                .into_response()
        }
    }
}

async fn resolve(
    State(hub): State<Arc<Hub>>,
    Path((owner, name, _rev, file)): Path<(String, String, String, String)>,
    h: HeaderMap,
) -> Response {
    let repo = format!("{owner}/{name}");
    if !authorized(&hub, &repo, &h) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Some(data) = hub.repos.get(&repo).and_then(|r| r.get(&file)) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let range = h
        .get("range")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("bytes=0-");
    let spec = range.trim_start_matches("bytes=");
    let (a, b) = spec.split_once('-').unwrap();
    let start: usize = a.parse().unwrap();
    let end: usize = if b.is_empty() {
        data.len() - 1
    } else {
        b.parse().unwrap()
    };
    if start > 0 {
        hub.resumed.fetch_add(1, Ordering::Relaxed);
    }
    let part = data[start..=end].to_vec();
    let etag = format!(
        "\"{:x}-{}\"",
        data.iter().map(|&x| x as u64).sum::<u64>(),
        data.len()
    );
    let headers = [
        ("x-repo-commit", SHA.to_owned()),
        ("etag", etag),
        (
            "content-range",
            format!("bytes {start}-{end}/{}", data.len()),
        ),
        ("accept-ranges", "bytes".to_owned()),
    ];
    let whole_download = b.is_empty() && start == 0 && part.len() > 1;
    if whole_download && hub.drop_next_download.swap(false, Ordering::Relaxed) {
        // Half the file, then the connection breaks.
        let half = Bytes::from(part[..part.len() / 2].to_vec());
        let chunks = futures_util::stream::unfold(0, move |i| {
            let half = half.clone();
            async move {
                match i {
                    0 => Some((Ok(half), 1)),
                    1 => {
                        // Let the first half reach the client before the break.
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        Some((Err(std::io::Error::other("dropped")), 2))
                    }
                    _ => None,
                }
            }
        });
        return (
            StatusCode::PARTIAL_CONTENT,
            headers,
            Body::from_stream(chunks),
        )
            .into_response();
    }
    (StatusCode::PARTIAL_CONTENT, headers, part).into_response()
}

/// Starts the imitation Hub; returns its base URL.
fn serve(hub: Arc<Hub>) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            let app = Router::new()
                .route("/api/models/{owner}/{name}/revision/{rev}", get(info))
                .route("/{owner}/{name}/resolve/{rev}/{*file}", get(resolve))
                .with_state(hub);
            axum::serve(l, app).await.unwrap();
        });
    });
    format!("http://{}", rx.recv().unwrap())
}

fn blob(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn hub() -> Arc<Hub> {
    let mut repos = BTreeMap::new();
    let gguf: BTreeMap<String, Vec<u8>> = [
        ("README.md".to_string(), b"# tiny".to_vec()),
        ("tiny-Q8_0.gguf".to_string(), blob(300_000, 1)),
        ("tiny-Q4_K_M.gguf".to_string(), blob(200_000, 2)),
    ]
    .into();
    repos.insert("acme/tiny-GGUF".to_string(), gguf);
    let st: BTreeMap<String, Vec<u8>> = [
        ("config.json".to_string(), b"{}".to_vec()),
        ("tokenizer.json".to_string(), b"{}".to_vec()),
        ("model.safetensors".to_string(), blob(1000, 3)),
        ("README.md".to_string(), b"x".to_vec()),
    ]
    .into();
    repos.insert("acme/tiny".to_string(), st.clone());
    repos.insert("acme/gated".to_string(), st);
    Arc::new(Hub {
        repos,
        gated: vec!["acme/gated".into()],
        drop_next_download: AtomicBool::new(false),
        resumed: AtomicUsize::new(0),
    })
}

fn opts(endpoint: &str, cache: &std::path::Path) -> Options {
    Options {
        endpoint: endpoint.to_owned(),
        token: None,
        cache: cache.to_owned(),
        offline: false,
        progress: false,
        retries: 3,
    }
}

fn r(s: &str) -> HubRef {
    HubRef::parse(s).unwrap().unwrap()
}

#[test]
fn a_dropped_download_resumes_and_then_the_cache_answers() {
    let h = hub();
    let url = serve(h.clone());
    let cache = tempfile::tempdir().unwrap();
    h.drop_next_download.store(true, Ordering::Relaxed);
    let p = fetch(&r("hf:acme/tiny-GGUF:Q8_0"), &opts(&url, cache.path())).unwrap();
    assert_eq!(
        std::fs::read(&p).unwrap(),
        h.repos["acme/tiny-GGUF"]["tiny-Q8_0.gguf"]
    );
    assert!(
        h.resumed.load(Ordering::Relaxed) >= 1,
        "the second attempt asked for the rest only"
    );
    assert!(
        p.starts_with(
            cache
                .path()
                .join("models--acme--tiny-GGUF")
                .join("snapshots")
                .join(SHA)
        ),
        "{p:?}"
    );

    // Cache hit without network: an exact file name needs no listing.
    let dead = opts("http://127.0.0.1:9", cache.path());
    assert_eq!(
        fetch(&r("hf:acme/tiny-GGUF:tiny-Q8_0.gguf"), &dead).unwrap(),
        p
    );
    // Offline mode: the cache only, quantization names included.
    let offline = Options {
        offline: true,
        ..dead.clone()
    };
    assert_eq!(fetch(&r("hf:acme/tiny-GGUF:Q8_0"), &offline).unwrap(), p);
    match fetch(&r("hf:acme/tiny-GGUF:Q4_K_M"), &offline) {
        Err(e @ Error::NotFound { .. }) => assert!(e.to_string().contains("Q4_K_M"), "{e}"),
        other => panic!("{other:?}"),
    }
    match fetch(&r("hf:acme/other"), &offline) {
        Err(e @ Error::NotCached { .. }) => assert!(e.to_string().contains("offline"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ambiguous_and_missing_quantizations_say_what_exists() {
    let url = serve(hub());
    let cache = tempfile::tempdir().unwrap();
    let o = opts(&url, cache.path());
    match fetch(&r("hf:acme/tiny-GGUF"), &o) {
        Err(e @ Error::Ambiguous { .. }) => {
            assert!(e.to_string().contains("tiny-Q4_K_M.gguf"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        fetch(&r("hf:acme/tiny-GGUF:IQ2_XS"), &o),
        Err(Error::NotFound { .. })
    ));
    let e = fetch(&r("hf:acme/nothing"), &o).unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
}

#[test]
fn safetensors_checkpoints_and_gated_repositories() {
    let url = serve(hub());
    let cache = tempfile::tempdir().unwrap();
    let o = opts(&url, cache.path());
    let dir = fetch(&r("hf:acme/tiny"), &o).unwrap();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        assert!(dir.join(f).exists(), "{f} in {dir:?}");
    }
    assert!(!dir.join("README.md").exists());
    match fetch(&r("hf:acme/gated"), &o) {
        Err(e @ Error::Unauthorized { .. }) => assert!(e.to_string().contains("HF_TOKEN"), "{e}"),
        other => panic!("{other:?}"),
    }
    let with_token = Options {
        token: Some("hf_secret".into()),
        ..o
    };
    assert!(fetch(&r("hf:acme/gated"), &with_token)
        .unwrap()
        .join("model.safetensors")
        .exists());
}
