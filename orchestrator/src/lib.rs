//! testbed: boots VMs with a chosen kernel and storage device, runs the
//! experiments a TOML spec describes, keeps every raw sample with its
//! provenance.

pub mod analysis;
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
pub mod kernel;
pub mod lock;
pub mod noise;
pub mod paths;
pub mod phases;
pub mod plan;
pub mod progress;
pub mod qemu;
pub mod reproduce;
pub mod results;
pub mod run;
pub mod show;
pub mod slurm;
pub mod spec;
pub mod units;
