//! The shapes kernels exchange, shared by every tier without knowing any:
//! quantized activation rows and their per-block terms, register-tile
//! sizes, and the function types of the kernel table. A leaf module: the
//! tiers (`simd/`), the references (`quant/`, `attention`, `ops`) and the
//! table ([`crate::cpu`]) all depend on it, and it on none of them.

use crate::quant::GgmlType;
use half::f16;

/// Dot product of one quantized weight row with one quantized activation
/// row (both whole blocks of the same length).
pub type QuantDot = fn(w: &[u8], x: &[u8]) -> f32;

/// One weight row against four activation rows (each weight block unpacked
/// once for all four): `[dot(w, x[0]), ..., dot(w, x[3])]`.
pub type QuantDot4 = fn(w: &[u8], x: [&[u8]; 4]) -> [f32; 4];
/// Activation rows per register tile in batched products (prefill, batched decode).
pub const TILE_N: usize = 3;

/// One activation row quantized for the 32-element weight types: its Q8_0
/// blocks (34 bytes each), and per block the scale `d` as f32 and
/// `ds = -o * d * sum(quants) / 8`, which carries the zero offset `o` of the
/// weight type (Q4_0: 8, Q5_0: 16, Q8_0: 0); see [`zero_offset`].
#[derive(Clone, Copy, Debug)]
pub struct Q8Row<'a> {
    pub q: &'a [u8],
    pub d: &'a [f32],
    pub ds: &'a [f32],
}

/// The offset subtracted from the stored unsigned quants of a 32-element
/// weight type (0 for signed types). Q4_1 and Q5_1 add a per-block minimum
/// `m` instead: their -1 makes `8 ds = d * sum(quants)`, the factor of `m`.
pub fn zero_offset(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::Q4_0 => 8.0,
        GgmlType::Q5_0 => 16.0,
        GgmlType::Q4_1 | GgmlType::Q5_1 => -1.0,
        _ => 0.0,
    }
}

/// Causal attention of a tile of tokens and grouped query heads (see
/// [`crate::attention::attend_tile`]).
/// `lse`, when given, receives each query row's log-sum-exp of its scaled
/// (and capped) scores over the positions it saw (`-inf` where it saw
/// none): what merging the pieces of a split-context attention needs.
pub type AttendTile = fn(
    view: &HeadView<'_>,
    q: &[f32],
    t: usize,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
    lse: Option<&mut [f32]>,
);

/// Activation rows per tile of the eight-row interleaved kernels.
pub const X8_N: usize = 8;
/// One eight-row interleaved group (see [`crate::quant::repack`]) against one activation row.
pub type X8Gemv = fn(group: &[u8], x: [Q8Row<'_>; 1]) -> [[f32; 8]; 1];
/// The same against [`X8_N`] activation rows.
pub type X8Gemm = fn(group: &[u8], x: [Q8Row<'_>; X8_N]) -> [[f32; 8]; X8_N];

/// Two adjacent eight-row groups against [`X8_N`] activation rows: row `r`
/// of each result is the pair's row `r` (the first group's rows, then the
/// second's).
pub type X16Gemm = fn(groups: [&[u8]; 2], x: &[Q8Row<'_>; X8_N]) -> [[f32; 16]; X8_N];

/// Makes the AMX panel of two adjacent eight-row groups' first `nb`
/// 32-element blocks (see `simd::amx`): `q` gets `nb * AMX_B_TILE` bytes
/// of signed weights in B-tile order, `d` the 16 rows' `nb * 16` scales
/// and, for the types with minimums (Q4_K), `m` their `nb * 16` minimum
/// terms (other types leave `m` alone and may be given an empty one).
pub type AmxPanel = fn(pair: [&[u8]; 2], nb: usize, q: &mut [u8], d: &mut [f32], m: &mut [f32]);

/// One AMX panel: B tiles, scales, minimum terms (empty without minimums).
pub type AmxPanelRef<'a> = (&'a [u8], &'a [f32], &'a [f32]);

/// Bytes of one block's B tile in an AMX panel.
pub const AMX_B_TILE: usize = 512;
/// Activation rows of one AMX pass: two tiles of 16.
pub const AMX_ROWS: usize = 32;

/// AMX products of two panels ([`AmxPanel`]; `nb` blocks each, 32 weight
/// rows) with `out.len() / AMX_ROWS` passes of activation rows: `out[i][r]`
/// is weight row `r` (the first panel's 16, then the second's) times
/// activation row `i`. The activations are laid out per pass and block:
/// `xa[((pass * nb + block) * AMX_ROWS + i % AMX_ROWS) * 32..][..32]` are
/// row `i`'s 32 quant bytes of the block, `dx[(pass * nb + block) *
/// AMX_ROWS + i % AMX_ROWS]` its scale and `xs[..]` (same index; empty
/// unless the panels have minimums) the sum of its quants.
pub type AmxGemm = fn(
    panels: [AmxPanelRef<'_>; 2],
    xa: &[u8],
    dx: &[f32],
    xs: &[f32],
    nb: usize,
    out: &mut [[f32; 32]],
);

/// Activation rows of the short sixteen-row tiles ([`X16Gemm4`]).
pub const X4_N: usize = 4;
/// The same as [`X16Gemm`] against [`X4_N`] activation rows (the tails of
/// batches that are not a multiple of [`X8_N`]).
pub type X16Gemm4 = fn(groups: [&[u8]; 2], x: &[Q8Row<'_>; X4_N]) -> [[f32; 16]; X4_N];

/// Two adjacent eight-row K-quant groups against [`X8_N`] Q8_K activation
/// rows (rows as in [`X16Gemm`]).
pub type K16Gemm = fn(groups: [&[u8]; 2], x: &[&[u8]; X8_N]) -> [[f32; 16]; X8_N];

/// One eight-row Q4_K, Q5_K or Q6_K group against one Q8_K activation row.
pub type K8Gemv = fn(group: &[u8], x: [&[u8]; 1]) -> [[f32; 8]; 1];
/// The same against [`X8_N`] Q8_K activation rows.
pub type K8Gemm = fn(group: &[u8], x: [&[u8]; X8_N]) -> [[f32; 8]; X8_N];

/// Fills the per-block `d` and `ds` of [`Q8Row`] for Q8_0 blocks `q`, for
/// weights whose kernel subtracts the zero offset `offset` (usually
/// [`zero_offset`] of the weight type; see
/// [`crate::cpu::Kernels::x8_zero_offset`]).
pub fn q8_row_terms(offset: f32, q: &[u8], d: &mut Vec<f32>, ds: &mut Vec<f32>) {
    let nb = q.len() / 34;
    d.resize(nb, 0.0);
    ds.resize(nb, 0.0);
    q8_row_terms_into(offset, q, d, ds);
}

/// [`q8_row_terms`] into slices of one value per block.
pub fn q8_row_terms_into(offset: f32, q: &[u8], d: &mut [f32], ds: &mut [f32]) {
    let offset_term = -offset / 8.0;
    for ((b, d), ds) in q.chunks_exact(34).zip(d).zip(ds) {
        let scale = crate::quant::read_f16(&b[..2]);
        let sum: i32 = b[2..].iter().map(|&v| v as i8 as i32).sum();
        *d = scale;
        *ds = offset_term * scale * sum as f32;
    }
}

/// Four weight rows against one activation row (decode).
pub type Tile1 = fn(w: [&[u8]; 4], x: [Q8Row<'_>; 1]) -> [[f32; 1]; 4];
/// Four weight rows against [`TILE_N`] activation rows.
pub type TileN = fn(w: [&[u8]; 4], x: [Q8Row<'_>; TILE_N]) -> [[f32; TILE_N]; 4];
/// Quantizes an f32 activation row into blocks of the activation type.
pub type QuantizeRow = fn(x: &[f32], out: &mut [u8]);
/// f32 dot product of an f16 (or bf16) row (little-endian bytes) with an f32 row.
pub type F16Dot = fn(w: &[u8], x: &[f32]) -> f32;

/// How the KV cache stores each row (one token's values of one KV head):
/// f16 (llama.cpp's default), or ggml's Q8_0 / Q4_0 blocks of 32 values
/// (`--cache-type-k/v q8_0|q4_0` there), half and a bit over a quarter of
/// f16's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    #[default]
    F16,
    Q8_0,
    Q4_0,
}

impl KvType {
    pub const ALL: [KvType; 3] = [KvType::F16, KvType::Q8_0, KvType::Q4_0];

    /// The name `--kv-type` takes (llama.cpp's).
    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        }
    }

    pub fn parse(s: &str) -> Option<KvType> {
        KvType::ALL.into_iter().find(|t| t.name() == s)
    }

    /// The weight type whose blocks a quantized row is made of.
    pub fn ggml(self) -> GgmlType {
        match self {
            KvType::F16 => GgmlType::F16,
            KvType::Q8_0 => GgmlType::Q8_0,
            KvType::Q4_0 => GgmlType::Q4_0,
        }
    }

    /// Whether rows of `head_dim` values can be stored (whole blocks).
    pub fn fits(self, head_dim: usize) -> bool {
        head_dim.is_multiple_of(self.ggml().block_size())
    }

    /// Bytes of one row of `head_dim` values (which [`Self::fits`]).
    pub fn row_bytes(self, head_dim: usize) -> usize {
        head_dim / self.ggml().block_size() * self.ggml().block_bytes()
    }
}

/// One layer's K or V rows, `[kv_head][block][slot in block]` rows of
/// `head_dim` values each, in the cache's [`KvType`]: head-major, so one
/// KV head's rows of consecutive positions are contiguous within a block,
/// and across blocks where the allocator handed a sequence consecutive
/// blocks (attention streams them; slot-major rows of a head sat
/// `n_kv_heads` rows apart, two cache lines each for 68-byte Q8_0 rows,
/// and block-major ones broke the stream every block).
#[derive(Debug, Clone, Copy)]
pub enum KvRows<'a> {
    F16(&'a [f16]),
    /// Whole blocks of the type, bytes.
    Quant(KvType, &'a [u8]),
}

impl<'a> KvRows<'a> {
    pub fn ty(&self) -> KvType {
        match self {
            KvRows::F16(_) => KvType::F16,
            KvRows::Quant(t, _) => *t,
        }
    }
}

/// One layer's K and V block pools and their geometry.
#[derive(Debug, Clone, Copy)]
pub struct PagedKv<'a> {
    pub k: KvRows<'a>,
    pub v: KvRows<'a>,
    pub block_size: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl PagedKv<'_> {
    /// Index of the row of KV head `kvh` at position `pos` of a sequence
    /// with block table `table` (`[kv_head][block][slot]`).
    #[inline]
    pub fn row_index(&self, table: &[u32], pos: usize, kvh: usize) -> usize {
        let (block, off) = (table[pos / self.block_size] as usize, pos % self.block_size);
        (kvh * self.n_blocks() + block) * self.block_size + off
    }

    /// Blocks in the pool: the rows of K over `n_kv_heads * block_size`.
    #[inline]
    pub fn n_blocks(&self) -> usize {
        let rows = match self.k {
            KvRows::F16(v) => v.len() / self.head_dim,
            KvRows::Quant(t, b) => b.len() / t.row_bytes(self.head_dim),
        };
        rows / (self.n_kv_heads * self.block_size)
    }

    /// Row indices of the `n` (at most `N`) positions from `p0` of KV head
    /// `kvh`, zero past `n`: one table lookup when they share a cache
    /// block (consecutive rows there: the pool is head-major).
    #[inline(always)]
    pub fn row_indices<const N: usize>(
        &self,
        table: &[u32],
        p0: usize,
        n: usize,
        kvh: usize,
    ) -> [usize; N] {
        let mut out = [0usize; N];
        if n == 0 {
            return out;
        }
        if p0 % self.block_size + n <= self.block_size {
            let first = self.row_index(table, p0, kvh);
            for (j, o) in out.iter_mut().enumerate().take(n) {
                *o = first + j;
            }
        } else {
            for (j, o) in out.iter_mut().enumerate().take(n) {
                *o = self.row_index(table, p0 + j, kvh);
            }
        }
        out
    }
}

/// One KV head of one sequence's cache, as attention reads it.
#[derive(Debug, Clone, Copy)]
pub struct HeadView<'a> {
    pub kv: PagedKv<'a>,
    /// The sequence's block table.
    pub table: &'a [u32],
    /// Which KV head.
    pub kvh: usize,
    /// Score scale, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
    /// Sliding-window attention: a query at position `p` sees positions
    /// `p + 1 - window ..= p` only (Gemma's and Mistral's local layers).
    pub window: Option<usize>,
    /// Soft-capping of the scaled scores, `cap * tanh(s / cap)` (Gemma 2).
    pub softcap: Option<f32>,
    /// Positions `from..until` only, on top of the causal mask and the
    /// window: one piece of a split-context attention
    /// ([`crate::attention_split`]). `0..usize::MAX` for the whole context.
    pub from: usize,
    pub until: usize,
}

impl<'a> HeadView<'a> {
    /// Head `kvh` of `kv` over the whole context: scale `1 / sqrt(head_dim)`,
    /// no window, no soft cap (what the probes and benchmarks attend).
    pub fn whole(kv: PagedKv<'a>, table: &'a [u32], kvh: usize) -> Self {
        HeadView {
            kv,
            table,
            kvh,
            scale: 1.0 / (kv.head_dim as f32).sqrt(),
            window: None,
            softcap: None,
            from: 0,
            until: usize::MAX,
        }
    }
}

impl HeadView<'_> {
    /// The first position a query with `n_ctx` positions in view sees
    /// (`n_ctx` when it sees none).
    pub fn first_visible(&self, n_ctx: usize) -> usize {
        self.window
            .map_or(0, |w| n_ctx.saturating_sub(w))
            .max(self.from)
            .min(n_ctx)
    }

    /// One past the last position a query with `n_ctx` positions in view
    /// sees; [`Self::first_visible`] when it sees none.
    pub fn visible_end(&self, n_ctx: usize) -> usize {
        n_ctx.min(self.until).max(self.first_visible(n_ctx))
    }
}
