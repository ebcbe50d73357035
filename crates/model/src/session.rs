//! One sequence over the batched forward: the simplest user of
//! [`Model::forward`], for `hasten run`, tests and goldens. Its KV cache is a
//! private pool whose block table is simply every block in order.

use crate::kv::KvCache;
use crate::llama::{Model, Scratch, SeqBatch};
use crate::{Error, Result};
use hasten_kernels::threads::Threads;

pub const BLOCK_SIZE: usize = 16;
/// Prompt tokens per forward call during prefill.
pub const PREFILL_CHUNK: usize = 256;

#[derive(Debug)]
pub struct Session<'m> {
    model: &'m Model,
    kv: KvCache,
    scratch: Scratch,
    /// Room for a logit row per fed token ([`Self::feed_all`]), made on first use.
    wide: Option<Scratch>,
    table: Vec<u32>,
    pos: usize,
    cap: usize,
    threads: Threads,
}

impl<'m> Session<'m> {
    /// A session able to hold `max_tokens` positions (capped by the model's context).
    pub fn new(model: &'m Model, max_tokens: usize, threads: Threads) -> Self {
        let cap = max_tokens.min(model.config.context_length).max(1);
        let n_blocks = cap.div_ceil(BLOCK_SIZE);
        Session {
            model,
            kv: KvCache::new(&model.config, n_blocks, BLOCK_SIZE),
            scratch: Scratch::new(&model.config, PREFILL_CHUNK, 1),
            wide: None,
            table: (0..n_blocks as u32).collect(),
            pos: 0,
            cap,
            threads,
        }
    }

    /// As [`Self::new`], the KV cache storing rows as `ty`; an error when
    /// the model's head dimension does not fit the type's blocks.
    pub fn with_kv_type(
        model: &'m Model,
        max_tokens: usize,
        threads: Threads,
        ty: hasten_kernels::attention::KvType,
    ) -> Result<Self> {
        let mut s = Self::new(model, max_tokens, threads);
        s.kv = KvCache::with_type(&model.config, s.table.len(), BLOCK_SIZE, ty)?;
        Ok(s)
    }

    /// Positions filled so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Checks that `tokens` can be fed.
    fn check(&self, tokens: &[u32]) -> Result<()> {
        if tokens.is_empty() {
            return Err(Error::Batch("nothing to feed".into()));
        }
        let needed = self.pos + tokens.len();
        if needed > self.capacity() {
            return Err(Error::ContextOverflow {
                needed,
                max: self.capacity(),
            });
        }
        Ok(())
    }

    /// Appends `tokens` and returns the logits after each of them, one row
    /// of the vocabulary's size per token (for scoring a text).
    pub fn feed_all(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.check(tokens)?;
        let config = &self.model.config;
        let wide = self
            .wide
            .get_or_insert_with(|| Scratch::new(config, PREFILL_CHUNK, PREFILL_CHUNK));
        let mut logits = Vec::with_capacity(tokens.len() * config.vocab_size);
        for chunk in tokens.chunks(PREFILL_CHUNK) {
            let batch = [SeqBatch {
                tokens: chunk,
                start_pos: self.pos,
                block_table: &self.table,
                local_table: &[],
                logits: chunk.len(),
            }];
            let out = self
                .model
                .forward(&batch, &mut self.kv, wide, self.threads)?;
            logits.extend_from_slice(out);
            self.pos += chunk.len();
        }
        Ok(logits)
    }

    /// Appends `tokens` and returns the logits after the last one.
    pub fn feed(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.check(tokens)?;
        let mut logits = Vec::new();
        let chunks: Vec<&[u32]> = tokens.chunks(PREFILL_CHUNK).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            let batch = [SeqBatch {
                tokens: chunk,
                start_pos: self.pos,
                block_table: &self.table,
                local_table: &[],
                logits: usize::from(last),
            }];
            let out = self
                .model
                .forward(&batch, &mut self.kv, &mut self.scratch, self.threads)?;
            if last {
                logits = out.to_vec();
            }
            self.pos += chunk.len();
        }
        Ok(logits)
    }
}
