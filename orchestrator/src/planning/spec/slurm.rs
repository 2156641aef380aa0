//! `[slurm]`: resources and chunking of the job array; their checks.

use super::*;

/// `[slurm]`: how the plan becomes a job array. Every array task runs
/// `chunk` points with the same `testbed` binary on its node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSection {
    /// Points per array task.
    #[serde(default = "one")]
    pub chunk: u32,
    /// Where each task runs its points: "qemu" (a VM on the node) or "host".
    #[serde(default)]
    pub task_executor: ExecutorKind,
    /// --cpus-per-task (default: the VM's vcpus, or 1 on the host executor).
    #[serde(default)]
    pub cpus: Option<u32>,
    /// --mem per task (default: the VM's memory plus 512 MiB for QEMU and
    /// the testbed, or none on the host executor).
    #[serde(default)]
    pub memory: Option<Size>,
    /// --time per task.
    #[serde(default)]
    pub time: Option<Span>,
    #[serde(default)]
    pub partition: Option<String>,
    /// --constraint, e.g. "nvme&kvm": node features the points need.
    #[serde(default)]
    pub constraint: Option<String>,
    /// At most this many tasks at once (the array's `%N`).
    #[serde(default)]
    pub max_parallel: Option<u32>,
    /// Further sbatch options, as written (e.g. ["--account=lab", "--qos=long"]).
    #[serde(default)]
    pub sbatch_args: Vec<String>,
}

impl Default for SlurmSection {
    fn default() -> Self {
        SlurmSection {
            chunk: 1,
            task_executor: ExecutorKind::Qemu,
            cpus: None,
            memory: None,
            time: None,
            partition: None,
            constraint: None,
            max_parallel: None,
            sbatch_args: Vec::new(),
        }
    }
}

/// `[slurm]` values Slurm would refuse later, after the inputs are built.
pub(super) fn check_slurm(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let s = &loaded.spec.slurm;
    let at = |key: &str, message: String| loaded.error_at("slurm", Some(key), message);
    if s.chunk == 0 {
        return Err(at("chunk", "0 points per task: give at least 1".into()));
    }
    if s.task_executor == ExecutorKind::Slurm {
        return Err(at(
            "task_executor",
            "a task runs its points itself: use \"qemu\" or \"host\"".into(),
        ));
    }
    if s.cpus == Some(0) {
        return Err(at("cpus", "0 CPUs per task: give at least 1".into()));
    }
    if s.max_parallel == Some(0) {
        return Err(at("max_parallel", "0 tasks at once would never run".into()));
    }
    if let Some(t) = s.time
        && t.0 < std::time::Duration::from_secs(60)
    {
        return Err(at(
            "time",
            format!("{:?}: Slurm counts time in minutes; give at least 1m", t.0),
        ));
    }
    for (key, value) in [("partition", &s.partition), ("constraint", &s.constraint)] {
        if let Some(v) = value
            && (v.is_empty() || v.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(at(key, format!("{v:?}: empty or with spaces")));
        }
    }
    for (i, a) in s.sbatch_args.iter().enumerate() {
        if !a.starts_with("--") || a.contains('\n') || a.starts_with("--array") {
            return Err(loaded.error_at_path(
                &[
                    PathSeg::Key("slurm"),
                    PathSeg::Key("sbatch_args"),
                    PathSeg::Index(i),
                ],
                format!("{a:?}: give long sbatch options (--name=value); --array is the testbed's"),
            ));
        }
    }
    Ok(())
}
