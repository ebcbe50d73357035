//! Split-context attention (flash-decoding): the positions one query tile
//! attends to are cut into ranges, each range is attended on its own
//! thread (the tier's tile kernel over a [`HeadView`] limited to the range,
//! which also reports each query row's log-sum-exp), and the pieces are
//! merged exactly:
//!
//! `out = sum_i exp(lse_i - L) * out_i`, `L = log sum_i exp(lse_i)`,
//!
//! where `out_i` is piece `i`'s softmax-weighted sum of V. A decode step
//! has one work item per (KV head, token); when those are few or do not
//! divide among the threads (4 KV heads on 3 threads, 1 on 16), pieces of
//! the context keep every thread busy at any head count.
//!
//! This module owns the cut, the parallel run and the merge; which items
//! there are (block tables, queries, context lengths) is the caller's.

use crate::attention::{attend_tile_lse, tile_scores_len};
use crate::rows::HeadView;
use crate::threads::{par_chunks, Threads};
use std::cell::RefCell;

/// Shortest piece worth a thread of its own: below it the merge and the
/// fixed cost of a tile outweigh the work.
pub const MIN_PIECE: usize = 256;
/// Piece boundaries fall on multiples of this (the tile kernels read the
/// cache eight positions at a time).
const ALIGN: usize = 64;

/// How many pieces to cut each of `items` work items of `n_ctx` positions
/// into so that `threads` stay busy: 1 when the items alone balance (at
/// least four per thread, or a multiple of the thread count) or the
/// context is too short to cut.
pub fn pieces_for(items: usize, n_ctx: usize, threads: Threads) -> usize {
    let th = threads.get();
    if th == 1 || items == 0 || items >= 4 * th || items.is_multiple_of(th) {
        return 1;
    }
    (4 * th).div_ceil(items).min(n_ctx / MIN_PIECE).max(1)
}

/// Range `i` of `pieces` over positions `lo..hi`: nearly equal, boundaries
/// on multiples of [`ALIGN`] (the first and last pieces take the slack).
pub fn piece_range(lo: usize, hi: usize, pieces: usize, i: usize) -> (usize, usize) {
    let cut = |k: usize| {
        if k == 0 {
            lo
        } else if k >= pieces {
            hi
        } else {
            (lo + (hi - lo) * k / pieces)
                .next_multiple_of(ALIGN)
                .clamp(lo, hi)
        }
    };
    (cut(i), cut(i + 1))
}

/// Merges `pieces` partial results of `rows` query rows of `hd` values:
/// `parts[i]` holds piece `i`'s normalized outputs then its `rows`
/// log-sum-exps (`rows * (hd + 1)` values each). Rows no piece saw
/// anything for come out zero.
pub fn merge(parts: &[f32], pieces: usize, rows: usize, hd: usize, out: &mut [f32]) {
    let stride = rows * (hd + 1);
    for r in 0..rows {
        let lse = |i: usize| parts[i * stride + rows * hd + r];
        let top = (0..pieces).map(lse).fold(f32::NEG_INFINITY, f32::max);
        let o = &mut out[r * hd..(r + 1) * hd];
        o.fill(0.0);
        if top == f32::NEG_INFINITY {
            continue;
        }
        let weights: Vec<f64> = (0..pieces).map(|i| ((lse(i) - top) as f64).exp()).collect();
        let total: f64 = weights.iter().sum();
        for (i, w) in weights.iter().enumerate() {
            let w = (w / total) as f32;
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

thread_local! {
    /// Per-thread scores scratch of the piece tiles.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The caller's buffer of pieces' partial results.
    static PARTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Attention of `items` work items (`item(k)` describes item `k`), each
/// cut into `pieces` context ranges, all `items * pieces` tiles spread over
/// `threads` and merged into `out` (item `k`'s `rows` rows of `hd` values
/// at `k * rows * hd`; `rows = t * group`, the same for every item).
pub fn attend_items_split<'a>(
    items: usize,
    pieces: usize,
    rows: usize,
    hd: usize,
    item: impl Fn(usize) -> Item<'a> + Sync,
    threads: Threads,
    out: &mut [f32],
) {
    let unit = rows * (hd + 1);
    PARTS.with(|parts| {
        let mut parts = parts.borrow_mut();
        parts.clear();
        parts.resize(items * pieces * unit, 0.0);
        par_chunks(&mut parts[..], unit, threads, |first, chunk| {
            SCORES.with(|sc| {
                let mut sc = sc.borrow_mut();
                for (u, part) in chunk.chunks_exact_mut(unit).enumerate() {
                    let (k, i) = ((first + u) / pieces, (first + u) % pieces);
                    let it = item(k);
                    let (lo, hi) = (
                        it.view.first_visible(it.n_ctx),
                        it.view.visible_end(it.n_ctx + it.t - 1),
                    );
                    let (from, until) = piece_range(lo, hi, pieces, i);
                    // The last piece also holds the tile's later tokens.
                    let until = if i + 1 == pieces { usize::MAX } else { until };
                    let view = HeadView {
                        from: from.max(it.view.from),
                        until: until.min(it.view.until),
                        ..it.view
                    };
                    let group = rows / it.t;
                    let need = tile_scores_len(it.t, group, it.n_ctx);
                    if sc.len() < need {
                        sc.resize(need, 0.0);
                    }
                    let (o, lse) = part.split_at_mut(rows * hd);
                    attend_tile_lse(&view, it.q, it.t, it.n_ctx, &mut sc[..need], o, lse);
                }
            })
        });
        for (k, o) in out.chunks_exact_mut(rows * hd).take(items).enumerate() {
            let p = &parts[k * pieces * unit..(k + 1) * pieces * unit];
            merge(p, pieces, rows, hd, o);
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
    fn pieces_keep_threads_busy_only_when_items_do_not() {
        let t = |n| Threads::new(n).unwrap();
        assert_eq!(pieces_for(4, 10_000, t(2)), 1);
        assert_eq!(pieces_for(3, 10_000, t(2)), 3);
        assert_eq!(pieces_for(1, 10_000, t(16)), 39);
        assert_eq!(pieces_for(1, 300, t(16)), 1);
        assert_eq!(pieces_for(64, 10_000, t(16)), 1);
        assert_eq!(pieces_for(5, 10_000, t(1)), 1);
    }

    #[test]
    fn piece_ranges_cover_the_context_once() {
        for (lo, hi, pieces) in [(0, 1, 1), (0, 40_000, 7), (100, 5_000, 16), (3, 70, 5)] {
            let mut next = lo;
            for i in 0..pieces {
                let (a, b) = piece_range(lo, hi, pieces, i);
                assert_eq!(a, next);
                assert!(a <= b && b <= hi);
                next = b;
            }
            assert_eq!(next, hi);
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
                let pieces_list: Vec<usize> = if n_ctx == n_max {
                    vec![2, 16]
                } else {
                    (1..=16).collect()
                };
                for pieces in pieces_list {
                    let mut got = vec![f32::NAN; t * g * hd];
                    let item = |_| Item {
                        view,
                        q: &q,
                        t,
                        n_ctx,
                    };
                    // Thread counts 1..16 as the piece counts go round.
                    let threads = Threads::new(1 + pieces * 5 % 16).unwrap();
                    attend_items_split(1, pieces, t * g, hd, item, threads, &mut got);
                    for (a, b) in got.iter().zip(&want) {
                        assert!(
                            (a - b).abs() <= 2e-5 * (1.0 + b.abs()),
                            "{isa:?} n_ctx={n_ctx} t={t} pieces={pieces}: {a} vs {b}"
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
