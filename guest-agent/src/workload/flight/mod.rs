//! The Arrow Flight workloads, both run by the `testbed-flight` binary as
//! child processes, so the agent links no arrow/tonic. Their JSON output
//! lines are read into the types testbed-flight prints them with
//! (`testbed_vocab::flight`).
//!
//! - `flight-bulk` (bulk.rs): DoGet/DoPut/DoExchange throughput, the
//!   client's stream and summary lines turned into samples.
//! - `flight-query` (query.rs): the row protocols vs Flight SQL comparison.
//! - `flight-genomics` (genomics.rs): ArrowSAM regions by DoPut vs BAM.
//! - `flight-ingest` (ingest.rs): the same rows written into PostgreSQL by
//!   Flight SQL bulk ingest, COPY, batched INSERT and ODBC arrays.
//! - process.rs: the server child, certificates, the loopback interface.
//! - pinning.rs: client and server on separate host CPUs where a spec asks.

mod bulk;
mod genomics;
mod ingest;
mod link;
mod pinning;
mod process;
mod query;

pub use bulk::stop_boot_server;
pub use bulk::{
    Compression, FlightBulkParams, Op, Role, Transport, record, run, run_with_binary,
};
pub use genomics::{FlightGenomicsParams, PIPELINES};
pub use ingest::{FlightIngestParams, INGEST_CLIENTS};
pub use process::ensure_loopback_up;
pub use query::{FlightQueryParams, QUERY_CLIENTS, run_query, run_query_with_binary};

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use testbed_vocab::request::flight::FlightRequest;

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

/// Runs a client request to completion and returns its JSON lines read as
/// `T`; the error names the command and carries stderr.
fn run_client<T: DeserializeOwned>(
    bin: &Path,
    request: &FlightRequest,
    timeout: Duration,
) -> Result<Vec<T>, WorkloadError> {
    let what = format!("testbed-flight {}", request.command());
    child::run_request(bin, request, timeout, &what)
}

/// Each of `names` (a spec's list, checked by its validation) as the
/// vocabulary's value; a name it does not know is an error naming `field`.
fn named<T>(
    field: &str,
    names: &[String],
    from_name: fn(&str) -> Option<T>,
) -> Result<Vec<T>, WorkloadError> {
    names
        .iter()
        .map(|n| from_name(n).ok_or_else(|| other(format!("{field}: unknown {n:?}"))))
        .collect()
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

const GIB: f64 = (1u64 << 30) as f64;

/// The middle value (the upper one of an even count), as the figures take it.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One repetition's CPU, as a query or ingest line reports it.
struct CpuSpent {
    value_bytes: u64,
    client_s: Option<f64>,
    server_s: Option<f64>,
}

/// CPU seconds per GiB of the rows' values on each side, one sample per
/// repetition (raw `cpu_s_per_gb`, tags + `side`) and their median
/// (`<client>_<side>_cpu_s_per_gb`); a side that could not be read for
/// every repetition says so in `<client>_<side>_cpu_unread` instead.
fn record_cpu_per_gb(
    ctx: &crate::workload::JobContext,
    s: &mut crate::workload::Summary,
    client: &str,
    stream: u32,
    tags: &std::collections::BTreeMap<String, String>,
    spent: &[CpuSpent],
) {
    for side in ["client", "server"] {
        let per_gb: Vec<f64> = spent
            .iter()
            .filter(|c| c.value_bytes > 0)
            .filter_map(|c| {
                let cpu = if side == "client" { c.client_s } else { c.server_s };
                Some(cpu? / (c.value_bytes as f64 / GIB))
            })
            .collect();
        if per_gb.is_empty() || per_gb.len() != spent.len() {
            s.insert(
                format!("{client}_{side}_cpu_unread"),
                serde_json::json!("the CPU time could not be read for every repetition"),
            );
            continue;
        }
        let mut side_tags = tags.clone();
        side_tags.insert("side".into(), side.into());
        ctx.emit_samples("cpu_s_per_gb", "s/GiB", stream, &side_tags, &per_gb);
        s.insert(
            format!("{client}_{side}_cpu_s_per_gb"),
            serde_json::json!(median(per_gb)),
        );
    }
}

/// For tests: the testbed-flight binary built in this workspace.
#[cfg(test)]
fn real_binary() -> PathBuf {
    child::built_binary(registry::FLIGHT.env, registry::FLIGHT.binary)
}
