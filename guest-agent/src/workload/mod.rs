//! Workloads: the parameter types a spec's `[workload]` table deserialises
//! into, their pre-boot validation, and the code that runs them.
//!
//! Every workload is a plain library function `run(params, ctx)` so it can be
//! tested and benchmarked on the host; the agent only dispatches to it.

pub mod asam;
pub mod btree;
pub mod child;
pub mod defaults;
pub mod fault;
pub mod fio;
pub mod flight;
pub mod randread;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::protocol::{DeviceRef, SampleChunk};

/// The `[workload]` table of a spec, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Workload {
    /// Random O_DIRECT reads at queue depth 1 per thread.
    Randread(randread::RandReadParams),
    /// Deliberate failures, to exercise the host's crash/hang handling.
    Fault(fault::FaultParams),
    /// BPF-KV style B+-tree lookups from user space (read / io-uring).
    Btree(btree::BtreeParams),
    /// fio from Debian, the peer check of the lookup engines.
    Fio(fio::FioParams),
    /// Arrow Flight bulk transfer (DoGet/DoPut/DoExchange) via the testbed-flight binary.
    FlightBulk(flight::FlightBulkParams),
    /// Row protocols vs Flight SQL on a PostgreSQL table, via testbed-flight.
    FlightQuery(flight::FlightQueryParams),
    /// Sort + mark duplicates: Picard, Sambamba, samtools, ArrowSAM, via testbed-asam.
    AsamPreproc(asam::AsamPreprocParams),
}

impl Workload {
    pub fn kind(&self) -> &'static str {
        match self {
            Workload::Randread(_) => "randread",
            Workload::Fault(_) => "fault",
            Workload::Btree(_) => "btree",
            Workload::Fio(_) => "fio",
            Workload::FlightBulk(_) => "flight-bulk",
            Workload::FlightQuery(_) => "flight-query",
            Workload::AsamPreproc(_) => "asam-preproc",
        }
    }

    /// Checks the parameters against the devices the spec declares, before
    /// anything boots. The error names the offending field.
    pub fn validate(&self, devices: &BTreeMap<String, DeviceRef>) -> Result<(), ParamError> {
        match self {
            Workload::Randread(p) => p.validate(devices),
            Workload::Fault(_) => Ok(()),
            Workload::Btree(p) => p.validate(devices),
            Workload::Fio(p) => p.validate(devices),
            Workload::FlightBulk(p) => p.validate(),
            Workload::FlightQuery(p) => p.validate(),
            Workload::AsamPreproc(p) => p.validate(),
        }
    }

    /// Names of the devices this workload uses.
    pub fn devices(&self) -> Vec<&str> {
        match self {
            Workload::Randread(p) => vec![p.device.as_str()],
            Workload::Fault(_) => vec![],
            Workload::Btree(p) => vec![p.device.as_str()],
            Workload::Fio(p) => vec![p.device.as_str()],
            Workload::FlightBulk(_) => vec![],
            Workload::FlightQuery(_) => vec![],
            Workload::AsamPreproc(_) => vec![],
        }
    }

    pub fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        match self {
            Workload::Randread(p) => randread::run(p, ctx),
            Workload::Fault(p) => fault::run(p, ctx),
            Workload::Btree(p) => btree::run(p, ctx),
            Workload::Fio(p) => fio::run(p, ctx),
            Workload::FlightBulk(p) => flight::run(p, ctx),
            Workload::FlightQuery(p) => flight::run_query(p, ctx),
            Workload::AsamPreproc(p) => asam::run(p, ctx),
        }
    }
}

/// A parameter that cannot work, found before boot.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("workload.{field}: {reason}")]
pub struct ParamError {
    pub field: String,
    pub reason: String,
}

impl ParamError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ParamError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("device {name:?}: {reason}")]
    Device { name: String, reason: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("verification failed: {0}")]
    Verify(String),
    #[error("{0}")]
    Other(String),
}

impl WorkloadError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        WorkloadError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Where a workload sends raw samples. The agent's sink streams them to the
/// host; tests collect them.
pub trait SampleSink: Send + Sync {
    fn emit(&self, chunk: SampleChunk);
}

/// Collects samples in memory (tests, benches, host-side library use).
#[derive(Default)]
pub struct VecSink(pub std::sync::Mutex<Vec<SampleChunk>>);

impl SampleSink for VecSink {
    fn emit(&self, chunk: SampleChunk) {
        if let Ok(mut v) = self.0.lock() {
            v.push(chunk);
        }
    }
}

/// Per-job summary numbers (throughput, percentiles, ...), as JSON values.
pub type Summary = BTreeMap<String, serde_json::Value>;

/// What a running workload may use.
pub struct JobContext {
    pub job_id: u64,
    pub seed: u64,
    /// Device name -> where it is and how big.
    pub devices: BTreeMap<String, DeviceRef>,
    pub sink: Arc<dyn SampleSink>,
}

/// Samples are sent in chunks of at most this many values.
pub const CHUNK_VALUES: usize = 4096;

impl JobContext {
    pub fn device(&self, name: &str) -> Result<&DeviceRef, WorkloadError> {
        self.devices.get(name).ok_or_else(|| WorkloadError::Device {
            name: name.to_string(),
            reason: "not attached to this VM".into(),
        })
    }

    pub fn device_path(&self, name: &str) -> Result<String, WorkloadError> {
        self.device(name)?
            .path
            .clone()
            .ok_or_else(|| WorkloadError::Device {
                name: name.to_string(),
                reason: "no block device with this serial was found".into(),
            })
    }

    /// Sends `values` of one metric from one thread, split into chunks.
    pub fn emit_samples(
        &self,
        metric: &str,
        unit: &str,
        thread: u32,
        tags: &BTreeMap<String, String>,
        values: &[f64],
    ) {
        for (i, part) in values.chunks(CHUNK_VALUES).enumerate() {
            self.sink.emit(SampleChunk {
                job_id: self.job_id,
                metric: metric.to_string(),
                unit: unit.to_string(),
                thread,
                first_seq: (i * CHUNK_VALUES) as u64,
                tags: tags.clone(),
                values: part.to_vec(),
            });
        }
    }
}

/// Latency summary of nanosecond samples: mean and percentiles, via hdrhistogram.
pub fn latency_summary(prefix: &str, ns: &[f64], summary: &mut Summary) {
    let Ok(mut h) = hdrhistogram::Histogram::<u64>::new(3) else {
        return;
    };
    for &v in ns {
        // Values are ns; recording clamps nothing since auto-resize is on.
        let _ = h.record(v.max(1.0) as u64);
    }
    let mut put = |k: &str, v: f64| {
        summary.insert(format!("{prefix}_{k}"), serde_json::json!(v));
    };
    put("mean_ns", h.mean());
    put("p50_ns", h.value_at_quantile(0.50) as f64);
    put("p95_ns", h.value_at_quantile(0.95) as f64);
    put("p99_ns", h.value_at_quantile(0.99) as f64);
    put("p999_ns", h.value_at_quantile(0.999) as f64);
    put("max_ns", h.max() as f64);
}
