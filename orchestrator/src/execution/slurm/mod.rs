//! The Slurm executor: a run's plan as a job array. The submitting host
//! builds every input once into the shared cache (`submit`); each array
//! task runs its share of the points with the same `testbed` binary into
//! its own run directory (`task`); `collect` merges the tasks into the
//! run directory a direct run would have left; `status` shows the array
//! as Slurm and the task directories see it.
//!
//! Layout of a Slurm run directory (on a path every node shares):
//!
//! ```text
//! RUN/spec.toml, manifest.json         as for any run (after collect: its tables)
//! RUN/slurm/array.json                 tasks, their points, every submission
//! RUN/slurm/array.sh                   the batch script (sbatch options in #SBATCH lines)
//! RUN/slurm/logs/JOB_TASK.out          each task's output
//! RUN/slurm/tasks/tNNNN/               each task's own run directory
//! ```

pub mod array;
pub mod collect;
pub mod local;
pub mod queue;
pub mod status;
pub mod submit;
pub mod task;

use std::path::PathBuf;

/// The key of a task's manifest `inputs.files` entry that says which job,
/// task and node ran it.
pub const TASK_INPUT: &str = "slurm_task";

/// The key of a collected run's `inputs.files` entry listing its jobs and
/// tasks (with nodes and per-task manifests).
pub const ARRAY_INPUT: &str = "slurm";

/// Added to `SLURM_ARRAY_TASK_ID` to give the task (set with `sbatch
/// --export` for the arrays after the first, as array indices stay below
/// the cluster's MaxArraySize).
pub const TASK_OFFSET_ENV: &str = "TESTBED_TASK_OFFSET";

/// A failure of the Slurm executor's set-up, as a run reports it.
fn setup(e: impl std::fmt::Display) -> crate::execution::run::RunError {
    crate::execution::run::RunError::Setup(e.to_string())
}

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("local Slurm: {step}: {detail}")]
    Local { step: String, detail: String },
    #[error("`{command}` failed: {detail}")]
    Command { command: String, detail: String },
    #[error("{}: {detail}", path.display())]
    File { path: PathBuf, detail: String },
    #[error("{0}")]
    Refused(String),
}
