//! AVX2 causal attention of a tile (consecutive tokens x the query heads of
//! one KV head) over the paged f16 KV cache. K and V rows are widened (F16C)
//! eight at a time into an f32 block that serves every query row of the
//! tile; scores come eight positions per register (no per-score horizontal
//! sum), and the weighted sum keeps 64 output dimensions in registers.
//!
//! Softmax uses the polynomial `exp` of [`super::avx2`]. The AVX-512 tier
//! runs the same kernel compiled with AVX-512VL, whose 32 registers let each
//! widened K block serve two query rows per pass, and sums an f16 V in
//! 512-bit registers ([`super::avx512_attn_f16`]).
//!
//! Handed out by [`crate::cpu::Kernels::for_isa`] only after AVX2, FMA and
//! F16C (and, for [`attend_tile_avx512`], AVX-512 F/BW/VL) were detected:
//! the safety condition of the functions below.

#![allow(unsafe_code)]

use crate::attention::{attend_tile_reference, tile_scores_len};
use crate::rows::{HeadView, KvRows, KvType};
use std::arch::x86_64::*;

/// Widest head handled here (others take the reference).
const MAX_HEAD_DIM: usize = 256;
/// Cache rows widened per block.
pub(super) const ROWS: usize = 8;
/// Positions ahead of the block being computed whose rows are prefetched.
pub(super) const PREFETCH_AHEAD: usize = 2 * ROWS;

/// See [`crate::attention::attend_tile`].
pub fn attend_tile(
    view: &HeadView<'_>,
    q: &[f32],
    t: usize,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
    lse: Option<&mut [f32]>,
) {
    checked(
        view,
        q,
        t,
        n_ctx,
        scores,
        out,
        lse,
        |v, q, t, g, n, s, o, l| {
            // SAFETY: features detected by the kernel table; lengths checked by `checked`.
            unsafe { tile_impl(v, q, t, g, n, s, o, l) }
        },
    )
}

/// The AVX-512 tier's [`attend_tile`]: the same kernel compiled with
/// AVX-512VL (32 vector registers), scoring two query rows per pass over
/// each widened K block; over a Q8_0 or Q4_0 K cache, integer scores
/// ([`super::avx512_attn`]).
pub fn attend_tile_avx512(
    view: &HeadView<'_>,
    q: &[f32],
    t: usize,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
    lse: Option<&mut [f32]>,
) {
    checked(
        view,
        q,
        t,
        n_ctx,
        scores,
        out,
        lse,
        |v, q, t, g, n, s, o, l| match v.kv.k {
            // SAFETY (both arms): handed out by the kernel table only after
            // AVX-512 F/BW/VL/VNNI were detected; lengths checked by `checked`.
            KvRows::Quant(KvType::Q8_0 | KvType::Q4_0, k) if v.kv.head_dim.is_multiple_of(32) => unsafe {
                super::avx512_attn::tile_q8k(v, k, q, t, g, n, s, o, l)
            },
            // SAFETY: as for the arm above.
            // Chosen by the query heads per KV head, not by the tile's
            // rows: a row's scores must not depend on how many tokens
            // share its tile (a decode step against the same row in a
            // speculative verification pass or a prefill), since the two
            // kernels round differently.
            KvRows::F16(k)
                if v.kv.head_dim.is_multiple_of(16) && g >= super::avx512_scores_f16::MIN_ROWS =>
            unsafe { super::avx512_scores_f16::tile_f16k(v, k, q, t, g, n, s, o, l) },
            // SAFETY: as for the arm above.
            _ => unsafe { tile_impl_avx512(v, q, t, g, n, s, o, l) },
        },
    )
}

/// Checks the shapes a tile kernel relies on and runs `kernel`, or the
/// reference for shapes it does not handle.
#[allow(clippy::too_many_arguments)]
fn checked(
    view: &HeadView<'_>,
    q: &[f32],
    t: usize,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
    lse: Option<&mut [f32]>,
    kernel: impl Fn(
        &HeadView<'_>,
        &[f32],
        usize,
        usize,
        usize,
        &mut [f32],
        &mut [f32],
        Option<&mut [f32]>,
    ),
) {
    let hd = view.kv.head_dim;
    let g = q.len() / (t * hd).max(1);
    let n_last = n_ctx + t.max(1) - 1;
    let kv_rows = view.table.len() * view.kv.block_size;
    if hd == 0
        || !hd.is_multiple_of(8)
        || hd > MAX_HEAD_DIM
        || g == 0
        || t == 0
        || n_ctx == 0
        || n_last > kv_rows
        || scores.len() < tile_scores_len(t, g, n_ctx)
        || out.len() < t * g * hd
        || lse.as_ref().is_some_and(|l| l.len() < t * g)
    {
        return attend_tile_reference(view, q, t, n_ctx, scores, out, lse);
    }
    // Lengths checked above; cache rows are taken as bounds-checked slices inside.
    kernel(
        view,
        &q[..t * g * hd],
        t,
        g,
        n_ctx,
        scores,
        &mut out[..t * g * hd],
        lse,
    )
}

/// A tile's span of the cache: one past the last position any of its
/// `t` tokens sees (`n_last`), the stride of its scores rows (`w`:
/// `n_last` rounded up to 8) and the first position read (`start`: the
/// first token's window start rounded down to [`ROWS`]).
pub(super) fn tile_span(view: &HeadView<'_>, t: usize, n_ctx: usize) -> (usize, usize, usize) {
    let n_last = view.visible_end(n_ctx + t - 1);
    let start = view.first_visible(n_ctx) / ROWS * ROWS;
    (n_last, n_last.next_multiple_of(8), start)
}

/// Index of the cache row at each of the `n` positions from `p0`.
#[inline]
fn row_indices(view: &HeadView<'_>, p0: usize, n: usize) -> [usize; ROWS] {
    view.kv.row_indices::<ROWS>(view.table, p0, n, view.kvh)
}

/// Asks for the cache rows of the `n` positions from `p0` (K or V) to be
/// brought toward L1 while the current block is computed: a decode step
/// reads the whole cache once, row by row, at a stride the hardware
/// prefetcher loses at every page.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prefetch_rows(view: &HeadView<'_>, cache: KvRows<'_>, p0: usize, n: usize) {
    let hd = view.kv.head_dim;
    let (base, row_bytes) = match cache {
        KvRows::F16(c) => (c.as_ptr() as *const u8, 2 * hd),
        KvRows::Quant(ty, c) => (c.as_ptr(), ty.row_bytes(hd)),
    };
    let len = match cache {
        KvRows::F16(c) => 2 * c.len(),
        KvRows::Quant(_, c) => c.len(),
    };
    for &i in &row_indices(view, p0, n)[..n] {
        let (at, end) = (i * row_bytes, (i + 1) * row_bytes);
        if end > len {
            return;
        }
        let mut off = at;
        while off < end {
            // SAFETY: `off` lies inside the cache slice (checked above);
            // a prefetch reads nothing architecturally.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(base.add(off) as *const i8) };
            off += 64;
        }
    }
}

/// Widens up to [`ROWS`] cache rows starting at position `p0` of `cache`
/// (K or V, f16 or quantized) into `block`, zeroing the rows past `n_rows`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen_block(
    view: &HeadView<'_>,
    cache: KvRows<'_>,
    p0: usize,
    n_rows: usize,
    block: &mut [f32; ROWS * MAX_HEAD_DIM],
) {
    let hd = view.kv.head_dim;
    let rows = row_indices(view, p0, n_rows);
    for j in 0..ROWS {
        let dst = &mut block[j * hd..(j + 1) * hd];
        if j >= n_rows {
            dst.fill(0.0);
            continue;
        }
        let i = rows[j];
        match cache {
            KvRows::F16(c) => {
                let src = &c[i * hd..(i + 1) * hd];
                for (d, s) in dst.chunks_exact_mut(8).zip(src.chunks_exact(8)) {
                    // SAFETY: `s` holds 8 halfs (16 bytes) and `d` 8 floats.
                    unsafe {
                        let v = _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr() as *const __m128i));
                        _mm256_storeu_ps(d.as_mut_ptr(), v);
                    }
                }
            }
            KvRows::Quant(ty @ (KvType::Q8_0 | KvType::Q4_0), c) => {
                let rb = ty.row_bytes(hd);
                widen_quant(ty, &c[i * rb..(i + 1) * rb], dst);
            }
            KvRows::Quant(KvType::F16, _) => crate::attention::widen_row(cache, i, dst),
        }
    }
}

/// One Q8_0 or Q4_0 cache row (`src`, whole blocks of 32) widened into `dst`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen_quant(ty: KvType, src: &[u8], dst: &mut [f32]) {
    let bb = ty.ggml().block_bytes();
    for (b, d) in src.chunks_exact(bb).zip(dst.chunks_exact_mut(32)) {
        let scale = _mm256_set1_ps(crate::quant::read_f16(&b[..2]));
        let dp = d.as_mut_ptr();
        // SAFETY: `b` is one whole block (34 bytes for Q8_0, 18 for Q4_0),
        // so every 8-byte load below stays inside it; `d` holds 32 floats.
        unsafe {
            let q = b.as_ptr().add(2);
            match ty {
                KvType::Q4_0 => {
                    let (m4, eight) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(8));
                    for h in 0..2 {
                        let v =
                            _mm256_cvtepu8_epi32(_mm_loadl_epi64(q.add(8 * h) as *const __m128i));
                        let lo = _mm256_sub_epi32(_mm256_and_si256(v, m4), eight);
                        let hi = _mm256_sub_epi32(_mm256_srli_epi32::<4>(v), eight);
                        let (lo, hi) = (_mm256_cvtepi32_ps(lo), _mm256_cvtepi32_ps(hi));
                        _mm256_storeu_ps(dp.add(8 * h), _mm256_mul_ps(lo, scale));
                        _mm256_storeu_ps(dp.add(16 + 8 * h), _mm256_mul_ps(hi, scale));
                    }
                }
                KvType::Q8_0 | KvType::F16 => {
                    for c in 0..4 {
                        let v =
                            _mm256_cvtepi8_epi32(_mm_loadl_epi64(q.add(8 * c) as *const __m128i));
                        _mm256_storeu_ps(
                            dp.add(8 * c),
                            _mm256_mul_ps(_mm256_cvtepi32_ps(v), scale),
                        );
                    }
                }
            }
        }
    }
}

/// `[sum(a[0]), ..., sum(a[7])]`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn sums8(a: &[__m256; 8]) -> __m256 {
    let t0 = _mm256_hadd_ps(a[0], a[1]);
    let t1 = _mm256_hadd_ps(a[2], a[3]);
    let t2 = _mm256_hadd_ps(a[4], a[5]);
    let t3 = _mm256_hadd_ps(a[6], a[7]);
    let u0 = _mm256_hadd_ps(t0, t1);
    let u1 = _mm256_hadd_ps(t2, t3);
    _mm256_add_ps(
        _mm256_permute2f128_ps(u0, u1, 0x20),
        _mm256_permute2f128_ps(u0, u1, 0x31),
    )
}

/// Generates a tile kernel for a feature set, scoring `$r` query rows per
/// pass over a widened K block, so each block load serves `$r` rows.
macro_rules! tile_fn {
    ($name:ident, $feat:literal, $r:literal, $finish:path) => {
        /// # Safety
        /// Call only once the CPU's support for the features named in
        /// `target_feature` is known (the kernel table hands out the safe
        /// wrapper only then), with every slice covering what [`checked`]
        /// checked.
        #[target_feature(enable = $feat)]
        #[allow(clippy::int_plus_one)] // `r + $r <= rows` reads as "$r rows fit"
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            view: &HeadView<'_>,
            q: &[f32],
            t: usize,
            g: usize,
            n_ctx: usize,
            scores: &mut [f32],
            out: &mut [f32],
            lse: Option<&mut [f32]>,
        ) {
            super::align_frame!();
            let hd = view.kv.head_dim;
            let (n_last, w, start) = tile_span(view, t, n_ctx);
            let rows = t * g;
            // One past the last position query row `r` (token `r / g`) sees.
            let len = |r: usize| view.visible_end(n_ctx + r / g);
            let mut block = [0.0f32; ROWS * MAX_HEAD_DIM];

            // Scores: eight positions at a time for every query row that
            // sees them (a suffix of the rows: `len` grows with `r`).
            for p0 in (start..n_last).step_by(ROWS) {
                let next = p0 + PREFETCH_AHEAD;
                if next < n_last {
                    prefetch_rows(view, view.kv.k, next, (n_last - next).min(ROWS));
                }
                widen_block(view, view.kv.k, p0, (n_last - p0).min(ROWS), &mut block);
                let mut r = (0..rows).find(|&r| len(r) > p0).unwrap_or(rows);
                while r + $r <= rows {
                    // SAFETY: rows `r..r + $r` of `q` and their score rows exist.
                    unsafe { score_rows::<$r>(q, hd, &block, r, w, p0, view.scale, scores) };
                    r += $r;
                }
                for r in r..rows {
                    // SAFETY: as above, one row.
                    unsafe { score_rows::<1>(q, hd, &block, r, w, p0, view.scale, scores) };
                }
            }
            // SAFETY: as checked by `checked` (and, for the AVX-512
            // tile's finish, the features detected with the tier).
            unsafe { $finish(view, t, g, n_ctx, start, scores, out, lse) };
        }
    };
}

tile_fn!(tile_impl, "avx2,fma,f16c", 1, finish_tile);
tile_fn!(
    tile_impl_avx512,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
    2,
    super::avx512_attn_f16::finish_tile
);

/// The part of a tile after its scores: [`softmax_rows`], then the
/// weighted sum of V into `out`.
///
/// # Safety
/// The shapes [`checked`] checked; AVX2, FMA and F16C are available.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn finish_tile(
    view: &HeadView<'_>,
    t: usize,
    g: usize,
    n_ctx: usize,
    start: usize,
    scores: &mut [f32],
    out: &mut [f32],
    lse: Option<&mut [f32]>,
) {
    let n_last = view.visible_end(n_ctx + t - 1);
    let w = n_last.next_multiple_of(8);
    let len = |r: usize| view.visible_end(n_ctx + r / g);
    let mut block = [0.0f32; ROWS * MAX_HEAD_DIM];
    // SAFETY: as checked by `checked`.
    unsafe {
        softmax_rows(view, t, g, n_ctx, start, scores, lse);
        weighted_v(view, start, n_last, t * g, w, &len, &mut block, scores, out);
    }
}

/// Turns the scaled scores of each of the `t * g` query rows (row stride
/// `n_last` rounded up to 8, positions from `start`, a multiple of
/// [`ROWS`]) into softmax weights over the positions the row sees (soft
/// cap first where the view has one), zero elsewhere, writing each row's
/// log-sum-exp into `lse`.
///
/// # Safety
/// The shapes [`checked`] checked; AVX2, FMA and F16C are available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn softmax_rows(
    view: &HeadView<'_>,
    t: usize,
    g: usize,
    n_ctx: usize,
    start: usize,
    scores: &mut [f32],
    mut lse: Option<&mut [f32]>,
) {
    let w = view.visible_end(n_ctx + t - 1).next_multiple_of(8);
    for r in 0..t * g {
        let row = &mut scores[r * w..(r + 1) * w];
        let (lo, len) = (
            view.first_visible(n_ctx + r / g),
            view.visible_end(n_ctx + r / g),
        );
        if let Some(cap) = view.softcap {
            softcap8(&mut row[lo..len], cap);
        }
        let l = softmax8(&mut row[lo..len]);
        if let Some(lse) = lse.as_deref_mut() {
            lse[r] = l;
        }
        row[start..lo].fill(0.0);
        row[len..].fill(0.0);
    }
}

/// Scores of query rows `r..r + R` against the [`ROWS`] cache rows in
/// `block`, scaled, stored at `scores[(r + i) * w + p0..][..8]`.
///
/// # Safety
/// `q` holds rows `r..r + R` of `hd` floats, `block` [`ROWS`] rows of `hd`
/// (a multiple of 8), and `scores` the eight values of each row; AVX2 and
/// FMA are available.
#[inline]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn score_rows<const R: usize>(
    q: &[f32],
    hd: usize,
    block: &[f32; ROWS * MAX_HEAD_DIM],
    r: usize,
    w: usize,
    p0: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let (qp, bp) = (q.as_ptr(), block.as_ptr());
    let mut acc = [[_mm256_setzero_ps(); ROWS]; R];
    for c in 0..hd / 8 {
        // SAFETY: the caller's contract: rows `r..r + R` of `q`, every row of `block`.
        unsafe {
            let qv: [__m256; R] =
                std::array::from_fn(|i| _mm256_loadu_ps(qp.add((r + i) * hd + 8 * c)));
            for j in 0..ROWS {
                let kv = _mm256_loadu_ps(bp.add(j * hd + 8 * c));
                for i in 0..R {
                    acc[i][j] = _mm256_fmadd_ps(qv[i], kv, acc[i][j]);
                }
            }
        }
    }
    for (i, a) in acc.iter().enumerate() {
        let s = _mm256_mul_ps(sums8(a), _mm256_set1_ps(scale));
        // SAFETY: the caller's contract: 8 scores of row `r + i` at `p0`.
        unsafe { _mm256_storeu_ps(scores.as_mut_ptr().add((r + i) * w + p0), s) };
    }
}

/// Soft-capping `cap * tanh(s / cap)` with the polynomial `exp`, as
/// `cap * (1 - 2 / (exp(2s / cap) + 1))`, eight lanes at a time (a tail
/// padded with zeros, which stay 0).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn softcap8(x: &mut [f32], cap: f32) {
    let (k, c, one, two) = (
        _mm256_set1_ps(2.0 / cap),
        _mm256_set1_ps(cap),
        _mm256_set1_ps(1.0),
        _mm256_set1_ps(2.0),
    );
    let f = |v: __m256| {
        let e = super::avx2::exp8(_mm256_mul_ps(v, k));
        _mm256_mul_ps(
            c,
            _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(e, one))),
        )
    };
    let mut chunks = x.chunks_exact_mut(8);
    for ch in &mut chunks {
        // SAFETY: `ch` holds 8 floats.
        unsafe { _mm256_storeu_ps(ch.as_mut_ptr(), f(_mm256_loadu_ps(ch.as_ptr()))) };
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let mut pad = [0.0f32; 8];
        pad[..tail.len()].copy_from_slice(tail);
        // SAFETY: `pad` holds 8 floats.
        unsafe { _mm256_storeu_ps(pad.as_mut_ptr(), f(_mm256_loadu_ps(pad.as_ptr()))) };
        tail.copy_from_slice(&pad[..tail.len()]);
    }
}

/// The largest of `x` (`-inf` for none), eight lanes at a time.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn max8(x: &[f32]) -> f32 {
    let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        // SAFETY: `c` holds 8 floats.
        m = _mm256_max_ps(m, unsafe { _mm256_loadu_ps(c.as_ptr()) });
    }
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds 8 floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), m) };
    chunks
        .remainder()
        .iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

/// Softmax with the polynomial `exp` of the AVX2 tier, eight lanes at a
/// time (the tail padded with `-inf`, which contributes 0); returns the
/// log-sum-exp of the inputs (`-inf` for none).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn softmax8(x: &mut [f32]) -> f32 {
    let max = max8(x);
    let m = _mm256_set1_ps(max);
    let mut sum = _mm256_setzero_ps();
    let mut chunks = x.chunks_exact_mut(8);
    for c in &mut chunks {
        // SAFETY: `c` holds 8 floats.
        unsafe {
            let e = super::avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), m));
            sum = _mm256_add_ps(sum, e);
            _mm256_storeu_ps(c.as_mut_ptr(), e);
        }
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let mut pad = [f32::NEG_INFINITY; 8];
        pad[..tail.len()].copy_from_slice(tail);
        // SAFETY: `pad` holds 8 floats.
        unsafe {
            let e = super::avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(pad.as_ptr()), m));
            sum = _mm256_add_ps(sum, e);
            _mm256_storeu_ps(pad.as_mut_ptr(), e);
        }
        tail.copy_from_slice(&pad[..tail.len()]);
    }
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds 8 floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
    let total = lanes.iter().map(|&v| v as f64).sum::<f64>();
    let inv = 1.0 / total as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
    max + total.ln() as f32
}

/// The weighted sum of V over positions `start..n_last` (`start` a
/// multiple of [`ROWS`]): 64 output dimensions of one query row in
/// registers across each block of eight positions. `block` is the K
/// block's buffer, reused: `widen_block` rewrites every row it is read at.
///
/// # Safety
/// The shapes [`checked`] checked; AVX2, FMA and F16C are available.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn weighted_v(
    view: &HeadView<'_>,
    start: usize,
    n_last: usize,
    rows: usize,
    w: usize,
    len: &impl Fn(usize) -> usize,
    block: &mut [f32; ROWS * MAX_HEAD_DIM],
    scores: &[f32],
    out: &mut [f32],
) {
    let hd = view.kv.head_dim;
    let nv = hd / 8;
    out.fill(0.0);
    for p0 in (start..n_last).step_by(ROWS) {
        let next = p0 + PREFETCH_AHEAD;
        if next < n_last {
            prefetch_rows(view, view.kv.v, next, (n_last - next).min(ROWS));
        }
        widen_block(view, view.kv.v, p0, (n_last - p0).min(ROWS), block);
        let bp = block.as_ptr();
        for r in (0..rows).filter(|&r| len(r) > p0) {
            let sr = scores[r * w + p0..r * w + p0 + ROWS].as_ptr();
            let o = out[r * hd..(r + 1) * hd].as_mut_ptr();
            for c0 in (0..nv).step_by(8) {
                // SAFETY: `o` holds `hd = 8 * nv` floats, `sr` ROWS scores,
                // `block` ROWS rows of `hd` floats; each call touches the
                // `8 * n` dimensions from `8 * c0`.
                unsafe {
                    let (o, b) = (o.add(8 * c0), bp.add(8 * c0));
                    match nv - c0 {
                        1 => weighted_sum::<1>(o, sr, b, hd),
                        2 => weighted_sum::<2>(o, sr, b, hd),
                        3 => weighted_sum::<3>(o, sr, b, hd),
                        4 => weighted_sum::<4>(o, sr, b, hd),
                        5 => weighted_sum::<5>(o, sr, b, hd),
                        6 => weighted_sum::<6>(o, sr, b, hd),
                        7 => weighted_sum::<7>(o, sr, b, hd),
                        _ => weighted_sum::<8>(o, sr, b, hd),
                    }
                }
            }
        }
    }
}

/// `o[..8N] += sum_j s[j] * block[j][..8N]` over the [`ROWS`] rows of a
/// block (row stride `hd`), keeping the `N` output registers live.
///
/// # Safety
/// `o` and each of the ROWS rows at `b + j * hd` hold `8 * N` floats, `s`
/// holds ROWS floats; AVX2 and FMA are available.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn weighted_sum<const N: usize>(o: *mut f32, s: *const f32, b: *const f32, hd: usize) {
    // SAFETY: the caller's contract covers every access below.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); N];
        for (c, a) in acc.iter_mut().enumerate() {
            *a = _mm256_loadu_ps(o.add(8 * c));
        }
        for j in 0..ROWS {
            let w = _mm256_broadcast_ss(&*s.add(j));
            for (c, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(w, _mm256_loadu_ps(b.add(j * hd + 8 * c)), *a);
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(o.add(8 * c), *a);
        }
    }
}
