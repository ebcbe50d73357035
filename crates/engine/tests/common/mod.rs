//! What the engine's integration tests share: a core stepped by hand
//! over a synthetic model, request builders, and stream collection.
#![allow(dead_code)]

use hasten_engine::testing::{Core, Seq};
use hasten_engine::{EngineConfig, Event, Finish, Limits, Request, RequestSpec};
use hasten_model::llama::Model;
use hasten_model::tokenizer::Tokenizer;
use rand::Rng;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

pub fn limits(c: &EngineConfig) -> Limits {
    Limits {
        vocab_size: 32000,
        context_length: 512,
        kv_tokens: c.kv_blocks() * c.block_size,
        speculates: c.max_draft > 0,
        draft_model: c.max_draft > 0 && c.draft_model.is_some(),
        kv_type: hasten_kernels::attention::KvType::F16,
        kv_bytes_per_token: 0,
        kv_windowed_bytes: 0,
    }
}

pub fn prompt(rng: &mut rand_chacha::ChaCha8Rng, n: usize) -> Vec<u32> {
    (0..n).map(|_| rng.gen_range(3..32000)).collect()
}

pub fn spec(p: Vec<u32>, max: usize) -> RequestSpec {
    RequestSpec {
        ignore_eos: true,
        ..RequestSpec::greedy(p, max)
    }
}

pub struct Driver {
    pub core: Core,
    pub limits: Limits,
    pub next: u64,
}

impl Driver {
    pub fn with_model(c: EngineConfig, (m, t): (Arc<Model>, Arc<Tokenizer>)) -> Self {
        let mut limits = limits(&c);
        limits.vocab_size = m.config.vocab_size;
        limits.context_length = m.config.context_length;
        Driver {
            core: Core::standalone(m, t, c),
            limits,
            next: 0,
        }
    }

    pub fn submit(&mut self, s: RequestSpec) -> UnboundedReceiver<Event> {
        let req = Request::validate(s, &self.limits).unwrap();
        let (tx, rx) = unbounded_channel();
        self.next += 1;
        self.core.add(Seq::new(self.next, req, tx, Instant::now()));
        rx
    }

    pub fn run_to_idle(&mut self) {
        let mut steps = 0;
        while !self.core.is_idle() {
            self.core.step();
            steps += 1;
            assert!(steps < 100_000, "the engine stopped making progress");
        }
    }
}

/// Token ids and the finish record of a finished stream.
pub fn collect(rx: &mut UnboundedReceiver<Event>) -> (Vec<u32>, Finish) {
    let mut ids = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        match ev {
            Event::Token(t) => {
                assert_eq!(t.index, ids.len());
                ids.push(t.id)
            }
            Event::Finished(f) => return (ids, f),
            Event::Failed(m) => panic!("failed: {m}"),
            Event::Prefill { done, total } => assert!(ids.is_empty() && done < total),
        }
    }
    panic!("stream did not finish");
}

/// `steps` random actions on `d`: submit a prompt (a repeated one 30% of
/// the time, so the prefix cache is hit), cancel a live request, or step;
/// then every request left is cancelled and the engine runs to idle.
pub fn churn(d: &mut Driver, rng: &mut rand_chacha::ChaCha8Rng, steps: usize) {
    let mut live: Vec<UnboundedReceiver<Event>> = Vec::new();
    for _ in 0..steps {
        match rng.gen_range(0..10) {
            0..=2 => {
                let len = rng.gen_range(1..90);
                let p = if rng.gen_bool(0.3) {
                    vec![7; len] // repeated prompts hit the prefix cache
                } else {
                    prompt(rng, len)
                };
                live.push(d.submit(spec(p, rng.gen_range(1..20))));
            }
            3 if !live.is_empty() => {
                let i = rng.gen_range(0..live.len());
                drop(live.swap_remove(i));
            }
            _ => {
                d.core.step();
            }
        }
        live.retain_mut(|rx| {
            while let Ok(ev) = rx.try_recv() {
                if matches!(ev, Event::Finished(_)) {
                    return false;
                }
            }
            true
        });
    }
    drop(live);
    d.run_to_idle();
}
