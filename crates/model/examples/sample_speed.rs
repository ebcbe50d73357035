//! Time per sampled token for vocabulary sizes and sampling settings
//! (`cargo run --release -p hasten-model --example sample_speed`).

use hasten_model::sampler::{Sampler, SamplingParams};
use std::time::Instant;

fn main() {
    for vocab in [32_000usize, 151_936] {
        // Peaked logits, as a trained model gives: a few strong candidates.
        let logits: Vec<f32> = (0..vocab)
            .map(|i| {
                ((i * 2_654_435_761) % 1000) as f32 / 100.0 - if i % 97 == 0 { 0.0 } else { 5.0 }
            })
            .collect();
        for (name, top_p, min_p, t) in [
            ("T=1 (OpenAI default)", 1.0, 0.0, 1.0),
            ("T=0.8 top_p=0.95", 0.95, 0.0, 0.8),
            ("T=0.8 min_p=0.05", 1.0, 0.05, 0.8),
        ] {
            let mut s = Sampler::new(SamplingParams {
                temperature: t,
                top_p,
                min_p,
                top_k: 0,
                ..Default::default()
            });
            let n = 200;
            let t0 = Instant::now();
            for _ in 0..n {
                let mut l = logits.clone();
                std::hint::black_box(s.sample(&mut l, &[]));
            }
            let us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
            println!("vocab {vocab:>6}  {name:<22} {us:>8.1} us/token");
        }
    }
}
