//! `testbed run` with the Slurm executor: build the inputs once, write the
//! array's files, submit it (or, with --resume, only its unfinished
//! tasks), and with --wait follow it to the end and collect it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::array::{self, ArrayDir, ArrayState, Submission};
use super::setup;
use super::{SlurmError, queue};
use crate::execution::run::{RunError, RunOptions, RunResult};
use crate::host::progress::{Event, Progress};
use crate::planning::plan::{Plan, Point};
use crate::planning::spec::{ExecutorKind, LoadedSpec};
use crate::recording::results::manifest::{self, RunStatus};

pub fn run(
    loaded: &LoadedSpec,
    plan: &Plan,
    spec_path: &Path,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<RunResult, RunError> {
    let spec = &loaded.spec;
    let task_executor = spec.slurm.task_executor;
    if task_executor == ExecutorKind::Slurm {
        return Err(RunError::Spec(loaded.error_at(
            "slurm",
            Some("task_executor"),
            "a task runs its points itself: use \"qemu\" or \"host\"",
        )));
    }
    let mut needs = vec!["slurm"];
    needs.extend(
        crate::execution::run::needs(spec, plan)
            .into_iter()
            .filter(|n| *n != "vm"),
    );
    if task_executor == ExecutorKind::Qemu {
        needs.push("vm");
    }
    crate::host::hosttools::preflight(&needs).map_err(setup)?;
    let crate::execution::run::start::Started {
        rd,
        mut m,
        lock: _lock,
        earlier,
        ..
    } = crate::execution::run::start::begin(loaded, spec_path, opts)?;
    let dir = ArrayDir::new(&rd.root);
    let resumed = opts.resume && dir.state_file().is_file();
    let mut state = if resumed {
        dir.read().map_err(setup)?
    } else {
        let ids: Vec<String> = plan.points.iter().map(Point::id).collect();
        ArrayState {
            experiment: spec.experiment.name.clone(),
            run_id: m.run_id.clone(),
            spec_sha256: m.spec_sha256.clone(),
            task_executor,
            accel: opts.accel,
            fail_fast: opts.fail_fast,
            testbed: std::env::current_exe().map_err(|e| setup(format!("this binary: {e}")))?,
            tasks: array::chunk_points(&ids, spec.slurm.chunk),
            planned: ids,
            submissions: Vec::new(),
            env: Default::default(),
        }
    };
    if let Some(e) = &earlier {
        m.inputs = e.inputs.clone();
        m.started_at = e.started_at.clone();
    }
    // Built here, once, into the shared cache; the tasks only look them up.
    progress.event(Event::Stage("building the inputs every task uses".into()));
    state.env = crate::execution::run::build_shared(loaded, plan, task_executor, &mut m, progress)?;
    let to_submit = if resumed {
        unfinished_tasks(&dir, &state, progress)?
    } else {
        (0..state.tasks.len() as u32).collect()
    };
    for sub in [dir.slurm(), dir.logs(), dir.slurm().join("tasks")] {
        crate::host::fsutil::create_dir(&sub)
            .map_err(|e| setup(format!("{}: {e}", sub.display())))?;
    }
    if to_submit.is_empty() {
        progress.event(Event::Stage(
            "every task is finished or still queued: nothing to submit".into(),
        ));
    } else {
        let res = array::resources(
            &spec.slurm,
            task_executor,
            spec.vm.vcpus,
            spec.vm.memory.mib(),
        );
        let script = array::batch_script(&dir, &state, &spec.slurm, &res);
        crate::host::fsutil::write_atomic(&dir.script(), script.as_bytes())
            .map_err(|e| setup(format!("{}: {e}", dir.script().display())))?;
        let max_array = queue::max_array_size().map_err(setup)?;
        for (offset, tasks) in array::windows(&to_submit, max_array) {
            let sub = sbatch(&dir, &tasks, offset, spec.slurm.max_parallel).map_err(setup)?;
            progress.event(Event::Stage(format!(
                "submitted job {}: {} task(s) of at most {} point(s) each{}",
                sub.job_id,
                sub.tasks.len(),
                spec.slurm.chunk,
                if offset > 0 {
                    format!(" (tasks from {offset}: the cluster's MaxArraySize is {max_array})")
                } else {
                    String::new()
                }
            )));
            state.submissions.push(sub);
            // Recorded as soon as it is submitted: a failure of the next
            // sbatch must not lose this job's id.
            dir.write(&state).map_err(setup)?;
        }
    }
    dir.write(&state).map_err(setup)?;
    m.status = RunStatus::Running;
    manifest::write(&rd.manifest(), &m)?;
    drop(_lock);
    if !opts.wait {
        eprintln!(
            "[testbed] follow it with `testbed status {0}`; when it is done, `testbed collect {0}`",
            rd.root.display()
        );
        return Ok(RunResult {
            dir: rd.root,
            manifest: m,
        });
    }
    wait_for_array(&dir, &state, progress)?;
    super::collect::collect(&rd.root, progress)
}

/// Tasks that are neither finished whole nor still queued or running.
fn unfinished_tasks(
    dir: &ArrayDir,
    state: &ArrayState,
    progress: &mut dyn Progress,
) -> Result<Vec<u32>, RunError> {
    let live = live_tasks(state).map_err(setup)?;
    let mut out = Vec::new();
    for task in 0..state.tasks.len() as u32 {
        if live.contains(&task) {
            progress.event(Event::Warn(format!(
                "task {task} is still queued or running: not submitted again"
            )));
            continue;
        }
        let status = manifest::read(&dir.task_dir(task).join("manifest.json"))
            .map(|m| m.status)
            .ok();
        if status != Some(RunStatus::Complete) {
            out.push(task);
        }
    }
    Ok(out)
}

/// Tasks Slurm still has queued or running, over every submission.
pub fn live_tasks(state: &ArrayState) -> Result<BTreeSet<u32>, SlurmError> {
    let mut live = BTreeSet::new();
    let jobs: BTreeSet<&str> = state
        .submissions
        .iter()
        .map(|s| s.job_id.as_str())
        .collect();
    for job in jobs {
        let offset = state
            .submissions
            .iter()
            .find(|s| s.job_id == job)
            .map_or(0, |s| s.offset);
        for (index, st) in queue::array_tasks(job)? {
            let task = index + offset;
            // Only the task's latest job counts.
            let latest = state.job_of(task).map(|s| s.job_id.as_str());
            if latest == Some(job) && st.is_live() {
                live.insert(task);
            }
        }
    }
    Ok(live)
}

/// Submits `tasks` (all in one window from `offset`) as one array.
fn sbatch(
    dir: &ArrayDir,
    tasks: &[u32],
    offset: u32,
    max_parallel: Option<u32>,
) -> Result<Submission, SlurmError> {
    let indices: Vec<u32> = tasks.iter().map(|t| t - offset).collect();
    let mut argv = vec![
        "sbatch".to_string(),
        "--parsable".into(),
        format!("--array={}", array::array_spec(&indices, max_parallel)),
    ];
    if offset > 0 {
        argv.push(format!("--export=ALL,{}={offset}", super::TASK_OFFSET_ENV));
    }
    argv.push(dir.script().display().to_string());
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .map_err(|e| SlurmError::Command {
            command: argv.join(" "),
            detail: e.to_string(),
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let job_id = queue::parse_job_id(&stdout).filter(|_| out.status.success());
    let Some(job_id) = job_id else {
        return Err(SlurmError::Command {
            command: argv.join(" "),
            detail: format!(
                "{} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    };
    Ok(Submission {
        job_id,
        tasks: tasks.to_vec(),
        offset,
        at: manifest::utc_now(),
        argv,
    })
}

/// Polls Slurm until no task of the array is queued or running. Ctrl-C
/// stops the waiting, not the jobs.
fn wait_for_array(
    dir: &ArrayDir,
    state: &ArrayState,
    progress: &mut dyn Progress,
) -> Result<(), RunError> {
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let live = live_tasks(state).map_err(setup)?;
        let note = format!(
            "{} of {} task(s) queued or running ({:.0}s)",
            live.len(),
            state.tasks.len(),
            started.elapsed().as_secs_f64()
        );
        if live.len().to_string() != last {
            progress.event(Event::Stage(note));
            last = live.len().to_string();
        }
        if live.is_empty() {
            return Ok(());
        }
        if crate::host::interrupt::interrupted() {
            return Err(RunError::Setup(format!(
                "stopped waiting; the array keeps running in Slurm. Follow it with `testbed status {0}`, then `testbed collect {0}`",
                dir.root.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
