//! `hasten bench`: flags → a `hasten_bench::Plan`, a progress bar while it
//! runs, then the table and the files asked for; `hasten bench compare`.

use crate::remote::Endpoint;
use anyhow::{bail, Context, Result};
use hasten_bench::{report, Arrivals, Lengths, Load, Plan, Sampling, Slo, Source, Stop};
use hasten_client::Client;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// Ratios of two runs' figures (B / A), with a warning where the
    /// difference is within noise.
    Compare {
        /// The baseline run (a JSON file written by --json).
        a: String,
        /// The run compared with it.
        b: String,
        /// A markdown table of the two side by side instead.
        #[arg(long)]
        markdown: bool,
        /// Names of the two runs in the markdown table.
        #[arg(long, value_delimiter = ',', default_value = "A,B")]
        names: Vec<String>,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum WorkloadArg {
    /// Random words (about one token each), --input-len long.
    Random,
    /// A --prefix-len system prompt shared by every request, then random
    /// words (shows prefix caching).
    SharedPrefix,
    /// --file: one JSON object per line, {"prompt": ...} or {"messages": [...]}.
    Jsonl,
    /// --file: ShareGPT JSON ([{"conversations": [...]}]).
    Sharegpt,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum EndpointArg {
    Chat,
    Completions,
    Responses,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum ArrivalsArg {
    Poisson,
    Constant,
}

#[derive(clap::Args)]
struct RunArgs {
    #[command(flatten)]
    endpoint: Endpoint,
    /// Which API to load.
    #[arg(long, value_enum, default_value_t = EndpointArg::Chat)]
    api: EndpointArg,
    /// Closed loop: requests kept in flight, one level per value (1,4,16).
    #[arg(long, value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Open loop: requests per second, one level per value (0.5,1,2).
    /// Requests go out at their scheduled times whatever the server does.
    #[arg(long, value_delimiter = ',')]
    rate: Vec<f64>,
    /// Gaps between open-loop arrivals.
    #[arg(long, value_enum, default_value_t = ArrivalsArg::Poisson)]
    arrivals: ArrivalsArg,
    /// Measured requests per level (default 50 unless --duration is given).
    #[arg(long, short = 'n')]
    requests: Option<usize>,
    /// Seconds per level (from the first measured request's send time).
    #[arg(long)]
    duration: Option<f64>,
    /// Requests sent first at each level and left out of the figures.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Where prompts come from.
    #[arg(long, value_enum, default_value_t = WorkloadArg::Random)]
    workload: WorkloadArg,
    /// The prompt file for --workload jsonl|sharegpt.
    #[arg(long)]
    file: Option<String>,
    /// Prompt length in words: N or LO..HI (uniform).
    #[arg(long, default_value = "128")]
    input_len: String,
    /// Output tokens: N or LO..HI (default 128, or the file's).
    #[arg(long)]
    output_len: Option<String>,
    /// Shared system prompt length in words (--workload shared-prefix).
    #[arg(long, default_value_t = 512)]
    prefix_len: u32,
    /// Seed of the workload and the Poisson schedule.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Temperature sent with every request (default: the server's).
    #[arg(long)]
    temperature: Option<f64>,
    /// Do not ask for ignore_eos (outputs may end early).
    #[arg(long)]
    no_ignore_eos: bool,
    /// Do not ask for per-chunk usage (continuous_usage_stats).
    #[arg(long)]
    no_continuous_usage: bool,
    /// Service-level objectives for goodput: ttft=500ms,tpot=50ms,e2e=10s.
    #[arg(long)]
    slo: Option<String>,
    /// Retries of a request that failed before any output (connection
    /// errors, 408/409/429/5xx); each shows in its record's `attempts` and
    /// its latency, and the summary warns about them. 0: count as failed.
    #[arg(long, default_value_t = 1)]
    retries: u32,
    /// Seconds one request may take before it counts as timed out.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// Write every record and the summaries as JSON.
    #[arg(long)]
    out: Option<String>,
    /// Write one CSV line per request.
    #[arg(long)]
    csv: Option<String>,
    /// Write SVG charts into this folder.
    #[arg(long)]
    plot: Option<String>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

pub fn main(args: Args) -> Result<()> {
    match args.cmd {
        Some(Cmd::Compare {
            a,
            b,
            markdown,
            names,
        }) => {
            let (a, b) = (report::Run::read(&a)?, report::Run::read(&b)?);
            if markdown {
                let [na, nb] = names.as_slice() else {
                    bail!("--names takes two names, A,B");
                };
                print!("{}", report::side_by_side(&a, &b, [na, nb]));
            } else {
                print!("{}", report::compare(&a, &b));
            }
            Ok(())
        }
        None => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(run(args.run))
        }
    }
}

fn loads(a: &RunArgs) -> Result<Vec<Load>> {
    let arrivals = match a.arrivals {
        ArrivalsArg::Poisson => Arrivals::Poisson,
        ArrivalsArg::Constant => Arrivals::Constant,
    };
    let mut out: Vec<Load> = a
        .concurrency
        .iter()
        .map(|&n| Load::Concurrency { n })
        .collect();
    for &per_s in &a.rate {
        if !(per_s.is_finite() && per_s > 0.0) {
            bail!("--rate must be positive, got {per_s}");
        }
        out.push(Load::Rate { per_s, arrivals });
    }
    if a.concurrency.contains(&0) {
        bail!("--concurrency must be at least 1");
    }
    if out.is_empty() {
        out.push(Load::Concurrency { n: 1 });
    }
    Ok(out)
}

async fn run(a: RunArgs) -> Result<()> {
    let loads = loads(&a)?;
    if a.duration.is_some_and(|d| !(d.is_finite() && d > 0.0)) {
        bail!("--duration must be a positive number of seconds");
    }
    let stop = Stop {
        requests: a
            .requests
            .or(if a.duration.is_none() { Some(50) } else { None }),
        duration: a.duration.map(Duration::from_secs_f64),
    };
    if stop.requests == Some(0) {
        bail!("--requests must be at least 1");
    }
    let slo = a
        .slo
        .as_deref()
        .map(Slo::parse)
        .transpose()?
        .unwrap_or_default();
    let input = Lengths::parse(&a.input_len)?;
    let output = a.output_len.as_deref().map(Lengths::parse).transpose()?;
    let file = || {
        a.file
            .clone()
            .context("--workload jsonl and sharegpt need --file")
    };
    let source = match a.workload {
        WorkloadArg::Random => Source::Random { input },
        WorkloadArg::SharedPrefix => Source::SharedPrefix {
            prefix: a.prefix_len,
            input,
        },
        WorkloadArg::Jsonl => Source::Jsonl(file()?),
        WorkloadArg::Sharegpt => Source::ShareGpt(file()?),
    };
    // Fresh items for every level (so no level finds its prompts cached by
    // an earlier one); duration-bound levels cycle through theirs.
    let count = loads.len() * (stop.requests.unwrap_or(1000) + a.warmup);
    let items = hasten_bench::workload::build(&source, output, count, a.seed)?;
    let mut cfg = a.endpoint.config()?;
    cfg.retry.max_retries = a.retries;
    cfg.timeouts.first_token = Duration::from_secs_f64(a.timeout.max(0.001));
    cfg.timeouts.idle = Duration::from_secs_f64(a.timeout.max(0.001));
    cfg.timeouts.total = Some(Duration::from_secs_f64(a.timeout.max(0.001)));
    // One server: a break after output fails the request (a benchmark
    // should see it). Several replicas: a replica lost mid-answer is part
    // of what is measured, so the answer continues on another (its record
    // counts the failover) rather than being lost.
    cfg.on_break = if a.endpoint.url.len() > 1 {
        hasten_client::OnBreak::Continue
    } else {
        hasten_client::OnBreak::Fail
    };
    let client = Client::new(cfg)?;
    let endpoint = match a.api {
        EndpointArg::Chat => hasten_bench::Endpoint::Chat,
        EndpointArg::Completions => hasten_bench::Endpoint::Completions,
        EndpointArg::Responses => hasten_bench::Endpoint::Responses,
    };
    let mut sampling = Sampling {
        model: a.endpoint.model(&client).await,
        temperature: a.temperature,
        ignore_eos: !a.no_ignore_eos,
        // Responses events have no per-event usage.
        continuous_usage: !a.no_continuous_usage && endpoint != hasten_bench::Endpoint::Responses,
    };
    let notes = hasten_bench::probe(&client, endpoint, &items[0], &mut sampling)
        .await
        .with_context(|| format!("probing {}", a.endpoint.urls()))?;
    for n in &notes {
        eprintln!("note: {n}");
    }
    let workload = format!(
        "{:?} input {} output {} seed {}{}",
        a.workload,
        a.input_len,
        a.output_len.as_deref().unwrap_or("128"),
        a.seed,
        a.file
            .as_deref()
            .map_or(String::new(), |f| format!(" file {f}"))
    );
    let plan = Plan {
        client,
        url: a.endpoint.urls(),
        endpoint,
        workload,
        items: Arc::from(items),
        sampling,
        loads: loads.clone(),
        warmup: a.warmup,
        stop,
        seed: a.seed,
        slo,
    };
    let bar = if a.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix:>22} [{bar:30}] {pos}/{len} {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    let per_level = stop.requests.map(|n| (n + a.warmup) as u64);
    let seen = std::cell::RefCell::new(Progress::default());
    let run = hasten_bench::sweep(
        &plan,
        |_, load| {
            *seen.borrow_mut() = Progress::default();
            bar.set_prefix(load.label());
            bar.set_position(0);
            bar.set_length(per_level.unwrap_or(0));
        },
        |r| {
            seen.borrow_mut().add(r);
            bar.inc(1);
            if per_level.is_none() {
                bar.set_length(bar.position());
            }
            bar.set_message(seen.borrow().line());
        },
    )
    .await;
    bar.finish_and_clear();
    let summaries: Vec<_> = run.levels.iter().map(|l| l.summary.clone()).collect();
    print!("{}", report::table(&summaries));
    if let Some(t) = report::endpoints(&run.levels) {
        print!("{t}");
    }
    if let Some(p) = &a.out {
        let text = serde_json::to_string_pretty(&run)?;
        std::fs::write(p, text).with_context(|| format!("writing {p}"))?;
        eprintln!("wrote {p}");
    }
    if let Some(p) = &a.csv {
        std::fs::write(p, report::csv(&run.levels)).with_context(|| format!("writing {p}"))?;
        eprintln!("wrote {p}");
    }
    if let Some(dir) = &a.plot {
        for f in hasten_bench::plot::write(std::path::Path::new(dir), &run.levels)? {
            eprintln!("wrote {f}");
        }
    }
    Ok(())
}

/// Running figures for the progress bar.
#[derive(Default)]
struct Progress {
    ttft: Vec<f64>,
    tokens: u64,
    failed: usize,
    first: Option<f64>,
    last: f64,
}

impl Progress {
    fn add(&mut self, r: &hasten_bench::Record) {
        if r.warmup {
            return;
        }
        if !r.ok {
            self.failed += 1;
            return;
        }
        self.ttft.extend(r.ttft_ms);
        self.tokens += r.output_tokens;
        self.first = Some(
            self.first
                .map_or(r.intended_at_ms, |f| f.min(r.intended_at_ms)),
        );
        self.last = self.last.max(r.done_at_ms);
    }

    fn line(&self) -> String {
        let mut t = self.ttft.clone();
        t.sort_by(f64::total_cmp);
        let p50 = hasten_bench::summary::quantile(&t, 0.5);
        let secs = self.first.map_or(0.0, |f| (self.last - f) / 1e3);
        let tps = if secs > 0.0 {
            self.tokens as f64 / secs
        } else {
            0.0
        };
        format!(
            "TTFT p50 {p50:.0} ms, {tps:.1} tok/s, {} failed",
            self.failed
        )
    }
}
