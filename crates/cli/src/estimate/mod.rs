//! `hasten estimate`: a model (preset, GGUF, config.json or dimensions),
//! weight and KV formats, hardware (preset or `--measure`d) and a workload
//! → `hasten_estimate::estimate`, printed as a table that shows each
//! figure's formula and inputs, as a `--sweep` over one workload axis, as
//! `--json`, or set beside a `hasten bench` run with `--compare`.

mod compare;
pub mod measure;
mod source;
mod table;

use anyhow::{Context, Result};
use hasten_estimate::{presets, DType, Hardware, Model, Workload};

#[derive(clap::Args)]
pub struct Args {
    /// A preset (see --list), a GGUF file, a config.json or a directory
    /// holding one (default llama-2-7b, or the dimension flags alone).
    #[arg(long)]
    model: Option<String>,
    #[command(flatten)]
    dims: source::Dims,
    /// Weight format: f32, f16, bf16, fp8, q8_0, q4_0, q4_k_m, ... (default:
    /// the GGUF file's exact bits per weight, config.json's dtype, or f16).
    #[arg(long)]
    weights: Option<String>,
    /// KV cache element format.
    #[arg(long, default_value = "f16")]
    kv: String,
    /// Hardware preset (see --list).
    #[arg(long, default_value = "a100-80gb", conflicts_with = "measure")]
    hardware: String,
    /// Probe this machine instead (read bandwidth, decode matmul stream
    /// rate and prefill matmul rate with hasten's kernels; a few seconds).
    #[arg(long)]
    measure: bool,
    /// Buffer sizes of the --measure bandwidth probes, MiB (at least four
    /// times the last-level cache).
    #[arg(long, default_value_t = 256, hide = true)]
    probe_mib: usize,
    /// Threads for --measure; 0 uses every core.
    #[arg(long, short = 't', default_value_t = 0)]
    threads: usize,
    /// Prompt tokens per request.
    #[arg(long, default_value_t = 512)]
    prompt: u64,
    /// Output tokens per request.
    #[arg(long, default_value_t = 256)]
    output: u64,
    /// Sequences decoded together.
    #[arg(long, default_value_t = 1)]
    batch: u64,
    /// Prompt tokens already cached (prefix cache hits).
    #[arg(long, default_value_t = 0)]
    cached: u64,
    /// Network round trip, milliseconds.
    #[arg(long, default_value_t = 0.0)]
    rtt_ms: f64,
    /// One workload axis over a range: output=128..4096 (doubling),
    /// prompt=512,2048,8192, batch=1..64 or cached=0..1024.
    #[arg(long)]
    sweep: Option<String>,
    /// Set the estimate beside a `hasten bench --out` run's measurements,
    /// level by level (workload taken from the run).
    #[arg(long, value_name = "RUN.json")]
    compare: Option<std::path::PathBuf>,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
    /// List the presets.
    #[arg(long)]
    list: bool,
}

/// Everything an estimate is computed from.
pub struct Inputs {
    pub model: Model,
    pub weights: DType,
    pub kv: DType,
    pub hardware: Hardware,
    pub measured: Option<measure::Measured>,
}

fn dtype(name: &str, what: &str) -> Result<DType> {
    presets::dtype(name).with_context(|| format!("unknown {what} format {name:?} (--list)"))
}

pub fn main(a: Args) -> Result<()> {
    if a.list {
        println!("models: {}", presets::model_names().join(", "));
        println!(
            "weight and KV formats: {}",
            presets::dtype_names().join(", ")
        );
        println!("hardware: {}", presets::hardware_names().join(", "));
        return Ok(());
    }
    let src = source::resolve(a.model.as_deref(), &a.dims)?;
    let weights = match (&a.weights, src.weights) {
        (Some(w), _) => dtype(w, "weight")?,
        (None, Some(w)) => w,
        (None, None) => dtype("f16", "weight")?,
    };
    let kv = dtype(&a.kv, "KV")?;
    anyhow::ensure!(a.cached <= a.prompt, "--cached cannot exceed --prompt");
    anyhow::ensure!(
        a.output >= 1 && a.batch >= 1,
        "--output and --batch must be at least 1"
    );
    anyhow::ensure!(
        a.rtt_ms.is_finite() && a.rtt_ms >= 0.0,
        "--rtt-ms must be a non-negative number"
    );
    let sweep = a.sweep.as_deref().map(table::Sweep::parse).transpose()?;
    let run = match &a.compare {
        Some(p) => Some(compare::read(p)?),
        None => None,
    };
    let (hardware, measured) = if a.measure {
        let ty = match (&a.weights, src.ggml_type) {
            (None, Some(t)) => t,
            _ => measure::kernel_type(&weights.name),
        };
        let threads = crate::threads(a.threads)?;
        if !a.json {
            eprintln!(
                "measuring this machine with {} threads and {} matmuls at {}'s shapes...",
                threads.get(),
                ty.name(),
                src.model.name
            );
        }
        // What a decode step reads: the weights and the prompt's KV.
        let working_set = src.model.params() as f64 * weights.bits / 8.0
            + src.model.kv_bytes_per_token(kv.bits) * (a.prompt + a.output / 2) as f64;
        // Attention is probed at the deepest prompt asked about: its rate
        // grows with the context (the cost per call and per row is spread
        // over more positions), and at shallow points it is a small part.
        let deepest = match &sweep {
            Some(s) if matches!(s.axis, table::Axis::Prompt) => {
                s.values.iter().copied().max().unwrap_or(a.prompt)
            }
            _ => a.prompt,
        };
        let m = measure::probe(
            &src.model,
            ty,
            &kv.name,
            threads,
            deepest as usize,
            a.probe_mib,
            working_set as u64,
        )?;
        (m.hardware(), Some(m))
    } else {
        let hw = presets::hardware(&a.hardware)
            .with_context(|| format!("unknown hardware {:?} (--list)", a.hardware))?;
        (hw, None)
    };
    let inputs = Inputs {
        model: src.model,
        weights,
        kv,
        hardware,
        measured,
    };
    let load = Workload {
        prompt_tokens: a.prompt,
        output_tokens: a.output,
        batch: a.batch,
        cached_tokens: a.cached,
        rtt_ms: a.rtt_ms,
    };
    if let Some(run) = run {
        return compare::print(&inputs, &run, a.rtt_ms, a.json);
    }
    if let Some(s) = sweep {
        return table::sweep(&inputs, &load, &s, a.json);
    }
    table::print(&inputs, &load, a.json)
}

/// The estimate the web page's server view shows beside the measured
/// decode speed: this machine probed (`--measure`, a few seconds, every
/// thread of `threads`) for the served model file at `path` with its KV
/// type, one sequence of 512 prompt and 256 output tokens. The same
/// inputs and function as `hasten estimate --model PATH --measure --kv KV`.
pub fn for_server(
    path: &std::path::Path,
    kv: &str,
    threads: hasten_kernels::threads::Threads,
) -> Result<serde_json::Value> {
    let path_str = path.to_str().context("the model path is not UTF-8")?;
    let src = source::resolve(Some(path_str), &source::Dims::default())?;
    let weights = match src.weights {
        Some(w) => w,
        None => dtype("f16", "weight")?,
    };
    let kv = dtype(kv, "KV")?;
    let ty = src
        .ggml_type
        .unwrap_or_else(|| measure::kernel_type(&weights.name));
    let load = Workload {
        prompt_tokens: 512,
        output_tokens: 256,
        batch: 1,
        cached_tokens: 0,
        rtt_ms: 0.0,
    };
    let working_set = src.model.params() as f64 * weights.bits / 8.0
        + src.model.kv_bytes_per_token(kv.bits)
            * (load.prompt_tokens + load.output_tokens / 2) as f64;
    let m = measure::probe(
        &src.model,
        ty,
        &kv.name,
        threads,
        512,
        256,
        working_set as u64,
    )?;
    let e = hasten_estimate::estimate(&src.model, &weights, &kv, &m.hardware(), &load);
    Ok(serde_json::json!({
        "command": format!("hasten estimate --model {path_str} --measure --kv {} -t {}", kv.name, threads.get()),
        "prompt_tokens": load.prompt_tokens,
        "output_tokens": load.output_tokens,
        "ttft_ms": e.ttft_s * 1e3,
        "tpot_ms": e.tpot_s * 1e3,
        "decode_tokens_per_s": e.tokens_per_s_per_sequence,
        "weight_bytes_read": e.weight_bytes_read,
        "read_gbs": m.read_gbs,
        "decode_stream_gbs": m.decode_stream_gbs,
        "probe_s": m.probe_s,
    }))
}
