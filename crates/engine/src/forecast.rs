//! When will a slot free up? The engine thread forecasts, from its cost
//! model, when each request in the system will finish; a refused request
//! is then told (`Retry-After`) the time of the slot meant for it: the
//! k-th refusal still waiting for its retry gets the k-th slot to free, so
//! a burst of refused clients is spread over the real drain instead of all
//! coming back after one second.
//!
//! The forecast simulates the scheduler coarsely: the running batch decodes
//! one token per sequence per step, each prompt costs `per_token` per token
//! when admitted, and waiting
//! requests are admitted in order as sequences finish. A request's output
//! length is its `max_tokens` when it ignores EOS, otherwise the smaller
//! of that and what recent requests produced.
//!
//! A decoded token costs more than a prompt token: it also goes through the
//! output projection (`dim x vocab` multiply-adds, against the layers'
//! per-token work). The cost model is fitted mostly on prompt chunks, and a
//! full batch of decodes may not have been seen yet when a burst arrives,
//! so a decode step is charged `fixed + per_token * batch * (1 + logit_ratio)`
//! with that ratio from the model's shape: a large share for a tiny model
//! with a big vocabulary, a few percent for a 1B model.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Work left in one request: prompt tokens to prefill, tokens to decode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Work {
    pub prefill: usize,
    pub decode: usize,
}

/// Seconds from now until each request finishes, ascending.
pub(crate) fn finish_offsets(
    running: &[Work],
    waiting: &[Work],
    max_running: usize,
    (fixed, per_token): (f64, f64),
    logit_ratio: f64,
) -> Vec<f64> {
    let per_decode = per_token * (1.0 + logit_ratio);
    let mut t: f64 = running.iter().map(|w| w.prefill as f64 * per_token).sum();
    let mut batch: Vec<usize> = running.iter().map(|w| w.decode.max(1)).collect();
    let mut queue = waiting.iter();
    let mut out = Vec::with_capacity(running.len() + waiting.len());
    loop {
        while batch.len() < max_running.max(1) {
            let Some(w) = queue.next() else { break };
            t += w.prefill as f64 * per_token;
            batch.push(w.decode.max(1));
        }
        let Some(&steps) = batch.iter().min() else {
            return out;
        };
        t += steps as f64 * (fixed + per_decode * batch.len() as f64);
        batch.retain_mut(|d| {
            *d -= steps;
            if *d == 0 {
                out.push(t);
            }
            *d > 0
        });
    }
}

/// Recent outputs' length (requests that stopped on their own).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OutputLength(Option<f64>);

impl OutputLength {
    pub fn observe(&mut self, tokens: usize) {
        let x = tokens as f64;
        self.0 = Some(self.0.map_or(x, |m| 0.9 * m + 0.1 * x));
    }

    /// Tokens a request that has produced `generated` of at most
    /// `max_tokens` will still produce.
    pub fn left(&self, generated: usize, max_tokens: usize, ignore_eos: bool) -> usize {
        let max_left = max_tokens.saturating_sub(generated);
        match self.0 {
            Some(typical) if !ignore_eos => {
                let typical = typical.ceil() as usize;
                let guess = typical.saturating_sub(generated).max(typical / 4).max(1);
                guess.min(max_left)
            }
            _ => max_left,
        }
    }
}

/// How far real steps run over the forecast's step cost (a running ratio,
/// 1 until steps are seen): attention over long contexts and what the
/// linear cost model misses show up here and scale the forecast.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Calibration(pub f64);

impl Default for Calibration {
    fn default() -> Self {
        Calibration(1.0)
    }
}

impl Calibration {
    /// A step of `prefill` prompt tokens and `decodes` decoded tokens took `took` s.
    pub fn observe(
        &mut self,
        cost: (f64, f64),
        logit_ratio: f64,
        (prefill, decodes): (usize, usize),
        took: f64,
    ) {
        let (fixed, per_token) = cost;
        let predicted = fixed + per_token * (prefill as f64 + decodes as f64 * (1.0 + logit_ratio));
        if predicted > 0.0 && took > 0.0 {
            let r = (took / predicted).clamp(0.1, 10.0);
            self.0 = 0.9 * self.0 + 0.1 * r;
        }
    }
}

/// What a forecast is made from: the engine thread's last view of the
/// requests it holds, and the requests submitted since, which it has not
/// seen yet (a burst arrives faster than the engine thread looks).
#[derive(Debug, Default, Clone)]
pub(crate) struct Inputs {
    pub at: Option<Instant>,
    /// Seconds per step (fixed) and per token, from the cost model.
    pub cost: (f64, f64),
    /// Output-projection work of a decoded token over a prompt token's.
    pub logit_ratio: f64,
    pub calibration: Calibration,
    pub max_running: usize,
    /// Running requests, then waiting ones in order.
    pub known: Vec<Work>,
    pub running: usize,
    /// Submitted but not yet picked up by the engine thread, by request id.
    pub in_flight: Vec<(u64, Work)>,
    pub out_len: OutputLength,
}

impl Inputs {
    /// The forecast from these inputs, counted from `now` (empty before
    /// any step was timed). The inputs are at most one step old while the
    /// engine works, and exact while it idles, so `now` is the right origin.
    pub fn forecast(&self, now: Instant) -> Forecast {
        if self.at.is_none() {
            return Forecast::default();
        }
        let at = now;
        let (running, waiting) = self.known.split_at(self.running.min(self.known.len()));
        let mut waiting = waiting.to_vec();
        waiting.extend(self.in_flight.iter().map(|&(_, w)| w));
        let k = self.calibration.0;
        let cost = (self.cost.0 * k, self.cost.1 * k);
        Forecast {
            at: Some(at),
            frees: finish_offsets(running, &waiting, self.max_running, cost, self.logit_ratio),
        }
    }
}

/// When each request in the system is expected to finish.
#[derive(Debug, Default, Clone)]
pub(crate) struct Forecast {
    pub at: Option<Instant>,
    /// Seconds after `at` at which each slot frees, ascending.
    pub frees: Vec<f64>,
}

impl Forecast {
    /// When the `k`-th slot (from 0) frees: past the forecast, at the
    /// average rate the forecast drains.
    fn slot(&self, k: usize) -> Option<Instant> {
        let at = self.at?;
        let last = *self.frees.last()?;
        let n = self.frees.len();
        let secs = match self.frees.get(k) {
            Some(&s) => s,
            None => last + (k + 1 - n) as f64 * last / n as f64,
        };
        Some(at + Duration::from_secs_f64(secs.max(0.0)))
    }
}

/// Retry times promised to refused requests that have not come due.
#[derive(Debug, Default)]
pub(crate) struct Promises(VecDeque<Instant>);

impl Promises {
    /// The wait to tell the next refused request: the slot after those
    /// already promised, a tenth later (a client back too early is refused
    /// again and goes to the end of the line, one a little late is not),
    /// at least `floor`; `None` without a forecast.
    pub fn next(&mut self, now: Instant, f: &Forecast, floor: Duration) -> Option<Duration> {
        self.0.retain(|&t| t > now);
        let at = f.slot(self.0.len())?;
        let wait = at.saturating_duration_since(now).mul_f64(1.1).max(floor);
        self.0.push_back(now + wait);
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_batch_drains_in_order_of_work_left() {
        let w = |prefill, decode| Work { prefill, decode };
        // Two running (10 and 30 steps left), one waiting (20 steps),
        // batch of two; steps cost 1 + 0.5 per sequence, tokens 0.5.
        let f = finish_offsets(&[w(0, 10), w(0, 30)], &[w(4, 20)], 2, (1.0, 0.5), 0.0);
        // 10 steps at 2 s; prefill 4 tokens (2 s); 20 steps at 2 s.
        assert_eq!(f, vec![20.0, 62.0, 62.0]);
        assert!(finish_offsets(&[], &[], 4, (1.0, 0.5), 1.0).is_empty());
        // Decodes costing twice a prompt token: 10 steps at 1 + 2 * 0.5 * 2.
        let f = finish_offsets(&[w(0, 10)], &[w(0, 10)], 2, (1.0, 0.5), 1.0);
        assert_eq!(f, vec![30.0, 30.0]);
    }

    #[test]
    fn refused_requests_are_spread_over_the_slots() {
        let at = Instant::now();
        let f = Forecast {
            at: Some(at),
            frees: vec![1.0, 2.0, 4.0],
        };
        let mut p = Promises::default();
        let floor = Duration::from_millis(100);
        let waits: Vec<_> = (0..5)
            .map(|_| p.next(at, &f, floor).unwrap().as_secs_f64())
            .collect();
        // Past the forecast: 4/3 s per slot more; all a tenth late.
        let want = [1.0, 2.0, 4.0, 4.0 + 4.0 / 3.0, 4.0 + 8.0 / 3.0].map(|w| w * 1.1);
        for (w, e) in waits.iter().zip(want) {
            assert!((w - e).abs() < 1e-6, "{waits:?}");
        }
        // Promises that came due no longer count.
        let later = at + Duration::from_secs(3);
        let w = p.next(later, &f, floor).unwrap().as_secs_f64();
        assert!((w - (4.0 + 4.0 / 3.0 - 3.0) * 1.1).abs() < 1e-6, "{w}");
        assert!(p.next(at, &Forecast::default(), floor).is_none());
    }

    #[test]
    fn output_length_follows_recent_requests_unless_eos_is_ignored() {
        let mut o = OutputLength::default();
        assert_eq!(o.left(10, 400, false), 390);
        o.observe(40);
        assert_eq!(o.left(10, 400, false), 30);
        assert_eq!(o.left(60, 400, false), 10); // past typical: a quarter of it
        assert_eq!(o.left(10, 400, true), 390);
        assert_eq!(o.left(395, 400, false), 5);
    }
}
