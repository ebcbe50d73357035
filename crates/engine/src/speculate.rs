//! Speculative decoding in the step (issue 24, first part): a decoding
//! sequence's drafted tokens are fed after its last sampled token in the
//! same pass, and each position's logits are sampled in turn exactly as
//! plain decoding would sample them (same sampler state, penalties,
//! grammar, RNG draws), so a draft is accepted only where the sample equals
//! it. With a deterministic drafter (prompt lookup) this is standard
//! speculative sampling with a point-mass draft: the output is token for
//! token what the request gives without speculation, greedy or seeded.
//! The first rejected position's sample is the next token; the KV rows
//! of the rejected drafts are left to be overwritten.

use super::{emit_token, Chunk, Core, Publish, Seq};
use crate::metrics::Metrics;
use crate::request::FinishReason;
use crate::request::Speculate;
use hasten_model::tokenizer::Tokenizer;
use std::sync::Mutex;
use std::time::Instant;

/// A sequence's draft length, adapted to how its drafts fare: doubled
/// after a draft is accepted whole, cut to one past what was accepted
/// after a partial one. Drafting pauses, for twice as many steps each time
/// it happens again without an accepted token in between, when a one-token
/// draft is rejected outright or when the recent share of drafted tokens
/// accepted falls below what a drafted token costs (each rejected
/// position costs a row of the pass for nothing, so text that does not
/// repeat itself soon stops paying it; see [`Core::draft_threshold`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct DraftLen {
    /// Tokens to draft at most next time (before the engine's cap).
    len: usize,
    /// Steps left before drafting again.
    pause: usize,
    /// The pause after the next outright rejection.
    backoff: usize,
    /// Recent share of drafted tokens accepted (moving average).
    rate: f64,
    /// Draft-model drafts in a row rejected outright, and whether the
    /// model was given up on for this sequence (it falls back to prompt
    /// lookup): each probe after a pause first catches the draft model up
    /// over the paused tokens, a cost that only pays if the model agrees.
    model_misses: u8,
    model_off: bool,
    /// The engine-wide prior was consulted ([`ModelPrior`]).
    model_tried: bool,
}

/// How the draft model's (or prompt lookup's) drafts have fared across
/// sequences lately: the share accepted (moving average) and how many
/// sequences came to draft.
#[derive(Debug, Clone, Copy)]
pub(super) struct ModelPrior {
    pub rate: f64,
    pub seqs: u64,
}

impl Default for ModelPrior {
    fn default() -> Self {
        ModelPrior { rate: 0.5, seqs: 0 }
    }
}

impl ModelPrior {
    /// A prior that starts at every draft accepted (it learns down).
    pub fn optimistic() -> Self {
        ModelPrior { rate: 1.0, seqs: 0 }
    }

    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        if drafted > 0 {
            self.rate += 0.1 * (accepted as f64 / drafted as f64 - self.rate);
        }
    }
}

impl Default for DraftLen {
    fn default() -> Self {
        DraftLen {
            len: 4,
            pause: 0,
            backoff: MIN_PAUSE,
            rate: 0.5,
            model_misses: 0,
            model_off: false,
            model_tried: false,
        }
    }
}

/// Steps without drafts after a first outright rejection, and at most.
const MIN_PAUSE: usize = 8;
const MAX_PAUSE: usize = 512;
/// Weight of the latest verification in the acceptance average.
const RATE_WEIGHT: f64 = 0.3;
/// What a cut draft adds to its sequence's acceptance share per step
/// ([`Core::keep_paying_drafts`]).
const RATE_CREEP: f64 = 0.02;
/// Outright rejections in a row after which a sequence stops drafting
/// with the draft model.
const MODEL_MISSES: u8 = 3;

impl DraftLen {
    /// Takes in how a draft fared; `threshold`: the acceptance share below
    /// which drafting costs more than it brings.
    fn observe(&mut self, drafted: usize, accepted: usize, threshold: f64, by_model: bool) {
        if drafted == 0 {
            return;
        }
        if by_model {
            self.model_misses = if accepted == 0 {
                self.model_misses + 1
            } else {
                0
            };
            self.model_off |= self.model_misses >= MODEL_MISSES;
        }
        if accepted > 0 {
            self.backoff = MIN_PAUSE;
        }
        self.rate += RATE_WEIGHT * (accepted as f64 / drafted as f64 - self.rate);
        let pause = |d: &mut Self| {
            d.pause = d.backoff;
            d.backoff = (2 * d.backoff).min(MAX_PAUSE);
            // The probe after the pause decides whether drafting resumes.
            d.rate = d.rate.max(threshold);
            1
        };
        self.len = if self.rate < threshold {
            if accepted == 0 {
                pause(self)
            } else {
                // Paying less than it costs, but not nothing: pause without
                // lengthening the next pause.
                self.pause = self.backoff;
                self.rate = threshold;
                1
            }
        } else if accepted == drafted {
            (2 * drafted).max(1)
        } else if accepted == 0 && drafted <= 1 {
            pause(self)
        } else {
            (accepted + 1).min(drafted.div_ceil(2)).max(1)
        };
    }

    /// The length to draft now (0 while paused), at most `cap`.
    fn next(&mut self, cap: usize) -> usize {
        if self.pause > 0 {
            self.pause -= 1;
            return 0;
        }
        self.len.min(cap)
    }
}

/// What verifying one sequence needs of the engine (borrowed apart from
/// the pass's logits).
pub(super) struct Verifier<'a> {
    pub tok: &'a Tokenizer,
    pub metrics: &'a Mutex<Metrics>,
    /// Full blocks to publish in the prefix cache, if it is on.
    pub cache: Option<Publish<'a>>,
    /// One row of logits, sampled in place.
    pub buf: &'a mut [f32],
    /// Acceptance share below which drafts do not pay this step.
    pub threshold: f64,
    /// The drafts came from the draft model.
    pub by_model: bool,
    pub block_size: usize,
}

impl Verifier<'_> {
    /// Samples the positions of a verification pass of `s` (`rows`: their
    /// logits; the last `drafted` tokens of `s.tokens` are the drafts);
    /// returns why the sequence ends, if it does.
    pub fn verify(
        &mut self,
        s: &mut Seq,
        drafted: usize,
        rows: &[f32],
        now: Instant,
    ) -> Option<FinishReason> {
        let vocab = self.buf.len();
        // Take the drafts back off the tokens: they are only proposals.
        let drafts: Vec<u32> = s.tokens.split_off(s.tokens.len() - drafted);
        // The last sampled token's KV row is now in the cache.
        s.computed += 1;
        let mut accepted = 0;
        let mut reason = None;
        for (i, row) in rows.chunks_exact(vocab).enumerate() {
            self.buf.copy_from_slice(row);
            let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
            reason = emit_token(s, self.buf, self.tok, now, &mut m);
            drop(m);
            let sampled = s.tokens.last().copied();
            if reason.is_some() || i == drafts.len() || sampled != Some(drafts[i]) {
                break;
            }
            // The draft was right: its KV row (written by this pass) holds
            // the token just sampled.
            s.computed += 1;
            accepted += 1;
        }
        if let Some(p) = self.cache {
            p.full_blocks(s);
        }
        // Blocks taken only for rejected drafts go back to the pool (never
        // published: they lie past `computed`); the draft model's rows
        // hold for the accepted positions only.
        let keep = (s.computed + 1).div_ceil(self.block_size);
        s.blocks.truncate(keep);
        s.local.truncate(keep);
        s.draft_computed = s.draft_computed.min(s.computed);
        s.draft_len
            .observe(drafts.len(), accepted, self.threshold, self.by_model);
        s.drafted += drafts.len();
        s.accepted += accepted;
        let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        m.drafted_tokens += drafts.len() as u64;
        m.accepted_tokens += accepted as u64;
        reason
    }
}

/// Whether `s` drafts with the engine's draft model (`has_model`) rather
/// than by prompt lookup.
pub(super) fn drafts_with_model(s: &Seq, has_model: bool) -> bool {
    has_model
        && !s.draft_len.model_off
        && matches!(s.req.spec().speculate, Speculate::Auto | Speculate::Model)
}

impl Core {
    /// The share of drafted tokens that must be accepted for drafting to
    /// pay in a step that decodes `decoding` sequences: a step costs
    /// `a + b·rows` (fitted over decode steps), so drafting k tokens for one
    /// of them costs `b·k` and brings `rate·k` tokens worth `(a + b·B)/B`
    /// each. On one stream `b` is small beside `a` (the weights are read
    /// once whatever the rows) and most acceptance pays; in a large batch,
    /// or on a small model whose rows are compute, it no longer does. 0
    /// before any fit (draft to learn).
    /// A draft model's passes add their own time per drafted token
    /// (`model`).
    pub(super) fn draft_threshold(&self, decoding: usize, model: bool) -> f64 {
        let Some((a, b)) = self.decode_fit else {
            return 0.0;
        };
        let batch = decoding.max(1) as f64;
        let b = b + match (&self.draft, model) {
            (Some(d), true) => d.per_token,
            _ => 0.0,
        };
        // With a margin for what the fit leaves out (drafting and the
        // verification's bookkeeping) and its noise: a draft that only
        // breaks even is not worth the jitter.
        (1.25 * b * batch / (a + b * batch) + 0.05).min(1.0)
    }

    /// Drafts the next tokens of every sequence this step sampled for and
    /// that goes on (`done`: those that end, sorted by index).
    pub(super) fn draft_next(&mut self, plan: &[Chunk], done: &[(usize, FinishReason)]) {
        let context = self.model.config.context_length;
        let mut by_model = Vec::new();
        // The next plan drops drafts while prompts wait: do not make them
        // (sequences ending now free slots for waiting requests).
        let slots = self.running.len() - done.len() < self.cfg.max_running;
        let pending =
            self.running.iter().any(|s| s.remaining() > 1) || (!self.waiting.is_empty() && slots);
        if pending {
            return;
        }
        let model_bar = self.draft_threshold(plan.len(), true);
        for c in plan {
            if done.binary_search_by_key(&c.seq, |d| d.0).is_ok() {
                continue;
            }
            let has_model = self.draft.is_some();
            let s = &mut self.running[c.seq];
            if s.remaining() != 1 || s.generated == 0 || s.req.spec().speculate == Speculate::Off {
                continue;
            }
            if has_model && !s.draft_len.model_tried {
                // A new sequence starts from how the draft model has fared
                // lately: below what pays, it starts without it (every
                // eighth still tries, to notice when that changes).
                s.draft_len.model_tried = true;
                self.model_prior.seqs += 1;
                if self.model_prior.rate < model_bar && !self.model_prior.seqs.is_multiple_of(8) {
                    s.draft_len.model_off = true;
                }
            }
            // No drafts past the context, nor past the tokens still wanted
            // (the pass samples one more than it drafts).
            let cap = self
                .cfg
                .max_draft
                .min(context.saturating_sub(s.tokens.len()))
                .min(s.req.spec().max_tokens.saturating_sub(s.generated + 1));
            let k = s.draft_len.next(cap);
            if drafts_with_model(s, has_model) {
                if k > 0 {
                    by_model.push((c.seq, k));
                }
            } else {
                s.draft = self.cfg.drafter.draft(&s.tokens, k);
            }
        }
        self.keep_paying_drafts(plan, done, &by_model);
        if !by_model.is_empty() {
            let t = Instant::now();
            self.draft_with_model(by_model);
            self.draft_time = t.elapsed();
        }
    }
}

impl Core {
    /// Cuts this step's prompt-lookup drafts to what pays for the rows
    /// they add ([`keep_drafts`], with the step time by row count the
    /// engine measured): a draft that opens a new tile of the batched
    /// kernels costs a pass over the weights, which the linear fit behind
    /// [`Core::draft_threshold`] spreads over every row. Draft-model
    /// drafts (`by_model`) are not cut; their rows count as taken.
    fn keep_paying_drafts(
        &mut self,
        plan: &[Chunk],
        done: &[(usize, FinishReason)],
        by_model: &[(usize, usize)],
    ) {
        let going = |c: &&Chunk| done.binary_search_by_key(&c.seq, |d| d.0).is_err();
        let lookup: Vec<usize> = plan
            .iter()
            .filter(going)
            .map(|c| c.seq)
            .filter(|&i| !self.running[i].draft.is_empty())
            .collect();
        if lookup.is_empty() {
            return;
        }
        let base = plan.iter().filter(going).count() + by_model.iter().map(|m| m.1).sum::<usize>();
        // A sequence that never had a draft verified is taken at the
        // share of recent sequences' drafts (at first, all accepted).
        let prior = self.lookup_prior.rate;
        let share = |s: &Seq| {
            if s.drafted == 0 {
                prior
            } else {
                s.draft_len.rate
            }
        };
        let drafts: Vec<(usize, f64)> = lookup
            .iter()
            .map(|&i| (self.running[i].draft.len(), share(&self.running[i])))
            .collect();
        let (costs, fit) = (&self.row_costs, self.decode_fit);
        if let Some(keep) = keep_drafts(base, &drafts, |rows| costs.cost(rows, fit)) {
            for (&i, k) in lookup.iter().zip(keep) {
                let s = &mut self.running[i];
                if k < s.draft.len() {
                    // Only a verified draft updates the share: a cut one
                    // creeps up, so drafting is tried again in time.
                    s.draft_len.rate = (s.draft_len.rate + RATE_CREEP).min(1.0);
                }
                s.draft.truncate(k);
            }
        }
    }
}

/// How many tokens of each draft (`drafts`: its length and its
/// sequence's recent acceptance share) a step of `base` rows besides them
/// should carry, given a step's seconds by row count (`cost`); None when
/// a cost is unknown (draft to learn). A drafted token is worth its
/// acceptance share of a token, a token `cost(base) / base`; the drafts,
/// best share first, are kept up to the total that gains most over what
/// their rows add to the step, with the margins of
/// [`Core::draft_threshold`] (rows cost 1.25x, every token 0.05 of a
/// token more).
pub(super) fn keep_drafts(
    base: usize,
    drafts: &[(usize, f64)],
    cost: impl Fn(usize) -> Option<f64>,
) -> Option<Vec<usize>> {
    let base = base.max(1);
    let t0 = cost(base)?;
    let value = t0 / base as f64;
    let mut order: Vec<usize> = (0..drafts.len()).collect();
    order.sort_by(|&a, &b| drafts[b].1.total_cmp(&drafts[a].1));
    let (mut gain, mut best, mut best_net) = (0.0, 0, 0.0);
    let mut d = 0;
    for &i in &order {
        let (len, rate) = drafts[i];
        for _ in 0..len {
            d += 1;
            gain += (rate - 0.05) * value;
            let net = gain - 1.25 * (cost(base + d)? - t0);
            if net > best_net {
                (best, best_net) = (d, net);
            }
        }
    }
    let mut keep = vec![0; drafts.len()];
    let mut left = best;
    for &i in &order {
        keep[i] = drafts[i].0.min(left);
        left -= keep[i];
    }
    Some(keep)
}

#[cfg(test)]
mod tests {
    use super::{keep_drafts, DraftLen};

    /// A step whose kernels take rows in tiles of eight: 10 ms plus 10 ms
    /// per tile.
    fn tiles(rows: usize) -> Option<f64> {
        Some(0.010 + 0.010 * rows.div_ceil(8) as f64)
    }

    #[test]
    fn drafts_fill_the_open_tile_and_stop_before_a_new_one() {
        // Eight streams fill a tile: no draft pays for a second pass.
        assert_eq!(keep_drafts(8, &[(4, 0.5); 8], tiles), Some(vec![0; 8]));
        // Six streams leave two rows free: the best drafts take them.
        assert_eq!(
            keep_drafts(6, &[(4, 0.3), (4, 0.6), (1, 0.9)], tiles),
            Some(vec![0, 1, 1])
        );
        // Drafts that are nearly all accepted pay for a new tile.
        assert_eq!(keep_drafts(8, &[(8, 0.95); 2], tiles), Some(vec![8, 8]));
        // One stream: a tile is free up to eight rows.
        assert_eq!(keep_drafts(1, &[(4, 0.4)], tiles), Some(vec![4]));
        // Nothing measured: keep everything.
        assert_eq!(keep_drafts(1, &[(4, 0.4)], |_| None), None);
        // A line (every row costs the same) keeps drafts that pay per row.
        let line = |rows: usize| Some(0.010 + 0.001 * rows as f64);
        assert_eq!(
            keep_drafts(2, &[(4, 0.5), (4, 0.01)], line),
            Some(vec![4, 0])
        );
    }

    /// Steps until the next draft, and its length.
    fn wait(d: &mut DraftLen) -> (usize, usize) {
        for steps in 0..10_000 {
            let k = d.next(8);
            if k > 0 {
                return (steps, k);
            }
        }
        panic!("drafting never resumed");
    }

    #[test]
    fn lengths_follow_acceptance() {
        let mut d = DraftLen::default();
        assert_eq!(d.next(8), 4);
        d.observe(4, 4, 0.0, false);
        assert_eq!(d.next(8), 8, "a whole accepted draft doubles");
        assert_eq!(d.next(3), 3, "the cap holds");
        d.observe(8, 2, 0.0, false);
        assert_eq!(d.next(8), 3, "one past what was accepted");
    }

    #[test]
    fn outright_rejections_pause_longer_each_time() {
        let mut d = DraftLen::default();
        d.observe(4, 0, 0.0, false);
        d.observe(1, 0, 0.0, false);
        assert_eq!(wait(&mut d), (8, 1));
        d.observe(1, 0, 0.0, false);
        assert_eq!(wait(&mut d), (16, 1));
        d.observe(1, 1, 0.0, false);
        assert_eq!(d.next(8), 2, "an accepted probe resumes drafting");
    }

    #[test]
    fn drafts_that_do_not_pay_for_their_rows_pause() {
        // Half the drafted tokens accepted: worth it when a row costs
        // little (threshold 0.2), not when it costs much (0.7).
        let mut cheap = DraftLen::default();
        let mut dear = DraftLen::default();
        for _ in 0..10 {
            cheap.observe(4, 2, 0.2, false);
            dear.observe(4, 2, 0.7, false);
        }
        assert!(cheap.pause == 0 && cheap.len >= 2, "{cheap:?}");
        assert!(dear.pause > 0, "{dear:?}");
        // After the pause a probe decides: accepted, drafting resumes.
        let (steps, k) = wait(&mut dear);
        assert!(steps > 0 && k == 1, "{steps} {k}");
        dear.observe(1, 1, 0.7, false);
        assert!(dear.next(8) > 0);
    }

    #[test]
    fn a_draft_model_that_never_agrees_is_given_up() {
        let mut d = DraftLen::default();
        d.observe(4, 0, 0.0, true);
        d.observe(1, 1, 0.0, true);
        d.observe(1, 0, 0.0, true);
        d.observe(1, 0, 0.0, true);
        assert!(
            !d.model_off,
            "an accepted token in between resets the count"
        );
        d.observe(1, 0, 0.0, true);
        assert!(d.model_off);
        d.observe(1, 1, 0.0, false);
        assert!(
            d.model_off,
            "prompt lookup's success does not bring it back"
        );
    }
}
