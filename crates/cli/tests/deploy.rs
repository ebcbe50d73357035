//! The Kubernetes manifests and the endpoint picker's configuration in
//! `deploy/` against this binary: the Deployment's arguments start a
//! server (the built-in model, as the image serves it), its probe paths
//! answer, its port is the image's, and every metric the picker's engine
//! config names is on `/metrics`. (`scripts/check-deploy.sh` validates the
//! same files against the Kubernetes and Inference Extension schemas.)

mod common;

use common::{http, Serve};
use std::path::PathBuf;

fn deploy(file: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The `- item` lines of the YAML list under `key:` (indented block).
fn list_under(yaml: &str, key: &str) -> Vec<String> {
    let mut lines = yaml.lines().skip_while(|l| l.trim() != key).skip(1);
    let mut out = Vec::new();
    for l in lines.by_ref() {
        let t = l.trim();
        if t.starts_with('#') {
            continue;
        }
        match t.strip_prefix("- ") {
            Some(item) => out.push(item.trim_matches('"').to_owned()),
            None => break,
        }
    }
    out
}

#[test]
fn the_deployments_arguments_serve_and_the_picker_finds_its_metrics() {
    let manifest = deploy("kubernetes/deployment.yaml");
    let args = list_under(&manifest, "args:");
    assert_eq!(args[0], "serve", "{args:?}");
    // The listening address and port are the pod's; the test keeps to
    // loopback and a free port, one model thread.
    let mut rest = Vec::new();
    for a in &args[1..] {
        match a.split_once('=') {
            Some(("--host", h)) => assert_eq!(h, "0.0.0.0"),
            Some(("--port", p)) => {
                assert!(manifest.contains(&format!("containerPort: {p}")));
                assert!(deploy("../Dockerfile").contains(&format!("EXPOSE {p}")));
            }
            Some(("--threads", t)) => {
                assert_eq!(t, "$(HASTEN_THREADS)");
                rest.push("--threads=1".to_owned());
            }
            _ => rest.push(a.clone()),
        }
    }
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    let s = Serve::start(&rest);
    for path in ["/ready", "/health"] {
        assert!(manifest.contains(&format!("path: {path}")), "{path}");
        assert_eq!(http(&s.addr, "GET", path, "").unwrap().0, 200, "{path}");
    }
    // The endpoint picker's engine config (deploy/epp-values.yaml) names
    // hasten's metrics; each is served.
    let (_, page) = http(&s.addr, "GET", "/metrics", "").unwrap();
    let values = deploy("epp-values.yaml");
    let specs: Vec<&str> = values
        .lines()
        .filter_map(|l| l.trim().split_once("Spec: "))
        .map(|(_, name)| name.trim())
        .collect();
    assert_eq!(specs.len(), 4, "{specs:?}");
    for name in specs {
        assert!(
            page.lines()
                .any(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{'])),
            "{name} is not on /metrics"
        );
    }
}
