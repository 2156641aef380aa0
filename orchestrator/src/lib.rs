//! testbed: boots VMs with a chosen kernel and storage device, runs the
//! experiments a TOML spec describes, keeps every raw sample with its
//! provenance.
//!
//! The modules stand in layers, lowest first. A module uses modules of its
//! own layer and of lower ones, never of a higher one, so each layer can be
//! read (and tested) knowing only what is below it; every helper lives in
//! the lowest layer that needs it. `tests/layers.rs` reads this list and
//! checks every `crate::` path in `src`; README.md's layout repeats it.
//!
//! - host: units, paths, fsutil, lock, interrupt, wait, random, phases, failures, progress, hosttools
//! - machine: qemu, hostinfo, noise, calibrate
//! - inputs: kernel, image, guestbin, ebpf
//! - spec: spec, plan
//! - results: results
//! - execution: executor, devices, run, slurm
//! - figures: figures, analysis
//! - reports: show, reproduce, doctor
//!
//! The CLI (`main.rs`) stands above them all.

pub mod analysis;
pub mod calibrate;
pub mod devices;
pub mod doctor;
pub mod ebpf;
pub mod executor;
pub mod failures;
pub mod figures;
pub mod fsutil;
pub mod guestbin;
pub mod hostinfo;
pub mod hosttools;
pub mod image;
pub mod interrupt;
pub mod kernel;
pub mod lock;
pub mod noise;
pub mod paths;
pub mod phases;
pub mod plan;
pub mod progress;
pub mod qemu;
pub mod random;
pub mod reproduce;
pub mod results;
pub mod run;
pub mod show;
pub mod slurm;
pub mod spec;
pub mod units;
pub mod wait;
