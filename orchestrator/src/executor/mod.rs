//! Executors run points somewhere: `qemu` boots a VM, `host` runs the agent
//! as a plain process. Both speak the same protocol through a `Session`.
//! (`slurm`, one array task per point, plugs in behind the same trait.)

pub mod host;
pub mod qemu;
pub mod session;

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use testbed_agent::protocol::Hello;
use testbed_agent::workload::Summary;

use crate::plan::Point;
use crate::progress::Event;
use crate::results::spill::SpillFile;

/// Set by the Ctrl-C handler; every wait loop checks it.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

#[derive(Debug)]
pub enum PointOutcome {
    Done {
        summary: Summary,
        /// The raw samples, on disk until the point is stored.
        samples: SpillFile,
        wall_s: f64,
    },
    Failed {
        error: String,
    },
}

/// What one boot (or agent process) did, for the manifest.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct BootRecord {
    pub index: u32,
    pub hello: Option<Hello>,
    /// Host-measured time from spawn to the agent's hello.
    pub ready_ms: Option<u64>,
    pub points: Vec<String>,
    /// How it ended: "shutdown", or the failure.
    pub ended: String,
    pub argv: Vec<String>,
    /// The server VM's argv in a pair topology (its link settings included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_argv: Option<Vec<String>>,
    /// Each QEMU thread (vCPUs by index) with the host CPUs it was pinned
    /// to, or why not. Absent for boots of no VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinning: Option<crate::qemu::pin::Pinning>,
}

/// Called with each finished point; an error stops the boot (e.g. a write failure).
pub type OnPoint<'a> = dyn FnMut(&Point, PointOutcome) -> Result<(), String> + 'a;

pub trait Executor {
    /// Runs points in order until all are done or the boot dies. Returns the
    /// record and how many points got an outcome.
    fn run_boot(
        &mut self,
        index: u32,
        points: &[Point],
        on_point: &mut OnPoint<'_>,
        events: &mut dyn FnMut(Event),
    ) -> Result<(BootRecord, usize), BootError>;
}

/// A boot that never reached its agent: no point can run.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("{0}")]
    Failed(String),
    #[error("interrupted")]
    Interrupted,
}
