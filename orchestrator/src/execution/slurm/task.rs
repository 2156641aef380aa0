//! `testbed slurm-task RUN` (what each array task runs): this task's
//! share of the plan, into its own run directory, with the inputs the
//! submitting host built.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::array::ArrayDir;
use crate::execution::run::{RunError, RunOptions, RunResult, TaskContext};
use crate::host::progress::Progress;
use crate::planning::plan::Point;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Runs array task `task` (default: `SLURM_ARRAY_TASK_ID`) of the run in
/// `run_dir`.
pub fn run(
    run_dir: &Path,
    task: Option<u32>,
    progress: &mut dyn Progress,
) -> Result<RunResult, RunError> {
    let setup = |e: String| RunError::Setup(e);
    let task = match task {
        Some(t) => t,
        None => {
            let index: u32 = env("SLURM_ARRAY_TASK_ID")
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| {
                    setup("SLURM_ARRAY_TASK_ID is not set: is this a Slurm array task?".into())
                })?;
            let offset: u32 = match env(super::TASK_OFFSET_ENV) {
                Some(o) => o.parse().map_err(|_| {
                    setup(format!("{}={o:?} is not a number", super::TASK_OFFSET_ENV))
                })?,
                None => 0,
            };
            index
                .checked_add(offset)
                .ok_or_else(|| setup("task index overflows".into()))?
        }
    };
    let dir = ArrayDir::new(run_dir);
    let state = dir.read().map_err(|e| setup(e.to_string()))?;
    let ids = state.tasks.get(task as usize).ok_or_else(|| {
        setup(format!(
            "{}: task {task} does not exist ({} tasks)",
            dir.state_file().display(),
            state.tasks.len()
        ))
    })?;
    let spec_path = run_dir.join("spec.toml");
    let mut loaded = crate::planning::spec::load(&spec_path)?;
    if hex::encode(Sha256::digest(loaded.source.as_bytes())) != state.spec_sha256 {
        return Err(setup(format!(
            "{} changed since the array was submitted",
            spec_path.display()
        )));
    }
    let plan = crate::planning::plan::plan(&loaded)?;
    let mut mine = plan.clone();
    mine.points.retain(|p| ids.contains(&p.id()));
    if mine.points.len() != ids.len() {
        let known: Vec<String> = plan.points.iter().map(Point::id).collect();
        let missing: Vec<&String> = ids.iter().filter(|i| !known.contains(i)).collect();
        return Err(setup(format!(
            "task {task}: the plan has no point {missing:?}"
        )));
    }
    crate::planning::spec::set_executor(&mut loaded, state.task_executor)?;
    let out = dir.task_dir(task);
    let started_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let info = serde_json::json!({
        "task": task,
        "started_unix_s": started_unix_s,
        "array_job": env("SLURM_ARRAY_JOB_ID"),
        "job": env("SLURM_JOB_ID"),
        "node": env("SLURMD_NODENAME"),
        "cpus": env("SLURM_CPUS_PER_TASK"),
        "points": ids,
    });
    let opts = RunOptions {
        accel: state.accel,
        resume: out.join("spec.toml").is_file(),
        out: Some(out),
        fail_fast: state.fail_fast,
        task: Some(TaskContext {
            run_id: state.run_id.clone(),
            info,
        }),
        ..RunOptions::default()
    };
    crate::execution::run::run_checked(&loaded, &mine, &spec_path, &opts, progress)
}
