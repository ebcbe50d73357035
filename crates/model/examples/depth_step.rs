//! TPOT at depth over TPOT at depth 0, measured in one process: decode
//! steps of a sequence with `DEPTH` cached positions alternate with steps
//! of a sequence with one, so a VM whose memory speed drifts over minutes
//! moves both alike (runs of `hasten run` minutes apart moved ±20% here).
//! The deep sequence's K and V are synthetic values stored straight into
//! the cache (no prefill: a step's time does not depend on the values),
//! so a 32k depth takes seconds to set up, not an hour.
//!
//! Run: cargo run --release -p hasten-model --example depth_step -- MODEL.gguf [THREADS] [DEPTH] [KV] [ROUNDS]
//! (defaults 2, 16384, q8_0, 8; each round times 4 steps of each sequence).
//! Prints each sequence's median step and their ratio.

use hasten_kernels::attention::KvType;
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
        .ok_or("usage: depth_step MODEL.gguf [THREADS] [DEPTH] [KV] [ROUNDS]")?;
    let arg = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let threads = Threads::new(arg(2, 2))?;
    let depth = arg(3, 16384);
    let ty = args
        .get(4)
        .map_or(Some(KvType::Q8_0), |s| KvType::parse(s))
        .ok_or("KV: f16, q8_0 or q4_0")?;
    let rounds = arg(5, 8);
    const STEPS: usize = 4;
    let f = GgufFile::open(std::path::Path::new(path))?;
    let n_vocab = f
        .header
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .map_or(32000, |a| a.len());
    let config = Config::from_gguf(&f.header, &f.name, n_vocab)?;
    let model = Model::load(&f, config, Naming::Gguf)?;
    let c = &model.config;
    let block = 16usize;
    // Sequence 0: `depth` cached positions; sequence 1: one. Each has room
    // for every step of every round.
    let room = rounds * STEPS + 1;
    let lens = [depth + room, 1 + room].map(|n| n.div_ceil(block));
    let mut kv = KvCache::with_type(c, lens[0] + lens[1], block, ty)?;
    let tables = [
        (0..lens[0] as u32).collect::<Vec<u32>>(),
        (lens[0] as u32..(lens[0] + lens[1]) as u32).collect(),
    ];
    let kv_dim = kv.n_kv_heads * kv.head_dim;
    let row = |p: usize, salt: usize| -> Vec<f32> {
        (0..kv_dim)
            .map(|i| ((p * 31 + i * 7 + salt) % 97) as f32 / 48.0 - 1.0)
            .collect()
    };
    for layer in 0..c.n_layers {
        for p in 0..depth {
            let slot = tables[0][p / block] as usize * block + p % block;
            kv.store(layer, slot, &row(p, layer), &row(p, layer + 1));
        }
    }
    let mut s = Scratch::new(c, 1, 1);
    let tok = [42u32];
    // Position 0 of the short sequence is a real forward.
    let first = SeqBatch {
        tokens: &tok,
        start_pos: 0,
        block_table: &tables[1],
        local_table: &[],
        logits: 1,
    };
    model.forward(&[first], &mut kv, &mut s, threads)?;
    let mut pos = [depth, 1];
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..=rounds {
        for (i, table) in tables.iter().enumerate() {
            let t0 = Instant::now();
            for _ in 0..STEPS {
                let b = SeqBatch {
                    tokens: &tok,
                    start_pos: pos[i],
                    block_table: table,
                    local_table: &[],
                    logits: 1,
                };
                model.forward(&[b], &mut kv, &mut s, threads)?;
                pos[i] += 1;
            }
            // Round 0 warms up.
            if round > 0 {
                times[i].push(t0.elapsed().as_secs_f64() * 1e3 / STEPS as f64);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (deep, short) = (median(&mut times[0]), median(&mut times[1]));
    println!(
        "depth {depth}, kv {}, {} threads: step {deep:.2} ms at depth, {short:.2} ms at depth 1, ratio {:.2}",
        ty.name(),
        threads.get(),
        deep / short
    );
    Ok(())
}
