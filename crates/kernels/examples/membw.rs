//! Read-bandwidth probe: the rate at which `THREADS` threads (the pool
//! hasten uses) can stream a buffer much larger than the caches, best of 5
//! passes (`hasten_kernels::probe::read_bandwidth`). The decode-bandwidth
//! target of the kernels is a share of this.
//!
//! `cargo run --release -p hasten-kernels --example membw -- [THREADS] [MiB]`
//! prints GB/s (10^9 bytes per second) on the last line.

use hasten_kernels::probe::read_bandwidth;
use hasten_kernels::threads::Threads;

fn main() {
    let mut args = std::env::args().skip(1);
    let threads = Threads::new(args.next().and_then(|a| a.parse().ok()).unwrap_or(2)).unwrap();
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let best = read_bandwidth(threads, mib << 20, 5);
    println!(
        "read bandwidth, {} threads, {mib} MiB buffer:",
        threads.get()
    );
    println!("{:.2}", best / 1e9);
}
