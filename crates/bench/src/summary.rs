//! From records to figures: percentiles (nearest rank) with sample counts
//! and bootstrap confidence intervals, throughput over the measured window,
//! goodput under SLOs, and warnings where a figure should not be trusted.

use crate::load::Load;
use crate::record::Record;
use crate::{Error, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// A latency distribution in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    /// 95% bootstrap intervals of p50 and p99.
    pub p50_ci: [f64; 2],
    pub p99_ci: [f64; 2],
}

/// Nearest-rank quantile of sorted samples.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (sorted.len() as f64 * q.clamp(0.0, 1.0)).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Resamples used for the intervals, and the most samples resampled (larger
/// sets are thinned evenly first, which keeps the intervals honest enough
/// and the cost bounded).
const RESAMPLES: usize = 200;
const MAX_BOOTSTRAP: usize = 20_000;

fn bootstrap(sorted: &[f64], q: f64, rng: &mut StdRng) -> [f64; 2] {
    let step = sorted.len().div_ceil(MAX_BOOTSTRAP).max(1);
    let base: Vec<f64> = sorted.iter().step_by(step).copied().collect();
    let mut est = Vec::with_capacity(RESAMPLES);
    let mut buf = vec![0.0; base.len()];
    for _ in 0..RESAMPLES {
        for b in buf.iter_mut() {
            *b = base[rng.gen_range(0..base.len())];
        }
        buf.sort_by(f64::total_cmp);
        est.push(quantile(&buf, q));
    }
    est.sort_by(f64::total_cmp);
    [quantile(&est, 0.025), quantile(&est, 0.975)]
}

impl Dist {
    /// `None` without samples.
    pub fn of(samples: impl IntoIterator<Item = f64>) -> Option<Dist> {
        let mut v: Vec<f64> = samples.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let mut rng = StdRng::seed_from_u64(v.len() as u64);
        Some(Dist {
            count: v.len(),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p50: quantile(&v, 0.5),
            p90: quantile(&v, 0.9),
            p95: quantile(&v, 0.95),
            p99: quantile(&v, 0.99),
            max: v[v.len() - 1],
            p50_ci: bootstrap(&v, 0.5, &mut rng),
            p99_ci: bootstrap(&v, 0.99, &mut rng),
        })
    }
}

/// Service-level objectives: a request meets them when every one given
/// holds (a one-token answer has no TPOT and meets a TPOT objective).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

impl Slo {
    /// `ttft=500ms,tpot=50ms,e2e=10s`.
    pub fn parse(s: &str) -> Result<Slo> {
        let mut slo = Slo::default();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let bad = || {
                Error::Config(format!(
                    "bad SLO {part:?}: want ttft=500ms,tpot=50ms,e2e=10s"
                ))
            };
            let (k, v) = part.split_once('=').ok_or_else(bad)?;
            let v = v.trim();
            let ms = if let Some(x) = v.strip_suffix("ms") {
                x.trim().parse::<f64>().map_err(|_| bad())?
            } else if let Some(x) = v.strip_suffix('s') {
                x.trim().parse::<f64>().map_err(|_| bad())? * 1e3
            } else {
                return Err(bad());
            };
            if !(ms.is_finite() && ms > 0.0) {
                return Err(bad());
            }
            match k.trim() {
                "ttft" => slo.ttft_ms = Some(ms),
                "tpot" => slo.tpot_ms = Some(ms),
                "e2e" => slo.e2e_ms = Some(ms),
                _ => return Err(bad()),
            }
        }
        Ok(slo)
    }

    pub fn is_empty(&self) -> bool {
        *self == Slo::default()
    }

    pub fn met(&self, r: &Record) -> bool {
        let within = |limit: Option<f64>, v: Option<f64>| match (limit, v) {
            (None, _) => true,
            (Some(l), Some(v)) => v <= l,
            (Some(_), None) => false,
        };
        r.ok && within(self.ttft_ms, r.ttft_ms)
            && (r.tpot_ms.is_none() || within(self.tpot_ms, r.tpot_ms))
            && within(self.e2e_ms, Some(r.e2e_ms))
    }
}

/// The figures of one load level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub load: Load,
    pub label: String,
    /// Measured requests (warm-up excluded), failed ones included.
    pub requests: usize,
    pub ok: usize,
    pub failed: usize,
    /// Of the failed: those that timed out.
    pub timed_out: usize,
    /// First measured intended send → last measured response end.
    pub window_s: f64,
    /// Output tokens of the answers that completed / window.
    pub output_tokens_per_s: f64,
    pub requests_per_s: f64,
    /// Requests per second that met every SLO (absent without SLOs).
    pub goodput_per_s: Option<f64>,
    pub slo: Slo,
    pub ttft: Option<Dist>,
    pub tpot: Option<Dist>,
    pub itl: Option<Dist>,
    pub icl: Option<Dist>,
    pub e2e: Option<Dist>,
    pub lag: Option<Dist>,
    pub network: Option<Dist>,
    pub server_queue: Option<Dist>,
    pub server_prefill: Option<Dist>,
    pub server_decode: Option<Dist>,
    pub mean_prompt_tokens: Option<f64>,
    pub mean_output_tokens: f64,
    /// Of the prompt tokens the server reported, the fraction it had cached.
    pub cached_prompt_fraction: Option<f64>,
    /// Speculative decoding, from the server's per-answer counts: tokens
    /// drafted over the level's answers and the share accepted (absent
    /// when nothing was drafted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drafted_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance_rate: Option<f64>,
    /// Things that make a figure less trustworthy, in words.
    pub warnings: Vec<String>,
}

/// Too few samples for a percentile: p99 wants 100, p95 20, p90 10.
fn thin(name: &str, d: &Option<Dist>, warnings: &mut Vec<String>) {
    if let Some(d) = d {
        let (p, need) = if d.count < 10 {
            ("p90", 10)
        } else if d.count < 20 {
            ("p95", 20)
        } else if d.count < 100 {
            ("p99", 100)
        } else {
            return;
        };
        warnings.push(format!(
            "{name}: {p} and above rest on {} samples (want {need}); they are the largest samples, not estimates",
            d.count
        ));
    }
}

pub fn summarize(load: Load, records: &[Record], slo: Slo) -> Summary {
    let m: Vec<&Record> = records.iter().filter(|r| !r.warmup).collect();
    let ok: Vec<&Record> = m.iter().copied().filter(|r| r.ok).collect();
    let begin = m
        .iter()
        .map(|r| r.intended_at_ms)
        .fold(f64::INFINITY, f64::min);
    let end = m.iter().map(|r| r.done_at_ms).fold(0.0, f64::max);
    let window_s = if m.is_empty() {
        0.0
    } else {
        ((end - begin) / 1e3).max(1e-9)
    };
    let per_s = |n: f64| if window_s > 0.0 { n / window_s } else { 0.0 };
    let out_tokens: u64 = ok.iter().map(|r| r.output_tokens).sum();
    let dist = |f: &dyn Fn(&Record) -> Option<f64>| Dist::of(ok.iter().filter_map(|r| f(r)));
    let itl = Dist::of(ok.iter().flat_map(|r| r.itl_ms.iter().copied()));
    let icl = Dist::of(ok.iter().flat_map(|r| r.icl_ms.iter().copied()));
    let prompts: Vec<u64> = ok.iter().filter_map(|r| r.prompt_tokens).collect();
    let cached: u64 = ok.iter().filter_map(|r| r.cached_prompt_tokens).sum();
    let drafted: u64 = ok
        .iter()
        .filter_map(|r| r.server)
        .map(|t| t.drafted_tokens)
        .sum();
    let accepted: u64 = ok
        .iter()
        .filter_map(|r| r.server)
        .map(|t| t.accepted_tokens)
        .sum();
    let mut s = Summary {
        load,
        label: load.label(),
        requests: m.len(),
        ok: ok.len(),
        failed: m.len() - ok.len(),
        timed_out: m
            .iter()
            .filter(|r| r.error_kind.as_deref() == Some("timeout"))
            .count(),
        window_s,
        output_tokens_per_s: per_s(out_tokens as f64),
        requests_per_s: per_s(ok.len() as f64),
        goodput_per_s: (!slo.is_empty())
            .then(|| per_s(ok.iter().filter(|r| slo.met(r)).count() as f64)),
        slo,
        ttft: dist(&|r| r.ttft_ms),
        tpot: dist(&|r| r.tpot_ms),
        itl,
        icl,
        e2e: dist(&|r| Some(r.e2e_ms)),
        // Lag of every measured request: failed ones were late too.
        lag: Dist::of(m.iter().map(|r| r.lag_ms)),
        network: dist(&|r| r.network_ms),
        server_queue: dist(&|r| r.server.map(|t| t.queue_ms)),
        server_prefill: dist(&|r| r.server.map(|t| t.prefill_ms)),
        server_decode: dist(&|r| r.server.map(|t| t.decode_ms)),
        mean_prompt_tokens: (!prompts.is_empty())
            .then(|| prompts.iter().sum::<u64>() as f64 / prompts.len() as f64),
        mean_output_tokens: if ok.is_empty() {
            0.0
        } else {
            out_tokens as f64 / ok.len() as f64
        },
        cached_prompt_fraction: (!prompts.is_empty())
            .then(|| cached as f64 / prompts.iter().sum::<u64>().max(1) as f64),
        drafted_tokens: (drafted > 0).then_some(drafted),
        acceptance_rate: (drafted > 0).then(|| accepted as f64 / drafted as f64),
        warnings: Vec::new(),
    };
    let w = &mut s.warnings;
    if m.is_empty() {
        w.push("no measured requests".into());
    }
    if s.failed > 0 {
        let mut kinds: Vec<String> = m
            .iter()
            .filter_map(|r| {
                r.error
                    .as_ref()
                    .map(|_| r.error_kind.clone().unwrap_or_default())
            })
            .collect();
        kinds.sort();
        kinds.dedup();
        w.push(format!(
            "{} of {} requests failed ({}); they are counted here and left out of the latencies",
            s.failed,
            s.requests,
            kinds.join(", ")
        ));
    }
    if let Some(l) = &s.lag {
        if l.p99 > 10.0 {
            w.push(format!(
                "the load generator fell behind its schedule: lag p99 {:.1} ms, max {:.1} ms (latencies count from the intended send times, so they include it)",
                l.p99, l.max
            ));
        }
    }
    let retried = m.iter().filter(|r| r.attempts > 1).count();
    if retried > 0 {
        w.push(format!(
            "{retried} requests were retried before any output (see their attempts); their latencies include the retries"
        ));
    }
    let inexact = ok.iter().filter(|r| !r.tokens_exact).count();
    if inexact > 0 {
        w.push(format!(
            "{inexact} answers had events carrying several tokens without per-event counts from the server; their ITL samples are per event"
        ));
    }
    thin("TTFT", &s.ttft, w);
    thin("E2E", &s.e2e, w);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
        let d = Dist::of(v).unwrap();
        assert_eq!((d.count, d.p90, d.max), (100, 90.0, 100.0));
        assert!(d.p50_ci[0] <= 50.0 && 50.0 <= d.p50_ci[1] && d.p50_ci[1] - d.p50_ci[0] < 25.0);
        assert!(Dist::of(Vec::<f64>::new()).is_none());
    }

    #[test]
    fn slos_parse_and_judge() {
        let s = Slo::parse("ttft=500ms,tpot=50ms,e2e=2s").unwrap();
        assert_eq!(
            (s.ttft_ms, s.tpot_ms, s.e2e_ms),
            (Some(500.0), Some(50.0), Some(2000.0))
        );
        for bad in ["ttft=5", "x=5ms", "ttft=-1ms", "ttft"] {
            assert!(Slo::parse(bad).is_err(), "{bad}");
        }
    }
}
