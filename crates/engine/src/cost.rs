//! A running estimate of step time as `fixed + per_token * tokens`, fitted
//! by least squares with exponential forgetting over recent steps. The
//! scheduler sizes prefill chunks from it so running streams keep their
//! inter-token latency target, and the server's `Retry-After` and the
//! deadline check come from it. [`RowCosts`] keeps what a decode step
//! of each row count took, which a line misses: the batched kernels work
//! in tiles of rows, so a row that opens a new tile costs a pass over the
//! weights and one inside a tile nearly nothing.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct CostModel {
    // Decayed sums of 1, x, y, x², xy (x = tokens, y = seconds).
    s: [f64; 5],
    decay: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            s: [0.0; 5],
            decay: 0.95,
        }
    }
}

impl CostModel {
    pub fn observe(&mut self, tokens: usize, took: Duration) {
        let (x, y) = (tokens as f64, took.as_secs_f64());
        for v in self.s.iter_mut() {
            *v *= self.decay;
        }
        self.s[0] += 1.0;
        self.s[1] += x;
        self.s[2] += y;
        self.s[3] += x * x;
        self.s[4] += x * y;
    }

    /// (fixed seconds per step, seconds per token), once any step was seen.
    pub fn fit(&self) -> Option<(f64, f64)> {
        let [n, sx, sy, ..] = self.s;
        if n < 1e-9 {
            return None;
        }
        // Too little spread in step sizes: charge everything per token.
        self.regress(1e-6)
            .or(Some((0.0, (sy / n) / (sx / n).max(1.0))))
    }

    /// The least-squares line, when the recent steps' token counts vary
    /// by more than `min_var` relative to their mean squared (and the
    /// slope is positive); None otherwise.
    pub fn regress(&self, min_var: f64) -> Option<(f64, f64)> {
        let [n, sx, sy, sxx, sxy] = self.s;
        if n < 1e-9 {
            return None;
        }
        let (mx, my) = (sx / n, sy / n);
        let var = sxx / n - mx * mx;
        if var <= min_var * mx.max(1.0) * mx.max(1.0) {
            return None;
        }
        let b = (sxy / n - mx * my) / var;
        let a = my - b * mx;
        (b > 0.0).then_some((a.max(0.0), b))
    }

    /// Tokens a step may carry so that it takes about `target`.
    pub fn tokens_within(&self, target: Duration) -> Option<usize> {
        let (a, b) = self.fit()?;
        let left = target.as_secs_f64() - a;
        Some(if left <= 0.0 { 0 } else { (left / b) as usize })
    }

    /// Estimated time to compute `tokens` tokens in steps of up to `per_step`.
    pub fn time_for(&self, tokens: usize, per_step: usize) -> Duration {
        let Some((a, b)) = self.fit() else {
            return Duration::ZERO;
        };
        let steps = tokens.div_ceil(per_step.max(1)) as f64;
        Duration::from_secs_f64(a * steps + b * tokens as f64)
    }
}

/// Recent step time of decode steps by their row count (sequences plus
/// drafted tokens), up to [`RowCosts::MAX_ROWS`]: a moving average per
/// count, trusted while it was seen within [`RowCosts::FRESH`] steps (the
/// cost of a count drifts as contexts grow).
#[derive(Debug, Clone)]
pub struct RowCosts {
    /// Per row count: (moving average of seconds, the step it was last seen).
    seen: Vec<Option<(f64, u64)>>,
    steps: u64,
}

impl Default for RowCosts {
    fn default() -> Self {
        RowCosts {
            seen: vec![None; Self::MAX_ROWS + 1],
            steps: 0,
        }
    }
}

impl RowCosts {
    /// Largest row count kept.
    pub const MAX_ROWS: usize = 128;
    /// Steps after which a count's average is no longer used.
    pub const FRESH: u64 = 500;
    /// Weight of the latest step in a count's average.
    const WEIGHT: f64 = 0.25;

    pub fn observe(&mut self, rows: usize, took: Duration) {
        self.steps += 1;
        let y = took.as_secs_f64();
        if let Some(e) = self.seen.get_mut(rows) {
            let mean = match *e {
                Some((m, at)) if self.steps - at <= Self::FRESH => m + Self::WEIGHT * (y - m),
                _ => y,
            };
            *e = Some((mean, self.steps));
        }
    }

    /// Seconds a decode step of `rows` rows takes: the recent average for
    /// that count, else `fit` (`a + b * rows`), else None.
    pub fn cost(&self, rows: usize, fit: Option<(f64, f64)>) -> Option<f64> {
        match self.seen.get(rows).copied().flatten() {
            Some((m, at)) if self.steps - at <= Self::FRESH => Some(m),
            _ => fit.map(|(a, b)| a + b * rows as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_a_linear_cost() {
        let mut c = CostModel::default();
        assert!(c.fit().is_none());
        for i in 0..50 {
            let t = 1 + (i * 37) % 200;
            c.observe(t, Duration::from_secs_f64(0.010 + 0.0005 * t as f64));
        }
        let (a, b) = c.fit().unwrap();
        assert!(
            (a - 0.010).abs() < 1e-4 && (b - 0.0005).abs() < 1e-6,
            "{a} {b}"
        );
        let n = c.tokens_within(Duration::from_millis(60)).unwrap();
        assert!((99..=100).contains(&n), "{n}");
        assert!(c.tokens_within(Duration::from_millis(5)) == Some(0));
    }

    #[test]
    fn regress_wants_spread() {
        let mut c = CostModel::default();
        for _ in 0..20 {
            c.observe(1, Duration::from_millis(3));
        }
        assert!(c.regress(0.01).is_none(), "one step size fits no line");
        assert!(c.fit().is_some(), "but the scheduler still gets a rate");
        for i in 0..20 {
            let t = 1 + i % 5;
            c.observe(t, Duration::from_secs_f64(0.002 + 0.001 * t as f64));
        }
        let (a, b) = c.regress(0.01).unwrap();
        assert!(
            (a - 0.002).abs() < 2e-4 && (b - 0.001).abs() < 1e-4,
            "{a} {b}"
        );
    }

    #[test]
    fn row_costs_keep_steps_a_line_misses() {
        let mut r = RowCosts::default();
        let line = Some((0.010, 0.001));
        assert_eq!(r.cost(9, None), None);
        assert!((r.cost(9, line).unwrap() - 0.019).abs() < 1e-12);
        // Tiles of eight rows: 9 rows cost a second pass.
        for _ in 0..20 {
            r.observe(8, Duration::from_millis(20));
            r.observe(9, Duration::from_millis(32));
        }
        assert!((r.cost(8, line).unwrap() - 0.020).abs() < 1e-9);
        assert!((r.cost(9, line).unwrap() - 0.032).abs() < 1e-9);
        // A count not seen for long falls back to the line.
        for _ in 0..=RowCosts::FRESH {
            r.observe(8, Duration::from_millis(20));
        }
        assert!((r.cost(9, line).unwrap() - 0.019).abs() < 1e-12);
        assert!((r.cost(8, line).unwrap() - 0.020).abs() < 1e-9);
        // Counts past the table are the line's.
        r.observe(RowCosts::MAX_ROWS + 1, Duration::from_secs(1));
        assert!(r.cost(RowCosts::MAX_ROWS + 1, None).is_none());
    }
}
