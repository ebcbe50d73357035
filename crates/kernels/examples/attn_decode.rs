//! Decode attention at depth: the time of one decode step's attention over
//! `CTX` cached positions for a model of `LAYERS` layers (one query token,
//! `GROUP` query heads per KV head, `KV_HEADS` KV heads of `HEAD_DIM`),
//! with the KV cache stored as `KV` (f16, q8_0, q4_0), on `THREADS` threads.
//!
//! Two numbers: the cache-resident rate of `hasten estimate --measure`
//! (`hasten_kernels::probe::decode_attention_rate`: one layer's cache, K
//! and V the same buffer, scaled to `LAYERS`), and a streamed step: every
//! layer its own K and V pool, head-major blocks of 16 as the model keeps
//! them, so each step reads the whole cache from memory as decode does.
//!
//! `cargo run --release -p hasten-kernels --example attn_decode -- [CTX] [KV] [THREADS] [LAYERS] [HEAD_DIM] [GROUP] [KV_HEADS]`
//! (defaults: 16384 q8_0 2 22 64 8 4, the 1b test shape).

use hasten_kernels::attention::{attend_tile, tile_scores_len, HeadView, KvRows, KvType, PagedKv};
use hasten_kernels::probe::decode_attention_rate;
use hasten_kernels::quant::quantize_row;
use hasten_kernels::threads::{par_chunks, Threads};
use std::time::{Duration, Instant};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| a.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let ctx = num(0, 16384);
    let kv = a
        .get(1)
        .and_then(|s| KvType::parse(s))
        .unwrap_or(KvType::Q8_0);
    let threads = Threads::new(num(2, 2)).expect("threads");
    let (layers, hd, group, kvh) = (num(3, 22), num(4, 64), num(5, 8), num(6, 4));
    let rate = decode_attention_rate(kv, hd, group, kvh, ctx, threads, Duration::from_secs(2));
    let flops = 4.0 * (kvh * group * hd * ctx) as f64;
    println!(
        "ctx {ctx}, kv {}, {} threads, {layers} layers of {kvh}x{group} heads of {hd}: {:.2} ms per step cache-resident, {:.2} ms streamed",
        kv.name(),
        threads.get(),
        flops / rate * layers as f64 * 1e3,
        streamed(kv, hd, group, kvh, ctx, layers, threads) * 1e3,
    );
}

/// Median seconds of a decode step's attention over `layers` layers, each
/// with its own K and V pools.
fn streamed(
    kv: KvType,
    hd: usize,
    group: usize,
    kvh: usize,
    ctx: usize,
    layers: usize,
    threads: Threads,
) -> f64 {
    const BLOCK: usize = 16;
    let blocks = ctx.div_ceil(BLOCK);
    let rows = blocks * BLOCK * kvh;
    let make = |seed: usize| -> (Vec<half::f16>, Vec<u8>) {
        let vals: Vec<f32> = (0..rows * hd)
            .map(|i| (((i + seed) % 61) as f32 - 30.0) / 32.0)
            .collect();
        match kv {
            KvType::F16 => (
                vals.iter().map(|&x| half::f16::from_f32(x)).collect(),
                vec![],
            ),
            ty => {
                let mut b = vec![0u8; rows * ty.row_bytes(hd)];
                // As the model's pool: huge pages where Linux grants them.
                hasten_kernels::hugepages::advise(&mut b);
                quantize_row(ty.ggml(), &vals, &mut b).expect("whole blocks");
                (vec![], b)
            }
        }
    };
    let caches: Vec<_> = (0..2 * layers).map(make).collect();
    fn rows_of(kv: KvType, c: &(Vec<half::f16>, Vec<u8>)) -> KvRows<'_> {
        match kv {
            KvType::F16 => KvRows::F16(&c.0),
            ty => KvRows::Quant(ty, &c.1),
        }
    }
    let table: Vec<u32> = (0..blocks as u32).collect();
    let gq = group * hd;
    let q: Vec<f32> = (0..kvh * gq)
        .map(|i| ((i % 37) as f32 - 18.0) / 16.0)
        .collect();
    let mut out = vec![0.0f32; kvh * gq];
    let mut step = || {
        let t0 = Instant::now();
        for l in 0..layers {
            let paged = PagedKv {
                k: rows_of(kv, &caches[2 * l]),
                v: rows_of(kv, &caches[2 * l + 1]),
                block_size: BLOCK,
                n_kv_heads: kvh,
                head_dim: hd,
            };
            par_chunks(&mut out, gq, threads, |first, piece| {
                // Scores scratch kept per thread, as the model keeps it (a
                // fresh one per layer costs page faults the model does not pay).
                thread_local!(static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) });
                SCORES.with_borrow_mut(|sc| {
                    sc.resize(tile_scores_len(1, group, ctx), 0.0);
                    for (i, o) in piece.chunks_exact_mut(gq).enumerate() {
                        let k = first + i;
                        let view = HeadView::whole(paged, &table, k);
                        attend_tile(&view, &q[k * gq..(k + 1) * gq], 1, ctx, sc, o);
                    }
                });
            });
        }
        t0.elapsed().as_secs_f64()
    };
    step();
    let mut times: Vec<f64> = (0..7).map(|_| step()).collect();
    times.sort_by(f64::total_cmp);
    std::hint::black_box(&out);
    times[3]
}
