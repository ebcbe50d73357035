//! Trains hasten's default demo model on the KJV Bible and writes it as a
//! GGUF file that hasten loads (Q8_0 matrices), then checks hasten against
//! the training implementation and prints a sample.
//!
//! `cargo run --release -- CORPUS.txt OUT.gguf [STEPS]` (see `train.sh`).

mod corpus;
mod export;
mod model;
mod tok;

use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use rand::{Rng, SeedableRng};
use std::time::Instant;

pub const SEED: u64 = 20261203;
pub const SHAPE: model::Shape = model::Shape {
    vocab: 2048,
    dim: 128,
    layers: 4,
    heads: 4,
    ffn: 384,
    ctx: 512,
};
const BATCH: usize = 16;
const SEQ: usize = 128;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let corpus_path = args
        .first()
        .context("usage: train-default CORPUS.txt OUT.gguf [STEPS]")?;
    let out = std::path::PathBuf::from(args.get(1).context("missing OUT.gguf")?);
    let steps: usize = args.get(2).map_or(Ok(1500), |s| s.parse())?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(SEED);
    let text = std::fs::read_to_string(corpus_path)?;
    let chapters = corpus::chapters(&text);
    let verses: usize = chapters.iter().map(|c| c.1.len()).sum();
    eprintln!("corpus: {} chapters, {verses} verses", chapters.len());
    let docs = corpus::documents(&chapters, &mut rng);
    let dir = tempdir()?;
    let docs_path = dir.join("docs.txt");
    std::fs::write(&docs_path, docs.concat())?;
    let tk = tok::train(&[docs_path.to_string_lossy().into_owned()], SHAPE.vocab)?;
    let mut ids: Vec<u32> = Vec::new();
    for d in &docs {
        let e = tk
            .encode(d.as_str(), false)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        ids.extend(e.get_ids());
    }
    eprintln!("tokens: {} ({} documents)", ids.len(), docs.len());

    let dev = Device::Cpu;
    let m = model::Model::new(SHAPE, &mut rng, &dev)?;
    let params: usize = m.vars().iter().map(|v| v.elem_count()).sum();
    eprintln!("model: {params} parameters, {SHAPE:?}");
    let rope = model::Rope::new(SHAPE.ctx, SHAPE.head_dim(), &dev)?;
    let peak = 2e-3;
    let mut opt = AdamW::new(
        m.vars(),
        ParamsAdamW {
            lr: peak,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.05,
        },
    )?;
    let t0 = Instant::now();
    let mut last_loss = f32::NAN;
    let mut ema = f32::NAN;
    for step in 0..steps {
        let warm = 50.0;
        let s = step as f64;
        let lr = if s < warm {
            peak * (s + 1.0) / warm
        } else {
            let p = (s - warm) / (steps as f64 - warm).max(1.0);
            peak * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * p).cos()))
        };
        opt.set_learning_rate(lr);
        let mut x = Vec::with_capacity(BATCH * SEQ);
        let mut y = Vec::with_capacity(BATCH * SEQ);
        for _ in 0..BATCH {
            let o = rng.gen_range(0..ids.len() - SEQ - 1);
            x.extend_from_slice(&ids[o..o + SEQ]);
            y.extend_from_slice(&ids[o + 1..o + SEQ + 1]);
        }
        let x = Tensor::from_vec(x, (BATCH, SEQ), &dev)?;
        let y = Tensor::from_vec(y, BATCH * SEQ, &dev)?;
        let logits = m.forward(&x, &rope)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &y)?;
        opt.backward_step(&loss)?;
        last_loss = loss.to_scalar::<f32>()?;
        ema = if ema.is_nan() {
            last_loss
        } else {
            0.95 * ema + 0.05 * last_loss
        };
        if step % 50 == 0 || step + 1 == steps {
            let el = t0.elapsed().as_secs_f64();
            eprintln!(
                "step {step:5} loss {last_loss:.3} (avg {ema:.3}) lr {lr:.2e} | {:.0} tokens/s | {el:.0} s",
                ((step + 1) * BATCH * SEQ) as f64 / el
            );
        }
        if (step + 1) % 250 == 0 || step + 1 == steps {
            export::write(&m, &tk, &out)?;
        }
    }
    let seen = steps * BATCH * SEQ;
    eprintln!("trained: {steps} steps, {seen} tokens seen, final loss {last_loss:.3} (avg {ema:.3}), {:.0} s", t0.elapsed().as_secs_f64());
    export::check(&m, &rope, &tk, &out)?;
    Ok(())
}

fn tempdir() -> Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("train-default-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
