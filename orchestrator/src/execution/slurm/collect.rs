//! `testbed collect RUN`: the tasks' points, samples and records merged
//! into RUN as a direct run would have left them; the tasks' own
//! directories (and manifests) stay under RUN/slurm/tasks/.

use std::collections::BTreeMap;
use std::path::Path;

use super::array::ArrayDir;
use super::setup;
use super::{ARRAY_INPUT, TASK_INPUT};
use crate::execution::run::{RunError, RunResult};
use crate::host::progress::{Event, Progress};
use crate::recording::results::manifest::{self, Manifest, PointRecord, RunStatus};
use crate::recording::results::rundir::RunDir;

/// Copies `from` to `to` through a temporary file: a reader of `to` sees
/// the old file or the whole new one.
fn copy_whole(from: &Path, to: &Path) -> Result<(), RunError> {
    let bytes = std::fs::read(from).map_err(|e| setup(format!("{}: {e}", from.display())))?;
    crate::host::fsutil::write_atomic(to, &bytes)
        .map_err(|e| setup(format!("{}: {e}", to.display())))
}

pub fn collect(run_dir: &Path, progress: &mut dyn Progress) -> Result<RunResult, RunError> {
    let dir = ArrayDir::new(run_dir);
    let state = dir.read().map_err(setup)?;
    let rd = RunDir {
        root: run_dir.to_path_buf(),
    };
    let _lock = rd.lock().map_err(|e| match e {
        crate::host::lock::LockError::Busy { pid, .. } => RunError::InUse {
            dir: rd.root.clone(),
            pid,
        },
        other => setup(other),
    })?;
    let mut m: Manifest = manifest::read(&rd.manifest())?;
    let live = super::submit::live_tasks(&state).unwrap_or_default();
    crate::host::fsutil::create_dir(&rd.points_dir())
        .map_err(|e| setup(format!("{}: {e}", rd.points_dir().display())))?;
    let mut records: BTreeMap<String, PointRecord> = BTreeMap::new();
    let mut tasks = Vec::new();
    let mut first: Option<Manifest> = None;
    let (mut earliest, mut latest): (Option<u64>, Option<u64>) = (None, None);
    m.boots.clear();
    m.boot_to_agent_ms.clear();
    for (task, ids) in state.tasks.iter().enumerate() {
        let task = task as u32;
        let tdir = RunDir {
            root: dir.task_dir(task),
        };
        // As Slurm names the task: JOB_INDEX.
        let job = state
            .job_of(task)
            .map(|s| format!("{}_{}", s.job_id, task - s.offset));
        let tm = manifest::read(&tdir.manifest()).ok();
        let info = tm
            .as_ref()
            .and_then(|t| t.inputs.files.get(TASK_INPUT).cloned())
            .unwrap_or_default();
        let status = match (&tm, live.contains(&task)) {
            (_, true) => "queued or running".to_string(),
            (Some(t), _) => format!("{:?}", t.status).to_lowercase(),
            (None, _) => "not started".to_string(),
        };
        tasks.push(serde_json::json!({
            "task": task,
            "job": job,
            "node": info.get("node").cloned().unwrap_or_default(),
            "status": status,
            "points": ids,
            "manifest": tdir.manifest().strip_prefix(run_dir).unwrap_or(&tdir.manifest()),
            "started_at": tm.as_ref().map(|t| t.started_at.clone()),
            "finished_at": tm.as_ref().and_then(|t| t.finished_at.clone()),
            "wall_s": tm.as_ref().and_then(|t| t.wall_s),
        }));
        let Some(tm) = tm else { continue };
        if let Some(s) = manifest::parse_utc(&tm.started_at) {
            earliest = Some(earliest.map_or(s, |e| e.min(s)));
        }
        if let Some(f) = tm.finished_at.as_deref().and_then(manifest::parse_utc) {
            latest = Some(latest.map_or(f, |l| l.max(f)));
        }
        m.boots.extend(tm.boots.iter().cloned());
        m.boot_to_agent_ms
            .extend(tm.boot_to_agent_ms.iter().copied());
        // Only this task's points, whole: a damaged one is left out and
        // its task runs again on --resume.
        let (found, _) = tdir.scan_records();
        for id in ids {
            let Some(rec) = found.get(id) else { continue };
            if rec.ok {
                if let Err(why) = tdir.check_point(rec) {
                    progress.event(Event::Warn(format!("task {task}: {id}: {why}")));
                    continue;
                }
                copy_whole(&tdir.point_samples(id), &rd.point_samples(id))?;
            } else {
                let _ = std::fs::remove_file(rd.point_samples(id));
            }
            copy_whole(&tdir.point_record(id), &rd.point_record(id))?;
            records.insert(id.clone(), rec.clone());
        }
        if first.is_none() {
            first = Some(tm);
        }
    }
    if let Some(f) = first {
        // What every task shares (the same inputs from the same cache) is
        // the first task's; what differs per task is in its manifest.
        let mut inputs = f.inputs.clone();
        inputs.files.remove(TASK_INPUT);
        for (k, v) in &m.inputs.files {
            inputs.files.entry(k.clone()).or_insert_with(|| v.clone());
        }
        m.inputs = inputs;
        m.accel = f.accel;
        m.timing_note = f.timing_note;
        m.qemu_argv = f.qemu_argv;
        m.host = f.host;
        m.guest = f.guest;
        m.devices = f.devices;
    }
    m.inputs.files.insert(
        ARRAY_INPUT.into(),
        serde_json::json!({
            "submissions": state.submissions,
            "task_executor": state.task_executor,
            "tasks": tasks,
        }),
    );
    let not_done: Vec<String> = state
        .tasks
        .iter()
        .enumerate()
        .filter(|(_, ids)| ids.iter().any(|id| !records.contains_key(id)))
        .map(|(t, _)| t.to_string())
        .collect();
    if !not_done.is_empty() {
        progress.event(Event::Warn(format!(
            "task(s) {} have not stored all their points; `testbed run SPEC --resume --out {}` submits them again",
            not_done.join(", "),
            run_dir.display()
        )));
    }
    let ended_at = match (earliest, latest) {
        (Some(e), Some(l)) => (manifest::format_utc(l), l.saturating_sub(e) as f64),
        _ => (manifest::utc_now(), 0.0),
    };
    if m.status != RunStatus::Running {
        m.status = RunStatus::Running;
    }
    crate::execution::run::finish_collected(&rd, m, records, state.planned.clone(), ended_at)
}
