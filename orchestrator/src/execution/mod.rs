//! Layer execution: running a plan: the executors, devices, the run session,
//! Slurm.
//! See the layer table in `src/lib.rs`.

pub mod devices;
pub mod executor;
pub mod run;
pub mod slurm;
