//! Machine probes for `hasten estimate --measure`: the read bandwidth the
//! worker pool reaches on a buffer larger than the caches, and the rate of
//! hasten's own matmul kernels on a cache-resident weight matrix (the
//! compute ceiling of decode at one activation row and of prefill at many),
//! and the int8 `vpdpbusd` peak of the AVX-512 VNNI tier (what prefill
//! rates are reported against).
//! The read-bandwidth probe reports the best pass (what the memory can
//! do); the kernel probes report the median pass, what a run on a shared,
//! noisy machine typically sees.

use crate::attention::{attend_tile, tile_scores_len, HeadView, KvRows, KvType, PagedKv};
use crate::matmul::{matmul, WeightMatrix};
use crate::quant::{quantize_row, repack::repack_x8, GgmlType};
use crate::threads::{par_chunks, Threads};
use crate::Result;
use half::f16;
use std::time::{Duration, Instant};

/// The median seconds of `pass` after one warm-up pass: at least three
/// passes, more while `budget` lasts (at most `max_passes`).
pub fn median_pass<E>(
    budget: Duration,
    max_passes: usize,
    mut pass: impl FnMut() -> std::result::Result<f64, E>,
) -> std::result::Result<f64, E> {
    pass()?;
    let (start, mut times) = (Instant::now(), Vec::new());
    while times.len() < 3 || (start.elapsed() < budget && times.len() < max_passes) {
        times.push(pass()?);
    }
    Ok(median(&mut times))
}

fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// The int8 multiply-accumulates per second `threads` pool workers reach
/// with independent 512-bit `vpdpbusd` (the ceiling of the AVX-512 VNNI
/// kernels), best of `passes`; `None` on CPUs without AVX-512 VNNI.
pub fn int8_peak(threads: Threads, passes: usize) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    let run = crate::simd::avx512::dpbusd_loop;
    #[cfg(not(target_arch = "x86_64"))]
    let run = |_: usize| -> Option<i32> { None };
    const ITERS: usize = 2_000_000;
    run(1)?;
    let n = threads.get();
    let mut best = 0f64;
    for _ in 0..passes.max(1) {
        let mut sink = vec![0i32; n];
        let t0 = Instant::now();
        par_chunks(&mut sink, 1, threads, |_, piece| {
            for v in piece.iter_mut() {
                *v = run(ITERS).unwrap_or(0);
            }
        });
        let secs = t0.elapsed().as_secs_f64();
        std::hint::black_box(&sink);
        best = best.max((n * ITERS * 12 * 64) as f64 / secs);
    }
    Some(best)
}

/// Bytes per second (10^9 per GB) `threads` pool workers read streaming a
/// `bytes`-byte buffer, best of `passes`.
pub fn read_bandwidth(threads: Threads, bytes: usize, passes: usize) -> f64 {
    let words = (bytes / 8).max(64);
    let mut buf: Vec<u64> = (0..words as u64).collect();
    let mut best = 0.0f64;
    let mut sum = 0u64;
    for _ in 0..passes.max(1) {
        let t0 = Instant::now();
        sum = sum.wrapping_add(read_all(&buf, threads));
        best = best.max((words * 8) as f64 / t0.elapsed().as_secs_f64());
    }
    buf[0] = sum;
    std::hint::black_box(&buf);
    best
}

/// Reads every word of `buf` on the pool (a wrapping sum, so the reads
/// cannot be dropped).
fn read_all(buf: &[u64], threads: Threads) -> u64 {
    let words = buf.len();
    let mut sums = vec![0u64; threads.get()];
    let per = words.div_ceil(threads.get());
    par_chunks(&mut sums, 1, threads, |i0, piece| {
        for (i, s) in piece.iter_mut().enumerate() {
            let part = &buf[((i0 + i) * per).min(words)..((i0 + i + 1) * per).min(words)];
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
    std::hint::black_box(sums.iter().fold(0, |a, &b| a.wrapping_add(b)))
}

/// A matmul rate over a set of weight matrices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MatmulRate {
    /// Activation rows per product (1: a decode step; many: prefill).
    pub n: usize,
    /// `2 × rows × cols × n` FLOPs per product, summed over the set, per second.
    pub flops_per_s: f64,
    /// Weight bytes the products read, per second.
    pub weight_bytes_per_s: f64,
}

/// Random `ty` weights of each `(rows, cols)` shape, interleaved as the
/// model loader does where the type has a packed form.
struct Matrices {
    ty: GgmlType,
    shapes: Vec<(usize, usize)>,
    data: Vec<Vec<u8>>,
    packed: Vec<Option<crate::quant::repack::Aligned>>,
}

impl Matrices {
    fn new(ty: GgmlType, shapes: &[(usize, usize)]) -> Result<Matrices> {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let (mut data, mut packed) = (Vec::new(), Vec::new());
        for &(rows, cols) in shapes {
            let src: Vec<f32> = (0..cols)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
                })
                .collect();
            let rb = ty.row_bytes(cols)?;
            let mut d = vec![0u8; rb * rows];
            for dst in d.chunks_exact_mut(rb) {
                // One random row repeated: the kernel's speed does not depend on values.
                quantize_row(ty, &src, dst)?;
            }
            packed.push(repack_x8(ty, &d, rows, cols));
            data.push(d);
        }
        Ok(Matrices {
            ty,
            shapes: shapes.to_vec(),
            data,
            packed,
        })
    }

    fn views(&self) -> Result<Vec<WeightMatrix<'_>>> {
        let mut v = Vec::new();
        for ((&(rows, cols), d), p) in self.shapes.iter().zip(&self.data).zip(&self.packed) {
            let w = WeightMatrix::new(self.ty, rows, cols, d)?;
            v.push(match p {
                Some(p) => w.with_packed(p)?,
                None => w,
            });
        }
        Ok(v)
    }

    fn bytes(&self) -> usize {
        self.data.iter().map(Vec::len).sum()
    }

    fn flops(&self, n: usize) -> f64 {
        self.shapes
            .iter()
            .map(|&(r, c)| 2.0 * (r * c * n) as f64)
            .sum()
    }
}

/// One product of every matrix in `ws` with `n` rows of activations.
fn products(ws: &[WeightMatrix<'_>], n: usize, threads: Threads) -> Result<f64> {
    let cols = ws.iter().map(|w| w.cols).max().unwrap_or(0);
    let rows = ws.iter().map(|w| w.rows).max().unwrap_or(0);
    let x: Vec<f32> = (0..n * cols)
        .map(|i| ((i % 97) as f32 - 48.0) / 64.0)
        .collect();
    let mut out = vec![0.0f32; n * rows];
    let t0 = Instant::now();
    for w in ws {
        matmul(w, &x[..n * w.cols], &mut out[..n * w.rows], threads)?;
    }
    std::hint::black_box(&out);
    Ok(t0.elapsed().as_secs_f64().max(1e-9))
}

/// The compute rate of [`matmul`] over `ty` matrices of `shapes` times
/// `n` activation rows, the median of repeated passes for about `budget`. The
/// matrices are reused pass after pass, so shapes that fit in the caches
/// measure compute rather than memory.
pub fn matmul_rate(
    ty: GgmlType,
    shapes: &[(usize, usize)],
    n: usize,
    threads: Threads,
    budget: Duration,
) -> Result<MatmulRate> {
    let m = Matrices::new(ty, shapes)?;
    let ws = m.views()?;
    let mid = median_pass(budget, 100_000, || products(&ws, n, threads))?;
    Ok(MatmulRate {
        n,
        flops_per_s: m.flops(n) / mid,
        weight_bytes_per_s: m.bytes() as f64 / mid,
    })
}

/// Weight bytes per second one-row products (a decode step's matmuls)
/// stream over copies of `ty` matrices of `shapes`, enough copies to make
/// at least `min_bytes` so that each pass reads from memory, not cache;
/// the median of `passes`.
pub fn stream_rate(
    ty: GgmlType,
    shapes: &[(usize, usize)],
    threads: Threads,
    min_bytes: usize,
    passes: usize,
) -> Result<f64> {
    let one = Matrices::new(ty, shapes)?;
    let copies = min_bytes.div_ceil(one.bytes().max(1)).max(2);
    let all: Vec<Matrices> = std::iter::once(Ok(one))
        .chain((1..copies).map(|_| Matrices::new(ty, shapes)))
        .collect::<Result<_>>()?;
    let mut ws = Vec::new();
    for m in &all {
        ws.extend(m.views()?);
    }
    let bytes: usize = all.iter().map(Matrices::bytes).sum();
    let mut times = Vec::new();
    for _ in 0..passes.max(1) {
        times.push(products(&ws, 1, threads)?);
    }
    Ok(bytes as f64 / median(&mut times))
}

/// The FLOP rate of causal prefill attention ([`attend_tile`], as the model
/// runs it: tiles of up to 8 consecutive tokens per KV head, split across
/// the pool by (KV head, token)) for one layer of `n_kv_heads` KV heads
/// shared by `group` query heads each, over a `prompt`-token cache stored
/// as `kv_type` (each type has its own tile kernel):
/// `4 × heads × head_dim × Σ positions` FLOPs (QKᵀ and AV) per pass, the
/// median of passes for about `budget`.
pub fn attention_rate(
    kv_type: KvType,
    head_dim: usize,
    group: usize,
    n_kv_heads: usize,
    prompt: usize,
    threads: Threads,
    budget: Duration,
) -> f64 {
    const TILE: usize = 8;
    let (hd, t) = (head_dim.max(1), prompt.max(1));
    let cache = ProbeCache::new(kv_type, hd, n_kv_heads, t);
    let (kv, table) = (cache.kv(n_kv_heads), cache.table());
    let gq = group * hd;
    let q: Vec<f32> = (0..t * gq)
        .map(|i| ((i % 37) as f32 - 18.0) / 16.0)
        .collect();
    let mut out = vec![0.0f32; n_kv_heads * t * gq];
    let pass = |out: &mut [f32]| {
        let t0 = Instant::now();
        par_chunks(out, gq, threads, |first, piece| {
            let items = piece.len() / gq;
            let mut i = 0;
            while i < items {
                let (kvh, j) = ((first + i) / t, (first + i) % t);
                let n = TILE.min(items - i).min(t - j);
                let need = tile_scores_len(n, group, j + 1);
                let view = HeadView::whole(kv, &table, kvh);
                let qt = &q[j * gq..(j + n) * gq];
                let o = &mut piece[i * gq..(i + n) * gq];
                with_scores(need, |sc| attend_tile(&view, qt, n, j + 1, sc, o));
                i += n;
            }
        });
        t0.elapsed().as_secs_f64().max(1e-9)
    };
    let mid = median_pass(budget, 10_000, || {
        Ok::<_, std::convert::Infallible>(pass(&mut out))
    })
    .unwrap_or_else(|e| match e {});
    std::hint::black_box(&out);
    let positions = (t * (t + 1) / 2) as f64;
    4.0 * (n_kv_heads * group * hd) as f64 * positions / mid
}

/// Seconds one parallel region takes when its work is nothing: the pool's
/// hand-off and join, what every region of a step costs on top of its
/// work (the median over passes of 2,000 regions).
pub fn region_seconds(threads: Threads, budget: Duration) -> f64 {
    let mut v = vec![0u64; threads.get() * 16];
    const N: usize = 2000;
    let mid = median_pass(budget, 50, || {
        let t0 = Instant::now();
        for i in 0..N {
            par_chunks(&mut v, 16, threads, |first, piece| {
                piece[0] = (first + i) as u64;
            });
        }
        Ok::<_, std::convert::Infallible>(t0.elapsed().as_secs_f64())
    })
    .unwrap_or_else(|e| match e {});
    std::hint::black_box(&v);
    mid / N as f64
}

thread_local! {
    /// Each pool thread's scores buffer, kept across passes as the model
    /// keeps its own (a buffer allocated per pass costs page faults under
    /// jemalloc, which hands freed pages back: a third of a 16k decode
    /// probe's time).
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's scores buffer of at least `len` values.
fn with_scores<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCORES.with(|sc| {
        let mut sc = sc.borrow_mut();
        if sc.len() < len {
            sc.resize(len, 0.0);
        }
        f(&mut sc[..len])
    })
}

/// The cache the attention probes read: `positions` rows per KV head in
/// blocks of 16 (block table in order), stored as `kv_type` (f16 where the
/// head does not fit its blocks), on huge pages where Linux grants them
/// (as the model's pool is).
struct ProbeCache {
    half: Vec<f16>,
    quant: Vec<u8>,
    kv_type: KvType,
    hd: usize,
    blocks: usize,
}

impl ProbeCache {
    const BLOCK: usize = 16;

    fn new(kv_type: KvType, hd: usize, n_kv_heads: usize, positions: usize) -> Self {
        let blocks = positions.div_ceil(Self::BLOCK);
        let values: Vec<f32> = (0..blocks * Self::BLOCK * n_kv_heads * hd)
            .map(|i| ((i % 61) as f32 - 30.0) / 32.0)
            .collect();
        let kv_type = if kv_type.fits(hd) {
            kv_type
        } else {
            KvType::F16
        };
        let (mut half, mut quant) = (Vec::new(), Vec::new());
        match kv_type {
            KvType::F16 => {
                half = vec![f16::ZERO; values.len()];
                crate::hugepages::advise(&mut half);
                for (h, &x) in half.iter_mut().zip(&values) {
                    *h = f16::from_f32(x);
                }
            }
            ty => {
                quant = vec![0u8; values.len() / hd * ty.row_bytes(hd)];
                crate::hugepages::advise(&mut quant);
                quantize_row(ty.ggml(), &values, &mut quant).expect("whole blocks");
            }
        }
        ProbeCache {
            half,
            quant,
            kv_type,
            hd,
            blocks,
        }
    }

    /// Another cache with the same rows in memory of its own (huge pages
    /// advised as in [`Self::new`]): a copy, not a second quantization.
    fn copy(&self) -> Self {
        let own = |src: &[u8]| {
            let mut v = vec![0u8; src.len()];
            crate::hugepages::advise(&mut v);
            v.copy_from_slice(src);
            v
        };
        let mut half = vec![f16::ZERO; self.half.len()];
        crate::hugepages::advise(&mut half);
        half.copy_from_slice(&self.half);
        ProbeCache {
            half,
            quant: own(&self.quant),
            ..*self
        }
    }

    fn rows(&self) -> KvRows<'_> {
        match self.kv_type {
            KvType::F16 => KvRows::F16(&self.half),
            ty => KvRows::Quant(ty, &self.quant),
        }
    }

    /// A pool with K and V both this cache's rows.
    fn kv(&self, n_kv_heads: usize) -> PagedKv<'_> {
        self.kv_with(self, n_kv_heads)
    }

    /// A pool with K this cache's rows and V `v`'s.
    fn kv_with<'a>(&'a self, v: &'a ProbeCache, n_kv_heads: usize) -> PagedKv<'a> {
        PagedKv {
            k: self.rows(),
            v: v.rows(),
            block_size: Self::BLOCK,
            n_kv_heads,
            head_dim: self.hd,
        }
    }

    fn table(&self) -> Vec<u32> {
        (0..self.blocks as u32).collect()
    }
}

/// FLOP/s of decode steps' attention: one query token (`group` query
/// heads per KV head) over `ctx` cached positions of `n_kv_heads` KV heads
/// stored as `kv_type`, spread over the threads as the model does (KV
/// heads, or ranges of the context merged by log-sum-exp when the heads
/// are fewer than the threads want), in each of `layers` layers with
/// their own K and V pools, one after another. A model's layer count reads
/// its whole cache per pass as a decode step does (from memory where it
/// outgrows the caches); one layer leaves it cache-resident: what
/// attention computes at, apart from streaming the cache. With `evict`
/// bytes, each timed pass follows an untimed read of a buffer that size,
/// as a step's attention follows its weights' stream: a cache that fits
/// in the last-level cache beside nothing else is not found there (the
/// 1.1B shape's 92 MiB f16 cache at 4k positions stayed partly resident
/// pass after pass, and predicted its attention at 0.7x of the step's).
#[allow(clippy::too_many_arguments)]
pub fn decode_attention_rate(
    kv_type: KvType,
    head_dim: usize,
    group: usize,
    n_kv_heads: usize,
    ctx: usize,
    layers: usize,
    evict: usize,
    threads: Threads,
    budget: Duration,
) -> f64 {
    use crate::attention_split::{attend_items_split, span_for, Item};
    let (hd, n, layers) = (head_dim.max(1), ctx.max(1), layers.max(1));
    let mut caches = vec![ProbeCache::new(kv_type, hd, n_kv_heads, n)];
    for _ in 1..2 * layers {
        caches.push(caches[0].copy());
    }
    let table = caches[0].table();
    let gq = group * hd;
    let q: Vec<f32> = (0..n_kv_heads * gq)
        .map(|i| ((i % 37) as f32 - 18.0) / 16.0)
        .collect();
    let mut out = vec![0.0f32; n_kv_heads * gq];
    let span = span_for(n_kv_heads, threads);
    let mut layer = |kv: PagedKv<'_>| {
        let item = |k: usize| Item {
            view: HeadView::whole(kv, &table, k),
            q: &q[k * gq..(k + 1) * gq],
            t: 1,
            n_ctx: n,
        };
        if let Some(span) = span {
            attend_items_split(n_kv_heads, group, hd, span, item, threads, &mut out);
        } else {
            par_chunks(&mut out, gq, threads, |first, piece| {
                with_scores(tile_scores_len(1, group, n), |sc| {
                    for (i, o) in piece.chunks_exact_mut(gq).enumerate() {
                        let it = item(first + i);
                        attend_tile(&it.view, it.q, 1, n, sc, o);
                    }
                })
            });
        }
    };
    let flush: Vec<u64> = (0..(evict / 8) as u64).collect();
    let mid = median_pass(budget, 10_000, || {
        read_all(&flush, threads);
        let t0 = Instant::now();
        for kv in caches.chunks_exact(2) {
            layer(kv[0].kv_with(&kv[1], n_kv_heads));
        }
        Ok::<_, std::convert::Infallible>(t0.elapsed().as_secs_f64().max(1e-9))
    })
    .unwrap_or_else(|e| match e {});
    std::hint::black_box(&out);
    4.0 * (layers * n_kv_heads * group * hd * n) as f64 / mid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_report_positive_finite_rates() {
        let t = Threads::new(2).unwrap();
        let bw = read_bandwidth(t, 1 << 20, 2);
        assert!(bw.is_finite() && bw > 1e6, "{bw}");
        let shapes = [(64, 256), (24, 64)];
        let r = matmul_rate(GgmlType::Q4_0, &shapes, 4, t, Duration::from_millis(5)).unwrap();
        assert_eq!(r.n, 4);
        assert!(r.flops_per_s.is_finite() && r.flops_per_s > 1e6);
        // Bytes over FLOPs: (64 × 8 + 24 × 2) blocks of 18 bytes per
        // 2 × (64 × 256 + 24 × 64) × 4 FLOPs.
        let ratio = r.weight_bytes_per_s / r.flops_per_s;
        let want = (64.0 * 8.0 + 24.0 * 2.0) * 18.0 / (2.0 * (64.0 * 256.0 + 24.0 * 64.0) * 4.0);
        assert!((ratio - want).abs() < 1e-9, "{ratio} vs {want}");
        let s = stream_rate(GgmlType::Q8_0, &shapes, t, 1 << 16, 2).unwrap();
        assert!(s.is_finite() && s > 1e6, "{s}");
        let d = decode_attention_rate(
            KvType::Q8_0,
            64,
            3,
            2,
            100,
            3,
            1 << 16,
            t,
            Duration::from_millis(5),
        );
        assert!(d.is_finite() && d > 1e6, "{d}");
        let a = attention_rate(KvType::F16, 64, 3, 2, 40, t, Duration::from_millis(5));
        assert!(a.is_finite() && a > 1e6, "{a}");
        // A row that is not a whole number of blocks is an error, not a panic.
        assert!(matmul_rate(GgmlType::Q4_0, &[(8, 30)], 1, t, Duration::ZERO).is_err());
    }
}
