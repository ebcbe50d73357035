//! What `hasten estimate --measure` times of a prefill layer apart from its
//! matmuls and attention (which have probes of their own in
//! `hasten_kernels::probe`): the RMS norms, RoPE, the KV cache writes, the
//! attention output's reordering, the SwiGLU gate and the residual adds,
//! each through the function [`Model`](super::Model)'s forward pass calls,
//! over a chunk of rows. On a 1.1B shape these were ~10% of a prefill's
//! compute that the FLOP rates alone left out.

use super::{gather_heads, norm_rows, par_elementwise, rope_rows, rope_tables, Scratch};
use super::{PAR_ADD, PAR_SILU};
use crate::config::Config;
use crate::kv::KvCache;
use crate::Result;
use hasten_kernels::attention::KvType;
use hasten_kernels::ops::{add_assign, silu_mul};
use hasten_kernels::probe::median_pass;
use hasten_kernels::threads::Threads;
use std::time::{Duration, Instant};

/// Seconds per token per layer that a plain Llama layer of `c`'s shapes
/// spends outside its matmuls and attention when it runs `rows` tokens at
/// once (a prefill chunk) on `threads`, its K and V stored as `kv`: the
/// median of passes for about `budget`.
pub fn elementwise_seconds(
    c: &Config,
    rows: usize,
    kv: KvType,
    threads: Threads,
    budget: Duration,
) -> Result<f64> {
    let t = rows.max(1);
    let (dim, qd, kvd, hd) = (c.dim, c.q_dim(), c.kv_dim(), c.head_dim);
    let gq = c.n_heads / c.n_kv_heads * hd;
    let mut cache = KvCache::with_type(c, t.div_ceil(16), 16, kv)?;
    let mut s = Scratch::new(c, t, 1);
    let rope = &rope_tables(c)[0];
    let pairs = rope.pairs();
    let mut angles = vec![(0.0, 0.0); t * pairs];
    for (j, a) in angles.chunks_exact_mut(pairs.max(1)).enumerate() {
        rope.angles(j, a);
    }
    let norm = vec![1.0f32; dim];
    let wave = |n: usize, k: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * k % 97) as f32 - 48.0) / 64.0)
            .collect()
    };
    let (x0, gate0) = (wave(t * dim, 7), wave(t * c.ffn_dim, 11));
    s.q[..t * qd].copy_from_slice(&wave(t * qd, 13));
    s.k[..t * kvd].copy_from_slice(&wave(t * kvd, 17));
    s.v[..t * kvd].copy_from_slice(&wave(t * kvd, 19));
    s.att_t[..t * qd].copy_from_slice(&wave(t * qd, 23));
    s.proj[..t * dim].copy_from_slice(&wave(t * dim, 29));
    s.up[..t * c.ffn_dim].copy_from_slice(&wave(t * c.ffn_dim, 31));
    let mut pass = || {
        // The residual stream and the gate start each pass afresh (the
        // gate shrinks towards subnormals pass after pass otherwise).
        s.x[..t * dim].copy_from_slice(&x0);
        s.gate[..t * c.ffn_dim].copy_from_slice(&gate0);
        let t0 = Instant::now();
        let (x, h) = (&mut s.x[..t * dim], &mut s.h[..t * dim]);
        norm_rows(x, &norm, c.norm_eps, h, dim, threads);
        rope_rows(rope, &mut s.q[..t * qd], qd, hd, &angles, threads);
        rope_rows(rope, &mut s.k[..t * kvd], kvd, hd, &angles, threads);
        for j in 0..t {
            let (k, v) = (&s.k[j * kvd..(j + 1) * kvd], &s.v[j * kvd..(j + 1) * kvd]);
            cache.store(0, j, k, v);
        }
        gather_heads(&s.att_t[..t * qd], &mut s.att[..t * qd], qd, gq, threads);
        par_elementwise(x, &s.proj[..t * dim], threads, PAR_ADD, add_assign);
        norm_rows(x, &norm, c.norm_eps, h, dim, threads);
        let (gate, up) = (&mut s.gate[..t * c.ffn_dim], &s.up[..t * c.ffn_dim]);
        par_elementwise(gate, up, threads, PAR_SILU, silu_mul);
        par_elementwise(x, &s.proj[..t * dim], threads, PAR_ADD, add_assign);
        Ok::<_, std::convert::Infallible>(t0.elapsed().as_secs_f64())
    };
    let mid = median_pass(budget, 10_000, &mut pass).unwrap_or_else(|e| match e {});
    std::hint::black_box(&s.x);
    Ok(mid / t as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_times_a_layer_of_any_shape() {
        let t = Threads::new(2).unwrap();
        // 3 KV heads of 64 shared by 2 query heads each; 40 rows (not a
        // multiple of the KV block), q8_0 rows.
        let c = Config::plain_llama(192, 1, (6, 3, 64), 320, 64).unwrap();
        for kv in [KvType::F16, KvType::Q8_0] {
            let s = elementwise_seconds(&c, 40, kv, t, Duration::from_millis(5)).unwrap();
            assert!(s.is_finite() && s > 0.0 && s < 1e-2, "{s}");
        }
        // A cache type the head dimension does not fit is an error.
        let odd = Config::plain_llama(60, 1, (2, 1, 30), 64, 64).unwrap();
        assert!(elementwise_seconds(&odd, 4, KvType::Q8_0, t, Duration::ZERO).is_err());
    }
}
