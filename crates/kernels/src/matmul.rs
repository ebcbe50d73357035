//! Products of a (possibly quantized) weight matrix with f32 activations.
//!
//! Reference: each weight row is dequantized once into f32 and dotted with
//! every activation row, so one pass over the weights serves the whole batch.
//! Work is split across threads by weight rows.

use crate::cpu::kernels;
use crate::matmul_amx::{AmxActs, AmxScratch, AMX_MIN_ROWS};
use crate::quant::repack::{packed_bytes, x8_unit, Q4K_UNIT};
use crate::quant::repack_q5k::Q5K_UNIT;
use crate::quant::repack_q6k::Q6K_UNIT;
use crate::quant::{dequantize_row, GgmlType};
use crate::rows::{q8_row_terms_into, Q8Row, Tile1, TileN, TILE_N, X4_N, X8_N};
use crate::threads::{par_chunks, par_column_blocks, ColumnBlock, Threads};
use crate::{Error, Result};
use std::cell::RefCell;

/// A borrowed row-major weight matrix `[rows, cols]` stored as `ty` blocks.
#[derive(Debug, Clone, Copy)]
pub struct WeightMatrix<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
    /// The same Q4_0/Q8_0 weights interleaved in eight-row groups
    /// ([`crate::quant::repack`]), used instead of `data` when present.
    pub packed: Option<&'a [u8]>,
}

impl<'a> WeightMatrix<'a> {
    /// Checks that `data` holds exactly `rows` rows of `cols` elements.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self> {
        let row_bytes = ty.row_bytes(cols)?;
        if row_bytes * rows != data.len() {
            return Err(Error::ByteLength {
                ty: ty.name(),
                elements: rows * cols,
                expected: row_bytes * rows,
                got: data.len(),
            });
        }
        Ok(WeightMatrix {
            ty,
            rows,
            cols,
            data,
            packed: None,
        })
    }

    /// Attaches the eight-row interleaved copy of Q4_0, Q5_0, Q8_0, Q4_K, Q5_K or Q6_K weights
    /// made by [`crate::quant::repack::repack_x8`].
    pub fn with_packed(mut self, packed: &'a [u8]) -> Result<Self> {
        let want = packed_bytes(self.ty, self.rows, self.cols);
        if want.is_none() || !self.rows.is_multiple_of(8) || Some(packed.len()) != want {
            return Err(Error::Shape {
                op: "matmul",
                detail: format!(
                    "a packed copy needs Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K rows in multiples of 8 and {:?} bytes, got {} rows of {} and {} bytes",
                    want,
                    self.rows,
                    self.ty.name(),
                    packed.len()
                ),
            });
        }
        self.packed = Some(packed);
        Ok(self)
    }

    /// The bytes of row `r`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.data.len() / self.rows.max(1);
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Dequantizes row `r` into `out` (`cols` long).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<()> {
        dequantize_row(self.ty, self.row(r), out)
    }
}

/// Reused per-thread buffers: a dequantized weight row and the quantized
/// activations.
#[derive(Default)]
struct Scratch {
    row: Vec<f32>,
    xq: Vec<u8>,
    /// Per activation row: the blocks' `d`, then their `ds` (see [`Q8Row`]).
    xt: Vec<f32>,
    /// The activations laid out for the AMX tiles.
    amx: AmxScratch,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The four-row kernel of the K-quant types, which have none.
type NoX4 = fn([&[u8]; 2], &[&[u8]; X4_N]) -> [[f32; 16]; X4_N];
const NO_X4: Option<NoX4> = None;

/// Makes `v` at least `len` long; new elements are zero, old ones kept.
/// Bytes of quantized activations the row-by-row path keeps hot while a
/// column block's weight rows pass over them (about half of a 48 KiB L1).
const TOKEN_CHUNK_BYTES: usize = 24 * 1024;

fn grow<T: Copy + Default>(v: &mut Vec<T>, len: usize) {
    if v.len() < len {
        v.resize(len, T::default());
    }
}

/// Weight bytes below which a piece of a product is not cut smaller for
/// the threads to take in turn ([`par_column_blocks`]): a piece is one
/// stream of weights, which the hardware's and the kernels' prefetchers
/// need long. On the 2-vCPU AMX Xeon, against fixed halves: 64 KiB pieces
/// made the 1b decode step 5% faster but 135M's (pieces of 64 rows of 324
/// bytes) 12% slower; 256 KiB kept the 1b gain and 135M's speed; 1 MiB
/// lost most of the gain.
const PIECE_BYTES: usize = 256 * 1024;

/// The narrowest piece of `w`'s rows worth a turn of its own
/// ([`par_column_blocks`]) in a product with `n` activation rows:
/// [`PIECE_BYTES`] of weights for one row (decode, bound by the weights'
/// stream); a whole thread's share for more (a step of 8 sequences took
/// 3-9% longer in pieces: each piece reads every activation row again).
fn piece_cols(w: &WeightMatrix<'_>, n: usize) -> usize {
    if n > 1 {
        return usize::MAX;
    }
    PIECE_BYTES.div_ceil((w.data.len() / w.rows.max(1)).max(1))
}

/// Activation rows per cache block in batched products: their quantized
/// bytes (64 x 34 x cols/32) stay in L2 while every weight row passes by.
const TOKEN_BLOCK: usize = 64;

/// Tail rows from which one eight-row product with repeated rows beats
/// one one-row product per row on the eight-row (AVX2) kernels: on a Xeon
/// with `HASTEN_ISA=avx2`, 1b Q4_0, a step of 2..5 sequences took
/// 34/44/55/66 ms through one-row products and 66-68 ms through one
/// padded eight-row product.
const TAIL_GEMM: usize = 6;

/// `out[t, r] = sum_c w[r, c] * x[t, c]` for `n = x.len() / cols` rows of
/// activations; `out` is `[n, rows]`.
///
/// Uses the fastest kernel of [`crate::cpu::kernels`]: for the integer types
/// the activations are quantized once (Q8_0 or Q8_K blocks, as ggml does)
/// and every product is an integer dot, through register tiles of four
/// weight rows where the tier has them; F16 and BF16 weights use f32 dots
/// that widen the halves in registers; other
/// types take [`matmul_reference`]'s path.
pub fn matmul(w: &WeightMatrix<'_>, x: &[f32], out: &mut [f32], threads: Threads) -> Result<()> {
    let n = check_shapes(w, x, out)?;
    let k = kernels();
    if let Some(path) = k.quant_path(w.ty) {
        let act_rb = path.act_row_bytes(w.cols);
        let min_cols = piece_cols(w, n);
        let mut s = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
        // Every byte is rewritten below: grow without zeroing what is there.
        grow(&mut s.xq, n * act_rb);
        let quantize = path.quantize;
        // Quantizing a few rows costs less than waking the pool.
        let qthreads = if n >= 16 { threads } else { Threads::ONE };
        par_chunks(&mut s.xq[..n * act_rb], act_rb, qthreads, |t0, piece| {
            let xs = &x[t0 * w.cols..];
            for (xr, qr) in xs.chunks_exact(w.cols).zip(piece.chunks_exact_mut(act_rb)) {
                quantize(xr, qr);
            }
        });
        let k8 = match w.ty {
            GgmlType::Q4K => Some((k.q4_kx8, Q4K_UNIT)),
            GgmlType::Q5K => Some((k.q5_kx8, Q5K_UNIT)),
            GgmlType::Q6K => Some((k.q6_kx8, Q6K_UNIT)),
            GgmlType::IQ4XS => Some((k.iq4_xsx8, crate::quant::repack_iq4::IQ4XS_UNIT)),
            _ => None,
        };
        let amx_k = k
            .amx_path(w.ty)
            .filter(|_| n >= AMX_MIN_ROWS && w.rows.is_multiple_of(32));
        if let (Some((panel, tile)), Some(((_, _), unit)), Some(packed)) = (amx_k, k8, w.packed) {
            let nb = w.cols / 32;
            let acts = AmxActs::pack_q8k(&mut s.amx, &s.xq, act_rb, nb, n, qthreads);
            par_column_blocks(out, w.rows, 32, min_cols, threads, |blk| {
                acts.rows(packed, w.cols / 256 * unit, blk, panel, tile)
            });
        } else if let (Some(((gemv, gemm), unit)), Some(packed)) = (k8, w.packed) {
            let xq = &s.xq;
            let xrow = |t: usize| &xq[t * act_rb..(t + 1) * act_rb];
            let group_bytes = w.cols / 256 * unit;
            let k16 = k.k16_path(w.ty).filter(|_| n >= 2);
            let width = if k16.is_some() { 16 } else { 8 };
            par_column_blocks(out, w.rows, width, min_cols, threads, |blk| {
                x8_rows(packed, group_bytes, n, blk, &xrow, gemv, gemm, k16, NO_X4)
            });
        } else if w.packed.is_some() || path.tiles.is_some() {
            let nb = w.cols / 32;
            let x8 = (w.packed, k.x8_path(w.ty), x8_unit(w.ty));
            let offset = match x8 {
                (Some(_), Some(_), Some(_)) => k.x8_zero_offset(w.ty),
                _ => crate::rows::zero_offset(w.ty),
            };
            grow(&mut s.xt, n * 2 * nb);
            let q = &s.xq;
            par_chunks(&mut s.xt[..n * 2 * nb], 2 * nb, qthreads, |t0, piece| {
                for (i, terms) in piece.chunks_exact_mut(2 * nb).enumerate() {
                    let (d, ds) = terms.split_at_mut(nb);
                    let t = t0 + i;
                    q8_row_terms_into(offset, &q[t * act_rb..(t + 1) * act_rb], d, ds);
                }
            });
            let xt = &s.xt;
            let xrow = |t: usize| Q8Row {
                q: &q[t * act_rb..(t + 1) * act_rb],
                d: &xt[2 * t * nb..(2 * t + 1) * nb],
                ds: &xt[(2 * t + 1) * nb..(2 * t + 2) * nb],
            };
            let amx = k
                .amx_path(w.ty)
                .filter(|_| n >= AMX_MIN_ROWS && w.rows.is_multiple_of(32));
            if let (Some(packed), Some((panel, tile)), Some(unit)) = (w.packed, amx, x8.2) {
                let acts = AmxActs::pack(&mut s.amx, q, act_rb, nb, n, xrow, qthreads);
                par_column_blocks(out, w.rows, 32, min_cols, threads, |blk| {
                    acts.rows(packed, nb * unit, blk, panel, tile)
                });
            } else if let (Some(packed), Some((gemv, gemm)), Some(unit)) = x8 {
                let x16 = k.x16_path(w.ty).filter(|_| n >= 2);
                // Only a token block's last rows can be a short set.
                let x16_4 = k.x16_path4(w.ty).filter(|_| n % X8_N >= 2);
                // Blocks of whole group pairs, so that every group has its partner.
                let width = if x16.is_some() { 16 } else { 8 };
                par_column_blocks(out, w.rows, width, min_cols, threads, |blk| {
                    x8_rows(packed, nb * unit, n, blk, &xrow, gemv, gemm, x16, x16_4)
                });
            } else if let Some(tiles) = path.tiles {
                par_column_blocks(out, w.rows, 4, min_cols, threads, |blk| {
                    tiled_rows(w, n, blk, tiles, path.dot, &xrow)
                });
            }
        } else {
            let xq = &s.xq;
            let xrow = |t: usize| &xq[t * act_rb..(t + 1) * act_rb];
            // Tokens in chunks whose activations stay in L1 while every
            // weight row of the block passes over them.
            let chunk = (TOKEN_CHUNK_BYTES / act_rb).clamp(4, 64) / 4 * 4;
            par_column_blocks(out, w.rows, 1, min_cols, threads, |blk| {
                for t0 in (0..n).step_by(chunk) {
                    let t1 = (t0 + chunk).min(n);
                    for i in 0..blk.width() {
                        let row = w.row(blk.first() + i);
                        let mut t = t0;
                        if let Some(dot4) = path.dot4 {
                            while t + 4 <= t1 {
                                let got =
                                    dot4(row, [xrow(t), xrow(t + 1), xrow(t + 2), xrow(t + 3)]);
                                for (j, v) in got.into_iter().enumerate() {
                                    blk.row(t + j)[i] = v;
                                }
                                t += 4;
                            }
                        }
                        for t in t..t1 {
                            blk.row(t)[i] = (path.dot)(row, xrow(t));
                        }
                    }
                }
            });
        }
        SCRATCH.with(|c| *c.borrow_mut() = s);
        return Ok(());
    }
    if w.ty == GgmlType::F16 || w.ty == GgmlType::BF16 {
        let min_cols = piece_cols(w, n);
        let dot = if w.ty == GgmlType::F16 {
            k.f16_dot
        } else {
            k.bf16_dot
        };
        par_column_blocks(out, w.rows, 1, min_cols, threads, |blk| {
            for i in 0..blk.width() {
                let row = w.row(blk.first() + i);
                for t in 0..n {
                    blk.row(t)[i] = dot(row, &x[t * w.cols..(t + 1) * w.cols]);
                }
            }
        });
        return Ok(());
    }
    matmul_reference(w, x, out, threads)
}

/// Products of the eight-row groups of `packed` (`group_bytes` each) for the
/// weight rows of `blk` (its first row a multiple of 8) with all `n`
/// activation rows (`xrow(t)`), written into `blk`'s columns of `out`.
/// Full sets of [`X8_N`] activation rows take two groups at a time through
/// `gemm16` where there is one. The row sets handed to the kernels are
/// built once per token block, not once per group, and every product of a
/// group (full sets and tail) is done while its weights are in cache: a
/// second pass over the block's groups would read them from memory again.
#[allow(clippy::too_many_arguments)]
fn x8_rows<R: Copy>(
    packed: &[u8],
    group_bytes: usize,
    n: usize,
    blk: &mut ColumnBlock<'_, f32>,
    xrow: &impl Fn(usize) -> R,
    gemv: impl Fn(&[u8], [R; 1]) -> [[f32; 8]; 1],
    gemm: impl Fn(&[u8], [R; X8_N]) -> [[f32; 8]; X8_N],
    gemm16: Option<impl Fn([&[u8]; 2], &[R; X8_N]) -> [[f32; 16]; X8_N]>,
    gemm16_4: Option<impl Fn([&[u8]; 2], &[R; X4_N]) -> [[f32; 16]; X4_N]>,
) {
    const SETS: usize = TOKEN_BLOCK / X8_N;
    let (r0, rows) = (blk.first(), blk.width());
    let group = |g: usize| &packed[g * group_bytes..(g + 1) * group_bytes];
    // Rows covered by sixteen-row products.
    let paired = if gemm16.is_some() { rows / 16 * 16 } else { 0 };
    for t0 in (0..n).step_by(TOKEN_BLOCK) {
        let t1 = (t0 + TOKEN_BLOCK).min(n);
        let full = (t1 - t0) / X8_N;
        // Unused slots repeat the last row; only `full` sets and the tail are used.
        let sets: [[R; X8_N]; SETS] =
            std::array::from_fn(|s| std::array::from_fn(|j| xrow((t0 + s * X8_N + j).min(n - 1))));
        let tail0 = t0 + full * X8_N;
        let tl = t1 - tail0;
        let tail: [R; X8_N] = std::array::from_fn(|j| xrow((tail0 + j).min(n - 1)));
        let tail4: [R; X4_N] = std::array::from_fn(|j| tail[j]);
        let mut put = |t: usize, i: usize, v: &[f32]| blk.row(t)[i..i + v.len()].copy_from_slice(v);
        for i in (0..paired).step_by(16) {
            let g = (r0 + i) / 8;
            let pair = [group(g), group(g + 1)];
            if let Some(g8) = &gemm16 {
                for (s, set) in sets[..full].iter().enumerate() {
                    for (j, vj) in g8(pair, set).iter().enumerate() {
                        put(t0 + s * X8_N + j, i, vj);
                    }
                }
            }
            // The tail as one short set (its unused slots repeating the last
            // row) through the four- or eight-row product that covers it;
            // one row alone takes the one-row kernel per group.
            match (&gemm16_4, &gemm16) {
                (Some(g4), _) if (2..=X4_N).contains(&tl) => {
                    for (j, vj) in g4(pair, &tail4).iter().enumerate().take(tl) {
                        put(tail0 + j, i, vj);
                    }
                }
                (_, Some(g8)) if tl >= 2 => {
                    for (j, vj) in g8(pair, &tail).iter().enumerate().take(tl) {
                        put(tail0 + j, i, vj);
                    }
                }
                _ => {
                    for (j, &x) in tail[..tl].iter().enumerate() {
                        put(tail0 + j, i, &gemv(pair[0], [x])[0]);
                        put(tail0 + j, i + 8, &gemv(pair[1], [x])[0]);
                    }
                }
            }
        }
        for i in (paired..rows).step_by(8) {
            let group = group((r0 + i) / 8);
            for (s, set) in sets[..full].iter().enumerate() {
                for (j, vj) in gemm(group, *set).iter().enumerate() {
                    put(t0 + s * X8_N + j, i, vj);
                }
            }
            if tl >= TAIL_GEMM {
                for (j, vj) in gemm(group, tail).iter().enumerate().take(tl) {
                    put(tail0 + j, i, vj);
                }
            } else {
                for (j, &x) in tail[..tl].iter().enumerate() {
                    put(tail0 + j, i, &gemv(group, [x])[0]);
                }
            }
        }
    }
}

/// Products of the weight rows of `blk` with all `n` activation rows into
/// `blk`'s columns of `out`, four weight rows at a time through the tiles;
/// rows and tokens left over take the one-row dot.
fn tiled_rows<'x>(
    w: &WeightMatrix<'_>,
    n: usize,
    blk: &mut ColumnBlock<'_, f32>,
    (tile1, tile_n): (Tile1, TileN),
    dot: crate::rows::QuantDot,
    xrow: &impl Fn(usize) -> Q8Row<'x>,
) {
    let (r0, rows) = (blk.first(), blk.width());
    let full = rows / 4 * 4;
    for t0 in (0..n).step_by(TOKEN_BLOCK) {
        let t1 = (t0 + TOKEN_BLOCK).min(n);
        for i in (0..full).step_by(4) {
            let wr = [0, 1, 2, 3].map(|k| w.row(r0 + i + k));
            let mut t = t0;
            while t + TILE_N <= t1 {
                let v = tile_n(wr, std::array::from_fn(|j| xrow(t + j)));
                for (k, vk) in v.iter().enumerate() {
                    for (j, &x) in vk.iter().enumerate() {
                        blk.row(t + j)[i + k] = x;
                    }
                }
                t += TILE_N;
            }
            for t in t..t1 {
                let v = tile1(wr, [xrow(t)]);
                let dst = &mut blk.row(t)[i..i + 4];
                for (d, vk) in dst.iter_mut().zip(v) {
                    *d = vk[0];
                }
            }
        }
        for i in full..rows {
            let row = w.row(r0 + i);
            for t in t0..t1 {
                blk.row(t)[i] = dot(row, xrow(t).q);
            }
        }
    }
}

/// The reference product: each weight row dequantized to f32 once and dotted
/// with every activation row in f32.
pub fn matmul_reference(
    w: &WeightMatrix<'_>,
    x: &[f32],
    out: &mut [f32],
    threads: Threads,
) -> Result<()> {
    let n = check_shapes(w, x, out)?;
    let min_cols = piece_cols(w, n);
    par_column_blocks(out, w.rows, 1, min_cols, threads, |blk| {
        SCRATCH.with(|s| {
            let row = &mut s.borrow_mut().row;
            row.resize(w.cols, 0.0);
            for i in 0..blk.width() {
                // Lengths were checked by `WeightMatrix::new` and `check_shapes`.
                let ok = w.dequantize_row(blk.first() + i, row).is_ok();
                for t in 0..n {
                    blk.row(t)[i] = if ok {
                        dot(row, &x[t * w.cols..(t + 1) * w.cols])
                    } else {
                        f32::NAN
                    };
                }
            }
        })
    });
    Ok(())
}

fn check_shapes(w: &WeightMatrix<'_>, x: &[f32], out: &[f32]) -> Result<usize> {
    let n = x.len() / w.cols.max(1);
    if x.len() != n * w.cols || out.len() != n * w.rows {
        return Err(Error::Shape {
            op: "matmul",
            detail: format!(
                "weight [{}, {}], x len {}, out len {}",
                w.rows,
                w.cols,
                x.len(),
                out.len()
            ),
        });
    }
    Ok(n)
}

/// f32 dot product with four independent accumulators.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..4 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::quantize_row;
    use rand::{Rng, SeedableRng};

    fn naive(wf: &[f32], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
        let n = x.len() / cols;
        let mut out = vec![0.0; n * rows];
        for t in 0..n {
            for r in 0..rows {
                out[t * rows + r] = (0..cols)
                    .map(|c| wf[r * cols + c] as f64 * x[t * cols + c] as f64)
                    .sum::<f64>() as f32;
            }
        }
        out
    }

    #[test]
    fn matmul_matches_naive_over_dequantized_weights() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for ty in GgmlType::ALL {
            let cols = ty.block_size().max(32) * 3;
            // 70 tokens: several L1 chunks of the row-by-row path, with a tail.
            for (rows, n) in [(1, 1), (5, 1), (13, 3), (64, 7), (16, 70)] {
                let wsrc: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let mut wq = vec![0u8; ty.row_bytes(cols).unwrap() * rows];
                let rb = ty.row_bytes(cols).unwrap();
                for r in 0..rows {
                    quantize_row(
                        ty,
                        &wsrc[r * cols..(r + 1) * cols],
                        &mut wq[r * rb..(r + 1) * rb],
                    )
                    .unwrap();
                }
                let w = WeightMatrix::new(ty, rows, cols, &wq).unwrap();
                let mut wf = vec![0.0; rows * cols];
                for r in 0..rows {
                    w.dequantize_row(r, &mut wf[r * cols..(r + 1) * cols])
                        .unwrap();
                }
                let x: Vec<f32> = (0..n * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let want = naive(&wf, rows, cols, &x);
                for threads in [1, 3] {
                    let mut out = vec![0.0; n * rows];
                    matmul_reference(&w, &x, &mut out, Threads::new(threads).unwrap()).unwrap();
                    for (a, b) in out.iter().zip(&want) {
                        assert!((a - b).abs() < 1e-3, "{ty} rows={rows} n={n}: {a} vs {b}");
                    }
                    // The fast path quantizes activations to 8 bits: within 1% of the row's scale.
                    matmul(&w, &x, &mut out, Threads::new(threads).unwrap()).unwrap();
                    for (a, b) in out.iter().zip(&want) {
                        assert!(
                            (a - b).abs() < 0.01 * (cols as f32).sqrt(),
                            "fast {ty} rows={rows} n={n}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn packed_weights_match_the_row_layout() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
        for (ty, rows, cols) in [
            (GgmlType::Q4_0, 8, 32),
            (GgmlType::Q4_0, 24, 96),
            (GgmlType::Q4_0, 64, 320),
            (GgmlType::Q8_0, 16, 64),
            (GgmlType::Q8_0, 40, 160),
            (GgmlType::Q8_0, 32, 96),
            (GgmlType::Q5_0, 64, 64),
            (GgmlType::Q4K, 16, 512),
            (GgmlType::Q4K, 32, 768),
            (GgmlType::Q5_0, 16, 96),
            (GgmlType::Q6K, 8, 256),
            (GgmlType::Q5K, 16, 768),
            (GgmlType::Q5K, 32, 512),
            (GgmlType::Q4_1, 16, 96),
            (GgmlType::Q5_1, 24, 576),
        ] {
            let rb = ty.row_bytes(cols).unwrap();
            let mut wq = vec![0u8; rb * rows];
            for r in wq.chunks_exact_mut(rb) {
                let src: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
                quantize_row(ty, &src, r).unwrap();
            }
            let packed = crate::quant::repack::repack_x8(ty, &wq, rows, cols).unwrap();
            let plain = WeightMatrix::new(ty, rows, cols, &wq).unwrap();
            let fast = plain.with_packed(&packed).unwrap();
            // 64, 70 and 300: AMX passes (where the tier has them) whole,
            // padded and over two chunks of 256 rows.
            for n in [1, 3, 4, 9, 17, 64, 70, 300] {
                let x: Vec<f32> = (0..n * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let (mut a, mut b) = (vec![0.0; n * rows], vec![0.0; n * rows]);
                for threads in [1, 3] {
                    let th = Threads::new(threads).unwrap();
                    matmul(&plain, &x, &mut a, th).unwrap();
                    matmul(&fast, &x, &mut b, th).unwrap();
                    for (p, q) in a.iter().zip(&b) {
                        assert!(
                            (p - q).abs() <= 1e-4 * p.abs().max(1.0),
                            "{rows}x{cols} n={n}: {p} vs {q}"
                        );
                    }
                }
            }
        }
        let wq = vec![0u8; 18 * 4];
        let w = WeightMatrix::new(GgmlType::Q4_0, 4, 32, &wq).unwrap();
        assert!(w.with_packed(&wq).is_err(), "4 rows cannot be packed by 8");
    }

    #[test]
    fn matmul_rejects_bad_shapes() {
        let data = vec![0u8; 18 * 2];
        assert!(WeightMatrix::new(GgmlType::Q4_0, 2, 31, &data).is_err());
        assert!(WeightMatrix::new(GgmlType::Q4_0, 3, 32, &data).is_err());
        let w = WeightMatrix::new(GgmlType::Q4_0, 2, 32, &data).unwrap();
        let mut out = vec![0.0; 3];
        assert!(matmul(&w, &[0.0; 32], &mut out, Threads::new(1).unwrap()).is_err());
    }
}
