//! Whether a speculative verification pass gives a decode step's logits
//! bit for bit: after the same prompt, the logits of one decode row at
//! position P are compared with those of the first row of a pass of
//! ROWS drafted rows at P. Greedy output may only not depend on drafting
//! decisions if every row gives 0 differences.
//!
//! `cargo run --release -p hasten-model --example verify_exact -- MODEL.gguf [ROWS] [P] [THREADS]`
//! (defaults 5 rows, P 40, 2 threads; `HASTEN_ISA` picks the tier).
use hasten_kernels::threads::Threads;
use hasten_model::config::Config;
use hasten_model::gguf::GgufFile;
use hasten_model::kv::KvCache;
use hasten_model::llama::{Model, Naming, Scratch, SeqBatch};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: verify_exact MODEL.gguf [ROWS] [P] [THREADS]")?;
    let arg = |i: usize, d: usize| args.get(i).map_or(Ok(d), |s| s.parse());
    let (rows, plen, threads) = (
        arg(2, 5)?.max(1),
        arg(3, 40)?.max(1),
        Threads::new(arg(4, 2)?)?,
    );
    let f = GgufFile::open(std::path::Path::new(path))?;
    let n_vocab = f
        .header
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .map_or(32000, |a| a.len());
    let config = Config::from_gguf(&f.header, &f.name, n_vocab)?;
    let model = Model::load(&f, config, Naming::Gguf)?;
    let c = &model.config;
    let block = 16;
    let blocks = (plen + rows).div_ceil(block);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let prompt: Vec<u32> = (0..plen as u32).map(|i| 100 + i * 7 % 1000).collect();
    let run = |toks: &[u32]| -> Result<Vec<f32>, Box<dyn std::error::Error>> {
        let mut kv = KvCache::new(c, blocks, block);
        let mut s = Scratch::new(c, plen.max(rows), rows);
        let seq = |tokens, start_pos, logits| SeqBatch {
            tokens,
            start_pos,
            block_table: &table,
            local_table: &[],
            logits,
        };
        model.forward(&[seq(&prompt, 0, 1)], &mut kv, &mut s, threads)?;
        let out = model.forward(&[seq(toks, plen, toks.len())], &mut kv, &mut s, threads)?;
        Ok(out[..c.vocab_size].to_vec())
    };
    let drafts: Vec<u32> = (0..rows as u32).map(|i| 42 + i * 13).collect();
    let (one, first) = (run(&drafts[..1])?, run(&drafts)?);
    let differ = one
        .iter()
        .zip(&first)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    let max = one
        .iter()
        .zip(&first)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    println!(
        "{rows} rows at {plen}: {differ} of {} logits differ, max |d| {max:e}",
        c.vocab_size
    );
    Ok(())
}
