//! Where the AVX-512 integer attention finds its cache rows: one KV
//! head's rows of sixteen positions at a time as pointers into the paged
//! pool ([`rows_at`], with prefetching), Q4_0 rows widened to the Q8_0
//! rows of the same values ([`HeadRows::rows`]).

#![allow(unsafe_code)]

use crate::attention_q8::{BLOCK_BYTES, CHUNK, Q4_BLOCK_BYTES, QK};
use crate::rows::{HeadView, KvType};
use std::arch::x86_64::*;

/// Positions per pass (the 32-bit lanes of a 512-bit register).
pub(super) const LANES: usize = CHUNK;
/// Longest cache row handled (the tile's widest head, 256 values).
pub(super) const MAX_ROW: usize = 256 / QK * BLOCK_BYTES;
/// Positions ahead of the pass whose rows are prefetched: two groups of
/// sixteen (a 16k decode attention step on the 2-vCPU AMX Xeon, two
/// threads: 17.1 ms streamed against 18.5 at four groups and 18.8 at
/// none; `BENCHMARKS.md`).
const PREFETCH_AHEAD: usize = 2 * LANES;

/// One KV head's rows in the pool, worked out once per kernel call
/// ([`crate::rows::PagedKv::row_index`] divides to count the pool's blocks
/// on every call).
#[derive(Clone, Copy)]
pub(super) struct HeadRows<'a> {
    table: &'a [u32],
    /// The head's first row in the pool (`[kv head][block][slot]`).
    base: usize,
    bs: usize,
    /// Bytes per row.
    rb: usize,
    /// Q4_0 rows, widened to Q8_0 ones before use ([`HeadRows::rows`]).
    q4: bool,
    /// Blocks per row.
    nb: usize,
}

impl<'a> HeadRows<'a> {
    /// The rows of `view`'s head in a pool of `ty` (Q8_0 or Q4_0).
    pub(super) fn new(view: &HeadView<'a>, ty: KvType) -> Self {
        let bs = view.kv.block_size;
        HeadRows {
            table: view.table,
            base: view.kvh * view.kv.n_blocks() * bs,
            bs,
            rb: ty.row_bytes(view.kv.head_dim),
            q4: ty == KvType::Q4_0,
            nb: view.kv.head_dim / QK,
        }
    }

    /// The row of position `p` (as `row_index` gives it).
    #[inline(always)]
    pub(super) fn index(&self, p: usize) -> usize {
        let (b, off) = (p / self.bs, p % self.bs);
        self.base + self.table[b] as usize * self.bs + off
    }

    /// [`rows_at`] as Q8_0 rows: Q4_0 rows are widened into `wide` first
    /// (the same values; see [`crate::attention_q8::q4_0_as_q8_0`]).
    #[inline(always)]
    pub(super) fn rows(
        &self,
        cache: &[u8],
        p0: usize,
        n_last: usize,
        zero: &[u8; MAX_ROW],
        wide: &mut Wide,
        ptr: &mut [*const u8; LANES],
    ) {
        rows_at(self, cache, p0, n_last, zero, ptr);
        if self.q4 {
            let n = n_last.saturating_sub(p0).min(LANES);
            for (j, (p, w)) in ptr
                .iter_mut()
                .zip(wide.chunks_exact_mut(MAX_ROW))
                .enumerate()
            {
                if j < n {
                    // SAFETY: `p` starts a row of `nb` Q4_0 blocks (a
                    // bounds-checked slice of `cache`), `w` holds `nb` Q8_0
                    // blocks (`nb <= 8`); AVX2 is there with AVX-512.
                    unsafe { widen_q4(*p, self.nb, w) };
                    *p = w.as_ptr();
                }
            }
        }
    }
}

/// Sixteen rows widened from Q4_0 to Q8_0.
pub(super) type Wide = [u8; LANES * MAX_ROW];

/// The `nb` Q4_0 blocks at `src` as Q8_0 blocks in `dst`, as
/// [`crate::attention_q8::q4_0_as_q8_0`] makes them.
///
/// # Safety
/// `src` starts `nb` whole Q4_0 blocks; `dst` holds `nb` Q8_0 blocks; AVX2
/// is available.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn widen_q4(src: *const u8, nb: usize, dst: &mut [u8]) {
    let (low, eight) = (_mm_set1_epi8(0x0f), _mm256_set1_epi8(8));
    for (b, d) in dst.chunks_exact_mut(BLOCK_BYTES).take(nb).enumerate() {
        // SAFETY: block `b` of the caller's `nb` blocks: 18 bytes.
        let (q, scale) = unsafe {
            let at = src.add(b * Q4_BLOCK_BYTES);
            (
                _mm_loadu_si128(at.add(2) as *const __m128i),
                [*at, *at.add(1)],
            )
        };
        let lo = _mm_and_si128(q, low);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), low);
        let v = _mm256_sub_epi8(_mm256_set_m128i(hi, lo), eight);
        // A negative scale: its absolute value, the values negated
        // (`(v ^ m) - m` with `m` all ones).
        let m = _mm256_set1_epi8((scale[1] as i8) >> 7);
        let v = _mm256_sub_epi8(_mm256_xor_si256(v, m), m);
        d[..2].copy_from_slice(&[scale[0], scale[1] & 0x7f]);
        // SAFETY: `d` is one 34-byte block: 32 bytes from offset 2.
        unsafe { _mm256_storeu_si256(d[2..].as_mut_ptr() as *mut __m256i, v) };
    }
}

/// The rows (of `h`'s type) of the [`LANES`] positions from `p0` of the head `h` in
/// `cache` (pointers into bounds-checked slices), `zero` past `n_last`,
/// into `ptr`; prefetches the rows [`PREFETCH_AHEAD`] positions on.
///
/// `ptr` is the caller's (not a returned array): the pointers go out as
/// scalar stores and are read back one at a time, where an array returned
/// by value was copied in vector registers, a load that waited for the
/// sixteen stores before it to complete (store forwarding fails on a wide
/// load of narrow stores).
#[inline(always)]
pub(super) fn rows_at(
    h: &HeadRows<'_>,
    cache: &[u8],
    p0: usize,
    n_last: usize,
    zero: &[u8; MAX_ROW],
    ptr: &mut [*const u8; LANES],
) {
    let (rb, bs) = (h.rb, h.bs);
    // Whether the `n` positions from `p` lie in one cache block: their rows
    // are then one contiguous run (head-major blocks).
    let one_block = |p: usize, n: usize| p % bs + n <= bs;
    let next = p0 + PREFETCH_AHEAD;
    if next < n_last {
        let n = (n_last - next).min(LANES);
        let base = cache.as_ptr();
        let fetch = |at: usize, len: usize| {
            for off in (0..len + 63).step_by(64) {
                // SAFETY: a prefetch reads nothing architecturally (the
                // address is only computed, with wrapping arithmetic).
                unsafe { _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(at + off) as *const i8) };
            }
        };
        if one_block(next, n) {
            fetch(h.index(next) * rb, n * rb);
        } else {
            for p in next..next + n {
                fetch(h.index(p) * rb, rb);
            }
        }
    }
    let n = n_last.saturating_sub(p0).min(LANES);
    if n > 0 && one_block(p0, n) {
        // One bounds check for the run, then pointers into it.
        let first = h.index(p0);
        let mut at = cache[first * rb..(first + n) * rb].as_ptr();
        for p in ptr[..n].iter_mut() {
            *p = at;
            at = at.wrapping_add(rb);
        }
    } else {
        for (j, p) in ptr[..n].iter_mut().enumerate() {
            let i = h.index(p0 + j);
            *p = cache[i * rb..(i + 1) * rb].as_ptr();
        }
    }
    ptr[n..].fill(zero.as_ptr());
}

/// The scales of block `off` (byte offset in the row) of the sixteen rows
/// at `ptr`, as floats (lane `j` = row `j`). (Two `vpgatherqd` instead
/// of the sixteen scalar loads were 5% slower on Zen 5.)
///
/// # Safety
/// Each `ptr[j] + off` starts a whole Q8_0 block; AVX-512 F is available.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn block_scales(ptr: &[*const u8; LANES], off: usize) -> __m512 {
    // SAFETY: the caller's contract: 2 bytes at each `ptr[j] + off`.
    let sc: [u16; LANES] =
        std::array::from_fn(|j| unsafe { (ptr[j].add(off) as *const u16).read_unaligned() });
    // SAFETY: `sc` holds 16 halfs.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(sc.as_ptr() as *const __m256i)) }
}
