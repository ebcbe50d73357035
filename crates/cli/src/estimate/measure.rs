//! `hasten estimate --measure`: this machine as a [`Hardware`], probed in a
//! few seconds with hasten's own pool and kernels at the model's shapes.
//!
//! - read bandwidth: the pool streaming a buffer larger than the caches;
//! - decode bandwidth: one-row matmuls over copies of one layer's weight
//!   matrices (out of cache), the rate a decode step's weights stream at;
//! - prefill rate: one layer's matmuls times a prefill chunk of rows (in
//!   cache), the FLOP rate prefill can reach;
//! - attention rate: one layer's causal prefill attention over the prompt
//!   (a cache of the `--kv` type, the model's head shapes);
//! - decode attention rate: one token's attention over the prompt's
//!   positions, split over the threads as the model splits it, each pass
//!   after a read of the weights' size (a step's attention finds little
//!   of its cache in the caches);
//! - the last-level cache (its size from sysfs) and, when a decode step's
//!   weights and KV fit in it, the bandwidth of a read of that size (the
//!   rate such a step streams at: partly from the cache);
//! - prefill's other work per token and layer (norms, RoPE, KV writes,
//!   the gate, residual adds) through the model's own functions over a
//!   chunk of rows;
//! - the fixed cost of a step: the pool's hand-off per parallel region
//!   times the regions a decode step starts (`llama::decode_regions`).
//!
//! The estimate then uses decode bandwidth for memory and the rates for
//! compute, and adds a CPU's step parts one after another; the raw read
//! bandwidth is printed beside them.

use anyhow::{Context, Result};
use hasten_estimate::{Hardware, Model};
use hasten_kernels::attention::KvType;
use hasten_kernels::probe::{
    attention_rate, decode_attention_rate, matmul_rate, read_bandwidth, region_seconds, stream_rate,
};
use hasten_kernels::threads::Threads;
use hasten_kernels::GgmlType;
use serde::Serialize;
use std::time::{Duration, Instant};

/// What the probes measured.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub threads: usize,
    pub weight_type: &'static str,
    pub read_gbs: f64,
    pub decode_stream_gbs: f64,
    pub prefill_rows: usize,
    pub prefill_gflops: f64,
    pub attention_prompt: usize,
    pub attention_gflops: f64,
    pub decode_attention_gflops: f64,
    pub llc_bytes: Option<u64>,
    pub llc_gbs: Option<f64>,
    pub region_us: f64,
    pub step_fixed_ms: f64,
    /// Prefill's work per token per layer apart from matmuls and
    /// attention (norms, RoPE, KV writes, gate, residuals), microseconds.
    pub prefill_token_layer_us: f64,
    pub probe_s: f64,
}

/// Matrix shapes the probes use: one layer's, each side capped so the
/// probe stays a few seconds on models of any size, and rounded to the
/// type's block.
fn probe_shapes(m: &Model, ty: GgmlType) -> Vec<(usize, usize)> {
    let block = ty.block_size();
    let fit = |d: u64| {
        let d = (d as usize).min(8192);
        (d / block.max(8) * block.max(8)).max(block.max(8))
    };
    m.layer_matrices()
        .into_iter()
        .map(|(r, c)| (fit(r), fit(c)))
        .collect()
}

/// Probes this machine for `m` with `ty` matmuls; decode attention reads
/// a cache of `kv` (a `--kv` name; types hasten's cache lacks probe f16).
#[allow(clippy::too_many_arguments)]
pub fn probe(
    m: &Model,
    ty: GgmlType,
    kv: &str,
    threads: Threads,
    prompt: usize,
    mib: usize,
    working_set: u64,
) -> Result<Measured> {
    let t0 = Instant::now();
    let shapes = probe_shapes(m, ty);
    let mib = mib.clamp(1, 1 << 16);
    let read = read_bandwidth(threads, mib << 21, 5);
    let stream = stream_rate(ty, &shapes, threads, mib << 20, 5)
        .with_context(|| format!("probing {} matmuls", ty.name()))?;
    let rows = prompt.clamp(1, hasten_model::session::PREFILL_CHUNK);
    let rate = matmul_rate(ty, &shapes, rows, threads, Duration::from_millis(1500))
        .with_context(|| format!("probing {} matmuls", ty.name()))?;
    let attention_prompt = prompt.clamp(16, 8192);
    let attention = attention_rate(
        KvType::parse(kv).unwrap_or_default(),
        m.head_dim.min(1024) as usize,
        (m.heads / m.kv_heads.max(1)).min(64) as usize,
        m.kv_heads.min(64) as usize,
        attention_prompt,
        threads,
        Duration::from_millis(800),
    );
    // Decode attention over the model's layers, each its own cache, so a
    // pass reads the whole cache as a step does (from memory where it
    // outgrows the caches; one layer's stayed in L2 at 4k positions and
    // predicted half the attention time a step took), at most 1 GiB.
    let kv_type = KvType::parse(kv).unwrap_or_default();
    let (hd, kvh) = (
        m.head_dim.clamp(1, 1024) as usize,
        m.kv_heads.clamp(1, 64) as usize,
    );
    let ctx = prompt.clamp(16, 32768);
    let layer_bytes = 2 * kvh * ctx * kv_type.row_bytes(hd);
    let layers = (m.layers as usize)
        .min((1 << 30) / layer_bytes.max(1))
        .max(1);
    // Each pass after a read of the step's other bytes (its weights, at
    // most 1 GiB), as attention follows the weights' stream in a step.
    let kv_all = layer_bytes as u64 * m.layers;
    let evict = working_set.saturating_sub(kv_all).min(1 << 30) as usize;
    let decode_attention = decode_attention_rate(
        kv_type,
        hd,
        (m.heads / m.kv_heads.max(1)).min(64) as usize,
        kvh,
        ctx,
        layers,
        evict,
        threads,
        Duration::from_millis(400),
    );
    // A step whose weights and KV fit in the last-level cache (3/4 of it)
    // reads them at the rate the decode matmuls stream matrices of that
    // size, measured here. Not a plain read: from cache a 2-core VM read
    // 80 MiB at 37 GB/s where the decode kernels streamed 28 (the 135M
    // shape predicted at 0.65x of its TPOT); and the cache sysfs names
    // can be far bigger than a VM's share (480 MiB here; 128 MiB already
    // read at DRAM speed), which a probe of the working set's own size
    // sees.
    let llc = llc_bytes();
    let llc_gbs = match llc.filter(|&b| working_set as f64 <= 0.75 * b as f64) {
        Some(_) => Some(
            stream_rate(ty, &shapes, threads, working_set.max(1 << 20) as usize, 10)
                .with_context(|| format!("probing {} matmuls", ty.name()))?
                / 1e9,
        ),
        None => None,
    };
    // Prefill's per-token work outside matmuls and attention, through the
    // model's own functions over a chunk of the prompt's rows.
    let layer = hasten_model::config::Config::plain_llama(
        m.hidden.clamp(1, 16384) as usize,
        1,
        (
            m.heads.clamp(1, 256) as usize,
            kvh.min(m.heads.max(1) as usize),
            hd,
        ),
        m.ffn.clamp(1, 65536) as usize,
        rows,
    )
    .context("the model's shapes for the prefill probe")?;
    let ew_kv = if kv_type.fits(hd) {
        kv_type
    } else {
        KvType::F16
    };
    let elementwise = hasten_model::llama::elementwise_seconds(
        &layer,
        rows,
        ew_kv,
        threads,
        Duration::from_millis(300),
    )?;
    let region = region_seconds(threads, Duration::from_millis(200));
    let regions = hasten_model::llama::decode_regions(m.layers as usize);
    Ok(Measured {
        decode_attention_gflops: decode_attention / 1e9,
        llc_bytes: llc,
        llc_gbs,
        region_us: region * 1e6,
        step_fixed_ms: region * regions as f64 * 1e3,
        prefill_token_layer_us: elementwise * 1e6,
        threads: threads.get(),
        weight_type: ty.name(),
        read_gbs: read / 1e9,
        decode_stream_gbs: stream / 1e9,
        prefill_rows: rows,
        prefill_gflops: rate.flops_per_s / 1e9,
        attention_prompt,
        attention_gflops: attention / 1e9,
        probe_s: t0.elapsed().as_secs_f64(),
    })
}

impl Measured {
    pub fn hardware(&self) -> Hardware {
        Hardware {
            name: format!("this machine, {} threads (measured)", self.threads),
            memory_gb: memory_gb().unwrap_or(0.0),
            bandwidth_gbs: self.decode_stream_gbs,
            tflops: self.prefill_gflops / 1e3,
            int8_tops: None,
            attention_tflops: Some(self.attention_gflops / 1e3),
            decode_attention_tflops: Some(self.decode_attention_gflops / 1e3),
            llc_bytes: self.llc_bytes.map(|b| b as f64),
            llc_bandwidth_gbs: self.llc_gbs,
            step_fixed_s: self.step_fixed_ms / 1e3,
            prefill_token_layer_s: self.prefill_token_layer_us / 1e6,
            serial_phases: true,
        }
    }
}

/// The largest cache of CPU 0 (the last level), from sysfs.
fn llc_bytes() -> Option<u64> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut best: Option<(u32, u64)> = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let read = |f: &str| std::fs::read_to_string(e.path().join(f)).ok();
        let (Some(level), Some(size)) = (read("level"), read("size")) else {
            continue;
        };
        let level: u32 = level.trim().parse().ok()?;
        let size = size.trim();
        let (num, mul) = match size.strip_suffix('K') {
            Some(n) => (n, 1 << 10),
            None => match size.strip_suffix('M') {
                Some(n) => (n, 1 << 20),
                None => (size, 1),
            },
        };
        let bytes = num.parse::<u64>().ok()? * mul;
        if best.is_none_or(|(l, _)| level > l) {
            best = Some((level, bytes));
        }
    }
    best.map(|(_, b)| b)
}

/// MemTotal from /proc/meminfo, in GB.
fn memory_gb() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024.0 / 1e9)
}

/// The kernel type standing in for a weight format name (`q4_k_m` runs
/// mostly Q4_K matmuls); formats without a hasten kernel probe as Q8_0.
pub fn kernel_type(format: &str) -> GgmlType {
    let f = format.split(' ').next().unwrap_or(format);
    let f = f.strip_suffix("_m").or(f.strip_suffix("_s")).unwrap_or(f);
    match GgmlType::from_name(f) {
        Some(t) if t != GgmlType::F32 => t,
        _ => GgmlType::Q8_0,
    }
}
