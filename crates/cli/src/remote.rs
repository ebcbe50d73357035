//! Flags shared by the subcommands that talk to a server (`chat`,
//! `complete`, and the endpoint part for `bench`): endpoint, key, timeouts, retries, break policy, hedging;
//! and the `/stats` report both print.

use anyhow::{bail, Context, Result};
use hasten_client::{percentile, Client, Config, Hedge, OnBreak, Stats};
use std::time::Duration;

/// Which server, model and key (`chat`, `complete` and `bench`).
#[derive(clap::Args, Debug, Clone)]
pub struct Endpoint {
    /// The server: any OpenAI-compatible base URL (`/v1` is added when
    /// missing). Several replicas of one model, comma-separated or the flag
    /// repeated: requests take them in turn and fail over to the next on
    /// connection errors, 429 and 5xx before output.
    #[arg(
        long,
        env = "HASTEN_URL",
        default_value = "http://127.0.0.1:8080",
        value_delimiter = ','
    )]
    pub url: Vec<String>,
    /// Model id to ask for (default: the first the server lists).
    #[arg(long)]
    pub model: Option<String>,
    /// Bearer token.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// PEM file of certificates to trust for https:// besides the web's
    /// roots (a private CA or a self-signed server). Always verified.
    #[arg(long, env = "HASTEN_CA_CERT")]
    pub ca_cert: Option<std::path::PathBuf>,
}

impl Endpoint {
    /// The client settings for this endpoint (defaults otherwise).
    pub fn config(&self) -> Result<Config> {
        let mut c = Config::new(self.url[0].clone());
        c.fallback_urls = self.url[1..].to_vec();
        c.api_key = self.api_key.clone().filter(|k| !k.is_empty());
        if let Some(p) = &self.ca_cert {
            let pem = std::fs::read(p)
                .with_context(|| format!("reading the CA certificates {}", p.display()))?;
            c.ca_pem = Some(pem);
        }
        Ok(c)
    }

    /// The endpoints as one string, for messages and reports.
    pub fn urls(&self) -> String {
        self.url.join(",")
    }

    /// `--model`, else the first model the server lists, else none (hasten
    /// serves one model and needs no name).
    pub async fn model(&self, client: &Client) -> Option<String> {
        if self.model.is_some() {
            return self.model.clone();
        }
        client.models().await.ok()?.into_iter().next()
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct Remote {
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// Seconds to set up a connection.
    #[arg(long, default_value_t = 10.0)]
    pub connect_timeout: f64,
    /// Seconds from sending to the first token.
    #[arg(long, default_value_t = 120.0)]
    pub first_token_timeout: f64,
    /// Seconds without an event once output began (keep-alives do not count).
    #[arg(long, default_value_t = 30.0)]
    pub idle_timeout: f64,
    /// Seconds for the whole answer (0: no limit).
    #[arg(long, default_value_t = 0.0)]
    pub total_timeout: f64,
    /// Retries of failures before any output.
    #[arg(long, default_value_t = 3)]
    pub retries: u32,
    /// After output began, a broken stream is: resumed (hasten), continued
    /// (any server: the partial text is sent back as a prefix), or failed.
    #[arg(long, value_enum, default_value_t = BreakArg::Continue)]
    pub on_break: BreakArg,
    /// Send a second request when no token arrived after this many
    /// milliseconds ("p95": this session's p95 TTFT); the first to answer wins.
    #[arg(long)]
    pub hedge: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum BreakArg {
    Fail,
    Resume,
    Continue,
}

fn secs(name: &str, v: f64) -> Result<Duration> {
    if !(v.is_finite() && v > 0.0 && v < 1e7) {
        bail!("--{name} must be a positive number of seconds, got {v}");
    }
    Ok(Duration::from_secs_f64(v))
}

impl Remote {
    pub fn client(&self) -> Result<Client> {
        let mut c = self.endpoint.config()?;
        c.timeouts.connect = secs("connect-timeout", self.connect_timeout)?;
        c.timeouts.first_token = secs("first-token-timeout", self.first_token_timeout)?;
        c.timeouts.idle = secs("idle-timeout", self.idle_timeout)?;
        c.timeouts.total = if self.total_timeout == 0.0 {
            None
        } else {
            Some(secs("total-timeout", self.total_timeout)?)
        };
        c.retry.max_retries = self.retries;
        c.on_break = match self.on_break {
            BreakArg::Fail => OnBreak::Fail,
            BreakArg::Resume => OnBreak::Resume,
            BreakArg::Continue => OnBreak::Continue,
        };
        c.hedge = match self.hedge.as_deref() {
            None => None,
            Some("p95") => Some(Hedge {
                delay: hasten_client::HedgeDelay::P95 {
                    min_samples: 5,
                    fallback: Duration::from_secs(2),
                },
                ..Hedge::fixed(Duration::ZERO)
            }),
            Some(ms) => match ms.parse::<u64>() {
                Ok(ms) => Some(Hedge::fixed(Duration::from_millis(ms))),
                Err(_) => bail!("--hedge takes milliseconds or \"p95\", got {ms:?}"),
            },
        };
        Ok(Client::new(c)?)
    }

    pub async fn model(&self, client: &Client) -> Option<String> {
        self.endpoint.model(client).await
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// A few lines on where the time of one answer went.
pub fn report(s: &Stats) -> String {
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("  {k:<30}{v}\n"));
    line("TTFT", s.ttft.map_or("-".into(), ms));
    line("TPOT", s.tpot().map_or("-".into(), ms));
    let q = |p| percentile(&s.itl, p).map_or("-".into(), ms);
    line(
        "ITL p50 / p99 / max",
        format!(
            "{} / {} / {} ({} samples)",
            q(0.5),
            q(0.99),
            q(1.0),
            s.itl.len()
        ),
    );
    line("E2E", ms(s.e2e));
    line("output tokens", s.output_tokens.to_string());
    if s.e2e > Duration::ZERO && s.output_tokens > 0 {
        line(
            "tokens/s",
            format!("{:.1}", s.output_tokens as f64 / s.e2e.as_secs_f64()),
        );
    }
    if let Some(t) = s.server {
        line(
            "server queue/prefill/decode",
            format!(
                "{:.1} / {:.1} / {:.1} ms ({} prompt tokens, {} cached)",
                t.queue_ms, t.prefill_ms, t.decode_ms, t.prompt_tokens, t.cached_prompt_tokens
            ),
        );
    }
    if let Some(n) = s.network() {
        line("network + client", ms(n));
    }
    line(
        "attempts",
        format!(
            "{} (retries {}, hedges {}{}, resumes {}, continuations {})",
            s.attempts,
            s.retries,
            s.hedges,
            if s.hedge_won { ", hedge won" } else { "" },
            s.resumes,
            s.continuations
        ),
    );
    if let Some(id) = &s.request_id {
        line("request id", id.clone());
    }
    out
}

/// Generation settings both subcommands send.
#[derive(clap::Args, Debug, Clone)]
pub struct Gen {
    /// Most tokens to generate (default: the server's)
    #[arg(long, short = 'n')]
    pub max_tokens: Option<i64>,
    /// Sampling temperature (0: greedy)
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Seed for sampling, for repeatable answers
    #[arg(long)]
    pub seed: Option<i64>,
    /// Stop before this text (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
}

impl Gen {
    pub fn sampling(&self, stream: bool) -> hasten_protocol::Sampling {
        hasten_protocol::Sampling {
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            seed: self.seed,
            stop: (!self.stop.is_empty()).then(|| hasten_protocol::Stop::Many(self.stop.clone())),
            // Usage gives exact token counts for TPOT; every common server takes it.
            stream_options: stream.then_some(hasten_protocol::StreamOptions {
                include_usage: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}
