//! testbed: boots VMs with a chosen kernel and storage device, runs the
//! experiments a TOML spec describes, keeps every raw sample with its
//! provenance.
//!
//! The modules stand in layers, lowest first, one folder per layer
//! (`src/host/units.rs` is module `units` of layer `host`). A module uses
//! modules of its own layer and of lower ones, never of a higher one, so
//! each layer can be read (and tested) knowing only what is below it; every
//! helper lives in the lowest layer that needs it. `tests/layers.rs` reads
//! this list, checks that each module sits in its layer's folder, and checks
//! every `crate::` path in `src`; README.md's layout repeats it.
//!
//! The layer folders are private and their modules are re-exported here, so
//! a module's path names the module alone (`crate::units`,
//! `testbed::spec`): moving a module to another layer moves its file, not
//! every path that uses it.
//!
//! - host: units, paths, fsutil, lock, interrupt, wait, random, phases, failures, progress, hosttools, procfs, cgroup, kernel_limits, stdout
//! - machine: qemu, hostinfo, noise, hostcost, calibrate
//! - inputs: kernel, image, guestbin, ebpf, caches
//! - planning: spec, plan
//! - recording: results
//! - execution: executor, devices, run, slurm
//! - drawing: figures, analysis
//! - reporting: show, reproduce, doctor
//!
//! The CLI (`main.rs`) stands above them all.

mod drawing;
mod execution;
mod host;
mod inputs;
mod machine;
mod planning;
mod recording;
mod reporting;

pub use drawing::{analysis, figures};
pub use execution::{devices, executor, run, slurm};
pub use host::{
    cgroup, failures, fsutil, hosttools, interrupt, kernel_limits, lock, paths, phases, procfs,
    progress, random, stdout, units, wait,
};
pub use inputs::{caches, ebpf, guestbin, image, kernel};
pub use machine::{calibrate, hostcost, hostinfo, noise, qemu};
pub use planning::{plan, spec};
pub use recording::results;
pub use reporting::{doctor, reproduce, show};
