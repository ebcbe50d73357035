//! Read-bandwidth probe: the rate at which `THREADS` threads (the pool
//! hasten uses) can stream a buffer much larger than the caches, best of 5
//! passes. The decode-bandwidth target of the kernels is a share of this.
//!
//! `cargo run --release -p hasten-kernels --example membw -- [THREADS] [MiB]`
//! prints GB/s (10^9 bytes per second) on the last line.

use hasten_kernels::threads::{par_chunks, Threads};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let threads = Threads::new(args.next().and_then(|a| a.parse().ok()).unwrap_or(2)).unwrap();
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let words = mib * (1 << 20) / 8;
    let mut buf: Vec<u64> = (0..words as u64).collect();
    let mut sums = vec![0u64; threads.get()];
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t0 = Instant::now();
        let per = words.div_ceil(threads.get());
        let data = &buf;
        par_chunks(&mut sums, 1, threads, |i0, piece| {
            for (i, s) in piece.iter_mut().enumerate() {
                let part = &data[((i0 + i) * per).min(words)..((i0 + i + 1) * per).min(words)];
                // Eight independent lanes: the compiler vectorizes this into wide loads.
                let mut acc = [0u64; 8];
                for c in part.chunks_exact(8) {
                    for k in 0..8 {
                        acc[k] = acc[k].wrapping_add(c[k]);
                    }
                }
                *s = acc.iter().fold(0, |a, &b| a.wrapping_add(b));
            }
        });
        let gbs = (words * 8) as f64 / t0.elapsed().as_secs_f64() / 1e9;
        best = best.max(gbs);
        std::hint::black_box(&sums);
    }
    buf[0] = sums.iter().fold(0, |a, &b| a.wrapping_add(b));
    std::hint::black_box(&buf);
    println!(
        "read bandwidth, {} threads, {mib} MiB buffer:",
        threads.get()
    );
    println!("{best:.2}");
}
