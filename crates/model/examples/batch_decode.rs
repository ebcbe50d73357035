//! Time of one decode step for B sequences at once against B = 1, on any
//! GGUF model: the batched forward reads each weight block once per step for
//! all rows, so the ratio shows what continuous batching will buy.
//!
//! Run: cargo run --release -p hasten-model --example batch_decode -- MODEL.gguf [THREADS] [SIZES]
//! (SIZES: comma-separated sequence counts, default 1,4,8,16; env PROMPT, default 32:
//! positions prefilled per sequence before the timed steps; STEPS, default 16).

use hasten_kernels::threads::Threads;
use hasten_model::config::Config;
use hasten_model::gguf::GgufFile;
use hasten_model::kv::KvCache;
use hasten_model::llama::{Model, Naming, Scratch, SeqBatch};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: batch_decode MODEL.gguf [THREADS] [SIZES]")?;
    let threads = Threads::new(args.get(2).map_or(Ok(2), |t| t.parse())?)?;
    let f = GgufFile::open(std::path::Path::new(path))?;
    let n_vocab = f
        .header
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .map_or(32000, |a| a.len());
    let config = Config::from_gguf(&f.header, &f.name, n_vocab)?;
    let model = Model::load(&f, config, Naming::Gguf)?;
    let c = &model.config;
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    // PROMPT positions are prefilled per sequence, then STEPS decode steps timed.
    let (prompt_len, steps, block) = (env("PROMPT", 32).max(1), env("STEPS", 16), 16usize);
    let per_seq = (prompt_len + steps).div_ceil(block);
    let mut base = None;
    println!("| sequences | step ms | vs 1 sequence | tokens/s |");
    println!("|---|---|---|---|");
    let sizes: Vec<usize> = match args.get(3) {
        Some(list) => list
            .split(',')
            .map(|b| b.trim().parse())
            .collect::<Result<_, _>>()?,
        None => vec![1, 4, 8, 16],
    };
    for b in sizes {
        let mut kv = KvCache::new(c, b * per_seq, block);
        let mut s = Scratch::new(c, b * prompt_len, b);
        let tables: Vec<Vec<u32>> = (0..b)
            .map(|i| ((i * per_seq) as u32..((i + 1) * per_seq) as u32).collect())
            .collect();
        let prompt: Vec<u32> = (0..prompt_len as u32).map(|i| 100 + i % 1000).collect();
        let batch: Vec<SeqBatch> = tables
            .iter()
            .map(|t| SeqBatch {
                tokens: &prompt,
                start_pos: 0,
                block_table: t,
                local_table: &[],
                logits: 1,
            })
            .collect();
        model.forward(&batch, &mut kv, &mut s, threads)?;
        let tok = [42u32];
        let t0 = Instant::now();
        for step in 0..steps {
            let batch: Vec<SeqBatch> = tables
                .iter()
                .map(|t| SeqBatch {
                    tokens: &tok,
                    start_pos: prompt_len + step,
                    block_table: t,
                    local_table: &[],
                    logits: 1,
                })
                .collect();
            model.forward(&batch, &mut kv, &mut s, threads)?;
        }
        let ms = t0.elapsed().as_secs_f64() * 1e3 / steps as f64;
        let base_ms = *base.get_or_insert(ms);
        println!(
            "| {b} | {ms:.2} | {:.2}x | {:.1} |",
            ms / base_ms,
            b as f64 * 1e3 / ms
        );
    }
    Ok(())
}
