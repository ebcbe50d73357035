//! A server on a real loopback socket, started in-process, and a client
//! without pooled connections.

use super::backend_of;
use hasten_engine::EngineConfig;
use hasten_server::listen::ConnConfig;
use hasten_server::serve::{serve, ServeOptions};
use hasten_server::tls::Tls;
use hasten_server::{AppState, ServerConfig, Shared};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

pub struct Live {
    pub addr: SocketAddr,
    /// `http` or `https`.
    pub scheme: &'static str,
    pub st: AppState,
    pub stop: Option<oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<Result<(), hasten_server::Error>>,
    pub http: reqwest::Client,
}

impl Live {
    pub async fn start(cfg: ServerConfig, ec: EngineConfig, model: PathBuf) -> Live {
        Live::start_with(cfg, ec, model, ConnConfig::default()).await
    }

    pub async fn start_with(
        cfg: ServerConfig,
        ec: EngineConfig,
        model: PathBuf,
        conns: ConnConfig,
    ) -> Live {
        // No idle pooled connections: they would hold connection slots.
        let http = reqwest::Client::builder().pool_max_idle_per_host(0);
        Live::start_opts(cfg, ec, model, conns, None, http).await
    }

    /// With TLS when `tls` is given; `http` must then trust its certificate.
    pub async fn start_opts(
        cfg: ServerConfig,
        ec: EngineConfig,
        model: PathBuf,
        conns: ConnConfig,
        tls: Option<Arc<Tls>>,
        http: reqwest::ClientBuilder,
    ) -> Live {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let st = Shared::new(cfg);
        let (tx, rx) = oneshot::channel::<()>();
        let opts = ServeOptions {
            conns,
            shutdown_timeout: Duration::from_secs(10),
            tls: tls.clone(),
        };
        let task = tokio::spawn(serve(
            st.clone(),
            listener,
            opts,
            move || Ok(backend_of(&model, ec)),
            async {
                let _ = rx.await;
            },
        ));
        let live = Live {
            addr,
            scheme: if tls.is_some() { "https" } else { "http" },
            st,
            stop: Some(tx),
            task,
            http: http.build().unwrap(),
        };
        let t0 = Instant::now();
        while live.get("/ready").await.status() != 200 {
            assert!(t0.elapsed() < Duration::from_secs(30), "never ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        live
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http.get(self.url(path)).send().await.unwrap()
    }

    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    pub fn metrics(&self) -> hasten_engine::Metrics {
        self.st.backend().unwrap().engine.metrics()
    }

    /// Waits (bounded) until `done` requests have ended (finished or
    /// cancelled) and no sequence holds a KV block.
    pub async fn idle_kv(&self, done: u64) -> hasten_engine::Metrics {
        let t0 = Instant::now();
        loop {
            let m = self.metrics();
            let ended = m.requests_finished + m.requests_cancelled;
            if ended >= done
                && m.kv_blocks_total > 0
                && m.kv_blocks_used == 0
                && m.running == 0
                && m.waiting == 0
            {
                return m;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "KV never went idle: {m:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
