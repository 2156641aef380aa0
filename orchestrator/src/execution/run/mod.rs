//! `testbed run SPEC`: validate, prepare inputs (kernel, image, devices,
//! accelerator), run every point through an executor, and leave a run
//! directory with raw samples and a manifest.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::execution::executor::Executor;
use crate::host::paths;
use crate::host::progress::Progress;
use crate::planning::plan::Plan;
use crate::planning::spec::{AccelChoice, ExecutorKind, LoadedSpec};
use crate::recording::results::manifest::{self, Manifest};
use crate::recording::results::rundir::RunDir;

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub accel: Option<AccelChoice>,
    /// The run directory itself (default results/<experiment>/<run-id>).
    pub out: Option<PathBuf>,
    pub resume: bool,
    /// With --resume: continue even if the testbed version, the agent or
    /// the kernel differ from the earlier attempt's (the manifest says so).
    pub force: bool,
    pub fail_fast: bool,
    /// Run again the points measured on a busy host (`MAX_NOISY_RERUNS`).
    pub rerun_noisy: bool,
    pub results_root: Option<PathBuf>,
    /// Where the points run, overriding the spec's `experiment.executor`
    /// (`--executor slurm` sends a qemu spec's points to Slurm).
    pub executor: Option<ExecutorKind>,
    /// Print what the run would do (every sysfs write, the QEMU argv) and
    /// do none of it.
    pub dry_run: bool,
    /// For the Slurm executor: wait for the array and collect it.
    pub wait: bool,
    /// Set when this run is one Slurm array task's share of a larger run.
    pub task: Option<TaskContext>,
}

/// What a Slurm array task's run shares with the run it is part of.
#[derive(Debug, Clone, Default)]
pub struct TaskContext {
    /// The whole run's id, written into every sample row (not the task
    /// directory's name), so collected samples equal a direct run's.
    pub run_id: String,
    /// Job, task and node, recorded in the task's manifest.
    pub info: serde_json::Value,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Spec(#[from] crate::planning::spec::SpecError),
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Manifest(#[from] crate::recording::results::manifest::ManifestError),
    #[error("interrupted; finished points are kept in {0} (continue with --resume --out {0})")]
    Interrupted(String),
    /// --resume without --force, and the inputs differ from the earlier
    /// attempt's (one line per input, both values).
    #[error(
        "--resume: this run's inputs differ from its earlier attempt's, so its points would not be comparable:\n  {}\nstart a new run, or resume anyway with --force (recorded in the manifest)",
        differences.join("\n  ")
    )]
    InputsChanged {
        dir: PathBuf,
        differences: Vec<String>,
    },
    /// `--dry-run`: everything was printed, nothing was done.
    #[error("dry run: nothing was written, bound or started")]
    DryRun,
    /// Another process holds the run directory (running or resuming it).
    #[error("run directory {} is in use by {}", dir.display(), crate::host::lock::holder_text(*pid))]
    InUse { dir: PathBuf, pid: Option<u32> },
}

fn setup<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> RunError + '_ {
    move |e| RunError::Setup(format!("{context}: {e}"))
}

#[derive(Debug)]
pub struct RunResult {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

mod boots;
mod dry_run;
mod inputs;
pub(crate) mod start;
mod vm;

pub use boots::{MAX_NOISY_RERUNS, may_rerun_for_noise};
pub(crate) use inputs::build_shared;
pub use vm::probe_boot;

/// Parses, validates and plans a spec without running it.
pub fn check_spec(spec_path: &Path) -> Result<(LoadedSpec, Plan), RunError> {
    let loaded = crate::planning::spec::load(spec_path)?;
    let plan = crate::planning::plan::plan(&loaded)?;
    Ok((loaded, plan))
}

/// [`check_spec`] reporting every error of the spec (`testbed validate`),
/// in file order.
pub fn check_spec_all(
    spec_path: &Path,
) -> Result<(LoadedSpec, Plan), Vec<crate::planning::spec::SpecError>> {
    let loaded = crate::planning::spec::load_all(spec_path)?;
    let plan = crate::planning::plan::plan_all(&loaded)?;
    Ok((loaded, plan))
}

pub fn run(
    spec_path: &Path,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<RunResult, RunError> {
    crate::host::phases::time("runs", || run_timed(spec_path, opts, progress))
}

/// The host tools a spec's run needs, by executor and workload.
pub fn needs(spec: &crate::planning::spec::Spec, plan: &Plan) -> Vec<&'static str> {
    let mut needs = Vec::new();
    let qemu = spec.experiment.executor == ExecutorKind::Qemu;
    if qemu {
        needs.push("vm");
    }
    // A guest image brings the workload's programs itself (they run from
    // the image, not copied from the host): the host needs only what
    // builds the image.
    if qemu && spec.image.name.is_some() {
        needs.push("image");
        // A dynamically linked helper (testbed-odbc) is still built here,
        // against the host's unixODBC.
        let dynamic = plan
            .points
            .iter()
            .any(|p| p.workload.needs().helpers.iter().any(|h| h.dynamic));
        if dynamic {
            needs.push("odbc");
        }
        return needs;
    }
    for p in &plan.points {
        for n in p.workload.needs().host_steps {
            if !needs.contains(&n) {
                needs.push(n);
            }
        }
    }
    needs
}

/// Why a spec cannot run in this invocation, known before anything is
/// created: a kernel it needs failed to build earlier.
pub fn blocked(loaded: &LoadedSpec) -> Option<String> {
    if loaded.spec.experiment.executor != ExecutorKind::Qemu {
        return None;
    }
    let name = &loaded.spec.kernel.name;
    crate::inputs::kernel::failed_earlier(&paths::kernel_configs(), name)
        .map(|r| format!("skipped: kernel `{name}` failed to build earlier in this run:\n{r}"))
}

/// The steps of a run, each in its own module: start the run directory
/// and manifest, prepare the inputs and the executor, run the boots, write
/// the tables.
fn run_timed(
    spec_path: &Path,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<RunResult, RunError> {
    let (mut loaded, mut plan) = check_spec(spec_path)?;
    if let Some(e) = opts.executor {
        if e == ExecutorKind::Slurm {
            // --executor slurm keeps the spec's executor for the tasks,
            // which check the spec for it when they start.
            if loaded.spec.experiment.executor != ExecutorKind::Slurm {
                loaded.spec.slurm.task_executor = loaded.spec.experiment.executor;
            }
            loaded.spec.experiment.executor = e;
        } else {
            crate::planning::spec::set_executor(&mut loaded, e)?;
            plan = crate::planning::plan::plan(&loaded)?;
        }
    }
    if opts.dry_run {
        return Err(dry_run::run(&loaded, spec_path, opts));
    }
    if loaded.spec.experiment.executor == ExecutorKind::Slurm {
        return crate::execution::slurm::submit::run(&loaded, &plan, spec_path, opts, progress);
    }
    run_checked(&loaded, &plan, spec_path, opts, progress)
}

/// The run of a checked spec's `plan` (all of it, or a Slurm task's share)
/// on the host or in VMs.
pub(crate) fn run_checked(
    loaded: &LoadedSpec,
    plan: &Plan,
    spec_path: &Path,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<RunResult, RunError> {
    let started = Instant::now();
    let spec = &loaded.spec;
    // Missing tools are named now, before a run directory or a build.
    crate::host::hosttools::preflight(&needs(spec, plan))
        .map_err(|e| RunError::Setup(e.to_string()))?;
    // The kernel too (fetched, built or found in the cache): a build that
    // fails leaves no run directory behind; and what the devices and the workload need from it, so a refusal
    // creates no backing file either.
    let kernel = match spec.experiment.executor {
        ExecutorKind::Qemu => {
            let k = vm::resolve_kernel(loaded, &paths::cache_root())?;
            vm::check_kernel_fits(loaded, &k)?;
            Some(k)
        }
        _ => None,
    };
    let prepare = |rd: &RunDir, m: &mut Manifest, progress: &mut dyn Progress| {
        inputs::prepare(loaded, plan, kernel, rd, m, opts, progress)
    };
    run_in_dir(loaded, plan, spec_path, opts, progress, started, prepare)
}

/// The tables and final manifest of a run whose points were stored by
/// others (the Slurm array's tasks): `records` are in `rd`'s points/.
pub(crate) fn finish_collected(
    rd: &RunDir,
    m: Manifest,
    records: std::collections::BTreeMap<String, manifest::PointRecord>,
    planned: Vec<String>,
    ended_at: (String, f64),
) -> Result<RunResult, RunError> {
    let ended = boots::Ended::collected(records, planned, ended_at);
    boots::finish(rd, m, ended, Instant::now())
}

/// A checked spec's run: its directory started (or resumed) and held,
/// the inputs and executor from `prepare`, the boots, the tables.
fn run_in_dir(
    loaded: &LoadedSpec,
    plan: &Plan,
    spec_path: &Path,
    opts: &RunOptions,
    progress: &mut dyn Progress,
    started: Instant,
    prepare: impl FnOnce(
        &RunDir,
        &mut Manifest,
        &mut dyn Progress,
    ) -> Result<Box<dyn Executor>, RunError>,
) -> Result<RunResult, RunError> {
    let start::Started {
        rd,
        mut m,
        lock: _lock,
        earlier,
        rerun,
    } = start::begin(loaded, spec_path, opts)?;
    start::announce_reruns(&rerun, progress);
    let mut executor = prepare(&rd, &mut m, progress)?;
    // What each boot reads from the cache (kernel, initramfs, root image)
    // stays there until the run ends: `testbed cache prune` skips it.
    let _in_use = crate::inputs::caches::hold_for_run(&paths::cache_root(), &m.inputs.paths())
        .map_err(|e| RunError::Setup(format!("hold the run's cache entries: {e}")))?;
    // The inputs are known only now; the earlier manifest stays as it was
    // unless they pass.
    if let Some(earlier) = &earlier {
        start::check_resume_inputs(earlier, &rd, &mut m, opts.force, progress)?;
    }
    manifest::write(&rd.manifest(), &m)?;
    let ended = boots::run_boots(
        executor.as_mut(),
        plan,
        &rd,
        &mut m,
        &loaded.spec,
        opts,
        progress,
    );
    boots::finish(&rd, m, ended, started)
}

#[cfg(test)]
mod tests {
    //! The run's steps with a stand-in executor (no agent, no VM) and real
    //! files: storing, finishing, resuming and holding the run directory.

    use std::cell::RefCell;
    use std::rc::Rc;

    use testbed_agent::protocol::SampleChunk;

    use super::*;
    use crate::execution::executor::{Boot, BootError, BootRecord, PointOutcome};
    use crate::host::progress::{Collect, Event};
    use crate::planning::plan::Point;
    use crate::recording::results::spill::SpillFile;

    /// What the stand-in does with a point: its outcome (None: the point
    /// is left without one, as a broken executor might).
    type Script = Box<dyn FnMut(u32, &Point, &Path) -> Option<PointOutcome>>;

    /// An executor that runs the points of a boot in order as `script`
    /// says, as the real session does: a refused outcome stops the boot.
    /// It writes each boot's console log (named as the QEMU executor names
    /// them) and notes the boot indices it was given.
    struct Standin {
        dir: PathBuf,
        script: Script,
        boots: Rc<RefCell<Vec<u32>>>,
        limits: Limits,
    }

    /// Where the stand-in stops short.
    #[derive(Clone, Copy, Default)]
    struct Limits {
        /// From this boot on it fails as a VM that never starts.
        fail_from_boot: Option<u32>,
        /// A boot ends (as if it died) after this many points.
        points_per_boot: Option<usize>,
    }

    fn boot_record(index: u32) -> BootRecord {
        serde_json::from_value(serde_json::json!({
            "index": index, "hello": null, "ready_ms": null, "points": [],
            "ended": "shutdown", "argv": ["standin"],
        }))
        .unwrap()
    }

    impl Executor for Standin {
        fn run_boot(&mut self, boot: Boot<'_>) -> Result<(BootRecord, usize), BootError> {
            let index = boot.index;
            self.boots.borrow_mut().push(index);
            let label = if index == 0 {
                String::new()
            } else {
                format!(".boot{index}")
            };
            std::fs::write(
                self.dir.join(format!("console{label}.log")),
                format!("boot {index}\n"),
            )
            .unwrap();
            if self.limits.fail_from_boot.is_some_and(|b| index >= b) {
                return Err(BootError::StandIn);
            }
            (boot.events)(Event::BootStarted {
                index,
                accel: "standin".into(),
            });
            let mut record = boot_record(index);
            let spill = self.dir.join("spill");
            std::fs::create_dir_all(&spill).unwrap();
            let n = self.limits.points_per_boot.unwrap_or(boot.points.len());
            for p in boot.points.iter().take(n) {
                (boot.events)(Event::PointStarted {
                    id: p.id(),
                    label: p.label(),
                });
                record.points.push(p.id());
                let Some(outcome) = (self.script)(index, p, &spill) else {
                    continue;
                };
                if let Err(e) = (boot.on_point)(p, outcome) {
                    record.ended = format!("stopped: {e}");
                    let handled = record.points.len();
                    return Ok((record, handled));
                }
            }
            let handled = record.points.len();
            Ok((record, handled))
        }
    }

    /// A finished point with `n` samples.
    fn done(spill: &Path, n: usize) -> PointOutcome {
        let chunk: SampleChunk = serde_json::from_value(serde_json::json!({
            "job_id": 1, "metric": "lat", "unit": "ns", "thread": 0, "first_seq": 0,
            "values": (0..n).map(|i| i as f64).collect::<Vec<_>>(),
        }))
        .unwrap();
        PointOutcome::Done {
            summary: Default::default(),
            samples: SpillFile::from_chunks(spill, &[chunk]).unwrap(),
            wall_s: 0.1,
        }
    }

    /// Every point finishes, point r<k> with k + 2 samples.
    fn all_done() -> Script {
        Box::new(|_, p, spill| Some(done(spill, p.rep as usize + 2)))
    }

    struct Case {
        _t: tempfile::TempDir,
        spec: PathBuf,
        out: PathBuf,
        boots: Rc<RefCell<Vec<u32>>>,
    }

    /// A host-executor spec with three repetitions of one point.
    fn case() -> Case {
        let t = tempfile::tempdir().unwrap();
        let spec = t.path().join("s.toml");
        std::fs::write(
            &spec,
            "[experiment]\nname = \"t\"\nexecutor = \"host\"\nrepetitions = 3\n\n[workload]\nkind = \"fault\"\nmode = \"error\"\n",
        )
        .unwrap();
        let out = t.path().join("run");
        Case {
            _t: t,
            spec,
            out,
            boots: Rc::default(),
        }
    }

    /// The agent and kernel a stand-in run records as its inputs.
    #[derive(Clone)]
    struct Inputs {
        agent: &'static str,
        kernel: &'static str,
    }

    const INPUTS: Inputs = Inputs {
        agent: "aaaa",
        kernel: "k1",
    };

    impl Case {
        fn run(
            &self,
            resume: bool,
            force: bool,
            inputs: Inputs,
            script: Script,
            limits: Limits,
            progress: &mut Collect,
        ) -> Result<RunResult, RunError> {
            let opts = RunOptions {
                out: Some(self.out.clone()),
                resume,
                force,
                ..RunOptions::default()
            };
            self.run_with(&opts, inputs, script, limits, progress)
        }

        fn run_with(
            &self,
            opts: &RunOptions,
            inputs: Inputs,
            script: Script,
            limits: Limits,
            progress: &mut Collect,
        ) -> Result<RunResult, RunError> {
            let (loaded, plan) = check_spec(&self.spec).unwrap();
            let dir = self.out.clone();
            let boots = self.boots.clone();
            let prepare = move |_: &RunDir, m: &mut Manifest, _: &mut dyn Progress| {
                m.inputs.files.insert(
                    "agent".into(),
                    serde_json::json!({"path": "/agent", "sha256": inputs.agent}),
                );
                m.inputs.kernel = Some(manifest::KernelInput {
                    name: "vm-base".into(),
                    key: inputs.kernel.into(),
                    release: "6.1.0".into(),
                    ..Default::default()
                });
                Ok(Box::new(Standin {
                    dir,
                    script,
                    boots,
                    limits,
                }) as Box<dyn Executor>)
            };
            run_in_dir(
                &loaded,
                &plan,
                &self.spec,
                opts,
                progress,
                Instant::now(),
                prepare,
            )
        }

        fn fresh(&self, script: Script) -> Result<RunResult, RunError> {
            self.run(
                false,
                false,
                INPUTS,
                script,
                Limits::default(),
                &mut Collect(Vec::new()),
            )
        }

        fn resume(&self, progress: &mut Collect) -> Result<RunResult, RunError> {
            self.run(true, false, INPUTS, all_done(), Limits::default(), progress)
        }

        fn manifest(&self) -> Manifest {
            manifest::read(&self.out.join("manifest.json")).unwrap()
        }

        fn ids(&self) -> Vec<String> {
            self.manifest()
                .points
                .iter()
                .map(|p| p.id.clone())
                .collect()
        }
    }

    const IDS: [&str; 3] = ["p0000-r00", "p0000-r01", "p0000-r02"];

    #[test]
    fn repetitions_spread_over_boots_get_a_boot_each() {
        let c = case();
        // The qemu executor (the stand-in runs it): 3 repetitions, 3 boots.
        std::fs::write(
            &c.spec,
            "[experiment]\nname = \"t\"\nrepetitions = 3\nboots = 3\n\n[workload]\nkind = \"fault\"\nmode = \"error\"\n",
        )
        .unwrap();
        let r = c.fresh(all_done()).unwrap();
        assert_eq!(r.manifest.status, manifest::RunStatus::Complete);
        assert_eq!(*c.boots.borrow(), [0, 1, 2]);
        let by_boot: Vec<(u32, u32)> = r.manifest.points.iter().map(|p| (p.rep, p.boot)).collect();
        assert_eq!(by_boot, [(0, 0), (1, 1), (2, 2)]);
        // One boot (the default) runs them all.
        let one = case();
        one.fresh(all_done()).unwrap();
        assert_eq!(*one.boots.borrow(), [0]);
    }

    #[test]
    fn a_point_that_cannot_be_stored_fails_the_run_loudly() {
        let c = case();
        // Something in the way of the second point's samples file, as the
        // first point runs.
        let blocked = c.out.join("points/p0000-r01.parquet");
        let in_the_way = blocked.clone();
        let e = c
            .fresh(Box::new(move |_, p, spill| {
                std::fs::create_dir_all(in_the_way.join("x")).unwrap();
                Some(done(spill, p.rep as usize + 2))
            }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("could not store point p0000-r01"), "{e}");
        assert!(
            e.contains(&blocked.display().to_string()),
            "names the file: {e}"
        );
        assert!(e.contains("os error"), "says what the system said: {e}");
        assert!(!e.contains("fail-fast"), "{e}");
        let m = c.manifest();
        assert_eq!(m.status, manifest::RunStatus::Failed);
        assert_eq!(c.ids(), ["p0000-r00"], "nothing after the lost point ran");
        // Once the way is clear, --resume stores it and completes.
        std::fs::remove_dir_all(&blocked).unwrap();
        let r = c.resume(&mut Collect(Vec::new())).unwrap();
        assert_eq!(r.manifest.status, manifest::RunStatus::Complete);
        assert_eq!(c.ids(), IDS);
    }

    #[test]
    fn a_run_missing_a_point_or_its_samples_is_never_complete() {
        // The executor handles every point but never hands over the second.
        let c = case();
        let e = c
            .fresh(Box::new(|_, p, spill| (p.rep != 1).then(|| done(spill, 2))))
            .unwrap_err()
            .to_string();
        assert!(e.contains("p0000-r01: no record"), "{e}");
        assert_eq!(c.manifest().status, manifest::RunStatus::Failed);

        // A samples file damaged after it was stored.
        let c = case();
        let out = c.out.clone();
        let e = c
            .fresh(Box::new(move |_, p, spill| {
                if p.rep == 2 {
                    std::fs::write(out.join("points/p0000-r01.parquet"), b"PAR1 torn").unwrap();
                }
                Some(done(spill, 2))
            }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("p0000-r01: "), "{e}");
        assert!(e.contains("not a readable parquet file"), "{e}");
        let m = c.manifest();
        assert_eq!(m.status, manifest::RunStatus::Failed);
        let r01 = m.points.iter().find(|p| p.id == "p0000-r01").unwrap();
        assert!(!r01.ok, "listed as not done, so neither drawn nor reused");
        // The merged table holds the two whole points.
        let (_, batches) =
            crate::recording::results::samples::read_parquet(&c.out.join("samples.parquet"))
                .unwrap();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 4);
    }

    #[test]
    fn resume_runs_damaged_points_again_and_says_so_first() {
        let c = case();
        c.fresh(all_done()).unwrap();
        let points = c.out.join("points");
        std::fs::remove_file(points.join("p0000-r00.parquet")).unwrap();
        std::fs::write(points.join("p0000-r01.parquet"), b"PAR1 garbage").unwrap();
        // A whole parquet file, but another point's: 2 rows, not 4.
        let other = case();
        other.fresh(all_done()).unwrap();
        std::fs::copy(
            other.out.join("points/p0000-r00.parquet"),
            points.join("p0000-r02.parquet"),
        )
        .unwrap();
        let mut progress = Collect(Vec::new());
        let r = c.resume(&mut progress).unwrap();
        assert_eq!(r.manifest.status, manifest::RunStatus::Complete);
        let warned: Vec<&String> = progress
            .0
            .iter()
            .filter_map(|e| match e {
                Event::Warn(w) => Some(w),
                _ => None,
            })
            .collect();
        let first_boot = progress
            .0
            .iter()
            .position(|e| matches!(e, Event::BootStarted { .. }))
            .unwrap();
        let last_warn = progress
            .0
            .iter()
            .rposition(|e| matches!(e, Event::Warn(_)))
            .unwrap();
        assert!(
            last_warn < first_boot,
            "said before any point ran: {progress:?}",
            progress = progress.0
        );
        let said = |id: &str, why: &str| {
            assert!(
                warned.iter().any(|w| w.contains(id) && w.contains(why)),
                "{id}: {why} in {warned:?}"
            )
        };
        said("p0000-r00", "No such file");
        said("p0000-r01", "not a readable parquet file");
        said("p0000-r02", "holds 2 rows, its record says 4");
        // All three ran again, in one boot, and are whole now.
        assert_eq!(*c.boots.borrow(), [0, 1]);
        for p in &r.manifest.points {
            crate::recording::results::rundir::RunDir {
                root: c.out.clone(),
            }
            .check_point(p)
            .unwrap();
        }
    }

    #[test]
    fn resume_numbers_boots_after_the_earlier_attempt() {
        let c = case();
        // The first attempt stores one point, then its next boot fails.
        let first = Limits {
            fail_from_boot: Some(1),
            points_per_boot: Some(1),
        };
        let e = c
            .run(
                false,
                false,
                INPUTS,
                all_done(),
                first,
                &mut Collect(Vec::new()),
            )
            .unwrap_err();
        assert!(e.to_string().contains("did not start"), "{e}");
        assert_eq!(*c.boots.borrow(), [0, 1]);
        // As if it had been killed: the manifest lists no boot.
        let mut m = c.manifest();
        m.boots.clear();
        manifest::write(&c.out.join("manifest.json"), &m).unwrap();
        c.boots.borrow_mut().clear();
        let r = c.resume(&mut Collect(Vec::new())).unwrap();
        assert_eq!(r.manifest.status, manifest::RunStatus::Complete);
        assert_eq!(*c.boots.borrow(), [2], "after console.boot1.log");
        let log = |name: &str| std::fs::read_to_string(c.out.join(name)).unwrap();
        assert_eq!(
            log("console.log"),
            "boot 0\n",
            "the first boot's log is kept"
        );
        assert_eq!(log("console.boot1.log"), "boot 1\n");
        assert_eq!(log("console.boot2.log"), "boot 2\n");
        // A finished manifest's boots are carried over by the next resume.
        let again = c.resume(&mut Collect(Vec::new())).unwrap();
        let listed: Vec<u32> = again.manifest.boots.iter().map(|b| b.index).collect();
        assert_eq!(listed, [2]);
    }

    #[test]
    fn resume_refuses_other_inputs_unless_forced_and_records_it() {
        let c = case();
        // Stopped after its first point, to be resumed.
        let first = Limits {
            fail_from_boot: Some(1),
            points_per_boot: Some(1),
        };
        c.run(
            false,
            false,
            INPUTS,
            all_done(),
            first,
            &mut Collect(Vec::new()),
        )
        .unwrap_err();
        let before = std::fs::read(c.out.join("manifest.json")).unwrap();
        let other = Inputs {
            agent: "bbbb",
            kernel: "k2",
        };
        let e = c
            .run(
                true,
                false,
                other.clone(),
                all_done(),
                Limits::default(),
                &mut Collect(Vec::new()),
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("agent (sha256): earlier aaaa, now bbbb"), "{e}");
        assert!(
            e.contains("kernel: earlier vm-base 6.1.0 (key k1), now vm-base 6.1.0 (key k2)"),
            "{e}"
        );
        assert!(e.contains("--force"), "{e}");
        assert_eq!(*c.boots.borrow(), [0, 1], "no point ran");
        assert_eq!(
            std::fs::read(c.out.join("manifest.json")).unwrap(),
            before,
            "the earlier manifest is kept"
        );
        // Another testbed version is refused as well.
        let mut m = c.manifest();
        m.testbed_version = "0.0.1".into();
        manifest::write(&c.out.join("manifest.json"), &m).unwrap();
        let e = c
            .run(
                true,
                false,
                INPUTS,
                all_done(),
                Limits::default(),
                &mut Collect(Vec::new()),
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "testbed version: earlier 0.0.1, now {}",
                env!("CARGO_PKG_VERSION")
            )),
            "{e}"
        );
        // With --force it goes on, and the manifest says what differed.
        let r = c
            .run(
                true,
                true,
                other,
                all_done(),
                Limits::default(),
                &mut Collect(Vec::new()),
            )
            .unwrap();
        assert_eq!(r.manifest.status, manifest::RunStatus::Complete);
        let forced = &r.manifest.inputs.files[manifest::FORCED_RESUME];
        let differs = forced[0]["differs"].as_array().unwrap();
        let inputs: Vec<&str> = differs
            .iter()
            .map(|d| d["input"].as_str().unwrap())
            .collect();
        assert_eq!(inputs, ["testbed version", "agent (sha256)", "kernel"]);
        assert_eq!(differs[1]["earlier"], "aaaa");
        assert_eq!(differs[1]["now"], "bbbb");
    }

    #[test]
    fn a_run_directory_in_use_is_refused_naming_the_process() {
        let c = case();
        // A run of this spec, which another process is running.
        std::fs::create_dir_all(&c.out).unwrap();
        std::fs::copy(&c.spec, c.out.join("spec.toml")).unwrap();
        let holder = crate::host::lock::test_support::Holder::exclusive(&c.out.join(".lock"));
        for resume in [false, true] {
            let e = c
                .run(
                    resume,
                    false,
                    INPUTS,
                    all_done(),
                    Limits::default(),
                    &mut Collect(Vec::new()),
                )
                .unwrap_err();
            assert!(
                matches!(e, RunError::InUse { pid: Some(p), .. } if p == holder.pid()),
                "{e}"
            );
            assert_eq!(
                e.to_string(),
                format!(
                    "run directory {} is in use by pid {}",
                    c.out.display(),
                    holder.pid()
                )
            );
        }
        assert!(c.boots.borrow().is_empty(), "nothing ran");
        holder.release();
        c.resume(&mut Collect(Vec::new())).unwrap();
    }

    /// Sets a stored point's noise as if the host had been that busy.
    fn mark_noise(out: &Path, id: &str, others_pct: f64) {
        let path = out.join("points").join(format!("{id}.json"));
        let mut rec: manifest::PointRecord =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        rec.noise = Some(crate::machine::noise::HostNoise {
            others_pct,
            steal_pct: 0.0,
            own_pct: 50.0,
            load1: Some(1.0),
            interval_s: 0.1,
            noisy_above_pct: 10.0,
            noisy: others_pct > 10.0,
        });
        std::fs::write(&path, serde_json::to_vec(&rec).unwrap()).unwrap();
    }

    #[test]
    fn resume_with_rerun_noisy_runs_only_the_noisy_point_again_and_keeps_its_first_measurement() {
        let c = case();
        c.fresh(all_done()).unwrap();
        let first = c.manifest();
        assert!(
            first.points.iter().all(|p| p.noise.is_some()),
            "every point carries its host noise"
        );
        for id in IDS {
            mark_noise(&c.out, id, if id == IDS[1] { 77.0 } else { 1.0 });
        }
        // A plain resume has nothing to do: noisy points are finished points.
        c.resume(&mut Collect(Vec::new())).unwrap();
        assert!(c.manifest().points.iter().all(|p| p.earlier.is_empty()));
        let boots_before = c.boots.borrow().len();

        let opts = RunOptions {
            out: Some(c.out.clone()),
            resume: true,
            rerun_noisy: true,
            ..RunOptions::default()
        };
        let mut progress = Collect(Vec::new());
        let r = c
            .run_with(&opts, INPUTS, all_done(), Limits::default(), &mut progress)
            .unwrap();
        assert_eq!(r.manifest.status, manifest::RunStatus::Complete);
        let by_id = |id: &str| r.manifest.points.iter().find(|p| p.id == id).unwrap();
        let again = by_id(IDS[1]);
        // Run again once, or up to the bound if the host stayed busy.
        assert!(
            (1..=boots::MAX_NOISY_RERUNS).contains(&again.earlier.len()),
            "{:?}",
            again.earlier
        );
        let kept = &again.earlier[0];
        assert_eq!(kept.noise.as_ref().map(|n| n.others_pct), Some(77.0));
        assert_eq!(kept.boot, first.points[1].boot);
        assert!(
            again.boot > kept.boot,
            "the new measurement is a new boot's"
        );
        assert!(by_id(IDS[0]).earlier.is_empty() && by_id(IDS[2]).earlier.is_empty());
        assert!(c.boots.borrow().len() > boots_before);
        assert!(
            progress
                .0
                .iter()
                .any(|e| matches!(e, Event::Warn(w) if w.contains("--rerun-noisy"))),
            "says what runs again"
        );
    }
}
