//! AVX-512 VNNI attention scores over a Q8_0 K cache, as llama.cpp scores
//! a `--cache-type-k q8_0` cache: each query row is quantized to Q8_0 and
//! every score is an integer dot product of two int8 rows, scaled by both
//! blocks' scales. A Q4_0 cache takes the same path, each group of sixteen
//! rows widened to the Q8_0 rows of the same values first
//! ([`crate::attention_q8::q4_0_as_q8_0`]), for K and for V.
//!
//! Sixteen cache positions are transposed in registers so that each
//! 32-bit lane of a 512-bit register holds four values of one position;
//! one `vpdpbusd` with a broadcast dword of the query then advances sixteen
//! scores of a query row at once, with no horizontal sums. The transpose
//! (24 shuffles per 32-value block of sixteen positions) is paid once for
//! all `t * group` query rows of the tile, where the float path widened
//! every K value to f32 and spent four FMAs per position and query row on
//! a 64-value head. The softmax here ([`softmax_and_sum`]) leaves the
//! weights unnormalized; over a Q8_0 or Q4_0 V the weighted sum is
//! [`super::avx512_attn_v`]'s, over an f16 V the float tile's.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes: the K bytes are made
//! unsigned by `xor 0x80` (adding 128), and each query block's sums start
//! at `-128 * sum(q)`.
//!
//! Reached only through the AVX-512 tier's attention tile, which the kernel
//! table hands out after AVX-512 F/BW/VL/VNNI were detected: the safety
//! condition of [`scores_q8`].

#![allow(unsafe_code)]

use super::avx512_attn_v::weighted_v_q8;
use super::avx512_rows::{block_scales, HeadRows, Wide, LANES, MAX_ROW};
use crate::attention_q8::{quantize_query_into, QuantQuery, BLOCK_BYTES, QK};
use crate::rows::{HeadView, KvRows, KvType};
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Scaled scores of `rows` quantized query rows (`qq`)
/// against the K rows `k` of `view` (Q8_0 or Q4_0) at positions `start..n_last`
/// (`start` a multiple of 8), stored at `scores[r * w + p]` with `w` the
/// row stride (`n_last` rounded up to 8). Rows are scored at every
/// position of the range; what a row does not see is overwritten by the
/// softmax that follows. `row_max[r]` gets the largest of row `r`'s scores
/// at `start..n_last` (what the softmax needs when the row sees exactly
/// those positions, as a decode row without a window does). `bufs` is
/// scratch (its contents do not matter).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI are available; `hd` is a multiple of 32 and at
/// most 256;
/// `qq` holds `rows` rows of `hd`, `scores` `rows * w` values, `row_max`
/// `rows`, and
/// `n_last` is at most the rows the view's block table covers.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scores_q8(
    view: &HeadView<'_>,
    k: &[u8],
    qq: &QuantQuery,
    rows: usize,
    start: usize,
    n_last: usize,
    w: usize,
    scores: &mut [f32],
    row_max: &mut [f32],
    bufs: &mut ScoreBufs,
) {
    let hd = view.kv.head_dim;
    let nb = hd / QK;
    let zero = [0u8; MAX_ROW];
    let head = HeadRows::new(view, view.kv.k.ty());
    let mut wide: Wide = [0; LANES * MAX_ROW];
    let flip = _mm512_set1_epi8(-128);
    let lo_idx = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    let hi_idx = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    let ScoreBufs { acc, max, neg } = bufs;
    // Partial scores of heads of more than two blocks.
    acc.clear();
    acc.resize(if nb > 2 { rows * LANES } else { 0 }, 0.0);
    max.clear();
    max.resize(rows, _mm512_set1_ps(f32::NEG_INFINITY));
    let mut ptr = [std::ptr::null(); LANES];
    let (q, qd) = (&qq.q[..rows * hd], &qq.d[..rows * nb]);
    // What the unsigned K adds to each block's dot product, taken off by
    // starting its sum there.
    neg.clear();
    neg.extend(
        qq.offset[..rows * nb]
            .iter()
            .map(|&o| _mm512_set1_epi32(-o)),
    );
    for p0 in (start..n_last).step_by(LANES) {
        head.rows(k, p0, n_last, &zero, &mut wide, &mut ptr);
        let store: __mmask16 = ((1u32 << (w - p0).min(LANES)) - 1) as u16;
        let real: __mmask16 = ((1u32 << (n_last - p0).min(LANES)) - 1) as u16;
        // Two blocks at a time: both transposed into registers, each
        // query row's two dot products in four independent sums.
        for b0 in (0..nb).step_by(2) {
            let pair = b0 + 1 < nb;
            // SAFETY: every pointer in `ptr` starts a whole row of `nb`
            // blocks (a bounds-checked slice of `k`, or `zero`).
            let (kt0, dk0) =
                unsafe { transpose_block(&ptr, b0 * BLOCK_BYTES, flip, lo_idx, hi_idx) };
            let (kt1, dk1) = if pair {
                // SAFETY: as above.
                unsafe { transpose_block(&ptr, (b0 + 1) * BLOCK_BYTES, flip, lo_idx, hi_idx) }
            } else {
                ([_mm512_setzero_si512(); 8], _mm512_setzero_ps())
            };
            let (first, last) = (b0 == 0, b0 + 2 >= nb);
            let kt = (&kt0, dk0, &kt1, dk1);
            let rs = RowScores {
                q,
                qd,
                neg,
                hd,
                nb,
                b0,
            };
            let out = (
                &mut acc[..],
                &mut max[..],
                &mut scores[p0..],
                w,
                store,
                real,
            );
            // SAFETY: `rs` holds `rows` rows; `acc` 16 floats per row where
            // a pair is not both first and last; `scores` rows of `w` from `p0`.
            unsafe {
                match (pair, first, last) {
                    (true, true, true) => score_rows::<true, true, true>(rows, kt, rs, out),
                    (true, true, false) => score_rows::<true, true, false>(rows, kt, rs, out),
                    (true, false, false) => score_rows::<true, false, false>(rows, kt, rs, out),
                    (true, false, true) => score_rows::<true, false, true>(rows, kt, rs, out),
                    // No pair: the head's odd last block, so the last.
                    (false, true, _) => score_rows::<false, true, true>(rows, kt, rs, out),
                    (false, false, _) => score_rows::<false, false, true>(rows, kt, rs, out),
                }
            }
        }
    }
    for (o, m) in row_max[..rows].iter_mut().zip(max.iter()) {
        *o = _mm512_reduce_max_ps(*m);
    }
}

/// The query side of [`score_rows`]: the quantized rows (`hd` values
/// each), their block scales and negated offsets (`nb` per row), and the
/// pair of blocks from `b0` being scored.
#[derive(Clone, Copy)]
struct RowScores<'a> {
    q: &'a [i8],
    qd: &'a [f32],
    neg: &'a [__m512i],
    hd: usize,
    nb: usize,
    b0: usize,
}

/// Each query row's scores against the transposed K blocks `b0` and
/// `b0 + 1` (`kt`: registers and scales of both; the second absent
/// without `PAIR`): the first pair of a row's blocks starts its partial
/// sum (`FIRST`), later ones add to it, and the last (`LAST`) stores the
/// row's scores at `p0` (the masked lanes of `store`) and takes their
/// maximum over the `real` lanes.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI are available; `rs` holds `rows` rows; `acc`
/// (`out.0`) holds 16 floats per row unless the pair is both `FIRST` and
/// `LAST`; `out.1` holds `rows` maxima; `out.2` holds `rows` rows of
/// stride `out.3` (`w - p0` lanes of each are written).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::type_complexity)]
unsafe fn score_rows<const PAIR: bool, const FIRST: bool, const LAST: bool>(
    rows: usize,
    kt: (&[__m512i; 8], __m512, &[__m512i; 8], __m512),
    rs: RowScores<'_>,
    out: (
        &mut [f32],
        &mut [__m512],
        &mut [f32],
        usize,
        __mmask16,
        __mmask16,
    ),
) {
    let (kt0, dk0, kt1, dk1) = kt;
    let (acc, max, scores, w, store, real) = out;
    let RowScores {
        q,
        qd,
        neg,
        hd,
        nb,
        b0,
    } = rs;
    let zero = _mm512_setzero_si512();
    for r in 0..rows {
        let o = r * nb + b0;
        // SAFETY: row `r`'s block b0 lies inside `q` (the caller's
        // contract: `rows` rows of `hd`).
        let qb = unsafe { q.as_ptr().add(r * hd + b0 * QK) } as *const i32;
        // SAFETY: dwords 0-7 (block b0) and 8-15 (block b0 + 1) of the row.
        let qw = |d: usize| _mm512_set1_epi32(unsafe { qb.add(d).read_unaligned() });
        // SAFETY: block b0 of row `r` (the caller's contract).
        let (n0, d0) = unsafe { (*neg.get_unchecked(o), *qd.get_unchecked(o)) };
        let mut c = [n0, zero];
        for d in 0..4 {
            c[0] = _mm512_dpbusd_epi32(c[0], kt0[d], qw(d));
            c[1] = _mm512_dpbusd_epi32(c[1], kt0[d + 4], qw(d + 4));
        }
        let s0 = _mm512_mul_ps(dk0, _mm512_set1_ps(d0));
        let mut f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(c[0], c[1])), s0);
        if PAIR {
            // SAFETY: block b0 + 1 of row `r` (a pair's second block).
            let (n1, d1) = unsafe { (*neg.get_unchecked(o + 1), *qd.get_unchecked(o + 1)) };
            let mut c = [n1, zero];
            for d in 0..4 {
                c[0] = _mm512_dpbusd_epi32(c[0], kt1[d], qw(8 + d));
                c[1] = _mm512_dpbusd_epi32(c[1], kt1[d + 4], qw(12 + d));
            }
            let s1 = _mm512_mul_ps(dk1, _mm512_set1_ps(d1));
            let x = _mm512_cvtepi32_ps(_mm512_add_epi32(c[0], c[1]));
            f = _mm512_fmadd_ps(x, s1, f);
        }
        // SAFETY: the caller's contract (`acc` only where not both first
        // and last; `store` keeps the store inside row `r`).
        unsafe {
            let a = acc.as_mut_ptr().wrapping_add(r * LANES);
            if !FIRST {
                f = _mm512_add_ps(_mm512_loadu_ps(a), f);
            }
            if LAST {
                let m = max.get_unchecked_mut(r);
                *m = _mm512_mask_max_ps(*m, real, *m, f);
                _mm512_mask_storeu_ps(scores.as_mut_ptr().add(r * w), store, f);
            } else {
                _mm512_storeu_ps(a, f);
            }
        }
    }
}

/// Block `off` (byte offset in the row) of the sixteen rows at `ptr`:
/// eight registers, register `d` holding dword `d` of the block's values
/// of each position (lane `j` = row `j`), made unsigned; and the block's
/// sixteen scales as floats.
///
/// # Safety
/// Each `ptr[j] + off` starts a whole Q8_0 block; AVX-512 F/BW are
/// available.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn transpose_block(
    ptr: &[*const u8; LANES],
    off: usize,
    flip: __m512i,
    lo_idx: __m512i,
    hi_idx: __m512i,
) -> ([__m512i; 8], __m512) {
    // SAFETY: the caller's contract: 2 + 32 bytes from each `ptr[j] + off`.
    unsafe {
        let load = |j: usize| _mm256_loadu_si256(ptr[j].add(off + 2) as *const __m256i);
        // Row j in the low half, row j + 8 in the high half.
        let z: [__m512i; 8] = std::array::from_fn(|j| {
            let v = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(load(j)), load(j + 8));
            _mm512_xor_si512(v, flip)
        });
        let t: [__m512i; 8] = std::array::from_fn(|i| {
            let (a, b) = (z[i & !1], z[i | 1]);
            if i % 2 == 0 {
                _mm512_unpacklo_epi32(a, b)
            } else {
                _mm512_unpackhi_epi32(a, b)
            }
        });
        // u[k] (k < 4): dword k (lanes 0, 2) and k + 4 (lanes 1, 3) of rows
        // 0-3 and 8-11; u[k + 4] the same of rows 4-7 and 12-15.
        let u: [__m512i; 8] = std::array::from_fn(|k| {
            let base = if k < 4 { 0 } else { 4 };
            let (a, b) = (t[base + (k % 4) / 2], t[base + 2 + (k % 4) / 2]);
            if k % 2 == 0 {
                _mm512_unpacklo_epi64(a, b)
            } else {
                _mm512_unpackhi_epi64(a, b)
            }
        });
        let kt = std::array::from_fn(|d| {
            let idx = if d < 4 { lo_idx } else { hi_idx };
            _mm512_permutex2var_epi64(u[d % 4], idx, u[d % 4 + 4])
        });
        (kt, block_scales(ptr, off))
    }
}

/// The AVX-512 tile over a Q8_0 or Q4_0 K cache (`k`): [`scores_q8`], then
/// over a Q8_0 or Q4_0 V cache [`softmax_and_sum`] with [`weighted_v_q8`]
/// (the float tile's softmax and V sum otherwise).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI are available; the shapes `checked` in
/// [`super::avx2_attn`] checks hold and `hd` is a multiple of 32.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile_q8k(
    view: &HeadView<'_>,
    k: &[u8],
    q: &[f32],
    t: usize,
    g: usize,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
    lse: Option<&mut [f32]>,
) {
    let (n_last, w, start) = super::avx2_attn::tile_span(view, t, n_ctx);
    let (hd, rows) = (view.kv.head_dim, t * g);
    SCRATCH.with(|cell| {
        let mut guard = cell.borrow_mut();
        let Scratch {
            qq,
            row_max,
            seen,
            bufs,
        } = &mut *guard;
        quantize_query_into(q, rows, hd, view.scale, qq);
        row_max.clear();
        row_max.resize(rows, 0.0);
        // SAFETY: the caller's contract.
        unsafe {
            scores_q8(view, k, qq, rows, start, n_last, w, scores, row_max, bufs);
            match view.kv.v {
                KvRows::Quant(KvType::Q8_0 | KvType::Q4_0, v) => {
                    let rm = Some(&row_max[..]);
                    // The positions each row sees, as the softmax takes them.
                    seen.clear();
                    seen.extend((0..rows).map(|r| {
                        let n = n_ctx + r / g;
                        (view.first_visible(n), view.visible_end(n))
                    }));
                    softmax_and_sum(view, t, g, n_ctx, start, rm, scores, lse, out, |s, o| {
                        weighted_v_q8(view, v, s, &seen[..], start, n_last, w, o)
                    })
                }
                _ => super::avx2_attn::finish_tile(view, t, g, n_ctx, start, scores, out, lse),
            }
        }
    })
}

/// The registers and partial sums [`scores_q8`] keeps per query row.
#[derive(Default)]
pub(crate) struct ScoreBufs {
    acc: Vec<f32>,
    max: Vec<__m512>,
    neg: Vec<__m512i>,
}

impl ScoreBufs {
    const fn new() -> Self {
        ScoreBufs {
            acc: Vec::new(),
            max: Vec::new(),
            neg: Vec::new(),
        }
    }
}

/// What [`tile_q8k`] refills on each call rather than allocates: a split
/// decode step calls it once per piece of each KV head's context.
struct Scratch {
    qq: QuantQuery,
    row_max: Vec<f32>,
    seen: Vec<(usize, usize)>,
    bufs: ScoreBufs,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch {
            qq: QuantQuery::new(),
            row_max: Vec::new(),
            seen: Vec::new(),
            bufs: ScoreBufs::new(),
        })
    };
}

/// The softmax of the tile's scores, then `sum_v(weights, out)`: where it
/// can, the softmax leaves the weights unnormalized ([`softmax_rows`]) and
/// each output row is scaled by its `1 / sum` after the sum; soft-capped
/// layers take the AVX2 tier's normalizing softmax. `row_max` as
/// [`softmax_rows`] takes it.
///
/// # Safety
/// AVX-512 F/BW/VL are available; the shapes `checked` in
/// [`super::avx2_attn`] checks hold; `row_max`, where given, holds `t * g`
/// values.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn softmax_and_sum(
    view: &HeadView<'_>,
    t: usize,
    g: usize,
    n_ctx: usize,
    start: usize,
    row_max: Option<&[f32]>,
    scores: &mut [f32],
    lse: Option<&mut [f32]>,
    out: &mut [f32],
    sum_v: impl FnOnce(&mut [f32], &mut [f32]),
) {
    let (hd, rows) = (view.kv.head_dim, t * g);
    if view.softcap.is_some() {
        // SAFETY: the caller's contract.
        unsafe { super::avx2_attn::softmax_rows(view, t, g, n_ctx, start, scores, lse) };
        return sum_v(scores, out);
    }
    // Every tile size takes this path: a row's bits must not depend on how
    // many rows share its tile (a decode step's against a verification's).
    let (mut stack, mut heap) = ([1.0f32; STACK_ROWS], Vec::new());
    let norm = if rows <= STACK_ROWS {
        &mut stack[..rows]
    } else {
        heap.resize(rows, 1.0f32);
        &mut heap[..]
    };
    // SAFETY: the caller's contract.
    unsafe { softmax_rows(view, t, g, n_ctx, start, row_max, scores, lse, norm) };
    sum_v(scores, out);
    for (o, &n) in out.chunks_exact_mut(hd).zip(norm.iter()) {
        o.iter_mut().for_each(|x| *x *= n);
    }
}

/// Query rows whose normalization factors a tile keeps on the stack.
const STACK_ROWS: usize = 64;

/// The softmax of each query row's visible scores, as
/// [`super::avx2_attn::softmax_rows`] computes it but in 512-bit vectors
/// and one pass fewer: a row keeps `exp(s - max)` (its largest weight is
/// 1, which the V sum's weight quantization needs no better), and
/// `norm[r]` gets the `1 / sum` its V sum is multiplied by afterwards (0
/// for a row that sees nothing). Positions a row does not see are 0;
/// `lse` gets each row's log-sum-exp. No soft-capping. Given `row_max`
/// ([`scores_q8`]'s), a row that sees exactly the scored positions
/// `start..` takes its largest score from there rather than a pass of its
/// own.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI are available; `scores` holds `t * g` rows of the tile's
/// stride, `norm` (and `row_max` where given) `t * g` values.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn softmax_rows(
    view: &HeadView<'_>,
    t: usize,
    g: usize,
    n_ctx: usize,
    start: usize,
    row_max: Option<&[f32]>,
    scores: &mut [f32],
    mut lse: Option<&mut [f32]>,
    norm: &mut [f32],
) {
    use super::avx512::exp16_neg;
    let n_last = view.visible_end(n_ctx + t - 1);
    let w = n_last.next_multiple_of(8);
    for r in 0..t * g {
        let row = &mut scores[r * w..(r + 1) * w];
        let (lo, len) = (
            view.first_visible(n_ctx + r / g),
            view.visible_end(n_ctx + r / g),
        );
        let x = &mut row[lo..len];
        let tail = (x.len() % 16) as u32;
        let tail_mask = ((1u32 << tail) - 1) as __mmask16;
        let body = x.len() - tail as usize;
        let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
        let max = if let Some(m) = row_max.filter(|_| (lo, len) == (start, n_last)) {
            m[r]
        } else {
            let mut m = ninf;
            // SAFETY: every load is of 16 floats inside `x` (the tail's
            // masked to its length).
            unsafe {
                for i in (0..body).step_by(16) {
                    m = _mm512_max_ps(m, _mm512_loadu_ps(x.as_ptr().add(i)));
                }
                m = _mm512_max_ps(
                    m,
                    _mm512_mask_loadu_ps(ninf, tail_mask, x.as_ptr().add(body)),
                );
            }
            _mm512_reduce_max_ps(m)
        };
        let mv = _mm512_set1_ps(max);
        let mut sum = _mm512_setzero_ps();
        // SAFETY: as above.
        unsafe {
            for i in (0..body).step_by(16) {
                let e = exp16_neg(_mm512_sub_ps(_mm512_loadu_ps(x.as_ptr().add(i)), mv));
                sum = _mm512_add_ps(sum, e);
                _mm512_storeu_ps(x.as_mut_ptr().add(i), e);
            }
            if tail > 0 {
                let v = _mm512_mask_loadu_ps(ninf, tail_mask, x.as_ptr().add(body));
                let e = _mm512_maskz_mov_ps(tail_mask, exp16_neg(_mm512_sub_ps(v, mv)));
                sum = _mm512_add_ps(sum, e);
                _mm512_mask_storeu_ps(x.as_mut_ptr().add(body), tail_mask, e);
            }
        }
        let total = _mm512_reduce_add_ps(sum);
        norm[r] = if total > 0.0 { 1.0 / total } else { 0.0 };
        if let Some(lse) = lse.as_deref_mut() {
            lse[r] = if x.is_empty() {
                f32::NEG_INFINITY
            } else {
                max + total.ln()
            };
        }
        row[start..lo].fill(0.0);
        row[len..].fill(0.0);
    }
}

#[cfg(test)]
mod tests {
    use crate::attention_q8::test_cache::{Cache, SHAPES};
    use crate::attention_q8::{quantize_query, scores_reference};
    use crate::rows::KvType;

    /// The cache types the integer tile reads.
    const TYPES: [KvType; 2] = [KvType::Q8_0, KvType::Q4_0];

    fn avx512() -> bool {
        crate::cpu::tiers().contains(&crate::cpu::Isa::Avx512)
    }

    #[test]
    fn simd_scores_equal_the_reference() {
        if !avx512() {
            return;
        }
        for ((bs, nkv, hd, n_last, start), ty) in
            SHAPES.into_iter().flat_map(|s| TYPES.map(|t| (s, t)))
        {
            let c = Cache::with_type(n_last.div_ceil(bs) + 1, bs, nkv, hd, start, 0.1, ty);
            let view = c.view();
            let rows = 5;
            let q: Vec<f32> = (0..rows * hd)
                .map(|i| (i as f32 * 0.7).cos() * 2.0)
                .collect();
            let qq = quantize_query(&q, rows, hd, view.scale);
            let w = n_last.next_multiple_of(8);
            let (mut want, mut got) = (vec![f32::NAN; rows * w], vec![f32::NAN; rows * w]);
            scores_reference(&view, &c.bytes, &qq, rows, start, n_last, w, &mut want);
            let mut max = vec![f32::NAN; rows];
            // SAFETY: AVX-512 VNNI detected; shapes as the kernel requires.
            unsafe {
                super::scores_q8(
                    &view,
                    &c.bytes,
                    &qq,
                    rows,
                    start,
                    n_last,
                    w,
                    &mut got,
                    &mut max,
                    &mut Default::default(),
                )
            };
            for r in 0..rows {
                let want_max = want[r * w + start..r * w + n_last]
                    .iter()
                    .fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                assert!((max[r] - want_max).abs() <= 1e-5 * (1.0 + want_max.abs()));
                for p in start..n_last {
                    let (a, b) = (got[r * w + p], want[r * w + p]);
                    assert!(
                        (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "{ty:?} hd={hd} n={n_last} row {r} pos {p}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
