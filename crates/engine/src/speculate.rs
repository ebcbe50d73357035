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

use super::{emit_token, publish_full_blocks, Chunk, Core, Seq};
use crate::blocks::{BlockPool, ChainHash};
use crate::metrics::Metrics;
use crate::request::FinishReason;
use hasten_model::tokenizer::Tokenizer;
use std::sync::Mutex;
use std::time::Instant;

/// A sequence's draft length, adapted to how its drafts fare: doubled
/// after a draft is accepted whole, cut to one past what was accepted
/// after a partial one; a one-token draft rejected outright pauses
/// drafting, for twice as many steps each time it happens again in a row
/// (each rejected position costs a token of compute in the pass for
/// nothing, so text that does not repeat itself soon stops paying it).
#[derive(Debug, Clone, Copy)]
pub(super) struct DraftLen {
    /// Tokens to draft at most next time (before the engine's cap).
    len: usize,
    /// Steps left before drafting again.
    pause: usize,
    /// The pause after the next outright rejection.
    backoff: usize,
}

impl Default for DraftLen {
    fn default() -> Self {
        DraftLen {
            len: 4,
            pause: 0,
            backoff: MIN_PAUSE,
        }
    }
}

/// Steps without drafts after a first outright rejection, and at most.
const MIN_PAUSE: usize = 8;
const MAX_PAUSE: usize = 512;

impl DraftLen {
    fn observe(&mut self, drafted: usize, accepted: usize) {
        if accepted > 0 {
            self.backoff = MIN_PAUSE;
        }
        self.len = if accepted == drafted {
            (2 * drafted).max(1)
        } else if accepted == 0 && drafted <= 1 {
            self.pause = self.backoff;
            self.backoff = (2 * self.backoff).min(MAX_PAUSE);
            1
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
    pub cache: Option<(&'a BlockPool, usize, ChainHash)>,
    /// One row of logits, sampled in place.
    pub buf: &'a mut [f32],
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
        if let Some((pool, bs, seed)) = self.cache {
            publish_full_blocks(pool, s, bs, seed);
        }
        s.draft_len.observe(drafts.len(), accepted);
        s.drafted += drafts.len();
        s.accepted += accepted;
        let mut m = self.metrics.lock().unwrap_or_else(|p| p.into_inner());
        m.drafted_tokens += drafts.len() as u64;
        m.accepted_tokens += accepted as u64;
        reason
    }
}

impl Core {
    /// Drafts the next tokens of every sequence this step sampled for and
    /// that goes on (`done`: those that end, sorted by index).
    pub(super) fn draft_next(&mut self, plan: &[Chunk], done: &[(usize, FinishReason)]) {
        let context = self.model.config.context_length;
        for c in plan {
            if done.binary_search_by_key(&c.seq, |d| d.0).is_ok() {
                continue;
            }
            let s = &mut self.running[c.seq];
            if s.remaining() != 1 || s.generated == 0 || !s.req.spec().speculate {
                continue;
            }
            // No drafts past the context, nor past the tokens still wanted
            // (the pass samples one more than it drafts).
            let cap = self
                .cfg
                .max_draft
                .min(context.saturating_sub(s.tokens.len()))
                .min(s.req.spec().max_tokens.saturating_sub(s.generated + 1));
            let k = s.draft_len.next(cap);
            s.draft = self.cfg.drafter.draft(&s.tokens, k);
        }
    }
}
