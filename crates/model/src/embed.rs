//! Embeddings: each input's final hidden states (after the output norm)
//! pooled into one vector and L2-normalized. Pooling is what the file
//! declares (GGUF `pooling_type`: mean, CLS = the first token, last) or
//! mean. Inputs are packed into forward calls of up to
//! [`crate::session::PREFILL_CHUNK`] tokens (several sequences per call,
//! the model's batched forward); a longer input runs alone, chunk by chunk.

use crate::kv::KvCache;
use crate::llama::{Model, Scratch, SeqBatch};
use crate::session::PREFILL_CHUNK;
use crate::{Error, Result};
use hasten_kernels::threads::Threads;

/// How hidden states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    Mean,
    /// The first token's state.
    Cls,
    /// The last token's state (decoder embedding models, e.g. Qwen3-Embedding).
    Last,
}

impl Pooling {
    /// The model's declared pooling (mean when it declares none, or none
    /// of these).
    pub fn of(model: &Model) -> Pooling {
        match model.config.pooling_type {
            Some(2) => Pooling::Cls,
            Some(3) => Pooling::Last,
            _ => Pooling::Mean,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }
}

const BLOCK: usize = 16;

/// One normalized embedding per input (each a non-empty token list that
/// fits the model's context).
pub fn embed(
    model: &Model,
    inputs: &[Vec<u32>],
    pooling: Pooling,
    threads: Threads,
) -> Result<Vec<Vec<f32>>> {
    let c = &model.config;
    for (i, t) in inputs.iter().enumerate() {
        if t.is_empty() || t.len() > c.context_length {
            return Err(Error::Batch(format!(
                "input {i} has {} tokens; 1 to {} (the context) are allowed",
                t.len(),
                c.context_length
            )));
        }
    }
    let mut scratch = Scratch::new(c, PREFILL_CHUNK, 1);
    let mut out = vec![Vec::new(); inputs.len()];
    // Groups of inputs whose tokens fit one forward call; a long input alone.
    let mut i = 0;
    while i < inputs.len() {
        let mut j = i + 1;
        let mut total = inputs[i].len();
        while j < inputs.len() && total + inputs[j].len() <= PREFILL_CHUNK {
            total += inputs[j].len();
            j += 1;
        }
        for (k, v) in embed_group(model, &inputs[i..j], pooling, &mut scratch, threads)?
            .into_iter()
            .enumerate()
        {
            out[i + k] = v;
        }
        i = j;
    }
    Ok(out)
}

fn embed_group(
    model: &Model,
    group: &[Vec<u32>],
    pooling: Pooling,
    s: &mut Scratch,
    threads: Threads,
) -> Result<Vec<Vec<f32>>> {
    let dim = model.config.dim;
    let blocks: Vec<usize> = group.iter().map(|t| t.len().div_ceil(BLOCK)).collect();
    let mut kv = KvCache::new(&model.config, blocks.iter().sum(), BLOCK);
    let mut tables = Vec::with_capacity(group.len());
    let mut next = 0u32;
    for &b in &blocks {
        tables.push((next..next + b as u32).collect::<Vec<u32>>());
        next += b as u32;
    }
    let mut sums = vec![vec![0f64; dim]; group.len()];
    let mut done = vec![0usize; group.len()];
    // One call for the group (a lone long input: one call per chunk).
    while done.iter().zip(group).any(|(d, t)| *d < t.len()) {
        let mut batch = Vec::new();
        let mut owners = Vec::new();
        let mut room = PREFILL_CHUNK;
        for (k, t) in group.iter().enumerate() {
            let n = (t.len() - done[k]).min(room);
            if n == 0 {
                continue;
            }
            batch.push(SeqBatch {
                tokens: &t[done[k]..done[k] + n],
                start_pos: done[k],
                block_table: &tables[k],
                local_table: &[],
                logits: 0,
            });
            owners.push((k, done[k], n));
            room -= n;
        }
        let h = model.hidden_states(&batch, &mut kv, s, threads)?;
        let mut row = 0;
        for &(k, start, n) in &owners {
            for r in 0..n {
                let pos = start + r;
                let take = match pooling {
                    Pooling::Mean => true,
                    Pooling::Cls => pos == 0,
                    Pooling::Last => pos + 1 == group[k].len(),
                };
                if take {
                    for (acc, &v) in sums[k]
                        .iter_mut()
                        .zip(&h[(row + r) * dim..(row + r + 1) * dim])
                    {
                        *acc += v as f64;
                    }
                }
            }
            row += n;
            done[k] += n;
        }
    }
    Ok(sums
        .into_iter()
        .map(|v| {
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
            v.iter().map(|x| (x / norm) as f32).collect()
        })
        .collect())
}

/// `v` cut to its first `dims` values and normalized again (Matryoshka
/// truncation, OpenAI's `dimensions`).
pub fn truncate(v: &[f32], dims: usize) -> Vec<f32> {
    let v = &v[..dims.min(v.len())];
    let norm = v
        .iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt()
        .max(1e-12);
    v.iter().map(|&x| (x as f64 / norm) as f32).collect()
}
