//! The engine's side of the prefix cache's disk tier ([`crate::disk`]):
//! which blocks of a new request's prompt to fetch from disk, putting
//! fetched blocks into the pool, saving blocks the pool evicts, and
//! saving every cached block at shutdown. With a windowed pool
//! (`window.rs`), that pool's blocks go to a tier of their own, and a
//! prompt fetches the windowed blocks of its hit's last window beside the
//! main pool's blocks of the whole hit. No file I/O here: the tiers'
//! threads do it.

use super::{Core, Seq};
use crate::blocks::{chain_hash, BlockPool, ChainHash};
use crate::disk::{DiskTier, Loaded};
use hasten_model::kv::KvCache;

impl Core {
    /// Gives the core a disk tier (and one for the windowed pool's blocks):
    /// from now on evicted prefix-cache blocks are saved to it and new
    /// prompts look there for their prefix.
    pub(crate) fn attach_disk(&mut self, tier: DiskTier, local: Option<DiskTier>) {
        self.pool.record_evictions();
        if let (Some(w), Some(_)) = (&self.windowed, &local) {
            w.pool.record_evictions();
        }
        self.disk = Some(tier);
        self.local_disk = local.filter(|_| self.windowed.is_some());
    }

    /// Asks the disk tiers for the blocks of `seq`'s prompt that are on
    /// disk but not in memory, following the hash chain as far as memory
    /// or disk holds it (and, with a windowed pool, as far as the last
    /// window of the hit is there too); marks `seq` as loading until they
    /// are in.
    pub(super) fn fetch_from_disk(&mut self, seq: &mut Seq) {
        let Some(disk) = &self.disk else { return };
        if !self.cfg.prefix_cache || seq.computed > 0 {
            return;
        }
        let bs = self.cfg.block_size;
        let full = (seq.tokens.len() - 1) / bs;
        let mut parent = self.seed;
        let mut chain: Vec<(ChainHash, bool)> = Vec::new();
        for b in 0..full {
            let toks = &seq.tokens[b * bs..(b + 1) * bs];
            let h = chain_hash(parent, toks);
            let here = self.pool.contains(h, toks);
            if !here && !disk.has(h, toks) {
                break;
            }
            chain.push((h, here));
            parent = h;
        }
        let toks = |b: usize| &seq.tokens[b * bs..(b + 1) * bs];
        let mut n = chain.len();
        let mut local_wanted = Vec::new();
        if let (Some(w), Some(ld)) = (&self.windowed, &self.local_disk) {
            let in_memory = |b: usize| w.pool.contains(chain[b].0, toks(b));
            n = w.usable_len(n, bs, |b| in_memory(b) || ld.has(chain[b].0, toks(b)));
            local_wanted = (w.window_start(n, bs)..n)
                .filter(|&b| !in_memory(b))
                .map(|b| (chain[b].0, toks(b).to_vec()))
                .collect();
        }
        let wanted: Vec<_> = (0..n)
            .filter(|&b| !chain[b].1)
            .map(|b| (chain[b].0, toks(b).to_vec()))
            .collect();
        if !wanted.is_empty() {
            seq.loading += 1;
            disk.load(seq.id, wanted);
        }
        if let (Some(ld), false) = (&self.local_disk, local_wanted.is_empty()) {
            seq.loading += 1;
            ld.load(seq.id, local_wanted);
        }
    }

    /// Puts blocks read from disk into their pool (`local`: the windowed
    /// one) as cached blocks (as if a sequence had computed and left
    /// them), and lets their request in once all its loads are back.
    pub(crate) fn install(&mut self, loaded: Loaded, local: bool) {
        let pool = match (local, &self.windowed) {
            (false, _) => &self.pool,
            (true, Some(w)) => &w.pool,
            // A windowed tier's answer without a windowed pool (never expected).
            (true, None) => return self.load_done(loaded.seq),
        };
        for b in &loaded.blocks {
            if pool.contains(b.hash, &b.tokens) {
                continue;
            }
            let Some(block) = pool.alloc() else {
                break; // every block is in use: the request computes the rest
            };
            // The block may have been another cached block: save it first.
            save_evicted(pool, &self.kv, self.tier(local), local);
            let id = block.id() as usize;
            let written = match local {
                false => self.kv.write_block(id, &b.data),
                true => self.kv.write_local_block(id, &b.data),
            };
            if written.is_err() {
                break;
            }
            pool.publish(&block, b.hash, &b.tokens);
        }
        self.load_done(loaded.seq);
    }

    /// One of request `seq`'s disk reads is back.
    fn load_done(&mut self, seq: u64) {
        if let Some(s) = self.waiting.iter_mut().find(|s| s.id == seq) {
            s.loading = s.loading.saturating_sub(1);
        }
    }

    fn tier(&self, local: bool) -> Option<&DiskTier> {
        match local {
            false => self.disk.as_ref(),
            true => self.local_disk.as_ref(),
        }
    }

    /// Hands the rows of blocks the pools evicted from the prefix cache to
    /// the disk tiers (unless a file holds them already).
    pub(super) fn spill_evicted(&mut self) {
        save_evicted(&self.pool, &self.kv, self.disk.as_ref(), false);
        if let Some(w) = &self.windowed {
            save_evicted(&w.pool, &self.kv, self.local_disk.as_ref(), true);
        }
    }

    /// At shutdown: saves every cached block not yet on disk, then waits
    /// for the tiers to finish writing.
    pub(crate) fn close(&mut self) {
        self.spill_evicted();
        save_published(&self.pool, &self.kv, self.disk.as_ref(), false);
        if let Some(w) = &self.windowed {
            save_published(&w.pool, &self.kv, self.local_disk.as_ref(), true);
        }
        for d in [&mut self.disk, &mut self.local_disk].into_iter().flatten() {
            d.close();
        }
    }
}

/// Writes the blocks `pool` evicted to `tier` (`local`: rows of the
/// windowed pool).
fn save_evicted(pool: &BlockPool, kv: &KvCache, tier: Option<&DiskTier>, local: bool) {
    let Some(tier) = tier else { return };
    for (id, h, toks) in pool.take_evicted() {
        save(kv, tier, id, h, &toks, local);
    }
}

/// Writes every cached block of `pool` to `tier`.
fn save_published(pool: &BlockPool, kv: &KvCache, tier: Option<&DiskTier>, local: bool) {
    let Some(tier) = tier else { return };
    for (id, h, toks) in pool.published() {
        save(kv, tier, id, h, &toks, local);
    }
}

fn save(kv: &KvCache, tier: &DiskTier, id: u32, h: ChainHash, toks: &[u32], local: bool) {
    if tier.has(h, toks) {
        return;
    }
    let mut data = Vec::new();
    match local {
        false => kv.read_block(id as usize, &mut data),
        true => kv.read_local_block(id as usize, &mut data),
    }
    tier.write(h, toks, data);
}
