//! Arrow Flight benchmarks of the testbed (`flight` family in papers.md).
//!
//! - Bulk transfer with the semantics of Arrow C++ `arrow-flight-benchmark`:
//!   4 int64 columns, the server re-sends one pre-built batch, MB = 2^20
//!   payload bytes. [`server`] serves DoGet/DoPut/DoExchange, [`bench`] drives
//!   them and returns per-stream results.
//! - [`pyarrow`] runs the same payload through pyarrow's C++ Flight
//!   (`py-serve`, `py-bench`): the flight-bulk workload's `client` and
//!   `server` pairings.
//! - [`query`] compares row protocols (ODBC, libpq) with Flight SQL over a
//!   synthetic NYC-taxi table in PostgreSQL.
//!
//! [`cli`] holds the `testbed flight ...` / `testbed-flight ...` commands;
//! [`lines`] the JSON lines they print for the agent.
//!
//! Setup (host): `pip install pyarrow` for the interop tests and the
//! pyarrow pairings; `apt-get install -y postgresql-15 odbc-postgresql
//! unixodbc unixodbc-dev` for `query`. Its ODBC clients are a binary of
//! their own, `testbed-odbc` (guest-agent/odbc: libodbc is linked
//! dynamically and dlopens psqlODBC, which a static binary cannot).
//!
//! Layers, lowest first (a module uses its own layer and lower ones;
//! orchestrator/tests/layers.rs checks every `crate::` path against this):
//! - base: error, runtime, settings
//! - wire: addr, codec, data, lines, pins, private, tls, transport, pyarrow
//! - measuring: cpu
//! - roles: bench, server
//! - workloads: genomics, query, ingest
//! - commands: cli

pub mod addr;
pub mod bench;
pub mod cli;
pub mod codec;
pub mod cpu;
pub mod data;
pub mod error;
pub mod genomics;
pub mod ingest;
pub mod lines;
pub mod pins;
pub mod private;
pub mod pyarrow;
pub mod query;
pub mod runtime;
pub mod server;
pub mod settings;
pub mod tls;
pub mod transport;

pub use cli::{FlightCommand, run_command};
pub use error::FlightError;
