//! The Llama-family forward pass over a batch of sequences.
//!
//! One call processes any mix of prefill chunks and decode steps: every
//! sequence brings its new tokens, the position of the first one, and the
//! block table of its KV cache. The tokens of all sequences are stacked into
//! one activation matrix so each weight matrix is read once per call.
//!
//! ```text
//! x = embed[tokens]                                    (T, dim)
//! for each layer:
//!     h = rmsnorm(x) ; q,k,v = h·Wq, h·Wk, h·Wv (+bias)  (T, q_dim), (T, kv_dim)
//!     (qwen3: rmsnorm over each head of q and k)
//!     rope(q, k) at each token's position; store k, v in the paged cache
//!     a = attention(q, cache[0..=pos]) ; x += a·Wo         (T, dim)
//!     h = rmsnorm(x) ; x += (silu(h·Wg) * h·Wu)·Wd         (T, ffn) -> (T, dim)
//! logits = rmsnorm(x[last of each sequence]) · Wout      (S, vocab)
//! (qwen3moe: the FFN is a routed mixture of experts, see `crate::moe`)
//! (smollm3: no RoPE on every 4th layer; granite: embeddings, each block's output, the attention scale and the
//! logits carry constant multipliers, `Config::scales`)
//! ```

use crate::config::{Arch, Config};
use crate::kv::KvCache;
use crate::moe::{MoeFfn, MoeScratch};
use crate::weights::{Tensor, TensorSource};
use crate::{Error, Result};
use hasten_kernels::attention::{attend_tile, tile_scores_len, HeadView};
use hasten_kernels::matmul::matmul;
use hasten_kernels::ops::{add_assign, rms_norm, silu_mul, Rope};
use hasten_kernels::threads::{par_chunks, Threads};

/// How a file names its tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// llama.cpp names: `blk.N.attn_q.weight`.
    Gguf,
    /// Hugging Face names: `model.layers.N.self_attn.q_proj.weight`.
    HuggingFace,
}

impl Naming {
    fn global(self, part: &str) -> &'static str {
        match (self, part) {
            (Naming::Gguf, "embed") => "token_embd.weight",
            (Naming::Gguf, "norm") => "output_norm.weight",
            (Naming::Gguf, "output") => "output.weight",
            (Naming::HuggingFace, "embed") => "model.embed_tokens.weight",
            (Naming::HuggingFace, "norm") => "model.norm.weight",
            (Naming::HuggingFace, "output") => "lm_head.weight",
            _ => unreachable!("unknown global tensor {part}"),
        }
    }

    fn layer(self, i: usize, part: &str) -> String {
        let hf = match part {
            "attn_norm" => "input_layernorm.weight",
            "q" => "self_attn.q_proj.weight",
            "k" => "self_attn.k_proj.weight",
            "v" => "self_attn.v_proj.weight",
            "q_bias" => "self_attn.q_proj.bias",
            "k_bias" => "self_attn.k_proj.bias",
            "v_bias" => "self_attn.v_proj.bias",
            "q_norm" => "self_attn.q_norm.weight",
            "k_norm" => "self_attn.k_norm.weight",
            "o" => "self_attn.o_proj.weight",
            "ffn_norm" => "post_attention_layernorm.weight",
            "gate" => "mlp.gate_proj.weight",
            "up" => "mlp.up_proj.weight",
            "down" => "mlp.down_proj.weight",
            _ => unreachable!("unknown layer tensor {part}"),
        };
        let gguf = match part {
            "attn_norm" => "attn_norm.weight",
            "q" => "attn_q.weight",
            "k" => "attn_k.weight",
            "v" => "attn_v.weight",
            "q_bias" => "attn_q.bias",
            "k_bias" => "attn_k.bias",
            "v_bias" => "attn_v.bias",
            "q_norm" => "attn_q_norm.weight",
            "k_norm" => "attn_k_norm.weight",
            "o" => "attn_output.weight",
            "ffn_norm" => "ffn_norm.weight",
            "gate" => "ffn_gate.weight",
            "up" => "ffn_up.weight",
            "down" => "ffn_down.weight",
            _ => unreachable!(),
        };
        match self {
            Naming::Gguf => format!("blk.{i}.{gguf}"),
            Naming::HuggingFace => format!("model.layers.{i}.{hf}"),
        }
    }
}

#[derive(Debug)]
struct Layer {
    attn_norm: Vec<f32>,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    bias: Option<[Vec<f32>; 3]>,
    /// Per-head RMSNorm weights of Q and K (`head_dim` each).
    qk_norm: Option<[Vec<f32>; 2]>,
    wo: Tensor,
    ffn_norm: Vec<f32>,
    ffn: Ffn,
}

/// A layer's feed-forward block.
#[derive(Debug)]
enum Ffn {
    /// SwiGLU: `(silu(h·Wg) * h·Wu)·Wd`.
    Dense {
        gate: Tensor,
        up: Tensor,
        down: Tensor,
    },
    /// Routed experts ([`crate::moe`]).
    Moe(MoeFfn),
}

impl Ffn {
    fn matrices_mut(&mut self) -> Vec<&mut Tensor> {
        match self {
            Ffn::Dense { gate, up, down } => vec![gate, up, down],
            Ffn::Moe(m) => m.matrices_mut().collect(),
        }
    }

    /// Bytes one token's pass reads.
    fn active_bytes(&self) -> usize {
        match self {
            Ffn::Dense { gate, up, down } => [gate, up, down].iter().map(|t| t.data().len()).sum(),
            Ffn::Moe(m) => m.active_bytes(),
        }
    }
}

/// Consecutive tokens of one sequence whose attention runs as one tile.
const ATTN_TILE: usize = 8;

/// Elements from which an elementwise op is worth a parallel region
/// (about half a microsecond to start): SiLU pays an `exp` per element, so
/// even one decode token's FFN width qualifies; additions and norms only
/// pay off over a prefill chunk.
const PAR_SILU: usize = 1024;
const PAR_ADD: usize = 16384;

/// `op(a, b)` over matching pieces of `a` and `b`, split across the pool
/// when `a` has at least `min` elements (same arithmetic either way).
fn par_elementwise(
    a: &mut [f32],
    b: &[f32],
    threads: Threads,
    min: usize,
    op: fn(&mut [f32], &[f32]),
) {
    if a.len() < min {
        return op(a, b);
    }
    par_chunks(a, 64, threads, |i0, piece| {
        op(piece, &b[i0 * 64..i0 * 64 + piece.len()])
    });
}

/// RMSNorm of each `dim`-wide row of `x` into `out`, rows split across the
/// pool for prefill chunks.
fn norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32], dim: usize, threads: Threads) {
    let t = if out.len() >= PAR_ADD {
        threads
    } else {
        Threads::ONE
    };
    par_chunks(out, dim, t, |r0, piece| {
        for (o, i) in piece
            .chunks_exact_mut(dim)
            .zip(x[r0 * dim..].chunks_exact(dim))
        {
            rms_norm(i, w, eps, o);
        }
    });
}

/// Multiplies `x` by `k` (a no-op for the usual 1).
fn scale_rows(x: &mut [f32], k: f32) {
    if k != 1.0 {
        x.iter_mut().for_each(|v| *v *= k);
    }
}

/// RMSNorm of every `hd`-wide head of the rows of `x`, in place.
fn norm_heads(x: &mut [f32], w: &[f32], eps: f32, hd: usize) {
    let mut tmp = vec![0.0; hd];
    for head in x.chunks_exact_mut(hd) {
        tmp.copy_from_slice(head);
        rms_norm(&tmp, w, eps, head);
    }
}

thread_local! {
    /// Attention scores and the gathered queries of the tile in flight on
    /// this thread (grown, never shrunk).
    static ATTN_BUF: std::cell::RefCell<(Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// A loaded Llama-family model. Weights stay in their mapped files.
#[derive(Debug)]
pub struct Model {
    pub config: Config,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    output: Tensor,
    pub tied_embeddings: bool,
    rope: Rope,
}

/// One sequence's part of a batch.
#[derive(Debug, Clone, Copy)]
pub struct SeqBatch<'a> {
    /// New tokens, at positions `start_pos..start_pos + tokens.len()`.
    pub tokens: &'a [u32],
    pub start_pos: usize,
    /// KV blocks holding positions `0..`; must cover every new position.
    pub block_table: &'a [u32],
    /// Whether to compute logits for the last new token.
    pub want_logits: bool,
}

/// Activations for up to `max_tokens` tokens per forward call, allocated once.
#[derive(Debug)]
pub struct Scratch {
    max_tokens: usize,
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    /// Attention output laid out [head][token][head_dim].
    att_t: Vec<f32>,
    proj: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    last: Vec<f32>,
    logits: Vec<f32>,
    /// (sequence index, position) of each stacked token.
    tok: Vec<(usize, usize)>,
    moe: Option<MoeScratch>,
}

impl Scratch {
    pub fn new(c: &Config, max_tokens: usize, max_seqs: usize) -> Self {
        let t = max_tokens;
        Scratch {
            max_tokens,
            x: vec![0.0; t * c.dim],
            h: vec![0.0; t * c.dim],
            q: vec![0.0; t * c.q_dim()],
            k: vec![0.0; t * c.kv_dim()],
            v: vec![0.0; t * c.kv_dim()],
            att: vec![0.0; t * c.q_dim()],
            att_t: vec![0.0; t * c.q_dim()],
            proj: vec![0.0; t * c.dim],
            gate: vec![0.0; t * c.ffn_dim],
            up: vec![0.0; t * c.ffn_dim],
            last: vec![0.0; max_seqs * c.dim],
            logits: vec![0.0; max_seqs * c.vocab_size],
            tok: Vec::with_capacity(t),
            moe: c.moe.as_ref().map(|m| MoeScratch::new(c, m, t)),
        }
    }
}

impl Model {
    /// Builds the model from `src`, checking every tensor's shape.
    pub fn load(src: &dyn TensorSource, config: Config, naming: Naming) -> Result<Self> {
        let c = &config;
        let (dim, qd, kvd, ffn) = (c.dim, c.q_dim(), c.kv_dim(), c.ffn_dim);
        let vec_f32 = |name: &str, len: usize| src.get_shaped(name, &[len])?.to_f32();
        let embed = src.get_shaped(naming.global("embed"), &[dim, c.vocab_size])?;
        let (output, tied) = match src.find(naming.global("output")) {
            Some(_) => (
                src.get_shaped(naming.global("output"), &[dim, c.vocab_size])?,
                false,
            ),
            None => (embed.clone(), true),
        };
        let mut layers = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let l = |p: &str| naming.layer(i, p);
            let bias = if c.qkv_bias {
                Some([
                    vec_f32(&l("q_bias"), qd)?,
                    vec_f32(&l("k_bias"), kvd)?,
                    vec_f32(&l("v_bias"), kvd)?,
                ])
            } else {
                None
            };
            let qk_norm = if c.qk_norm {
                Some([
                    vec_f32(&l("q_norm"), c.head_dim)?,
                    vec_f32(&l("k_norm"), c.head_dim)?,
                ])
            } else {
                None
            };
            layers.push(Layer {
                qk_norm,
                attn_norm: vec_f32(&l("attn_norm"), dim)?,
                wq: src.get_shaped(&l("q"), &[dim, qd])?,
                wk: src.get_shaped(&l("k"), &[dim, kvd])?,
                wv: src.get_shaped(&l("v"), &[dim, kvd])?,
                bias,
                wo: src.get_shaped(&l("o"), &[qd, dim])?,
                ffn_norm: vec_f32(&l("ffn_norm"), dim)?,
                ffn: match c.moe {
                    Some(m) => Ffn::Moe(MoeFfn::load(src, naming, i, c, m)?),
                    None => Ffn::Dense {
                        gate: src.get_shaped(&l("gate"), &[dim, ffn])?,
                        up: src.get_shaped(&l("up"), &[dim, ffn])?,
                        down: src.get_shaped(&l("down"), &[ffn, dim])?,
                    },
                },
            });
        }
        let mut config = config;
        if naming == Naming::Gguf && matches!(config.arch, Arch::Llama | Arch::Mixtral) {
            if let Some(t) = src.find("rope_freqs.weight") {
                config.rope_freq_factors =
                    Some(src.get_shaped(&t.name, &[config.head_dim / 2])?.to_f32()?);
            }
        }
        let rope = Rope::new(
            config.rope_style,
            config.head_dim,
            config.rope_base,
            config.rope_freq_scale,
            config.rope_freq_factors.as_deref(),
        );
        let norm = vec_f32(naming.global("norm"), dim)?;
        // Interleaved copies for the fast kernels; HASTEN_REPACK=0 keeps the
        // file layout (for comparisons).
        let mut output = output;
        if std::env::var("HASTEN_REPACK").map_or(true, |v| v != "0") {
            output.pack();
            // Repacking reads every weight once: spread the layers over the cores.
            hasten_kernels::threads::par_chunks(&mut layers, 1, Threads::available(), |_, ls| {
                for l in ls {
                    for t in [&mut l.wq, &mut l.wk, &mut l.wv, &mut l.wo] {
                        t.pack();
                    }
                    for t in l.ffn.matrices_mut() {
                        t.pack();
                    }
                }
            });
        }
        Ok(Model {
            config,
            embed,
            layers,
            norm,
            output,
            tied_embeddings: tied,
            rope,
        })
    }

    /// Bytes of weights one token's forward pass reads (every matrix once;
    /// of a mixture, the router and `top_k` experts).
    pub fn weight_bytes(&self) -> usize {
        let per_layer = |l: &Layer| {
            [&l.wq, &l.wk, &l.wv, &l.wo]
                .iter()
                .map(|t| t.data().len())
                .sum::<usize>()
                + l.ffn.active_bytes()
        };
        self.layers.iter().map(per_layer).sum::<usize>() + self.output.data().len()
    }

    fn check_batch(&self, batch: &[SeqBatch<'_>], kv: &KvCache, s: &Scratch) -> Result<()> {
        let total: usize = batch.iter().map(|b| b.tokens.len()).sum();
        if total > s.max_tokens {
            return Err(Error::Batch(format!(
                "{total} tokens exceed the scratch capacity of {}",
                s.max_tokens
            )));
        }
        let n_logits = batch.iter().filter(|b| b.want_logits).count();
        if n_logits * self.config.dim > s.last.len() {
            return Err(Error::Batch(format!(
                "{n_logits} logit rows exceed the scratch capacity"
            )));
        }
        for b in batch {
            let end = b.start_pos + b.tokens.len();
            if end > self.config.context_length {
                return Err(Error::ContextOverflow {
                    needed: end,
                    max: self.config.context_length,
                });
            }
            if b.block_table.len() * kv.block_size < end
                || b.block_table.iter().any(|&blk| blk as usize >= kv.n_blocks)
            {
                return Err(Error::Batch(format!(
                    "block table {:?} does not cover {end} positions in a pool of {} blocks",
                    b.block_table, kv.n_blocks
                )));
            }
            if b.want_logits && b.tokens.is_empty() {
                return Err(Error::Batch(
                    "logits requested for a sequence with no new tokens".into(),
                ));
            }
            if let Some(&t) = b
                .tokens
                .iter()
                .find(|&&t| t as usize >= self.config.vocab_size)
            {
                return Err(Error::Batch(format!(
                    "token id {t} is outside the vocabulary of {}",
                    self.config.vocab_size
                )));
            }
        }
        Ok(())
    }

    /// Runs the batch, filling the KV cache for every new token, and returns
    /// logits `[n, vocab]` for the sequences with `want_logits`, in order.
    pub fn forward<'s>(
        &self,
        batch: &[SeqBatch<'_>],
        kv: &mut KvCache,
        s: &'s mut Scratch,
        threads: Threads,
    ) -> Result<&'s [f32]> {
        self.check_batch(batch, kv, s)?;
        let c = &self.config;
        let (dim, qd, kvd, ffn, hd) = (c.dim, c.q_dim(), c.kv_dim(), c.ffn_dim, c.head_dim);
        s.tok.clear();
        for (i, b) in batch.iter().enumerate() {
            s.tok
                .extend((0..b.tokens.len()).map(|j| (i, b.start_pos + j)));
        }
        let t = s.tok.len();
        let embed = self.embed.matrix()?;
        let tokens = batch.iter().flat_map(|b| b.tokens.iter());
        let sc = c.scales;
        for (row, &tok) in s.x.chunks_exact_mut(dim).zip(tokens) {
            embed.dequantize_row(tok as usize, row)?;
            if sc.embedding != 1.0 {
                row.iter_mut().for_each(|v| *v *= sc.embedding);
            }
        }
        let x = &mut s.x[..t * dim];
        let scale = sc.attention.unwrap_or(1.0 / (hd as f32).sqrt());
        for (li, layer) in self.layers.iter().enumerate() {
            // Attention.
            let h = &mut s.h[..t * dim];
            norm_rows(x, &layer.attn_norm, c.norm_eps, h, dim, threads);
            let (q, k, v) = (&mut s.q[..t * qd], &mut s.k[..t * kvd], &mut s.v[..t * kvd]);
            matmul(&layer.wq.matrix()?, h, q, threads)?;
            matmul(&layer.wk.matrix()?, h, k, threads)?;
            matmul(&layer.wv.matrix()?, h, v, threads)?;
            if let Some([bq, bk, bv]) = &layer.bias {
                q.chunks_exact_mut(qd).for_each(|r| add_assign(r, bq));
                k.chunks_exact_mut(kvd).for_each(|r| add_assign(r, bk));
                v.chunks_exact_mut(kvd).for_each(|r| add_assign(r, bv));
            }
            if let Some([nq, nk]) = &layer.qk_norm {
                norm_heads(q, nq, c.norm_eps, hd);
                norm_heads(k, nk, c.norm_eps, hd);
            }
            let nope = c.no_rope.get(li).copied().unwrap_or(false);
            for (j, &(seq, pos)) in s.tok.iter().enumerate() {
                if !nope {
                    self.rope.apply(&mut q[j * qd..(j + 1) * qd], hd, pos);
                    self.rope.apply(&mut k[j * kvd..(j + 1) * kvd], hd, pos);
                }
                let table = batch[seq].block_table;
                let slot =
                    table[pos / kv.block_size] as usize * kv.block_size + pos % kv.block_size;
                kv.store(
                    li,
                    slot,
                    &k[j * kvd..(j + 1) * kvd],
                    &v[j * kvd..(j + 1) * kvd],
                );
            }
            let paged = kv.layer(li);
            let tok = &s.tok;
            let q = &*q;
            let (n_kv, group) = (c.n_kv_heads, c.n_heads / c.n_kv_heads);
            // One work item per (KV head, token), KV heads outermost: each
            // contiguous piece mixes short and long contexts, balancing the
            // threads during prefill. Inside a piece, runs of up to
            // ATTN_TILE consecutive tokens of one sequence form a tile whose
            // K/V rows are read once for all its tokens and query heads.
            // `att_t` is [kv head][token][group][head_dim].
            let gq = group * hd;
            par_chunks(&mut s.att_t[..t * qd], gq, threads, |first, piece| {
                ATTN_BUF.with(|buf| {
                    let (sc, qt) = &mut *buf.borrow_mut();
                    let items = piece.len() / gq;
                    let mut i = 0;
                    while i < items {
                        let (kvh, j) = ((first + i) / t, (first + i) % t);
                        let (seq, pos) = tok[j];
                        let mut n = 1;
                        while n < ATTN_TILE
                            && i + n < items
                            && j + n < t
                            && tok[j + n] == (seq, pos + n)
                        {
                            n += 1;
                        }
                        qt.clear();
                        for tj in j..j + n {
                            let at = tj * qd + kvh * gq;
                            qt.extend_from_slice(&q[at..at + gq]);
                        }
                        let need = tile_scores_len(n, group, pos + 1);
                        if sc.len() < need {
                            sc.resize(need, 0.0);
                        }
                        let view = HeadView {
                            kv: paged,
                            table: batch[seq].block_table,
                            kvh,
                            scale,
                        };
                        let out = &mut piece[i * gq..(i + n) * gq];
                        attend_tile(&view, qt, n, pos + 1, &mut sc[..need], out);
                        i += n;
                    }
                })
            });
            for kvh in 0..n_kv {
                for j in 0..t {
                    let src = (kvh * t + j) * group * hd;
                    let dst = j * qd + kvh * group * hd;
                    s.att[dst..dst + group * hd].copy_from_slice(&s.att_t[src..src + group * hd]);
                }
            }
            let proj = &mut s.proj[..t * dim];
            matmul(&layer.wo.matrix()?, &s.att[..t * qd], proj, threads)?;
            scale_rows(proj, sc.residual);
            par_elementwise(x, proj, threads, PAR_ADD, add_assign);
            // Feed-forward.
            norm_rows(x, &layer.ffn_norm, c.norm_eps, h, dim, threads);
            match &layer.ffn {
                Ffn::Dense {
                    gate: wg,
                    up: wu,
                    down: wd,
                } => {
                    let (gate, up) = (&mut s.gate[..t * ffn], &mut s.up[..t * ffn]);
                    matmul(&wg.matrix()?, h, gate, threads)?;
                    matmul(&wu.matrix()?, h, up, threads)?;
                    par_elementwise(gate, up, threads, PAR_SILU, silu_mul);
                    matmul(&wd.matrix()?, gate, proj, threads)?;
                }
                Ffn::Moe(m) => {
                    let ms = s.moe.as_mut().ok_or_else(|| {
                        Error::Batch("scratch made for a model without experts".into())
                    })?;
                    m.forward(h, proj, dim, ms, threads)?;
                }
            }
            scale_rows(proj, sc.residual);
            par_elementwise(x, proj, threads, PAR_ADD, add_assign);
        }
        // Logits for the last new token of each sequence that wants them.
        let mut n = 0;
        let mut end = 0;
        for b in batch {
            end += b.tokens.len();
            if b.want_logits {
                rms_norm(
                    &x[(end - 1) * dim..end * dim],
                    &self.norm,
                    c.norm_eps,
                    &mut s.last[n * dim..(n + 1) * dim],
                );
                n += 1;
            }
        }
        let logits = &mut s.logits[..n * c.vocab_size];
        if n > 0 {
            matmul(&self.output.matrix()?, &s.last[..n * dim], logits, threads)?;
            scale_rows(logits, 1.0 / sc.logit);
        }
        Ok(logits)
    }
}
