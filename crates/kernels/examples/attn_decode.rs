//! Decode attention at depth: the time of one decode step's attention over
//! `CTX` cached positions for a model of `LAYERS` layers (one query token,
//! `GROUP` query heads per KV head, `KV_HEADS` KV heads of `HEAD_DIM`),
//! with the KV cache stored as `KV` (f16, q8_0, q4_0), on `THREADS` threads.
//!
//! Two numbers from `hasten_kernels::probe::decode_attention_rate`: one
//! layer's cache (cache-resident where it fits, scaled to `LAYERS`), and
//! a step over `LAYERS` layers, each its own K and V pool (head-major
//! blocks of 16 on huge pages, as the model keeps them), so each step
//! reads the whole cache, from memory where it outgrows the caches, as
//! decode does (what `hasten estimate --measure` probes), each after a
//! read of `EVICT_MIB` MiB of other memory (a step's weights).
//!
//! `cargo run --release -p hasten-kernels --example attn_decode -- [CTX] [KV] [THREADS] [LAYERS] [HEAD_DIM] [GROUP] [KV_HEADS] [EVICT_MIB]`
//! (defaults: 16384 q8_0 2 22 64 8 4 0, the 1b test shape).

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
    let budget = Duration::from_secs(2);
    let evict = num(7, 0) << 20;
    let resident = decode_attention_rate(kv, hd, group, kvh, ctx, 1, 0, threads, budget);
    let streamed = decode_attention_rate(kv, hd, group, kvh, ctx, layers, evict, threads, budget);
    let flops = 4.0 * (kvh * group * hd * ctx * layers) as f64;
    println!(
        "ctx {ctx}, kv {}, {} threads, {layers} layers of {kvh}x{group} heads of {hd}: {:.2} ms per step cache-resident, {:.2} ms streamed (after reading {} MiB)",
        kv.name(),
        threads.get(),
        flops / resident * 1e3,
        flops / streamed * 1e3,
        evict >> 20,
    );
}
