//! The arithmetic of retrying and hedging: backoff delays, `Retry-After`
//! parsing, the shared budgets that stop many clients from amplifying an
//! outage, and the window of recent TTFTs that an adaptive hedge reads.

use crate::config::{HedgeDelay, Retry};
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// A token bucket: requests earn `ratio` tokens each, a retry (or hedge)
/// spends one. Starts full.
#[derive(Debug)]
pub struct Budget {
    balance: Mutex<f64>,
    ratio: f64,
    burst: f64,
}

impl Budget {
    pub fn new(ratio: f64, burst: f64) -> Self {
        Budget {
            balance: Mutex::new(burst),
            ratio,
            burst,
        }
    }

    /// Called once per logical request.
    pub fn earn(&self) {
        let mut b = self.balance.lock().unwrap_or_else(|p| p.into_inner());
        *b = (*b + self.ratio).min(self.burst);
    }

    /// Takes one token if there is one.
    pub fn spend(&self) -> bool {
        let mut b = self.balance.lock().unwrap_or_else(|p| p.into_inner());
        if *b >= 1.0 {
            *b -= 1.0;
            true
        } else {
            false
        }
    }

    pub fn balance(&self) -> f64 {
        *self.balance.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Backoff delays with jitter from a seedable generator.
#[derive(Debug)]
pub struct Backoff {
    rng: Mutex<rand::rngs::StdRng>,
}

impl Backoff {
    pub fn new(seed: Option<u64>) -> Self {
        let rng = match seed {
            Some(s) => rand::rngs::StdRng::seed_from_u64(s),
            None => rand::rngs::StdRng::from_entropy(),
        };
        Backoff {
            rng: Mutex::new(rng),
        }
    }

    /// The delay before retry `k` (0-based).
    pub fn delay(&self, cfg: &Retry, k: u32) -> Duration {
        let exp = cfg
            .initial_backoff
            .saturating_mul(1u32.checked_shl(k.min(30)).unwrap_or(u32::MAX));
        let d = exp.min(cfg.max_backoff);
        let jitter = cfg.jitter.clamp(0.0, 1.0);
        if jitter == 0.0 {
            return d;
        }
        let u: f64 = self.rng.lock().unwrap_or_else(|p| p.into_inner()).gen();
        d.mul_f64(1.0 - jitter * u)
    }
}

/// `retry-after-ms` (milliseconds, as OpenAI sends) wins over `Retry-After`
/// (whole seconds; HTTP dates are not honoured).
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let num = |name: &str| {
        headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    if let Some(ms) = num("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    num("retry-after").map(Duration::from_secs_f64)
}

/// Recent TTFTs (the last 200) for [`HedgeDelay::P95`].
#[derive(Debug, Default)]
pub struct TtftWindow {
    samples: Mutex<VecDeque<Duration>>,
}

impl TtftWindow {
    const KEEP: usize = 200;

    pub fn record(&self, d: Duration) {
        let mut s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if s.len() == Self::KEEP {
            s.pop_front();
        }
        s.push_back(d);
    }

    pub fn hedge_delay(&self, how: HedgeDelay) -> Duration {
        match how {
            HedgeDelay::Fixed(d) => d,
            HedgeDelay::P95 {
                min_samples,
                fallback,
            } => {
                let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
                if s.len() < min_samples.max(1) {
                    return fallback;
                }
                let mut v: Vec<Duration> = s.iter().copied().collect();
                v.sort();
                // Nearest rank.
                let rank = ((v.len() as f64) * 0.95).ceil() as usize;
                v[rank.clamp(1, v.len()) - 1]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_jitter_only_shortens() {
        let cfg = Retry {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(700),
            jitter: 0.0,
            ..Retry::default()
        };
        let b = Backoff::new(Some(1));
        let got: Vec<u128> = (0..5).map(|k| b.delay(&cfg, k).as_millis()).collect();
        assert_eq!(got, vec![100, 200, 400, 700, 700]);
        let jittered = Retry { jitter: 0.5, ..cfg };
        for k in 0..50 {
            let d = b.delay(&jittered, k % 4);
            let full = b.delay(&cfg, k % 4);
            assert!(d <= full && d >= full / 2, "{d:?} vs {full:?}");
        }
        assert_eq!(b.delay(&cfg, 1000), Duration::from_millis(700));
    }

    #[test]
    fn budget_caps_retries_at_its_ratio() {
        let b = Budget::new(0.5, 2.0);
        assert!(b.spend() && b.spend());
        assert!(!b.spend());
        b.earn();
        assert!(!b.spend());
        b.earn();
        assert!(b.spend());
        for _ in 0..100 {
            b.earn();
        }
        assert_eq!(b.balance(), 2.0);
    }

    #[test]
    fn retry_after_prefers_milliseconds() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        h.insert("retry-after-ms", "soon".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
    }

    #[test]
    fn p95_waits_for_samples() {
        let w = TtftWindow::default();
        let how = HedgeDelay::P95 {
            min_samples: 20,
            fallback: Duration::from_secs(1),
        };
        assert_eq!(w.hedge_delay(how), Duration::from_secs(1));
        for ms in 1..=100 {
            w.record(Duration::from_millis(ms));
        }
        assert_eq!(w.hedge_delay(how), Duration::from_millis(95));
    }
}
