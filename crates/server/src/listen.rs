//! Connections: the accept loop and what each connection may hold.
//!
//! Every connection is HTTP/1.1 only (HTTP/2 is not served, prior
//! knowledge included) with `TCP_NODELAY`, since every SSE event is small
//! and latency-critical. A connection that is idle — between requests on
//! keep-alive, or freshly opened and silent, or sending its request head
//! slowly — is closed once it has been so for `idle_timeout` (hyper's
//! header-read timer starts whenever the connection waits for a head).
//!
//! At `max` open connections the longest-idle one is closed to make room,
//! as nginx reclaims keep-alive connections when it runs short, so idle
//! sockets can never lock out real requests. When every connection is
//! busy, newcomers are still accepted up to `max / 4 + 64` more in an
//! *overflow* mode: `/health`, `/ready` and `/metrics` are answered,
//! anything else gets 503 with `Retry-After`, and the connection closes
//! after one request; beyond that a connection is closed at once. The same
//! reclaiming applies per client address when `per_client` is set.
//!
//! A client that half-closes its side is treated as gone (hyper's default,
//! as uvicorn does): the request is cancelled and no response is written,
//! which is what makes cancellation on disconnect work for unary requests.

use crate::error::Error;
use crate::tls::{self, Tls};
use axum::body::Body;
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tower::ServiceExt;

/// How connections are limited.
#[derive(Debug, Clone, Copy)]
pub struct ConnConfig {
    /// Connections served normally at once.
    pub max: usize,
    /// Connections one client address may hold (0: no per-address limit).
    pub per_client: usize,
    /// Keep-alive idle time and request-head deadline.
    pub idle_timeout: Duration,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            max: 512,
            per_client: 0,
            idle_timeout: Duration::from_secs(5),
        }
    }
}

/// Connection counters for `/metrics`.
#[derive(Debug, Default)]
pub struct ConnCounters {
    pub open: AtomicUsize,
    pub accepted: AtomicU64,
    /// Idle connections closed to make room for a new one.
    pub reclaimed: AtomicU64,
    /// Accepted in overflow mode (every normal slot busy).
    pub overflow: AtomicU64,
    /// Closed at once: no room even in overflow mode.
    pub refused: AtomicU64,
    /// Closed because a request head did not arrive within the idle timeout.
    pub timed_out: AtomicU64,
    /// Closed before HTTP: a failed or too slow TLS handshake, or plain
    /// HTTP sent to the TLS port.
    pub tls_failed: AtomicU64,
}

/// What one connection shares with the registry.
struct ConnState {
    /// Requests in progress (a response body counts until it is dropped).
    busy: AtomicUsize,
    /// Milliseconds since the registry's base when it last went idle.
    idle_since_ms: AtomicU64,
    reclaimed: AtomicBool,
    kill: Notify,
}

struct Slot {
    ip: IpAddr,
    overflow: bool,
    state: Arc<ConnState>,
}

struct Registry {
    base: Instant,
    next_id: u64,
    slots: HashMap<u64, Slot>,
    per_ip: HashMap<IpAddr, usize>,
    normal: usize,
    overflow: usize,
}

enum Admission {
    Normal,
    Overflow,
    Refused,
}

impl Registry {
    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64
    }

    /// Closes the longest-idle normal connection (of `ip` only, if given).
    fn reclaim(&mut self, ip: Option<IpAddr>) -> bool {
        let victim = self
            .slots
            .iter()
            .filter(|(_, s)| !s.overflow && ip.is_none_or(|ip| s.ip == ip))
            .filter(|(_, s)| s.state.busy.load(Ordering::Acquire) == 0)
            .min_by_key(|(_, s)| s.state.idle_since_ms.load(Ordering::Relaxed))
            .map(|(&id, _)| id);
        let Some(id) = victim else { return false };
        let s = self.remove(id).expect("the victim is registered");
        s.state.reclaimed.store(true, Ordering::Release);
        s.state.kill.notify_one();
        true
    }

    fn admit(&mut self, ip: IpAddr, cfg: &ConnConfig) -> Admission {
        let mine = self.per_ip.get(&ip).copied().unwrap_or(0);
        let ip_full = cfg.per_client > 0 && mine >= cfg.per_client;
        let room = if ip_full {
            self.reclaim(Some(ip))
        } else {
            self.normal < cfg.max.max(1) || self.reclaim(None)
        };
        if room {
            Admission::Normal
        } else if self.overflow < cfg.max / 4 + 64 {
            Admission::Overflow
        } else {
            Admission::Refused
        }
    }

    fn insert(&mut self, ip: IpAddr, overflow: bool) -> (u64, Arc<ConnState>) {
        let state = Arc::new(ConnState {
            busy: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(self.now_ms()),
            reclaimed: AtomicBool::new(false),
            kill: Notify::new(),
        });
        let id = self.next_id;
        self.next_id += 1;
        self.slots.insert(
            id,
            Slot {
                ip,
                overflow,
                state: state.clone(),
            },
        );
        *self.per_ip.entry(ip).or_default() += 1;
        if overflow {
            self.overflow += 1;
        } else {
            self.normal += 1;
        }
        (id, state)
    }

    fn remove(&mut self, id: u64) -> Option<Slot> {
        let s = self.slots.remove(&id)?;
        if let Some(n) = self.per_ip.get_mut(&s.ip) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&s.ip);
            }
        }
        if s.overflow {
            self.overflow -= 1;
        } else {
            self.normal -= 1;
        }
        Some(s)
    }
}

/// Shared by the accept loop and the connection tasks.
struct Conns {
    reg: Mutex<Registry>,
    cfg: ConnConfig,
    counters: Arc<ConnCounters>,
    /// Signalled when the last connection closes (for draining).
    emptied: Notify,
}

impl Conns {
    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.reg.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release(&self, id: u64) {
        let mut reg = self.lock();
        reg.remove(id);
        self.counters.open.store(reg.slots.len(), Ordering::Relaxed);
        if reg.slots.is_empty() {
            self.emptied.notify_waiters();
        }
    }
}

/// Marks its connection busy while a request (and its response body) lives.
struct Busy {
    state: Arc<ConnState>,
    base: Instant,
}

impl Busy {
    fn new(state: Arc<ConnState>, base: Instant) -> Self {
        state.busy.fetch_add(1, Ordering::AcqRel);
        Busy { state, base }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.state
            .idle_since_ms
            .store(self.base.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.state.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its connection marked busy until it is done.
struct Guarded {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for Guarded {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

fn is_probe(path: &str) -> bool {
    matches!(path, "/health" | "/ready" | "/metrics")
}

/// Accepts on `listener` until `quit` turns true, then waits for the open
/// connections to finish (each is told to close after its current
/// request). The caller bounds that wait. With `tls`, each connection
/// first completes a TLS handshake within the idle timeout.
pub async fn run(
    listener: TcpListener,
    app: Router,
    cfg: ConnConfig,
    tls: Option<Arc<Tls>>,
    counters: Arc<ConnCounters>,
    mut quit: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let conns = Arc::new(Conns {
        reg: Mutex::new(Registry {
            base: Instant::now(),
            next_id: 0,
            slots: HashMap::new(),
            per_ip: HashMap::new(),
            normal: 0,
            overflow: 0,
        }),
        cfg,
        counters,
        emptied: Notify::new(),
    });
    let mut last_warned: Option<Instant> = None;
    loop {
        let (io, addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                // Out of file descriptors and the like: back off briefly.
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = quitting(&mut quit) => break,
        };
        let _ = io.set_nodelay(true);
        conns.counters.accepted.fetch_add(1, Ordering::Relaxed);
        let (id, state, overflow) = {
            let mut reg = conns.lock();
            let before = reg.slots.len();
            let admission = reg.admit(addr.ip(), &conns.cfg);
            let reclaimed = before - reg.slots.len();
            conns
                .counters
                .reclaimed
                .fetch_add(reclaimed as u64, Ordering::Relaxed);
            let overflow = match admission {
                Admission::Normal => false,
                Admission::Overflow => true,
                Admission::Refused => {
                    conns.counters.refused.fetch_add(1, Ordering::Relaxed);
                    drop(reg);
                    warn_full(&mut last_warned, addr);
                    continue;
                }
            };
            if overflow {
                conns.counters.overflow.fetch_add(1, Ordering::Relaxed);
                warn_full(&mut last_warned, addr);
            }
            let (id, state) = reg.insert(addr.ip(), overflow);
            conns
                .counters
                .open
                .store(reg.slots.len(), Ordering::Relaxed);
            (id, state, overflow)
        };
        let base = conns.lock().base;
        let (app, conns2, quit, tls) = (app.clone(), conns.clone(), quit.clone(), tls.clone());
        tokio::spawn(async move {
            match tls {
                None => connection(io, app, state, base, overflow, &conns2, quit).await,
                Some(tls) => {
                    if let Some(io) = handshake(&tls, io, &state, &conns2).await {
                        connection(io, app, state, base, overflow, &conns2, quit).await;
                    }
                }
            }
            conns2.release(id);
        });
    }
    // Draining: tell every connection to close after its current request.
    loop {
        let emptied = conns.emptied.notified();
        if conns.lock().slots.is_empty() {
            return Ok(());
        }
        emptied.await;
    }
}

/// Resolves once the server starts draining.
async fn quitting(quit: &mut watch::Receiver<bool>) {
    let _ = quit.wait_for(|&q| q).await;
}

fn warn_full(last: &mut Option<Instant>, addr: SocketAddr) {
    if last.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
        *last = Some(Instant::now());
        tracing::warn!(
            "connection limit reached with every connection busy (latest from {addr}); \
             newcomers get /health and /metrics only (see hasten_connections_* metrics)"
        );
    }
}

/// The TLS handshake, bounded by the idle timeout and cut short if the
/// connection is reclaimed meanwhile (it is idle until its first request).
async fn handshake(
    tls: &Tls,
    io: tokio::net::TcpStream,
    state: &ConnState,
    conns: &Conns,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    let r = tokio::select! {
        r = tokio::time::timeout(conns.cfg.idle_timeout, tls::accept(tls, io)) => r,
        () = state.kill.notified() => return None,
    };
    let why = match r {
        Ok(Ok(io)) => return Some(io),
        Ok(Err(tls::Refusal::PlainHttp)) => "plain HTTP sent to the TLS port".to_owned(),
        Ok(Err(tls::Refusal::Handshake(e))) => format!("TLS handshake failed: {e}"),
        Err(_) => "TLS handshake timed out".to_owned(),
    };
    conns.counters.tls_failed.fetch_add(1, Ordering::Relaxed);
    tracing::debug!("connection closed: {why}");
    None
}

/// Serves one connection until it closes, is reclaimed, or the server drains.
fn connection<I>(
    io: I,
    app: Router,
    state: Arc<ConnState>,
    base: Instant,
    overflow: bool,
    conns: &Arc<Conns>,
    mut quit: watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + Send + 'static
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let idle = if overflow {
        conns.cfg.idle_timeout.min(Duration::from_secs(2))
    } else {
        conns.cfg.idle_timeout
    };
    let counters = conns.counters.clone();
    let st = state.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let (app, st) = (app.clone(), st.clone());
        async move {
            if overflow && !is_probe(req.uri().path()) {
                return Ok::<_, Infallible>(Error::TooManyConnections.into_response());
            }
            let busy = Busy::new(st, base);
            let resp = app
                .oneshot(req.map(Body::new))
                .await
                .unwrap_or_else(|e: Infallible| match e {});
            Ok(resp.map(|inner| Body::new(Guarded { inner, _busy: busy })))
        }
    });
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(idle)
        .keep_alive(!overflow);
    let conn = b.serve_connection(TokioIo::new(io), svc);
    async move {
        tokio::pin!(conn);
        let mut closing = false;
        loop {
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        if e.is_timeout() {
                            counters.timed_out.fetch_add(1, Ordering::Relaxed);
                        }
                        tracing::debug!("connection ended: {e}");
                    }
                    return;
                }
                () = state.kill.notified(), if !closing => {
                    if state.busy.load(Ordering::Acquire) == 0 {
                        return; // reclaimed while idle: drop it
                    }
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                () = quitting(&mut quit), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg() -> Registry {
        Registry {
            base: Instant::now(),
            next_id: 0,
            slots: HashMap::new(),
            per_ip: HashMap::new(),
            normal: 0,
            overflow: 0,
        }
    }

    #[test]
    fn the_longest_idle_connection_makes_room() {
        let cfg = ConnConfig {
            max: 2,
            per_client: 0,
            idle_timeout: Duration::from_secs(5),
        };
        let mut r = reg();
        let ip: IpAddr = [127, 0, 0, 1].into();
        assert!(matches!(r.admit(ip, &cfg), Admission::Normal));
        let (a, sa) = r.insert(ip, false);
        let (b, sb) = r.insert(ip, false);
        sa.idle_since_ms.store(10, Ordering::Relaxed);
        sb.idle_since_ms.store(5, Ordering::Relaxed);
        // Full: the older idle one (b) goes.
        assert!(matches!(r.admit(ip, &cfg), Admission::Normal));
        assert!(sb.reclaimed.load(Ordering::Relaxed));
        assert!(r.slots.contains_key(&a) && !r.slots.contains_key(&b));
        r.insert(ip, false);
        // Every one busy: overflow, up to max/4 + 64, then refused.
        for s in r.slots.values() {
            s.state.busy.store(1, Ordering::Relaxed);
        }
        for _ in 0..64 {
            assert!(matches!(r.admit(ip, &cfg), Admission::Overflow));
            r.insert(ip, true);
        }
        assert!(matches!(r.admit(ip, &cfg), Admission::Refused));
    }

    #[test]
    fn a_client_at_its_limit_gives_up_its_own_idle_connection() {
        let cfg = ConnConfig {
            max: 10,
            per_client: 1,
            idle_timeout: Duration::from_secs(5),
        };
        let mut r = reg();
        let (a, b): (IpAddr, IpAddr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let (_, sa) = r.insert(a, false);
        let (_, sb) = r.insert(b, false);
        assert!(matches!(r.admit(a, &cfg), Admission::Normal));
        assert!(sa.reclaimed.load(Ordering::Relaxed));
        assert!(!sb.reclaimed.load(Ordering::Relaxed));
        r.insert(a, false);
        for s in r.slots.values() {
            s.state.busy.store(1, Ordering::Relaxed);
        }
        assert!(matches!(r.admit(a, &cfg), Admission::Overflow));
    }
}
