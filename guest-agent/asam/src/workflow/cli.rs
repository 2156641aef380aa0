//! `testbed-asam workflow`'s arguments and the lines it prints.

use std::path::PathBuf;
use std::time::Duration;

use testbed_lines::asam_workflow::WorkflowLine;

use super::plan::{Baseline, Caller, Placement};
use super::{Options, run};
use crate::{AsamError, Result};

#[derive(Debug, clap::Args)]
pub struct WorkflowArgs {
    /// The data set's prepared.json (what `testbed-asam prepare` made).
    #[arg(long)]
    pub prepared: PathBuf,
    /// disk | ramdisk | pipes | arrowsam
    #[arg(long)]
    pub placement: String,
    /// samtools | picard | sambamba (disk and ramdisk; pipes is samtools).
    #[arg(long, default_value = "samtools")]
    pub baseline: String,
    #[arg(long, value_delimiter = ',', default_value = "bcftools")]
    pub callers: Vec<String>,
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Parent of the disk placement's files.
    #[arg(long)]
    pub disk_dir: PathBuf,
    /// Parent of tmpfs files.
    #[arg(long, default_value = "/dev/shm")]
    pub ram_dir: PathBuf,
    /// CPU samples per second (0: none).
    #[arg(long, default_value_t = 10.0)]
    pub cpu_hz: f64,
    #[arg(long, default_value_t = 3600)]
    pub timeout_seconds: u64,
    /// BQSR before calling (arrowsam only).
    #[arg(long)]
    pub bqsr: bool,
    /// Hardware counters per stage where there is a PMU.
    #[arg(long)]
    pub counters: bool,
    /// Check ArrowSAM's order and duplicates against samtools and Picard,
    /// and samblaster's or bamsormadup's duplicate sets against Picard's.
    #[arg(long)]
    pub check: bool,
    /// JSON lines (the only output format).
    #[arg(long)]
    pub json: bool,
}

pub fn run_args(a: &WorkflowArgs) -> Result<Vec<WorkflowLine>> {
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
