//! `testbed status RUN`: each array task as Slurm sees it and as its run
//! directory says.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use super::SlurmError;
use super::array::ArrayDir;
use super::queue::{self, TaskState};
use crate::recording::results::manifest;

/// The status table of a Slurm run directory.
pub fn render(run_dir: &Path) -> Result<String, SlurmError> {
    let dir = ArrayDir::new(run_dir);
    let state = dir.read()?;
    // What Slurm knows, per job; a job it has forgotten gives nothing.
    let mut slurm: BTreeMap<String, BTreeMap<u32, TaskState>> = BTreeMap::new();
    let mut unreachable = None;
    for s in &state.submissions {
        if slurm.contains_key(&s.job_id) {
            continue;
        }
        match queue::array_tasks(&s.job_id) {
            Ok(t) => {
                slurm.insert(s.job_id.clone(), t);
            }
            Err(e) => unreachable = Some(e.to_string()),
        }
    }
    let mut out = String::new();
    let jobs: Vec<&str> = state
        .submissions
        .iter()
        .map(|s| s.job_id.as_str())
        .collect();
    let _ = writeln!(
        out,
        "{}: Slurm array of {} task(s), {} point(s), tasks run with the {:?} executor; job(s) {}",
        run_dir.display(),
        state.tasks.len(),
        state.planned.len(),
        state.task_executor,
        if jobs.is_empty() {
            "none".into()
        } else {
            jobs.join(", ")
        }
    );
    if let Some(e) = unreachable {
        let _ = writeln!(out, "Slurm could not be asked: {e}");
    }
    let _ = writeln!(
        out,
        "{:>5}  {:>6}  {:<10}  {:<18}  {:<12}  run directory",
        "task", "points", "job", "slurm", "node"
    );
    let mut done = 0;
    for (task, ids) in state.tasks.iter().enumerate() {
        let task = task as u32;
        let sub = state.job_of(task);
        let st = sub.and_then(|s| slurm.get(&s.job_id)?.get(&(task - s.offset)));
        let tm = manifest::read(&dir.task_dir(task).join("manifest.json")).ok();
        let run = match &tm {
            Some(m) => {
                let ok = m.points.iter().filter(|p| p.ok).count();
                if m.status == manifest::RunStatus::Complete {
                    done += 1;
                }
                format!("{:?}, {ok}/{} points ok", m.status, ids.len()).to_lowercase()
            }
            None => "not started".into(),
        };
        let slurm_text = match st {
            Some(s) => match &s.reason {
                Some(r) if s.state == "PENDING" => format!("{} ({r})", s.state),
                _ => s.state.clone(),
            },
            None => "-".into(),
        };
        let node = st
            .and_then(|s| s.node.clone())
            .or_else(|| {
                tm.as_ref()
                    .and_then(|m| m.inputs.files.get(super::TASK_INPUT))
                    .and_then(|i| i.get("node")?.as_str().map(str::to_string))
            })
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{task:>5}  {:>6}  {:<10}  {slurm_text:<18}  {node:<12}  {run}",
            ids.len(),
            sub.map(|s| format!("{}_{}", s.job_id, task - s.offset))
                .unwrap_or_else(|| "-".into()),
        );
    }
    let collected = manifest::read(&dir.root.join("manifest.json"))
        .map(|m| m.status != manifest::RunStatus::Running)
        .unwrap_or(false);
    let _ = writeln!(
        out,
        "{done} of {} task(s) complete{}",
        state.tasks.len(),
        if collected {
            "; collected"
        } else if done == state.tasks.len() {
            "; collect with `testbed collect RUN`"
        } else {
            ""
        }
    );
    Ok(out)
}
