//! Executors run points somewhere: `qemu` boots a VM, `host` runs the agent
//! as a plain process. Both speak the same protocol through a `Session`.
//! (`slurm`, one array task per point, plugs in behind the same trait.)

pub mod host;
pub mod qemu;
pub mod session;

use testbed_agent::workload::Summary;

use crate::plan::Point;
use crate::progress::Event;
use crate::results::spill::SpillFile;

// The flag moved to the host layer (crate::interrupt); this re-export keeps
// main.rs and run/boots.rs as they are. To be removed once they use it.
pub use crate::interrupt::{INTERRUPTED, interrupted};

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
pub use crate::results::manifest::BootRecord;

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
