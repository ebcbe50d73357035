//! hasten-estimate: latency from first principles, as pure functions (no
//! I/O). Each decoded token reads every weight and the whole KV cache once,
//! so decode is bounded below by bytes / memory bandwidth; prefill by
//! 2 × parameters × prompt tokens FLOPs / compute rate; the KV cache costs
//! 2 × layers × KV heads × head dimension × bytes per element per token.
//!
//! Modules: [`presets`] (published model and hardware dimensions); this
//! file: the model arithmetic ([`Model`]), the roofline ([`estimate`]).

pub mod presets;

use serde::Serialize;
use std::borrow::Cow;

/// A Llama-family (or GPT-3-style) transformer's dimensions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Model {
    pub name: String,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub ffn: u64,
    pub vocab: u64,
    /// Output projection shares the embedding matrix.
    pub tied: bool,
    /// Matrices per FFN: 3 for gated (SwiGLU), 2 for GPT-style.
    pub ffn_mats: u64,
    /// Mixture of experts: experts per layer and experts used per token.
    pub experts: u64,
    pub active_experts: u64,
    /// Sliding-window attention, if some layers have it.
    pub window: Option<Window>,
}

/// Sliding-window attention: `layers` of the model's layers see only the
/// last `size` positions (Gemma 2/3), so what they read per step, and
/// what hasten keeps of them, stops growing there.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Window {
    pub size: u64,
    pub layers: u64,
}

impl Model {
    fn attn_params(&self) -> u64 {
        let (h, q, kv) = (
            self.hidden,
            self.heads * self.head_dim,
            self.kv_heads * self.head_dim,
        );
        h * q + 2 * h * kv + q * h
    }

    fn ffn_params(&self) -> u64 {
        self.ffn_mats * self.hidden * self.ffn
    }

    fn embed_params(&self) -> u64 {
        self.vocab * self.hidden * if self.tied { 1 } else { 2 }
    }

    /// Every parameter (all experts), norms included.
    pub fn params(&self) -> u64 {
        let per_layer =
            self.attn_params() + self.experts.max(1) * self.ffn_params() + 2 * self.hidden;
        self.layers * per_layer + self.embed_params() + self.hidden
    }

    /// Parameters one token's forward pass multiplies by (the experts it
    /// is routed to; the input embedding is a lookup, not a matmul).
    pub fn active_params(&self) -> u64 {
        let per_layer =
            self.attn_params() + self.active_experts.max(1) * self.ffn_params() + 2 * self.hidden;
        self.layers * per_layer + self.vocab * self.hidden + self.hidden
    }

    /// The weight matrices of one layer as (rows, cols) with `cols` the
    /// input dimension: Q, K, V, O, then the FFN's (one expert's).
    pub fn layer_matrices(&self) -> Vec<(u64, u64)> {
        let (h, q, kv) = (
            self.hidden,
            self.heads * self.head_dim,
            self.kv_heads * self.head_dim,
        );
        let mut m = vec![(q, h), (kv, h), (kv, h), (h, q)];
        m.extend(std::iter::repeat_n(
            (self.ffn, h),
            self.ffn_mats as usize - 1,
        ));
        m.push((h, self.ffn));
        m
    }

    /// KV cache bytes per token: 2 (K and V) × layers × KV heads × head
    /// dimension × bytes per element.
    pub fn kv_bytes_per_token(&self, kv_bits: f64) -> f64 {
        self.layers as f64 * self.kv_bytes_per_layer_token(kv_bits)
    }

    fn kv_bytes_per_layer_token(&self, kv_bits: f64) -> f64 {
        2.0 * (self.kv_heads * self.head_dim) as f64 * kv_bits / 8.0
    }

    /// (layer, position) pairs of K and V a token at context `ctx` attends
    /// over (and hasten keeps): `ctx` per layer, at most the window in
    /// sliding-window layers.
    pub fn kv_positions(&self, ctx: f64) -> f64 {
        match self.window {
            Some(w) => {
                (self.layers - w.layers) as f64 * ctx + w.layers as f64 * ctx.min(w.size as f64)
            }
            None => self.layers as f64 * ctx,
        }
    }

    /// KV bytes of one sequence at context `ctx` (what a step reads).
    pub fn kv_bytes_at(&self, ctx: f64, kv_bits: f64) -> f64 {
        self.kv_positions(ctx) * self.kv_bytes_per_layer_token(kv_bits)
    }

    /// (layer, position) pairs attended by the prompt positions after
    /// `cached` up to `prompt` (a triangle; a band in windowed layers).
    fn prefill_positions(&self, cached: f64, prompt: f64) -> f64 {
        let tri = |a: f64, b: f64| (b * (b + 1.0) - a * (a + 1.0)) / 2.0;
        let full = tri(cached, prompt);
        match self.window {
            Some(w) => {
                let s = w.size as f64;
                // Σ min(i, s) for i in cached+1..=prompt.
                let rising = if prompt.min(s) > cached {
                    tri(cached, prompt.min(s))
                } else {
                    0.0
                };
                let flat = s * (prompt - cached.max(s)).max(0.0);
                (self.layers - w.layers) as f64 * full + w.layers as f64 * (rising + flat)
            }
            None => self.layers as f64 * full,
        }
    }
}

/// Weight or KV element formats with their exact storage cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DType {
    pub name: Cow<'static, str>,
    /// Bits per weight, block scales included (Q4_0: 18 bytes per 32).
    pub bits: f64,
}

/// The device the model runs on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hardware {
    pub name: String,
    pub memory_gb: f64,
    /// Memory read bandwidth, GB/s.
    pub bandwidth_gbs: f64,
    /// Dense f16 matmul rate, TFLOP/s (what a quantized kernel reaches on
    /// CPUs is closer to the int8 rate).
    pub tflops: f64,
    /// Dense int8 rate, TOP/s, used for the matmuls of 8-bit weights with
    /// 8-bit activations (`int8`, `fp8` formats) where the device has one.
    pub int8_tops: Option<f64>,
    /// Attention's own FLOP rate where it differs from dense matmuls
    /// (softmax and f16 cache widening make it slower on CPUs); `None`
    /// counts attention at `tflops`.
    pub attention_tflops: Option<f64>,
    /// Decode attention's rate (one query token per sequence over the
    /// cached context), where measured; `None` uses `attention_tflops`.
    pub decode_attention_tflops: Option<f64>,
    /// The last-level cache and its read bandwidth: a decode step whose
    /// weights and KV fit in it (three quarters of it, to leave room for
    /// the rest) streams them at this rate, not at `bandwidth_gbs`.
    pub llc_bytes: Option<f64>,
    pub llc_bandwidth_gbs: Option<f64>,
    /// Time every step spends apart from its bytes and FLOPs: starting
    /// and joining the thread pool's regions, norms, sampling (measured).
    pub step_fixed_s: f64,
    /// Time per prompt token per layer that prefill spends outside its
    /// matmuls and attention: norms, RoPE, KV writes, the FFN gate,
    /// residual adds (measured; 0 where unknown). Decode steps leave it
    /// out: one token's share is ~1% of a step that streams every weight.
    pub prefill_token_layer_s: f64,
    /// A CPU runs a step's parts one after another (matmuls stream the
    /// weights, then attention computes over the cache): a decode step is
    /// the sum of their times, not the larger (a GPU's roofline).
    pub serial_phases: bool,
}

impl Hardware {
    /// The rate a step that reads `working_set` bytes streams them at.
    pub fn stream_gbs(&self, working_set: f64) -> f64 {
        match (self.llc_bytes, self.llc_bandwidth_gbs) {
            (Some(llc), Some(bw)) if working_set <= 0.75 * llc => bw.max(self.bandwidth_gbs),
            _ => self.bandwidth_gbs,
        }
    }
}

/// What is asked of the model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Workload {
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// Sequences decoded together (each with this prompt and output).
    pub batch: u64,
    /// Prompt tokens already in the KV cache (prefix cache hits).
    pub cached_tokens: u64,
    /// Network round trip added to TTFT and E2E, milliseconds.
    pub rtt_ms: f64,
}

/// Which resource sets a phase's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Bound {
    Memory,
    Compute,
}

/// One phase's roofline: the larger of its memory and compute times.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Phase {
    pub bytes: f64,
    /// Matmul and attention FLOPs together.
    pub flops: f64,
    pub attention_flops: f64,
    pub memory_s: f64,
    pub compute_s: f64,
    pub bound: Bound,
    /// On hardware that runs a step's parts one after another
    /// ([`Hardware::serial_phases`]): the sum of each part's bound plus the
    /// fixed cost, which is then the phase's time.
    pub serial_s: Option<f64>,
}

impl Phase {
    /// `matmul` FLOPs at `matmul_tflops`, `attention` at attention's rate.
    fn new(bytes: f64, matmul: f64, attention: f64, matmul_tflops: f64, hw: &Hardware) -> Phase {
        let memory_s = bytes / (hw.bandwidth_gbs * 1e9);
        let attn_rate = hw.attention_tflops.unwrap_or(hw.tflops);
        let compute_s = matmul / (matmul_tflops * 1e12) + attention / (attn_rate * 1e12);
        Phase {
            bytes,
            flops: matmul + attention,
            attention_flops: attention,
            memory_s,
            compute_s,
            bound: if memory_s >= compute_s {
                Bound::Memory
            } else {
                Bound::Compute
            },
            serial_s: None,
        }
    }

    /// The phase with `s` more seconds of compute that no FLOP count
    /// covers (the bound follows).
    fn plus_compute(mut self, s: f64) -> Phase {
        self.compute_s += s;
        if self.compute_s > self.memory_s {
            self.bound = Bound::Compute;
        }
        self
    }

    pub fn seconds(&self) -> f64 {
        self.serial_s
            .unwrap_or_else(|| self.memory_s.max(self.compute_s))
    }
}

/// Every figure `hasten estimate` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub params: u64,
    pub active_params: u64,
    pub weight_bytes: f64,
    /// Weights read per decode step (all but the input embedding table,
    /// unless it doubles as the output projection).
    pub weight_bytes_read: f64,
    pub kv_bytes_per_token: f64,
    pub kv_bytes_per_sequence: f64,
    /// Sequences of prompt + output tokens whose KV fits beside the weights.
    pub sequences_fit: u64,
    pub prefill: Phase,
    /// The first and the last decode step (context grows by one each step).
    pub decode_first: Phase,
    pub decode_last: Phase,
    pub ttft_s: f64,
    pub tpot_s: f64,
    pub e2e_s: f64,
    pub tokens_per_s_per_sequence: f64,
    pub tokens_per_s_total: f64,
    /// Fraction of all decode bytes that are KV reads (attention's share).
    pub decode_kv_fraction: f64,
    /// KV bytes read over every decode step: each step reads the whole
    /// context, so this grows with the square of the output length.
    pub decode_kv_read_bytes: f64,
}

/// Attention FLOPs over `layer_positions` (layer, position) pairs: QK^T
/// and AV, 2 FLOPs per multiply-add, over every query head.
fn attention_flops(m: &Model, layer_positions: f64) -> f64 {
    4.0 * (m.heads * m.head_dim) as f64 * layer_positions
}

/// One decode step of `batch` sequences at context `ctx`.
struct Step<'a> {
    m: &'a Model,
    w_read: f64,
    kv_bits: f64,
    batch: f64,
    rate: f64,
    hw: &'a Hardware,
}

impl Step<'_> {
    /// One decode step of `batch` sequences at context `ctx`.
    fn at(&self, ctx: f64) -> Phase {
        let kv = self.batch * self.m.kv_bytes_at(ctx, self.kv_bits);
        let bytes = self.w_read + kv;
        let matmul = self.batch * 2.0 * self.m.active_params() as f64;
        let attention = self.batch * attention_flops(self.m, self.m.kv_positions(ctx));
        let hw = self.hw;
        if !hw.serial_phases {
            return Phase::new(bytes, matmul, attention, self.rate, hw);
        }
        // One phase after another: the matmuls (weights streamed, or their
        // FLOPs), then attention (the cache streamed, or its FLOPs), then
        // the step's fixed cost. The larger side of each is its bound.
        let gbs = hw.stream_gbs(bytes) * 1e9;
        let attn_rate = hw
            .decode_attention_tflops
            .or(hw.attention_tflops)
            .unwrap_or(hw.tflops)
            * 1e12;
        let (w_mem, w_comp) = (self.w_read / gbs, matmul / (self.rate * 1e12));
        let (a_mem, a_comp) = (kv / gbs, attention / attn_rate);
        Phase {
            bytes,
            flops: matmul + attention,
            attention_flops: attention,
            memory_s: w_mem + a_mem,
            compute_s: w_comp + a_comp,
            bound: if w_mem + a_mem >= w_comp + a_comp {
                Bound::Memory
            } else {
                Bound::Compute
            },
            serial_s: Some(w_mem.max(w_comp) + a_mem.max(a_comp) + hw.step_fixed_s),
        }
    }
}

/// The matmul rate for a weight format: the int8 rate for 8-bit weights
/// with 8-bit activations where the device has one, else the f16 rate.
fn matmul_tflops(weights: &DType, hw: &Hardware) -> f64 {
    match (weights.name.as_ref(), hw.int8_tops) {
        ("int8" | "fp8", Some(t)) => t,
        _ => hw.tflops,
    }
}

pub fn estimate(m: &Model, weights: &DType, kv: &DType, hw: &Hardware, w: &Workload) -> Estimate {
    let params = m.params();
    let active = m.active_params();
    let weight_bytes = params as f64 * weights.bits / 8.0;
    let lookup_only = if m.tied { 0 } else { m.vocab * m.hidden };
    // MoE: a step reads the experts its tokens use (at most all of them).
    let experts_read = (m.active_experts.max(1) * w.batch.max(1)).min(m.experts.max(1));
    let idle_experts = m.experts.max(1) - experts_read;
    let read_params = params - lookup_only - m.layers * idle_experts * m.ffn_params();
    let weight_bytes_read = read_params as f64 * weights.bits / 8.0;
    let kv_tok = m.kv_bytes_per_token(kv.bits);
    let seq_tokens = (w.prompt_tokens + w.output_tokens) as f64;
    let kv_seq = m.kv_bytes_at(seq_tokens, kv.bits);
    let free = hw.memory_gb * 1e9 - weight_bytes;
    let sequences_fit = if free > 0.0 && seq_tokens > 0.0 {
        (free / kv_seq).floor() as u64
    } else {
        0
    };
    let batch = w.batch.max(1) as f64;
    // Prefill: the new prompt tokens of every sequence in one pass; the
    // weights are read once, the KV written once; attention over a
    // triangle of positions; logits only for each sequence's last token.
    let head = m.vocab * m.hidden;
    let rate = matmul_tflops(weights, hw);
    let new = w.prompt_tokens.saturating_sub(w.cached_tokens) as f64;
    let (c, p) = (w.cached_tokens as f64, w.prompt_tokens as f64);
    let prefill = Phase::new(
        weight_bytes_read + batch * (new * kv_tok + m.kv_bytes_at(c, kv.bits)),
        batch * 2.0 * ((active - head) as f64 * new + head as f64),
        batch * attention_flops(m, m.prefill_positions(c, p)),
        rate,
        hw,
    )
    .plus_compute(batch * new * m.layers as f64 * hw.prefill_token_layer_s);
    let steps = w.output_tokens.saturating_sub(1) as f64;
    let ctx0 = p + 1.0;
    let step = Step {
        m,
        w_read: weight_bytes_read,
        kv_bits: kv.bits,
        batch,
        rate,
        hw,
    };
    let decode_first = step.at(ctx0);
    let decode_last = step.at(ctx0 + steps.max(1.0) - 1.0);
    // Both terms are linear in the context, so the mean step is the mean
    // of the first and last whenever one bound holds throughout; windowed
    // layers bend the line where the window fills, so then the mean is
    // taken over 64 evenly spaced steps.
    let last_ctx = ctx0 + steps.max(1.0) - 1.0;
    let mean_ctx = (ctx0 + last_ctx) / 2.0;
    let mean_of = |f: &dyn Fn(f64) -> f64| match m.window {
        Some(_) => {
            (0..=64)
                .map(|i| f(ctx0 + (last_ctx - ctx0) * i as f64 / 64.0))
                .sum::<f64>()
                / 65.0
        }
        None => f(mean_ctx),
    };
    let tpot_s = mean_of(&|ctx| step.at(ctx).seconds());
    let ttft_s = w.rtt_ms / 1e3 + prefill.seconds();
    let e2e_s = ttft_s + steps * tpot_s;
    let kv_read = batch * mean_of(&|ctx| m.kv_bytes_at(ctx, kv.bits));
    Estimate {
        params,
        active_params: active,
        weight_bytes,
        weight_bytes_read,
        kv_bytes_per_token: kv_tok,
        kv_bytes_per_sequence: kv_seq,
        sequences_fit,
        prefill,
        decode_first,
        decode_last,
        ttft_s,
        tpot_s,
        e2e_s,
        tokens_per_s_per_sequence: if tpot_s > 0.0 { 1.0 / tpot_s } else { 0.0 },
        tokens_per_s_total: if tpot_s > 0.0 { batch / tpot_s } else { 0.0 },
        decode_kv_fraction: kv_read / (kv_read + weight_bytes_read),
        decode_kv_read_bytes: steps * kv_read,
    }
}

impl Estimate {
    /// Why the figures may not hold for workload `w` on `hw`, one sentence
    /// each: the weights, or the KV of `w.batch` sequences beside them, do
    /// not fit in the device's memory (the figures assume they do; a server
    /// would queue or preempt the sequences that do not fit).
    pub fn warnings(&self, w: &Workload, hw: &Hardware) -> Vec<String> {
        let gb = |b: f64| format!("{:.2} GB", b / 1e9);
        let mut out = Vec::new();
        if self.weight_bytes > hw.memory_gb * 1e9 {
            out.push(format!(
                "the weights ({}) do not fit in {}'s {} GB; the figures assume they do",
                gb(self.weight_bytes),
                hw.name,
                hw.memory_gb
            ));
        } else if w.batch > self.sequences_fit {
            out.push(format!(
                "a batch of {} sequences of {} tokens needs {} of KV cache, but only {} fit beside the \
                 weights in {}'s {} GB; the figures assume all {} decode together (a server would \
                 queue or preempt the rest)",
                w.batch,
                w.prompt_tokens + w.output_tokens,
                gb(self.kv_bytes_per_sequence * w.batch as f64),
                self.sequences_fit,
                hw.name,
                hw.memory_gb,
                w.batch
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use presets::{dtype, hardware, model};

    const MIB: f64 = 1024.0 * 1024.0;

    /// A 2-core CPU: 20 GB/s, 0.5 TFLOP/s, serial phases.
    fn cpu() -> Hardware {
        Hardware {
            name: "cpu".into(),
            memory_gb: 24.0,
            bandwidth_gbs: 20.0,
            tflops: 0.5,
            int8_tops: None,
            attention_tflops: Some(0.02),
            decode_attention_tflops: Some(0.03),
            llc_bytes: None,
            llc_bandwidth_gbs: None,
            step_fixed_s: 0.5e-3,
            prefill_token_layer_s: 0.0,
            serial_phases: true,
        }
    }

    #[test]
    fn kv_per_token_matches_hand_computed_figures() {
        let f16 = dtype("f16").unwrap();
        // 2 × 32 layers × 32 KV heads × 128 × 2 bytes.
        assert_eq!(
            model("llama-2-7b").unwrap().kv_bytes_per_token(f16.bits),
            0.5 * MIB
        );
        // GQA: 8 KV heads of 128 over 80 layers.
        assert_eq!(
            model("llama-3-70b").unwrap().kv_bytes_per_token(f16.bits),
            0.3125 * MIB
        );
        // Not "about 2 MB": 2 × 96 × 96 × 128 × 2 bytes.
        assert_eq!(
            model("gpt-3-175b").unwrap().kv_bytes_per_token(f16.bits),
            4.5 * MIB
        );
        let q8 = dtype("q8_0").unwrap();
        assert_eq!(
            model("tinyllama-1.1b").unwrap().kv_bytes_per_token(q8.bits),
            2.0 * 22.0 * 256.0 * 8.5 / 8.0
        );
    }

    #[test]
    fn parameter_counts_match_the_published_sizes() {
        for (name, published, tol) in [
            ("llama-2-7b", 6.74e9, 0.01),
            ("llama-2-70b", 68.98e9, 0.01),
            ("llama-3-8b", 8.03e9, 0.01),
            ("mistral-7b", 7.24e9, 0.01),
            ("tinyllama-1.1b", 1.10e9, 0.01),
            ("smollm2-135m", 134.5e6, 0.01),
            ("gpt-3-175b", 175e9, 0.01),
            ("mixtral-8x7b", 46.7e9, 0.01),
        ] {
            let p = model(name).unwrap().params() as f64;
            assert!((p / published - 1.0).abs() < tol, "{name}: {p:e}");
        }
        // Mixtral uses 2 of 8 experts: about 12.9B active.
        let a = model("mixtral-8x7b").unwrap().active_params() as f64;
        assert!((a / 12.9e9 - 1.0).abs() < 0.02, "{a:e}");
    }

    /// On a CPU (`serial_phases`) a decode step is the weights' time plus
    /// attention's plus the fixed cost, and a model that fits in the
    /// last-level cache streams at its bandwidth.
    #[test]
    fn a_cpu_step_adds_its_parts_and_a_cached_model_streams_faster() {
        let m = model("smollm2-135m").unwrap();
        let q4 = dtype("q4_0").unwrap();
        let f16 = dtype("f16").unwrap();
        let cpu = cpu();
        let w = Workload {
            prompt_tokens: 4096,
            output_tokens: 2,
            batch: 1,
            cached_tokens: 0,
            rtt_ms: 0.0,
        };
        let e = estimate(&m, &q4, &f16, &cpu, &w);
        let ctx = 4097.0;
        let weights = e.weight_bytes_read / 20e9;
        let attn = (ctx * e.kv_bytes_per_token / 20e9)
            .max(attention_flops(&m, m.kv_positions(ctx)) / 0.03e12);
        let want = weights + attn + 0.5e-3;
        assert!(
            (e.tpot_s / want - 1.0).abs() < 1e-9,
            "{} vs {want}",
            e.tpot_s
        );
        // A 260 MiB cache at 60 GB/s holds this model and its KV.
        let big = Hardware {
            llc_bytes: Some(260.0 * MIB),
            llc_bandwidth_gbs: Some(60.0),
            ..cpu.clone()
        };
        let fast = estimate(&m, &q4, &f16, &big, &w);
        assert!(fast.tpot_s < e.tpot_s - 0.9 * (weights - weights / 3.0));
        // A 32 MiB cache does not hold them: DRAM speed again.
        let small = Hardware {
            llc_bytes: Some(32.0 * MIB),
            ..big
        };
        assert_eq!(estimate(&m, &q4, &f16, &small, &w).tpot_s, e.tpot_s);
        // Per-token, per-layer prefill work outside the FLOPs adds to
        // prefill's compute, for each new token of each sequence only.
        let ew = Hardware {
            prefill_token_layer_s: 2e-6,
            ..cpu.clone()
        };
        let w2 = Workload {
            batch: 2,
            cached_tokens: 1024,
            ..w
        };
        let (a, b) = (
            estimate(&m, &q4, &f16, &cpu, &w2),
            estimate(&m, &q4, &f16, &ew, &w2),
        );
        let extra = 2.0 * 3072.0 * m.layers as f64 * 2e-6;
        assert!((b.prefill.compute_s - a.prefill.compute_s - extra).abs() < 1e-9);
        assert_eq!(b.prefill.bound, Bound::Compute);
        assert_eq!(a.tpot_s, b.tpot_s);
    }

    #[test]
    fn decode_is_memory_bound_and_prefill_compute_bound_on_a_gpu() {
        let m = model("llama-2-7b").unwrap();
        let hw = hardware("a100-80gb").unwrap();
        let f16 = dtype("f16").unwrap();
        let w = Workload {
            prompt_tokens: 1000,
            output_tokens: 200,
            batch: 1,
            cached_tokens: 0,
            rtt_ms: 0.0,
        };
        let e = estimate(&m, &f16, &f16, &hw, &w);
        assert_eq!(e.decode_first.bound, Bound::Memory);
        assert_eq!(e.prefill.bound, Bound::Compute);
        // 13.5 GB of weights at 2039 GB/s: ~6.6 ms a token, plus the KV.
        assert!((e.tpot_s * 1e3 - 6.9).abs() < 0.3, "{}", e.tpot_s);
        // 2 × 6.7e9 × 1000 FLOPs at 312 TFLOP/s: ~43 ms, plus attention.
        assert!(
            (e.prefill.seconds() * 1e3 - 44.0).abs() < 3.0,
            "{}",
            e.prefill.seconds()
        );
        // KV reads grow with context: the last step is slower than the first.
        assert!(e.decode_last.seconds() > e.decode_first.seconds());
        // 199 steps over contexts 1001..=1199 of 0.5 MiB per token.
        let ctx_sum: f64 = (1001..=1199).map(f64::from).sum();
        assert!((e.decode_kv_read_bytes / (ctx_sum * 0.5 * MIB) - 1.0).abs() < 1e-12);
        // Doubling the output about quadruples the KV reads of a short prompt.
        let long = |out| {
            let w = Workload {
                prompt_tokens: 1,
                output_tokens: out,
                ..w
            };
            estimate(&m, &f16, &f16, &hw, &w).decode_kv_read_bytes
        };
        assert!((long(4000) / long(2000) - 4.0).abs() < 0.01);
        // 80 GB − 13.5 GB of weights over 1200 × 0.5 MiB per sequence.
        assert_eq!(
            e.sequences_fit,
            ((80e9 - e.weight_bytes) / (1200.0 * 0.5 * MIB)) as u64
        );
        // W8A8 formats run prefill on the int8 units (twice the f16 rate).
        let int8 = dtype("int8").unwrap();
        let e8 = estimate(&m, &int8, &f16, &hw, &w);
        assert!((e.prefill.compute_s / e8.prefill.compute_s - 1.9).abs() < 0.1);
        // A prefix cache hit removes prefill work.
        let cached = estimate(
            &m,
            &f16,
            &f16,
            &hw,
            &Workload {
                cached_tokens: 900,
                ..w
            },
        );
        assert!(cached.prefill.seconds() < e.prefill.seconds() / 5.0);
    }

    #[test]
    fn a_batch_or_model_that_does_not_fit_is_warned_about() {
        let (m, f16) = (model("llama-2-7b").unwrap(), dtype("f16").unwrap());
        let hw = hardware("a100-80gb").unwrap();
        let w = |batch| Workload {
            prompt_tokens: 512,
            output_tokens: 256,
            batch,
            cached_tokens: 0,
            rtt_ms: 0.0,
        };
        let e = estimate(&m, &f16, &f16, &hw, &w(1));
        assert!(e.warnings(&w(1), &hw).is_empty());
        let fit = e.sequences_fit;
        assert!(fit > 1);
        assert!(e.warnings(&w(fit), &hw).is_empty());
        let big = estimate(&m, &f16, &f16, &hw, &w(fit + 1));
        let warn = big.warnings(&w(fit + 1), &hw);
        assert_eq!(warn.len(), 1);
        assert!(warn[0].contains(&format!("only {fit} fit")), "{warn:?}");
        let huge = model("llama-3-70b").unwrap();
        let warn = estimate(&huge, &f16, &f16, &hw, &w(1)).warnings(&w(1), &hw);
        assert!(warn[0].starts_with("the weights ("), "{warn:?}");
    }

    /// Windowed layers attend (and keep) their last `size` positions: the
    /// prefill band equals the sum of each position's, a step past the
    /// window reads less and is faster than without one, and a window
    /// wider than the context changes nothing.
    #[test]
    fn sliding_windows_bound_what_windowed_layers_read() {
        let base = model("smollm2-135m").unwrap();
        let gemma = Model {
            window: Some(Window {
                size: 512,
                layers: 25,
            }),
            ..base.clone()
        };
        for (c, p) in [(0.0, 100.0), (0.0, 4096.0), (300.0, 700.0), (600.0, 2000.0)] {
            let each: f64 = (c as u64 + 1..=p as u64)
                .map(|i| gemma.kv_positions(i as f64))
                .sum();
            assert_eq!(gemma.prefill_positions(c, p), each, "{c}..{p}");
        }
        assert_eq!(gemma.kv_positions(4096.0), 5.0 * 4096.0 + 25.0 * 512.0);
        let (q4, f16, hw) = (dtype("q4_0").unwrap(), dtype("f16").unwrap(), cpu());
        let w = |prompt| Workload {
            prompt_tokens: prompt,
            output_tokens: 64,
            batch: 1,
            cached_tokens: 0,
            rtt_ms: 0.0,
        };
        let (a, b) = (
            estimate(&gemma, &q4, &f16, &hw, &w(16384)),
            estimate(&base, &q4, &f16, &hw, &w(16384)),
        );
        assert!(
            a.tpot_s < 0.7 * b.tpot_s && a.ttft_s < b.ttft_s,
            "{} vs {}",
            a.tpot_s,
            b.tpot_s
        );
        assert!(a.kv_bytes_per_sequence < 0.3 * b.kv_bytes_per_sequence);
        let (a, b) = (
            estimate(&gemma, &q4, &f16, &hw, &w(300)),
            estimate(&base, &q4, &f16, &hw, &w(300)),
        );
        assert!((a.tpot_s / b.tpot_s - 1.0).abs() < 1e-12 && a.ttft_s == b.ttft_s);
    }
}
