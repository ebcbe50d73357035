//! The AMX path of [`crate::matmul::matmul`]: the quantized activations
//! laid out as tiles once per product ([`AmxActs::pack`]), then each
//! thread's weight rows, 32 at a time, made into two panels and multiplied
//! by every pass of 32 activation rows ([`AmxActs::rows`]).
//!
//! The layout is what makes the tiles fast: a tile load is one cache line
//! per two rows (32 quant bytes per row, rows 32 bytes apart) instead of
//! one or two lines per row of the row-major activations, and those loads,
//! not the products, bound the tiles (measured on a 2-vCPU Xeon with AMX:
//! four `tdpbssd` 23 cycles, the four tile loads from L2 55).

use crate::quant::dot::{q8k_parts, Q8_K_BYTES};
use crate::rows::{AmxGemm, AmxPanel, Q8Row, AMX_B_TILE, AMX_ROWS};
use crate::threads::{par_chunks, ColumnBlock, Threads};

/// Activation rows from which the AMX tiles take a product (a pass has
/// [`AMX_ROWS`]; a short last one is padded). Below it the AVX-512 x16
/// kernels are as fast or faster: making the panels costs about one pass
/// (`examples/gemm_big q4_0 2 N 2048 64` on the AMX Xeon: 16 rows 2.5 ms
/// against 5.0 for AMX, 32 rows 5.1 against 5.2, 64 rows 10.2 against
/// 8.8, 128 rows 22.0 against 16.8).
pub(crate) const AMX_MIN_ROWS: usize = 64;

/// Bytes of one block of one pass: 32 rows x 32 quant bytes.
const PASS_BLOCK: usize = AMX_ROWS * 32;

/// The buffers of [`AmxActs`], kept between products.
#[derive(Default)]
pub(crate) struct AmxScratch {
    xa: Vec<u8>,
    dx: Vec<f32>,
    xs: Vec<f32>,
}

/// Activations laid out for the tiles: per pass of [`AMX_ROWS`] rows and
/// per 32-element block, the rows' 32 quant bytes one after another
/// (`xa`), their 32 block scales (`dx`) and a term each (`xs`): for
/// weights with minimums (`mins`) the sums of their quants, else the x16
/// kernels' offset terms `8 ds` (see [`crate::rows::Q8Row`]); rows past
/// `n` repeat the last one.
pub(crate) struct AmxActs<'a> {
    xa: &'a [u8],
    dx: &'a [f32],
    xs: &'a [f32],
    mins: bool,
    nb: usize,
    n: usize,
}

impl<'a> AmxActs<'a> {
    /// Lays out `n` rows of `nb` Q8_0 blocks (`act_rb` bytes each in `q`;
    /// row `t`'s block terms `x(t)`, made for the tier's zero offset of
    /// the weight type) in `scratch`.
    pub(crate) fn pack<'x>(
        scratch: &'a mut AmxScratch,
        q: &[u8],
        act_rb: usize,
        nb: usize,
        n: usize,
        x: impl Fn(usize) -> Q8Row<'x> + Sync,
        threads: Threads,
    ) -> AmxActs<'a> {
        let quants = |t: usize, b: usize| &q[t * act_rb + 34 * b + 2..][..32];
        let terms = |t: usize, b: usize| {
            let r = x(t);
            (r.d[b], 8.0 * r.ds[b])
        };
        Self::lay_out(scratch, nb, n, false, threads, quants, terms)
    }

    /// Lays out `n` rows of Q8_K blocks (`act_rb` bytes each in `q`: a
    /// 256-element block is its f32 scale, 256 quants and 16 sums of 16)
    /// as `nb` 32-element blocks with their quant sums, in `scratch`.
    pub(crate) fn pack_q8k(
        scratch: &'a mut AmxScratch,
        q: &[u8],
        act_rb: usize,
        nb: usize,
        n: usize,
        threads: Threads,
    ) -> AmxActs<'a> {
        let block = |t: usize, b: usize| &q[t * act_rb + Q8_K_BYTES * (b / 8)..][..Q8_K_BYTES];
        let quants = |t: usize, b: usize| &block(t, b)[4 + 32 * (b % 8)..][..32];
        let terms = |t: usize, b: usize| {
            let (d, _, sums) = q8k_parts(block(t, b));
            let j = 2 * (b % 8);
            (d, (sums[j] + sums[j + 1]) as f32)
        };
        Self::lay_out(scratch, nb, n, true, threads, quants, terms)
    }

    /// The layout of [`AmxActs`] from each row's and block's 32 quant
    /// bytes and its (scale, term).
    fn lay_out<'q>(
        scratch: &'a mut AmxScratch,
        nb: usize,
        n: usize,
        mins: bool,
        threads: Threads,
        quants: impl Fn(usize, usize) -> &'q [u8] + Sync,
        terms: impl Fn(usize, usize) -> (f32, f32),
    ) -> AmxActs<'a> {
        let passes = n.div_ceil(AMX_ROWS);
        let pass_bytes = nb * PASS_BLOCK;
        let row = |p: usize, m: usize| (AMX_ROWS * p + m).min(n - 1);
        // Every byte is rewritten below.
        scratch.xa.resize(passes * pass_bytes, 0);
        par_chunks(&mut scratch.xa, pass_bytes, threads, |p0, piece| {
            for (p, pass) in piece.chunks_exact_mut(pass_bytes).enumerate() {
                for m in 0..AMX_ROWS {
                    let t = row(p0 + p, m);
                    for b in 0..nb {
                        let at = b * PASS_BLOCK + 32 * m;
                        pass[at..at + 32].copy_from_slice(quants(t, b));
                    }
                }
            }
        });
        let len = passes * nb * AMX_ROWS;
        scratch.dx.resize(len, 0.0);
        scratch.xs.resize(len, 0.0);
        for i in 0..len {
            let (m, b, p) = (i % AMX_ROWS, i / AMX_ROWS % nb, i / AMX_ROWS / nb);
            (scratch.dx[i], scratch.xs[i]) = terms(row(p, m), b);
        }
        AmxActs {
            xa: &scratch.xa,
            dx: &scratch.dx,
            xs: &scratch.xs,
            mins,
            nb,
            n,
        }
    }

    /// Products of the eight-row groups of `packed` (`group_bytes` each)
    /// for the weight rows of `blk` (a multiple of 32 from a multiple of
    /// 32) with every activation row, 32 weight rows (two panels) at a
    /// time. The panels are made once per chunk of passes whose
    /// activations (about 1 MiB) stay in L2 while they serve them.
    pub(crate) fn rows(
        &self,
        packed: &[u8],
        group_bytes: usize,
        blk: &mut ColumnBlock<'_, f32>,
        panel: AmxPanel,
        gemm: AmxGemm,
    ) {
        let AmxActs {
            xa,
            dx,
            xs,
            mins,
            nb,
            n,
        } = *self;
        let (r0, width) = (blk.first(), blk.width());
        let group = |g: usize| &packed[g * group_bytes..(g + 1) * group_bytes];
        let chunk = ((1 << 20) / (nb * PASS_BLOCK)).clamp(1, 8) * AMX_ROWS;
        let mut pq = [vec![0u8; nb * AMX_B_TILE], vec![0u8; nb * AMX_B_TILE]];
        let mut pd = [vec![0f32; nb * 16], vec![0f32; nb * 16]];
        let mins = if mins { nb * 16 } else { 0 };
        let mut pm = [vec![0f32; mins], vec![0f32; mins]];
        let mut res = Vec::new();
        for t0 in (0..n).step_by(chunk) {
            let t1 = (t0 + chunk).min(n);
            let (p0, p1) = (t0 / AMX_ROWS, t1.div_ceil(AMX_ROWS));
            let xa = &xa[p0 * nb * PASS_BLOCK..p1 * nb * PASS_BLOCK];
            let dx = &dx[p0 * nb * AMX_ROWS..p1 * nb * AMX_ROWS];
            let xs = &xs[p0 * nb * AMX_ROWS..p1 * nb * AMX_ROWS];
            res.resize((p1 - p0) * AMX_ROWS, [0f32; 32]);
            for i in (0..width).step_by(32) {
                let g = (r0 + i) / 8;
                for k in 0..2 {
                    let pair = [group(g + 2 * k), group(g + 2 * k + 1)];
                    panel(pair, nb, &mut pq[k], &mut pd[k], &mut pm[k]);
                }
                let panels = [0, 1].map(|k| (&pq[k][..], &pd[k][..], &pm[k][..]));
                gemm(panels, xa, dx, xs, nb, &mut res);
                for (j, v) in res.iter().take(t1 - t0).enumerate() {
                    blk.row(t0 + j)[i..i + 32].copy_from_slice(v);
                }
            }
        }
    }
}
