//! Int8 peak probe: the multiply-accumulates per second that `THREADS`
//! pool threads reach with independent 512-bit `vpdpbusd`
//! (`hasten_kernels::probe::int8_peak`), best of 5; prefill rates are
//! reported as a share of it.
//!
//! `cargo run --release -p hasten-kernels --example int8peak -- [THREADS]`
//! prints GMAC/s (10^9 int8 products per second) on the last line, or says
//! the CPU has no AVX-512 VNNI.

use hasten_kernels::probe::int8_peak;
use hasten_kernels::threads::Threads;

fn main() {
    let threads = Threads::new(
        std::env::args()
            .nth(1)
            .and_then(|a| a.parse().ok())
            .unwrap_or(2),
    )
    .unwrap();
    match int8_peak(threads, 5) {
        Some(rate) => {
            println!("int8 vpdpbusd peak, {} threads:", threads.get());
            println!("{:.1}", rate / 1e9);
        }
        None => println!("no AVX-512 VNNI on this CPU"),
    }
}
