//! hasten-bench: a load generator for any OpenAI-compatible server that
//! measures what `latency-vocabulary.md` defines (TTFT, TPOT, ITL, ICL,
//! E2E, throughput, goodput, schedule lag) and does not fool its user:
//!
//! - open-loop requests go out at their **intended** times from an absolute
//!   schedule, and latency counts from those times (no coordinated
//!   omission); lag is reported, and nothing is skipped or dropped;
//! - ITL is per token, from the server's per-chunk token counts when it
//!   gives them (`continuous_usage_stats`), with ICL beside it;
//! - failed and timed-out requests are counted, never left out silently;
//! - percentiles come with their sample counts, bootstrap intervals, and a
//!   warning when too few samples stand behind them.
//!
//! Modules: [`workload`] (what is sent), [`load`] (when), [`record`] (one
//! request's measurements), [`summary`] (figures), [`report`] (JSON, table,
//! CSV, compare), [`plot`] (SVG). [`sweep`] runs them in order.

pub mod error;
pub mod load;
pub mod plot;
pub mod record;
pub mod report;
pub mod summary;
pub mod workload;

pub use error::{Error, Result};
pub use load::{Arrivals, Level, Load, Stop};
pub use record::Record;
pub use report::{LevelRun, Run};
pub use summary::{Slo, Summary};
pub use workload::{Endpoint, Item, Lengths, Sampling, Source};

use hasten_client::Client;
use std::sync::Arc;

/// A whole benchmark: the load levels in turn, each on its own stretch of
/// the items (fresh prompts; give `levels × (requests + warmup)` items).
pub struct Plan {
    pub client: Client,
    pub url: String,
    pub endpoint: Endpoint,
    pub workload: String,
    pub items: Arc<[Item]>,
    pub sampling: Sampling,
    pub loads: Vec<Load>,
    pub warmup: usize,
    pub stop: Stop,
    pub seed: u64,
    pub slo: Slo,
}

/// Whether a 400 is about one of our optional fields.
fn refuses(e: &hasten_client::Error, field: &str) -> bool {
    matches!(
        e,
        hasten_client::Error::Status {
            status: 400 | 422,
            ..
        }
    ) && e.to_string().contains(field)
}

/// Sends one short request before the run, and drops the optional fields
/// (`ignore_eos`, `continuous_usage_stats`) the server refuses; returns a
/// warning for each one dropped. A server that refuses the plain request
/// is an error: the run would be all failures.
pub async fn probe(
    client: &Client,
    endpoint: Endpoint,
    item: &Item,
    s: &mut Sampling,
) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    let mut probe = item.clone();
    probe.output_tokens = 2;
    for _ in 0..3 {
        match client.stream(probe.request(endpoint, s)).collect().await {
            Ok(_) => return Ok(warnings),
            Err(f) if s.ignore_eos && refuses(&f.error, "ignore_eos") => {
                s.ignore_eos = false;
                warnings.push(
                    "the server refuses ignore_eos: output lengths are up to the model".into(),
                );
            }
            Err(f)
                if s.continuous_usage
                    && (refuses(&f.error, "stream_options")
                        || refuses(&f.error, "continuous_usage")) =>
            {
                s.continuous_usage = false;
                warnings.push(
                    "the server refuses continuous_usage_stats: ITL assumes one token per event unless counts say otherwise".into(),
                );
            }
            Err(f) => return Err(Error::Probe(f.error)),
        }
    }
    Ok(warnings)
}

/// Runs every level of `plan`; `on_level` is called as each begins and
/// `on_record` as each request completes (progress).
pub async fn sweep(
    plan: &Plan,
    mut on_level: impl FnMut(usize, &Load),
    mut on_record: impl FnMut(&Record),
) -> Run {
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let sampling = Arc::new(plan.sampling.clone());
    let mut levels = Vec::new();
    for (i, &load) in plan.loads.iter().enumerate() {
        on_level(i, &load);
        let level = Level {
            client: plan.client.clone(),
            items: plan.items.clone(),
            endpoint: plan.endpoint,
            sampling: sampling.clone(),
            load,
            warmup: plan.warmup,
            stop: plan.stop,
            seed: plan.seed.wrapping_add(i as u64),
            offset: i * (plan.items.len() / plan.loads.len().max(1)),
        };
        let records = load::run(level, &mut on_record).await;
        let summary = summary::summarize(load, &records, plan.slo);
        levels.push(LevelRun { summary, records });
    }
    Run {
        schema: report::SCHEMA.into(),
        url: plan.url.clone(),
        model: plan.sampling.model.clone(),
        endpoint: match plan.endpoint {
            Endpoint::Chat => "chat".into(),
            Endpoint::Completions => "completions".into(),
            Endpoint::Responses => "responses".into(),
        },
        workload: plan.workload.clone(),
        started_unix,
        ignore_eos: plan.sampling.ignore_eos,
        continuous_usage: plan.sampling.continuous_usage,
        levels,
    }
}
