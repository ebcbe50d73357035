//! Whether a speculative verification pass gives a decode step's logits
//! bit for bit: after the same prompt, the logits of one decode row at
//! position P are compared with those of the first row of a pass of
//! ROWS drafted rows at P. Greedy output may only not depend on drafting
//! decisions if every row gives 0 differences.
//!
//! `cargo run --release -p hasten-model --example verify_exact -- MODEL.gguf [ROWS] [P] [THREADS]`
//! (defaults 5 rows, P 40, 2 threads; `HASTEN_ISA` picks the tier; f16 cache).
use hasten_kernels::attention::KvType;
use hasten_kernels::threads::Threads;
use hasten_model::loader::load;
use hasten_model::testing::first_row_logits;

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
    let model = load(std::path::Path::new(path))?.model;
    let prompt: Vec<u32> = (0..plen as u32).map(|i| 100 + i * 7 % 1000).collect();
    let drafts: Vec<u32> = (0..rows as u32).map(|i| 42 + i * 13).collect();
    let passes = [&drafts[..1], &drafts[..]];
    let [one, first]: [Vec<f32>; 2] =
        first_row_logits(&model, KvType::F16, &prompt, &passes, threads)?
            .try_into()
            .map_err(|_| "two passes")?;
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
        one.len()
    );
    Ok(())
}
