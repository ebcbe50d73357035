//! The prefix cache's disk tier (`hasten serve --prefix-cache-dir`): full
//! KV blocks the memory pool evicts, and every published block at
//! shutdown, are written to one file each in a directory, and found again
//! by later requests, in this run or after a restart.
//!
//! A file holds one block: a header naming the model (its
//! [`hasten_model::llama::Model::fingerprint`]), the KV layout, the block's
//! chain hash and tokens, and a checksum of the payload (the rows of
//! [`hasten_model::kv::KvCache::read_block`]). A file of another model or
//! layout is ignored (counted once at start, with a warning); a truncated
//! or altered one is never loaded: it is skipped with a warning and
//! removed. The directory is capped at a byte size: past it the least
//! recently used files go.
//!
//! All file I/O happens on the tier's own thread ("hasten-kv-disk"): the
//! engine step only looks up the in-memory index and hands over jobs; a
//! load comes back as a message on the engine's queue (the closure given
//! to [`DiskTier::open`]).

use crate::blocks::ChainHash;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// Version 02: head-major KV rows (a block's bytes: per layer, K then V,
/// each `[kv_head][slot]`); files of version 01 (slot-major) are not read.
const MAGIC: &[u8; 8] = b"HKVBLK02";
const EXT: &str = "kvb";

/// Where the tier lives and how large it may grow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskCacheConfig {
    pub dir: PathBuf,
    /// Bytes of block files at most (least recently used go first).
    pub max_bytes: u64,
}

/// What a block file must match to be loaded: the model and the layout of
/// its KV rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub model: u64,
    pub kv_type: u8,
    pub block_size: u32,
    pub n_layers: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    /// Payload bytes of one block.
    pub block_bytes: u64,
}

/// One block read back from disk.
#[derive(Debug)]
pub struct LoadedBlock {
    pub hash: ChainHash,
    pub tokens: Vec<u32>,
    pub data: Vec<u8>,
}

/// The answer to [`DiskTier::load`]: the blocks of one request's chain
/// that were read and checked (a prefix of those asked for).
#[derive(Debug)]
pub struct Loaded {
    pub seq: u64,
    pub blocks: Vec<LoadedBlock>,
}

/// Counts the engine reports (`/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    pub files: usize,
    pub bytes: u64,
    pub written: u64,
    pub loaded: u64,
    /// Files skipped: another model's or layout, truncated, altered.
    pub rejected: u64,
}

impl DiskStats {
    /// The counts of several tiers together (the main pool's and the
    /// windowed pool's).
    pub fn sum<'a>(tiers: impl IntoIterator<Item = &'a DiskTier>) -> DiskStats {
        tiers
            .into_iter()
            .map(DiskTier::stats)
            .fold(DiskStats::default(), |a, b| DiskStats {
                files: a.files + b.files,
                bytes: a.bytes + b.bytes,
                written: a.written + b.written,
                loaded: a.loaded + b.loaded,
                rejected: a.rejected + b.rejected,
            })
    }
}

#[derive(Debug)]
struct Entry {
    tokens: Vec<u32>,
    bytes: u64,
    used: u64,
}

#[derive(Debug, Default)]
struct Index {
    entries: HashMap<ChainHash, Entry>,
    /// Blocks handed to the thread and not yet written: a load queued
    /// after them finds their file (the thread takes jobs in order), so
    /// [`DiskTier::has`] counts them.
    queued: HashMap<ChainHash, Vec<u32>>,
    tick: u64,
    stats: DiskStats,
}

enum Job {
    Write(ChainHash, Vec<u32>, Vec<u8>),
    Load(u64, Vec<(ChainHash, Vec<u32>)>),
}

/// The handle the engine holds; dropping it writes what is queued and
/// stops the thread.
pub struct DiskTier {
    index: Arc<Mutex<Index>>,
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for DiskTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskTier")
            .field("stats", &self.stats())
            .finish()
    }
}

/// A quick 64-bit checksum of a payload (corruption, not tampering:
/// multiply-rotate over 8-byte words).
fn checksum(data: &[u8]) -> u64 {
    let mut h = 0x243F_6A88_85A3_08D3u64 ^ data.len() as u64;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        h = (h ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(31);
    }
    for &b in words.remainder() {
        h = (h ^ b as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(31);
    }
    h ^ (h >> 29)
}

impl Identity {
    fn header(&self, hash: ChainHash, tokens: &[u32], payload: &[u8]) -> Vec<u8> {
        let mut h = Vec::with_capacity(64 + 4 * tokens.len());
        h.extend_from_slice(MAGIC);
        for v in [self.model, hash] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        h.push(self.kv_type);
        for v in [
            self.block_size,
            self.n_layers,
            self.n_kv_heads,
            self.head_dim,
            tokens.len() as u32,
        ] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        for t in tokens {
            h.extend_from_slice(&t.to_le_bytes());
        }
        h.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        h.extend_from_slice(&checksum(payload).to_le_bytes());
        h
    }

    fn file_name(&self, hash: ChainHash) -> String {
        format!("{:016x}-{hash:016x}.{EXT}", self.model)
    }
}

/// A parsed header: the block's hash and tokens, the payload's length,
/// checksum and offset.
struct Header {
    hash: ChainHash,
    tokens: Vec<u32>,
    len: u64,
    sum: u64,
    offset: usize,
}

/// Parses `bytes` (at least the header) as a block file of `id`; the
/// reason it is not one otherwise.
fn parse_header(bytes: &[u8], id: &Identity) -> Result<Header, String> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let s = bytes.get(at..at + n).ok_or("truncated header")?;
        at += n;
        Ok(s)
    };
    if take(8)? != MAGIC {
        return Err("not a hasten KV block file".into());
    }
    let u64_at = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8 bytes"));
    let u32_at = |s: &[u8]| u32::from_le_bytes(s.try_into().expect("4 bytes"));
    let model = u64_at(take(8)?);
    let hash = u64_at(take(8)?);
    let kv_type = take(1)?[0];
    let mut dims = [0u32; 5];
    for d in &mut dims {
        *d = u32_at(take(4)?);
    }
    let [block_size, n_layers, n_kv_heads, head_dim, n_tokens] = dims;
    if model != id.model {
        return Err("written for another model".into());
    }
    if (kv_type, block_size, n_layers, n_kv_heads, head_dim)
        != (
            id.kv_type,
            id.block_size,
            id.n_layers,
            id.n_kv_heads,
            id.head_dim,
        )
    {
        return Err("written for another KV layout (--kv-type or block size)".into());
    }
    if n_tokens != block_size {
        return Err(format!("{n_tokens} tokens in a block of {block_size}"));
    }
    let tokens = take(4 * n_tokens as usize)?
        .chunks_exact(4)
        .map(u32_at)
        .collect();
    let len = u64_at(take(8)?);
    let sum = u64_at(take(8)?);
    if len != id.block_bytes {
        return Err(format!(
            "payload of {len} bytes; a block has {}",
            id.block_bytes
        ));
    }
    Ok(Header {
        hash,
        tokens,
        len,
        sum,
        offset: at,
    })
}

impl DiskTier {
    /// Opens (creating) `cfg.dir` for the model and layout of `id`: indexes
    /// the files already there (reading their headers) and starts the
    /// thread. `on_loaded` receives each [`DiskTier::load`]'s answer.
    pub fn open(
        cfg: &DiskCacheConfig,
        id: Identity,
        on_loaded: impl Fn(Loaded) + Send + 'static,
    ) -> std::io::Result<DiskTier> {
        std::fs::create_dir_all(&cfg.dir)?;
        let index = Arc::new(Mutex::new(scan(&cfg.dir, &id)?));
        let (tx, rx) = mpsc::channel();
        let worker = Worker {
            dir: cfg.dir.clone(),
            id,
            max_bytes: cfg.max_bytes,
            index: index.clone(),
        };
        worker.evict_over_cap();
        let thread = std::thread::Builder::new()
            .name("hasten-kv-disk".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::Write(h, t, d) => {
                            worker.write(h, &t, &d);
                            worker.lock().queued.remove(&h);
                        }
                        Job::Load(seq, chain) => on_loaded(worker.load(seq, &chain)),
                    }
                }
            })?;
        Ok(DiskTier {
            index,
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a file holds the block `hash` of `tokens`, or will by the
    /// time a load queued now is read (no I/O).
    pub fn has(&self, hash: ChainHash, tokens: &[u32]) -> bool {
        let ix = self.lock();
        ix.entries.get(&hash).is_some_and(|e| e.tokens == tokens)
            || ix.queued.get(&hash).is_some_and(|t| t == tokens)
    }

    /// Queues a block for writing (unless a file holds it already or it
    /// is queued).
    pub fn write(&self, hash: ChainHash, tokens: &[u32], data: Vec<u8>) {
        let Some(tx) = &self.tx else { return };
        {
            let mut ix = self.lock();
            if ix.entries.contains_key(&hash) || ix.queued.contains_key(&hash) {
                return;
            }
            ix.queued.insert(hash, tokens.to_vec());
        }
        if tx.send(Job::Write(hash, tokens.to_vec(), data)).is_err() {
            self.lock().queued.remove(&hash);
        }
    }

    /// Queues reading `chain` (in order) for request `seq`; the answer
    /// goes to `on_loaded`.
    pub fn load(&self, seq: u64, chain: Vec<(ChainHash, Vec<u32>)>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Job::Load(seq, chain));
        }
    }

    pub fn stats(&self) -> DiskStats {
        self.lock().stats
    }

    /// Writes everything queued, then stops the thread.
    pub fn close(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DiskTier {
    fn drop(&mut self) {
        self.close();
    }
}

/// Indexes the block files of `id` in `dir`; others are counted and
/// reported in one warning.
fn scan(dir: &Path, id: &Identity) -> std::io::Result<Index> {
    let mut index = Index::default();
    let mut files: Vec<(std::time::SystemTime, PathBuf, u64)> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let path = e.path();
        if path.extension().is_none_or(|x| x != EXT) {
            continue;
        }
        let meta = e.metadata()?;
        files.push((meta.modified()?, path, meta.len()));
    }
    // Oldest first: their use ticks order the LRU.
    files.sort();
    let mut foreign = 0;
    for (_, path, size) in files {
        let mut head = vec![0u8; 64 + 4 * id.block_size as usize];
        let read = std::fs::File::open(&path).and_then(|mut f| {
            use std::io::Read;
            let mut n = 0;
            while n < head.len() {
                match f.read(&mut head[n..])? {
                    0 => break,
                    k => n += k,
                }
            }
            Ok(n)
        })?;
        match parse_header(&head[..read], id) {
            Ok(h) if size == h.offset as u64 + h.len => {
                index.tick += 1;
                index.stats.bytes += size;
                index.entries.insert(
                    h.hash,
                    Entry {
                        tokens: h.tokens,
                        bytes: size,
                        used: index.tick,
                    },
                );
            }
            Ok(_) => {
                tracing::warn!(file = %path.display(), "prefix cache: skipping a truncated block file");
                index.stats.rejected += 1;
            }
            Err(why) => {
                foreign += 1;
                tracing::debug!(file = %path.display(), "prefix cache: skipping: {why}");
            }
        }
    }
    if foreign > 0 {
        tracing::warn!(
            dir = %dir.display(),
            "prefix cache: ignoring {foreign} block files of another model or KV layout"
        );
        index.stats.rejected += foreign;
    }
    index.stats.files = index.entries.len();
    Ok(index)
}

/// The thread's side: the directory, the identity, the cap.
struct Worker {
    dir: PathBuf,
    id: Identity,
    max_bytes: u64,
    index: Arc<Mutex<Index>>,
}

impl Worker {
    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path(&self, hash: ChainHash) -> PathBuf {
        self.dir.join(self.id.file_name(hash))
    }

    fn write(&self, hash: ChainHash, tokens: &[u32], data: &[u8]) {
        if self.lock().entries.contains_key(&hash) || data.len() as u64 != self.id.block_bytes {
            return;
        }
        let header = self.id.header(hash, tokens, data);
        let bytes = (header.len() + data.len()) as u64;
        if bytes > self.max_bytes {
            return;
        }
        // Write aside, then rename: a crash leaves no half file under the name.
        let tmp = self.dir.join(format!(".{}.tmp", self.id.file_name(hash)));
        let done = std::fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(&header)?;
            f.write_all(data)?;
            std::fs::rename(&tmp, self.path(hash))
        });
        if let Err(e) = done {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(dir = %self.dir.display(), "prefix cache: cannot write a block: {e}");
            return;
        }
        {
            let mut ix = self.lock();
            ix.tick += 1;
            let used = ix.tick;
            ix.entries.insert(
                hash,
                Entry {
                    tokens: tokens.to_vec(),
                    bytes,
                    used,
                },
            );
            ix.stats.bytes += bytes;
            ix.stats.written += 1;
            ix.stats.files = ix.entries.len();
        }
        self.evict_over_cap();
    }

    /// Removes the least recently used files until the directory fits the cap.
    fn evict_over_cap(&self) {
        loop {
            let victim = {
                let mut ix = self.lock();
                if ix.stats.bytes <= self.max_bytes {
                    return;
                }
                let Some((&h, _)) = ix.entries.iter().min_by_key(|(_, e)| e.used) else {
                    return;
                };
                let e = ix.entries.remove(&h).expect("just found");
                ix.stats.bytes -= e.bytes;
                ix.stats.files = ix.entries.len();
                h
            };
            let _ = std::fs::remove_file(self.path(victim));
        }
    }

    /// Reads and checks each block of `chain` in turn, stopping at the
    /// first that is missing or bad.
    fn load(&self, seq: u64, chain: &[(ChainHash, Vec<u32>)]) -> Loaded {
        let mut blocks = Vec::new();
        for (hash, tokens) in chain {
            match self.read(*hash, tokens) {
                Ok(data) => {
                    // The file's time orders the LRU after a restart.
                    let _ = std::fs::File::options()
                        .write(true)
                        .open(self.path(*hash))
                        .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                    let mut ix = self.lock();
                    ix.tick += 1;
                    let t = ix.tick;
                    if let Some(e) = ix.entries.get_mut(hash) {
                        e.used = t;
                    }
                    ix.stats.loaded += 1;
                    blocks.push(LoadedBlock {
                        hash: *hash,
                        tokens: tokens.clone(),
                        data,
                    });
                }
                // A queued write that did not happen (an I/O error, over
                // the cap): nothing to skip or count.
                Err(_) if !self.lock().entries.contains_key(hash) => break,
                Err(why) => {
                    let path = self.path(*hash);
                    tracing::warn!(file = %path.display(), "prefix cache: skipping a block file: {why}");
                    let _ = std::fs::remove_file(&path);
                    let mut ix = self.lock();
                    if let Some(e) = ix.entries.remove(hash) {
                        ix.stats.bytes -= e.bytes;
                    }
                    ix.stats.rejected += 1;
                    ix.stats.files = ix.entries.len();
                    break;
                }
            }
        }
        Loaded { seq, blocks }
    }

    fn read(&self, hash: ChainHash, tokens: &[u32]) -> Result<Vec<u8>, String> {
        let mut bytes = std::fs::read(self.path(hash)).map_err(|e| e.to_string())?;
        let h = parse_header(&bytes, &self.id)?;
        if h.hash != hash || h.tokens != tokens {
            return Err("holds another block".into());
        }
        if bytes.len() as u64 != h.offset as u64 + h.len {
            return Err("truncated or padded".into());
        }
        bytes.drain(..h.offset);
        if checksum(&bytes) != h.sum {
            return Err("checksum mismatch (altered or damaged)".into());
        }
        Ok(bytes)
    }
}

#[cfg(test)]
#[path = "disk_tests.rs"]
mod tests;
