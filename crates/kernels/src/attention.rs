//! Causal grouped-query attention over a paged KV cache: one query row at a
//! time (the reference) or a tile of consecutive tokens and query heads.
//!
//! The cache of one layer is a pool of blocks, each `block_size` token slots
//! of `n_kv_heads * head_dim` values for K and for V, stored head by head
//! ([`KvRows`]). A sequence's block table lists the pool blocks holding its
//! positions in order, so position `p` lives in slot `p % block_size` of
//! block `table[p / block_size]` ([`PagedKv::row_index`]).
//!
//! Precision: K and V are stored as f16 (as llama.cpp's default cache) and
//! widened to f32; scores, softmax and the weighted sum accumulate in f32.

use crate::quant::dot::{axpy_f16, dot_f32_f16};
pub use crate::rows::{HeadView, KvRows, KvType, PagedKv};

/// Attention of query `q` (`n_heads * head_dim`) over positions `0..n_ctx`
/// of the sequence whose blocks are `table`. `scores` must hold `n_ctx`
/// values; `out` receives `n_heads * head_dim` values.
pub fn attend(
    q: &[f32],
    kv: &PagedKv<'_>,
    table: &[u32],
    n_ctx: usize,
    n_heads: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let hd = kv.head_dim;
    for h in 0..n_heads {
        attend_head(
            &q[h * hd..(h + 1) * hd],
            h,
            kv,
            table,
            n_ctx,
            n_heads,
            scale,
            scores,
            &mut out[h * hd..(h + 1) * hd],
        );
    }
}

/// One head of [`attend`]: `q` and `out` are that head's `head_dim` values.
/// Heads are independent, so callers may run them on different threads.
/// Pure scalar (the reference every tier's tile is tested against).
pub fn attend_head(
    q: &[f32],
    head: usize,
    kv: &PagedKv<'_>,
    table: &[u32],
    n_ctx: usize,
    n_heads: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let view = HeadView {
        kv: *kv,
        table,
        kvh: head / (n_heads / kv.n_kv_heads),
        scale,
        window: None,
        softcap: None,
        from: 0,
        until: usize::MAX,
    };
    attend_head_view(q, &view, n_ctx, scores, out);
}

/// [`attend_head`] over a KV head's view, with its window, soft cap and
/// position range: positions `view.first_visible(n_ctx)..view.visible_end(n_ctx)`.
/// Returns the log-sum-exp of the scaled scores (`-inf`, and `out` zero,
/// when no position is visible).
fn attend_head_view(
    q: &[f32],
    view: &HeadView<'_>,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
) -> f32 {
    let (kv, table) = (&view.kv, view.table);
    let hd = kv.head_dim;
    let (lo, hi) = (view.first_visible(n_ctx), view.visible_end(n_ctx));
    out.fill(0.0);
    if lo == hi {
        return f32::NEG_INFINITY;
    }
    let row = |p: usize| kv.row_index(table, p, view.kvh);
    let mut wide = vec![0.0f32; if kv.k.ty() == KvType::F16 { 0 } else { hd }];
    let scores = &mut scores[..hi - lo];
    for (j, s) in scores.iter_mut().enumerate() {
        let dot = match kv.k {
            KvRows::F16(k) => dot_f32_f16(q, &k[row(lo + j) * hd..][..hd]),
            KvRows::Quant(..) => {
                widen_row(kv.k, row(lo + j), &mut wide);
                q.iter().zip(&wide).map(|(a, b)| a * b).sum()
            }
        };
        *s = dot * view.scale;
    }
    if let Some(cap) = view.softcap {
        crate::ops::softcap(scores, cap);
    }
    let lse = crate::ops::softmax_lse(scores);
    wide.resize(if kv.v.ty() == KvType::F16 { 0 } else { hd }, 0.0);
    for (j, &w) in scores.iter().enumerate() {
        match kv.v {
            KvRows::F16(v) => axpy_f16(out, w, &v[row(lo + j) * hd..][..hd]),
            KvRows::Quant(..) => {
                widen_row(kv.v, row(lo + j), &mut wide);
                for (o, x) in out.iter_mut().zip(&wide) {
                    *o += w * x;
                }
            }
        }
    }
    lse
}

/// Row `i` of `rows` widened to f32 (`out.len()` values): the reference
/// every tier's cache reads are tested against.
pub fn widen_row(rows: KvRows<'_>, i: usize, out: &mut [f32]) {
    let hd = out.len();
    match rows {
        KvRows::F16(r) => {
            for (o, x) in out.iter_mut().zip(&r[i * hd..(i + 1) * hd]) {
                *o = x.to_f32();
            }
        }
        KvRows::Quant(ty, r) => {
            let src = &r[i * ty.row_bytes(hd)..(i + 1) * ty.row_bytes(hd)];
            match ty {
                KvType::Q8_0 => crate::quant::legacy::dequantize_q8_0(src, out),
                KvType::Q4_0 => crate::quant::legacy::dequantize_q4_0(src, out),
                KvType::F16 => {
                    for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
                        *o = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
                    }
                }
            }
        }
    }
}

/// Length of the `scores` buffer [`attend_tile`] needs for `t` tokens of
/// `group` query heads, the first of which sees `n_ctx` positions: one row
/// per (token, head), each padded to a multiple of 8 positions.
pub fn tile_scores_len(t: usize, group: usize, n_ctx: usize) -> usize {
    t * group * (n_ctx + t.max(1) - 1).next_multiple_of(8)
}

/// Causal grouped-query attention of `t` consecutive tokens of one sequence
/// over the KV head `view`: `q` and `out` are `[t][group][head_dim]`, and
/// token `i` sees positions `0..n_ctx + i` (its own included). Every K and V
/// row is read and widened once for all `t * group` query rows, so prefill
/// tiles and wide query groups pay for the cache once. `scores` must hold
/// [`tile_scores_len`] values. Runs the tier's kernel
/// ([`crate::cpu::Kernels::attend_tile`]).
pub fn attend_tile(
    view: &HeadView<'_>,
    q: &[f32],
    t: usize,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
) {
    (crate::cpu::kernels().attend_tile)(view, q, t, n_ctx, scores, out, None)
}

/// [`attend_tile`], also writing each query row's log-sum-exp into `lse`
/// (`t * group` values; see [`crate::rows::AttendTile`]).
pub fn attend_tile_lse(
    view: &HeadView<'_>,
    q: &[f32],
    t: usize,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
    lse: &mut [f32],
) {
    (crate::cpu::kernels().attend_tile)(view, q, t, n_ctx, scores, out, Some(lse))
}

/// The reference of [`attend_tile`]: [`attend_head`] (with the view's
/// window, soft cap and position range) for each token and head.
pub fn attend_tile_reference(
    view: &HeadView<'_>,
    q: &[f32],
    t: usize,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
    mut lse: Option<&mut [f32]>,
) {
    let hd = view.kv.head_dim;
    let g = q.len() / (t * hd).max(1);
    for i in 0..t * g {
        let l = attend_head_view(
            &q[i * hd..(i + 1) * hd],
            view,
            n_ctx + i / g,
            scores,
            &mut out[i * hd..(i + 1) * hd],
        );
        if let Some(lse) = lse.as_deref_mut() {
            lse[i] = l;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn tile_attention_matches_per_head_attention_on_every_tier() {
        use crate::cpu::Kernels;
        // (block size, KV heads, head dim, group, tokens, first context)
        for (bs, nkv, hd, g, t, n_ctx) in [
            (4, 2, 8, 3, 1, 11),
            (4, 2, 8, 3, 5, 9),
            (16, 1, 64, 8, 1, 40),
            (16, 1, 64, 8, 4, 17),
            (16, 3, 24, 1, 3, 5),
            (16, 1, 136, 2, 7, 1),
            (8, 2, 72, 4, 2, 30),
        ] {
            let kv_dim = nkv * hd;
            let table = [2u32, 0, 3, 1];
            let n_blocks = 4;
            let val = |i: usize, s: f32| f16::from_f32(((i * 37 % 101) as f32 * s).sin());
            let ks: Vec<f16> = (0..n_blocks * bs * kv_dim).map(|i| val(i, 0.1)).collect();
            let vs: Vec<f16> = (0..n_blocks * bs * kv_dim).map(|i| val(i, 0.3)).collect();
            let kv = PagedKv {
                k: KvRows::F16(&ks),
                v: KvRows::F16(&vs),
                block_size: bs,
                n_kv_heads: nkv,
                head_dim: hd,
            };
            let n_ctx = n_ctx.min(table.len() * bs + 1 - t);
            let q: Vec<f32> = (0..t * g * hd).map(|i| (i as f32 * 0.7).cos()).collect();
            let masks = [
                (None, None),
                (Some(3), None),
                (Some(9), Some(0.5)),
                (None, Some(2.0)),
            ];
            for (kvh, (window, softcap)) in (0..nkv).flat_map(|h| masks.map(|m| (h, m))) {
                let view = HeadView {
                    kv,
                    table: &table,
                    kvh,
                    scale: 0.3,
                    window,
                    softcap,
                    from: 0,
                    until: usize::MAX,
                };
                let mut scores = vec![0.0; tile_scores_len(t, g, n_ctx)];
                let mut want = vec![0.0; t * g * hd];
                attend_tile_reference(&view, &q, t, n_ctx, &mut scores, &mut want, None);
                // Token i of the tile is the one-token case at context n_ctx + i.
                let mut one = vec![0.0; g * hd];
                let i = t - 1;
                attend_tile_reference(
                    &view,
                    &q[i * g * hd..(i + 1) * g * hd],
                    1,
                    n_ctx + i,
                    &mut scores,
                    &mut one,
                    None,
                );
                assert_eq!(one, want[i * g * hd..]);
                for isa in crate::cpu::tiers() {
                    let mut got = vec![f32::NAN; t * g * hd];
                    scores.fill(f32::NAN);
                    (Kernels::for_isa(isa).attend_tile)(
                        &view,
                        &q,
                        t,
                        n_ctx,
                        &mut scores,
                        &mut got,
                        None,
                    );
                    for (a, b) in got.iter().zip(&want) {
                        assert!(
                            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                            "{isa:?} hd={hd} g={g} t={t} {window:?} {softcap:?}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    /// Q8_0 and Q4_0 caches: every tier's tile equals the reference over
    /// the same blocks, and both stay near the f16 cache's result.
    #[test]
    fn quantized_cache_attention_matches_the_reference_on_every_tier() {
        use crate::cpu::Kernels;
        for (bs, nkv, hd, g, t, n_ctx) in [
            (16, 1, 64, 8, 1, 40),
            (16, 1, 64, 8, 4, 17),
            (8, 2, 32, 4, 2, 30),
            (16, 2, 128, 2, 3, 50),
        ] {
            let rows = 4 * bs * nkv;
            let val = |i: usize, s: f32| ((i * 37 % 101) as f32 * s).sin();
            let kf: Vec<f32> = (0..rows * hd).map(|i| val(i, 0.1)).collect();
            let vf: Vec<f32> = (0..rows * hd).map(|i| val(i, 0.3)).collect();
            let half = |x: &[f32]| x.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>();
            let (kh, vh) = (half(&kf), half(&vf));
            let table = [2u32, 0, 3, 1];
            let q: Vec<f32> = (0..t * g * hd).map(|i| (i as f32 * 0.7).cos()).collect();
            let n_ctx = n_ctx.min(table.len() * bs + 1 - t);
            fn view<'a>(
                k: KvRows<'a>,
                v: KvRows<'a>,
                bs: usize,
                nkv: usize,
                hd: usize,
                table: &'a [u32],
            ) -> HeadView<'a> {
                HeadView {
                    kv: PagedKv {
                        k,
                        v,
                        block_size: bs,
                        n_kv_heads: nkv,
                        head_dim: hd,
                    },
                    table,
                    kvh: nkv - 1,
                    scale: 0.3,
                    window: None,
                    softcap: None,
                    from: 0,
                    until: usize::MAX,
                }
            }
            let mut scores = vec![0.0; tile_scores_len(t, g, n_ctx)];
            let mut exact = vec![0.0; t * g * hd];
            let fv = view(KvRows::F16(&kh), KvRows::F16(&vh), bs, nkv, hd, &table);
            attend_tile_reference(&fv, &q, t, n_ctx, &mut scores, &mut exact, None);
            for (ty, near) in [(KvType::Q8_0, 0.02), (KvType::Q4_0, 0.15)] {
                let quant = |x: &[f32]| {
                    let rb = ty.row_bytes(hd);
                    let mut b = vec![0u8; rows * rb];
                    for (src, dst) in x.chunks_exact(hd).zip(b.chunks_exact_mut(rb)) {
                        crate::quant::quantize_row(ty.ggml(), src, dst).unwrap();
                    }
                    b
                };
                let (kq, vq) = (quant(&kf), quant(&vf));
                let qv = view(
                    KvRows::Quant(ty, &kq),
                    KvRows::Quant(ty, &vq),
                    bs,
                    nkv,
                    hd,
                    &table,
                );
                let mut want = vec![0.0; t * g * hd];
                attend_tile_reference(&qv, &q, t, n_ctx, &mut scores, &mut want, None);
                for (a, b) in want.iter().zip(&exact) {
                    assert!((a - b).abs() <= near, "{ty:?} hd={hd}: {a} vs f16 {b}");
                }
                for isa in crate::cpu::tiers() {
                    let mut got = vec![f32::NAN; t * g * hd];
                    (Kernels::for_isa(isa).attend_tile)(
                        &qv,
                        &q,
                        t,
                        n_ctx,
                        &mut scores,
                        &mut got,
                        None,
                    );
                    // The AVX-512 tier scores a Q8_0 or Q4_0 K with the
                    // query quantized to Q8_0 too, as llama.cpp does
                    // (measured up to 1.5e-3 off here, outputs up to 0.25;
                    // its exact references are in `attention_q8`); the
                    // others widen K.
                    let tol = if isa >= crate::cpu::Isa::Avx512 {
                        3e-3
                    } else {
                        1e-5
                    };
                    for (a, b) in got.iter().zip(&want) {
                        assert!(
                            (a - b).abs() <= tol * (1.0 + b.abs()),
                            "{isa:?} {ty:?} hd={hd} t={t}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    /// A window as wide as the context changes nothing; a window of one
    /// position returns that position's V.
    #[test]
    fn sliding_window_masks_older_positions() {
        let (bs, hd, n_ctx) = (4, 8, 11);
        let val = |i: usize, s: f32| f16::from_f32(((i * 37 % 101) as f32 * s).sin());
        let ks: Vec<f16> = (0..3 * bs * hd).map(|i| val(i, 0.1)).collect();
        let vs: Vec<f16> = (0..3 * bs * hd).map(|i| val(i, 0.3)).collect();
        let kv = PagedKv {
            k: KvRows::F16(&ks),
            v: KvRows::F16(&vs),
            block_size: bs,
            n_kv_heads: 1,
            head_dim: hd,
        };
        let q: Vec<f32> = (0..hd).map(|i| (i as f32 * 0.7).cos()).collect();
        let run = |window| {
            let view = HeadView {
                kv,
                table: &[0, 1, 2],
                kvh: 0,
                scale: 0.3,
                window,
                softcap: None,
                from: 0,
                until: usize::MAX,
            };
            let mut scores = vec![0.0; tile_scores_len(1, 1, n_ctx)];
            let mut out = vec![0.0; hd];
            attend_tile_reference(&view, &q, 1, n_ctx, &mut scores, &mut out, None);
            out
        };
        assert_eq!(run(Some(n_ctx)), run(None));
        assert_ne!(run(Some(n_ctx - 1)), run(None));
        let last: Vec<f32> = vs[(n_ctx - 1) * hd..n_ctx * hd]
            .iter()
            .map(|v| v.to_f32())
            .collect();
        assert_eq!(run(Some(1)), last);
    }

    /// Attention over a scrambled block table equals attention over a
    /// contiguous cache holding the same values.
    #[test]
    fn paged_layout_is_invisible() {
        let (bs, nkv, hd, nh, n_ctx) = (4, 2, 8, 6, 11);
        let kv_dim = nkv * hd;
        let n_blocks = 5;
        let val = |p: usize, i: usize, s: f32| f16::from_f32(((p * 31 + i * 7) as f32 * s).sin());
        let table_scrambled = [3u32, 0, 4];
        let mut ks = vec![f16::ZERO; n_blocks * bs * kv_dim];
        let mut vs = ks.clone();
        let mut kc = ks.clone();
        let mut vc = ks.clone();
        let geometry = |k, v| PagedKv {
            k,
            v,
            block_size: bs,
            n_kv_heads: nkv,
            head_dim: hd,
        };
        // The row index depends on the pool's size (head-major pools).
        let shape = ks.clone();
        let g = geometry(KvRows::F16(&shape), KvRows::F16(&shape));
        for p in 0..n_ctx {
            for i in 0..kv_dim {
                let (h, d) = (i / hd, i % hd);
                let s = g.row_index(&table_scrambled, p, h) * hd + d;
                let c = g.row_index(&[0, 1, 2], p, h) * hd + d;
                ks[s] = val(p, i, 0.1);
                vs[s] = val(p, i, 0.2);
                kc[c] = val(p, i, 0.1);
                vc[c] = val(p, i, 0.2);
            }
        }
        let q: Vec<f32> = (0..nh * hd).map(|i| (i as f32 * 0.3).cos()).collect();
        let mut scores = vec![0.0; n_ctx];
        let mut o1 = vec![0.0; nh * hd];
        let mut o2 = o1.clone();
        let paged = PagedKv {
            k: KvRows::F16(&ks),
            v: KvRows::F16(&vs),
            block_size: bs,
            n_kv_heads: nkv,
            head_dim: hd,
        };
        attend(
            &q,
            &paged,
            &table_scrambled,
            n_ctx,
            nh,
            0.35,
            &mut scores,
            &mut o1,
        );
        let contiguous = PagedKv {
            k: KvRows::F16(&kc),
            v: KvRows::F16(&vc),
            block_size: bs,
            n_kv_heads: nkv,
            head_dim: hd,
        };
        attend(
            &q,
            &contiguous,
            &[0, 1, 2],
            n_ctx,
            nh,
            0.35,
            &mut scores,
            &mut o2,
        );
        if cfg!(miri) {
            // Miri perturbs `exp` by a few ULPs on every call, on purpose.
            assert!(o1.iter().zip(&o2).all(|(a, b)| (a - b).abs() < 1e-5));
        } else {
            assert_eq!(o1, o2);
        }
        // One position: output is exactly V of that position.
        attend(
            &q,
            &paged,
            &table_scrambled,
            1,
            nh,
            0.35,
            &mut scores,
            &mut o1,
        );
        for h in 0..nh {
            for i in 0..hd {
                assert_eq!(
                    o1[h * hd + i],
                    vs[g.row_index(&table_scrambled, 0, h / 3) * hd + i].to_f32()
                );
            }
        }
    }

    /// Every token's attention output has the same bits alone (a decode
    /// step at its position) as in a tile of tokens (a speculative
    /// verification pass, a prefill), on every tier, over f16, Q8_0 and
    /// Q4_0 caches, with and without a sliding window, for grouped-query
    /// heads below and at the AVX-512 f16 scoring kernel's group and tiles
    /// past the integer tile's 64 rows: otherwise greedy output would
    /// depend on which steps drafted.
    #[test]
    fn a_token_gets_the_same_bits_alone_and_in_a_tile() {
        use crate::cpu::Kernels;
        use crate::quant::quantize_row;
        let (bs, hd) = (16, 64);
        let table: Vec<u32> = (0..40).collect();
        let rows = table.len() * bs;
        let val = |i: usize, s: f32| ((i * 37 % 1009) as f32 * s).sin() * 3.0;
        let kf: Vec<f32> = (0..rows * hd).map(|i| val(i, 0.1)).collect();
        // V rows of varied scales, so that a chunk's largest V scale moves
        // with the positions a row sees.
        let vf: Vec<f32> = (0..rows * hd)
            .map(|i| val(i, 0.3) * (1.0 + (i / hd % 7) as f32))
            .collect();
        let kh: Vec<f16> = kf.iter().map(|&x| f16::from_f32(x)).collect();
        let vh: Vec<f16> = vf.iter().map(|&x| f16::from_f32(x)).collect();
        let quant = |ty: KvType, x: &[f32]| {
            let mut b = vec![0u8; rows * ty.row_bytes(hd)];
            quantize_row(ty.ggml(), x, &mut b).unwrap();
            b
        };
        let (k8, v8) = (quant(KvType::Q8_0, &kf), quant(KvType::Q8_0, &vf));
        let (k4, v4) = (quant(KvType::Q4_0, &kf), quant(KvType::Q4_0, &vf));
        let caches = [
            (KvRows::F16(&kh), KvRows::F16(&vh)),
            (
                KvRows::Quant(KvType::Q8_0, &k8),
                KvRows::Quant(KvType::Q8_0, &v8),
            ),
            (
                KvRows::Quant(KvType::Q4_0, &k4),
                KvRows::Quant(KvType::Q4_0, &v4),
            ),
        ];
        let mut differ = Vec::new();
        for (k, v) in caches {
            for window in [None, Some(100)] {
                for (g, t_max) in [(2, 6), (3, 6), (8, 9)] {
                    for n_ctx in [40, 333, 500] {
                        let q: Vec<f32> = (0..t_max * g * hd)
                            .map(|i| (i as f32 * 0.77).cos() * 2.0)
                            .collect();
                        let view = HeadView {
                            kv: PagedKv {
                                k,
                                v,
                                block_size: bs,
                                n_kv_heads: 1,
                                head_dim: hd,
                            },
                            table: &table,
                            kvh: 0,
                            scale: 0.125,
                            window,
                            softcap: None,
                            from: 0,
                            until: usize::MAX,
                        };
                        for isa in crate::cpu::tiers() {
                            let tile = Kernels::for_isa(isa).attend_tile;
                            // Tokens `i..i + t` of `q` at positions from
                            // `n_ctx + i`.
                            let run = |i: usize, t: usize| {
                                let mut scores = vec![0.0; tile_scores_len(t, g, n_ctx + i)];
                                let mut out = vec![f32::NAN; t * g * hd];
                                let q = &q[i * g * hd..(i + t) * g * hd];
                                tile(&view, q, t, n_ctx + i, &mut scores, &mut out, None);
                                out
                            };
                            let alone: Vec<Vec<f32>> = (0..t_max).map(|i| run(i, 1)).collect();
                            for t in 2..=t_max {
                                let tiled = run(0, t);
                                for (i, a) in alone.iter().take(t).enumerate() {
                                    let n = a
                                        .iter()
                                        .zip(&tiled[i * g * hd..])
                                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                                        .count();
                                    if n > 0 {
                                        differ.push(format!(
                                            "{isa:?} {:?} window {window:?} g={g} \
                                             n_ctx={n_ctx} t={t} token {i}: {n} values",
                                            v.ty()
                                        ));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(
            differ.is_empty(),
            "{} differ:\n{}",
            differ.len(),
            differ.join("\n")
        );
    }
}
