//! The KV block pool: which cache blocks are free, held by sequences, or
//! kept by the prefix cache.
//!
//! A [`Block`] is the owning handle of one block id; dropping the last
//! handle returns the block to the pool (or, if it holds a published full
//! block of tokens, to the prefix cache's evictable LRU list), so blocks
//! cannot leak. Full blocks are published under a hash chain of their
//! tokens (`hash(parent hash, the block's tokens)`, seeded per model) and
//! shared read-only between sequences by reference count.
//!
//! The pool lives on the engine thread only (`Rc`, not `Arc`).

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::hash::{Hash, Hasher};
use std::rc::Rc;

/// The hash of a chain of full blocks: the prefix-cache key.
pub type ChainHash = u64;

/// Hash of a block of `tokens` following the chain `parent` (`seed` for the first block).
pub fn chain_hash(parent: ChainHash, tokens: &[u32]) -> ChainHash {
    // `DefaultHasher::new()` has fixed keys: the same tokens give the same key.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

#[derive(Debug)]
struct Entry {
    refs: u32,
    /// Set while the block is published in the prefix cache.
    key: Option<(ChainHash, Vec<u32>)>,
    /// Position in `lru` while unreferenced and published.
    lru_tick: Option<u64>,
}

#[derive(Debug)]
struct Inner {
    entries: Vec<Entry>,
    /// Free ids, the lowest handed out first: a sequence's blocks then tend
    /// to be consecutive, and the KV pool's head-major rows of consecutive
    /// blocks are one stream for attention to read.
    free: BinaryHeap<Reverse<u32>>,
    cached: HashMap<ChainHash, u32>,
    /// Unreferenced published blocks, oldest use first.
    lru: BTreeMap<u64, u32>,
    tick: u64,
    /// Published blocks `alloc` took back, recorded while a disk tier
    /// wants to save them (`BlockPool::record_evictions`).
    evicted: Option<Vec<Evicted>>,
}

/// A published block `alloc` evicted from the prefix cache: its id (its
/// rows are intact until the new owner writes them), hash and tokens.
pub type Evicted = (u32, ChainHash, Vec<u32>);

/// Counts of blocks by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    pub total: usize,
    /// Neither referenced nor cached.
    pub free: usize,
    /// Published and unreferenced: reusable by a prefix hit, evictable.
    pub cached_idle: usize,
    /// Referenced by at least one sequence.
    pub used: usize,
    /// Published (referenced or not).
    pub published: usize,
}

/// A pool of `n` KV blocks.
#[derive(Debug, Clone)]
pub struct BlockPool {
    inner: Rc<RefCell<Inner>>,
}

/// One reference to a block; the block id is what block tables hold.
#[derive(Debug)]
pub struct Block {
    id: u32,
    pool: Rc<RefCell<Inner>>,
}

impl Block {
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl Clone for Block {
    fn clone(&self) -> Self {
        self.pool.borrow_mut().entries[self.id as usize].refs += 1;
        Block {
            id: self.id,
            pool: self.pool.clone(),
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        let mut p = self.pool.borrow_mut();
        let p = &mut *p;
        let e = &mut p.entries[self.id as usize];
        e.refs -= 1;
        if e.refs > 0 {
            return;
        }
        if e.key.is_some() {
            p.tick += 1;
            e.lru_tick = Some(p.tick);
            p.lru.insert(p.tick, self.id);
        } else {
            p.free.push(Reverse(self.id));
        }
    }
}

impl BlockPool {
    pub fn new(n: usize) -> Self {
        let entries = (0..n)
            .map(|_| Entry {
                refs: 0,
                key: None,
                lru_tick: None,
            })
            .collect();
        BlockPool {
            inner: Rc::new(RefCell::new(Inner {
                entries,
                free: (0..n as u32).map(Reverse).collect(),
                cached: HashMap::new(),
                lru: BTreeMap::new(),
                tick: 0,
                evicted: None,
            })),
        }
    }

    /// A fresh private block: a free one, else the least recently used idle
    /// cached block (evicted from the prefix cache). `None` when every block
    /// is referenced.
    pub fn alloc(&self) -> Option<Block> {
        let mut p = self.inner.borrow_mut();
        let p = &mut *p;
        let id = match p.free.pop() {
            Some(Reverse(id)) => id,
            None => {
                let (_, id) = p.lru.pop_first()?;
                let e = &mut p.entries[id as usize];
                e.lru_tick = None;
                if let Some((h, toks)) = e.key.take() {
                    p.cached.remove(&h);
                    if let Some(ev) = &mut p.evicted {
                        ev.push((id, h, toks));
                    }
                }
                id
            }
        };
        p.entries[id as usize].refs = 1;
        Some(Block {
            id,
            pool: self.inner.clone(),
        })
    }

    /// From now on, remember each published block `alloc` evicts, for
    /// [`Self::take_evicted`].
    pub fn record_evictions(&self) {
        self.inner.borrow_mut().evicted.get_or_insert_with(Vec::new);
    }

    /// The published blocks evicted since the last call (their rows must be
    /// read before their new owners write them).
    pub fn take_evicted(&self) -> Vec<Evicted> {
        self.inner
            .borrow_mut()
            .evicted
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Whether the block `hash` of `tokens` is published (takes no reference).
    pub fn contains(&self, hash: ChainHash, tokens: &[u32]) -> bool {
        let p = self.inner.borrow();
        p.cached.get(&hash).is_some_and(|&id| {
            p.entries[id as usize]
                .key
                .as_ref()
                .map(|(_, t)| t.as_slice())
                == Some(tokens)
        })
    }

    /// Every published block: id, hash and tokens.
    pub fn published(&self) -> Vec<Evicted> {
        let p = self.inner.borrow();
        p.cached
            .values()
            .filter_map(|&id| {
                let (h, t) = p.entries[id as usize].key.as_ref()?;
                Some((id, *h, t.clone()))
            })
            .collect()
    }

    /// Blocks `alloc` could hand out now.
    pub fn available(&self) -> usize {
        let p = self.inner.borrow();
        p.free.len() + p.lru.len()
    }

    /// The published block for `hash` holding exactly `tokens`, as a new reference.
    pub fn lookup(&self, hash: ChainHash, tokens: &[u32]) -> Option<Block> {
        let mut p = self.inner.borrow_mut();
        let p = &mut *p;
        let &id = p.cached.get(&hash)?;
        let e = &mut p.entries[id as usize];
        if e.key.as_ref().map(|(_, t)| t.as_slice()) != Some(tokens) {
            return None; // a hash collision: treat as a miss
        }
        if let Some(t) = e.lru_tick.take() {
            p.lru.remove(&t);
        }
        e.refs += 1;
        Some(Block {
            id,
            pool: self.inner.clone(),
        })
    }

    /// Publishes a full block under `hash` so later sequences can share it.
    /// Does nothing if that chain is already cached (by another block) or
    /// the block is already published.
    pub fn publish(&self, block: &Block, hash: ChainHash, tokens: &[u32]) {
        let mut p = self.inner.borrow_mut();
        let p = &mut *p;
        if p.cached.contains_key(&hash) || p.entries[block.id as usize].key.is_some() {
            return;
        }
        p.cached.insert(hash, block.id);
        p.entries[block.id as usize].key = Some((hash, tokens.to_vec()));
    }

    pub fn stats(&self) -> PoolStats {
        let p = self.inner.borrow();
        // Every block is free, idle in the cache's LRU, or referenced: no
        // walk over the pool (this runs every step).
        let used = p.entries.len() - p.free.len() - p.lru.len();
        debug_assert_eq!(used, p.entries.iter().filter(|e| e.refs > 0).count());
        PoolStats {
            total: p.entries.len(),
            free: p.free.len(),
            cached_idle: p.lru.len(),
            used,
            published: p.cached.len(),
        }
    }

    /// Drops every idle cached block (tests and memory pressure).
    pub fn clear_cache(&self) {
        let mut p = self.inner.borrow_mut();
        let p = &mut *p;
        while let Some((_, id)) = p.lru.pop_first() {
            let e = &mut p.entries[id as usize];
            e.lru_tick = None;
            if let Some((h, _)) = e.key.take() {
                p.cached.remove(&h);
            }
            p.free.push(Reverse(id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_the_last_reference_frees_or_caches() {
        let pool = BlockPool::new(3);
        let a = pool.alloc().unwrap();
        let b = pool.alloc().unwrap();
        let b2 = b.clone();
        assert_eq!(pool.stats().used, 2);
        drop(b);
        assert_eq!(pool.stats().used, 2, "b2 still holds it");
        let h = chain_hash(1, &[1, 2]);
        pool.publish(&b2, h, &[1, 2]);
        drop(b2);
        drop(a);
        let s = pool.stats();
        assert_eq!((s.used, s.free, s.cached_idle), (0, 2, 1));
        // A hit revives the cached block without allocating.
        let hit = pool.lookup(h, &[1, 2]).unwrap();
        assert_eq!(pool.stats().cached_idle, 0);
        assert!(
            pool.lookup(h, &[1, 3]).is_none(),
            "tokens are checked, not just the hash"
        );
        drop(hit);
        // Exhausting the free list evicts the idle cached block last.
        let all: Vec<Block> = (0..3).map(|_| pool.alloc().unwrap()).collect();
        assert!(pool.alloc().is_none());
        assert!(pool.lookup(h, &[1, 2]).is_none(), "evicted");
        drop(all);
        assert_eq!(pool.stats().free, 3);
    }

    #[test]
    fn the_lowest_free_blocks_go_first_so_sequences_get_runs() {
        let pool = BlockPool::new(8);
        let ids = |v: &[Block]| v.iter().map(|b| b.id()).collect::<Vec<_>>();
        let a: Vec<Block> = (0..3).map(|_| pool.alloc().unwrap()).collect();
        let b: Vec<Block> = (0..3).map(|_| pool.alloc().unwrap()).collect();
        assert_eq!(ids(&a), [0, 1, 2]);
        drop(a);
        // Freed in any order, handed out again ascending.
        let c: Vec<Block> = (0..4).map(|_| pool.alloc().unwrap()).collect();
        assert_eq!(ids(&c), [0, 1, 2, 6]);
        drop(b);
    }

    #[test]
    fn eviction_is_least_recently_used_first() {
        let pool = BlockPool::new(2);
        let (a, b) = (pool.alloc().unwrap(), pool.alloc().unwrap());
        pool.publish(&a, 10, &[1]);
        pool.publish(&b, 20, &[2]);
        drop(b); // b idle first
        drop(a);
        let _x = pool.alloc().unwrap();
        assert!(
            pool.lookup(20, &[2]).is_none(),
            "b was the oldest idle block"
        );
        assert!(pool.lookup(10, &[1]).is_some());
    }

    #[test]
    fn chain_hashes_depend_on_the_whole_prefix() {
        let a = chain_hash(chain_hash(0, &[1, 2]), &[3, 4]);
        let b = chain_hash(chain_hash(0, &[9, 2]), &[3, 4]);
        assert_ne!(a, b);
        assert_eq!(a, chain_hash(chain_hash(0, &[1, 2]), &[3, 4]));
    }
}
