//! The sliding-window layers' own block pool (a child of `core.rs`).
//!
//! With `EngineConfig::windowed_blocks`, a model's sliding-window layers
//! keep their KV rows in a second, smaller pool (`KvCache::windowed`): a
//! sequence holds there only the blocks its next query can see (its last
//! `window` positions, plus the few positions below the window the
//! kernels may start reading at), so that pool is sized by the running
//! sequences, not by their context. Each sequence has a second block list
//! indexed like its main one, `None` where the block fell out of the
//! window. Full blocks are published under the same chain hashes as the
//! main pool's; a prefix-cache hit needs the main pool's blocks of the
//! whole prefix and this pool's blocks of its last window (vLLM's
//! sliding-window rule), and is shortened until both hold.

use super::Seq;
use crate::blocks::{Block, BlockPool, ChainHash};
use crate::WINDOW_SLACK;

pub(crate) struct Windowed {
    pub(crate) pool: BlockPool,
    window: usize,
}

impl Windowed {
    pub(crate) fn new(n_blocks: usize, window: usize) -> Self {
        Windowed {
            pool: BlockPool::new(n_blocks),
            window,
        }
    }

    /// The first block a query at position `computed` (or later) may read.
    fn first_live(&self, computed: usize, bs: usize) -> usize {
        (computed + 1).saturating_sub(self.window + WINDOW_SLACK) / bs
    }

    /// Returns the blocks `s` can no longer read to the pool (published
    /// ones stay in the prefix cache's LRU).
    pub(crate) fn trim(&self, s: &mut Seq, bs: usize) {
        let live = self.first_live(s.computed, bs).min(s.local.len());
        for b in &mut s.local[..live] {
            *b = None;
        }
    }

    /// A fresh block for the window, or `None` when every block is held.
    pub(crate) fn alloc(&self) -> Option<Block> {
        self.pool.alloc()
    }

    /// How many of the `hashes.len()` cached main-pool blocks of a prompt
    /// (chain `hashes`, tokens `toks`) form a usable hit: the longest
    /// prefix whose last window is cached here too.
    pub(crate) fn usable_hit(&self, hashes: &[ChainHash], toks: &[u32], bs: usize) -> usize {
        self.usable_len(hashes.len(), bs, |b| {
            self.pool.contains(hashes[b], &toks[b * bs..(b + 1) * bs])
        })
    }

    /// The longest prefix of at most `n` blocks whose last window has
    /// every block for which `here(b)` holds.
    pub(crate) fn usable_len(&self, n: usize, bs: usize, here: impl Fn(usize) -> bool) -> usize {
        // missing[b]: blocks among the first `b` that are not here.
        let mut missing = vec![0usize; n + 1];
        for b in 0..n {
            missing[b + 1] = missing[b] + usize::from(!here(b));
        }
        (0..=n)
            .rev()
            .find(|&k| missing[k] == missing[self.first_live(k * bs, bs).min(k)])
            .unwrap_or(0)
    }

    /// The first block of a hit of `n` blocks this pool must hold.
    pub(crate) fn window_start(&self, n: usize, bs: usize) -> usize {
        self.first_live(n * bs, bs).min(n)
    }

    /// This pool's block of chain `hash` for prefix block `b` of a hit of
    /// `n` blocks (`None` below the window); `Err` if it is gone.
    pub(crate) fn attach(
        &self,
        b: usize,
        n: usize,
        hash: ChainHash,
        toks: &[u32],
        bs: usize,
    ) -> Result<Option<Block>, ()> {
        if b < self.first_live(n * bs, bs) {
            return Ok(None);
        }
        self.pool.lookup(hash, toks).map(Some).ok_or(())
    }

    /// `s`'s block table in this pool; blocks below its window (never
    /// read) show as block 0.
    pub(crate) fn table(s: &Seq, out: &mut Vec<u32>) {
        out.clear();
        out.extend(s.local.iter().map(|b| b.as_ref().map_or(0, Block::id)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hit is cut back to the longest prefix whose last window is cached.
    #[test]
    fn a_hit_ends_where_its_window_is_whole() {
        let bs = 4;
        let w = Windowed::new(16, 8);
        let toks: Vec<u32> = (0..40).collect();
        let hashes: Vec<ChainHash> = (100..110).collect();
        for b in (0..10).filter(|&b| b != 7) {
            let blk = w.alloc().unwrap();
            w.pool.publish(&blk, hashes[b], &toks[b * bs..(b + 1) * bs]);
        }
        // A query at 40 sees from 33 (window 8), read from 24 (slack 8):
        // blocks 6.. must be here, and block 7 is not; at 28 blocks 3..7 are.
        assert_eq!(w.first_live(40, bs), 6);
        assert_eq!(w.usable_hit(&hashes, &toks, bs), 7);
        assert_eq!(w.usable_hit(&hashes[..7], &toks, bs), 7);
        assert_eq!(w.usable_hit(&[], &toks, bs), 0);
        assert!(w
            .attach(2, 7, hashes[2], &toks[8..12], bs)
            .unwrap()
            .is_none());
        assert!(w
            .attach(3, 7, hashes[3], &toks[12..16], bs)
            .unwrap()
            .is_some());
        assert!(w.attach(7, 8, hashes[7], &toks[28..32], bs).is_err());
    }
}
