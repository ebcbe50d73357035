//! The decoder forward pass over a batch of sequences, for every family.
//!
//! One call processes any mix of prefill chunks and decode steps: every
//! sequence brings its new tokens, the position of the first one, and the
//! block table of its KV cache. The tokens of all sequences are stacked into
//! one activation matrix so each weight matrix is read once per call.
//!
//! ```text
//! x = embed[tokens] * embedding scale                  (T, dim)
//! for each layer:
//!     h = norm(x) ; q,k,v = h·Wq, h·Wk, h·Wv (+bias)     (T, q_dim), (T, kv_dim)
//!     (Q/K norm per head or over all heads)
//!     rope(q, k) at each token's position (the layer's RoPE, or none);
//!     store k, v in the paged cache
//!     a = attention(q, cache, the layer's window, soft cap)
//!     x += post_norm(a·Wo) * residual scale                (T, dim)
//!     h = norm(x) ; x += post_norm(act(h·Wg) * h·Wu)·Wd    (T, ffn) -> (T, dim)
//!         (or a routed mixture of experts, see `crate::moe`)
//! logits = norm(x[last of each sequence]) · Wout / logit scale, soft-capped
//! ```
//!
//! Where each norm sits, which activation, Q/K norm, windows, RoPE
//! variants and multipliers come from the [`Config`], resolved per layer
//! into a [`LayerSpec`] at load: the loop below names no model family.

mod probe;
pub use probe::elementwise_seconds;

use crate::config::{Act, Config, Norms, QkNorm};
use crate::kv::KvCache;
use crate::moe::{MoeFfn, MoeScratch};
pub use crate::naming::Naming;
use crate::weights::{Tensor, TensorSource};
use crate::{Error, Result};
use hasten_kernels::attention::{attend_tile, tile_scores_len, HeadView};
use hasten_kernels::attention_split::{attend_item_cut, attend_items_split, span_for, Item};
use hasten_kernels::matmul::matmul;
use hasten_kernels::ops::{add_assign, gelu_mul, rms_norm, silu_mul, softcap, Rope};
use hasten_kernels::threads::{par_chunks, Threads};

#[derive(Debug)]
struct Layer {
    /// Pre-attention norm (absent where norms come after, OLMo 2).
    attn_norm: Option<Vec<f32>>,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    bias: Option<[Vec<f32>; 3]>,
    /// RMSNorm weights of Q and K (per head: `head_dim` each; over all
    /// heads: `q_dim` and `kv_dim`).
    qk_norm: Option<[Vec<f32>; 2]>,
    wo: Tensor,
    attn_post_norm: Option<Vec<f32>>,
    ffn_norm: Option<Vec<f32>>,
    ffn_post_norm: Option<Vec<f32>>,
    ffn: Ffn,
    spec: LayerSpec,
}

/// What varies between the layers of one model, resolved at load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerSpec {
    /// Which of the model's RoPE tables rotates Q and K (`None`: NoPE).
    rope: Option<usize>,
    /// Sliding-window width, if the layer is local.
    window: Option<usize>,
}

/// A layer's feed-forward block.
#[derive(Debug)]
enum Ffn {
    /// Gated: `(act(h·Wg) * h·Wu)·Wd`.
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

/// Layer `i`'s weights and spec. `norm` reads an RMSNorm weight vector.
fn load_layer(
    src: &dyn TensorSource,
    c: &Config,
    naming: Naming,
    i: usize,
    norm: &dyn Fn(&str, usize) -> Result<Vec<f32>>,
) -> Result<Layer> {
    let (dim, qd, kvd, ffn) = (c.dim, c.q_dim(), c.kv_dim(), c.ffn_dim);
    let l = |p: &str| naming.layer(i, p);
    let vec_f32 = |name: &str, len: usize| src.get_shaped(name, &[len])?.to_f32();
    let bias = if c.qkv_bias {
        Some([
            vec_f32(&l("q_bias"), qd)?,
            vec_f32(&l("k_bias"), kvd)?,
            vec_f32(&l("v_bias"), kvd)?,
        ])
    } else {
        None
    };
    let qk_norm = match c.qk_norm {
        QkNorm::None => None,
        QkNorm::PerHead => Some([
            norm(&l("q_norm"), c.head_dim)?,
            norm(&l("k_norm"), c.head_dim)?,
        ]),
        QkNorm::Full => Some([norm(&l("q_norm"), qd)?, norm(&l("k_norm"), kvd)?]),
    };
    // Phi-3 fuses Q, K and V into one matrix: three row ranges of it.
    let [wq, wk, wv] = match src.find(&l("qkv")) {
        Some(_) => {
            let t = src.get_shaped(&l("qkv"), &[dim, qd + 2 * kvd])?;
            [
                t.slice_rows(0, qd, "q")?,
                t.slice_rows(qd, kvd, "k")?,
                t.slice_rows(qd + kvd, kvd, "v")?,
            ]
        }
        None => [
            src.get_shaped(&l("q"), &[dim, qd])?,
            src.get_shaped(&l("k"), &[dim, kvd])?,
            src.get_shaped(&l("v"), &[dim, kvd])?,
        ],
    };
    let (attn_norm, ffn_norm, attn_post_norm, ffn_post_norm) = match c.norms {
        Norms::Pre => (Some(l("attn_norm")), Some(l("ffn_norm")), None, None),
        Norms::Sandwich => (
            Some(l("attn_norm")),
            Some(l("pre_ffn_norm")),
            Some(l("attn_post_norm")),
            Some(l("ffn_post_norm")),
        ),
        Norms::Post => (
            None,
            None,
            Some(l("attn_post_norm")),
            Some(l("ffn_post_norm")),
        ),
    };
    let opt_norm = |name: Option<String>| name.map(|n| norm(&n, dim)).transpose();
    let ffn = match c.moe {
        Some(m) => Ffn::Moe(MoeFfn::load(src, naming, i, c, m)?),
        // Phi-3 fuses gate and up: the gate is the first half of the rows.
        None if src.find(&l("gate")).is_none() && src.find(&l("gate_up")).is_some() => {
            let t = src.get_shaped(&l("gate_up"), &[dim, 2 * ffn])?;
            Ffn::Dense {
                gate: t.slice_rows(0, ffn, "gate")?,
                up: t.slice_rows(ffn, ffn, "up")?,
                down: src.get_shaped(&l("down"), &[ffn, dim])?,
            }
        }
        None => Ffn::Dense {
            gate: src.get_shaped(&l("gate"), &[dim, ffn])?,
            up: src.get_shaped(&l("up"), &[dim, ffn])?,
            down: src.get_shaped(&l("down"), &[ffn, dim])?,
        },
    };
    let local = c.swa.as_ref().filter(|w| w.layers[i]);
    let spec = LayerSpec {
        rope: match (c.no_rope.get(i).copied().unwrap_or(false), local) {
            (true, _) => None,
            (false, Some(_)) => Some(1),
            (false, None) => Some(0),
        },
        window: local.map(|w| w.window),
    };
    Ok(Layer {
        attn_norm: opt_norm(attn_norm)?,
        wq,
        wk,
        wv,
        bias,
        qk_norm,
        wo: src.get_shaped(&l("o"), &[qd, dim])?,
        attn_post_norm: opt_norm(attn_post_norm)?,
        ffn_norm: opt_norm(ffn_norm)?,
        ffn_post_norm: opt_norm(ffn_post_norm)?,
        ffn,
        spec,
    })
}

/// Frequency factors GGUF files carry as tensors: Llama 3's
/// `rope_freqs.weight`, or Phi-3's LongRoPE pair (the long factors once
/// the context exceeds the original one, as llama.cpp chooses).
fn load_rope_factors(src: &dyn TensorSource, config: &mut Config, naming: Naming) -> Result<()> {
    if naming != Naming::Gguf {
        return Ok(());
    }
    let pairs = config.rope_dims / 2;
    let name = match config.rope_orig_context {
        Some(orig) if config.context_length > orig => "rope_factors_long.weight",
        _ if src.find("rope_factors_short.weight").is_some() => "rope_factors_short.weight",
        _ => "rope_freqs.weight",
    };
    if src.find(name).is_some() {
        config.rope_freq_factors = Some(src.get_shaped(name, &[pairs])?.to_f32()?);
    }
    Ok(())
}

/// The global RoPE table and, for sliding-window layers, the local one
/// (without YaRN: the local layers of the families that have both keep
/// their plain RoPE).
fn rope_tables(c: &Config) -> Vec<Rope> {
    let global = Rope::with_yarn(
        c.rope_style,
        c.rope_dims,
        c.rope_base,
        c.rope_freq_scale,
        c.rope_freq_factors.as_deref(),
        c.rope_yarn,
    )
    .with_mscale(c.rope_attn_factor);
    let local = c.swa.as_ref().map_or_else(
        || global.clone(),
        |w| {
            Rope::new(
                c.rope_style,
                c.rope_dims,
                w.rope_base,
                w.rope_freq_scale,
                c.rope_freq_factors.as_deref(),
            )
            .with_mscale(c.rope_attn_factor)
        },
    );
    vec![global, local]
}

thread_local! {
    /// Attention scores and the gathered queries of the tile in flight on
    /// this thread (grown, never shrunk).
    static ATTN_BUF: std::cell::RefCell<(Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Parallel regions per layer of a decode step (norm, Q/K/V, attention,
/// output projection, FFN), each a hand-off to the thread pool and a wait.
pub const DECODE_REGIONS_PER_LAYER: usize = 8;

/// Parallel regions one decode step of a dense `n_layers` model starts
/// (the layers' and the output projection's), what `hasten estimate
/// --measure` multiplies by the pool's hand-off time for its fixed cost
/// per step (a test counts them).
pub fn decode_regions(n_layers: usize) -> usize {
    n_layers * DECODE_REGIONS_PER_LAYER + 1
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
    /// The global RoPE, then (for sliding-window layers with their own
    /// base) the local one.
    ropes: Vec<Rope>,
}

/// One sequence's part of a batch.
#[derive(Debug, Clone, Copy)]
pub struct SeqBatch<'a> {
    /// New tokens, at positions `start_pos..start_pos + tokens.len()`.
    pub tokens: &'a [u32],
    pub start_pos: usize,
    /// KV blocks holding positions `0..`; must cover every new position.
    pub block_table: &'a [u32],
    /// With a windowed KV cache ([`KvCache::windowed`]), the blocks of the
    /// sliding-window layers' pool, indexed by position as `block_table`;
    /// entries before a query's window are never read (any id in the
    /// pool). Empty otherwise.
    pub local_table: &'a [u32],
    /// Compute logits for this many of the last new tokens (0: none; 1:
    /// the next-token distribution; k+1: also each of k drafted tokens',
    /// for speculative verification).
    pub logits: usize,
}

impl<'a> SeqBatch<'a> {
    /// The block table of a windowed layer (`local`) or of the others.
    fn table(&self, local: bool) -> &'a [u32] {
        if local {
            self.local_table
        } else {
            self.block_table
        }
    }
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
    /// Each RoPE table's angles for every stacked token (`[rope][token][pair]`),
    /// taken once per forward pass for all layers.
    angles: Vec<(f32, f32)>,
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
            angles: Vec::new(),
            moe: c.moe.as_ref().map(|m| MoeScratch::new(c, m, t)),
        }
    }
}

impl Model {
    /// Builds the model from `src`, checking every tensor's shape.
    pub fn load(src: &dyn TensorSource, config: Config, naming: Naming) -> Result<Self> {
        let mut config = config;
        let c = &config;
        let dim = c.dim;
        // Gemma's Hugging Face norms hold `w - 1`.
        let offset = if naming == Naming::HuggingFace && c.arch.family().hf_norm_offset {
            1.0
        } else {
            0.0
        };
        let vec_f32 = |name: &str, len: usize| src.get_shaped(name, &[len])?.to_f32();
        let norm = |name: &str, len: usize| -> Result<Vec<f32>> {
            Ok(vec_f32(name, len)?
                .into_iter()
                .map(|w| w + offset)
                .collect())
        };
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
            layers.push(load_layer(src, c, naming, i, &norm)?);
        }
        load_rope_factors(src, &mut config, naming)?;
        let ropes = rope_tables(&config);
        let norm = norm(naming.global("norm"), dim)?;
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
            ropes,
        })
    }

    /// A stable identity of this model's weights and configuration, for
    /// keying what is derived from them on disk (the prefix cache's disk
    /// tier): a hash of the configuration, the final norm and samples of
    /// the embedding and of every layer's attention output matrix. The same
    /// file gives the same value across runs; another model, a fine-tune or
    /// another quantization gives another.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        format!("{:?}", self.config).hash(&mut h);
        for w in &self.norm {
            w.to_bits().hash(&mut h);
        }
        let sample = |h: &mut std::collections::hash_map::DefaultHasher, t: &Tensor| {
            let d = t.data();
            let n = d.len().min(4096);
            let mid = d.len() / 2 - (d.len() / 2).min(n / 2);
            d[..n].hash(h);
            d[mid..mid + n.min(d.len() - mid)].hash(h);
            d[d.len() - n..].hash(h);
        };
        sample(&mut h, &self.embed);
        for l in &self.layers {
            sample(&mut h, &l.wo);
        }
        h.finish()
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
        let n_logits: usize = batch.iter().map(|b| b.logits).sum();
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
            let tables = [
                Some((b.block_table, kv.n_blocks)),
                kv.local_blocks.map(|n| (b.local_table, n)),
            ];
            for (table, n_blocks) in tables.into_iter().flatten() {
                if table.len() * kv.block_size < end
                    || table.iter().any(|&blk| blk as usize >= n_blocks)
                {
                    return Err(Error::Batch(format!(
                        "block table {table:?} does not cover {end} positions in a pool of {n_blocks} blocks",
                    )));
                }
            }
            if b.logits > b.tokens.len() {
                return Err(Error::Batch(format!(
                    "logits requested for {} positions of a sequence with {} new tokens",
                    b.logits,
                    b.tokens.len()
                )));
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
    /// logits `[n, vocab]`: each sequence's `logits` last positions, in
    /// order.
    pub fn forward<'s>(
        &self,
        batch: &[SeqBatch<'_>],
        kv: &mut KvCache,
        s: &'s mut Scratch,
        threads: Threads,
    ) -> Result<&'s [f32]> {
        self.check_batch(batch, kv, s)?;
        let c = &self.config;
        let dim = c.dim;
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
            scale_rows(row, sc.embedding);
        }
        self.layers_of(batch, kv, s, threads)?;
        // Logits for the last `logits` new tokens of each sequence.
        let x = &s.x[..t * dim];
        let mut n = 0;
        let mut end = 0;
        for b in batch {
            end += b.tokens.len();
            for p in end - b.logits..end {
                rms_norm(
                    &x[p * dim..(p + 1) * dim],
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
            if let Some(cap) = sc.final_softcap {
                softcap(logits, cap);
            }
        }
        Ok(logits)
    }

    /// Every layer over the batch's new tokens, whose embeddings are in
    /// `s.x` (and the token positions in `s.tok`).
    fn layers_of(
        &self,
        batch: &[SeqBatch<'_>],
        kv: &mut KvCache,
        s: &mut Scratch,
        threads: Threads,
    ) -> Result<()> {
        let t = s.tok.len();
        s.angles.clear();
        let rt = per_token_threads(t, threads);
        for rope in &self.ropes {
            let (at, pairs) = (s.angles.len(), rope.pairs());
            s.angles.resize(at + t * pairs, (0.0, 0.0));
            let tok = &s.tok;
            par_chunks(&mut s.angles[at..], pairs, rt, |first, piece| {
                for (j, a) in piece.chunks_exact_mut(pairs.max(1)).enumerate() {
                    rope.angles(tok[first + j].1, a);
                }
            });
        }
        for (li, layer) in self.layers.iter().enumerate() {
            self.attention(li, layer, batch, kv, s, threads)?;
            self.feed_forward(layer, t, s, threads)?;
        }
        Ok(())
    }

    /// As [`Self::forward`], but returns every new token's final hidden
    /// state (after the output norm), `[t, dim]`, instead of logits: what
    /// embeddings pool.
    pub fn hidden_states<'s>(
        &self,
        batch: &[SeqBatch<'_>],
        kv: &mut KvCache,
        s: &'s mut Scratch,
        threads: Threads,
    ) -> Result<&'s [f32]> {
        let zero: Vec<SeqBatch<'_>> = batch.iter().map(|b| SeqBatch { logits: 0, ..*b }).collect();
        self.forward(&zero, kv, s, threads)?;
        let dim = self.config.dim;
        let t = s.tok.len();
        for r in 0..t {
            let (x, h) = (
                &s.x[r * dim..(r + 1) * dim],
                &mut s.h[r * dim..(r + 1) * dim],
            );
            rms_norm(x, &self.norm, self.config.norm_eps, h);
        }
        Ok(&s.h[..t * dim])
    }

    /// Layer `li`'s attention block: `x += post_norm(attention(norm(x)))`.
    fn attention(
        &self,
        li: usize,
        layer: &Layer,
        batch: &[SeqBatch<'_>],
        kv: &mut KvCache,
        s: &mut Scratch,
        threads: Threads,
    ) -> Result<()> {
        let c = &self.config;
        let (dim, qd, kvd, hd) = (c.dim, c.q_dim(), c.kv_dim(), c.head_dim);
        let t = s.tok.len();
        let x = &mut s.x[..t * dim];
        let h = &mut s.h[..t * dim];
        let input: &[f32] = match &layer.attn_norm {
            Some(w) => {
                norm_rows(x, w, c.norm_eps, h, dim, threads);
                h
            }
            None => x,
        };
        let (q, k, v) = (&mut s.q[..t * qd], &mut s.k[..t * kvd], &mut s.v[..t * kvd]);
        matmul(&layer.wq.matrix()?, input, q, threads)?;
        matmul(&layer.wk.matrix()?, input, k, threads)?;
        matmul(&layer.wv.matrix()?, input, v, threads)?;
        if let Some([bq, bk, bv]) = &layer.bias {
            q.chunks_exact_mut(qd).for_each(|r| add_assign(r, bq));
            k.chunks_exact_mut(kvd).for_each(|r| add_assign(r, bk));
            v.chunks_exact_mut(kvd).for_each(|r| add_assign(r, bv));
        }
        if let Some([nq, nk]) = &layer.qk_norm {
            // Per head, or (OLMo 2) the weights span every head: one row.
            norm_heads(q, nq, c.norm_eps, nq.len());
            norm_heads(k, nk, c.norm_eps, nk.len());
        }
        if let Some(r) = layer.spec.rope {
            let rope = &self.ropes[r];
            let at: usize = self.ropes[..r].iter().map(|r| t * r.pairs()).sum();
            let angles = &s.angles[at..at + t * rope.pairs()];
            rope_rows(rope, q, qd, hd, angles, threads);
            rope_rows(rope, k, kvd, hd, angles, threads);
        }
        for (j, &(seq, pos)) in s.tok.iter().enumerate() {
            let table = batch[seq].table(kv.is_windowed(li));
            let slot = table[pos / kv.block_size] as usize * kv.block_size + pos % kv.block_size;
            kv.store(
                li,
                slot,
                &k[j * kvd..(j + 1) * kvd],
                &v[j * kvd..(j + 1) * kvd],
            );
        }
        let view = HeadView {
            kv: kv.layer(li),
            table: &[],
            kvh: 0,
            scale: c.scales.attention.unwrap_or(1.0 / (hd as f32).sqrt()),
            window: layer.spec.window,
            softcap: c.scales.attn_softcap,
            from: 0,
            until: usize::MAX,
        };
        let local = kv.is_windowed(li);
        attend_all(
            c,
            &view,
            local,
            batch,
            &s.tok,
            q,
            &mut s.att_t[..t * qd],
            threads,
        );
        let gq = c.n_heads / c.n_kv_heads * hd;
        gather_heads(&s.att_t[..t * qd], &mut s.att[..t * qd], qd, gq, threads);
        let proj = &mut s.proj[..t * dim];
        matmul(&layer.wo.matrix()?, &s.att[..t * qd], proj, threads)?;
        self.add_residual(layer.attn_post_norm.as_deref(), t, s, threads);
        Ok(())
    }

    /// `x += post_norm(proj) * residual scale`, `proj` the block's output.
    fn add_residual(&self, post_norm: Option<&[f32]>, t: usize, s: &mut Scratch, threads: Threads) {
        let c = &self.config;
        let dim = c.dim;
        let (x, proj, h) = (
            &mut s.x[..t * dim],
            &mut s.proj[..t * dim],
            &mut s.h[..t * dim],
        );
        let out: &mut [f32] = match post_norm {
            Some(w) => {
                norm_rows(proj, w, c.norm_eps, h, dim, threads);
                h
            }
            None => proj,
        };
        scale_rows(out, c.scales.residual);
        par_elementwise(x, out, threads, PAR_ADD, add_assign);
    }

    /// The layer's FFN block: `x += post_norm(ffn(norm(x)))`.
    fn feed_forward(
        &self,
        layer: &Layer,
        t: usize,
        s: &mut Scratch,
        threads: Threads,
    ) -> Result<()> {
        let c = &self.config;
        let (dim, ffn) = (c.dim, c.ffn_dim);
        let x = &s.x[..t * dim];
        let h = &mut s.h[..t * dim];
        let input: &[f32] = match &layer.ffn_norm {
            Some(w) => {
                norm_rows(x, w, c.norm_eps, h, dim, threads);
                h
            }
            None => x,
        };
        let proj = &mut s.proj[..t * dim];
        match &layer.ffn {
            Ffn::Dense {
                gate: wg,
                up: wu,
                down: wd,
            } => {
                let (gate, up) = (&mut s.gate[..t * ffn], &mut s.up[..t * ffn]);
                matmul(&wg.matrix()?, input, gate, threads)?;
                matmul(&wu.matrix()?, input, up, threads)?;
                let act = match c.act {
                    Act::SwiGlu => silu_mul,
                    Act::GeGlu => gelu_mul,
                };
                par_elementwise(gate, up, threads, PAR_SILU, act);
                matmul(&wd.matrix()?, gate, proj, threads)?;
            }
            Ffn::Moe(m) => {
                let ms = s.moe.as_mut().ok_or_else(|| {
                    Error::Batch("scratch made for a model without experts".into())
                })?;
                m.forward(input, proj, dim, ms, threads)?;
            }
        }
        self.add_residual(layer.ffn_post_norm.as_deref(), t, s, threads);
        Ok(())
    }
}

/// RoPE over each `width`-wide row of `x` (heads of `hd`), row `j` by
/// token `j`'s angles (`rope.pairs()` of them each in `angles`), on every
/// thread when the rows are many.
fn rope_rows(
    rope: &Rope,
    x: &mut [f32],
    width: usize,
    hd: usize,
    angles: &[(f32, f32)],
    threads: Threads,
) {
    let pairs = rope.pairs();
    let rt = per_token_threads(x.len() / width.max(1), threads);
    par_chunks(x, width, rt, |first, piece| {
        for (j, row) in piece.chunks_exact_mut(width).enumerate() {
            let tok = first + j;
            rope.rotate(row, hd, &angles[tok * pairs..(tok + 1) * pairs]);
        }
    });
}

/// The attention output back to token-major rows (`att`, `[token][q_dim]`)
/// from `att_t`'s `[KV head][token][gq]` (`gq`: a KV head's query heads
/// times the head dimension), on every thread when the tokens are many.
fn gather_heads(att_t: &[f32], att: &mut [f32], qd: usize, gq: usize, threads: Threads) {
    let t = att.len() / qd;
    let n_kv = qd / gq;
    par_chunks(att, qd, per_token_threads(t, threads), |first, piece| {
        for (j, row) in piece.chunks_exact_mut(qd).enumerate() {
            for (kvh, dst) in row.chunks_exact_mut(gq).enumerate().take(n_kv) {
                let src = (kvh * t + first + j) * gq;
                dst.copy_from_slice(&att_t[src..src + gq]);
            }
        }
    });
}

/// Threads for the per-token work of `t` tokens (RoPE, the attention
/// output's reordering): a decode step's few rows are not worth a
/// hand-off to the pool.
fn per_token_threads(t: usize, threads: Threads) -> Threads {
    if t >= 32 {
        threads
    } else {
        Threads::ONE
    }
}

/// Attention of every stacked token over its sequence's cache, into
/// `att_t` laid out `[kv head][token][group][head_dim]`. `view` carries
/// the layer's cache, scale, window and soft cap (its table and KV head
/// are set per tile: the sequences' local tables where `local`).
///
/// One work item per (KV head, token), KV heads outermost: each
/// contiguous piece mixes short and long contexts, balancing the threads
/// during prefill. Inside a piece, runs of up to ATTN_TILE consecutive
/// tokens of one sequence form a tile whose K/V rows are read once for all
/// its tokens and query heads. Where the model's KV heads do not keep the
/// threads busy, every tile's context is cut at the process's span
/// ([`hasten_kernels::attention_split`]): in a step of few items (a decode
/// step) the pieces are spread over the threads, otherwise each tile's are
/// attended in turn on its thread (the same bits either way).
#[allow(clippy::too_many_arguments)]
fn attend_all(
    c: &Config,
    view: &HeadView<'_>,
    local: bool,
    batch: &[SeqBatch<'_>],
    tok: &[(usize, usize)],
    q: &[f32],
    att_t: &mut [f32],
    threads: Threads,
) {
    let (qd, hd) = (c.q_dim(), c.head_dim);
    let group = c.n_heads / c.n_kv_heads;
    let t = tok.len();
    let gq = group * hd;
    // Tokens `j..j + n` of one sequence at consecutive positions, from `j`.
    let run = |j: usize, limit: usize| {
        let (seq, pos) = tok[j];
        let mut n = 1;
        while n < ATTN_TILE && n < limit && tok[j + n] == (seq, pos + n) {
            n += 1;
        }
        n
    };
    let span = span_for(c.n_kv_heads, threads);
    let th = threads.get();
    let few = c.n_kv_heads * t < 4 * th && !(c.n_kv_heads * t).is_multiple_of(th);
    if let Some(span) = span.filter(|_| few) {
        // A decode step's few items: their pieces spread over the threads.
        // Tiles in output order (KV head, then token); their queries
        // gathered in the same order.
        let mut tiles = Vec::new();
        for kvh in 0..c.n_kv_heads {
            let mut j = 0;
            while j < t {
                let n = run(j, t - j);
                tiles.push((kvh, j, n));
                j += n;
            }
        }
        ATTN_BUF.with(|buf| {
            let qt = &mut buf.borrow_mut().1;
            qt.clear();
            for kvh in 0..c.n_kv_heads {
                for j in 0..t {
                    let at = j * qd + kvh * gq;
                    qt.extend_from_slice(&q[at..at + gq]);
                }
            }
            let item = |k: usize| {
                let (kvh, j, n) = tiles[k];
                let (seq, pos) = tok[j];
                let at = (kvh * t + j) * gq;
                Item {
                    view: HeadView {
                        table: batch[seq].table(local),
                        kvh,
                        ..*view
                    },
                    q: &qt[at..at + n * gq],
                    t: n,
                    n_ctx: pos + 1,
                }
            };
            attend_items_split(tiles.len(), group, hd, span, item, threads, att_t);
        });
        return;
    }
    par_chunks(att_t, gq, threads, |first, piece| {
        ATTN_BUF.with(|buf| {
            let (sc, qt) = &mut *buf.borrow_mut();
            let items = piece.len() / gq;
            let mut i = 0;
            while i < items {
                let (kvh, j) = ((first + i) / t, (first + i) % t);
                let (seq, pos) = tok[j];
                let n = run(j, (items - i).min(t - j));
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
                    table: batch[seq].table(local),
                    kvh,
                    ..*view
                };
                let out = &mut piece[i * gq..(i + n) * gq];
                match span {
                    // The same pieces as a spread step's, one after another.
                    Some(span) => {
                        let it = Item {
                            view,
                            q: qt,
                            t: n,
                            n_ctx: pos + 1,
                        };
                        attend_item_cut(&it, group, hd, span, out)
                    }
                    None => attend_tile(&view, qt, n, pos + 1, &mut sc[..need], out),
                }
                i += n;
            }
        })
    });
}
