//! Two replicas on loopback behind `hasten bench --url A,B`: a replica
//! killed mid-run (SIGKILL) and restarted loses no request (failover before
//! output, continuation on the other replica after) and the report shows
//! the failover; a replica draining (SIGTERM) finishes its stream while new
//! requests go to the other.

mod common;

use common::Serve;
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `hasten bench` against `urls` (comma-separated), writing `out`.
fn bench(urls: &str, out: &std::path::Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_hasten"))
        .args(["bench", "--url", urls, "--warmup", "0", "--input-len", "8"])
        .args(["--retries", "6", "--timeout", "60", "--out"])
        .arg(out)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The run's records, after `child` exited successfully; its report.
fn finish(child: Child, out: &std::path::Path) -> (Vec<Value>, String) {
    let o = child.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let run: Value = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    let records = run["levels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l["records"].as_array().unwrap().clone())
        .collect();
    (records, report)
}

/// Waits (at most 30 s) until `cond` holds for `s`'s metrics.
fn wait_metric(s: &Serve, name: &str, cond: impl Fn(f64) -> bool) {
    let t0 = Instant::now();
    while !cond(s.metric(name)) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{name} never got there"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_replica_killed_mid_run_and_restarted_loses_no_request() {
    let mut a = Serve::start(&["--threads", "1"]);
    let b = Serve::start(&["--threads", "1"]);
    let port_a = a.addr.rsplit(':').next().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.json");
    let urls = format!("http://{},http://{}", a.addr, b.addr);
    let run = bench(
        &urls,
        &out,
        &["--concurrency", "4", "-n", "24", "--output-len", "48"],
    );
    // Kill A once it has answered some and is in the middle of others.
    wait_metric(&a, "hasten_requests_finished_total", |n| n >= 2.0);
    a.signal("KILL");
    a.wait_exit(Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    let _a2 = Serve::start(&["--threads", "1", "--port", &port_a]);
    let (records, report) = finish(run, &out);
    eprintln!("{report}");
    assert_eq!(records.len(), 24, "{report}");
    for r in &records {
        assert_eq!(r["ok"], true, "{r}");
        // Every answer whole, nothing repeated across a continuation.
        assert_eq!(r["output_tokens"], 48, "{r}");
    }
    let failovers: u64 = records
        .iter()
        .map(|r| r["failovers"].as_u64().unwrap())
        .sum();
    assert!(failovers >= 1, "{report}");
    for addr in [&a.addr, &b.addr] {
        assert!(
            records
                .iter()
                .any(|r| r["endpoint"].as_str().unwrap().contains(addr.as_str())),
            "no answer from {addr}"
        );
        assert!(report.contains(addr.as_str()), "{report}");
    }
    assert!(
        report.contains("| replica | ok/failed | failovers |"),
        "{report}"
    );
}

#[test]
fn a_draining_replica_finishes_its_stream_while_new_requests_go_elsewhere() {
    let a = Serve::start(&["--threads", "1"]);
    let mut b = Serve::start(&["--threads", "1", "--shutdown-timeout", "60"]);
    let dir = tempfile::tempdir().unwrap();
    let (long_out, short_out) = (dir.path().join("long.json"), dir.path().join("short.json"));
    let long = bench(
        &format!("http://{}", b.addr),
        &long_out,
        &["--concurrency", "1", "-n", "1", "--output-len", "400"],
    );
    wait_metric(&b, "hasten_generation_tokens_total", |n| n >= 8.0);
    b.signal("TERM");
    // B refuses new work while it drains; the client fails over to A.
    let short = bench(
        &format!("http://{},http://{}", b.addr, a.addr),
        &short_out,
        &["--concurrency", "2", "-n", "6", "--output-len", "8"],
    );
    let (records, report) = finish(short, &short_out);
    assert_eq!(records.len(), 6, "{report}");
    for r in &records {
        assert_eq!(r["ok"], true, "{r}");
        assert!(r["endpoint"].as_str().unwrap().contains(&a.addr), "{r}");
    }
    let (records, report) = finish(long, &long_out);
    assert_eq!(records.len(), 1, "{report}");
    assert_eq!(records[0]["ok"], true, "{}", records[0]);
    assert_eq!(records[0]["output_tokens"], 400, "{}", records[0]);
    assert!(b.wait_exit(Duration::from_secs(30)).success());
}

/// A gateway stand-in on loopback: each connection goes to the next of
/// `upstreams` in turn, bytes copied both ways (an L4 load balancer).
fn round_robin(upstreams: Vec<String>) -> String {
    use std::net::{Shutdown, TcpListener, TcpStream};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for (i, down) in l.incoming().enumerate() {
            let Ok(down) = down else { return };
            let Ok(up) = TcpStream::connect(&upstreams[i % upstreams.len()]) else {
                continue;
            };
            for (mut from, mut to) in [
                (down.try_clone().unwrap(), up.try_clone().unwrap()),
                (up, down),
            ] {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(Shutdown::Write);
                });
            }
        }
    });
    addr
}

#[test]
fn bench_through_a_gateway_reports_each_replica_by_its_name() {
    let a = Serve::start(&["--threads", "1", "--instance-id", "replica-a"]);
    let b = Serve::start(&["--threads", "1", "--instance-id", "replica-b"]);
    let gateway = round_robin(vec![a.addr.clone(), b.addr.clone()]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.json");
    let run = bench(
        &format!("http://{gateway}"),
        &out,
        &["--concurrency", "4", "-n", "16", "--output-len", "8"],
    );
    let (records, report) = finish(run, &out);
    let mut seen: Vec<&str> = records
        .iter()
        .map(|r| {
            assert_eq!(r["ok"], true, "{r}");
            r["instance"].as_str().unwrap()
        })
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ["replica-a", "replica-b"], "{report}");
    for name in seen {
        assert!(report.contains(&format!("| {name} |")), "{report}");
    }
}
