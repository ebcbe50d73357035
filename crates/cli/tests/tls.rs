//! `hasten serve --tls-cert/--tls-key` with `hasten complete --ca-cert`:
//! the client verifies the certificate against the given CA (and fails
//! clearly without it), and SIGHUP swaps in a new certificate for new
//! connections while a bad one is refused and the old one kept. API keys
//! never reach the log or the metrics.

#[path = "../../server/tests/common/certs.rs"]
mod certs;
mod common;

use common::{hasten, Serve};
use std::path::Path;

/// `hasten complete` over the server's URL trusting `ca` (or only the web roots).
fn complete(s: &Serve, ca: Option<&Path>) -> std::process::Output {
    let url = s.url();
    let mut args = vec!["complete", "--url", &url, "--retries", "0", "-n", "4"];
    let ca = ca.map(|p| p.to_str().unwrap().to_owned());
    if let Some(ca) = &ca {
        args.extend(["--ca-cert", ca]);
    }
    args.push("Hello");
    hasten(&args)
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn https_with_a_private_ca_and_certificate_reload_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let [ca, cert, key] = certs::write(&certs::make("old CA"), dir.path());
    // Kept aside: the next pair's files replace these.
    let old_ca = dir.path().join("old-ca.pem");
    std::fs::rename(ca, &old_ca).unwrap();
    let (cert_s, key_s) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let s = Serve::start(&["--tls-cert", cert_s, "--tls-key", key_s]);
    assert_eq!(s.scheme, "https");

    let o = complete(&s, Some(&old_ca));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!o.stdout.is_empty());
    // Without the CA: one clear line, not retried (it would not heal).
    let t0 = std::time::Instant::now();
    let o = hasten(&["complete", "--url", &s.url(), "-n", "4", "Hello"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("TLS certificate")
            && err.contains("UnknownIssuer")
            && err.contains("--ca-cert"),
        "{err}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_millis(900),
        "retried? {:?}",
        t0.elapsed()
    );

    // A key that does not fit: refused on SIGHUP, the old pair still served.
    let new = certs::make("new CA");
    std::fs::write(&key, &new.key_pem).unwrap();
    let n = s.log.lock().unwrap().len();
    s.signal("HUP");
    s.wait_log(n, "still serving the previous certificate");
    assert!(complete(&s, Some(&old_ca)).status.success());

    // The whole new pair: new connections get it.
    let [new_ca, ..] = certs::write(&new, dir.path());
    let n = s.log.lock().unwrap().len();
    s.signal("HUP");
    s.wait_log(n, "reloaded the TLS certificate");
    let o = complete(&s, Some(&new_ca));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(complete(&s, Some(&old_ca)).status.code(), Some(1));
}

#[test]
fn api_keys_never_reach_the_log_or_the_metrics() {
    let s = Serve::start_with_env(&[], &[("HASTEN_API_KEY", "sk-right-7f3a")]);
    let url = s.url();
    for key in ["sk-right-7f3a", "sk-wrong-91c2"] {
        let o = hasten(&[
            "complete",
            "--url",
            &url,
            "--api-key",
            key,
            "--retries",
            "0",
            "-n",
            "2",
            "Hi",
        ]);
        assert_eq!(
            o.status.success(),
            key.starts_with("sk-right"),
            "{}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains(key), "{}", stderr(&o));
    }
    let (_, metrics) = common::http(&s.addr, "GET", "/metrics", "").unwrap();
    assert!(
        metrics.contains("hasten_connections_accepted_total"),
        "{metrics}"
    );
    let log = s.log.lock().unwrap().join("\n");
    assert!(log.contains("401"), "{log}");
    for text in [&metrics, &log] {
        assert!(
            !text.contains("sk-right") && !text.contains("sk-wrong"),
            "{text}"
        );
    }
}
