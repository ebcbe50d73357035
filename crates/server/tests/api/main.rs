//! The server's integration tests that can share a process, as one test
//! binary (each file its own binary took a link of the whole server
//! apiece). `tests/overload.rs` and `tests/oversized.rs` stay alone: one
//! measures step times, the other the process's peak memory.

#[path = "../common/certs.rs"]
mod certs;
#[path = "../common/mod.rs"]
mod common;

mod conns;
mod fleet_metrics;
mod fuzz;
mod live;
mod otel;
mod routes;
mod tls;
