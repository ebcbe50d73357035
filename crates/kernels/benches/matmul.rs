//! Benches of the matmul kernels: one weight matrix in the SmolLM2-135M FFN
//! shape (1536 x 576) and the TinyLlama-1.1B shape (5632 x 2048), for each
//! fast weight type, row layout and interleaved x8, at 1 (decode), 8
//! (batched decode) and 64 (a prefill chunk) activation rows. Prints the
//! median time of repeated products, the weight bytes read per second and
//! GFLOP/s (`2 * rows * cols * n / time`); the matrix stays in cache, so
//! these are compute rates.
//!
//! `cargo bench -p hasten-kernels --bench matmul [-- [--quick] [FILTER...]]`:
//! `--quick` measures each case for 0.2 s instead of 1 s; a case runs when
//! its name (`matmul/1b-ffn/q4_0x8/64`) contains any FILTER (all without
//! one). `HASTEN_ISA=scalar` (or `avx2`, ...) compares the tiers. A plain
//! harness, no benchmarking framework: the figures are medians, compared
//! within one run (BENCHMARKS.md).

use hasten_kernels::matmul::{matmul, WeightMatrix};
use hasten_kernels::probe::median_pass;
use hasten_kernels::quant::{quantize_row, repack::repack_x8, GgmlType};
use hasten_kernels::threads::Threads;
use rand::{Rng, SeedableRng};
use std::time::Duration;

fn main() {
    // `cargo bench` passes `--bench`; other flags are the user's.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let quick = args.iter().any(|a| a == "--quick");
    let filters: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(String::as_str)
        .collect();
    let budget = Duration::from_millis(if quick { 200 } else { 1000 });
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let threads = Threads::new(1).expect("one thread");
    println!("| case | median | weight GB/s | GFLOP/s |\n|---|---|---|---|");
    for (shape, rows, cols) in [("135m-ffn", 1536, 576), ("1b-ffn", 5632, 2048)] {
        let wsrc: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q5_0,
            GgmlType::Q4K,
            GgmlType::Q6K,
            GgmlType::F16,
        ] {
            if cols % ty.block_size() != 0 {
                continue;
            }
            let rb = ty.row_bytes(cols).expect("whole blocks");
            let mut wq = vec![0u8; rb * rows];
            for (src, dst) in wsrc.chunks_exact(cols).zip(wq.chunks_exact_mut(rb)) {
                quantize_row(ty, src, dst).expect("whole blocks");
            }
            let w = WeightMatrix::new(ty, rows, cols, &wq).expect("shape");
            let packed = repack_x8(ty, &wq, rows, cols);
            let mut layouts = vec![(ty.name().to_string(), w)];
            if let Some(p) = &packed {
                layouts.push((
                    format!("{}x8", ty.name()),
                    w.with_packed(p).expect("packed"),
                ));
            }
            for (layout, w) in &layouts {
                for n in [1usize, 8, 64] {
                    if w.rows * w.cols > 4_000_000 && n == 64 {
                        continue;
                    }
                    let name = format!("matmul/{shape}/{layout}/{n}");
                    if !filters.is_empty() && !filters.iter().any(|f| name.contains(f)) {
                        continue;
                    }
                    let x: Vec<f32> = (0..n * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
                    let mut out = vec![0.0f32; n * rows];
                    let s = median_pass(budget, 1_000_000, || {
                        let t0 = std::time::Instant::now();
                        matmul(w, &x, &mut out, threads)?;
                        Ok::<_, hasten_kernels::Error>(t0.elapsed().as_secs_f64())
                    })
                    .expect("matmul");
                    let flops = 2.0 * (rows * cols * n) as f64;
                    println!(
                        "| {name} | {:.1} µs | {:.1} | {:.1} |",
                        s * 1e6,
                        wq.len() as f64 / s / 1e9,
                        flops / s / 1e9
                    );
                }
            }
        }
    }
}
