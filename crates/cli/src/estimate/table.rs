//! Printing an estimate: the table of figures with their formulas, and the
//! `--sweep` table of how latency grows along one workload axis.

use super::Inputs;
use anyhow::{bail, Context, Result};
use hasten_estimate::{estimate, Estimate, Workload};

fn gb(b: f64) -> String {
    format!("{:.2} GB", b / 1e9)
}

fn ms(s: f64) -> String {
    format!("{:.2} ms", s * 1e3)
}

pub(super) fn header(i: &Inputs) {
    let (m, w, kv, hw) = (&i.model, &i.weights, &i.kv, &i.hardware);
    println!(
        "{} ({} layers, hidden {}, {} heads, {} KV heads of {}, FFN {}, vocab {}), {} weights ({:.3} bits), {} KV",
        m.name, m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn, m.vocab, w.name, w.bits, kv.name
    );
    match &i.measured {
        Some(p) => {
            println!(
                "on {}: read bandwidth {:.2} GB/s; {} decode matmuls stream weights at {:.2} GB/s ({:.0}% of it); {} matmuls of {} rows run at {:.1} GFLOP/s; attention over {} tokens at {:.1} GFLOP/s (decode: {:.1}); probed in {:.1} s",
                hw.name, p.read_gbs, p.weight_type, p.decode_stream_gbs,
                100.0 * p.decode_stream_gbs / p.read_gbs, p.weight_type, p.prefill_rows, p.prefill_gflops,
                p.attention_prompt, p.attention_gflops, p.decode_attention_gflops, p.probe_s
            );
            let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
            let llc = match (p.llc_bytes, p.llc_gbs) {
                (Some(b), Some(g)) => format!(
                    "a decode step's weights and KV fit in the {:.0} MiB last-level cache: a read of their size runs at {g:.1} GB/s",
                    mib(b)
                ),
                (Some(b), None) => format!(
                    "a decode step's weights and KV do not fit in the {:.0} MiB last-level cache",
                    mib(b)
                ),
                _ => "no last-level cache size found".into(),
            };
            println!(
                "  {llc}; a step's parts add up, plus {:.2} ms fixed ({} pool regions of {:.2} us); prefill's norms, RoPE, KV writes, gate and residuals: {:.2} us per token per layer",
                p.step_fixed_ms,
                hasten_model::llama::decode_regions(m.layers as usize),
                p.region_us,
                p.prefill_token_layer_us
            );
        }
        None => println!(
            "on {} ({} GB, {} GB/s, {} TFLOP/s dense f16{})",
            hw.name,
            hw.memory_gb,
            hw.bandwidth_gbs,
            hw.tflops,
            hw.int8_tops
                .map(|t| format!(", {t} TOP/s dense int8 (for int8/fp8 weights)"))
                .unwrap_or_default()
        ),
    }
}

/// Prints each of `warnings` to stderr as `warning: <what>`, after `at`.
pub(super) fn warn(at: &str, warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {at}{w}");
    }
}

pub fn print(i: &Inputs, load: &Workload, json: bool) -> Result<()> {
    let e = estimate(&i.model, &i.weights, &i.kv, &i.hardware, load);
    let warnings = e.warnings(load, &i.hardware);
    warn("", &warnings);
    if json {
        let v = serde_json::json!({"model": i.model, "weights": i.weights, "kv": i.kv,
            "hardware": i.hardware, "measured": i.measured, "workload": load, "estimate": e,
            "warnings": warnings});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    header(i);
    let (m, w) = (&i.model, &i.weights);
    let row = |k: &str, f: &str, v: String| println!("  {k:<26}{v:>16}   {f}");
    row(
        "parameters",
        "layers × (attention + FFN) + embeddings",
        format!("{:.3} B", e.params as f64 / 1e9),
    );
    if e.active_params != e.params {
        let why = if m.experts > 1 {
            format!("{} of {} experts per token", m.active_experts, m.experts)
        } else {
            "all but the input embedding (a lookup)".into()
        };
        row(
            "active parameters",
            &why,
            format!("{:.3} B", e.active_params as f64 / 1e9),
        );
    }
    row(
        "weight bytes",
        &format!("parameters × {:.3} bits / 8", w.bits),
        gb(e.weight_bytes),
    );
    row(
        "KV bytes per token",
        &format!(
            "2 × {} layers × {} KV heads × {} × {} bits / 8",
            m.layers, m.kv_heads, m.head_dim, i.kv.bits
        ),
        format!("{:.4} MiB", e.kv_bytes_per_token / 1048576.0),
    );
    let windowed = match m.window {
        Some(w) => {
            row(
                "sliding window",
                &format!(
                    "{} of {} layers attend (and keep) the last {} positions only",
                    w.layers, m.layers, w.size
                ),
                format!("{} tokens", w.size),
            );
            format!(" (windowed layers: {} at most)", w.size)
        }
        None => String::new(),
    };
    row(
        "KV per sequence",
        &format!(
            "per token × ({} + {}){windowed}",
            load.prompt_tokens, load.output_tokens
        ),
        format!("{:.3} GB", e.kv_bytes_per_sequence / 1e9),
    );
    row(
        "sequences that fit",
        &format!(
            "({:.0} GB memory − weights) / KV per sequence",
            i.hardware.memory_gb
        ),
        e.sequences_fit.to_string(),
    );
    row(
        "prefill",
        &format!(
            "max({:.3e} B / bandwidth = {}, {:.3e} FLOP ({:.0}% attention) / compute = {}): {:?}-bound",
            e.prefill.bytes,
            ms(e.prefill.memory_s),
            e.prefill.flops,
            100.0 * e.prefill.attention_flops / e.prefill.flops,
            ms(e.prefill.compute_s),
            e.prefill.bound
        ),
        ms(e.prefill.seconds()),
    );
    for (k, p, ctx) in [
        (
            "decode step, first",
            &e.decode_first,
            load.prompt_tokens + 1,
        ),
        (
            "decode step, last",
            &e.decode_last,
            load.prompt_tokens + load.output_tokens.max(2) - 1,
        ),
    ] {
        row(
            k,
            &format!(
                "context {ctx}: max((weights read + {} × {ctx} × KV/token) / bandwidth = {}, FLOP / compute = {}): {:?}-bound",
                load.batch, ms(p.memory_s), ms(p.compute_s), p.bound
            ),
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
    row(
        "KV read while decoding",
        "Σ over steps of batch × context × KV/token (quadratic in output)",
        gb(e.decode_kv_read_bytes),
    );
    println!("  bottleneck: {}", bottleneck(&e));
    Ok(())
}

fn bottleneck(e: &Estimate) -> String {
    let decode = e.e2e_s - e.ttft_s;
    let (phase, p) = if e.prefill.seconds() >= decode {
        ("prefill", &e.prefill)
    } else {
        ("decode", &e.decode_last)
    };
    let what = match p.bound {
        hasten_estimate::Bound::Memory => "memory bandwidth",
        hasten_estimate::Bound::Compute => "compute",
    };
    format!("{phase} takes most of E2E and is bound by {what}")
}

/// One workload axis and the values it takes.
pub struct Sweep {
    pub axis: Axis,
    pub values: Vec<u64>,
}

#[derive(Clone, Copy, Debug)]
pub enum Axis {
    Output,
    Prompt,
    Batch,
    Cached,
}

impl Sweep {
    /// `output=128..4096` (doubling, the end included) or `batch=1,8,32`.
    pub fn parse(s: &str) -> Result<Sweep> {
        let (k, v) = s
            .split_once('=')
            .with_context(|| format!("--sweep {s:?}: expected AXIS=FROM..TO or AXIS=A,B,C"))?;
        let axis = match k {
            "output" => Axis::Output,
            "prompt" => Axis::Prompt,
            "batch" => Axis::Batch,
            "cached" => Axis::Cached,
            _ => bail!("--sweep axis {k:?}: one of output, prompt, batch, cached"),
        };
        let num = |t: &str| {
            t.trim()
                .parse::<u64>()
                .with_context(|| format!("--sweep {s:?}: {t:?} is not a count"))
        };
        let values = match v.split_once("..") {
            Some((a, b)) => {
                let (mut x, b) = (num(a)?, num(b)?);
                if b < x {
                    bail!("--sweep {s:?}: the range runs backwards");
                }
                let mut out = Vec::new();
                while x < b {
                    out.push(x);
                    x = (x * 2).max(x + 1);
                }
                out.push(b);
                out
            }
            None => v.split(',').map(num).collect::<Result<_>>()?,
        };
        if values.is_empty() || values.len() > 64 {
            bail!("--sweep {s:?}: 1 to 64 values");
        }
        Ok(Sweep { axis, values })
    }

    fn apply(&self, base: &Workload, v: u64) -> Result<Workload> {
        let mut w = *base;
        match self.axis {
            Axis::Output => w.output_tokens = v,
            Axis::Prompt => w.prompt_tokens = v,
            Axis::Batch => w.batch = v,
            Axis::Cached => w.cached_tokens = v,
        }
        if w.output_tokens == 0 || w.batch == 0 || w.cached_tokens > w.prompt_tokens {
            bail!(
                "--sweep value {v} gives output {}, batch {}, cached {} of prompt {}",
                w.output_tokens,
                w.batch,
                w.cached_tokens,
                w.prompt_tokens
            );
        }
        Ok(w)
    }
}

pub fn sweep(i: &Inputs, base: &Workload, s: &Sweep, json: bool) -> Result<()> {
    let mut rows = Vec::new();
    for &v in &s.values {
        let w = s.apply(base, v)?;
        let e = estimate(&i.model, &i.weights, &i.kv, &i.hardware, &w);
        let at = format!("{}={v}: ", format!("{:?}", s.axis).to_lowercase());
        warn(&at, &e.warnings(&w, &i.hardware));
        rows.push((w, e));
    }
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(w, e)| {
                serde_json::json!({"workload": w, "estimate": e,
                "warnings": e.warnings(w, &i.hardware)})
            })
            .collect();
        let v = serde_json::json!({"model": i.model, "weights": i.weights, "kv": i.kv,
            "hardware": i.hardware, "measured": i.measured, "sweep": format!("{:?}", s.axis).to_lowercase(), "points": v});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    header(i);
    println!(
        "{:>8} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>11} {:>9} {:>7}  last step",
        format!("{:?}", s.axis).to_lowercase(),
        "context",
        "TTFT",
        "TPOT",
        "last step",
        "E2E",
        "KV read",
        "KV share",
        "tok/s total",
        "per token",
        "fit"
    );
    for (w, e) in &rows {
        let v = match s.axis {
            Axis::Output => w.output_tokens,
            Axis::Prompt => w.prompt_tokens,
            Axis::Batch => w.batch,
            Axis::Cached => w.cached_tokens,
        };
        println!(
            "{:>8} {:>8} {:>10} {:>10} {:>10} {:>9.3}s {:>10} {:>7.1}% {:>11.1} {:>9} {:>7}  {:?}-bound",
            v,
            w.prompt_tokens + w.output_tokens,
            ms(e.ttft_s),
            ms(e.tpot_s),
            ms(e.decode_last.seconds()),
            e.e2e_s,
            gb(e.decode_kv_read_bytes),
            e.decode_kv_fraction * 100.0,
            e.tokens_per_s_total,
            // E2E over output: how the per-token cost grows with context.
            ms(e.e2e_s / w.output_tokens as f64),
            e.sequences_fit,
            e.decode_last.bound
        );
    }
    println!(
        "  KV read: Σ over decode steps of batch × context × KV/token; per token: E2E / output"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_ranges_double_and_keep_the_end() {
        let s = Sweep::parse("output=128..4096").unwrap();
        assert_eq!(s.values, [128, 256, 512, 1024, 2048, 4096]);
        assert_eq!(Sweep::parse("batch=1..6").unwrap().values, [1, 2, 4, 6]);
        assert_eq!(Sweep::parse("prompt=5,7").unwrap().values, [5, 7]);
        assert_eq!(Sweep::parse("cached=0..2").unwrap().values, [0, 1, 2]);
        for bad in [
            "output",
            "speed=1..2",
            "output=9..3",
            "output=a..b",
            "output=",
        ] {
            assert!(Sweep::parse(bad).is_err(), "{bad}");
        }
    }
}
