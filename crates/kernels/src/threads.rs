//! Splitting work across threads.
//!
//! A persistent pool of workers (spinning briefly, then sleeping) runs the
//! parallel regions; `par_chunks` hands each worker a disjoint piece of the
//! output, `par_column_blocks` disjoint blocks of columns of a row-major
//! matrix, which the workers take in turn.
//!
//! `unsafe` here (allowed for this module only): disjoint sub-slices of one
//! output handed to different threads, and a job borrowed by the pool only
//! while its caller waits.
#![allow(unsafe_code)]

use crate::{Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

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

    /// A single thread (no parallel region).
    pub const ONE: Threads = Threads(1);

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
/// on the persistent worker pool. Runs inline when one thread suffices.
pub fn par_chunks<T: Send>(
    out: &mut [T],
    unit: usize,
    threads: Threads,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let unit = unit.max(1);
    let items = out.len() / unit;
    let pool = pool();
    let n = threads.get().min(items).min(pool.size()).max(1);
    if n == 1 {
        f(0, out);
        return;
    }
    let per = items.div_ceil(n);
    let len = out.len();
    let base = SendPtr(out.as_mut_ptr());
    pool.run(n, &|i| {
        let start = (i * per * unit).min(len);
        // The last piece also takes any tail shorter than a unit.
        let end = if i + 1 == n {
            len
        } else {
            ((i + 1) * per * unit).min(len)
        };
        if start < end {
            let base = &base;
            // SAFETY: pieces [start, end) of different `i` are disjoint and
            // inside `out`, which stays mutably borrowed (and so alive and
            // unaliased) until `run` returns after every piece is done.
            let piece = unsafe { std::slice::from_raw_parts_mut(base.0.add(start), end - start) };
            f(start / unit, piece);
        }
    });
}

/// Runs `f(block)` over blocks of columns of the row-major matrix `out`
/// (`cols` columns): block widths are multiples of `unit` (the last takes
/// any tail), up to [`PIECES_PER_THREAD`] blocks per thread but none
/// narrower than `min_cols` (the caller's judgement of a piece worth
/// taking alone) unless that leaves a thread without one; the threads take
/// the blocks in turn, so a thread the VM or the host slows down takes
/// fewer. Each call may write every row of its own columns and nothing
/// else.
pub fn par_column_blocks<T: Send>(
    out: &mut [T],
    cols: usize,
    unit: usize,
    min_cols: usize,
    threads: Threads,
    f: impl Fn(&mut ColumnBlock<'_, T>) + Sync,
) {
    let cols = cols.max(1);
    assert!(out.len().is_multiple_of(cols), "a matrix of {cols} columns");
    let rows = out.len() / cols;
    let unit = unit.max(1);
    let items = cols / unit;
    let pool = pool();
    let n = threads.get().min(items).min(pool.size()).max(1);
    // Halves fixed in advance left the faster thread waiting for the
    // slower at every product.
    let pieces = if n == 1 {
        1
    } else {
        (n * PIECES_PER_THREAD)
            .min(cols / min_cols.max(1))
            .max(n)
            .min(items)
    };
    let per = items.div_ceil(pieces).max(1);
    let pieces = items.div_ceil(per).max(1);
    let base = SendPtr(out.as_mut_ptr());
    let next = AtomicUsize::new(0);
    let piece = |i: usize| {
        let c0 = (i * per * unit).min(cols);
        let c1 = if i + 1 == pieces {
            cols
        } else {
            ((i + 1) * per * unit).min(cols)
        };
        if c0 < c1 {
            f(&mut ColumnBlock {
                base: base.get(),
                cols,
                rows,
                c0,
                width: c1 - c0,
                _out: std::marker::PhantomData,
            });
        }
    };
    let run = |_: usize| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= pieces {
            break;
        }
        piece(i);
    };
    if n == 1 {
        piece(0);
    } else {
        pool.run(n, &run);
    }
}

/// Most pieces per thread [`par_column_blocks`] cuts its columns into.
const PIECES_PER_THREAD: usize = 16;

/// Columns `first()..first() + width()` of every row of a row-major matrix,
/// lent to one thread by [`par_column_blocks`].
pub struct ColumnBlock<'a, T> {
    base: *mut T,
    cols: usize,
    rows: usize,
    c0: usize,
    width: usize,
    _out: std::marker::PhantomData<&'a mut [T]>,
}

impl<T> ColumnBlock<'_, T> {
    /// The first column of the block.
    pub fn first(&self) -> usize {
        self.c0
    }

    /// How many columns the block holds.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The block's columns of row `r`.
    pub fn row(&mut self, r: usize) -> &mut [T] {
        assert!(r < self.rows, "row {r} of {}", self.rows);
        // SAFETY: `c0 + width <= cols`, so the range lies inside row `r` of
        // the `rows * cols` elements `base` points at, which stay mutably
        // borrowed until `par_column_blocks` returns; no other block holds
        // these columns, and `&mut self` keeps one row slice alive at a time.
        unsafe {
            std::slice::from_raw_parts_mut(self.base.add(r * self.cols + self.c0), self.width)
        }
    }
}

struct SendPtr<T>(*mut T);

impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the `Sync` wrapper).
    fn get(&self) -> *mut T {
        self.0
    }
}
// SAFETY: the pointer is only used to build disjoint sub-slices of a `&mut [T]`
// with `T: Send`, each touched by one thread (see `par_chunks`).
unsafe impl<T: Send> Sync for SendPtr<T> {}

static POOL: OnceLock<Pool> = OnceLock::new();

thread_local! {
    /// Parallel regions this thread handed to the workers (each costs a
    /// hand-off and a wait for the last of them).
    static REGIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many parallel regions [`Pool::run`] has handed to workers from the
/// calling thread (regions run inline on one thread are not counted).
pub fn regions_run() -> usize {
    REGIONS.with(|c| c.get())
}

/// The process-wide pool: sized by [`init_pool`] when that ran first, else
/// one thread per core (the caller counts as one).
pub fn pool() -> &'static Pool {
    POOL.get_or_init(|| Pool::new(Threads::available().get()))
}

/// Sizes the process-wide pool to `threads` (the caller included) before
/// any parallel region runs, so a `--threads 4` process on a 16-core
/// machine starts 3 workers, not 15 that would wake and spin on every
/// region. The first sizing wins: returns the size the pool has.
pub fn init_pool(threads: Threads) -> usize {
    POOL.get_or_init(|| Pool::new(threads.get())).size()
}

type Job<'a> = &'a (dyn Fn(usize) + Sync);

/// A persistent pool of spinning workers.
///
/// Decoding a small model runs hundreds of parallel regions per token, so
/// spawning threads per region (tens of microseconds each) would dominate.
/// Workers spin on an epoch counter for a short while after each job (so
/// back-to-back regions start in well under a microsecond), then sleep on a
/// condition variable so an idle process uses no CPU.
pub struct Pool {
    size: usize,
    shared: Arc<Shared>,
    /// Serializes callers: one job at a time.
    lock: Mutex<()>,
}

struct Shared {
    epoch: AtomicUsize,
    /// Workers (indices 1..) that finished the current job.
    done: AtomicUsize,
    /// The current job: (its epoch, how many take part with the caller as
    /// index 0, the lifetime-erased function, valid while `run` waits).
    job: Mutex<(usize, usize, Option<Job<'static>>)>,
    sleep: Mutex<()>,
    wake: Condvar,
    /// Workers between deciding to sleep and waking: `run` wakes the
    /// condition variable (a system call) only when there are any.
    sleepers: AtomicUsize,
}

const SPIN_LIMIT: u32 = 20_000;

impl Pool {
    fn new(size: usize) -> Self {
        let shared = Arc::new(Shared {
            epoch: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            job: Mutex::new((0, 0, None)),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            sleepers: AtomicUsize::new(0),
        });
        let mut started = 1;
        for index in 1..size {
            let shared = Arc::clone(&shared);
            // A pool that cannot start a worker runs with the ones it has:
            // `run` only waits for workers that exist.
            let spawned = std::thread::Builder::new()
                .name(format!("hasten-worker-{index}"))
                .spawn(move || worker(index, &shared));
            if spawned.is_err() {
                break;
            }
            started += 1;
        }
        Pool {
            size: started,
            shared,
            lock: Mutex::new(()),
        }
    }

    /// Threads available, the caller included.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Runs `f(i)` for `i` in `0..n` (n <= size): `f(0)` on the caller, the
    /// others on workers, and returns when all are done.
    pub fn run(&self, n: usize, f: Job<'_>) {
        let n = n.min(self.size).max(1);
        // A region started from inside a region (or with one thread) runs
        // inline: the pool runs one job at a time.
        if n == 1 || IN_REGION.with(|c| c.get()) {
            (0..n).for_each(f);
            return;
        }
        IN_REGION.with(|c| c.set(true));
        REGIONS.with(|c| c.set(c.get() + 1));
        struct Leave;
        impl Drop for Leave {
            fn drop(&mut self) {
                IN_REGION.with(|c| c.set(false));
            }
        }
        let _leave = Leave;
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: the job is erased to 'static only to be stored; `run` does
        // not return (even on panic in `f(0)`, see the guard below) until every
        // worker has finished with it and it has been taken out again.
        let erased: Job<'static> = unsafe { std::mem::transmute::<Job<'_>, Job<'static>>(f) };
        s.done.store(0, Ordering::Relaxed);
        let epoch = s.epoch.load(Ordering::Relaxed) + 1;
        *s.job.lock().unwrap_or_else(|e| e.into_inner()) = (epoch, n, Some(erased));
        // SeqCst with the worker's `sleepers` increment and epoch check:
        // either it sees the new epoch and does not wait, or this sees it
        // counted and wakes it (under the lock it holds until it waits).
        s.epoch.store(epoch, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        struct WaitForWorkers<'a>(&'a Shared, usize);
        impl Drop for WaitForWorkers<'_> {
            fn drop(&mut self) {
                let mut spins = 0u32;
                while self.0.done.load(Ordering::Acquire) < self.1 - 1 {
                    spins += 1;
                    if spins < SPIN_LIMIT {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
                self.0.job.lock().unwrap_or_else(|e| e.into_inner()).2 = None;
            }
        }
        let wait = WaitForWorkers(s, n);
        f(0);
        drop(wait);
    }
}

thread_local! {
    static IN_REGION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn worker(index: usize, s: &Shared) {
    IN_REGION.with(|c| c.set(true));
    let mut seen = 0usize;
    loop {
        let mut spins = 0u32;
        loop {
            let e = s.epoch.load(Ordering::Acquire);
            if e != seen {
                seen = e;
                break;
            }
            spins += 1;
            if spins < SPIN_LIMIT {
                std::hint::spin_loop();
            } else {
                let g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
                s.sleepers.fetch_add(1, Ordering::SeqCst);
                if s.epoch.load(Ordering::SeqCst) == seen {
                    let _g = s
                        .wake
                        .wait_timeout(g, std::time::Duration::from_millis(50))
                        .unwrap_or_else(|e| e.into_inner());
                }
                s.sleepers.fetch_sub(1, Ordering::SeqCst);
                spins = 0;
            }
        }
        // Take part only in the job of the epoch just seen: a worker that
        // overslept one job must not run (or count toward) a later one twice.
        let (epoch, active, job) = *s.job.lock().unwrap_or_else(|e| e.into_inner());
        if epoch == seen && index < active {
            if let Some(f) = job {
                // A panicking kernel must not leave the caller waiting forever.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(index)));
            }
            s.done.fetch_add(1, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_blocks_cover_every_column_once() {
        for threads in 1..4 {
            for (rows, cols, unit) in [
                (1, 17, 8),
                (5, 64, 8),
                (3, 7, 4),
                (2, 3, 8),
                (2, 5000, 8),
                (1, 2048, 16),
                (3, 200, 1),
                (1, 4100, 32),
            ] {
                let mut m = vec![0u32; rows * cols];
                par_column_blocks(&mut m, cols, unit, 3, Threads::new(threads).unwrap(), |b| {
                    assert!(b.first().is_multiple_of(unit));
                    let (c0, width) = (b.first(), b.width());
                    for r in 0..rows {
                        for (c, v) in b.row(r).iter_mut().enumerate() {
                            *v += (r * cols + c0 + c) as u32 + 1;
                        }
                    }
                    assert!(c0 + width <= cols);
                });
                let want: Vec<u32> = (1..=(rows * cols) as u32).collect();
                assert_eq!(m, want, "{rows}x{cols} unit {unit}, {threads} threads");
            }
        }
    }

    #[test]
    fn rejects_zero_and_absurd_thread_counts() {
        assert!(Threads::new(0).is_err());
        assert!(Threads::new(MAX_THREADS + 1).is_err());
        assert!(Threads::new(1).is_ok());
    }

    #[test]
    // Thousands of spinning hand-offs take hours in Miri's interpreter.
    #[cfg_attr(miri, ignore)]
    fn pool_survives_many_regions_of_varying_width_and_nesting() {
        let mut v = vec![0u64; 4096];
        for round in 0..3000u64 {
            let threads = Threads::new(1 + (round as usize % 5)).unwrap();
            let unit = 1 + (round as usize % 7);
            par_chunks(&mut v, unit, threads, |first, piece| {
                for (i, x) in piece.iter_mut().enumerate() {
                    *x = round + (first * unit + i) as u64;
                }
                if round % 100 == 0 {
                    // A nested region runs inline instead of deadlocking.
                    let mut inner = vec![0u8; 64];
                    par_chunks(&mut inner, 8, threads, |_, p| p.fill(1));
                    assert!(inner.iter().all(|&b| b == 1));
                }
            });
            assert!(
                v.iter().enumerate().all(|(i, &x)| x == round + i as u64),
                "round {round}"
            );
        }
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
