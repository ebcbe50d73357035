//! Drafting with a draft model in the step (issue 24): a small model with
//! the target's vocabulary proposes each speculating sequence's next
//! tokens, greedily, batched over the sequences that draft.
//!
//! Its KV rows live in the same paged blocks as the target's (a second
//! [`KvCache`] indexed by the same block ids, so one pool, one block table
//! and one preemption serve both); `Seq::draft_computed` says how many
//! leading positions hold the draft model's rows for the sequence's
//! tokens. The draft lags the target: it catches up only when it is about
//! to draft (over the prompt, after a pause, over an accepted draft's last
//! token), a pass of at most a budget of tokens sized from its own cost so
//! that a long prompt's catch-up spreads over steps rather than stalling
//! one. Then one more pass per drafted token. A prefix-cache hit starts
//! the draft from position 0 (shared blocks may lack its rows; rewriting
//! them writes the same values, since rows depend only on the tokens before
//! them).
//!
//! The proposal is the draft's argmax, a point mass: verification samples
//! the target and accepts where the sample equals the draft, which is
//! speculative sampling's acceptance rule for a point-mass draft, so the
//! output distribution is exactly the target's.

use super::{Core, Seq};
use crate::blocks::Block;
use crate::cost::CostModel;
use hasten_kernels::attention::KvType;
use hasten_model::kv::KvCache;
use hasten_model::llama::{Model, Scratch, SeqBatch};
use hasten_model::sampler::argmax;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The draft model and its state on the engine thread.
pub(super) struct DraftModel {
    model: Arc<Model>,
    pub(super) kv: KvCache,
    scratch: Scratch,
    /// Draft pass time over tokens fed: sizes the catch-up.
    cost: CostModel,
    /// Seconds of draft passes per drafted token (moving average).
    pub per_token: f64,
    /// Tokens one pass may feed (the scratch's size).
    max_tokens: usize,
}

impl DraftModel {
    pub fn new(
        model: Arc<Model>,
        n_blocks: usize,
        block_size: usize,
        max_tokens: usize,
        max_seqs: usize,
        kv_type: KvType,
    ) -> Self {
        DraftModel {
            // `Engine::start` checked that the type fits the draft's heads.
            kv: KvCache::with_type(&model.config, n_blocks, block_size, kv_type)
                .unwrap_or_else(|_| KvCache::new(&model.config, n_blocks, block_size)),
            scratch: Scratch::new(&model.config, max_tokens, max_seqs),
            model,
            cost: CostModel::default(),
            per_token: 0.0,
            max_tokens,
        }
    }

    /// Catch-up tokens one step may feed: a quarter of the ITL target's
    /// worth (64 before the first fit).
    fn catch_up_budget(&self, itl_target: Duration) -> usize {
        self.cost
            .tokens_within(itl_target / 4)
            .unwrap_or(64)
            .clamp(16, self.max_tokens)
    }
}

/// One sequence's part of a draft pass.
struct Feed {
    seq: usize,
    /// Tokens fed, from position `Seq::draft_computed`.
    len: usize,
    /// The pass ends at the sequence's last token: sample a draft.
    logits: bool,
}

impl Core {
    /// Drafts up to `k` tokens for each `(running index, k)` with the
    /// draft model, into `Seq::draft`.
    pub(super) fn draft_with_model(&mut self, wants: Vec<(usize, usize)>) {
        let t0 = Instant::now();
        let Some(dm) = self.draft.as_ref() else {
            return;
        };
        let ctx = dm.model.config.context_length;
        let mut budget = dm.catch_up_budget(self.cfg.itl_target);
        // Blocks for the drafted positions (the next plan takes them for
        // the verification anyway) and the catch-up feeds.
        let mut feeds = Vec::new();
        let mut want_k = Vec::new();
        for (i, k) in wants {
            let k = k.min(ctx.saturating_sub(self.running[i].tokens.len()));
            let k = self.grow(i, 1 + k).saturating_sub(1);
            let s = &self.running[i];
            let lag = s.tokens.len() - s.draft_computed;
            let len = lag.min(budget);
            if k == 0 || len == 0 {
                continue;
            }
            budget -= len;
            feeds.push(Feed {
                seq: i,
                len,
                logits: len == lag,
            });
            want_k.push((i, k));
        }
        while !feeds.is_empty() {
            let tokens: usize = feeds.iter().map(|f| f.len).sum();
            let t = Instant::now();
            if self.draft_pass(&feeds).is_err() {
                // A failed draft pass costs the drafts, not the requests.
                for f in &feeds {
                    let s = &mut self.running[f.seq];
                    s.draft.clear();
                    s.draft_computed = s.draft_computed.min(s.computed);
                }
                return;
            }
            let dm = self.draft.as_mut().expect("checked above");
            dm.cost.observe(tokens, t.elapsed());
            // Next round: one token for each sequence that drafts on.
            feeds = feeds
                .into_iter()
                .filter(|f| f.logits)
                .filter_map(|f| {
                    let k = want_k.iter().find(|w| w.0 == f.seq).map_or(0, |w| w.1);
                    let s = &self.running[f.seq];
                    (s.draft.len() < k).then_some(Feed {
                        seq: f.seq,
                        len: 1,
                        logits: true,
                    })
                })
                .collect();
        }
        let drafted: usize = want_k.iter().map(|w| self.running[w.0].draft.len()).sum();
        if let (Some(dm), true) = (self.draft.as_mut(), drafted > 0) {
            let per = t0.elapsed().as_secs_f64() / drafted as f64;
            dm.per_token += 0.2 * (per - dm.per_token);
        }
    }

    /// One batched pass of the draft model over `feeds`; each feed that
    /// asks for logits gets its argmax appended to its draft.
    fn draft_pass(&mut self, feeds: &[Feed]) -> hasten_model::Result<()> {
        let Core {
            running,
            draft,
            tables,
            cfg,
            ..
        } = self;
        let dm = draft.as_mut().expect("the engine has a draft model");
        tables.resize_with(feeds.len(), Vec::new);
        for (t, f) in tables.iter_mut().zip(feeds) {
            t.clear();
            t.extend(running[f.seq].blocks.iter().map(Block::id));
        }
        // The draft's known tokens: the sequence's, then its draft so far.
        let known = |s: &Seq, from: usize, len: usize| -> Vec<u32> {
            (from..from + len)
                .map(|p| {
                    let n = s.tokens.len();
                    if p < n {
                        s.tokens[p]
                    } else {
                        s.draft[p - n]
                    }
                })
                .collect()
        };
        let fed: Vec<Vec<u32>> = feeds
            .iter()
            .map(|f| {
                let s = &running[f.seq];
                known(s, s.draft_computed, f.len)
            })
            .collect();
        let batch: Vec<SeqBatch<'_>> = feeds
            .iter()
            .zip(tables.iter())
            .zip(&fed)
            .map(|((f, table), toks)| SeqBatch {
                tokens: toks,
                start_pos: running[f.seq].draft_computed,
                block_table: table,
                local_table: &[],
                logits: usize::from(f.logits),
            })
            .collect();
        let logits = dm
            .model
            .forward(&batch, &mut dm.kv, &mut dm.scratch, cfg.threads)?;
        let vocab = dm.model.config.vocab_size;
        let mut row = 0;
        for f in feeds {
            let s = &mut running[f.seq];
            s.draft_computed += f.len;
            if f.logits {
                s.draft
                    .push(argmax(&logits[row * vocab..(row + 1) * vocab]));
                row += 1;
            }
        }
        Ok(())
    }
}
