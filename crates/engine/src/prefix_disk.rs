//! The engine's side of the prefix cache's disk tier ([`crate::disk`]):
//! which blocks of a new request's prompt to fetch from disk, putting
//! fetched blocks into the pool, saving blocks the pool evicts, and
//! saving every cached block at shutdown. No file I/O here: the tier's
//! thread does it.

use super::{Core, Seq};
use crate::blocks::chain_hash;
use crate::disk::{DiskTier, Loaded};

impl Core {
    /// Gives the core a disk tier: from now on evicted prefix-cache blocks
    /// are saved to it and new prompts look there for their prefix.
    pub(crate) fn attach_disk(&mut self, tier: DiskTier) {
        self.pool.record_evictions();
        self.disk = Some(tier);
    }

    /// Asks the disk tier for the blocks of `seq`'s prompt that are on
    /// disk but not in memory, following the hash chain as far as memory
    /// or disk holds it; marks `seq` as loading if there are any.
    pub(super) fn fetch_from_disk(&mut self, seq: &mut Seq) {
        let Some(disk) = &self.disk else { return };
        if !self.cfg.prefix_cache || seq.computed > 0 {
            return;
        }
        let bs = self.cfg.block_size;
        let full = (seq.tokens.len() - 1) / bs;
        let mut parent = self.seed;
        let mut wanted = Vec::new();
        for b in 0..full {
            let toks = &seq.tokens[b * bs..(b + 1) * bs];
            let h = chain_hash(parent, toks);
            if !self.pool.contains(h, toks) {
                if !disk.has(h, toks) {
                    break;
                }
                wanted.push((h, toks.to_vec()));
            }
            parent = h;
        }
        if !wanted.is_empty() {
            seq.loading = true;
            disk.load(seq.id, wanted);
        }
    }

    /// Puts blocks read from disk into the pool as cached blocks (as if a
    /// sequence had computed and left them) and lets their request in.
    pub(crate) fn install(&mut self, loaded: Loaded) {
        for b in loaded.blocks {
            if self.pool.contains(b.hash, &b.tokens) {
                continue;
            }
            let Some(block) = self.pool.alloc() else {
                break; // every block is in use: the request computes the rest
            };
            // The block may have been another cached block: save it first.
            self.spill_evicted();
            if self.kv.write_block(block.id() as usize, &b.data).is_err() {
                break;
            }
            self.pool.publish(&block, b.hash, &b.tokens);
        }
        if let Some(s) = self.waiting.iter_mut().find(|s| s.id == loaded.seq) {
            s.loading = false;
        }
    }

    /// Hands the rows of blocks the pool evicted from the prefix cache to
    /// the disk tier (unless a file holds them already).
    pub(super) fn spill_evicted(&mut self) {
        let Some(disk) = &self.disk else { return };
        for (id, h, toks) in self.pool.take_evicted() {
            if !disk.has(h, &toks) {
                let mut data = Vec::with_capacity(self.kv.block_bytes());
                self.kv.read_block(id as usize, &mut data);
                disk.write(h, &toks, data);
            }
        }
    }

    /// At shutdown: saves every cached block not yet on disk, then waits
    /// for the tier to finish writing.
    pub(crate) fn close(&mut self) {
        self.spill_evicted();
        let Some(disk) = &mut self.disk else { return };
        for (id, h, toks) in self.pool.published() {
            if !disk.has(h, &toks) {
                let mut data = Vec::with_capacity(self.kv.block_bytes());
                self.kv.read_block(id as usize, &mut data);
                disk.write(h, &toks, data);
            }
        }
        disk.close();
    }
}
