//! Products of a (possibly quantized) weight matrix with f32 activations.
//!
//! Reference: each weight row is dequantized once into f32 and dotted with
//! every activation row, so one pass over the weights serves the whole batch.
//! Work is split across threads by weight rows.

use crate::cpu::kernels;
use crate::quant::{dequantize_row, GgmlType};
use crate::threads::{par_chunks, Threads};
use crate::{Error, Result};
use std::cell::RefCell;

/// A borrowed row-major weight matrix `[rows, cols]` stored as `ty` blocks.
#[derive(Debug, Clone, Copy)]
pub struct WeightMatrix<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
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
        })
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

thread_local! {
    static SCRATCH: RefCell<(Vec<f32>, Vec<f32>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// `out[t, r] = sum_c w[r, c] * x[t, c]` for `n = x.len() / cols` rows of
/// activations; `out` is `[n, rows]`.
///
/// Uses the fastest kernel of [`crate::cpu::kernels`]: for Q8_0/Q4_0 weights
/// the activations are quantized to Q8_0 once and every product is an
/// integer dot (as ggml does); F16 weights use an F16C dot; other types take
/// [`matmul_reference`]'s path.
pub fn matmul(w: &WeightMatrix<'_>, x: &[f32], out: &mut [f32], threads: Threads) -> Result<()> {
    let n = check_shapes(w, x, out)?;
    let k = kernels();
    if let Some(path) = k.quant_path(w.ty) {
        let act_rb = path.act_row_bytes(w.cols);
        let mut xq = SCRATCH.with(|s| std::mem::take(&mut s.borrow_mut().2));
        xq.clear();
        xq.resize(n * act_rb, 0);
        for (xr, qr) in x.chunks_exact(w.cols).zip(xq.chunks_exact_mut(act_rb)) {
            (path.quantize)(xr, qr);
        }
        let xq_ref = &xq;
        let xrow = |t: usize| &xq_ref[t * act_rb..(t + 1) * act_rb];
        for_rows(w, n, out, threads, |r, dst| {
            let row = w.row(r);
            let mut t = 0;
            if let Some(dot4) = path.dot4 {
                while t + 4 <= dst.len() {
                    let v = dot4(row, [xrow(t), xrow(t + 1), xrow(t + 2), xrow(t + 3)]);
                    dst[t..t + 4].copy_from_slice(&v);
                    t += 4;
                }
            }
            for (i, d) in dst[t..].iter_mut().enumerate() {
                *d = (path.dot)(row, xrow(t + i));
            }
        });
        SCRATCH.with(|s| s.borrow_mut().2 = xq);
        return Ok(());
    }
    if w.ty == GgmlType::F16 {
        let dot = k.f16_dot;
        for_rows(w, n, out, threads, |r, dst| {
            let row = w.row(r);
            for (t, d) in dst.iter_mut().enumerate() {
                *d = dot(row, &x[t * w.cols..(t + 1) * w.cols]);
            }
        });
        return Ok(());
    }
    matmul_reference(w, x, out, threads)
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
    for_rows(w, n, out, threads, |r, dst| {
        SCRATCH.with(|s| {
            let row = &mut s.borrow_mut().0;
            row.resize(w.cols, 0.0);
            // Lengths were checked by `WeightMatrix::new` and `check_shapes`.
            if w.dequantize_row(r, row).is_err() {
                dst.fill(f32::NAN);
                return;
            }
            for (t, d) in dst.iter_mut().enumerate() {
                *d = dot(row, &x[t * w.cols..(t + 1) * w.cols]);
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

/// Runs `f(row, results for the n activation rows)` for every weight row,
/// split across threads, and lays the results out as `[n, rows]`.
fn for_rows(
    w: &WeightMatrix<'_>,
    n: usize,
    out: &mut [f32],
    threads: Threads,
    f: impl Fn(usize, &mut [f32]) + Sync,
) {
    if n == 1 {
        // Decode: rows of the output are contiguous, no transpose needed.
        par_chunks(out, 1, threads, |r0, piece| {
            for (i, d) in piece.chunks_exact_mut(1).enumerate() {
                f(r0 + i, d);
            }
        });
        return;
    }
    // Batched: compute [rows, n] into per-call scratch, then transpose to [n, rows].
    let mut tmp = SCRATCH.with(|s| std::mem::take(&mut s.borrow_mut().1));
    tmp.clear();
    tmp.resize(w.rows * n, 0.0);
    par_chunks(&mut tmp, n, threads, |r0, piece| {
        for (i, dst) in piece.chunks_exact_mut(n).enumerate() {
            f(r0 + i, dst);
        }
    });
    for r in 0..w.rows {
        for t in 0..n {
            out[t * w.rows + r] = tmp[r * n + t];
        }
    }
    SCRATCH.with(|s| s.borrow_mut().1 = tmp);
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
            for (rows, n) in [(1, 1), (5, 1), (13, 3), (64, 7)] {
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
    fn matmul_rejects_bad_shapes() {
        let data = vec![0u8; 18 * 2];
        assert!(WeightMatrix::new(GgmlType::Q4_0, 2, 31, &data).is_err());
        assert!(WeightMatrix::new(GgmlType::Q4_0, 3, 32, &data).is_err());
        let w = WeightMatrix::new(GgmlType::Q4_0, 2, 32, &data).unwrap();
        let mut out = vec![0.0; 3];
        assert!(matmul(&w, &[0.0; 32], &mut out, Threads::new(1).unwrap()).is_err());
    }
}
