//! AVX-512 VNNI weighted sum of a Q8_0 (or Q4_0) V cache: the second half
//! of the integer attention tile ([`super::avx512_attn`]), after the
//! softmax.
//!
//! Per chunk of [`V_CHUNK`] positions the V rows are widened to 16 bits
//! once and stored pair-interleaved: each dword lane of a register holds
//! one dimension of two neighbouring positions. Each query row's softmax
//! weights, times the V blocks' scales, are quantized to signed 16 bits
//! (see [`crate::attention_q8`]) and stored in position order, so the
//! dword of two positions' weights is one broadcast load, and one
//! `vpdpwssd` advances sixteen dimensions by two positions. Four query
//! rows share each V register load (sixteen accumulators for a 64-value
//! slice of the head).
//!
//! Reached only through the AVX-512 tier's attention tile, which the kernel
//! table hands out after AVX-512 F/BW/VL/VNNI were detected: the safety
//! condition of [`weighted_v_q8`].

#![allow(unsafe_code)]

use super::avx512_rows::{block_scales, HeadRows, Wide, LANES, MAX_ROW};
use crate::attention_q8::{BLOCK_BYTES, MIN_WEIGHT_MAX, QK, V_CHUNK, WEIGHT_MAX};
use crate::rows::HeadView;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Position pairs per chunk (one `vpdpwssd` step each).
const PAIRS: usize = V_CHUNK / 2;
/// Sixteen-position quarters per chunk.
const SUB: usize = V_CHUNK / LANES;
/// Query rows that share the V registers.
const ROWS: usize = 4;
/// Most V blocks of a head (256 values).
const MAX_BLOCKS: usize = 256 / QK;

/// One query row's quantized weights of a chunk: per V block (a whole
/// last slice's worth, the missing block's 0), the chunk's positions in
/// order.
type RowWeights = [[i16; V_CHUNK]; MAX_BLOCKS];

/// Per V block and quarter of a chunk: the scales that bound a row's
/// weights ([`bounds`]).
type Bounds = [[__m512; SUB]; MAX_BLOCKS];

/// The weighted sum of the V rows `v` (Q8_0 or Q4_0) at positions
/// `start..n_last` with the softmax weights `probs[r * w + p]` of the rows
/// of `seen` (row `r` sees positions `seen[r].0..seen[r].1`), into `out`
/// (`seen.len() * hd`, overwritten), as
/// [`crate::attention_q8::weighted_v_reference`] computes it (the same
/// integer sums; chunks at multiples of [`V_CHUNK`], a row's weights
/// bounded by the V scales it sees). The dimensions of the accumulators
/// are in the transpose's order until the end ([`dim`]). A head of 32 mod
/// 64 values (Phi-3's 96) ends in half a slice: its missing block reads as
/// zeros with scale 0, and its dimensions are dropped at the end.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI are available; `hd` is a multiple of 32 and at
/// most 256; `probs` holds `seen.len() * w` values, `out`
/// `seen.len() * hd`; every `seen` range lies inside `start..n_last`, and
/// `n_last` is at most the rows the view's block table covers.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn weighted_v_q8(
    view: &HeadView<'_>,
    v: &[u8],
    probs: &[f32],
    seen: &[(usize, usize)],
    start: usize,
    n_last: usize,
    w: usize,
    out: &mut [f32],
) {
    let hd = view.kv.head_dim;
    let (nz, rows) = (hd.div_ceil(64), seen.len());
    // Accumulator row stride: whole 64-value slices.
    let sw = nz * 64;
    SCRATCH.with(|cell| {
        let (vt, acc_f) = &mut *cell.borrow_mut();
        // The chunk's V: [slice][pair][register], each register of a slice
        // four of its dimensions in every 128-bit lane ([`dim`]).
        vt.clear();
        vt.resize(nz * PAIRS * 4, _mm512_setzero_si512());
        acc_f.clear();
        acc_f.resize(rows * sw, 0.0);
        // SAFETY: the caller's contract.
        unsafe { sum_chunks(view, v, probs, seen, start, n_last, w, vt, acc_f) };
        for r in 0..rows {
            for (j, &a) in acc_f[r * sw..(r + 1) * sw].iter().enumerate() {
                let d = dim(j);
                if d < hd {
                    out[r * hd + d] = a;
                }
            }
        }
    })
}

thread_local! {
    /// [`weighted_v_q8`]'s transposed V chunk and accumulators, kept from
    /// call to call (a split decode step calls it once per piece).
    static SCRATCH: RefCell<(Vec<__m512i>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The chunks of [`weighted_v_q8`]: row `r`'s sums into `acc_f[r * sw..]`
/// in the transpose's order, `vt` the chunk's transposed V.
///
/// # Safety
/// As [`weighted_v_q8`]; `vt` holds `nz * PAIRS * 4` registers and
/// `acc_f` `seen.len() * sw` zeros (`nz` 64-value slices of the head,
/// `sw = 64 nz`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn sum_chunks(
    view: &HeadView<'_>,
    v: &[u8],
    probs: &[f32],
    seen: &[(usize, usize)],
    start: usize,
    n_last: usize,
    w: usize,
    vt: &mut [__m512i],
    acc_f: &mut [f32],
) {
    let hd = view.kv.head_dim;
    let (nb, nz, rows) = (hd / QK, hd.div_ceil(64), seen.len());
    let sw = nz * 64;
    let zero = [0u8; MAX_ROW];
    let head = HeadRows::new(view, view.kv.v.ty());
    let mut wide: Wide = [0; LANES * MAX_ROW];
    let mut ptr = [std::ptr::null(); LANES];
    let mut wq = [[[0i16; V_CHUNK]; MAX_BLOCKS]; ROWS];
    let zeros: Bounds = [[_mm512_setzero_ps(); SUB]; MAX_BLOCKS];
    let (mut shared, mut own) = (zeros, zeros);
    let (mut shared_max, mut own_max) = ([0.0f32; MAX_BLOCKS], [0.0f32; MAX_BLOCKS]);
    // Each V block's scales per quarter of the chunk (blocks past `nb`,
    // half a last slice, keep scale 0).
    let mut raw = [[_mm512_setzero_ps(); SUB]; MAX_BLOCKS];
    for p0 in (start / V_CHUNK * V_CHUNK..n_last).step_by(V_CHUNK) {
        for h in 0..SUB {
            let q0 = p0 + h * LANES;
            head.rows(v, q0, n_last, &zero, &mut wide, &mut ptr);
            // SAFETY: every pointer in `ptr` starts a whole row of `nb`
            // blocks; `vt` holds `nz * PAIRS * 4` registers.
            unsafe {
                transpose_v(&ptr, nb, h, vt);
                for (b, d) in raw.iter_mut().take(nb).enumerate() {
                    d[h] = block_scales(&ptr, b * BLOCK_BYTES);
                }
            }
        }
        // What a row that sees the whole chunk quantizes against (rows
        // that see part of it take their own, from the scales they see).
        bounds(
            &raw[..2 * nz],
            &[u16::MAX; SUB],
            &mut shared,
            &mut shared_max,
        );
        let chunk_end = (p0 + V_CHUNK).min(n_last);
        let chunk_mask = seen_mask(p0, p0, chunk_end);
        for r0 in (0..rows).step_by(ROWS) {
            let n = (rows - r0).min(ROWS);
            let mut scale = [[0.0f32; MAX_BLOCKS]; ROWS];
            for (i, (wr, sr)) in wq.iter_mut().zip(scale.iter_mut()).take(n).enumerate() {
                let (lo, hi) = seen[r0 + i];
                let (lo, hi) = (lo.max(p0), hi.min(chunk_end).min(w));
                // A row that sees the whole chunk (every row of a decode
                // step) takes the chunk's mask and bounds.
                let (mask, dvs, dmax) = if (lo, hi) == (p0, chunk_end) {
                    (chunk_mask, &shared, &shared_max)
                } else {
                    let mask = seen_mask(p0, lo, hi);
                    bounds(&raw[..2 * nz], &mask, &mut own, &mut own_max);
                    (mask, &own, &own_max)
                };
                let row = &probs[(r0 + i) * w..];
                // SAFETY: `mask` keeps every load inside the row.
                unsafe { quantize_row(row, p0, &mask, &dvs[..2 * nz], dmax, wr, sr) };
            }
            let o = &mut acc_f[r0 * sw..(r0 + n) * sw];
            // SAFETY: `wq` and `scale` hold `n` rows, `o` `n` rows of `sw`.
            unsafe {
                match n {
                    1 => slices::<1>(vt, &wq, &scale, nz, o),
                    2 => slices::<2>(vt, &wq, &scale, nz, o),
                    3 => slices::<3>(vt, &wq, &scale, nz, o),
                    _ => slices::<ROWS>(vt, &wq, &scale, nz, o),
                }
            }
        }
    }
}

/// Positions `lo..hi` of the chunk at `p0`, per sixteen-position quarter.
fn seen_mask(p0: usize, lo: usize, hi: usize) -> [__mmask16; SUB] {
    std::array::from_fn(|h| {
        let q0 = p0 + h * LANES;
        let bits = |p: usize| (1u32 << p.saturating_sub(q0).min(LANES)) - 1;
        (bits(hi) & !bits(lo)) as u16
    })
}

/// Per V block of `raw`: into `dvs`, its scales on the lanes of `mask`
/// times `WEIGHT_MAX` over the largest of them (0 elsewhere); into `dmax`,
/// that largest scale (at least [`MIN_WEIGHT_MAX`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn bounds(raw: &[[__m512; SUB]], mask: &[__mmask16; SUB], dvs: &mut Bounds, dmax: &mut [f32]) {
    let tiny = _mm512_set1_ps(MIN_WEIGHT_MAX);
    for ((r, d), m) in raw.iter().zip(dvs.iter_mut()).zip(dmax.iter_mut()) {
        for h in 0..SUB {
            d[h] = _mm512_maskz_mov_ps(mask[h], r[h]);
        }
        *m = _mm512_reduce_max_ps(d.iter().fold(tiny, |m, x| _mm512_max_ps(m, *x)));
        let c = _mm512_set1_ps(WEIGHT_MAX / *m);
        for x in d.iter_mut() {
            *x = _mm512_mul_ps(*x, c);
        }
    }
}

/// The head dimension of accumulator value `j` of a row: register `i` of
/// slice `z`, lane `l` holds dimension `64 z + 32 (i / 2) + 8 (l / 4) +
/// 4 (i % 2) + l % 4` (the unpacks work within 128-bit lanes).
fn dim(j: usize) -> usize {
    let (z, i, l) = (j / 64, j / 16 % 4, j % 16);
    64 * z + 32 * (i / 2) + 8 * (l / 4) + 4 * (i % 2) + l % 4
}

/// One query row's weights of the chunk at `p0` (`probs` its row):
/// `wq[b][p]` the quantized weight of position `p0 + p` in block `b`,
/// `scale[b]` what block `b`'s integer sum is multiplied by.
///
/// # Safety
/// AVX-512 F/BW/VL are available; `mask[h]` covers only values of `probs`
/// (from `p0 + 16 h`), and only those the row sees.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn quantize_row(
    probs: &[f32],
    p0: usize,
    mask: &[__mmask16; SUB],
    dvs: &[[__m512; SUB]],
    dmax: &[f32; MAX_BLOCKS],
    wq: &mut RowWeights,
    scale: &mut [f32; MAX_BLOCKS],
) {
    let tiny = _mm512_set1_ps(MIN_WEIGHT_MAX);
    let pr: [__m512; SUB] = std::array::from_fn(|h| {
        if mask[h] == 0 {
            return _mm512_setzero_ps();
        }
        // SAFETY: `mask` keeps the load inside the row.
        unsafe { _mm512_maskz_loadu_ps(mask[h], probs[p0 + h * LANES..].as_ptr()) }
    });
    let pmax = _mm512_reduce_max_ps(pr.iter().fold(tiny, |m, p| _mm512_max_ps(m, *p)));
    let inv = _mm512_set1_ps(1.0 / pmax);
    let pr = pr.map(|p| _mm512_mul_ps(p, inv));
    for (b, (d, wb)) in dvs.iter().zip(wq.iter_mut()).enumerate() {
        let q: [__m512i; SUB] =
            std::array::from_fn(|h| _mm512_cvtps_epi32(_mm512_mul_ps(pr[h], d[h])));
        for half in 0..SUB / 2 {
            // SAFETY: 32 values of `wb` from `32 half`.
            unsafe {
                _mm512_storeu_si512(
                    wb[half * 2 * LANES..].as_mut_ptr() as *mut _,
                    _mm512_packs_epi32(q[2 * half], q[2 * half + 1]),
                )
            };
        }
        scale[b] = pmax * dmax[b] * (1.0 / WEIGHT_MAX);
    }
}

/// The chunk's sums of `R` query rows (`wq`, `scale`) over the transposed
/// V (`vt`, `nz` slices), added to their accumulators `o` (`R` rows of
/// `nz * 64`, in the transpose's order).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI are available; `vt` holds `nz * PAIRS * 4`
/// registers, `o` `R * nz * 64` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn slices<const R: usize>(
    vt: &[__m512i],
    wq: &[RowWeights; ROWS],
    scale: &[[f32; MAX_BLOCKS]; ROWS],
    nz: usize,
    o: &mut [f32],
) {
    let sw = nz * 64;
    for z in 0..nz {
        let mut acc = [[_mm512_setzero_si512(); 4]; R];
        for k in 0..PAIRS {
            let vr: &[__m512i; 4] = vt[(z * PAIRS + k) * 4..][..4].try_into().unwrap();
            for (a, wr) in acc.iter_mut().zip(wq) {
                // Two positions' weights of blocks 2z and 2z + 1: one
                // dword each.
                let pair = |b: usize| {
                    // SAFETY: positions 2k, 2k + 1 of block `b` in `wr`.
                    let x = unsafe { (wr[b].as_ptr().add(2 * k) as *const i32).read_unaligned() };
                    _mm512_set1_epi32(x)
                };
                let (w0, w1) = (pair(2 * z), pair(2 * z + 1));
                a[0] = _mm512_dpwssd_epi32(a[0], vr[0], w0);
                a[1] = _mm512_dpwssd_epi32(a[1], vr[1], w0);
                a[2] = _mm512_dpwssd_epi32(a[2], vr[2], w1);
                a[3] = _mm512_dpwssd_epi32(a[3], vr[3], w1);
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for (i, ai) in a.iter().enumerate() {
                let s = _mm512_set1_ps(scale[r][2 * z + i / 2]);
                let at = o[r * sw + (z * 4 + i) * 16..][..16].as_mut_ptr();
                // SAFETY: 16 floats of row `r` from `at`.
                unsafe {
                    _mm512_storeu_ps(
                        at,
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(*ai), s, _mm512_loadu_ps(at)),
                    )
                };
            }
        }
    }
}

/// Where the weights of pair `k` (positions `2k`, `2k + 1`) of quarter
/// `h` lie among a block's 32 weight dwords: `vpackssdw` packs two
/// quarters lane by lane, so in each 128-bit lane two pairs of the first
/// quarter come before two of the second.
fn slot(h: usize, k: usize) -> usize {
    16 * (h / 2) + 4 * (k / 2) + k % 2 + 2 * (h % 2)
}

/// The sixteen V rows at `ptr` (quarter `h` of the chunk; `nb` Q8_0
/// blocks each, in `nz = nb.div_ceil(2)` 64-value slices; an odd last
/// block's missing partner reads as zeros) widened to 16 bits into `vt`:
/// per slice and pair of positions, four registers whose dword lanes hold
/// one dimension of the two positions (the first in the low half).
///
/// # Safety
/// Each `ptr[j]` starts a row of `nb` Q8_0 blocks; `vt` holds
/// `nz * PAIRS * 4` registers; AVX-512 F/BW are available.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn transpose_v(ptr: &[*const u8; LANES], nb: usize, h: usize, vt: &mut [__m512i]) {
    let nz = nb.div_ceil(2);
    for z in 0..nz {
        let off = 2 * z * BLOCK_BYTES + 2;
        let whole = 2 * z + 1 < nb;
        // Block 2z (low) and 2z + 1 (high) of row `j`, as 16-bit values.
        // SAFETY: the caller's contract covers every load.
        let load = |j: usize| unsafe {
            let lo = _mm512_cvtepi8_epi16(_mm256_loadu_si256(ptr[j].add(off) as *const __m256i));
            let hi = if whole {
                _mm512_cvtepi8_epi16(_mm256_loadu_si256(
                    ptr[j].add(off + BLOCK_BYTES) as *const __m256i
                ))
            } else {
                _mm512_setzero_si512()
            };
            (lo, hi)
        };
        for k in 0..LANES / 2 {
            let ((a0, a1), (b0, b1)) = (load(2 * k), load(2 * k + 1));
            let at = (z * PAIRS + slot(h, k)) * 4;
            let regs = [
                _mm512_unpacklo_epi16(a0, b0),
                _mm512_unpackhi_epi16(a0, b0),
                _mm512_unpacklo_epi16(a1, b1),
                _mm512_unpackhi_epi16(a1, b1),
            ];
            // SAFETY: `slot` < PAIRS and `z` < `nz`: the caller's `vt`
            // holds the four registers.
            unsafe { std::ptr::copy_nonoverlapping(regs.as_ptr(), vt.as_mut_ptr().add(at), 4) };
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::attention_q8::test_cache::{Cache, SHAPES};
    use crate::attention_q8::weighted_v_reference;
    use crate::rows::KvType;

    fn avx512() -> bool {
        crate::cpu::tiers().contains(&crate::cpu::Isa::Avx512)
    }

    /// The accumulator order covers every dimension of a slice once.
    #[test]
    fn dims_are_a_permutation() {
        let mut seen: Vec<usize> = (0..128).map(super::dim).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..128).collect::<Vec<_>>());
    }

    /// Awkward sizes: contexts that end mid-chunk and mid-block, a start
    /// past 0, pages of 8 and 16 slots (chunks that cross pages), heads of
    /// 32 to 256 values; query rows that fill no, one and two groups of
    /// four.
    #[test]
    fn simd_weighted_v_equals_the_reference() {
        if !avx512() {
            return;
        }
        for ((bs, nkv, hd, n_last, start), ty) in SHAPES
            .into_iter()
            .flat_map(|s| [KvType::Q8_0, KvType::Q4_0].map(|t| (s, t)))
        {
            for rows in [1, 2, 3, 5, 8] {
                check(bs, nkv, hd, n_last, start, ty, rows);
            }
        }
    }

    fn check(
        bs: usize,
        nkv: usize,
        hd: usize,
        n_last: usize,
        start: usize,
        ty: KvType,
        rows: usize,
    ) {
        let c = Cache::with_type(n_last.div_ceil(bs) + 1, bs, nkv, hd, start, 0.3, ty);
        let view = c.view();
        let w = n_last.next_multiple_of(8);
        // Weights as a softmax leaves them: one large, many small, some
        // exactly 0 (positions a row does not see), 0 past `n_last`.
        let probs: Vec<f32> = (0..rows * w)
            .map(|i| {
                let p = i % w;
                if p < start || p >= n_last || p % 11 == 3 {
                    0.0
                } else if p % 17 == 5 + i / w {
                    0.5
                } else {
                    ((i * 13 % 29) as f32 + 1.0) * 1e-3
                }
            })
            .collect();
        // Rows that see all of `start..n_last`, and rows that see a part
        // (a verification's earlier tokens, a window's later ones).
        let seen: Vec<(usize, usize)> = (0..rows)
            .map(|r| match r % 3 {
                0 => (start, n_last),
                1 => (start, n_last - (n_last - start) / 3),
                _ => (start + (n_last - start) / 4, n_last),
            })
            .collect();
        let (mut want, mut got) = (vec![f32::NAN; rows * hd], vec![f32::NAN; rows * hd]);
        weighted_v_reference(&view, &c.bytes, &probs, &seen, start, n_last, w, &mut want);
        // SAFETY: AVX-512 VNNI detected; shapes as the kernel requires.
        unsafe { super::weighted_v_q8(&view, &c.bytes, &probs, &seen, start, n_last, w, &mut got) };
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{ty:?} hd={hd} n={n_last} rows={rows} value {i}: {a} vs {b}"
            );
        }
    }
}
