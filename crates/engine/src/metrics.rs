//! Counters, gauges and histograms the engine keeps for the server's
//! `/metrics` (Prometheus text) and for benchmarks.
//!
//! Histograms have fixed bucket bounds (seconds or counts), as Prometheus
//! expects; quantiles are estimated from the buckets.

use std::time::Duration;

/// Cumulative-bucket histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Upper bounds, ascending; an implicit `+Inf` bucket follows.
    pub bounds: Vec<f64>,
    /// Observations per bucket (not cumulative), `bounds.len() + 1` long.
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds: &[f64]) -> Self {
        Histogram {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Seconds from 0.5 ms to 120 s.
    pub fn latency() -> Self {
        Self::new(&[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5,
            5.0, 10.0, 30.0, 60.0, 120.0,
        ])
    }

    /// Counts from 1 to 8192 in powers of two.
    pub fn sizes() -> Self {
        let b: Vec<f64> = (0..14).map(|i| (1u64 << i) as f64).collect();
        Self::new(&b)
    }

    pub fn observe(&mut self, v: f64) {
        let i = self.bounds.partition_point(|&b| b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    pub fn observe_duration(&mut self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    /// Upper bound of the bucket holding quantile `q` (0..=1); `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let target = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= target {
                return Some(self.bounds.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        None
    }
}

/// Everything the engine measures. Counters only grow.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    pub requests_admitted: u64,
    pub requests_finished: u64,
    pub requests_cancelled: u64,
    pub requests_rejected: u64,
    pub preemptions: u64,
    pub prompt_tokens: u64,
    pub prefix_cache_hit_tokens: u64,
    pub generated_tokens: u64,
    /// Speculative decoding: tokens drafted, and those the model agreed with.
    pub drafted_tokens: u64,
    pub accepted_tokens: u64,
    /// Decode (or verification) rows of sequences summed over steps: each
    /// gives one token plus its accepted drafts.
    pub decode_seq_steps: u64,
    pub steps: u64,
    // Gauges, as of the last step.
    pub waiting: usize,
    pub running: usize,
    pub kv_blocks_total: usize,
    /// KV bytes per token (both models' K and V rows, in the cache's type).
    pub kv_bytes_per_token: usize,
    /// Tokens the KV cache holds.
    pub kv_capacity_tokens: usize,
    pub kv_blocks_used: usize,
    pub kv_blocks_free: usize,
    pub kv_blocks_cached: usize,
    /// The sliding-window layers' own pool (0 without one): its blocks,
    /// and those held by sequences.
    pub kv_windowed_blocks_total: usize,
    pub kv_windowed_blocks_used: usize,
    /// The prefix cache's disk tier (`None` without one).
    pub prefix_disk: Option<crate::disk::DiskStats>,
    /// Current prefill token budget per step (from the ITL target).
    pub step_token_budget: usize,
    // Histograms (seconds unless named otherwise).
    pub queue_time: Histogram,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    pub step_time: Histogram,
    /// Sequences per step.
    pub batch_size: Histogram,
    /// Tokens per step.
    pub batch_tokens: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests_admitted: 0,
            requests_finished: 0,
            requests_cancelled: 0,
            requests_rejected: 0,
            preemptions: 0,
            prompt_tokens: 0,
            prefix_cache_hit_tokens: 0,
            generated_tokens: 0,
            drafted_tokens: 0,
            accepted_tokens: 0,
            decode_seq_steps: 0,
            steps: 0,
            waiting: 0,
            running: 0,
            kv_blocks_total: 0,
            kv_bytes_per_token: 0,
            kv_capacity_tokens: 0,
            kv_blocks_used: 0,
            kv_blocks_free: 0,
            kv_blocks_cached: 0,
            kv_windowed_blocks_total: 0,
            kv_windowed_blocks_used: 0,
            prefix_disk: None,
            step_token_budget: 0,
            queue_time: Histogram::latency(),
            ttft: Histogram::latency(),
            itl: Histogram::latency(),
            e2e: Histogram::latency(),
            step_time: Histogram::latency(),
            batch_size: Histogram::sizes(),
            batch_tokens: Histogram::sizes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_quantiles() {
        let mut h = Histogram::new(&[1.0, 2.0, 4.0]);
        assert_eq!(h.quantile(0.5), None);
        for v in [0.5, 1.0, 1.5, 3.0, 100.0] {
            h.observe(v);
        }
        assert_eq!(h.counts, vec![2, 1, 1, 1]);
        assert_eq!(h.quantile(0.4), Some(1.0));
        assert_eq!(h.quantile(0.6), Some(2.0));
        assert_eq!(h.quantile(1.0), Some(f64::INFINITY));
        assert_eq!(h.sum, 106.0);
    }
}
