//! Decode attention at depth: the time of one decode step's attention over
//! `CTX` cached positions for a model of `LAYERS` layers (one query token,
//! `GROUP` query heads per KV head, `KV_HEADS` KV heads of `HEAD_DIM`),
//! with the KV cache stored as `KV` (f16, q8_0, q4_0), on `THREADS` threads
//! (`hasten_kernels::probe::decode_attention_rate`, median pass).
//!
//! `cargo run --release -p hasten-kernels --example attn_decode -- [CTX] [KV] [THREADS] [LAYERS] [HEAD_DIM] [GROUP] [KV_HEADS]`
//! (defaults: 16384 q8_0 2 22 64 8 4, the 1b test shape) prints the
//! milliseconds per step and the GFLOP/s.

use hasten_kernels::attention::KvType;
use hasten_kernels::probe::decode_attention_rate;
use hasten_kernels::threads::Threads;
use std::time::Duration;

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
        "ctx {ctx}, kv {}, {} threads, {layers} layers of {kvh}x{group} heads of {hd}: {:.2} ms per step, {:.1} GFLOP/s",
        kv.name(),
        threads.get(),
        flops / rate * layers as f64 * 1e3,
        rate / 1e9
    );
}
