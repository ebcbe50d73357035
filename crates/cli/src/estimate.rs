//! `hasten estimate`: flags → `hasten_estimate::estimate`, printed as a
//! table that shows each figure's formula and inputs, or as JSON.

use anyhow::{Context, Result};
use hasten_estimate::presets;

#[derive(clap::Args)]
pub struct Args {
    /// Model preset (see --list).
    #[arg(long, default_value = "llama-2-7b")]
    model: String,
    /// Weight format: f32, f16, bf16, fp8, q8_0, q4_0, q4_k_m, ...
    #[arg(long, default_value = "f16")]
    weights: String,
    /// KV cache element format.
    #[arg(long, default_value = "f16")]
    kv: String,
    /// Hardware preset (see --list).
    #[arg(long, default_value = "a100-80gb")]
    hardware: String,
    #[arg(long, default_value_t = 512)]
    prompt: u64,
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
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
    /// List the presets.
    #[arg(long)]
    list: bool,
}

fn gb(b: f64) -> String {
    format!("{:.2} GB", b / 1e9)
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
    let m = presets::model(&a.model)
        .with_context(|| format!("unknown model {:?} (--list)", a.model))?;
    let w = presets::dtype(&a.weights)
        .with_context(|| format!("unknown weight format {:?} (--list)", a.weights))?;
    let kv =
        presets::dtype(&a.kv).with_context(|| format!("unknown KV format {:?} (--list)", a.kv))?;
    let hw = presets::hardware(&a.hardware)
        .with_context(|| format!("unknown hardware {:?} (--list)", a.hardware))?;
    anyhow::ensure!(a.cached <= a.prompt, "--cached cannot exceed --prompt");
    anyhow::ensure!(
        a.output >= 1 && a.batch >= 1,
        "--output and --batch must be at least 1"
    );
    let load = hasten_estimate::Workload {
        prompt_tokens: a.prompt,
        output_tokens: a.output,
        batch: a.batch,
        cached_tokens: a.cached,
        rtt_ms: a.rtt_ms,
    };
    let e = hasten_estimate::estimate(&m, w, kv, &hw, &load);
    if a.json {
        let v = serde_json::json!({"model": m, "weights": w, "kv": kv, "hardware": hw, "workload": load, "estimate": e});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{} ({} layers, hidden {}, {} heads, {} KV heads of {}), {} weights, {} KV, on {} ({} GB, {} GB/s, {} TFLOP/s)",
        m.name, m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, w.name, kv.name, hw.name, hw.memory_gb, hw.bandwidth_gbs, hw.tflops
    );
    let row = |k: &str, f: &str, v: String| println!("  {k:<26}{v:>16}   {f}");
    row(
        "parameters",
        "layers × (attention + FFN) + embeddings",
        format!("{:.3} B", e.params as f64 / 1e9),
    );
    row(
        "weight bytes",
        &format!("parameters × {} bits / 8", w.bits),
        gb(e.weight_bytes),
    );
    row(
        "KV bytes per token",
        &format!(
            "2 × {} layers × {} KV heads × {} × {} bits / 8",
            m.layers, m.kv_heads, m.head_dim, kv.bits
        ),
        format!("{:.4} MiB", e.kv_bytes_per_token / 1048576.0),
    );
    row(
        "KV per sequence",
        &format!("per token × ({} + {})", a.prompt, a.output),
        format!("{:.3} GB", e.kv_bytes_per_sequence / 1e9),
    );
    row(
        "sequences that fit",
        "(memory − weights) / KV per sequence",
        e.sequences_fit.to_string(),
    );
    let ms = |s: f64| format!("{:.2} ms", s * 1e3);
    row(
        "prefill",
        &format!(
            "max({:.3e} B / bandwidth = {}, {:.3e} FLOP / compute = {}): {:?}-bound",
            e.prefill.bytes,
            ms(e.prefill.memory_s),
            e.prefill.flops,
            ms(e.prefill.compute_s),
            e.prefill.bound
        ),
        ms(e.prefill.seconds()),
    );
    for (k, p) in [
        ("decode step, first", &e.decode_first),
        ("decode step, last", &e.decode_last),
    ] {
        row(
            k,
            &format!("max((weights + batch × context × KV/token) / bandwidth = {}, FLOP / compute = {}): {:?}-bound", ms(p.memory_s), ms(p.compute_s), p.bound),
            ms(p.seconds()),
        );
    }
    row("TTFT", "round trip + prefill", ms(e.ttft_s));
    row("TPOT", "decode step at the mean context", ms(e.tpot_s));
    row(
        "E2E",
        "TTFT + (output − 1) × TPOT",
        format!("{:.3} s", e.e2e_s),
    );
    row(
        "tokens/s per sequence",
        "1 / TPOT",
        format!("{:.1}", e.tokens_per_s_per_sequence),
    );
    row(
        "tokens/s in total",
        "batch / TPOT",
        format!("{:.1}", e.tokens_per_s_total),
    );
    row(
        "KV share of decode bytes",
        "KV reads / (KV + weights) at the mean context",
        format!("{:.1}%", e.decode_kv_fraction * 100.0),
    );
    Ok(())
}
