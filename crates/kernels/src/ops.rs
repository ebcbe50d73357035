//! Elementwise and row-wise kernels of a Llama block: RMSNorm, RoPE,
//! softmax, SiLU-gated products. Scalar references; f32 in and out.

/// RMSNorm of one row: `out = x / sqrt(mean(x^2) + eps) * weight`.
/// The sum of squares accumulates in f64, as ggml does.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    debug_assert_eq!(x.len(), weight.len());
    let sum: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = v * scale * w;
    }
}

/// How RoPE pairs the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs (2i, 2i+1): GGUF `llama` tensors (permuted at conversion).
    Normal,
    /// Split halves (i, i + d/2): Hugging Face layout, and GGUF `qwen2`.
    Neox,
}

/// YaRN (Qwen2.5/3's and DeepSeek's long-context scaling): each rotated
/// pair blends the interpolated angle (`freq_scale` times the original)
/// with the original one, by a ramp over the pairs whose wavelengths fall
/// between `beta_fast` and `beta_slow` rotations within `orig_context`
/// positions (ggml's `rope_yarn`, Hugging Face's `_compute_yarn_parameters`).
/// Pairs that rotate fast keep their original angle, slow ones are fully
/// interpolated. The attention factor is the caller's (`Rope::with_mscale`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Yarn {
    /// The context the model was trained at before the extension.
    pub orig_context: usize,
    /// Rotations within `orig_context` above which a pair is not interpolated (32).
    pub beta_fast: f32,
    /// Rotations below which a pair is fully interpolated (1).
    pub beta_slow: f32,
}

impl Yarn {
    /// The defaults of both references: beta_fast 32, beta_slow 1.
    pub fn new(orig_context: usize) -> Self {
        Yarn {
            orig_context,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }

    /// The pair indices where the ramp starts and ends, `[low, high]`
    /// (floored and ceiled, clamped to the rotated dimensions).
    pub fn correction_range(&self, rot_dims: usize, base: f32) -> (f32, f32) {
        let dim = |rotations: f32| {
            rot_dims as f32
                * (self.orig_context as f32 / (rotations * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let low = dim(self.beta_fast).floor().max(0.0);
        let high = dim(self.beta_slow).ceil().min(rot_dims as f32 - 1.0);
        (low, high)
    }

    /// How much of pair `i`'s angle stays the original one (1: all of it,
    /// 0: fully interpolated).
    pub fn extrapolation(low: f32, high: f32, i: usize) -> f32 {
        let y = (i as f32 - low) / (high - low).max(0.001);
        1.0 - y.clamp(0.0, 1.0)
    }

    /// The attention factor YaRN's references default to,
    /// `1 + 0.1 ln(factor)` (1 where the factor is at most 1).
    pub fn mscale(factor: f32) -> f32 {
        if factor <= 1.0 {
            1.0
        } else {
            1.0 + 0.1 * factor.ln()
        }
    }
}

/// Precomputed inverse frequencies of RoPE for the rotated dimensions of
/// a head (all of them, or the first `rot_dims` for partial rotary models
/// such as Phi-4-mini; the rest pass unchanged).
#[derive(Debug, Clone)]
pub struct Rope {
    pub style: RopeStyle,
    /// One entry per rotated pair: the angle per position.
    inv_freq: Vec<f32>,
    /// Multiplies the rotated dimensions (LongRoPE's and YaRN's attention
    /// factor, ggml's `mscale`); 1 for plain RoPE.
    mscale: f32,
}

impl Rope {
    /// RoPE over the first `rot_dims` dimensions of each head.
    /// `freq_scale` is 1/factor for linear scaling; `freq_factors` (llama3
    /// scaling, Phi-3's LongRoPE; one per pair) divide the angle as in
    /// ggml's `rope_freqs`.
    pub fn new(
        style: RopeStyle,
        rot_dims: usize,
        base: f32,
        freq_scale: f32,
        freq_factors: Option<&[f32]>,
    ) -> Self {
        Self::with_yarn(style, rot_dims, base, freq_scale, freq_factors, None)
    }

    /// [`Rope::new`] where `yarn` (if any) blends each pair's interpolated
    /// angle with its original one instead of scaling every pair by
    /// `freq_scale`. The angle stays linear in the position, so the blend
    /// folds into the pair's inverse frequency.
    pub fn with_yarn(
        style: RopeStyle,
        rot_dims: usize,
        base: f32,
        freq_scale: f32,
        freq_factors: Option<&[f32]>,
        yarn: Option<Yarn>,
    ) -> Self {
        let pairs = rot_dims / 2;
        let range = yarn.map(|y| y.correction_range(rot_dims, base));
        // ggml: theta_scale = powf(base, -2/n_dims), theta_i = pos * theta_scale^i.
        let theta_scale = base.powf(-2.0 / rot_dims as f32);
        let mut inv_freq = Vec::with_capacity(pairs);
        let mut t = 1.0f32;
        for i in 0..pairs {
            let ff = freq_factors.and_then(|f| f.get(i)).copied().unwrap_or(1.0);
            let scale = match range {
                Some((low, high)) => {
                    let keep = Yarn::extrapolation(low, high, i);
                    freq_scale * (1.0 - keep) + keep
                }
                None => freq_scale,
            };
            inv_freq.push(t / ff * scale);
            t *= theta_scale;
        }
        Rope {
            style,
            inv_freq,
            mscale: 1.0,
        }
    }

    /// The same rotation with the rotated dimensions scaled by `mscale`
    /// (the dimensions past `rot_dims` are not).
    pub fn with_mscale(self, mscale: f32) -> Self {
        Rope { mscale, ..self }
    }

    /// Rotated pairs per head: the `(sin, cos)` pairs [`Rope::angles`] fills.
    pub fn pairs(&self) -> usize {
        self.inv_freq.len()
    }

    /// The rotation of position `pos`: `(sin, cos)` of each pair's angle,
    /// scaled by `mscale`, into `out` ([`Rope::pairs`] long). The angles
    /// depend only on the position and the pair, so a forward pass takes
    /// them once per token for every head and layer.
    pub fn angles(&self, pos: usize, out: &mut [(f32, f32)]) {
        for (sc, &f) in out.iter_mut().zip(&self.inv_freq) {
            let (sin, cos) = (pos as f32 * f).sin_cos();
            *sc = (sin * self.mscale, cos * self.mscale);
        }
    }

    /// Rotates each head of `x` (`n_heads * head_dim`) in place by
    /// `angles` ([`Rope::angles`] of the token's position).
    pub fn rotate(&self, x: &mut [f32], head_dim: usize, angles: &[(f32, f32)]) {
        let pairs = self.inv_freq.len().min(head_dim / 2);
        let angles = &angles[..pairs];
        for head in x.chunks_exact_mut(head_dim) {
            for (i, &(sin, cos)) in angles.iter().enumerate() {
                let (a, b) = match self.style {
                    RopeStyle::Normal => (2 * i, 2 * i + 1),
                    RopeStyle::Neox => (i, i + pairs),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos - x1 * sin;
                head[b] = x0 * sin + x1 * cos;
            }
        }
    }

    /// Rotates each head of `x` (`n_heads * head_dim`) in place for position `pos`.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, pos: usize) {
        let mut angles = vec![(0.0f32, 0.0f32); self.pairs()];
        self.angles(pos, &mut angles);
        self.rotate(x, head_dim, &angles);
    }
}

/// In-place softmax of one row, max-subtracted; sums in f64 for stability.
pub fn softmax(x: &mut [f32]) {
    softmax_lse(x);
}

/// [`softmax`], returning the log-sum-exp of the inputs, `max + ln(sum
/// exp(x - max))` (`-inf` for an empty slice).
pub fn softmax_lse(x: &mut [f32]) -> f32 {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
    max + sum.ln() as f32
}

/// SwiGLU gate: `gate = silu(gate) * up`, elementwise, through the
/// fastest kernel of [`crate::cpu::kernels`].
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    (crate::cpu::kernels().silu_mul)(gate, up)
}

/// The reference SwiGLU gate (libm `exp`), the scalar tier's kernel.
pub fn silu_mul_reference(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// GeGLU gate (Gemma): `gate = gelu(gate) * up` with the tanh
/// approximation of GELU, through the fastest kernel of
/// [`crate::cpu::kernels`].
pub fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    (crate::cpu::kernels().gelu_mul)(gate, up)
}

/// `sqrt(2 / pi)`, the tanh-GELU's inner factor.
pub const GELU_K: f32 = 0.797_884_6;
/// The tanh-GELU's cubic coefficient.
pub const GELU_C: f32 = 0.044_715;

/// The reference GeGLU gate: `0.5 x (1 + tanh(k (x + c x^3))) * up`, as
/// `x * sigmoid(2 k (x + c x^3))` (the same function) with libm `exp`.
pub fn gelu_mul_reference(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        let z = 2.0 * GELU_K * (x + GELU_C * x * x * x);
        *g = x / (1.0 + (-z).exp()) * u;
    }
}

/// Soft-capping (Gemma 2): `cap * tanh(x / cap)` of each value.
pub fn softcap(x: &mut [f32], cap: f32) {
    for v in x {
        *v = cap * (*v / cap).tanh();
    }
}

/// `acc += x`, elementwise.
pub fn add_assign(acc: &mut [f32], x: &[f32]) {
    for (a, &v) in acc.iter_mut().zip(x) {
        *a += v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_of_constant_row_is_weight() {
        let x = vec![3.0f32; 7];
        let w: Vec<f32> = (0..7).map(|i| i as f32).collect();
        let mut out = vec![0.0; 7];
        rms_norm(&x, &w, 0.0, &mut out);
        for (o, w) in out.iter().zip(&w) {
            assert!((o - w).abs() < 1e-6);
        }
    }

    #[test]
    fn rope_preserves_norm_and_is_identity_at_zero() {
        for style in [RopeStyle::Normal, RopeStyle::Neox] {
            let rope = Rope::new(style, 8, 10000.0, 1.0, None);
            let orig: Vec<f32> = (0..16).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut x = orig.clone();
            rope.apply(&mut x, 8, 0);
            assert_eq!(x, orig);
            rope.apply(&mut x, 8, 17);
            let n0: f32 = orig.iter().map(|v| v * v).sum();
            let n1: f32 = x.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-4);
            assert_ne!(x, orig);
        }
    }

    /// Inverse frequencies from Hugging Face's `_compute_yarn_parameters`
    /// (computed in Python, float64): head 64, base 1e4, factor 4,
    /// original context 128; and Qwen3's head 128, base 1e6, factor 4,
    /// original 32768.
    #[test]
    fn yarn_frequencies_match_hugging_face() {
        type Case = (usize, f32, usize, &'static [(usize, f64)]);
        let cases: [Case; 2] = [
            (
                64,
                1e4,
                128,
                &[
                    (0, 1.0),
                    (1, 0.698765058696152),
                    (3, 0.3354404004545541),
                    (5, 0.15629508514588183),
                    (8, 0.045454545454545456),
                    (12, 0.007905694150420948),
                    (31, 3.33380358040831e-05),
                ],
            ),
            (
                128,
                1e6,
                32768,
                &[
                    (0, 1.0),
                    (10, 0.1154781984689458),
                    (30, 0.0010643609812470017),
                    (40, 4.445698525097307e-05),
                    (63, 3.102344401879299e-07),
                ],
            ),
        ];
        for (dims, base, orig, want) in cases {
            let rope = Rope::with_yarn(
                RopeStyle::Neox,
                dims,
                base,
                0.25,
                None,
                Some(Yarn::new(orig)),
            );
            for &(i, w) in want {
                let got = rope.inv_freq[i] as f64;
                assert!((got - w).abs() <= 1e-5 * w, "pair {i}: {got} vs {w}");
            }
        }
        assert_eq!(Yarn::mscale(1.0), 1.0);
        assert!((Yarn::mscale(4.0) - 1.138_629_4).abs() < 1e-6);
    }

    #[test]
    fn rope_relative_position_property() {
        // <rope(q, m), rope(k, n)> depends only on m - n.
        let rope = Rope::new(RopeStyle::Neox, 16, 500.0, 1.0, None);
        let q: Vec<f32> = (0..16).map(|i| (i as f32).cos()).collect();
        let k: Vec<f32> = (0..16).map(|i| (i as f32 * 1.3).sin()).collect();
        let dot = |m: usize, n: usize| {
            let (mut a, mut b) = (q.clone(), k.clone());
            rope.apply(&mut a, 16, m);
            rope.apply(&mut b, 16, n);
            a.iter().zip(&b).map(|(x, y)| x * y).sum::<f32>()
        };
        assert!((dot(5, 2) - dot(13, 10)).abs() < 1e-3);
    }

    #[test]
    fn gated_activations_match_their_references_on_every_tier_with_tails() {
        use crate::cpu::Kernels;
        let mut vals: Vec<f32> = (0..1537)
            .map(|i| ((i * 7919) % 2001) as f32 / 50.0 - 20.0)
            .collect();
        vals[..8].copy_from_slice(&[0.0, -0.0, 1e-3, -1e-3, 95.0, -95.0, 88.5, -88.5]);
        let up: Vec<f32> = (0..vals.len())
            .map(|i| 1.0 + (i % 5) as f32 * 0.25)
            .collect();
        type Gate = fn(&mut [f32], &[f32]);
        type Case = (&'static str, Gate, fn(&Kernels) -> Gate, f32);
        // (name, reference, kernel, relative tolerance): GELU's argument
        // reaches |z| ~ 100, where one ulp of z moves exp(z) by ~1e-5.
        let cases: [Case; 2] = [
            ("silu", silu_mul_reference, |k| k.silu_mul, 2e-6),
            ("gelu", gelu_mul_reference, |k| k.gelu_mul, 3e-5),
        ];
        for isa in crate::cpu::tiers() {
            let k = Kernels::for_isa(isa);
            for (name, reference, kernel, tol) in cases {
                let kernel = kernel(&k);
                let mut whole = vals.clone();
                kernel(&mut whole, &up);
                for n in [0usize, 1, 7, 8, 9, 31, 100, 1537] {
                    let (mut want, mut got) = (vals[..n].to_vec(), vals[..n].to_vec());
                    reference(&mut want, &up[..n]);
                    kernel(&mut got, &up[..n]);
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (g - w).abs() <= tol * w.abs() + 1e-30,
                            "{name} {isa:?} n={n} x={}: {g} vs {w}",
                            vals[i]
                        );
                    }
                    // An element's result does not depend on the slice around it.
                    assert_eq!(got[..], whole[..n], "{name} {isa:?} n={n}");
                }
            }
        }
    }

    #[test]
    fn gelu_reference_is_the_tanh_formula() {
        for x in [-6.0f32, -1.5, -0.3, 0.0, 0.2, 1.0, 3.7, 9.0] {
            let mut g = [x];
            gelu_mul_reference(&mut g, &[2.0]);
            let tanh = 0.5 * x * (1.0 + (GELU_K * (x + GELU_C * x * x * x)).tanh());
            assert!(
                (g[0] - 2.0 * tanh).abs() < 1e-5,
                "{x}: {} vs {}",
                g[0],
                2.0 * tanh
            );
        }
    }

    #[test]
    fn partial_rope_leaves_the_unrotated_dimensions() {
        for style in [RopeStyle::Normal, RopeStyle::Neox] {
            let rope = Rope::new(style, 6, 10000.0, 1.0, None);
            let full = Rope::new(style, 6, 10000.0, 1.0, None);
            let orig: Vec<f32> = (0..16).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut x = orig.clone();
            rope.apply(&mut x, 8, 5);
            // Per head of 8: the first 6 rotate as a 6-wide head, 2 pass.
            for h in 0..2 {
                let mut want = orig[h * 8..h * 8 + 6].to_vec();
                full.apply(&mut want, 6, 5);
                assert_eq!(x[h * 8..h * 8 + 6], want[..]);
                assert_eq!(x[h * 8 + 6..h * 8 + 8], orig[h * 8 + 6..h * 8 + 8]);
            }
        }
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut x = vec![1.0, 2.0, 3.0, -1000.0, 50.0];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[4] > 0.99);
    }
}
