//! Criterion benches of the matmul kernels: one weight matrix in the
//! SmolLM2-135M FFN shape (1536 x 576) and the TinyLlama-1.1B shape
//! (5632 x 2048), for each fast weight type, at 1 (decode), 8 (batched
//! decode) and 64 (a prefill chunk) activation rows. Throughput is set to the
//! weight bytes read, so Criterion reports GB/s of weight traffic; GFLOP/s is
//! `2 * rows * cols * n / time`.
//!
//! `cargo bench -p hasten-kernels --bench matmul` (add `-- --quick` for a fast
//! pass); `HASTEN_ISA=scalar` compares the tiers.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hasten_kernels::matmul::{matmul, WeightMatrix};
use hasten_kernels::quant::{quantize_row, GgmlType};
use hasten_kernels::threads::Threads;
use rand::{Rng, SeedableRng};

fn bench(c: &mut Criterion) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let threads = Threads::new(1).unwrap();
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
            let rb = ty.row_bytes(cols).unwrap();
            let mut wq = vec![0u8; rb * rows];
            for (src, dst) in wsrc.chunks_exact(cols).zip(wq.chunks_exact_mut(rb)) {
                quantize_row(ty, src, dst).unwrap();
            }
            let w = WeightMatrix::new(ty, rows, cols, &wq).unwrap();
            let bytes = wq.len() as u64;
            run_group(
                c,
                &mut rng,
                &format!("matmul/{shape}/{}", ty.name()),
                &w,
                bytes,
                threads,
            );
            if let Some(packed) = hasten_kernels::quant::repack::repack_x8(ty, &wq, rows, cols) {
                let w = w.with_packed(&packed).unwrap();
                let name = format!("matmul/{shape}/{}x8", ty.name());
                run_group(c, &mut rng, &name, &w, bytes, threads);
            }
        }
    }
}

/// One group: the matrix times 1, 8 and (for the smaller shape) 64 activation rows.
fn run_group(
    c: &mut Criterion,
    rng: &mut rand_chacha::ChaCha8Rng,
    name: &str,
    w: &WeightMatrix<'_>,
    bytes: u64,
    threads: Threads,
) {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes(bytes));
    for n in [1usize, 8, 64] {
        if w.rows * w.cols > 4_000_000 && n == 64 {
            continue;
        }
        let x: Vec<f32> = (0..n * w.cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let mut out = vec![0.0f32; n * w.rows];
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| matmul(w, &x, &mut out, threads).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
