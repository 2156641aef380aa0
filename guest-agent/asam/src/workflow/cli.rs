//! `testbed-asam workflow`: its request (flags or JSON) run, and the lines
//! it prints.

use std::time::Duration;

use testbed_vocab::asam_workflow::WorkflowLine;

use super::plan::{Baseline, Caller, Placement};
use super::{Options, run};
use crate::{AsamError, Result};

/// `workflow`'s flags, or the agent's JSON request: one type.
pub use testbed_vocab::request::asam::WorkflowRequest;

pub fn run_args(a: &WorkflowRequest) -> Result<Vec<WorkflowLine>> {
    let data = super::inputs::Inputs::read(&a.prepared, a.threads)?;
    let cpu_interval = if a.cpu_hz > 0.0 {
        Some(Duration::from_secs_f64(1.0 / a.cpu_hz))
    } else {
        None
    };
    let self_exe = std::env::current_exe().map_err(|e| AsamError::io("/proc/self/exe", e))?;
    let o = Options {
        placement: Placement::parse(&a.placement)?,
        baseline: Baseline::parse(&a.baseline)?,
        align: data.align,
        reference: data.reference,
        known_sites: data.known_sites,
        truth: data.truth,
        targets: data.targets,
        disk_dir: a.disk_dir.clone(),
        ram_dir: a.ram_dir.clone(),
        threads: a.threads.max(1),
        callers: a
            .callers
            .iter()
            .map(|c| c.parse::<Caller>())
            .collect::<Result<_>>()?,
        bqsr: a.bqsr,
        cpu_interval,
        counters: a.counters,
        self_exe,
        timeout: Duration::from_secs(a.timeout_seconds),
        check: a.check,
    };
    run(&o)
}
