//! A small Llama in candle, laid out exactly as hasten's GGUF `llama`
//! reads it: RMSNorm (eps 1e-5), interleaved-pair RoPE (base 10000),
//! multi-head attention, SwiGLU, output tied to the token embeddings.
//! Weights are (out, in) row-major, as GGUF stores rows.

use candle_core::{DType, Device, Result, Tensor, Var, D};
use rand::Rng;
use rand_distr::{Distribution, Normal};

#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub vocab: usize,
    pub dim: usize,
    pub layers: usize,
    pub heads: usize,
    pub ffn: usize,
    pub ctx: usize,
}

impl Shape {
    pub fn head_dim(&self) -> usize {
        self.dim / self.heads
    }
}

pub struct Layer {
    pub attn_norm: Var,
    pub wq: Var,
    pub wk: Var,
    pub wv: Var,
    pub wo: Var,
    pub ffn_norm: Var,
    pub gate: Var,
    pub up: Var,
    pub down: Var,
}

pub struct Model {
    pub shape: Shape,
    pub embed: Var,
    pub layers: Vec<Layer>,
    pub out_norm: Var,
}

fn normal(rng: &mut impl Rng, dims: (usize, usize), std: f32, dev: &Device) -> Result<Var> {
    let n = Normal::new(0.0f32, std).expect("valid std");
    let v: Vec<f32> = (0..dims.0 * dims.1).map(|_| n.sample(rng)).collect();
    Var::from_tensor(&Tensor::from_vec(v, dims, dev)?)
}

fn ones(n: usize, dev: &Device) -> Result<Var> {
    Var::from_tensor(&Tensor::ones(n, DType::F32, dev)?)
}

impl Model {
    /// GPT-2 style initialisation from `rng` (reproducible: candle's own
    /// CPU random numbers cannot be seeded).
    pub fn new(shape: Shape, rng: &mut impl Rng, dev: &Device) -> Result<Model> {
        let (d, f) = (shape.dim, shape.ffn);
        let std = 0.02;
        let proj = std / (2.0 * shape.layers as f32).sqrt();
        let mut layers = Vec::new();
        for _ in 0..shape.layers {
            layers.push(Layer {
                attn_norm: ones(d, dev)?,
                wq: normal(rng, (d, d), std, dev)?,
                wk: normal(rng, (d, d), std, dev)?,
                wv: normal(rng, (d, d), std, dev)?,
                wo: normal(rng, (d, d), proj, dev)?,
                ffn_norm: ones(d, dev)?,
                gate: normal(rng, (f, d), std, dev)?,
                up: normal(rng, (f, d), std, dev)?,
                down: normal(rng, (d, f), proj, dev)?,
            });
        }
        Ok(Model {
            shape,
            embed: normal(rng, (shape.vocab, d), std, dev)?,
            layers,
            out_norm: ones(d, dev)?,
        })
    }

    pub fn vars(&self) -> Vec<Var> {
        let mut v = vec![self.embed.clone(), self.out_norm.clone()];
        for l in &self.layers {
            v.extend(
                [
                    &l.attn_norm,
                    &l.wq,
                    &l.wk,
                    &l.wv,
                    &l.wo,
                    &l.ffn_norm,
                    &l.gate,
                    &l.up,
                    &l.down,
                ]
                .map(|x| x.clone()),
            );
        }
        v
    }

    /// Logits `(b * t, vocab)` for token ids `(b, t)`.
    pub fn forward(&self, ids: &Tensor, rope: &Rope) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let s = self.shape;
        let (h, hd) = (s.heads, s.head_dim());
        let mut x = self
            .embed
            .as_tensor()
            .index_select(&ids.flatten_all()?, 0)?; // (b*t, d)
        let mask = causal_mask(t, ids.device())?;
        for l in &self.layers {
            let n = rms_norm(&x, &l.attn_norm)?;
            let heads = |w: &Var| -> Result<Tensor> {
                n.matmul(&w.as_tensor().t()?)?
                    .reshape((b, t, h, hd))?
                    .transpose(1, 2)
            };
            let q = rope.apply(&heads(&l.wq)?)?;
            let k = rope.apply(&heads(&l.wk)?)?;
            let v = heads(&l.wv)?.contiguous()?;
            let att =
                (q.contiguous()?.matmul(&k.t()?.contiguous()?)? * (1.0 / (hd as f64).sqrt()))?;
            let att = att.broadcast_add(&mask)?;
            let att = candle_nn::ops::softmax(&att, D::Minus1)?;
            let y = att.matmul(&v)?.transpose(1, 2)?.reshape((b * t, s.dim))?;
            x = (x + y.matmul(&l.wo.as_tensor().t()?)?)?;
            let n = rms_norm(&x, &l.ffn_norm)?;
            let g = n.matmul(&l.gate.as_tensor().t()?)?;
            let u = n.matmul(&l.up.as_tensor().t()?)?;
            let act = (g.silu()? * u)?;
            x = (x + act.matmul(&l.down.as_tensor().t()?)?)?;
        }
        let x = rms_norm(&x, &self.out_norm)?;
        x.matmul(&self.embed.as_tensor().t()?)
    }
}

fn rms_norm(x: &Tensor, w: &Var) -> Result<Tensor> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    let r = (ms + 1e-5)?.sqrt()?.recip()?;
    x.broadcast_mul(&r)?.broadcast_mul(w.as_tensor())
}

fn causal_mask(t: usize, dev: &Device) -> Result<Tensor> {
    let m: Vec<f32> = (0..t * t)
        .map(|i| {
            if i % t > i / t {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    Tensor::from_vec(m, (t, t), dev)
}

/// cos/sin tables for positions `0..t`, pairs `(2i, 2i+1)` of each head.
pub struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    pub fn new(t: usize, hd: usize, dev: &Device) -> Result<Rope> {
        let half = hd / 2;
        let mut c = Vec::with_capacity(t * half);
        let mut s = Vec::with_capacity(t * half);
        for p in 0..t {
            for i in 0..half {
                let theta = p as f32 * 10000f32.powf(-((2 * i) as f32) / hd as f32);
                c.push(theta.cos());
                s.push(theta.sin());
            }
        }
        Ok(Rope {
            cos: Tensor::from_vec(c, (t, half), dev)?,
            sin: Tensor::from_vec(s, (t, half), dev)?,
        })
    }

    /// `x`: `(b, h, t, hd)`.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let (b, h, t, hd) = x.dims4()?;
        let x = x.contiguous()?.reshape((b, h, t, hd / 2, 2))?;
        let x0 = x.narrow(4, 0, 1)?.squeeze(4)?;
        let x1 = x.narrow(4, 1, 1)?.squeeze(4)?;
        let (c, s) = (self.cos.narrow(0, 0, t)?, self.sin.narrow(0, 0, t)?);
        let r0 = (x0.broadcast_mul(&c)? - x1.broadcast_mul(&s)?)?;
        let r1 = (x0.broadcast_mul(&s)? + x1.broadcast_mul(&c)?)?;
        Tensor::stack(&[r0, r1], 4)?.reshape((b, h, t, hd))
    }
}
