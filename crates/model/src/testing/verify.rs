//! Speculative verification against decode: the first-row logits of
//! feeding some tokens after a prompt, in one pass, so a one-token pass
//! (a decode step) and a several-token one (a verification) can be
//! compared bit for bit (`examples/verify_exact`, `tests/model/verify.rs`).

use crate::kv::KvCache;
use crate::llama::{Model, Scratch, SeqBatch};
use hasten_kernels::attention::KvType;
use hasten_kernels::threads::Threads;

/// For each of `passes` in turn, the logits of its first token, the pass
/// fed in one forward pass after `prompt` over a cache of type `ty`. The
/// prompt is prefilled once: each pass rewrites the positions after it
/// before attending, and no row sees a later position, so every pass
/// computes what it would over a fresh cache.
pub fn first_row_logits(
    model: &Model,
    ty: KvType,
    prompt: &[u32],
    passes: &[&[u32]],
    threads: Threads,
) -> crate::Result<Vec<Vec<f32>>> {
    let c = &model.config;
    let block = 16;
    let longest = passes.iter().map(|p| p.len()).max().unwrap_or(0);
    let blocks = (prompt.len() + longest).div_ceil(block);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut kv = KvCache::with_type(c, blocks, block, ty)?;
    let mut s = Scratch::new(c, prompt.len().max(longest), longest);
    let seq = |tokens, start_pos, logits| SeqBatch {
        tokens,
        start_pos,
        block_table: &table,
        local_table: &[],
        logits,
    };
    model.forward(&[seq(prompt, 0, 1)], &mut kv, &mut s, threads)?;
    let mut out = Vec::with_capacity(passes.len());
    for toks in passes {
        let logits = model.forward(
            &[seq(toks, prompt.len(), toks.len())],
            &mut kv,
            &mut s,
            threads,
        )?;
        out.push(logits[..c.vocab_size].to_vec());
    }
    Ok(out)
}
