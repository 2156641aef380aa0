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
//! A module's path names its layer (`crate::host::units`,
//! `testbed::planning::spec`): every use site says where what it uses
//! stands, and an import from a higher layer reads as one.
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

pub mod drawing;
pub mod execution;
pub mod host;
pub mod inputs;
pub mod machine;
pub mod planning;
pub mod recording;
pub mod reporting;
