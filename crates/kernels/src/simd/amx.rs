//! AMX int8 tiles (Sapphire Rapids and later) for the prefill products of
//! the 32-element types without minimums (Q4_0, Q5_0, Q8_0).
//!
//! One `tdpbssd` multiplies a tile of 16 activation rows x 32 bytes (one
//! Q8_0 block of each row) by a tile of 32 bytes x 16 weight rows (one
//! block of two adjacent eight-row groups), 8,192 products, into 16 x 16
//! int32 sums. Each block has its own scales, so the sums are stored and
//! scaled into float accumulators block by block with AVX-512 (the
//! "epilogue"). A pass takes 32 activation rows against 32 weight rows:
//! per block two activation tiles and two weight tiles feed four
//! independent `tdpbssd` (one `tdpbssd` waits ~50 cycles for its
//! predecessor on the same tile: a chain per tile would idle the unit),
//! and the next block's tile work overlaps this block's epilogue.
//!
//! The weights are first unpacked from the x8 layout into a *panel*: for
//! each block, the B tile (8 rows of 16 weight rows x 4 consecutive
//! elements, signed bytes: the layout `vpdpbusd` lanes already use) and
//! the 16 rows' scales as f32. A panel is made once per pair of groups and
//! serves every activation row.
//!
//! Reached only through [`crate::cpu::Kernels::amx`], which exists only
//! after AVX-512 (F/BW/VL/VNNI), AMX-TILE and AMX-INT8 were detected and
//! the OS granted this process the tile data ([`available`]): the safety
//! condition of every function below.

#![allow(unsafe_code)]

use super::avx2_x8::{Q4_UNIT, Q5_UNIT, Q8_UNIT};
use super::avx512_x16::{join, join_f16, prep_q4, prep_q5};
use crate::rows::{AmxPanelRef, AMX_B_TILE as B_TILE};
use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Whether the CPU has AMX-TILE and AMX-INT8 and this process may use the
/// tile registers (Linux hands them out on request, once per process).
pub fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        // CPUID leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
        let edx = __cpuid_count(7, 0).edx;
        edx >> 24 & 1 == 1 && edx >> 25 & 1 == 1 && request_tile_data()
    })
}

#[cfg(target_os = "linux")]
fn request_tile_data() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with these arguments only changes which state
    // components this process may use; it reads and writes no memory.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(target_os = "linux"))]
fn request_tile_data() -> bool {
    false
}

/// The tile configuration (palette 1): tmm0..tmm3 sums (16 rows x 64
/// bytes), tmm4/tmm5 activations (16 rows x 32 bytes), tmm6/tmm7 weights
/// (8 rows x 64 bytes).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

static CONFIG: TileConfig = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let shapes: [(u8, u16); 8] = [
        (16, 64),
        (16, 64),
        (16, 64),
        (16, 64),
        (16, 32),
        (16, 32),
        (8, 64),
        (8, 64),
    ];
    let mut t = 0;
    while t < shapes.len() {
        let b = shapes[t].1.to_le_bytes();
        c[16 + 2 * t] = b[0];
        c[17 + 2 * t] = b[1];
        c[48 + t] = shapes[t].0;
        t += 1;
    }
    TileConfig(c)
};

/// Writes a panel's block `b` from the eight B rows `w` less `zero`
/// (wrapping: the tiles read them unsigned) and the scales `dw`.
///
/// # Safety
/// `q` must have `B_TILE` writable bytes at `512 b`, `d` 16 floats at `16 b`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn put_block(
    q: *mut u8,
    d: *mut f32,
    b: usize,
    w: [__m512i; 8],
    zero: i8,
    dw: __m512,
) {
    let z = _mm512_set1_epi8(zero);
    for (k, wk) in w.into_iter().enumerate() {
        // SAFETY: the caller's contract.
        unsafe {
            _mm512_storeu_si512(q.add(B_TILE * b + 64 * k) as *mut _, _mm512_sub_epi8(wk, z))
        };
    }
    // SAFETY: as above.
    unsafe { _mm512_storeu_ps(d.add(16 * b), dw) };
}

/// Generates a panel maker of a 32-element type: its unit size, the x16
/// kernels' preparation of a block's eight B rows, and the zero point.
macro_rules! panel {
    ($name:ident, $impl_name:ident, $unit:expr, $prep:expr, $zero:expr) => {
        pub fn $name(pair: [&[u8]; 2], nb: usize, q: &mut [u8], d: &mut [f32], _m: &mut [f32]) {
            assert!(pair.iter().all(|g| g.len() >= nb * $unit));
            assert!(q.len() >= nb * B_TILE && d.len() >= nb * 16);
            // SAFETY: features detected by the kernel table; lengths checked above.
            unsafe { $impl_name(pair, nb, q, d) }
        }

        /// # Safety
        /// The features named in `target_feature` must be present and the
        /// lengths those `$name` checks.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $impl_name(pair: [&[u8]; 2], nb: usize, q: &mut [u8], d: &mut [f32]) {
            for b in 0..nb {
                // SAFETY: unit `b < nb` of both groups (checked by the caller).
                let (ua, ub) = unsafe {
                    (
                        pair[0].as_ptr().add(b * $unit),
                        pair[1].as_ptr().add(b * $unit),
                    )
                };
                // Two streams the hardware prefetcher does not follow far enough.
                for u in [ua, ub] {
                    super::prefetch_ahead(u, $unit);
                    super::prefetch_far(u, $unit, super::far_distance($unit, 256));
                }
                // SAFETY: a unit starts with its eight rows' f16 scales.
                let dw = unsafe { join_f16(ua, ub, 0) };
                let w = $prep(ua, ub);
                // SAFETY: block `b < nb` of the panel (checked by the caller).
                unsafe { put_block(q.as_mut_ptr(), d.as_mut_ptr(), b, w, $zero, dw) };
            }
        }
    };
}

/// Q8_0's B rows are its units' quant bytes (made unsigned by the panel's
/// zero point -128: `w ^ 0x80 = w + 128`, as the x16 kernels do).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn prep_q8_signed(a: *const u8, b: *const u8) -> [__m512i; 8] {
    // SAFETY: each Q8_0 unit holds 256 quant bytes after its 16 scale bytes.
    std::array::from_fn(|k| unsafe { join(a, b, 16 + 32 * k) })
}

panel!(panel_q4_0, panel_q4_0_impl, Q4_UNIT, prep_q4::<16>, 0);
panel!(panel_q5_0, panel_q5_0_impl, Q5_UNIT, prep_q5::<16>, 0);
panel!(panel_q8_0, panel_q8_0_impl, Q8_UNIT, prep_q8_signed, -128);

/// See [`crate::rows::AmxGemm`].
pub fn gemm_tiles(
    panels: [AmxPanelRef<'_>; 2],
    xa: &[u8],
    dx: &[f32],
    xs: &[f32],
    nb: usize,
    out: &mut [[f32; 32]],
) {
    let passes = out.len() / ROWS2;
    assert_eq!(out.len(), passes * ROWS2);
    let mins = !panels[0].2.is_empty();
    for (q, d, m) in panels {
        assert!(q.len() >= nb * B_TILE && d.len() >= nb * 16);
        assert!(!mins || m.len() >= nb * 16);
    }
    let terms = passes * nb * ROWS2;
    assert!(xa.len() >= terms * 32 && dx.len() >= terms && xs.len() >= terms);
    let p = panels.map(|(q, d, m)| (q.as_ptr(), d.as_ptr(), m.as_ptr()));
    for (t, o) in out.chunks_exact_mut(ROWS2).enumerate() {
        let x = &xa[t * nb * ROWS2 * 32..];
        let at = t * nb * ROWS2;
        // SAFETY: features detected by the kernel table; every length checked above.
        unsafe {
            if mins {
                tiles_impl::<true>(
                    p,
                    x.as_ptr(),
                    dx.as_ptr().add(at),
                    xs.as_ptr().add(at),
                    nb,
                    o,
                )
            } else {
                tiles_impl::<false>(
                    p,
                    x.as_ptr(),
                    dx.as_ptr().add(at),
                    xs.as_ptr().add(at),
                    nb,
                    o,
                )
            }
        };
    }
}

/// Activation rows of one tile.
const TILE_ROWS: usize = 16;
/// Activation rows of one pass of [`tiles_impl`]: two tiles.
const ROWS2: usize = crate::rows::AMX_ROWS;

/// The four tiles' int32 sums of one block, as the tiles store them:
/// `[token tile][pair]`.
#[repr(C, align(64))]
struct Sums([[[[i32; 16]; 16]; 2]; 2]);

/// The float accumulators of 32 activation rows x 32 weight rows.
#[repr(C, align(64))]
struct Acc([[f32; 32]; ROWS2]);

/// The tile work of block `b`: two activation tiles (`x`, laid out as
/// [`crate::rows::AmxGemm`] says) and the two panels' weight tiles, four
/// independent `tdpbssd`, the sums stored at `c` (four 1 KiB tiles).
///
/// # Safety
/// The tiles configured by [`CONFIG`]; block `b` of the activations and
/// both panels; 4 KiB writable at `c`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_block(p: [Panel; 2], x: *const u8, b: usize, c: *mut u8) {
    // SAFETY: the caller's contract.
    unsafe {
        let a0 = x.add(ROWS2 * 32 * b);
        asm!(
            "tileloadd tmm4, [{a0} + {sa}*1]",
            "tileloadd tmm6, [{w0} + {sw}*1]",
            "tileloadd tmm5, [{a1} + {sa}*1]",
            "tileloadd tmm7, [{w1} + {sw}*1]",
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tdpbsud tmm0, tmm4, tmm6",
            "tdpbsud tmm1, tmm4, tmm7",
            "tdpbsud tmm2, tmm5, tmm6",
            "tdpbsud tmm3, tmm5, tmm7",
            "tilestored [{c} + {sw}*1], tmm0",
            "tilestored [{c1} + {sw}*1], tmm1",
            "tilestored [{c2} + {sw}*1], tmm2",
            "tilestored [{c3} + {sw}*1], tmm3",
            a0 = in(reg) a0,
            a1 = in(reg) a0.add(TILE_ROWS * 32),
            w0 = in(reg) p[0].0.add(B_TILE * b),
            w1 = in(reg) p[1].0.add(B_TILE * b),
            c = in(reg) c,
            c1 = in(reg) c.add(1024),
            c2 = in(reg) c.add(2048),
            c3 = in(reg) c.add(3072),
            sa = in(reg) 32usize,
            sw = in(reg) 64usize,
            options(nostack),
        )
    };
}

/// A panel's B tiles, scales and minimum terms.
type Panel = (*const u8, *const f32, *const f32);

/// Blocks whose sums are scaled together: each accumulator is loaded and
/// stored once per `KB` blocks.
const KB: usize = 2;

/// Two tiles of activation rows (`x`: one pass, laid out as
/// [`crate::rows::AmxGemm`] says) against two panels: for each block, four independent `tdpbssd` (two loads of
/// activations and two of weights serve all four); then, [`KB`] blocks at
/// a time, each quarter of the accumulators is loaded into registers,
/// takes the scaled sums of those blocks and is stored back. The next
/// blocks' tile work is issued before this scaling (the sums alternate
/// between two buffers), so the two overlap. Without `MINS` a block adds
/// `dw * (dx * sum + xs)` (`xs` the rows' offset terms), exactly as the
/// x16 kernels do; with `MINS`, `dx * (dw * sum - m * xs)` (`m` the
/// panels' minimum terms, `xs` the rows' quant sums).
///
/// # Safety
/// The features named in `target_feature` and AMX-INT8 must be present
/// with the tile data granted; each panel must hold `nb` B tiles and `16
/// nb` scales (and minimum terms with `MINS`), `dx` (and `xs` with
/// `MINS`) `32 nb` floats and `x` `1024 nb` bytes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tiles_impl<const MINS: bool>(
    p: [Panel; 2],
    x: *const u8,
    dx: *const f32,
    xs: *const f32,
    nb: usize,
    out: &mut [[f32; 32]],
) {
    let zero = || Sums([[[[0; 16]; 16]; 2]; 2]);
    let mut sums: [[Sums; KB]; 2] = [[zero(), zero()], [zero(), zero()]];
    let mut acc = Acc([[0.0; 32]; ROWS2]);
    // SAFETY: loads the static configuration above; the tiles it shapes
    // are only used by this function, which releases them before returning.
    unsafe { asm!("ldtilecfg [{}]", in(reg) CONFIG.0.as_ptr(), options(nostack, readonly)) };
    let chunks = nb.div_ceil(KB);
    let tiles = |sums: &mut [Sums; KB], ch: usize| {
        for (k, s) in sums.iter_mut().enumerate().take(nb - ch * KB) {
            // SAFETY: block `ch * KB + k < nb` exists (the caller's
            // contract); `s` is a `Sums` of 4 KiB.
            unsafe { tile_block(p, x, ch * KB + k, s.0.as_mut_ptr() as *mut u8) };
        }
    };
    if chunks > 0 {
        tiles(&mut sums[0], 0);
    }
    for ch in 0..chunks {
        let (cur, next) = sums.split_at_mut(1);
        let (cur, next) = if ch % 2 == 0 {
            (&cur[0], &mut next[0])
        } else {
            (&next[0], &mut cur[0])
        };
        if ch + 1 < chunks {
            tiles(next, ch + 1);
        }
        let kb = KB.min(nb - ch * KB);
        for (ti, pj) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
            let rows = &mut acc.0[TILE_ROWS * ti..TILE_ROWS * (ti + 1)];
            // SAFETY: each row has 32 floats.
            let mut a: [__m512; TILE_ROWS] =
                std::array::from_fn(|m| unsafe { _mm512_loadu_ps(rows[m].as_ptr().add(16 * pj)) });
            for (k, s) in cur.iter().enumerate().take(kb) {
                let b = ch * KB + k;
                let at = ROWS2 * b + TILE_ROWS * ti;
                // SAFETY: block `b < nb` of the panel's scales (and minimum
                // terms with `MINS`) and of `dx` (and `xs`).
                let (dw, mw, dxb, xsb) = unsafe {
                    let mw = if MINS {
                        _mm512_loadu_ps(p[pj].2.add(16 * b))
                    } else {
                        _mm512_setzero_ps()
                    };
                    (
                        _mm512_loadu_ps(p[pj].1.add(16 * b)),
                        mw,
                        dx.add(at),
                        xs.add(at),
                    )
                };
                for (m, am) in a.iter_mut().enumerate() {
                    let sum = &s.0[ti][pj][m];
                    // SAFETY: a 64-byte aligned row of `s`; `dxb` (and `xsb`
                    // with `MINS`) has 16 floats.
                    unsafe {
                        let f = _mm512_cvtepi32_ps(_mm512_load_si512(sum.as_ptr() as *const _));
                        let (dxm, xsm) = (_mm512_set1_ps(*dxb.add(m)), _mm512_set1_ps(*xsb.add(m)));
                        if MINS {
                            let f = _mm512_fnmadd_ps(mw, xsm, _mm512_mul_ps(f, dw));
                            *am = _mm512_fmadd_ps(f, dxm, *am);
                        } else {
                            // The x16 kernels' two roundings, in their order:
                            // a row's result does not depend on its batch.
                            *am = _mm512_fmadd_ps(dw, _mm512_fmadd_ps(dxm, f, xsm), *am);
                        }
                    }
                }
            }
            for (row, am) in rows.iter_mut().zip(a) {
                // SAFETY: each row has 32 floats.
                unsafe { _mm512_storeu_ps(row.as_mut_ptr().add(16 * pj), am) };
            }
        }
    }
    // SAFETY: gives the tile state back (no operands).
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
    out.copy_from_slice(&acc.0);
}

#[cfg(test)]
mod tests {
    use crate::cpu::{Isa, Kernels};
    use crate::quant::dot::quantize_q8_0_act;
    use crate::quant::repack::{dot_q4_0x8, dot_q5_0x8, dot_q8_0x8, repack_x8};
    use crate::quant::{quantize_row, GgmlType};
    use crate::rows::{q8_row_terms, zero_offset, Q8Row, AMX_B_TILE, AMX_ROWS, X8_N};
    use rand::{Rng, SeedableRng};

    /// Panels and passes against the x8 reference dot of each group, on
    /// awkward block counts and one and two passes.
    #[test]
    fn tiles_match_the_reference() {
        if !crate::cpu::tiers().contains(&Isa::Amx) {
            eprintln!("skipped: this CPU has no AMX tier");
            return;
        }
        let table = Kernels::for_isa(Isa::Amx);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(25);
        let cases = [
            (
                GgmlType::Q4_0,
                dot_q4_0x8 as fn(&[u8], Q8Row<'_>) -> [f32; 8],
            ),
            (GgmlType::Q5_0, dot_q5_0x8),
            (GgmlType::Q8_0, dot_q8_0x8),
        ];
        for (ty, reference) in cases {
            let (panel, gemm) = table.amx_path(ty).unwrap();
            for nb in [1, 2, 3, 18] {
                let cols = 32 * nb;
                let rb = ty.row_bytes(cols).unwrap();
                let mut w = vec![0u8; 32 * rb];
                for r in w.chunks_exact_mut(rb) {
                    let src: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
                    quantize_row(ty, &src, r).unwrap();
                }
                let packed = repack_x8(ty, &w, 32, cols).unwrap();
                let groups: Vec<&[u8]> = packed.chunks_exact(packed.len() / 4).collect();
                let mut q = [vec![0u8; nb * AMX_B_TILE], vec![0u8; nb * AMX_B_TILE]];
                let mut d = [vec![0f32; nb * 16], vec![0f32; nb * 16]];
                for k in 0..2 {
                    panel(
                        [groups[2 * k], groups[2 * k + 1]],
                        nb,
                        &mut q[k],
                        &mut d[k],
                        &mut [],
                    );
                }
                for n in [32, 64] {
                    let row = 34 * nb;
                    let mut xq = vec![0u8; n * row];
                    for (i, r) in xq.chunks_exact_mut(row).enumerate() {
                        let src: Vec<f32> = (0..cols)
                            .map(|c| {
                                if c % 7 == i % 7 {
                                    90.0
                                } else {
                                    rng.gen_range(-3.0..3.0)
                                }
                            })
                            .collect();
                        quantize_q8_0_act(&src, r);
                    }
                    let (mut xd, mut xds) = (Vec::new(), Vec::new());
                    q8_row_terms(zero_offset(ty), &xq, &mut xd, &mut xds);
                    // The terms the tier's x16 kernels take.
                    let (mut td, mut tds) = (Vec::new(), Vec::new());
                    q8_row_terms(table.x8_zero_offset(ty), &xq, &mut td, &mut tds);
                    // Pass p, block b, row m: index (p nb + b) 32 + m.
                    let (mut xa, mut dx) = (vec![0u8; 32 * n * nb], vec![0f32; n * nb]);
                    let mut xs = vec![0f32; n * nb];
                    for k in 0..n * nb {
                        let (m, b, p) = (k % AMX_ROWS, k / AMX_ROWS % nb, k / AMX_ROWS / nb);
                        let t = AMX_ROWS * p + m;
                        (dx[k], xs[k]) = (td[t * nb + b], 8.0 * tds[t * nb + b]);
                        xa[32 * k..32 * k + 32].copy_from_slice(&xq[t * row + 34 * b + 2..][..32]);
                    }
                    let mut out = vec![[0f32; 32]; n];
                    let panels = [
                        (&q[0][..], &d[0][..], &[][..]),
                        (&q[1][..], &d[1][..], &[][..]),
                    ];
                    gemm(panels, &xa, &dx, &xs, nb, &mut out);
                    // Bit for bit what the x16 kernels give each row, so a
                    // row's result does not depend on the rows beside it.
                    let x16 = table.x16_path(ty).unwrap();
                    for (set, rows) in out.chunks_exact(X8_N).enumerate() {
                        let xr: [Q8Row<'_>; X8_N] = std::array::from_fn(|j| {
                            let i = X8_N * set + j;
                            Q8Row {
                                q: &xq[i * row..(i + 1) * row],
                                d: &td[i * nb..(i + 1) * nb],
                                ds: &tds[i * nb..(i + 1) * nb],
                            }
                        });
                        for k in 0..2 {
                            let want = x16([groups[2 * k], groups[2 * k + 1]], &xr);
                            for (j, w) in want.iter().enumerate() {
                                let got = &rows[j][16 * k..16 * k + 16];
                                assert!(
                                    got.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits()),
                                    "{ty} nb {nb}: row {} differs from the x16 kernel",
                                    X8_N * set + j
                                );
                            }
                        }
                    }
                    for (i, got) in out.iter().enumerate() {
                        let x = Q8Row {
                            q: &xq[i * row..(i + 1) * row],
                            d: &xd[i * nb..(i + 1) * nb],
                            ds: &xds[i * nb..(i + 1) * nb],
                        };
                        let want: Vec<f32> = groups.iter().flat_map(|g| reference(g, x)).collect();
                        for r in 0..32 {
                            let tol = 1e-4 * want[r].abs().max(1.0) * nb as f32;
                            assert!(
                                (got[r] - want[r]).abs() <= tol,
                                "{ty} nb {nb} n {n} ({i},{r}): {} vs {}",
                                got[r],
                                want[r]
                            );
                        }
                    }
                }
            }
        }
    }
}
