//! The Arrow Flight workloads, both run by the `testbed-flight` binary as
//! child processes, so the agent links no arrow/tonic. Their JSON output
//! lines are read into the types testbed-flight prints them with
//! (`testbed_lines::flight`).
//!
//! - `flight-bulk` (bulk.rs): DoGet/DoPut/DoExchange throughput, the
//!   client's stream and summary lines turned into samples.
//! - `flight-query` (query.rs): the row protocols vs Flight SQL comparison.
//! - `flight-genomics` (genomics.rs): ArrowSAM regions by DoPut vs BAM.
//! - process.rs: the server child, certificates, the loopback interface.

mod bulk;
mod genomics;
mod link;
mod process;
mod query;

pub use bulk::stop_boot_server;
pub use bulk::{
    Compression, FlightBulkParams, Operation, Role, Transport, record, run, run_with_binary,
};
pub use genomics::{FlightGenomicsParams, PIPELINES};
pub use process::ensure_loopback_up;
pub use query::{FlightQueryParams, QUERY_CLIENTS, run_query, run_query_with_binary};

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::{WorkloadError, child, registry};

fn default_timeout() -> u64 {
    3600
}

/// `$TESTBED_FLIGHT_BIN`, then `testbed-flight` on PATH, then /bin.
pub fn flight_binary() -> Option<PathBuf> {
    registry::FLIGHT.find()
}

/// [`flight_binary`], or the error that says where it was looked for.
fn require_binary() -> Result<PathBuf, WorkloadError> {
    flight_binary().ok_or_else(|| registry::FLIGHT.not_found())
}

fn other(msg: impl Into<String>) -> WorkloadError {
    WorkloadError::Other(msg.into())
}

/// Runs a client command to completion and returns its JSON lines read as
/// `T`; the error carries stderr.
fn run_client<T: DeserializeOwned>(
    bin: &Path,
    args: &[String],
    timeout: Duration,
) -> Result<Vec<T>, WorkloadError> {
    child::run_json(bin, args, timeout, "flight client")
}

/// A private scratch directory (socket, TLS files, query run dir): mode
/// 0700, made by mkdtemp, removed on drop.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new(job_id: u64) -> Result<Self, WorkloadError> {
        child::private_dir(&format!("testbed-flight-{job_id}-")).map(Scratch)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

/// For tests: the testbed-flight binary built in this workspace.
#[cfg(test)]
fn real_binary() -> PathBuf {
    child::built_binary(registry::FLIGHT.env, registry::FLIGHT.binary)
}
