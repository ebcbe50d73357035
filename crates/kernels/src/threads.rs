//! Splitting work across threads.
//!
//! The reference implementation uses scoped std threads: simple, safe, and
//! correct. A persistent spinning pool (next issue) replaces it behind the
//! same functions once it measurably pays.

use crate::{Error, Result};

/// The largest thread count accepted anywhere in hasten.
pub const MAX_THREADS: usize = 256;

/// A validated thread count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threads(usize);

impl Threads {
    /// Validates `n` (1..=MAX_THREADS).
    pub fn new(n: usize) -> Result<Self> {
        if n == 0 || n > MAX_THREADS {
            return Err(Error::Threads(n));
        }
        Ok(Threads(n))
    }

    /// One thread per available core.
    pub fn available() -> Self {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        Threads(n.min(MAX_THREADS))
    }

    pub fn get(self) -> usize {
        self.0
    }
}

/// Splits `out` into at most `threads` contiguous pieces, each a whole number
/// of `unit`-sized items, and calls `f(first_item_index, piece)` for each piece
/// on its own thread. Runs inline when one thread suffices.
pub fn par_chunks<T: Send>(
    out: &mut [T],
    unit: usize,
    threads: Threads,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let items = out.len() / unit.max(1);
    let n = threads.get().min(items).max(1);
    if n == 1 {
        f(0, out);
        return;
    }
    let per = items.div_ceil(n);
    std::thread::scope(|s| {
        let f = &f;
        let mut rest = out;
        let mut first = 0;
        let mut handles = Vec::with_capacity(n);
        while !rest.is_empty() {
            let take = (per * unit).min(rest.len());
            let (piece, tail) = rest.split_at_mut(take);
            rest = tail;
            let start = first;
            first += take / unit;
            if rest.is_empty() {
                // The calling thread does the last piece instead of idling.
                f(start, piece);
            } else {
                handles.push(s.spawn(move || f(start, piece)));
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_zero_and_absurd_thread_counts() {
        assert!(Threads::new(0).is_err());
        assert!(Threads::new(MAX_THREADS + 1).is_err());
        assert!(Threads::new(1).is_ok());
    }

    #[test]
    fn par_chunks_visits_every_item_once() {
        for threads in [1, 2, 3, 7] {
            for len in [0usize, 1, 5, 64, 1001] {
                let mut v = vec![0usize; len * 3];
                par_chunks(&mut v, 3, Threads::new(threads).unwrap(), |first, piece| {
                    for (i, item) in piece.chunks_mut(3).enumerate() {
                        item.fill(first + i + 1);
                    }
                });
                for (i, item) in v.chunks(3).enumerate() {
                    assert!(
                        item.iter().all(|&x| x == i + 1),
                        "threads={threads} len={len}"
                    );
                }
            }
        }
    }
}
