//! Speculative verification against decode: the first-row logits of
//! feeding some tokens after a prompt, in one pass, so a one-token pass
//! (a decode step) and a several-token one (a verification) can be
//! compared bit for bit (`examples/verify_exact`, `tests/model/verify.rs`).

use crate::kv::KvCache;
use crate::llama::{Model, Scratch, SeqBatch};
use hasten_kernels::attention::KvType;
use hasten_kernels::threads::Threads;

/// The logits of the first of `toks`, fed in one pass after `prompt` over
/// a fresh cache of type `ty`.
pub fn first_row_logits(
    model: &Model,
    ty: KvType,
    prompt: &[u32],
    toks: &[u32],
    threads: Threads,
) -> crate::Result<Vec<f32>> {
    let c = &model.config;
    let block = 16;
    let blocks = (prompt.len() + toks.len()).div_ceil(block);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut kv = KvCache::with_type(c, blocks, block, ty)?;
    let mut s = Scratch::new(c, prompt.len().max(toks.len()), toks.len());
    let seq = |tokens, start_pos, logits| SeqBatch {
        tokens,
        start_pos,
        block_table: &table,
        local_table: &[],
        logits,
    };
    model.forward(&[seq(prompt, 0, 1)], &mut kv, &mut s, threads)?;
    let out = model.forward(
        &[seq(toks, prompt.len(), toks.len())],
        &mut kv,
        &mut s,
        threads,
    )?;
    Ok(out[..c.vocab_size].to_vec())
}
