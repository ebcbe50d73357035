//! What a run writes: the `--out` JSON (schema [`Run`]), the summary table,
//! the per-request CSV, and `compare` of two runs.

use crate::record::Record;
use crate::summary::{Dist, Summary};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The `--out` file. `schema` names its version; every figure in
/// `levels[].summary` can be recomputed from `levels[].records`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// `"hasten-bench/1"`.
    pub schema: String,
    pub url: String,
    pub model: Option<String>,
    /// `chat` or `completions`.
    pub endpoint: String,
    /// The workload in words (source, lengths, seed).
    pub workload: String,
    /// Unix seconds when the run started.
    pub started_unix: u64,
    /// Whether the requests asked for `ignore_eos` and per-chunk usage.
    pub ignore_eos: bool,
    pub continuous_usage: bool,
    pub levels: Vec<LevelRun>,
}

pub const SCHEMA: &str = "hasten-bench/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelRun {
    pub summary: Summary,
    pub records: Vec<Record>,
}

impl Run {
    pub fn read(path: &str) -> Result<Run> {
        let bad = |message: String| Error::Input {
            path: path.into(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let run: Run = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if run.schema != SCHEMA {
            return Err(bad(format!(
                "schema {:?}, this hasten reads {SCHEMA:?}",
                run.schema
            )));
        }
        Ok(run)
    }
}

fn f(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn pair(d: &Option<Dist>) -> String {
    d.as_ref()
        .map_or("-".into(), |d| format!("{} / {}", f(d.p50), f(d.p99)))
}

/// Per replica, over every level (warm-up excluded): requests answered
/// there, failed ones (counted where they last tried), failovers and
/// TTFT/E2E p50. A replica is the one that named itself in its response
/// (`x-hasten-instance`: replicas behind a gateway), else the endpoint
/// URL. `None` when the run saw one.
pub fn endpoints(levels: &[LevelRun]) -> Option<String> {
    let mut by: std::collections::BTreeMap<&str, Vec<&Record>> = Default::default();
    for r in levels.iter().flat_map(|l| &l.records).filter(|r| !r.warmup) {
        let key = r
            .instance
            .as_deref()
            .or(r.endpoint.as_deref())
            .unwrap_or("-");
        by.entry(key).or_default().push(r);
    }
    if by.len() < 2 {
        return None;
    }
    let mut out = String::from(
        "\n| replica | ok/failed | failovers | TTFT p50 ms | E2E p50 ms |\n|---|---|---|---|---|\n",
    );
    for (url, rs) in by {
        let ok = rs.iter().filter(|r| r.ok).count();
        let p50 = |v: Vec<f64>| Dist::of(v).map_or("-".into(), |d| f(d.p50));
        let _ = writeln!(
            out,
            "| {url} | {ok}/{} | {} | {} | {} |",
            rs.len() - ok,
            rs.iter().map(|r| r.failovers).sum::<u32>(),
            p50(rs
                .iter()
                .filter(|r| r.ok)
                .filter_map(|r| r.ttft_ms)
                .collect()),
            p50(rs.iter().filter(|r| r.ok).map(|r| r.e2e_ms).collect()),
        );
    }
    Some(out)
}

/// The summary table, one row per level, then each level's warnings.
pub fn table(levels: &[Summary]) -> String {
    let head = [
        "load",
        "ok/failed",
        "req/s",
        "out tok/s",
        "goodput/s",
        "TTFT p50/p99 ms",
        "TPOT p50/p99",
        "ITL p50/p99",
        "ICL p50/p99",
        "E2E p50/p99",
        "lag p99",
        "net p50",
    ];
    let mut rows = vec![head.map(String::from).to_vec()];
    for s in levels {
        rows.push(vec![
            s.label.clone(),
            format!("{}/{}", s.ok, s.failed),
            f(s.requests_per_s),
            f(s.output_tokens_per_s),
            s.goodput_per_s.map_or("-".into(), f),
            pair(&s.ttft),
            pair(&s.tpot),
            pair(&s.itl),
            pair(&s.icl),
            pair(&s.e2e),
            s.lag.as_ref().map_or("-".into(), |d| f(d.p99)),
            s.network.as_ref().map_or("-".into(), |d| f(d.p50)),
        ]);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        if i == 0 {
            let _ = writeln!(
                out,
                "{}",
                "-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1))
            );
        }
    }
    for s in levels {
        if let (Some(q), Some(p), Some(d)) = (&s.server_queue, &s.server_prefill, &s.server_decode)
        {
            let _ = writeln!(
                out,
                "{}: server queue / prefill / decode p50 {} / {} / {} ms{}",
                s.label,
                f(q.p50),
                f(p.p50),
                f(d.p50),
                s.cached_prompt_fraction.map_or(String::new(), |c| format!(
                    ", {:.0}% of prompt tokens cached",
                    c * 100.0
                ))
            );
        }
        if let (Some(d), Some(a)) = (s.drafted_tokens, s.acceptance_rate) {
            let _ = writeln!(
                out,
                "{}: speculation: {d} tokens drafted, {:.0}% accepted ({:.2} drafted tokens accepted per output token)",
                s.label,
                a * 100.0,
                a * d as f64 / (s.mean_output_tokens * s.ok as f64).max(1.0)
            );
        }
        for w in &s.warnings {
            let _ = writeln!(out, "warning: {}: {w}", s.label);
        }
    }
    out
}

/// One line per request: the level, then the record's scalar fields.
pub fn csv(levels: &[LevelRun]) -> String {
    let mut out = String::from(
        "level,index,warmup,intended_at_ms,lag_ms,done_at_ms,ok,error_kind,status,ttft_ms,tpot_ms,e2e_ms,itl_samples,icl_samples,prompt_tokens,cached_prompt_tokens,output_tokens,finish_reason,request_id,queue_ms,prefill_ms,decode_ms,network_ms,attempts\n",
    );
    let o = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    let u = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    for l in levels {
        for r in &l.records {
            let _ = writeln!(
                out,
                "{},{},{},{:.3},{:.3},{:.3},{},{},{},{},{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{}",
                l.summary.label,
                r.index,
                r.warmup,
                r.intended_at_ms,
                r.lag_ms,
                r.done_at_ms,
                r.ok,
                r.error_kind.clone().unwrap_or_default(),
                r.status.map_or(String::new(), |s| s.to_string()),
                o(r.ttft_ms),
                o(r.tpot_ms),
                r.e2e_ms,
                r.itl_ms.len(),
                r.icl_ms.len(),
                u(r.prompt_tokens),
                u(r.cached_prompt_tokens),
                r.output_tokens,
                r.finish_reason.clone().unwrap_or_default(),
                r.request_id.clone().unwrap_or_default(),
                o(r.server.map(|t| t.queue_ms)),
                o(r.server.map(|t| t.prefill_ms)),
                o(r.server.map(|t| t.decode_ms)),
                o(r.network_ms),
                r.attempts,
            );
        }
    }
    out
}

/// Each level of `a` with the level of `b` that has its label, if any.
fn pairs<'r>(a: &'r Run, b: &'r Run) -> impl Iterator<Item = (&'r LevelRun, Option<&'r LevelRun>)> {
    a.levels.iter().map(move |la| {
        let lb = b
            .levels
            .iter()
            .find(|l| l.summary.label == la.summary.label);
        (la, lb)
    })
}

/// `B / A` for the figures people compare, per level both runs have; a
/// `~` marks a ratio whose two sides' 95% intervals overlap (noise).
pub fn compare(a: &Run, b: &Run) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "A: {} ({})\nB: {} ({})\nratio = B / A",
        a.url, a.workload, b.url, b.workload
    );
    if a.workload != b.workload {
        let _ = writeln!(out, "warning: the workloads differ");
    }
    let mut noisy = false;
    for (la, lb) in pairs(a, b) {
        let Some(lb) = lb else {
            let _ = writeln!(out, "{}: only in A", la.summary.label);
            continue;
        };
        let (sa, sb) = (&la.summary, &lb.summary);
        let _ = writeln!(out, "\n{}", sa.label);
        let _ = writeln!(out, "  {:<20}{:>12}{:>12}{:>10}", "figure", "A", "B", "B/A");
        let mut row = |name: &str, x: f64, y: f64, overlap: bool| {
            let mark = if overlap { " ~" } else { "" };
            noisy |= overlap;
            let _ = writeln!(
                out,
                "  {name:<20}{:>12}{:>12}{:>10}{mark}",
                f(x),
                f(y),
                format!("{:.2}", y / x)
            );
        };
        row(
            "out tok/s",
            sa.output_tokens_per_s,
            sb.output_tokens_per_s,
            false,
        );
        row("req/s", sa.requests_per_s, sb.requests_per_s, false);
        let dists: [(&str, &Option<Dist>, &Option<Dist>); 4] = [
            ("TTFT", &sa.ttft, &sb.ttft),
            ("TPOT", &sa.tpot, &sb.tpot),
            ("ITL", &sa.itl, &sb.itl),
            ("E2E", &sa.e2e, &sb.e2e),
        ];
        for (name, da, db) in dists {
            if let (Some(x), Some(y)) = (da, db) {
                let ov = |p: [f64; 2], q: [f64; 2]| p[0] <= q[1] && q[0] <= p[1];
                row(
                    &format!("{name} p50 ms"),
                    x.p50,
                    y.p50,
                    ov(x.p50_ci, y.p50_ci),
                );
                row(
                    &format!("{name} p99 ms"),
                    x.p99,
                    y.p99,
                    ov(x.p99_ci, y.p99_ci),
                );
            }
        }
        if sa.failed + sb.failed > 0 {
            let _ = writeln!(
                out,
                "  failed: A {} of {}, B {} of {}",
                sa.failed, sa.requests, sb.failed, sb.requests
            );
        }
    }
    if noisy {
        let _ = writeln!(
            out,
            "\n~: the two runs' 95% intervals overlap; that difference may be noise (run longer or repeat)"
        );
    }
    out
}

/// A markdown table of two runs side by side, one row per level both have:
/// throughput, TTFT and ITL p50/p99, E2E p50, failures.
pub fn side_by_side(a: &Run, b: &Run, names: [&str; 2]) -> String {
    let [na, nb] = names;
    let mut out = format!(
        "| load | {na} out tok/s | {nb} out tok/s | {na}/{nb} | {na} TTFT p50 / p99 ms | {nb} TTFT p50 / p99 ms | {na} ITL p50 / p99 ms | {nb} ITL p50 / p99 ms | {na} E2E p50 ms | {nb} E2E p50 ms | failed ({na}, {nb}) |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    let p50 = |d: &Option<Dist>| d.as_ref().map_or("-".into(), |d| f(d.p50));
    for (la, lb) in pairs(a, b) {
        let Some(lb) = lb else { continue };
        let (x, y) = (&la.summary, &lb.summary);
        let ratio = if y.output_tokens_per_s > 0.0 {
            format!("{:.2}", x.output_tokens_per_s / y.output_tokens_per_s)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}, {} |",
            x.label,
            f(x.output_tokens_per_s),
            f(y.output_tokens_per_s),
            ratio,
            pair(&x.ttft),
            pair(&y.ttft),
            pair(&x.itl),
            pair(&y.itl),
            p50(&x.e2e),
            p50(&y.e2e),
            x.failed,
            y.failed
        );
    }
    out
}
