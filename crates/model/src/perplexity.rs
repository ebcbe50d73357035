//! Perplexity of a model on a text, computed as llama.cpp's
//! `llama-perplexity` computes it, so the two can be set side by side: the
//! tokens are cut into chunks of `ctx` tokens (the last partial chunk is
//! dropped), each chunk starts with BOS in place of its first token (when
//! the vocabulary adds one), and only the second half of each chunk is
//! scored, each token by the logits of the positions before it, so every
//! scored token sees at least `ctx / 2` tokens of context.

use crate::llama::Model;
use crate::session::Session;
use crate::{Error, Result};
use hasten_kernels::attention::KvType;
use hasten_kernels::threads::Threads;

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Perplexity {
    /// Chunks of `ctx` tokens evaluated.
    pub chunks: usize,
    /// Tokens scored (`chunks * (ctx - 1 - ctx / 2)`).
    pub scored: usize,
    /// Mean negative log-likelihood of a scored token (nats).
    pub nll: f64,
    /// `exp(nll)`.
    pub ppl: f64,
    /// The standard error of `ppl` (as llama.cpp's `+/-`: from the
    /// spread of the tokens' negative log-likelihoods).
    pub ppl_err: f64,
    /// The running perplexity after each chunk (llama.cpp's `[1]x.y,[2]...`).
    pub running: Vec<f64>,
}

/// Perplexity of `model` on `tokens` in chunks of `ctx` positions, the KV
/// cache storing rows as `kv`; `bos` replaces each chunk's first token.
/// `on_chunk` sees the running figure after each chunk.
pub fn perplexity(
    model: &Model,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    kv: KvType,
    threads: Threads,
    mut on_chunk: impl FnMut(usize, usize, f64),
) -> Result<Perplexity> {
    if ctx < 4 || ctx > model.config.context_length {
        return Err(Error::Batch(format!(
            "a chunk of {ctx} tokens: it must be 4 to {} (the model's context)",
            model.config.context_length
        )));
    }
    let chunks = tokens.len() / ctx;
    if chunks == 0 {
        return Err(Error::Batch(format!(
            "the text has {} tokens, fewer than one chunk of {ctx}",
            tokens.len()
        )));
    }
    let vocab = model.config.vocab_size;
    let first = ctx / 2;
    let (mut sum, mut sum_sq, mut n) = (0.0f64, 0.0f64, 0usize);
    let mut running = Vec::with_capacity(chunks);
    for c in 0..chunks {
        let mut chunk = tokens[c * ctx..(c + 1) * ctx].to_vec();
        if let Some(b) = bos {
            chunk[0] = b;
        }
        let mut s = Session::with_kv_type(model, ctx, threads, kv)?;
        s.feed(&chunk[..first])?;
        // The logits after positions first..ctx-2: row i scores token first+i+1.
        let logits = s.feed_all(&chunk[first..ctx - 1])?;
        for (i, row) in logits.chunks_exact(vocab).enumerate() {
            let nll = token_nll(row, chunk[first + i + 1] as usize);
            sum += nll;
            sum_sq += nll * nll;
            n += 1;
        }
        let ppl = (sum / n as f64).exp();
        running.push(ppl);
        on_chunk(c + 1, chunks, ppl);
    }
    let nll = sum / n as f64;
    // llama.cpp's error: the standard error of the mean NLL, carried
    // through exp.
    let var = (sum_sq / n as f64 - nll * nll).max(0.0);
    let ppl = nll.exp();
    Ok(Perplexity {
        chunks,
        scored: n,
        nll,
        ppl,
        ppl_err: ppl * (var / (n as f64 - 1.0).max(1.0)).sqrt(),
        running,
    })
}

/// `-log softmax(row)[target]`: the negative log-likelihood of `target`
/// under logits `row`, summed in f64.
pub fn token_nll(row: &[f32], target: usize) -> f64 {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let lse = max
        + row
            .iter()
            .map(|&v| (v as f64 - max).exp())
            .sum::<f64>()
            .ln();
    lse - row[target] as f64
}
