//! The mixture-of-experts FFN layer: a router scores every expert for each
//! token, the `top_k` most probable run, and their outputs are summed with
//! the routing weights.
//!
//! ```text
//! p = softmax(h · Wr)                     (T, n_experts)
//! E(t) = top_k(p[t]) ; w = p[t, E(t)] (/ sum, if norm_topk)
//! for each expert e, over the tokens T_e routed to it (stacked):
//!     y = (silu(x·Wg_e) * x·Wu_e)·Wd_e
//!     out[t] += w[t, e] * y[t]            for t in T_e
//! with a shared expert (Qwen2-MoE), for every token:
//!     out[t] += sigmoid(h[t] · wg) * (silu(h·Ws_g) * h·Ws_u)·Ws_d
//! ```
//!
//! Tokens are grouped by expert before any product, so each expert's
//! weights are read once per forward call however many tokens of the
//! batch (prefill chunks and decode steps alike) route to it, and an
//! expert no token picked is not read at all.

use crate::config::{Arch, Config, Moe};
use crate::llama::Naming;
use crate::weights::{Tensor, TensorSource};
use crate::Result;
use hasten_kernels::matmul::matmul;
use hasten_kernels::ops::silu_mul;
use hasten_kernels::threads::Threads;

/// One expert's SwiGLU matrices.
#[derive(Debug)]
pub(crate) struct Expert {
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

impl Expert {
    /// `ys = (silu(x·Wg) * x·Wu)·Wd` for the `t` rows of `x` (width
    /// `dim`), through hidden buffers `gate` and `up` (`t` rows of the
    /// expert's width each).
    fn forward(
        &self,
        x: &[f32],
        (gate, up): (&mut [f32], &mut [f32]),
        ys: &mut [f32],
        threads: Threads,
    ) -> Result<()> {
        matmul(&self.gate.matrix()?, x, gate, threads)?;
        matmul(&self.up.matrix()?, x, up, threads)?;
        silu_mul(gate, up);
        matmul(&self.down.matrix()?, gate, ys, threads)?;
        Ok(())
    }
}

/// A layer's router and experts.
#[derive(Debug)]
pub(crate) struct MoeFfn {
    router: Tensor,
    experts: Vec<Expert>,
    moe: Moe,
    /// The shared expert and its gate vector (`dim` values), if any.
    shared: Option<(Expert, Vec<f32>)>,
}

/// Per-call buffers of the MoE layers, sized for the scratch's token capacity.
#[derive(Debug)]
pub struct MoeScratch {
    probs: Vec<f32>,
    /// For each expert, the (token, weight) pairs routed to it.
    routes: Vec<Vec<(usize, f32)>>,
    xs: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    ys: Vec<f32>,
}

impl MoeScratch {
    pub fn new(c: &Config, m: &Moe, max_tokens: usize) -> Self {
        let t = max_tokens;
        MoeScratch {
            probs: vec![0.0; t * m.n_experts],
            routes: vec![Vec::with_capacity(t); m.n_experts],
            xs: vec![0.0; t * c.dim],
            gate: vec![0.0; t * m.expert_ffn_dim.max(m.shared_ffn_dim)],
            up: vec![0.0; t * m.expert_ffn_dim.max(m.shared_ffn_dim)],
            ys: vec![0.0; t * c.dim],
        }
    }
}

impl MoeFfn {
    /// Layer `i`'s router and experts: stacked 3-D tensors in GGUF
    /// (`blk.i.ffn_{gate,up,down}_exps`), one tensor per expert in Hugging
    /// Face files (`model.layers.i.mlp.experts.e.*_proj`).
    pub(crate) fn load(
        src: &dyn TensorSource,
        naming: Naming,
        i: usize,
        c: &Config,
        moe: Moe,
    ) -> Result<Self> {
        let (dim, n, eff) = (c.dim, moe.n_experts, moe.expert_ffn_dim);
        let experts = match naming {
            Naming::Gguf => {
                let stacked = |part: &str, cols: usize, rows: usize| {
                    src.get_shaped(&format!("blk.{i}.ffn_{part}_exps.weight"), &[cols, rows, n])
                };
                let (g, u, d) = (
                    stacked("gate", dim, eff)?,
                    stacked("up", dim, eff)?,
                    stacked("down", eff, dim)?,
                );
                (0..n)
                    .map(|e| {
                        Ok(Expert {
                            gate: g.slice_3d(e)?,
                            up: u.slice_3d(e)?,
                            down: d.slice_3d(e)?,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            Naming::HuggingFace => (0..n)
                .map(|e| {
                    let p = |part: &str| hf_expert(c.arch, i, e, part);
                    Ok(Expert {
                        gate: src.get_shaped(&p("gate"), &[dim, eff])?,
                        up: src.get_shaped(&p("up"), &[dim, eff])?,
                        down: src.get_shaped(&p("down"), &[eff, dim])?,
                    })
                })
                .collect::<Result<Vec<_>>>()?,
        };
        let router = match naming {
            Naming::Gguf => format!("blk.{i}.ffn_gate_inp.weight"),
            Naming::HuggingFace => hf_router(c.arch, i),
        };
        let shared = match moe.shared_ffn_dim {
            0 => None,
            sf => Some(load_shared(src, naming, i, dim, sf)?),
        };
        Ok(MoeFfn {
            router: src.get_shaped(&router, &[dim, n])?,
            experts,
            moe,
            shared,
        })
    }

    /// The expert matrices, for repacking.
    pub(crate) fn matrices_mut(&mut self) -> impl Iterator<Item = &mut Tensor> {
        self.experts
            .iter_mut()
            .chain(self.shared.as_mut().map(|(e, _)| e))
            .flat_map(|e| [&mut e.gate, &mut e.up, &mut e.down])
    }

    /// Bytes one token's pass reads: the router and `top_k` experts.
    pub(crate) fn active_bytes(&self) -> usize {
        let per_expert = self.experts.first().map_or(0, |e| {
            e.gate.data().len() + e.up.data().len() + e.down.data().len()
        });
        let shared = self.shared.as_ref().map_or(0, |(e, g)| {
            e.gate.data().len() + e.up.data().len() + e.down.data().len() + 4 * g.len()
        });
        self.router.data().len() + self.moe.top_k * per_expert + shared
    }

    /// `out = MoE(h)` for the `t` rows of `h`.
    pub(crate) fn forward(
        &self,
        h: &[f32],
        out: &mut [f32],
        dim: usize,
        s: &mut MoeScratch,
        threads: Threads,
    ) -> Result<()> {
        let (t, n, eff) = (h.len() / dim, self.moe.n_experts, self.moe.expert_ffn_dim);
        let probs = &mut s.probs[..t * n];
        matmul(&self.router.matrix()?, h, probs, threads)?;
        s.routes.iter_mut().for_each(Vec::clear);
        for (j, p) in probs.chunks_exact_mut(n).enumerate() {
            for (e, w) in route(p, self.moe.top_k, self.moe.norm_topk) {
                s.routes[e].push((j, w));
            }
        }
        out.fill(0.0);
        for (expert, routed) in self.experts.iter().zip(&s.routes) {
            let m = routed.len();
            if m == 0 {
                continue;
            }
            let xs = &mut s.xs[..m * dim];
            for (row, &(j, _)) in xs.chunks_exact_mut(dim).zip(routed) {
                row.copy_from_slice(&h[j * dim..(j + 1) * dim]);
            }
            let hidden = (&mut s.gate[..m * eff], &mut s.up[..m * eff]);
            let ys = &mut s.ys[..m * dim];
            expert.forward(xs, hidden, ys, threads)?;
            for (y, &(j, w)) in ys.chunks_exact(dim).zip(routed) {
                for (o, v) in out[j * dim..(j + 1) * dim].iter_mut().zip(y) {
                    *o += w * v;
                }
            }
        }
        if let Some((e, gate_w)) = &self.shared {
            let sf = self.moe.shared_ffn_dim;
            let ys = &mut s.ys[..t * dim];
            e.forward(h, (&mut s.gate[..t * sf], &mut s.up[..t * sf]), ys, threads)?;
            for ((o, y), x) in out
                .chunks_exact_mut(dim)
                .zip(ys.chunks_exact(dim))
                .zip(h.chunks_exact(dim))
            {
                let logit: f32 = x.iter().zip(gate_w).map(|(a, b)| a * b).sum();
                let g = 1.0 / (1.0 + (-logit).exp());
                for (o, v) in o.iter_mut().zip(y) {
                    *o += g * v;
                }
            }
        }
        Ok(())
    }
}

/// Layer `i`'s shared expert (width `sf`) and its gate vector: GGUF's
/// `blk.i.ffn_{gate,up,down}_shexp` and `ffn_gate_inp_shexp` (a vector),
/// Hugging Face's `mlp.shared_expert.*_proj` and `mlp.shared_expert_gate`
/// (one row).
fn load_shared(
    src: &dyn TensorSource,
    naming: Naming,
    i: usize,
    dim: usize,
    sf: usize,
) -> Result<(Expert, Vec<f32>)> {
    let name = |part: &str| match naming {
        Naming::Gguf => format!("blk.{i}.ffn_{part}_shexp.weight"),
        Naming::HuggingFace => format!("model.layers.{i}.mlp.shared_expert.{part}_proj.weight"),
    };
    let expert = Expert {
        gate: src.get_shaped(&name("gate"), &[dim, sf])?,
        up: src.get_shaped(&name("up"), &[dim, sf])?,
        down: src.get_shaped(&name("down"), &[sf, dim])?,
    };
    let gate = match naming {
        Naming::Gguf => src.get_shaped(&format!("blk.{i}.ffn_gate_inp_shexp.weight"), &[dim])?,
        Naming::HuggingFace => src.get_shaped(
            &format!("model.layers.{i}.mlp.shared_expert_gate.weight"),
            &[dim, 1],
        )?,
    };
    Ok((expert, gate.to_f32()?))
}

/// The Hugging Face module holding layer `i`'s experts.
fn hf_moe_module(arch: Arch, i: usize) -> String {
    match arch {
        Arch::Mixtral => format!("model.layers.{i}.block_sparse_moe"),
        _ => format!("model.layers.{i}.mlp"),
    }
}

/// The Hugging Face name of layer `i`'s router.
pub fn hf_router(arch: Arch, i: usize) -> String {
    format!("{}.gate.weight", hf_moe_module(arch, i))
}

/// The Hugging Face name of matrix `part` (`gate`, `up` or `down`) of
/// expert `e` in layer `i`: Qwen3-MoE's `*_proj`, Mixtral's `w1`/`w3`/`w2`.
pub fn hf_expert(arch: Arch, i: usize, e: usize, part: &str) -> String {
    let name = match (arch, part) {
        (Arch::Mixtral, "gate") => "w1",
        (Arch::Mixtral, "up") => "w3",
        (Arch::Mixtral, _) => "w2",
        (_, "gate") => "gate_proj",
        (_, "up") => "up_proj",
        _ => "down_proj",
    };
    format!("{}.experts.{e}.{name}.weight", hf_moe_module(arch, i))
}

/// The `k` experts of one token from its router logits `p` (overwritten
/// with the softmax): `(expert, weight)`, most probable first, ties to the
/// lower index; weights renormalized to sum 1 if `norm`.
pub fn route(p: &mut [f32], k: usize, norm: bool) -> Vec<(usize, f32)> {
    let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in p.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    p.iter_mut().for_each(|v| *v /= sum);
    let mut picked: Vec<(usize, f32)> = Vec::with_capacity(k);
    for _ in 0..k.min(p.len()) {
        let best = (0..p.len())
            .filter(|e| !picked.iter().any(|&(x, _)| x == *e))
            .fold(None, |b: Option<usize>, e| match b {
                Some(b) if p[b] >= p[e] => Some(b),
                _ => Some(e),
            });
        if let Some(e) = best {
            picked.push((e, p[e]));
        }
    }
    if norm {
        let total: f32 = picked.iter().map(|&(_, w)| w).sum();
        picked.iter_mut().for_each(|(_, w)| *w /= total);
    }
    picked
}

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn routing_picks_the_most_probable_experts_and_renormalizes() {
        let mut p = [0.0, 2.0, 1.0, 2.0, -1.0];
        let r = route(&mut p, 2, false);
        // Ties go to the lower index; weights are softmax probabilities.
        assert_eq!(r.iter().map(|&(e, _)| e).collect::<Vec<_>>(), [1, 3]);
        let z: f32 = [0.0f32, 2.0, 1.0, 2.0, -1.0].iter().map(|v| v.exp()).sum();
        assert!((r[0].1 - 2f32.exp() / z).abs() < 1e-6);
        let mut p = [0.0, 2.0, 1.0, 2.0, -1.0];
        let r = route(&mut p, 3, true);
        assert_eq!(r.iter().map(|&(e, _)| e).collect::<Vec<_>>(), [1, 3, 2]);
        assert!((r.iter().map(|&(_, w)| w).sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((r[2].1 - 1.0 / (2.0 * 1f32.exp() + 1.0)).abs() < 1e-6);
    }
}
