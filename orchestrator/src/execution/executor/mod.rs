//! Executors run points somewhere: `qemu` boots a VM, `host` runs the agent
//! as a plain process. Both speak the same protocol through a `Session`.
//! (`slurm`, one array task per point, plugs in behind the same trait.)

pub mod host;
pub mod qemu;
pub mod session;

use std::path::PathBuf;

use testbed_agent::workload::Summary;

use crate::host::progress::Event;
use crate::planning::plan::Point;
use crate::recording::results::spill::SpillFile;

// The flag moved to the host layer (crate::host::interrupt); this re-export keeps
// main.rs and run/boots.rs as they are. To be removed once they use it.
pub use crate::host::interrupt::{INTERRUPTED, interrupted};

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

// Defined with the manifest that stores it (results layer).
pub use crate::recording::results::manifest::BootRecord;

/// Called with each finished point; an error stops the boot.
pub type OnPoint<'a> = dyn FnMut(&Point, PointOutcome) -> Result<(), PointRefused> + 'a;

/// Why `on_point` stopped a boot before its last point.
#[derive(Debug, thiserror::Error)]
pub enum PointRefused {
    /// The point could not be stored: going on would leave it out of a run
    /// that looks complete.
    #[error("could not store point {point}: {source}")]
    Store {
        point: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// `--fail-fast`: the run stops at its first failed point.
    #[error("--fail-fast: stopping at the first failed point")]
    FailFast,
}

/// One boot's work: its index in the run, its points in order, and where
/// each point's outcome and the progress events go.
pub struct Boot<'a> {
    pub index: u32,
    pub points: &'a [Point],
    pub on_point: &'a mut OnPoint<'a>,
    pub events: &'a mut dyn FnMut(Event),
}

pub trait Executor {
    /// Runs the boot's points in order until all are done or the boot
    /// dies. Returns the record and how many points got an outcome.
    fn run_boot(&mut self, boot: Boot<'_>) -> Result<(BootRecord, usize), BootError>;
}

/// A boot that never reached its agent, or stopped so that no further
/// point can run. Each says what failed; the run records the message.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// The host executor's agent process could not be started.
    #[error("start agent {}: {source}", path.display())]
    AgentSpawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("agent has no stdio pipes")]
    NoStdio,
    /// The agent process started but never answered its handshake.
    #[error("agent did not start: {0}")]
    AgentNotStarted(String),
    #[error("create a private directory for the agent socket: {0}")]
    SocketDir(std::io::Error),
    /// QEMU itself could not be started.
    #[error("{0}")]
    QemuSpawn(std::io::Error),
    /// QEMU started but its agent socket never came up.
    #[error("{error}\nQEMU said:\n{qemu_said}")]
    QemuNotUp { error: String, qemu_said: String },
    /// The guest booted (or not) without its agent ever answering.
    #[error(
        "the guest never reached the agent: {error}\nlast console lines:\n{console}\nQEMU said:\n{qemu_said}"
    )]
    NoAgent {
        error: String,
        console: String,
        qemu_said: String,
    },
    /// Two-VM runs: the server VM's setup job failed, or the VM did.
    #[error("the server VM's setup job failed: {0}")]
    ServerSetup(String),
    #[error("server VM: {0}")]
    ServerVm(String),
    #[error("the server VM's link socket {} does not exist", .0.display())]
    NoLinkSocket(PathBuf),
    /// A point's samples could not be stored: the run stops, loudly.
    #[error("{0}")]
    Store(String),
    /// The test executor's stand-in VM, told to fail.
    #[error("the stand-in VM did not start")]
    StandIn,
    #[error("interrupted")]
    Interrupted,
}
