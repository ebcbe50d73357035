//! Time of one decode step for B sequences at once against B = 1, on any
//! GGUF model: the batched forward reads each weight block once per step for
//! all rows, so the ratio shows what continuous batching will buy.
//!
//! Run: cargo run --release -p hasten-model --example batch_decode -- MODEL.gguf [THREADS] [SIZES]
//! (SIZES: comma-separated sequence counts, default 1,4,8,16).

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
    let (ctx, block) = (64usize, 16usize);
    let per_seq = ctx / block;
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
        let mut s = Scratch::new(c, b * 32, b);
        let tables: Vec<Vec<u32>> = (0..b)
            .map(|i| ((i * per_seq) as u32..((i + 1) * per_seq) as u32).collect())
            .collect();
        // Prefill 32 positions per sequence, then time decode steps.
        let prompt: Vec<u32> = (0..32).map(|i| 100 + i).collect();
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
        let steps = std::env::var("STEPS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(16);
        let tok = [42u32];
        let t0 = Instant::now();
        for step in 0..steps {
            let batch: Vec<SeqBatch> = tables
                .iter()
                .map(|t| SeqBatch {
                    tokens: &tok,
                    start_pos: 32 + step,
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
