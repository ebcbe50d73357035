//! Sending the requests: a closed loop at fixed concurrency, or an open
//! loop at a request rate whose send times come from an absolute schedule
//! fixed before the level starts (Poisson or evenly spaced). Every request
//! is sent and recorded, late ones included: lateness is schedule lag,
//! counted into its latencies, never a skipped or dropped request.

use crate::record::Record;
use crate::workload::{Endpoint, Item, Sampling};
use hasten_client::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// Exponential gaps: independent users.
    Poisson,
    /// Evenly spaced.
    Constant,
}

/// How requests are offered at one level of a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Load {
    /// `n` requests in flight: each sends its next request when its last
    /// one finished.
    Concurrency { n: usize },
    /// Requests per second on an absolute schedule.
    Rate { per_s: f64, arrivals: Arrivals },
}

impl Load {
    /// `concurrency=4`, `rate=2/s poisson`.
    pub fn label(&self) -> String {
        match self {
            Load::Concurrency { n } => format!("concurrency={n}"),
            Load::Rate { per_s, arrivals } => {
                let a = match arrivals {
                    Arrivals::Poisson => "poisson",
                    Arrivals::Constant => "constant",
                };
                format!("rate={per_s}/s {a}")
            }
        }
    }

    /// The x value for plots: concurrency or rate.
    pub fn value(&self) -> f64 {
        match *self {
            Load::Concurrency { n } => n as f64,
            Load::Rate { per_s, .. } => per_s,
        }
    }
}

/// When a level ends: after `requests` measured requests, or once
/// `duration` has passed since the first measured one was due (requests
/// already sent are still waited for), whichever comes first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stop {
    pub requests: Option<usize>,
    pub duration: Option<Duration>,
}

/// Everything one level needs (cheap to clone: the client and the items
/// are shared).
#[derive(Clone)]
pub struct Level {
    pub client: Client,
    pub items: Arc<[Item]>,
    pub endpoint: Endpoint,
    pub sampling: Arc<Sampling>,
    pub load: Load,
    /// Requests sent first and left out of every figure.
    pub warmup: usize,
    pub stop: Stop,
    /// Seeds the Poisson schedule.
    pub seed: u64,
    /// Request i sends item `offset + i` (cycling): levels of a sweep start
    /// at different items, so no level finds its prompts already cached
    /// by an earlier one.
    pub offset: usize,
}

/// Open-loop send offsets from the level's start: `count` of them, or
/// while under `until`.
pub fn schedule(
    per_s: f64,
    arrivals: Arrivals,
    count: Option<usize>,
    until: Option<Duration>,
    seed: u64,
) -> Vec<Duration> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut t = 0.0f64;
    // A hard cap so a typo (rate=1e9 for an hour) cannot exhaust memory.
    const MAX: usize = 10_000_000;
    loop {
        if count.is_some_and(|c| out.len() >= c) || out.len() >= MAX {
            break;
        }
        let at = Duration::from_secs_f64(t);
        if until.is_some_and(|u| at >= u) {
            break;
        }
        out.push(at);
        t = match arrivals {
            // Computed, not summed, so the times do not drift.
            Arrivals::Constant => out.len() as f64 / per_s,
            // Inverse CDF of the exponential; 1 - U avoids ln(0).
            Arrivals::Poisson => t - (1.0 - rng.gen::<f64>()).ln() / per_s,
        };
    }
    out
}

async fn one(level: &Level, index: usize, start: Instant, intended: Instant) -> Record {
    let item = &level.items[(level.offset + index) % level.items.len()];
    let req = item.request(level.endpoint, &level.sampling);
    let sent = Instant::now();
    let result = level.client.stream(req).collect().await;
    let done = Instant::now();
    Record::new(
        index,
        index < level.warmup,
        intended - start,
        sent.saturating_duration_since(intended),
        done - start,
        result,
    )
}

/// Runs one level; `on_record` sees each record as it completes (for
/// progress). Returns every record, in schedule order.
pub async fn run(level: Level, mut on_record: impl FnMut(&Record)) -> Vec<Record> {
    let level = Arc::new(level);
    let start = Instant::now();
    let (tx, mut rx) = mpsc::unbounded_channel::<Record>();
    let total = level.stop.requests.map(|n| n + level.warmup);
    let mut tasks = tokio::task::JoinSet::new();
    match level.load {
        Load::Rate { per_s, arrivals } => {
            // The warm-up requests come first on the same schedule; the
            // duration counts from the first measured one.
            let times = match total {
                Some(_) => schedule(per_s, arrivals, total, None, level.seed),
                None => {
                    let warm = schedule(per_s, arrivals, Some(level.warmup + 1), None, level.seed);
                    let first = *warm.last().expect("one");
                    let until = level.stop.duration.map(|d| d + first);
                    schedule(per_s, arrivals, None, until, level.seed)
                }
            };
            // One task per request, each sleeping until its own absolute
            // send time: an open loop never waits for a response before
            // sending the next request.
            for (i, at) in times.into_iter().enumerate() {
                let (tx, level) = (tx.clone(), level.clone());
                tasks.spawn(async move {
                    let intended = start + at;
                    tokio::time::sleep_until(intended).await;
                    let _ = tx.send(one(&level, i, start, intended).await);
                });
            }
        }
        Load::Concurrency { n } => {
            let next = Arc::new(AtomicUsize::new(0));
            let deadline = Arc::new(std::sync::Mutex::new(None::<Instant>));
            for _ in 0..n.max(1) {
                let (tx, next, level, deadline) =
                    (tx.clone(), next.clone(), level.clone(), deadline.clone());
                tasks.spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if total.is_some_and(|t| i >= t) {
                            break;
                        }
                        let now = Instant::now();
                        {
                            let mut d = deadline.lock().expect("deadline");
                            if i == level.warmup {
                                *d = level.stop.duration.map(|dur| now + dur);
                            }
                            if d.is_some_and(|d| now >= d) {
                                break;
                            }
                        }
                        let _ = tx.send(one(&level, i, start, now).await);
                    }
                });
            }
        }
    }
    drop(tx);
    let mut records = Vec::new();
    while let Some(r) = rx.recv().await {
        on_record(&r);
        records.push(r);
    }
    while tasks.join_next().await.is_some() {}
    records.sort_by_key(|r| r.index);
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_are_absolute_reproducible_and_at_the_rate() {
        let c = schedule(4.0, Arrivals::Constant, Some(5), None, 0);
        assert_eq!(
            c.iter().map(|d| d.as_millis()).collect::<Vec<_>>(),
            [0, 250, 500, 750, 1000]
        );
        let p = schedule(
            10.0,
            Arrivals::Poisson,
            None,
            Some(Duration::from_secs(1000)),
            7,
        );
        assert_eq!(
            p,
            schedule(
                10.0,
                Arrivals::Poisson,
                None,
                Some(Duration::from_secs(1000)),
                7
            )
        );
        // About 10 000 arrivals in 1000 s (sd 100).
        assert!((9_600..10_400).contains(&p.len()), "{}", p.len());
        assert!(p.windows(2).all(|w| w[0] <= w[1]));
    }
}
