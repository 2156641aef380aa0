//! Workloads: the parameter types a spec's `[workload]` table deserialises
//! into, their pre-boot validation, and the code that runs them.
//!
//! Every workload is a plain library function `run(params, ctx)` so it can be
//! tested and benchmarked on the host; the agent only dispatches to it.

pub mod child;
pub mod defaults;
pub mod registry;

pub use registry::{Helper, MetricInfo, Needs, WorkloadParams};

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use testbed_vocab::protocol::{DeviceRef, SampleChunk};

// The registry: one entry per workload module, one line per kind in it.
// Each type implements `WorkloadParams`, which says
// everything the host needs to know (helpers, image, host tools, metrics).
registry::workloads! {
    mod randread {
        /// Random O_DIRECT reads at queue depth 1 per thread.
        Randread(RandReadParams) = "randread"
    }
    mod fault {
        /// Deliberate failures, to exercise the host's crash/hang handling.
        Fault(FaultParams) = "fault"
    }
    mod btree {
        /// BPF-KV style B+-tree lookups from user space and the hooks.
        Btree(BtreeParams) = "btree"
    }
    mod fio {
        /// fio from Debian, the peer check of the lookup engines.
        Fio(FioParams) = "fio"
    }
    mod flight {
        /// Arrow Flight bulk transfer (DoGet/DoPut/DoExchange) via testbed-flight.
        FlightBulk(FlightBulkParams) = "flight-bulk",
        /// Row protocols vs Flight SQL on a PostgreSQL table, via testbed-flight.
        FlightQuery(FlightQueryParams) = "flight-query",
        /// ArrowSAM regions moved by DoPut vs as BAM, then sorted and marked per region.
        FlightGenomics(FlightGenomicsParams) = "flight-genomics",
        /// The same rows written into PostgreSQL by Flight SQL bulk ingest, COPY, INSERT, ODBC arrays.
        FlightIngest(FlightIngestParams) = "flight-ingest",
    }
    mod asam {
        /// Sort + mark duplicates: Picard, Sambamba, samtools, ArrowSAM, via testbed-asam.
        AsamPreproc(AsamPreprocParams) = "asam-preproc"
    }
    mod asam_workflow {
        /// Align, sort, markdup, BQSR, call per data placement, via testbed-asam.
        AsamWorkflow(AsamWorkflowParams) = "asam-workflow"
    }
    mod block_latency { BlockLatency(BlockLatencyParams) = "block-latency" }
    mod layers {
        /// Per-layer latency of O_DIRECT reads on ext4, BPF tracing loaded with aya.
        LayerLatency(LayerLatencyParams) = "layer-latency"
    }
}

impl Workload {
    /// Checks the parameters against the devices the spec declares, before
    /// anything boots. The error names the offending field.
    pub fn validate(&self, devices: &BTreeMap<String, DeviceRef>) -> Result<(), ParamError> {
        self.params().validate(devices)
    }

    pub fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        self.params().run(ctx)
    }

    /// What the host must provide for this workload to run.
    pub fn needs(&self) -> Needs {
        self.params().needs()
    }

    /// The metrics this workload emits (raw samples and summary numbers).
    pub fn metrics(&self) -> Vec<MetricInfo> {
        self.params().metrics()
    }

    /// Every field, defaults filled in, as JSON (what the host records for
    /// each point and writes as `param_<field>` columns).
    pub fn resolved(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
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

/// `field` names at least one `noun`, each one of `known`.
pub fn known_names(
    field: &str,
    noun: &str,
    names: &[String],
    known: &[&str],
) -> Result<(), ParamError> {
    if names.is_empty() {
        return Err(ParamError::new(field, format!("name at least one {noun}")));
    }
    if let Some(n) = names.iter().find(|n| !known.contains(&n.as_str())) {
        return Err(ParamError::new(
            field,
            format!("unknown {noun} {n:?}; known: {}", known.join(", ")),
        ));
    }
    Ok(())
}

/// The `[[devices]]` entry a workload's `device` field names.
pub fn named_device<'a>(
    devices: &'a BTreeMap<String, DeviceRef>,
    name: &str,
) -> Result<&'a DeviceRef, ParamError> {
    devices.get(name).ok_or_else(|| {
        ParamError::new("device", format!("no device named {name:?} in [[devices]]"))
    })
}

/// `field` (= `v` bytes) must be a positive multiple of `dev`'s logical
/// block size: O_DIRECT refuses anything else.
pub fn lba_multiple(field: &str, v: u32, dev: &DeviceRef) -> Result<(), ParamError> {
    let lbs = dev.logical_block_size.max(1);
    if v == 0 || !v.is_multiple_of(lbs) {
        return Err(ParamError::new(
            field,
            format!("{v} is not a positive multiple of the device's logical block size {lbs}"),
        ));
    }
    Ok(())
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
    /// A log line for the host (the agent's sink sends it; others drop it).
    fn log(&self, _line: &str) {}
    /// Raw bytes on the channel, for the fault workload's floods only.
    fn write_raw(
        &self,
        _write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this sink has no raw channel",
        ))
    }
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

/// `TESTBED_MOUNT_<NAME>`: where the agent mounted a device's file system
/// (it sets it, workloads read it); the device name upper-cased, '-' and
/// '.' as '_'.
pub fn mount_env(device: &str) -> String {
    let name: String = device
        .chars()
        .map(|c| match c {
            '-' | '.' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect();
    format!("TESTBED_MOUNT_{name}")
}
