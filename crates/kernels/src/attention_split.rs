//! Split-context attention (flash-decoding): the positions one query tile
//! attends to are cut into ranges, each range is attended on its own
//! thread (the tier's tile kernel over a [`HeadView`] limited to the range,
//! which also reports each query row's log-sum-exp), and the pieces are
//! merged exactly:
//!
//! `out = sum_i exp(lse_i - L) * out_i`, `L = log sum_i exp(lse_i)`,
//!
//! where `out_i` is piece `i`'s softmax-weighted sum of V. A decode step
//! has one work item per (KV head, token); when the KV heads do not divide
//! among the threads (4 KV heads on 3 threads, 1 on 16), pieces of the
//! context keep every thread busy at any head count.
//!
//! The cut is canonical: pieces end at multiples of one span per process
//! ([`span_for`]: the model's KV heads and the thread count decide it),
//! whatever the step holds. A token's pieces, and so its bits, are the same
//! in a decode step of one sequence, a batch, a prefill tile or a
//! speculative verification (a piece a row sees nothing of adds exactly
//! nothing to its merge); cuts sized by the step's own work gave a decode
//! step other bits than a verification of the same token.
//!
//! This module owns the cut, the parallel run and the merge; which items
//! there are (block tables, queries, context lengths) is the caller's.

use crate::attention::{attend_tile_lse, tile_scores_len};
use crate::rows::HeadView;
use crate::threads::{par_chunks, Threads};
use std::cell::RefCell;

/// Shortest span worth a thread of its own: below it the merge and the
/// fixed cost of a tile outweigh the work.
pub const MIN_PIECE: usize = 256;
/// Spans are multiples of this (the tile kernels read the cache eight
/// positions at a time, the integer V sum 64).
const ALIGN: usize = 64;
/// Positions of one KV head's context shared among the threads per span:
/// 2 threads cut at 2,048 positions, 16 at [`MIN_PIECE`]. (At 1,024 the
/// 135M shape's 16k-deep decode step was 3% slower than with the old
/// per-step cut, at 2,048 as fast: each piece is a tile call.)
const SPAN_WORK: usize = 4096;

/// The span at whose multiples every tile's context is cut, for a model of
/// `n_kv_heads` KV heads run on `threads`: `None` (never cut) on one
/// thread, or where a decode step's KV heads alone keep the threads busy
/// (a multiple of them, or at least four per thread).
pub fn span_for(n_kv_heads: usize, threads: Threads) -> Option<usize> {
    let th = threads.get();
    if th == 1 || n_kv_heads >= 4 * th || n_kv_heads.is_multiple_of(th) {
        return None;
    }
    Some((SPAN_WORK / th).max(MIN_PIECE).next_multiple_of(ALIGN))
}

/// The pieces of positions `lo..hi` cut at multiples of `span`: the first
/// piece's index (`lo / span`) and their count (one, empty, when `hi <= lo`).
pub fn pieces(lo: usize, hi: usize, span: usize) -> (usize, usize) {
    let first = lo / span;
    (first, hi.saturating_sub(1).max(lo) / span + 1 - first)
}

/// Piece `k` (an absolute index, see [`pieces`]) of positions `lo..hi`.
pub fn piece_range(lo: usize, hi: usize, span: usize, k: usize) -> (usize, usize) {
    ((k * span).max(lo), ((k + 1) * span).min(hi).max(lo))
}

/// Merges `pieces` partial results of `rows` query rows of `hd` values:
/// `parts[i * stride..]` holds piece `i`'s normalized outputs then its
/// `rows` log-sum-exps. Rows no piece saw anything for come out zero; a
/// piece a row saw nothing of (log-sum-exp -inf) changes nothing of it.
pub fn merge(parts: &[f32], stride: usize, pieces: usize, rows: usize, hd: usize, out: &mut [f32]) {
    for r in 0..rows {
        let lse = |i: usize| parts[i * stride + rows * hd + r];
        let top = (0..pieces).map(lse).fold(f32::NEG_INFINITY, f32::max);
        let o = &mut out[r * hd..(r + 1) * hd];
        o.fill(0.0);
        if top == f32::NEG_INFINITY {
            continue;
        }
        let weight = |i: usize| ((lse(i) - top) as f64).exp();
        let total: f64 = (0..pieces).map(weight).sum();
        for i in 0..pieces {
            let w = (weight(i) / total) as f32;
            if w == 0.0 {
                continue;
            }
            let part = &parts[i * stride + r * hd..i * stride + (r + 1) * hd];
            for (a, b) in o.iter_mut().zip(part) {
                *a += w * b;
            }
        }
    }
}

/// One work item of [`attend_items_split`]: a KV head's view of one
/// sequence, its query rows (`t * group * head_dim`, tokens outermost),
/// the tile's token count and the first token's context length.
pub struct Item<'a> {
    pub view: HeadView<'a>,
    pub q: &'a [f32],
    pub t: usize,
    pub n_ctx: usize,
}

impl Item<'_> {
    /// The positions the item's tokens see, together.
    fn seen(&self) -> (usize, usize) {
        (
            self.view.first_visible(self.n_ctx),
            self.view.visible_end(self.n_ctx + self.t - 1),
        )
    }
}

thread_local! {
    /// Per-thread scores scratch of the piece tiles.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The caller's buffer of pieces' partial results.
    static PARTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The pieces of the item [`attend_item_cut`] has in flight.
    static ITEM_PARTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Piece `rel` (counted from the item's first) of `it`'s context cut at
/// multiples of `span`: the normalized outputs of its `t * group` rows
/// into `o`, their log-sum-exps into `lse`. `last` marks the item's last
/// piece, which also holds the tile's later tokens.
#[allow(clippy::too_many_arguments)]
fn attend_range(
    it: &Item<'_>,
    group: usize,
    span: usize,
    rel: usize,
    last: bool,
    sc: &mut Vec<f32>,
    o: &mut [f32],
    lse: &mut [f32],
) {
    let (lo, hi) = it.seen();
    let (from, until) = piece_range(lo, hi, span, pieces(lo, hi, span).0 + rel);
    let until = if last { usize::MAX } else { until };
    let view = HeadView {
        from: from.max(it.view.from),
        until: until.min(it.view.until),
        ..it.view
    };
    let need = tile_scores_len(it.t, group, it.n_ctx);
    if sc.len() < need {
        sc.resize(need, 0.0);
    }
    attend_tile_lse(&view, it.q, it.t, it.n_ctx, &mut sc[..need], o, lse);
}

/// One item attended piece by piece on this thread and merged into `out`
/// (`t * group` rows of `hd`): the same bits as [`attend_items_split`]
/// gives it, for steps whose items alone keep the threads busy (a prefill,
/// a batch).
pub fn attend_item_cut(it: &Item<'_>, group: usize, hd: usize, span: usize, out: &mut [f32]) {
    let (lo, hi) = it.seen();
    let n = pieces(lo, hi, span).1;
    let rows = it.t * group;
    let unit = rows * (hd + 1);
    if n == 1 {
        // What the merge of one piece gives: its outputs (`+ 0.0` makes a
        // -0 the merge's +0).
        SCORES.with(|sc| {
            let (mut stack, mut heap) = ([0.0f32; 256], Vec::new());
            let lse = if rows <= stack.len() {
                &mut stack[..rows]
            } else {
                heap.resize(rows, 0.0);
                &mut heap[..]
            };
            let o = &mut out[..rows * hd];
            attend_range(it, group, span, 0, true, &mut sc.borrow_mut(), o, lse);
            o.iter_mut().for_each(|x| *x += 0.0);
        });
        return;
    }
    SCORES.with(|sc| {
        ITEM_PARTS.with(|parts| {
            let (mut sc, mut parts) = (sc.borrow_mut(), parts.borrow_mut());
            parts.clear();
            parts.resize(n * unit, 0.0);
            for (i, part) in parts.chunks_exact_mut(unit).enumerate() {
                let (o, lse) = part.split_at_mut(rows * hd);
                attend_range(it, group, span, i, i + 1 == n, &mut sc, o, &mut lse[..rows]);
            }
            merge(&parts, unit, n, rows, hd, &mut out[..rows * hd]);
        })
    })
}

/// Attention of `items` work items (`item(k)` describes item `k`), each
/// cut at multiples of `span` ([`pieces`]), all pieces' tiles spread over
/// `threads` and merged into `out`: item `k`'s `t * group` rows of `hd`
/// values follow item `k - 1`'s.
pub fn attend_items_split<'a>(
    items: usize,
    group: usize,
    hd: usize,
    span: usize,
    item: impl Fn(usize) -> Item<'a> + Sync,
    threads: Threads,
    out: &mut [f32],
) {
    // Item k's pieces are units first[k]..first[k + 1].
    let mut first = Vec::with_capacity(items + 1);
    let (mut units, mut max_rows) = (0, 0);
    for k in 0..items {
        let it = item(k);
        let (lo, hi) = it.seen();
        first.push(units);
        units += pieces(lo, hi, span).1;
        max_rows = max_rows.max(it.t * group);
    }
    first.push(units);
    let unit = max_rows * (hd + 1);
    PARTS.with(|parts| {
        let mut parts = parts.borrow_mut();
        parts.clear();
        parts.resize(units * unit, 0.0);
        par_chunks(&mut parts[..], unit, threads, |first_unit, chunk| {
            SCORES.with(|sc| {
                let mut sc = sc.borrow_mut();
                for (u, part) in chunk.chunks_exact_mut(unit).enumerate() {
                    let u = first_unit + u;
                    let k = first.partition_point(|&f| f <= u) - 1;
                    let (rel, last) = (u - first[k], u + 1 == first[k + 1]);
                    let it = item(k);
                    let rows = it.t * group;
                    let (o, lse) = part.split_at_mut(rows * hd);
                    attend_range(&it, group, span, rel, last, &mut sc, o, &mut lse[..rows]);
                }
            })
        });
        let mut at = 0;
        for k in 0..items {
            let rows = item(k).t * group;
            let p = &parts[first[k] * unit..first[k + 1] * unit];
            let n = first[k + 1] - first[k];
            merge(p, unit, n, rows, hd, &mut out[at..at + rows * hd]);
            at += rows * hd;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::attend_tile_reference;
    use crate::cpu::Kernels;
    use crate::rows::{KvRows, PagedKv};
    use half::f16;

    #[test]
    fn contexts_are_cut_only_when_kv_heads_do_not_keep_threads_busy() {
        let t = |n| Threads::new(n).unwrap();
        assert_eq!(span_for(4, t(2)), None);
        assert_eq!(span_for(3, t(2)), Some(2048));
        assert_eq!(span_for(1, t(16)), Some(MIN_PIECE));
        assert_eq!(span_for(4, t(3)), Some(1408));
        assert_eq!(span_for(64, t(16)), None);
        assert_eq!(span_for(5, t(1)), None);
    }

    #[test]
    fn piece_ranges_cover_the_context_once() {
        for (lo, hi, span) in [
            (0, 1, 64),
            (0, 40_000, 1024),
            (100, 5_000, 256),
            (3, 70, 64),
            (5, 5, 64),
        ] {
            let (k0, n) = pieces(lo, hi, span);
            assert!(n >= 1);
            let mut next = lo;
            for k in k0..k0 + n {
                let (a, b) = piece_range(lo, hi, span, k);
                assert_eq!(a, next);
                assert!(a <= b && b <= hi.max(lo));
                assert!(k == k0 || a % span == 0);
                next = b;
            }
            assert_eq!(next, hi.max(lo));
        }
    }

    /// Split attention equals the unsplit reference for short and very
    /// long contexts, every piece count and thread count 1..16, with a
    /// window, soft cap and several tokens per tile, through this CPU's tile kernel (each
    /// tier's range and log-sum-exp are checked below).
    #[test]
    fn split_attention_equals_the_reference() {
        let (bs, hd, g) = (16, 64, 4);
        let n_max = 40_000;
        let n_blocks = (n_max + 8) / bs + 1;
        let val = |i: usize, s: f32| f16::from_f32(((i * 37 % 1009) as f32 * s).sin());
        let ks: Vec<f16> = (0..n_blocks * bs * hd).map(|i| val(i, 0.013)).collect();
        let vs: Vec<f16> = (0..n_blocks * bs * hd).map(|i| val(i, 0.029)).collect();
        // Blocks in reverse order: the paged layout stays in play.
        let table: Vec<u32> = (0..n_blocks as u32).rev().collect();
        let kv = PagedKv {
            k: KvRows::F16(&ks),
            v: KvRows::F16(&vs),
            block_size: bs,
            n_kv_heads: 1,
            head_dim: hd,
        };
        let isa = crate::cpu::kernels().isa;
        {
            for (n_ctx, t, window, softcap) in [
                (1, 1, None, None),
                (7, 1, None, None),
                (300, 1, None, Some(5.0)),
                (1_000, 3, None, None),
                (4_097, 1, Some(1_500), None),
                (n_max, 1, None, None),
            ] {
                let q: Vec<f32> = (0..t * g * hd).map(|i| (i as f32 * 0.37).cos()).collect();
                let view = HeadView {
                    kv,
                    table: &table,
                    kvh: 0,
                    scale: 0.125,
                    window,
                    softcap,
                    from: 0,
                    until: usize::MAX,
                };
                let mut scores = vec![0.0; tile_scores_len(t, g, n_ctx)];
                let mut want = vec![0.0; t * g * hd];
                attend_tile_reference(&view, &q, t, n_ctx, &mut scores, &mut want, None);
                let spans: Vec<usize> = if n_ctx == n_max {
                    vec![20_032, 2_560]
                } else {
                    (1..=16).map(|k| k * 64).collect()
                };
                for (j, span) in spans.into_iter().enumerate() {
                    let mut got = vec![f32::NAN; t * g * hd];
                    let item = |_| Item {
                        view,
                        q: &q,
                        t,
                        n_ctx,
                    };
                    // Thread counts 1..16 as the spans go round.
                    let threads = Threads::new(1 + j * 5 % 16).unwrap();
                    attend_items_split(1, g, hd, span, item, threads, &mut got);
                    // On one thread, piece by piece: the same bits.
                    let mut one = vec![f32::NAN; t * g * hd];
                    attend_item_cut(&item(0), g, hd, span, &mut one);
                    assert!(
                        one.iter()
                            .zip(&got)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{isa:?} n_ctx={n_ctx} t={t} span={span}: cut on one thread differs"
                    );
                    for (a, b) in got.iter().zip(&want) {
                        assert!(
                            (a - b).abs() <= 2e-5 * (1.0 + b.abs()),
                            "{isa:?} n_ctx={n_ctx} t={t} span={span}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    /// The log-sum-exp each tier reports equals the reference's, for a
    /// piece of the context and for a piece that sees nothing.
    #[test]
    fn tile_kernels_report_the_reference_log_sum_exp() {
        let (bs, hd, g, t, n_ctx) = (8, 32, 2, 3, 100);
        let val = |i: usize, s: f32| f16::from_f32(((i * 37 % 101) as f32 * s).sin());
        let ks: Vec<f16> = (0..16 * bs * hd).map(|i| val(i, 0.1)).collect();
        let vs: Vec<f16> = (0..16 * bs * hd).map(|i| val(i, 0.3)).collect();
        let table: Vec<u32> = (0..16).collect();
        let kv = PagedKv {
            k: KvRows::F16(&ks),
            v: KvRows::F16(&vs),
            block_size: bs,
            n_kv_heads: 1,
            head_dim: hd,
        };
        let q: Vec<f32> = (0..t * g * hd).map(|i| (i as f32 * 0.7).cos()).collect();
        for (from, until) in [(0, usize::MAX), (17, 64), (64, 101), (120, 130)] {
            let view = HeadView {
                kv,
                table: &table,
                kvh: 0,
                scale: 0.2,
                window: None,
                softcap: None,
                from,
                until,
            };
            let mut scores = vec![0.0; tile_scores_len(t, g, n_ctx)];
            let (mut want, mut want_lse) = (vec![0.0; t * g * hd], vec![0.0; t * g]);
            attend_tile_reference(
                &view,
                &q,
                t,
                n_ctx,
                &mut scores,
                &mut want,
                Some(&mut want_lse),
            );
            if from >= n_ctx + t {
                assert!(want_lse.iter().all(|&l| l == f32::NEG_INFINITY));
                assert!(want.iter().all(|&v| v == 0.0));
            }
            for isa in crate::cpu::tiers() {
                let (mut got, mut lse) = (vec![f32::NAN; t * g * hd], vec![f32::NAN; t * g]);
                (Kernels::for_isa(isa).attend_tile)(
                    &view,
                    &q,
                    t,
                    n_ctx,
                    &mut scores,
                    &mut got,
                    Some(&mut lse),
                );
                for (a, b) in lse.iter().zip(&want_lse).chain(got.iter().zip(&want)) {
                    assert!(
                        a == b || (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "{isa:?} {from}..{until}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
