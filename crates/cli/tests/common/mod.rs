//! Helpers the binary's integration tests share: a real `hasten serve`
//! child on a loopback port, a bare HTTP/1.1 exchange, and a TCP proxy
//! that can slow the server's bytes down or cut a connection mid-stream.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Runs the `hasten` binary to completion (with the shared test data).
pub fn hasten(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hasten"))
        .args(args)
        .env("HASTEN_TESTDATA", testdata())
        .output()
        .unwrap()
}

/// The URL of a loopback port nothing listens on.
pub fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}")
}

/// `HASTEN_TESTDATA`, or the repository's `testdata/`.
pub fn testdata() -> std::path::PathBuf {
    hasten_model::testing::testdata_dir()
}

/// Writes `hasten synth --shape tiny --type q8_0` into `dir`; returns its path.
pub fn tiny_model(dir: &tempfile::TempDir) -> String {
    synth_tiny(dir, "tiny.gguf", &[])
}

/// `hasten synth --shape tiny --type q8_0` with `extra` flags into
/// `dir/name`; returns the path.
pub fn synth_tiny(dir: &tempfile::TempDir, name: &str, extra: &[&str]) -> String {
    let path = dir.path().join(name);
    let mut args = vec!["synth", "--shape", "tiny", "--type", "q8_0", "-o"];
    args.push(path.to_str().unwrap());
    args.extend(extra);
    let o = hasten(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    path.to_str().unwrap().to_owned()
}

/// One HTTP/1.1 exchange with `Connection: close`; returns (status, body).
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let status = resp.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = resp.split_once("\r\n\r\n").map_or("", |p| p.1).to_owned();
    Ok((status, body))
}

/// `hasten serve` on port 0 (the built-in model unless `args` say
/// otherwise), killed on drop.
pub struct Serve {
    child: std::process::Child,
    pub addr: String,
    /// `http`, or `https` with `--tls-cert`.
    pub scheme: &'static str,
    /// Every stderr line so far (the start-up line among them).
    pub log: Arc<Mutex<Vec<String>>>,
    _cache: tempfile::TempDir,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    pub fn start(args: &[&str]) -> Serve {
        Self::start_with_env(args, &[])
    }

    /// [`Serve::start`] with extra environment variables.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Serve {
        let cache = tempfile::tempdir().unwrap();
        let t0 = Instant::now();
        // A free port unless the caller names one (a restart on the same).
        let port: &[&str] = if args.iter().any(|a| a.starts_with("--port")) {
            &[]
        } else {
            &["--port", "0"]
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_hasten"))
            .arg("serve")
            .args(port)
            .args(args)
            .env("HASTEN_CACHE", cache.path())
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (scheme, addr) = loop {
            let line = lines.next().expect("hasten serve exited").unwrap();
            log.lock().unwrap().push(line.clone());
            if let Some(a) = line.split("listening on http://").nth(1) {
                break ("http", a.trim().to_owned());
            }
            if let Some(a) = line.split("listening on https://").nth(1) {
                break ("https", a.trim().to_owned());
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        let log2 = log.clone();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                log2.lock().unwrap().push(l);
            }
        });
        loop {
            // Over TLS (no client here), the line logged once ready.
            let ready = match scheme {
                "http" => matches!(http(&addr, "GET", "/ready", ""), Ok((200, _))),
                _ => log
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|l| l.contains("loaded; ready")),
            };
            if ready {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "not ready after 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("ready {} ms after start", t0.elapsed().as_millis());
        Serve {
            child,
            addr,
            scheme,
            log,
            _cache: cache,
        }
    }

    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// A `/proc/PID/status` field of the server in KiB (`VmRSS:`, `VmHWM:`).
    pub fn status_kib(&self, field: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        s.lines()
            .find_map(|l| {
                l.strip_prefix(field)?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no {field} in /proc/PID/status"))
    }

    /// Waits (up to `within`) for the server to exit; its exit status.
    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                t0.elapsed() < within,
                "the server did not exit within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` (as `kill -SIGNAL` names it) to the server.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal} failed");
    }

    /// Waits (at most 10 s) for a log line containing `text`, after the
    /// first `skip` lines.
    pub fn wait_log(&self, skip: usize, text: &str) {
        let t0 = Instant::now();
        while !self
            .log
            .lock()
            .unwrap()
            .iter()
            .skip(skip)
            .any(|l| l.contains(text))
        {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no log line with {text:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A counter from `/metrics`.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = http(&self.addr, "GET", "/metrics", "").unwrap();
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    }
}

/// What the proxy does to the server's bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Sleep this long before forwarding each read (at most `read_size` bytes).
    pub delay: Duration,
    pub read_size: usize,
    /// Cut the first connection after this many SSE events reached the client.
    pub cut_first_after_events: Option<usize>,
}

/// A loopback TCP proxy in front of `upstream`, recording what clients send.
pub struct Proxy {
    pub addr: String,
    pub requests: Arc<Mutex<Vec<String>>>,
    pub connections: Arc<AtomicUsize>,
    gate: Gate,
}

/// Holds the proxy's connections after the first until opened.
#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    fn opened() -> Gate {
        let g = Gate::default();
        g.open();
        g
    }

    pub fn open(&self) {
        *self.0 .0.lock().unwrap() = true;
        self.0 .1.notify_all();
    }

    fn wait(&self) {
        let mut open = self.0 .0.lock().unwrap();
        while !*open {
            open = self.0 .1.wait(open).unwrap();
        }
    }
}

impl Proxy {
    pub fn start(upstream: &str, faults: Faults) -> Proxy {
        Proxy::start_with_gate(upstream, faults, Gate::opened())
    }

    /// A proxy whose connections after the first wait until [`Proxy::gate`]
    /// is opened before anything reaches the server.
    pub fn start_gated(upstream: &str, faults: Faults) -> Proxy {
        Proxy::start_with_gate(upstream, faults, Gate::default())
    }

    pub fn gate(&self) -> Gate {
        self.gate.clone()
    }

    fn start_with_gate(upstream: &str, faults: Faults, gate: Gate) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (reqs, conns, up) = (requests.clone(), connections.clone(), upstream.to_string());
        let g = gate.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let n = conns.fetch_add(1, Ordering::SeqCst);
                let (reqs, f, g, up) = (reqs.clone(), faults, g.clone(), up.clone());
                std::thread::spawn(move || {
                    if n > 0 {
                        g.wait();
                    }
                    if let Ok(server) = TcpStream::connect(&up) {
                        pipe(client, server, n, f, reqs);
                    }
                });
            }
        });
        Proxy {
            addr,
            requests,
            connections,
            gate,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request clients sent, in order, split by `Content-Length`
    /// (a pooled connection carries several).
    pub fn requests(&self) -> Vec<String> {
        let mut out = Vec::new();
        for conn in self.requests.lock().unwrap().iter() {
            let mut rest = conn.as_str();
            while let Some(head_end) = rest.find("\r\n\r\n") {
                let head = &rest[..head_end];
                let len = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0usize);
                let end = (head_end + 4 + len).min(rest.len());
                out.push(rest[..end].to_string());
                rest = &rest[end..];
            }
        }
        out
    }
}

/// The value of the Prometheus sample `name` on the server at `addr`.
pub fn metric(addr: &str, name: &str) -> Option<f64> {
    let mut s = TcpStream::connect(addr).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut page = String::new();
    s.read_to_string(&mut page).ok()?;
    page.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok())?
    })
}

fn pipe(
    mut client: TcpStream,
    mut server: TcpStream,
    n: usize,
    f: Faults,
    reqs: Arc<Mutex<Vec<String>>>,
) {
    let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let idx = {
        let mut r = reqs.lock().unwrap();
        r.push(String::new());
        r.len() - 1
    };
    let reqs2 = reqs.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        // Record before forwarding: once the server has the bytes it may
        // answer, and the test read `requests()`, before this thread runs on.
        while let Ok(k) = c2.read(&mut buf) {
            if k == 0 {
                break;
            }
            reqs2.lock().unwrap()[idx].push_str(&String::from_utf8_lossy(&buf[..k]));
            if s2.write_all(&buf[..k]).is_err() {
                break;
            }
        }
        let _ = s2.shutdown(Shutdown::Write);
    });
    let mut buf = vec![0u8; if f.read_size == 0 { 8192 } else { f.read_size }];
    let mut events = 0;
    let mut tail = Vec::new();
    loop {
        let k = match server.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(k) => k,
        };
        if !f.delay.is_zero() {
            std::thread::sleep(f.delay);
        }
        let mut out = &buf[..k];
        if let (0, Some(limit)) = (n, f.cut_first_after_events) {
            // Forward up to the end of event number `limit`, then cut.
            let mut end = None;
            for (i, &b) in out.iter().enumerate() {
                tail.push(b);
                if tail.ends_with(b"\n\n") {
                    if tail.windows(5).any(|w| w == b"data:") {
                        events += 1;
                    }
                    tail.clear();
                    if events == limit {
                        end = Some(i + 1);
                        break;
                    }
                }
            }
            if let Some(e) = end {
                out = &out[..e];
                let _ = client.write_all(out);
                let _ = client.shutdown(Shutdown::Both);
                let _ = server.shutdown(Shutdown::Both);
                return;
            }
        }
        if client.write_all(out).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}
