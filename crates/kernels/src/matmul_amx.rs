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

use crate::rows::{AmxGemm, AmxPanel, AMX_B_TILE, AMX_ROWS};
use crate::threads::{par_chunks, ColumnBlock, Threads};

/// Activation rows from which the AMX tiles take a product (a pass has
/// [`AMX_ROWS`]; fewer are padded).
pub(crate) const AMX_MIN_ROWS: usize = 16;

/// Bytes of one block of one pass: 32 rows x 32 quant bytes.
const PASS_BLOCK: usize = AMX_ROWS * 32;

/// The buffers of [`AmxActs`], kept between products.
#[derive(Default)]
pub(crate) struct AmxScratch {
    xa: Vec<u8>,
    dx: Vec<f32>,
}

/// Activations laid out for the tiles: per pass of [`AMX_ROWS`] rows and
/// per block, the rows' 32 quant bytes one after another (`xa`) and their
/// 32 block scales (`dx`); rows past `n` repeat the last one.
pub(crate) struct AmxActs<'a> {
    xa: &'a [u8],
    dx: &'a [f32],
    nb: usize,
    n: usize,
}

impl<'a> AmxActs<'a> {
    /// Lays out `n` rows of `nb` Q8_0 blocks (`act_rb` bytes each in `q`;
    /// row `t`'s block scales `d(t)`) in `scratch`.
    pub(crate) fn pack<'x>(
        scratch: &'a mut AmxScratch,
        q: &[u8],
        act_rb: usize,
        nb: usize,
        n: usize,
        d: impl Fn(usize) -> &'x [f32] + Sync,
        threads: Threads,
    ) -> AmxActs<'a> {
        let passes = n.div_ceil(AMX_ROWS);
        let pass_bytes = nb * PASS_BLOCK;
        // Every byte is rewritten below.
        scratch.xa.resize(passes * pass_bytes, 0);
        scratch.dx.resize(passes * nb * AMX_ROWS, 0.0);
        par_chunks(&mut scratch.xa, pass_bytes, threads, |p0, piece| {
            for (p, pass) in piece.chunks_exact_mut(pass_bytes).enumerate() {
                for m in 0..AMX_ROWS {
                    let t = (AMX_ROWS * (p0 + p) + m).min(n - 1);
                    let row = &q[t * act_rb..(t + 1) * act_rb];
                    for (b, blk) in row.chunks_exact(34).take(nb).enumerate() {
                        let at = b * PASS_BLOCK + 32 * m;
                        pass[at..at + 32].copy_from_slice(&blk[2..]);
                    }
                }
            }
        });
        for (p, pass) in scratch.dx.chunks_exact_mut(nb * AMX_ROWS).enumerate() {
            for m in 0..AMX_ROWS {
                let dt = d((AMX_ROWS * p + m).min(n - 1));
                for (b, &v) in dt.iter().take(nb).enumerate() {
                    pass[b * AMX_ROWS + m] = v;
                }
            }
        }
        AmxActs {
            xa: &scratch.xa,
            dx: &scratch.dx,
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
        let AmxActs { xa, dx, nb, n } = *self;
        let (r0, width) = (blk.first(), blk.width());
        let group = |g: usize| &packed[g * group_bytes..(g + 1) * group_bytes];
        let chunk = ((1 << 20) / (nb * PASS_BLOCK)).clamp(1, 8) * AMX_ROWS;
        let mut pq = [vec![0u8; nb * AMX_B_TILE], vec![0u8; nb * AMX_B_TILE]];
        let mut pd = [vec![0f32; nb * 16], vec![0f32; nb * 16]];
        let mut res = Vec::new();
        for t0 in (0..n).step_by(chunk) {
            let t1 = (t0 + chunk).min(n);
            let (p0, p1) = (t0 / AMX_ROWS, t1.div_ceil(AMX_ROWS));
            let xa = &xa[p0 * nb * PASS_BLOCK..p1 * nb * PASS_BLOCK];
            let dx = &dx[p0 * nb * AMX_ROWS..p1 * nb * AMX_ROWS];
            res.resize((p1 - p0) * AMX_ROWS, [0f32; 32]);
            for i in (0..width).step_by(32) {
                let g = (r0 + i) / 8;
                for (k, (pq, pd)) in pq.iter_mut().zip(&mut pd).enumerate() {
                    panel([group(g + 2 * k), group(g + 2 * k + 1)], nb, pq, pd);
                }
                let panels = [(&pq[0][..], &pd[0][..]), (&pq[1][..], &pd[1][..])];
                gemm(panels, xa, dx, nb, &mut res);
                for (j, v) in res.iter().take(t1 - t0).enumerate() {
                    blk.row(t0 + j)[i..i + 32].copy_from_slice(v);
                }
            }
        }
    }
}
