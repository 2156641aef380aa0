//! The CPU one client's fetch costs, on each side. `query` runs the
//! servers and the in-process clients in one process, so each side is told
//! apart by its threads: the servers run on a runtime whose threads are
//! named [`SERVER_THREADS`], the clients on the rest of the process. The
//! client side adds the ODBC child's own CPU (from its connect to its last
//! row, as its timer); the server side adds PostgreSQL's processes (the
//! postmaster, its background workers and the backends) when it runs.

use std::time::{Duration, Instant};

use crate::cpu;

/// The servers' runtime's thread name.
pub const SERVER_THREADS: &str = "query-server";
/// The in-process clients' runtime's thread name.
pub const CLIENT_THREADS: &str = "query-client";

/// How long to wait for a closed connection's backend to be reaped.
const REAP_WAIT: Duration = Duration::from_secs(2);

/// Where the CPU is read from.
pub struct Meter {
    /// PostgreSQL's postmaster, when it runs.
    pub postmaster: Option<u32>,
}

/// One reading of every counter.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    process: f64,
    server_threads: f64,
    postgres: f64,
    backends: usize,
}

/// CPU seconds of one fetch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Charge {
    pub client_s: f64,
    pub server_s: f64,
}

impl Meter {
    pub fn read(&self) -> Option<Reading> {
        let (postgres, backends) = match self.postmaster {
            Some(pid) => (cpu::tree_cpu_s(pid)?, cpu::live_children(pid).len()),
            None => (0.0, 0),
        };
        Some(Reading {
            process: cpu::process_cpu_s()?,
            server_threads: cpu::threads_cpu_s(SERVER_THREADS)?,
            postgres,
            backends,
        })
    }

    /// The CPU since `before`. A client that closed its PostgreSQL
    /// connection leaves a backend that is exiting: wait (up to 2 s) until
    /// the postmaster has reaped it, so its CPU is counted. `child_s` is
    /// what a client process (testbed-odbc) reported for itself.
    pub fn since(&self, before: &Reading, child_s: Option<f64>) -> Option<Charge> {
        if let Some(pid) = self.postmaster {
            let deadline = Instant::now() + REAP_WAIT;
            while cpu::live_children(pid).len() > before.backends && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let after = self.read()?;
        let server_threads = after.server_threads - before.server_threads;
        let client_threads = after.process - before.process - server_threads;
        Some(Charge {
            client_s: (client_threads + child_s.unwrap_or(0.0)).max(0.0),
            server_s: (server_threads + after.postgres - before.postgres).max(0.0),
        })
    }
}
