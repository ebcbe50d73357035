//! `hasten serve`: the OpenAI-compatible server on one model. Binds first,
//! loads the model in the background (`/ready` is 503 until then), and
//! drains in-flight requests on SIGINT/SIGTERM.

use anyhow::{Context, Result};
use hasten_engine::EngineOptions;
use hasten_server::listen::ConnConfig;
use hasten_server::params::ServerLimits;
use hasten_server::serve::{serve, shutdown_signal, LoadError, ServeOptions};
use hasten_server::tls::Tls;
use hasten_server::{Backend, ServerConfig, Shared};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file, a Hugging Face checkpoint directory, or
    /// hf:OWNER/REPO[:QUANT|:FILE] from the Hub (default: the small demo
    /// model built into hasten).
    #[arg(long)]
    model: Option<PathBuf>,
    /// A Jinja chat template file to use instead of the model's (as
    /// vLLM's and llama-server's --chat-template).
    #[arg(long)]
    chat_template: Option<PathBuf>,
    /// The name clients pass as `model` (default: the file name without extension).
    #[arg(long)]
    served_model_name: Option<String>,
    /// Address to listen on (0.0.0.0 for every interface).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free one, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Serve HTTPS with this PEM certificate chain (leaf first); needs
    /// --tls-key. SIGHUP reloads both files.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key (PKCS#8, RSA or EC) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Accepted API key (repeatable); without any, no key is needed.
    /// HASTEN_API_KEY or --api-key-file keep keys out of the process list.
    #[arg(long, env = "HASTEN_API_KEY", hide_env_values = true)]
    api_key: Vec<String>,
    /// A file of API keys, one per line.
    #[arg(long)]
    api_key_file: Option<PathBuf>,
    /// Allowed CORS origin (repeatable; `*` for any). CORS is off without one.
    #[arg(long)]
    cors_origin: Vec<String>,
    /// Largest request body in bytes (default: what the longest prompt the
    /// model accepts can take, three times over for JSON escapes, plus
    /// 64 KiB; at least 1 MiB).
    #[arg(long)]
    max_body_bytes: Option<usize>,
    /// Longest prompt in tokens (default: what the context allows).
    #[arg(long)]
    max_prompt_tokens: Option<usize>,
    /// Largest max_tokens a request may ask for (default: what the context allows).
    #[arg(long)]
    max_output_tokens: Option<usize>,
    /// Seconds a request (or a stream) may take before it is cut off.
    #[arg(long)]
    request_timeout: Option<f64>,
    /// Open connections at most. At the limit the longest-idle connection
    /// is closed to make room; if all are busy, newcomers get only /health,
    /// /ready and /metrics (others 503) until one frees.
    #[arg(long, default_value_t = 512)]
    max_connections: usize,
    /// Connections one client address may hold (0: no per-address limit;
    /// behind a proxy every client shares its address).
    #[arg(long, default_value_t = 0)]
    max_connections_per_client: usize,
    /// Seconds a connection may sit idle (keep-alive, or before its request
    /// head is complete) before it is closed.
    #[arg(long, default_value_t = 5.0)]
    idle_timeout: f64,
    /// Seconds a request body may take to arrive once its head has (408 after).
    #[arg(long, default_value_t = 30.0)]
    body_timeout: f64,
    /// Seconds a dropped stream is kept for its client to resume (0: cancel at once).
    #[arg(long, default_value_t = 5.0)]
    resume_grace: f64,
    /// Do not serve the web page at `/` (the API is unchanged).
    #[arg(long)]
    no_ui: bool,
    /// Do not repeat the endpoint picker's gauges under vLLM's names
    /// (`vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`, ...) on
    /// `/metrics`; hasten's own names stay.
    #[arg(long)]
    no_vllm_metrics: bool,
    /// Export a trace of every API request (server span, queue, prefill
    /// and decode; parent from the caller's `traceparent`) to this
    /// OpenTelemetry collector over OTLP/HTTP JSON, e.g. http://127.0.0.1:4318.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// This replica's name, sent as `x-hasten-instance` on every response
    /// (`hasten bench` through a gateway reports per replica by it).
    #[arg(long, env = "HASTEN_INSTANCE_ID")]
    instance_id: Option<String>,
    /// Seconds to let in-flight requests finish after SIGINT/SIGTERM.
    #[arg(long, default_value_t = 30.0)]
    shutdown_timeout: f64,
    /// Worker threads for the model; 0 uses every core.
    #[arg(long, short = 't', default_value_t = 0)]
    threads: usize,
    /// KV cache size in MiB at most (capped at twice what --max-running
    /// sequences of full context need).
    #[arg(long, default_value_t = 1024)]
    kv_cache_mib: usize,
    /// How the KV cache stores K and V: f16, q8_0 (half the bytes) or
    /// q4_0 (about a quarter; llama.cpp's --cache-type-k/v).
    #[arg(long, default_value = "f16", value_parser = crate::parse_kv_type)]
    kv_type: hasten_kernels::attention::KvType,
    /// Keep every position's K and V in sliding-window layers too
    /// (llama.cpp's --swa-full). By default they keep only their window, in
    /// a pool sized by --max-running, and more context fits (with
    /// --prefix-cache-dir, that pool's blocks go to DIR/window).
    #[arg(long)]
    swa_full: bool,
    /// Sequences decoded together at most.
    #[arg(long, default_value_t = 16)]
    max_running: usize,
    /// Requests allowed to wait; more get 429 with Retry-After.
    #[arg(long, default_value_t = 64)]
    max_waiting: usize,
    /// Target inter-token latency in ms (sizes prefill chunks while streams decode).
    #[arg(long, default_value_t = 50)]
    itl_target_ms: u64,
    /// Do not reuse the KV of shared prompt prefixes across requests.
    #[arg(long)]
    no_prefix_cache: bool,
    /// Keep the prefix cache's blocks in this directory too: blocks evicted
    /// from memory, and all of them at shutdown, are written there and
    /// found again by later requests and after a restart (one file per
    /// 16-token block, keyed by the model and the tokens before it).
    #[arg(long, value_name = "DIR")]
    prefix_cache_dir: Option<std::path::PathBuf>,
    /// Size cap of --prefix-cache-dir (bytes; K, M, G suffixes); the least
    /// recently used blocks go first.
    #[arg(long, default_value = "4G", value_parser = crate::parse_bytes)]
    prefix_cache_disk_bytes: u64,
    /// Tokens computed in one engine step at most (prompt chunks plus
    /// decodes; a lone prompt is prefilled in chunks of this size).
    #[arg(long, default_value_t = 512)]
    max_batch_tokens: usize,
    /// Run the model at this context (tokens), below its trained one
    /// (llama.cpp's -c; default: the trained context).
    #[arg(long, short = 'c')]
    ctx_size: Option<usize>,
    #[command(flatten)]
    speculation: crate::Speculation,
}

fn secs(s: f64, name: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .with_context(|| format!("--{name} must be a non-negative number of seconds"))
}

pub fn main(a: Args) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let threads = crate::threads(a.threads)?;
    let opts_threads = threads;
    let mut api_keys = a.api_key.clone();
    if let Some(f) = &a.api_key_file {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        api_keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned),
        );
    }
    let cfg = ServerConfig {
        api_keys,
        cors_origins: a.cors_origin.clone(),
        max_body_bytes: a.max_body_bytes,
        limits: ServerLimits {
            max_prompt_tokens: a.max_prompt_tokens,
            max_output_tokens: a.max_output_tokens,
        },
        request_timeout: a
            .request_timeout
            .map(|s| secs(s, "request-timeout"))
            .transpose()?,
        resume_grace: secs(a.resume_grace, "resume-grace")?,
        body_timeout: secs(a.body_timeout, "body-timeout")?,
        ui: !a.no_ui,
        vllm_metrics: !a.no_vllm_metrics,
        otlp_endpoint: a.otlp_endpoint.clone(),
        instance: a.instance_id.clone(),
        ..ServerConfig::default()
    };
    if let Some(e) = &cfg.otlp_endpoint {
        hasten_server::otel::check_endpoint(e).map_err(anyhow::Error::msg)?;
    }
    let opts = ServeOptions {
        conns: ConnConfig {
            max: a.max_connections,
            per_client: a.max_connections_per_client,
            idle_timeout: secs(a.idle_timeout, "idle-timeout")?,
        },
        shutdown_timeout: secs(a.shutdown_timeout, "shutdown-timeout")?,
        tls: match (&a.tls_cert, &a.tls_key) {
            (Some(c), Some(k)) => Some(Arc::new(Tls::load(c, k)?)),
            _ => None,
        },
    };
    let scheme = if opts.tls.is_some() { "https" } else { "http" };
    let (model, served, ctx_size) = (a.model.clone(), a.served_model_name.clone(), a.ctx_size);
    let template = match &a.chat_template {
        Some(f) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("reading --chat-template {}", f.display()))?,
        ),
        None => None,
    };
    let engine = EngineOptions {
        kv_bytes: a.kv_cache_mib << 20,
        max_running: a.max_running,
        max_waiting: a.max_waiting,
        itl_target: Duration::from_millis(a.itl_target_ms),
        prefix_cache: !a.no_prefix_cache,
        threads,
        max_step_tokens: Some(a.max_batch_tokens),
        max_draft: a.speculation.max_draft(),
        draft_model: None,
        kv_type: a.kv_type,
        prefix_disk: a
            .prefix_cache_dir
            .clone()
            .map(|dir| hasten_engine::disk::DiskCacheConfig {
                dir,
                max_bytes: a.prefix_cache_disk_bytes,
            }),
        swa_full: a.swa_full,
    };
    let draft = a.speculation.draft_model()?.map(|p| p.to_owned());
    let ui = cfg.ui;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let addr = format!("{}:{}", a.host, a.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let local = listener.local_addr()?;
        eprintln!(
            "hasten serve: loading the model; {scheme}://{local} answers /health meanwhile (/ready is 503)"
        );
        let loader = move || -> std::result::Result<Backend, LoadError> {
            // Resolving may download (hf:): the server already answers probes.
            let (path, default_name) = crate::models::resolve(model.as_deref())?;
            let draft = match &draft {
                Some(d) => Some(crate::models::resolve(Some(d))?.0),
                None => None,
            };
            let b = Backend::load(
                &path,
                served.unwrap_or(default_name),
                &engine,
                template.as_deref(),
                draft.as_deref(),
                ctx_size,
            )?;
            // Scripts wait for this line to learn the port (with --port 0);
            // it comes once the model is loaded, so it never precedes a
            // load error.
            let mut b = b;
            let (est_path, threads, kv) = (path.clone(), opts_threads, b.info.kv_type.clone());
            b.estimator = Some(std::sync::Arc::new(move || {
                crate::estimate::for_server(&est_path, &kv, threads).map_err(|e| format!("{e:#}"))
            }));
            eprintln!("hasten serve: listening on {scheme}://{local}");
            if ui {
                eprintln!("hasten serve: web page at {scheme}://{local}/ (--no-ui turns it off)");
            }
            Ok(b)
        };
        Ok(serve(Shared::new(cfg), listener, opts, loader, shutdown_signal()).await?)
    })
}
