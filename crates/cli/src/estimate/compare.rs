//! `hasten estimate --compare RUN.json`: each level of a `hasten bench`
//! run beside what the estimate predicts for its workload: queue, prefill,
//! decode and network time per request, TTFT, TPOT and E2E, naming the
//! component with the largest gap.

use super::Inputs;
use anyhow::{Context, Result};
use hasten_bench::load::Load;
use hasten_bench::report::Run;
use hasten_bench::summary::{Dist, Summary};
use hasten_estimate::{estimate, Workload};
use std::path::Path;

pub fn read(path: &Path) -> Result<Run> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let run: Run = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a hasten bench --out run", path.display()))?;
    anyhow::ensure!(
        run.schema.starts_with("hasten-bench/"),
        "{}: schema {:?} is not a hasten bench run",
        path.display(),
        run.schema
    );
    anyhow::ensure!(
        !run.levels.is_empty(),
        "{}: the run has no levels",
        path.display()
    );
    Ok(run)
}

/// One level's workload as the estimate sees it: mean lengths, and the
/// sequences decoded together (the concurrency, or by Little's law the
/// request rate × mean E2E for an open loop).
fn workload(s: &Summary, rtt_ms: f64) -> Result<Workload> {
    let prompt = s.mean_prompt_tokens.with_context(|| {
        format!(
            "level {}: the server reported no prompt token counts",
            s.label
        )
    })?;
    let batch = match s.load {
        Load::Concurrency { n } => n as f64,
        Load::Rate { per_s, .. } => per_s * s.e2e.as_ref().map_or(0.0, |d| d.mean) / 1e3,
    };
    let prompt_tokens = prompt.round().max(1.0) as u64;
    Ok(Workload {
        prompt_tokens,
        output_tokens: s.mean_output_tokens.round().max(1.0) as u64,
        batch: batch.round().max(1.0) as u64,
        cached_tokens: ((s.cached_prompt_fraction.unwrap_or(0.0) * prompt).round() as u64)
            .min(prompt_tokens),
        rtt_ms,
    })
}

/// Predicted and measured (p50) milliseconds per component.
#[derive(serde::Serialize)]
struct Row {
    what: &'static str,
    predicted_ms: f64,
    measured_ms: Option<f64>,
}

fn p50(d: &Option<Dist>) -> Option<f64> {
    d.as_ref().map(|d| d.p50)
}

fn rows(i: &Inputs, s: &Summary, w: &Workload) -> Vec<Row> {
    // A request's prompt is prefilled on its own (continuous batching
    // admits arrivals one by one); its decode steps are shared by the batch.
    let alone = estimate(
        &i.model,
        &i.weights,
        &i.kv,
        &i.hardware,
        &Workload { batch: 1, ..*w },
    );
    let shared = estimate(&i.model, &i.weights, &i.kv, &i.hardware, w);
    let prefill = alone.prefill.seconds() * 1e3;
    // On a CPU engine prefill and decode steps take turns: while one
    // request decodes, each of the other sequences' next prompts is
    // prefilled once (a steady closed loop), stretching its decode.
    let others = (w.batch - 1) as f64 * prefill;
    let decode = shared.tpot_s * 1e3 * w.output_tokens.saturating_sub(1) as f64 + others;
    let row = |what, predicted_ms, measured_ms| Row {
        what,
        predicted_ms,
        measured_ms,
    };
    vec![
        row("queue", 0.0, p50(&s.server_queue)),
        row("prefill", prefill, p50(&s.server_prefill)),
        row("decode", decode, p50(&s.server_decode)),
        row("network", w.rtt_ms, p50(&s.network)),
        row("TTFT", w.rtt_ms + prefill, p50(&s.ttft)),
        row(
            "TPOT",
            decode / w.output_tokens.saturating_sub(1).max(1) as f64,
            p50(&s.tpot),
        ),
        row("E2E", w.rtt_ms + prefill + decode, p50(&s.e2e)),
    ]
}

/// A name reduced to its letters and digits, lowercased, without the
/// markers `source` adds.
fn plain(name: &str) -> String {
    name.replace(" (modified)", "")
        .replace(" (file)", "")
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Why the run may have measured another model than the estimate's (by
/// name: a served name such as a file stem should contain the model's
/// name or be contained in it); `None` when they agree or the estimate's
/// model is given by dimensions only.
fn other_model(run: &Run, model: &str) -> Option<String> {
    let ours = plain(model);
    if ours.is_empty() || ours == "custom" {
        return None;
    }
    match run.model.as_deref() {
        None => Some(format!(
            "the run does not name its model, so it cannot be checked against {model}"
        )),
        Some(theirs) => {
            let t = plain(theirs);
            (!t.contains(&ours) && !ours.contains(&t)).then(|| {
                format!(
                    "the run measured {theirs:?} but the estimate is for {model:?}; \
                     pass --model with the served model's file (or a preset of it)"
                )
            })
        }
    }
}

/// The breakdown component whose measurement is furthest from its prediction.
fn largest_gap(rows: &[Row]) -> Option<(&'static str, f64)> {
    rows.iter()
        .take(4)
        .filter_map(|r| Some((r.what, r.measured_ms? - r.predicted_ms)))
        .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
}

pub fn print(i: &Inputs, run: &Run, rtt_ms: f64, json: bool) -> Result<()> {
    let mut warnings: Vec<String> = other_model(run, &i.model.name).into_iter().collect();
    let mut levels = Vec::new();
    for l in &run.levels {
        let w = workload(&l.summary, rtt_ms)?;
        let r = rows(i, &l.summary, &w);
        let e = estimate(&i.model, &i.weights, &i.kv, &i.hardware, &w);
        let at = format!("level {}: ", l.summary.label);
        warnings.extend(
            e.warnings(&w, &i.hardware)
                .into_iter()
                .map(|x| at.clone() + &x),
        );
        levels.push((l.summary.label.clone(), w, r));
    }
    super::table::warn("", &warnings);
    if json {
        let v: Vec<_> = levels
            .iter()
            .map(|(label, w, r)| {
                serde_json::json!({"level": label, "workload": w, "rows": r,
                    "largest_gap": largest_gap(r).map(|(k, ms)| serde_json::json!({"component": k, "ms": ms}))})
            })
            .collect();
        let v = serde_json::json!({"run": run.url, "model": i.model, "weights": i.weights,
            "hardware": i.hardware, "measured": i.measured, "levels": v, "warnings": warnings});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    super::table::header(i);
    println!(
        "against {} ({}, {} levels); measured figures are per-request p50s",
        run.url,
        run.model.as_deref().unwrap_or("model not named"),
        run.levels.len()
    );
    for (label, w, r) in &levels {
        println!(
            "\n{label}: prompt {} (cached {}), output {}, {} sequences decoding together",
            w.prompt_tokens, w.cached_tokens, w.output_tokens, w.batch
        );
        if w.batch > 1 {
            println!(
                "  (predicted decode includes {} other prompts' prefill, which takes turns with decode steps)",
                w.batch - 1
            );
        }
        println!(
            "  {:<10}{:>14}{:>14}{:>12}",
            "", "predicted", "measured", "ratio"
        );
        for x in r {
            let (m, ratio) = match x.measured_ms {
                Some(m) => (
                    format!("{m:.1} ms"),
                    if x.predicted_ms > 0.0 {
                        format!("{:.2}×", m / x.predicted_ms)
                    } else {
                        "-".into()
                    },
                ),
                None => ("-".into(), "-".into()),
            };
            println!(
                "  {:<10}{:>14}{:>14}{:>12}",
                x.what,
                format!("{:.1} ms", x.predicted_ms),
                m,
                ratio
            );
        }
        match largest_gap(r) {
            Some((k, ms)) => println!(
                "  largest gap: {k}, {} {:.1} ms than predicted",
                if ms >= 0.0 { "slower by" } else { "faster by" },
                ms.abs()
            ),
            None => println!("  no server breakdown in this run to compare"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(model: Option<&str>) -> Run {
        Run {
            schema: hasten_bench::report::SCHEMA.into(),
            url: "http://127.0.0.1:8080".into(),
            model: model.map(str::to_owned),
            endpoint: "chat".into(),
            workload: String::new(),
            started_unix: 0,
            ignore_eos: false,
            continuous_usage: false,
            levels: Vec::new(),
        }
    }

    #[test]
    fn a_run_of_another_model_is_named() {
        let r = run(Some("TinyLlama-1.1B-Chat-v1.0.Q4_0"));
        assert_eq!(other_model(&r, "TinyLlama 1.1B Chat v1.0 (file)"), None);
        assert_eq!(other_model(&r, "custom"), None);
        let w = other_model(&r, "llama-2-7b").unwrap();
        assert!(
            w.contains("TinyLlama-1.1B-Chat-v1.0.Q4_0") && w.contains("--model"),
            "{w}"
        );
        assert!(other_model(&run(None), "llama-2-7b")
            .unwrap()
            .contains("does not name its model"));
        assert_eq!(
            other_model(&run(Some("Llama-2-7b-chat-hf")), "llama-2-7b"),
            None
        );
    }
}
