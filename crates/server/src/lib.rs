//! hasten-server: the OpenAI-compatible HTTP API over a hasten engine.
//!
//! [`router`] builds the axum app for an [`AppState`]; [`serve`] binds a
//! listener, loads the model in the background (`/ready` answers 503 until
//! it is loaded), serves until SIGINT/SIGTERM and then drains in-flight
//! requests up to a deadline.
//!
//! Modules: [`error`] (the one place errors become statuses), [`params`]
//! (request validation and tokenization), [`respond`] (engine events to
//! OpenAI bodies; the SSE state machine), [`streams`] (resumable streams),
//! [`routes`] (handlers), [`middleware`] (request ids, API keys, request
//! counting), [`prom`] (Prometheus text), [`listen`] (the accept loop and connection limits),
//! [`ui`] (the web page and `/info`).

pub mod answer;
pub mod anthropic;
pub mod embeddings;
pub mod error;
pub mod format;
pub mod listen;
pub mod middleware;
pub mod otel;
pub mod params;
pub mod prom;
pub mod respond;
pub mod responses;
pub mod rewrite;
pub mod routes;
pub mod serve;
pub mod streams;
pub mod tls;
pub mod tools;
pub mod ui;

pub use error::{Error, Result};
pub use routes::router;

use hasten_engine::{Engine, EngineConfig, EngineOptions};
use hasten_model::chat::ChatTemplate;
use hasten_model::prompt;
use hasten_model::tokenizer::Tokenizer;
use params::ServerLimits;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How the HTTP side behaves (the engine has its own config).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Accepted API keys; empty means no authentication.
    pub api_keys: Vec<String>,
    /// Allowed CORS origins (`*` for any); empty means CORS is off.
    pub cors_origins: Vec<String>,
    /// Largest request body; `None` derives it from the model: the bytes
    /// its longest accepted prompt can take, three times over for JSON
    /// escapes, plus 64 KiB, at least 1 MiB (see [`Shared::body_limit`]).
    pub max_body_bytes: Option<usize>,
    pub limits: ServerLimits,
    /// Whole-request limit (non-streaming) or stream lifetime limit.
    pub request_timeout: Option<Duration>,
    /// How long a dropped stream waits for its client to reconnect (0: never).
    pub resume_grace: Duration,
    /// How long a request body may take to arrive once its head has.
    pub body_timeout: Duration,
    /// Serve the web page at `/` (`--no-ui` turns it off).
    pub ui: bool,
    /// Also expose the endpoint picker's gauges under vLLM's names on
    /// `/metrics` (`--no-vllm-metrics` turns it off).
    pub vllm_metrics: bool,
    /// Export request traces to this OTLP/HTTP collector (`http://host:4318`).
    pub otlp_endpoint: Option<String>,
    /// Longest a finished span waits in the exporter's batch.
    pub otlp_flush: Duration,
    /// Sent as `x-hasten-instance` on every response (`--instance-id`), so a
    /// client behind a gateway can tell the replicas apart.
    pub instance: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            api_keys: Vec::new(),
            cors_origins: Vec::new(),
            max_body_bytes: None,
            limits: ServerLimits {
                max_prompt_tokens: None,
                max_output_tokens: None,
            },
            request_timeout: None,
            resume_grace: Duration::from_secs(5),
            body_timeout: Duration::from_secs(30),
            ui: true,
            vllm_metrics: true,
            otlp_endpoint: None,
            otlp_flush: Duration::from_secs(1),
            instance: None,
        }
    }
}

/// A loaded model behind its engine.
pub struct Backend {
    pub engine: Engine,
    pub tokenizer: Arc<Tokenizer>,
    pub template: ChatTemplate,
    /// The name clients use in `model`.
    pub model_id: String,
    /// Unix seconds when it was loaded.
    pub created: u64,
    /// [`Tokenizer::max_token_bytes`], computed once.
    pub max_token_bytes: usize,
    /// The model card of `GET /info` (the web page's server view).
    pub info: ui::ModelInfo,
    /// Computes `hasten estimate --measure` for this model on this machine
    /// (`POST /info/estimate`; the binary supplies it, since estimating
    /// reads the model file and probes the machine). Its answer is kept.
    pub estimator: Option<ui::Estimator>,
    pub(crate) estimate: tokio::sync::Mutex<Option<serde_json::Value>>,
}

impl Backend {
    pub fn new(
        engine: Engine,
        tokenizer: Arc<Tokenizer>,
        template: ChatTemplate,
        model_id: String,
    ) -> Self {
        let limits = engine.limits();
        let info = ui::ModelInfo {
            model: model_id.clone(),
            context_length: limits.context_length,
            kv_tokens: limits.kv_tokens,
            kv_type: limits.kv_type.name().into(),
            kv_bytes_per_token: limits.kv_bytes_per_token,
            speculation: if limits.speculates { "on" } else { "off" }.into(),
            threads: engine.config().threads.get(),
            kernels: hasten_kernels::cpu::kernels().isa.name().into(),
            ..ui::ModelInfo::default()
        };
        Backend {
            engine,
            info,
            estimator: None,
            estimate: tokio::sync::Mutex::new(None),
            max_token_bytes: tokenizer.max_token_bytes(),
            tokenizer,
            template,
            model_id,
            created: unix_now(),
        }
    }

    /// Loads the model at `path` (GGUF file or checkpoint directory),
    /// takes its chat template (`template`'s source if given, else the
    /// model's, else the fallback), sizes an engine for it from `opts` and
    /// starts it; `model_id` is the name clients use. Logs the start-up
    /// line, which names the kernel tier that runs.
    ///
    /// A draft model (`draft`: its path) is loaded and checked against the
    /// model and drafts for it ([`EngineOptions::max_draft`] must allow drafts).
    /// `ctx_size`: the context to run at, if not the trained one.
    pub fn load(
        path: &Path,
        model_id: String,
        opts: &EngineOptions,
        template: Option<&str>,
        draft: Option<&Path>,
        ctx_size: Option<usize>,
    ) -> Result<Backend> {
        let t0 = std::time::Instant::now();
        let load_err = |err| Error::Load {
            path: path.to_owned(),
            err,
        };
        let mut lm = hasten_model::loader::load_with(path, ctx_size).map_err(load_err)?;
        if let Some(src) = template {
            lm.set_template(src).map_err(load_err)?;
        }
        let template = prompt::template_or_fallback(lm.template).map_err(load_err)?;
        let mut opts = opts.clone();
        if let Some(d) = draft {
            opts.draft_model = Some(
                hasten_engine::draft::load_draft_model(d, &lm.model, &lm.tokenizer)
                    .map_err(Error::Engine)?,
            );
        }
        let ec = EngineConfig::for_model(&lm.model, &opts);
        let layers = lm.model.config.n_layers;
        let arch = lm.model.config.arch.name();
        let (file_bytes, format) = (lm.file_bytes, lm.format.clone());
        let tokenizer = Arc::new(lm.tokenizer);
        let engine =
            Engine::start(Arc::new(lm.model), tokenizer.clone(), ec).map_err(Error::Engine)?;
        let limits = engine.limits();
        let disk = match (&opts.prefix_disk, engine.prefix_disk_at_start()) {
            (Some(d), Some(st)) => format!(
                "; prefix cache on disk {} ({} blocks, {:.1} MB found; {} files skipped)",
                d.dir.display(),
                st.files,
                st.bytes as f64 / 1e6,
                st.rejected
            ),
            _ => String::new(),
        };
        let speculation = match (limits.speculates, draft) {
            (false, _) => "off".to_string(),
            (true, None) => "ngram".to_string(),
            (true, Some(d)) => format!("draft model {}", d.display()),
        };
        let windowed = match limits.kv_windowed_bytes {
            0 => String::new(),
            b => format!(
                " + {:.1} MB for sliding-window layers' windows",
                b as f64 / 1e6
            ),
        };
        let line = format!(
            "hasten serve: model {model_id} ({}, {:.1} MB, {layers} layers, context {}) loaded in {:.0} ms; KV cache {} tokens ({}, {} bytes/token{windowed}){disk}; speculation {speculation}; {} threads, {} kernels",
            path.display(),
            lm.file_bytes as f64 / 1e6,
            limits.context_length,
            t0.elapsed().as_secs_f64() * 1e3,
            limits.kv_tokens,
            limits.kv_type.name(),
            limits.kv_bytes_per_token,
            opts.threads.get(),
            hasten_kernels::cpu::kernels().isa.name(),
        );
        // Scripts and people read this line on stderr, whatever the log filter.
        eprintln!("{line}");
        let mut b = Backend::new(engine, tokenizer, template, model_id);
        b.info.path = Some(path.display().to_string());
        b.info.arch = Some(arch.into());
        b.info.file_mb = Some(file_bytes as f64 / 1e6);
        b.info.format = Some(format);
        b.info.layers = Some(layers);
        b.info.speculation = speculation;
        Ok(b)
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Shared by every handler.
pub struct Shared {
    pub cfg: ServerConfig,
    backend: OnceLock<Arc<Backend>>,
    pub replays: Arc<streams::ReplayBuffers>,
    pub http: middleware::HttpCounters,
    pub conns: Arc<listen::ConnCounters>,
    /// Non-streaming requests whose client left before the answer.
    pub unary_disconnects: std::sync::atomic::AtomicU64,
    /// Set on SIGINT/SIGTERM: `/ready` answers 503 while in-flight work drains.
    pub draining: std::sync::atomic::AtomicBool,
    /// Conversations kept for the Responses API's `previous_response_id`.
    pub responses: responses::ResponseStore,
    /// Request traces (`--otlp-endpoint`).
    pub otel: Option<Arc<otel::Otel>>,
}

pub type AppState = Arc<Shared>;

impl Shared {
    pub fn new(cfg: ServerConfig) -> AppState {
        let replays = streams::ReplayBuffers::new(cfg.resume_grace);
        // `check_otlp_endpoint` validated the URL; a failure here is the
        // exporter's own, and tracing stays off rather than the server.
        let otel = cfg.otlp_endpoint.as_deref().and_then(|e| {
            otel::Otel::new(e, cfg.otlp_flush)
                .map_err(|m| tracing::error!("tracing off: {m}"))
                .ok()
                .map(Arc::new)
        });
        Arc::new(Shared {
            otel,
            cfg,
            backend: OnceLock::new(),
            replays,
            http: Default::default(),
            conns: Default::default(),
            unary_disconnects: Default::default(),
            draining: Default::default(),
            responses: Default::default(),
        })
    }

    /// Makes `b` the model being served (once).
    pub fn set_backend(&self, b: Backend) {
        let _ = self.backend.set(Arc::new(b));
    }

    pub fn backend(&self) -> Result<Arc<Backend>> {
        self.backend.get().cloned().ok_or(Error::NotReady)
    }

    /// The request-body limit now: the configured one, or one derived from
    /// the loaded model (1 MiB while it loads).
    pub fn body_limit(&self) -> usize {
        if let Some(n) = self.cfg.max_body_bytes {
            return n;
        }
        match self.backend.get() {
            Some(b) => {
                let prompt = params::max_prompt_tokens(&b.engine.limits(), &self.cfg.limits);
                (prompt.saturating_mul(b.max_token_bytes).saturating_mul(3) + (64 << 10))
                    .clamp(1 << 20, routes::MAX_BODY_CAP)
            }
            None => 1 << 20,
        }
    }

    pub fn is_ready(&self) -> bool {
        self.backend.get().is_some()
    }
}
