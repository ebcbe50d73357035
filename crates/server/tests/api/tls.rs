//! HTTPS without a proxy, on a real loopback socket with a certificate made
//! in the test: a streamed chat over TLS for a client that trusts the CA,
//! a clear failure for one that does not and for plain HTTP sent to the TLS
//! port, a silent handshake cut off at the idle timeout, reloading a new
//! certificate in place, and start-up refusals that name the bad file.

use crate::certs;
use crate::common;

use common::live::Live;
use common::*;
use hasten_server::listen::ConnConfig;
use hasten_server::tls::Tls;
use hasten_server::ServerConfig;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

fn trusting(ca_pem: &str) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
}

async fn start(pki: &certs::TestPki, dir: &std::path::Path) -> (Live, Arc<Tls>) {
    let [_, cert, key] = certs::write(pki, dir);
    let tls = Arc::new(Tls::load(&cert, &key).unwrap());
    let conns = ConnConfig {
        idle_timeout: Duration::from_secs(1),
        ..ConnConfig::default()
    };
    let live = Live::start_opts(
        ServerConfig::default(),
        engine_config(),
        model_path(),
        conns,
        Some(tls.clone()),
        trusting(&pki.ca_pem),
    )
    .await;
    (live, tls)
}

/// The error and its sources in one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(&format!(": {c}"));
        cur = c.source();
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_streams_over_https_and_strangers_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let pki = certs::make("hasten test CA");
    let (live, _) = start(&pki, dir.path()).await;
    assert_eq!(live.scheme, "https");

    // A client that trusts the CA streams a chat.
    let req = json!({"messages": [{"role": "user", "content": "Hi"}],
                     "max_tokens": 8, "stream": true});
    let r = live.post("/v1/chat/completions", &req).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.version(), reqwest::Version::HTTP_11);
    let body = r.text().await.unwrap();
    assert!(
        body.contains("\"finish_reason\":\"length\"") && body.ends_with("data: [DONE]\n\n"),
        "{body}"
    );

    // One that does not gets a certificate error, not a response.
    let stranger = reqwest::Client::new();
    let e = stranger.get(live.url("/health")).send().await.unwrap_err();
    let msg = chain(&e);
    assert!(
        msg.contains("certificate") && msg.contains("UnknownIssuer"),
        "{msg}"
    );

    // Plain HTTP to the TLS port is answered with a 400 saying what to do.
    let plain = format!("http://{}/health", live.addr);
    let r = reqwest::get(&plain).await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("https://"));

    // Both refusals are counted (by the connection task, which may finish
    // after the client has its answer: a bounded wait); the server still
    // serves.
    let mut page = String::new();
    for _ in 0..200 {
        page = live.get("/metrics").await.text().await.unwrap();
        if metric(&page, "hasten_connections_tls_failed_total") >= 2.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        metric(&page, "hasten_connections_tls_failed_total") >= 2.0,
        "{page}"
    );
    assert_eq!(live.get("/health").await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_handshake_is_cut_off_at_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pki = certs::make("hasten test CA");
    let (live, _) = start(&pki, dir.path()).await;
    let mut s = tokio::net::TcpStream::connect(live.addr).await.unwrap();
    let t0 = Instant::now();
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    let waited = t0.elapsed();
    assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "{r:?}");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(2500),
        "{waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_certificate_serves_new_connections() {
    let dir = tempfile::tempdir().unwrap();
    let old = certs::make("old CA");
    let (live, tls) = start(&old, dir.path()).await;
    let new = certs::make("new CA");
    let new_client = trusting(&new.ca_pem).build().unwrap();
    assert!(new_client.get(live.url("/health")).send().await.is_err());

    // A broken pair is refused and the old certificate stays.
    std::fs::write(dir.path().join("key.pem"), &new.key_pem).unwrap();
    let e = tls.reload().unwrap_err().to_string();
    assert!(e.contains("does not fit the certificate"), "{e}");
    assert_eq!(live.get("/health").await.status(), 200);

    certs::write(&new, dir.path());
    tls.reload().unwrap();
    let r = new_client.get(live.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // New connections from a client that trusts only the old CA now fail.
    assert!(live.http.get(live.url("/health")).send().await.is_err());
}

#[test]
fn bad_files_are_refused_with_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let pki = certs::make("hasten test CA");
    let [ca, cert, key] = certs::write(&pki, dir.path());
    let missing = dir.path().join("nope.pem");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let cases = [
        (&missing, &key, "reading the TLS certificate"),
        (&cert, &missing, "reading the TLS key"),
        (&empty, &key, "no PEM `CERTIFICATE` block"),
        (&cert, &empty, "no PEM private key"),
        (&cert, &cert, "no PEM private key"),
        // The CA's certificate with the server's key.
        (&ca, &key, "does not fit the certificate"),
    ];
    for (c, k, want) in cases {
        let e = Tls::load(c, k).unwrap_err().to_string();
        assert!(e.starts_with("TLS: ") && e.contains(want), "{e}");
    }
}
