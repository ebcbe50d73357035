//! One matmul of `N` activation rows over a repacked matrix of `MW`
//! million weights (default 64: 37 MB in Q4_K, more than a 32 MiB L3, so
//! the weights stream from memory as a batched decode step's do), best of
//! eight runs, as GMAC/s and the weight bytes' GB/s. With a small `MW` the
//! matrix stays in cache: the difference is the kernel's memory behaviour.
//!
//! `cargo run --release -p hasten-kernels --example gemm_big -- [TYPE] [THREADS] [N] [COLS] [MW]`
//! (TYPE q4_0 (default), q4_k, q6_k, q8_0; defaults 2 threads, 8 rows, 2048 columns).
use hasten_kernels::matmul::{matmul, WeightMatrix};
use hasten_kernels::quant::{quantize_row, GgmlType};
use hasten_kernels::threads::Threads;
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let ty = match a.first().map(|s| s.as_str()) {
        Some("q4_k") => GgmlType::Q4K,
        Some("q6_k") => GgmlType::Q6K,
        Some("q8_0") => GgmlType::Q8_0,
        _ => GgmlType::Q4_0,
    };
    let threads = Threads::new(a.get(1).and_then(|s| s.parse().ok()).unwrap_or(2)).unwrap();
    let n: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(8);
    let cols: usize = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(2048);
    let mw: usize = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(64);
    let rows = mw * 1024 * 1024 / cols;
    let src: Vec<f32> = (0..cols)
        .map(|i| ((i * 7919) % 97) as f32 / 50.0 - 1.0)
        .collect();
    let rb = ty.row_bytes(cols).unwrap();
    let mut wq = vec![0u8; rb * rows];
    for dst in wq.chunks_exact_mut(rb) {
        quantize_row(ty, &src, dst).unwrap();
    }
    let packed = hasten_kernels::quant::repack::repack_x8(ty, &wq, rows, cols).unwrap();
    let w = WeightMatrix::new(ty, rows, cols, &wq)
        .unwrap()
        .with_packed(&packed)
        .unwrap();
    let x: Vec<f32> = (0..n * cols).map(|i| (i % 13) as f32 / 7.0 - 0.9).collect();
    let mut out = vec![0.0f32; n * rows];
    matmul(&w, &x, &mut out, threads).unwrap();
    let mut best = f64::MAX;
    for _ in 0..8 {
        let t = Instant::now();
        matmul(&w, &x, &mut out, threads).unwrap();
        best = best.min(t.elapsed().as_secs_f64());
    }
    let macs = (rows * cols * n) as f64;
    println!(
        "{} {rows}x{cols} x{n}, {} threads: {:.2} ms, {:.0} GMAC/s, {:.1} GB/s",
        ty.name(),
        threads.get(),
        best * 1e3,
        macs / best / 1e9,
        packed.len() as f64 / best / 1e9
    );
}
