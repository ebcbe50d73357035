//! The engine's state and its step: schedule → forward over the whole batch
//! → sample → emit. Runs on the engine thread; does no I/O and never waits
//! (events go out through unbounded channels).
//!
//! Scheduling (iteration-level): every sequence that is decoding gets one
//! token per step, oldest first; then prompt chunks fill a token budget
//! sized from the cost model so a step takes about the inter-token latency
//! target (the whole `max_step_tokens` when nothing is decoding). Waiting
//! requests are admitted in arrival order, taking full prompt blocks from
//! the prefix cache first. When a decoding sequence needs a block and none
//! is free, the newest running sequence is preempted: its blocks are
//! released and it goes back to the front of the queue, to be recomputed
//! from its prompt and the tokens it already produced. Because the forward
//! pass computes every token row independently, recomputation and batching
//! do not change greedy outputs.

use crate::blocks::{chain_hash, Block, BlockPool, ChainHash};
use crate::cost::{CostModel, RowCosts};
use crate::forecast::{Calibration, OutputLength, Work};
use crate::metrics::Metrics;
use crate::request::{Event, Finish, FinishReason, Request, Timing};
use crate::{EngineConfig, Shared};
use hasten_model::detok::{Detokenizer, StopMatcher};
use hasten_model::kv::KvCache;
use hasten_model::llama::{Model, Scratch, SeqBatch};
use hasten_model::sampler::Sampler;
use hasten_model::tokenizer::Tokenizer;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// One request in the engine.
pub struct Seq {
    pub id: u64,
    pub req: Request,
    pub tx: UnboundedSender<Event>,
    /// Prompt followed by every token sampled so far.
    tokens: Vec<u32>,
    n_prompt: usize,
    /// Tokens whose K and V are in the cache.
    computed: usize,
    blocks: Vec<Block>,
    /// Its blocks in the sliding-window layers' pool, indexed as `blocks`
    /// (`None` below the window); empty without that pool (`window.rs`).
    local: Vec<Option<Block>>,
    /// Chain hash of each leading full block already published or shared.
    hashes: Vec<ChainHash>,
    cached_prompt: usize,
    sampler: Sampler,
    detok: Detokenizer,
    stops: StopMatcher,
    generated: usize,
    received: Instant,
    started: Option<Instant>,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    preemptions: u32,
    /// The stop string the output ended at (its text is not shown).
    stop_string: Option<String>,
    /// Token events held for a `deliver_at_end` request.
    held: Vec<Event>,
    /// The request's grammar, followed token by token.
    constraint: Option<crate::constraint::Constraint>,
    /// The grammar's mask for the next sample, computed beside the
    /// forward pass that produces its logits.
    mask: Option<std::result::Result<crate::constraint::Mask, String>>,
    /// Tokens drafted to follow the last sampled one, verified by the next
    /// pass (not in `tokens`).
    draft: Vec<u32>,
    /// How many tokens to draft next, from how the last drafts fared.
    draft_len: speculate::DraftLen,
    /// Tokens drafted for this sequence, and accepted.
    drafted: usize,
    accepted: usize,
    /// Leading positions whose draft-model KV rows are in the cache
    /// (`draft_pass.rs`).
    draft_computed: usize,
    /// Reads of its prompt's cached blocks from disk still out (one per
    /// tier): not admitted until they are in the pools (`prefix_disk.rs`).
    loading: u8,
}

impl Seq {
    pub fn new(id: u64, mut req: Request, tx: UnboundedSender<Event>, received: Instant) -> Self {
        let constraint = req.constraint.take();
        let spec = req.spec();
        Seq {
            constraint,
            id,
            tokens: spec.prompt.clone(),
            n_prompt: spec.prompt.len(),
            sampler: Sampler::new(spec.params.clone()),
            stops: StopMatcher::new(&spec.stop),
            req,
            tx,
            computed: 0,
            blocks: Vec::new(),
            local: Vec::new(),
            hashes: Vec::new(),
            cached_prompt: 0,
            detok: Detokenizer::new(),
            generated: 0,
            received,
            started: None,
            first_token: None,
            last_token: None,
            preemptions: 0,
            stop_string: None,
            held: Vec::new(),
            mask: None,
            draft: Vec::new(),
            draft_len: speculate::DraftLen::default(),
            drafted: 0,
            accepted: 0,
            draft_computed: 0,
            loading: 0,
        }
    }

    /// Gives back every block (published ones stay cached): it will be
    /// computed again from position 0.
    fn release(&mut self) {
        self.blocks.clear();
        self.local.clear();
        self.hashes.clear();
        self.computed = 0;
    }

    /// Tokens still to feed before the next sample.
    fn remaining(&self) -> usize {
        self.tokens.len() - self.computed
    }

    fn timing(&self, now: Instant) -> Timing {
        let started = self.started.unwrap_or(now);
        let first = self.first_token.unwrap_or(now);
        Timing {
            received: self.received,
            queue: started.saturating_duration_since(self.received),
            prefill: first.saturating_duration_since(started),
            decode: now.saturating_duration_since(first),
            preemptions: self.preemptions,
        }
    }
}

/// One entry of a step's plan: `len` tokens of running sequence `seq` from
/// `computed`, the last `draft` of them drafted (speculative decoding).
#[derive(Debug, Clone, Copy)]
struct Chunk {
    seq: usize,
    len: usize,
    draft: usize,
}

#[path = "speculate.rs"]
mod speculate;

#[path = "draft_pass.rs"]
mod draft_pass;

#[path = "emit.rs"]
mod emit;

#[path = "prefix_disk.rs"]
mod prefix_disk;

#[path = "window.rs"]
mod window;
use emit::{emit_token, held_text};

pub struct Core {
    model: Arc<Model>,
    tokenizer: Arc<Tokenizer>,
    cfg: EngineConfig,
    kv: KvCache,
    scratch: Scratch,
    pool: BlockPool,
    /// The sliding-window layers' own pool, if they have one.
    windowed: Option<window::Windowed>,
    waiting: VecDeque<Seq>,
    /// In admission order: the newest is last (and preempted first).
    running: Vec<Seq>,
    cost: CostModel,
    /// Step time over rows of steps that only decode (and verify drafts),
    /// and its last fit with enough spread: what a drafted row costs.
    decode_cost: CostModel,
    decode_fit: Option<(f64, f64)>,
    /// The same steps' time by row count ([`Core::keep_drafts`] weighs a
    /// step's drafts with it).
    row_costs: RowCosts,
    metrics: Arc<Mutex<Metrics>>,
    shared: Arc<Shared>,
    /// Start of every hash chain: distinguishes models sharing a process.
    seed: ChainHash,
    tables: Vec<Vec<u32>>,
    local_tables: Vec<Vec<u32>>,
    logits: Vec<f32>,
    out_len: OutputLength,
    /// Ids of submissions added since the forecast inputs were published.
    picked: Vec<u64>,
    calibration: Calibration,
    /// Computes grammar masks beside the forward pass
    /// ([`EngineConfig::mask_thread`]).
    masks: Option<crate::constraint::MaskWorker>,
    /// The draft model ([`EngineConfig::draft_model`]), if speculating with one.
    draft: Option<draft_pass::DraftModel>,
    /// Time the last step spent in draft-model passes.
    draft_time: Duration,
    /// The prefix cache's disk tier, if any.
    disk: Option<crate::disk::DiskTier>,
    /// The windowed pool's disk tier (with a disk tier and a windowed pool).
    local_disk: Option<crate::disk::DiskTier>,
    model_prior: speculate::ModelPrior,
    /// The same for prompt-lookup drafts: the share a sequence with no
    /// verified draft yet is taken at ([`Core::keep_paying_drafts`]).
    lookup_prior: speculate::ModelPrior,
}

impl Core {
    /// A core outside any thread, stepped by the caller (tests).
    pub fn standalone(model: Arc<Model>, tokenizer: Arc<Tokenizer>, cfg: EngineConfig) -> Self {
        let metrics = Arc::new(Mutex::new(Metrics::default()));
        Self::new(model, tokenizer, cfg, metrics, Arc::default(), 0)
    }

    pub fn metrics(&self) -> Metrics {
        self.metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn new(
        model: Arc<Model>,
        tokenizer: Arc<Tokenizer>,
        cfg: EngineConfig,
        metrics: Arc<Mutex<Metrics>>,
        shared: Arc<Shared>,
        seed: ChainHash,
    ) -> Self {
        let n_blocks = cfg.kv_blocks();
        let local = cfg.windowed_blocks(&model);
        // `Engine::start` checked that the type fits the model's heads.
        let kv = KvCache::windowed(&model.config, n_blocks, local, cfg.block_size, cfg.kv_type)
            .unwrap_or_else(|_| KvCache::new(&model.config, n_blocks, cfg.block_size));
        let windowed = match (kv.local_blocks, &model.config.swa) {
            (Some(n), Some(w)) => Some(window::Windowed::new(n, w.window)),
            _ => None,
        };
        // Verification passes take each sequence's drafts and want their logits.
        let per_seq = 1 + cfg.max_draft;
        let scratch = Scratch::new(
            &model.config,
            cfg.max_step_tokens + cfg.max_running * per_seq,
            cfg.max_running * per_seq,
        );
        let draft = match (&cfg.draft_model, cfg.max_draft) {
            (Some(m), 1..) => Some(draft_pass::DraftModel::new(
                m.clone(),
                n_blocks,
                cfg.block_size,
                cfg.max_step_tokens + cfg.max_running,
                cfg.max_running,
                cfg.kv_type,
            )),
            _ => None,
        };
        let mut core = Core {
            draft,
            disk: None,
            local_disk: None,
            draft_time: Duration::ZERO,
            model_prior: speculate::ModelPrior::default(),
            lookup_prior: speculate::ModelPrior::optimistic(),
            masks: cfg
                .mask_thread
                .then(crate::constraint::MaskWorker::spawn)
                .and_then(Result::ok),
            tokenizer,
            kv,
            scratch,
            pool: BlockPool::new(n_blocks),
            windowed,
            waiting: VecDeque::new(),
            running: Vec::new(),
            cost: CostModel::default(),
            decode_cost: CostModel::default(),
            decode_fit: None,
            row_costs: RowCosts::default(),
            metrics,
            shared,
            seed,
            tables: Vec::new(),
            local_tables: Vec::new(),
            logits: vec![0.0; model.config.vocab_size],
            out_len: OutputLength::default(),
            picked: Vec::new(),
            calibration: Calibration::default(),
            model,
            cfg,
        };
        // The gauges are right before the first step (a scrape of an idle
        // server sees the pool's size).
        core.publish_gauges();
        core
    }

    pub fn add(&mut self, mut seq: Seq) {
        self.fetch_from_disk(&mut seq);
        self.picked.push(seq.id);
        self.waiting.push_back(seq);
        self.shared
            .waiting
            .store(self.waiting.len(), Ordering::Relaxed);
        // Before the submitter's in-flight count drops (`run_loop`).
        self.shared
            .held
            .store(self.waiting.len() + self.running.len(), Ordering::SeqCst);
    }

    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// Whether a step has something to do: a running sequence, or a
    /// waiting one that is not waiting for its blocks from disk.
    pub fn has_work(&self) -> bool {
        !self.running.is_empty() || self.waiting.iter().any(|s| s.loading == 0)
    }

    /// Block pool counts (tests check for leaks with it).
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// The sliding-window layers' own pool, if they have one.
    pub fn windowed_pool(&self) -> Option<&BlockPool> {
        self.windowed.as_ref().map(|w| &w.pool)
    }

    /// One engine iteration. Returns the number of tokens computed.
    pub fn step(&mut self) -> usize {
        let t0 = Instant::now();
        self.reap(t0);
        let mut plan = self.plan(t0);
        while plan.is_empty() && !self.running.is_empty() {
            // Nothing fits although sequences hold blocks: make room.
            self.preempt(self.running.len() - 1);
            plan = self.plan(t0);
        }
        // Blocks the plan took from the prefix cache go to disk before
        // their new owners overwrite them.
        self.spill_evicted();
        let tokens: usize = plan.iter().map(|c| c.len).sum();
        if !plan.is_empty() {
            if let Err(e) = self.run(&plan) {
                // A failed forward pass: fail the sequences in it, keep serving others.
                let msg = e.to_string();
                let mut idx: Vec<usize> = plan.iter().map(|c| c.seq).collect();
                idx.sort_unstable();
                for i in idx.into_iter().rev() {
                    let seq = self.running.remove(i);
                    let _ = seq.tx.send(Event::Failed(msg.clone()));
                }
            }
            let took = t0.elapsed();
            if let Some(cost) = self.cost.fit() {
                let decodes = plan.iter().filter(|c| c.len == 1).count();
                let split = (tokens - decodes, decodes);
                let ratio = self.logit_ratio();
                self.calibration
                    .observe(cost, ratio, split, took.as_secs_f64());
            }
            self.cost.observe(tokens, took);
            // The draft model's passes are charged to drafted tokens apart.
            let draft_time = std::mem::take(&mut self.draft_time);
            if plan.iter().all(|c| c.len == 1 + c.draft) {
                let took = took.saturating_sub(draft_time);
                self.decode_cost.observe(tokens, took);
                self.row_costs.observe(tokens, took);
                self.decode_fit = self.decode_cost.regress(0.01).or(self.decode_fit);
            }
            let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
            m.steps += 1;
            m.decode_seq_steps += plan.iter().filter(|c| c.len == 1 + c.draft).count() as u64;
            m.step_time.observe_duration(took);
            m.batch_size.observe(plan.len() as f64);
            m.batch_tokens.observe(tokens as f64);
        }
        self.publish_gauges();
        tokens
    }

    /// Drops sequences whose receiver is gone and waiting ones that can no
    /// longer meet their deadline.
    fn reap(&mut self, now: Instant) {
        let before = self.running.len() + self.waiting.len();
        self.running.retain(|s| !s.tx.is_closed());
        self.waiting.retain(|s| !s.tx.is_closed());
        let cancelled = before - self.running.len() - self.waiting.len();
        let mut late = Vec::new();
        let mut ahead = 0usize;
        let per_step = self.cfg.max_step_tokens;
        let mut i = 0;
        while i < self.waiting.len() {
            let s = &self.waiting[i];
            ahead += s.remaining();
            let eta = self.cost.time_for(ahead, per_step);
            if s.req.spec().deadline.is_some_and(|d| now + eta > d) && s.first_token.is_none() {
                let s = self.waiting.remove(i).expect("index in range");
                ahead -= s.remaining();
                late.push(s);
            } else {
                i += 1;
            }
        }
        for s in late {
            self.finish(s, FinishReason::Deadline, now);
        }
        if cancelled > 0 {
            let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
            m.requests_cancelled += cancelled as u64;
        }
    }

    fn plan(&mut self, now: Instant) -> Vec<Chunk> {
        let mut plan = Vec::new();
        let mut tokens = 0;
        // Drafts wait while prompts do: their rows would lengthen the
        // steps that carry prompt chunks, and so every waiting request's
        // time to first token.
        let drafts_ok = !self.prompts_pending();
        // Decodes first, oldest first; growing one may preempt the newest.
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].remaining() == 1 {
                // Room for the drafts too, or no drafts.
                let k = if drafts_ok {
                    self.running[i].draft.len()
                } else {
                    0
                };
                if k > 0 && self.grow(i, 1 + k) == 1 + k {
                    plan.push(Chunk {
                        seq: i,
                        len: 1 + k,
                        draft: k,
                    });
                    tokens += 1 + k;
                    i += 1;
                    continue;
                }
                let s = &mut self.running[i];
                s.draft.clear();
                // Draft-model rows past the last token held the drafts.
                s.draft_computed = s.draft_computed.min(s.tokens.len());
                let mut fits = self.grow(i, 1) == 1;
                while !fits && self.running.len() - 1 > i {
                    self.preempt(self.running.len() - 1);
                    fits = self.grow(i, 1) == 1;
                }
                if !fits {
                    // It is the newest itself: recompute it later.
                    self.preempt(i);
                    continue;
                }
                plan.push(Chunk {
                    seq: i,
                    len: 1,
                    draft: 0,
                });
                tokens += 1;
            }
            i += 1;
        }
        let budget = if plan.is_empty() {
            self.cfg.max_step_tokens
        } else {
            self.cost
                .tokens_within(self.cfg.itl_target)
                .unwrap_or(self.cfg.block_size)
                .saturating_sub(tokens)
                .max(self.cfg.min_prefill_chunk)
        };
        let mut left = budget.min(self.cfg.max_step_tokens.saturating_sub(tokens));
        self.metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .step_token_budget = left;
        // Then prompt chunks of running sequences, then new admissions.
        for i in 0..self.running.len() {
            if left == 0 {
                break;
            }
            let r = self.running[i].remaining();
            if r > 1 {
                let k = self.grow(i, r.min(left));
                if k > 0 {
                    plan.push(Chunk {
                        seq: i,
                        len: k,
                        draft: 0,
                    });
                    left -= k;
                }
            }
        }
        while left > 0 && self.running.len() < self.cfg.max_running {
            // In order, passing over those whose blocks are still on their
            // way from disk.
            let Some(at) = self.waiting.iter().position(|s| s.loading == 0) else {
                break;
            };
            let mut seq = self.waiting.remove(at).expect("index in range");
            if seq.computed == 0 && self.cfg.prefix_cache {
                self.attach_cached_prefix(&mut seq);
            }
            self.running.push(seq);
            let i = self.running.len() - 1;
            let k = self.grow(i, self.running[i].remaining().min(left));
            if k == 0 {
                // No room yet: back to the head of the queue (cached blocks return to the LRU).
                let mut seq = self.running.pop().expect("just pushed");
                seq.release();
                self.waiting.insert(at, seq);
                break;
            }
            let s = &mut self.running[i];
            if s.started.is_none() {
                s.started = Some(now);
                let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
                m.requests_admitted += 1;
                m.prompt_tokens += s.n_prompt as u64;
                m.prefix_cache_hit_tokens += s.cached_prompt as u64;
                m.queue_time
                    .observe_duration(now.saturating_duration_since(s.received));
            }
            plan.push(Chunk {
                seq: i,
                len: k,
                draft: 0,
            });
            left -= k;
        }
        plan
    }

    /// Whether a prompt waits to be computed: a running sequence's rest,
    /// or a waiting request that has a slot to go to.
    fn prompts_pending(&self) -> bool {
        self.running.iter().any(|s| s.remaining() > 1)
            || (!self.waiting.is_empty() && self.running.len() < self.cfg.max_running)
    }

    /// Gives running sequence `i` blocks for up to `want` more tokens and
    /// returns how many it can take (fewer when the pool runs dry).
    fn grow(&mut self, i: usize, want: usize) -> usize {
        let bs = self.cfg.block_size;
        let s = &mut self.running[i];
        if let Some(w) = &self.windowed {
            w.trim(s, bs);
        }
        let mut have = s.blocks.len() * bs - s.computed;
        while have < want {
            let Some(b) = self.pool.alloc() else { break };
            if let Some(w) = &self.windowed {
                let Some(l) = w.alloc() else { break };
                s.local.push(Some(l));
            }
            s.blocks.push(b);
            have += bs;
        }
        have.min(want)
    }

    /// Shares the longest run of cached full prompt blocks, always leaving
    /// at least one prompt token to compute (its logits start the output).
    /// With a windowed pool, the hit also needs that pool's blocks of its
    /// last window (`window.rs`).
    fn attach_cached_prefix(&mut self, seq: &mut Seq) {
        let bs = self.cfg.block_size;
        let full = (seq.tokens.len() - 1) / bs;
        let mut hashes = Vec::new();
        let mut parent = self.seed;
        for b in 0..full {
            let toks = &seq.tokens[b * bs..(b + 1) * bs];
            let h = chain_hash(parent, toks);
            if !self.pool.contains(h, toks) {
                break;
            }
            hashes.push(h);
            parent = h;
        }
        let n = match &self.windowed {
            Some(w) => w.usable_hit(&hashes, &seq.tokens, bs),
            None => hashes.len(),
        };
        for (b, &h) in hashes[..n].iter().enumerate() {
            let toks = &seq.tokens[b * bs..(b + 1) * bs];
            let local = match &self.windowed {
                Some(w) => match w.attach(b, n, h, toks, bs) {
                    Ok(l) => Some(l),
                    Err(()) => break,
                },
                None => None,
            };
            let Some(block) = self.pool.lookup(h, toks) else {
                break;
            };
            seq.blocks.push(block);
            seq.local.extend(local);
            seq.hashes.push(h);
        }
        if self.windowed.is_some() && seq.blocks.len() < n {
            // A block went missing after the check (never expected): no hit.
            seq.release();
        }
        seq.computed = seq.blocks.len() * bs;
        if seq.started.is_none() {
            seq.cached_prompt = seq.computed.min(seq.n_prompt);
        }
    }

    fn preempt(&mut self, i: usize) {
        let mut seq = self.running.remove(i);
        seq.release();
        seq.draft.clear();
        seq.draft_computed = 0;
        seq.preemptions += 1;
        self.waiting.push_front(seq);
        self.metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .preemptions += 1;
    }

    /// Runs the forward pass over `plan`, then samples and emits.
    fn run(&mut self, plan: &[Chunk]) -> hasten_model::Result<()> {
        // Drafted tokens ride after the last sampled one for the pass.
        for c in plan.iter().filter(|c| c.draft > 0) {
            let s = &mut self.running[c.seq];
            let d = std::mem::take(&mut s.draft);
            s.tokens.extend_from_slice(&d);
        }
        // The grammar masks of the sequences sampled after this pass are
        // computed on a helper thread while it runs: they depend only on
        // the tokens already chosen, not on the logits.
        let mut grammars: Vec<(usize, crate::constraint::Constraint)> = Vec::new();
        for c in plan {
            let s = &mut self.running[c.seq];
            if s.computed + c.len == s.tokens.len() {
                if let Some(g) = s.constraint.take() {
                    grammars.push((c.seq, g));
                }
            }
        }
        self.tables.resize_with(plan.len(), Vec::new);
        for (t, c) in self.tables.iter_mut().zip(plan) {
            t.clear();
            t.extend(self.running[c.seq].blocks.iter().map(Block::id));
        }
        self.local_tables.resize_with(plan.len(), Vec::new);
        for (t, c) in self.local_tables.iter_mut().zip(plan) {
            window::Windowed::table(&self.running[c.seq], t);
        }
        let batch: Vec<SeqBatch<'_>> = plan
            .iter()
            .zip(self.tables.iter().zip(&self.local_tables))
            .map(|(c, (table, local_table))| {
                let s = &self.running[c.seq];
                SeqBatch {
                    tokens: &s.tokens[s.computed..s.computed + c.len],
                    start_pos: s.computed,
                    block_table: table,
                    local_table,
                    logits: if c.draft > 0 {
                        c.len
                    } else {
                        usize::from(s.computed + c.len == s.tokens.len())
                    },
                }
            })
            .collect();
        let wants: Vec<bool> = batch.iter().map(|b| b.logits > 0).collect();
        // Beside the pass on the mask thread when a core is free for it,
        // else before it, spread over the kernel threads.
        let constrained: Vec<usize> = grammars.iter().map(|g| g.0).collect();
        let started = match (&self.masks, grammars.is_empty()) {
            (_, true) => None,
            (Some(w), false) => match w.start(std::mem::take(&mut grammars)) {
                Ok(()) => Some(w),
                Err(g) => {
                    grammars = g;
                    None
                }
            },
            (None, false) => None,
        };
        let mut masks = match started {
            Some(_) => Vec::new(),
            None => crate::constraint::masks_now(std::mem::take(&mut grammars), self.cfg.threads),
        };
        let decoding = plan.iter().filter(|c| c.len == 1 + c.draft).count();
        let thresholds = [false, true].map(|model| self.draft_threshold(decoding, model));
        let logits = self
            .model
            .forward(&batch, &mut self.kv, &mut self.scratch, self.cfg.threads);
        drop(batch);
        if let Some(w) = started {
            // A worker that died took the grammars with it: those
            // sequences end rather than go on unconstrained.
            masks = w.finish().unwrap_or_default();
            for &i in &constrained {
                let s = &mut self.running[i];
                if !masks.iter().any(|m| m.0 == i) {
                    s.mask = Some(Err("the grammar mask thread failed".into()));
                }
            }
        }
        for (i, g, m) in masks {
            self.running[i].constraint = Some(g);
            self.running[i].mask = Some(m);
        }
        let logits = logits?;
        let now = Instant::now();
        let vocab = self.model.config.vocab_size;
        let mut row = 0;
        let mut done: Vec<(usize, FinishReason)> = Vec::new();
        for (c, want) in plan.iter().zip(wants) {
            if c.draft > 0 {
                let by_model =
                    speculate::drafts_with_model(&self.running[c.seq], self.draft.is_some());
                let rows = &logits[row * vocab..(row + c.len) * vocab];
                row += c.len;
                let mut v = speculate::Verifier {
                    tok: &self.tokenizer,
                    metrics: &self.metrics,
                    cache: self.cfg.prefix_cache.then_some(Publish {
                        pool: &self.pool,
                        local: self.windowed.as_ref().map(|w| &w.pool),
                        bs: self.cfg.block_size,
                        seed: self.seed,
                    }),
                    buf: &mut self.logits,
                    threshold: thresholds[usize::from(by_model)],
                    by_model,
                    block_size: self.cfg.block_size,
                };
                let s = &mut self.running[c.seq];
                let before = s.accepted;
                if let Some(reason) = v.verify(s, c.draft, rows, now) {
                    done.push((c.seq, reason));
                }
                let prior = if by_model {
                    &mut self.model_prior
                } else {
                    &mut self.lookup_prior
                };
                prior.observe(c.draft, s.accepted - before);
                continue;
            }
            let s = &mut self.running[c.seq];
            s.computed += c.len;
            if self.cfg.prefix_cache {
                let p = Publish {
                    pool: &self.pool,
                    local: self.windowed.as_ref().map(|w| &w.pool),
                    bs: self.cfg.block_size,
                    seed: self.seed,
                };
                p.full_blocks(s);
            }
            if !want {
                let _ = s.tx.send(Event::Prefill {
                    done: s.computed,
                    total: s.tokens.len(),
                });
                continue;
            }
            self.logits
                .copy_from_slice(&logits[row * vocab..(row + 1) * vocab]);
            row += 1;
            if let Some(reason) = emit_token(
                s,
                &mut self.logits,
                &self.tokenizer,
                now,
                &mut self.metrics.lock().unwrap_or_else(|p| p.into_inner()),
            ) {
                done.push((c.seq, reason));
            }
        }
        done.sort_by_key(|d| d.0);
        if self.cfg.max_draft > 0 {
            self.draft_next(plan, &done);
        }
        for (i, reason) in done.into_iter().rev() {
            let seq = self.running.remove(i);
            self.finish(seq, reason, now);
        }
        Ok(())
    }

    fn finish(&mut self, mut seq: Seq, reason: FinishReason, now: Instant) {
        // A stop string ends the text where it starts; any other end releases
        // what was held back (an incomplete character or stop-string prefix).
        let text = if seq.stop_string.is_some() {
            String::new()
        } else {
            held_text(&mut seq)
        };
        let timing = seq.timing(now);
        if !seq.req.spec().ignore_eos {
            self.out_len.observe(seq.generated);
        }
        let fin = Finish {
            reason,
            text,
            prompt_tokens: seq.n_prompt,
            cached_prompt_tokens: seq.cached_prompt,
            drafted_tokens: seq.drafted,
            accepted_tokens: seq.accepted,
            output_tokens: seq.generated,
            stop: seq.stop_string.take(),
            timing,
        };
        {
            let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
            m.requests_finished += 1;
            m.e2e
                .observe_duration(now.saturating_duration_since(seq.received));
        }
        for ev in seq.held.drain(..) {
            let _ = seq.tx.send(ev);
        }
        let _ = seq.tx.send(Event::Finished(fin));
        // Dropping `seq` returns its blocks (published ones stay cached).
    }

    fn publish_gauges(&mut self) {
        let st = self.pool.stats();
        let waiting_tokens: usize = self.waiting.iter().map(Seq::remaining).sum();
        let eta = self.cost.time_for(waiting_tokens, self.cfg.max_step_tokens);
        self.shared
            .waiting
            .store(self.waiting.len(), Ordering::Relaxed);
        self.shared
            .running
            .store(self.running.len(), Ordering::Relaxed);
        self.shared
            .held
            .store(self.waiting.len() + self.running.len(), Ordering::SeqCst);
        self.publish_forecast();
        self.shared
            .eta_us
            .store(eta.as_micros() as u64, Ordering::Relaxed);
        if let Some((_, b)) = self.cost.fit() {
            self.shared
                .per_token_ns
                .store((b * 1e9) as u64, Ordering::Relaxed);
        }
        let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        m.waiting = self.waiting.len();
        m.running = self.running.len();
        m.kv_blocks_total = st.total;
        m.kv_bytes_per_token =
            self.kv.bytes_per_token() + self.draft.as_ref().map_or(0, |d| d.kv.bytes_per_token());
        m.kv_capacity_tokens = self.kv.capacity_tokens();
        m.kv_blocks_used = st.used;
        m.kv_blocks_free = st.free;
        m.kv_blocks_cached = st.cached_idle;
        let w = self
            .windowed
            .as_ref()
            .map(|w| w.pool.stats())
            .unwrap_or_default();
        (m.kv_windowed_blocks_total, m.kv_windowed_blocks_used) = (w.total, w.used);
        m.prefix_disk = self.disk.as_ref().map(|d| {
            crate::disk::DiskStats::sum([Some(d), self.local_disk.as_ref()].into_iter().flatten())
        });
    }
}

impl Core {
    /// Work left in `s`, for the slot forecast.
    fn work(&self, s: &Seq) -> Work {
        let spec = s.req.spec();
        Work {
            prefill: if s.first_token.is_none() {
                s.remaining()
            } else {
                0
            },
            decode: self
                .out_len
                .left(s.generated, spec.max_tokens, spec.ignore_eos),
        }
    }

    /// The output projection's work per decoded token over the layers'.
    fn logit_ratio(&self) -> f64 {
        let c = &self.model.config;
        let layer = c.dim * (2 * c.q_dim() + 2 * c.kv_dim()) + 3 * c.dim * c.ffn_dim;
        (c.dim * c.vocab_size) as f64 / (c.n_layers * layer).max(1) as f64
    }

    /// Publishes what the `Retry-After` forecast needs: the requests this
    /// thread holds (and which submissions it has picked up), the cost
    /// model and typical output length.
    fn publish_forecast(&mut self) {
        let Some(cost) = self.cost.fit() else { return };
        let known: Vec<Work> = (self.running.iter())
            .chain(self.waiting.iter())
            .map(|s| self.work(s))
            .collect();
        let mut f = self
            .shared
            .forecast
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        f.at = Some(Instant::now());
        f.cost = cost;
        f.logit_ratio = self.logit_ratio();
        f.calibration = self.calibration;
        f.max_running = self.cfg.max_running;
        f.known = known;
        f.running = self.running.len();
        f.out_len = self.out_len;
        let picked = std::mem::take(&mut self.picked);
        f.in_flight.retain(|(id, _)| !picked.contains(id));
    }
}

/// Where full blocks are published in the prefix cache: the main pool
/// and the windowed layers' pool, if there is one.
#[derive(Clone, Copy)]
struct Publish<'a> {
    pool: &'a BlockPool,
    local: Option<&'a BlockPool>,
    bs: usize,
    seed: ChainHash,
}

impl Publish<'_> {
    /// Publishes every newly completed full block of `s`.
    fn full_blocks(&self, s: &mut Seq) {
        let bs = self.bs;
        while (s.hashes.len() + 1) * bs <= s.computed {
            let b = s.hashes.len();
            let parent = s.hashes.last().copied().unwrap_or(self.seed);
            let toks = &s.tokens[b * bs..(b + 1) * bs];
            let h = chain_hash(parent, toks);
            self.pool.publish(&s.blocks[b], h, toks);
            if let (Some(lp), Some(Some(l))) = (self.local, s.local.get(b)) {
                lp.publish(l, h, toks);
            }
            s.hashes.push(h);
        }
    }
}

/// Time until the engine could start a request arriving now.
pub(crate) fn queue_eta(shared: &Shared) -> Duration {
    Duration::from_micros(shared.eta_us.load(Ordering::Relaxed))
}
