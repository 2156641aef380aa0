//! `testbed run SPEC`: validate, prepare inputs (kernel, image, devices,
//! accelerator), run every point through an executor, and leave a run
//! directory with raw samples and a manifest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest, Sha256};

use crate::executor::host::HostExecutor;
use crate::executor::qemu::QemuExecutor;
use crate::executor::{BootError, Executor, PointOutcome};
use crate::plan::{Plan, Point};
use crate::progress::{Event, Progress};
use crate::qemu::accel::{self, AccelDecision};
use crate::qemu::argv::{Accel, VmConfig};
use crate::results::manifest::{self, Manifest, PointRecord, RunStatus};
use crate::results::rundir::{RunDir, is_empty_dir, new_run_id};
use crate::results::{samples, summary_table};
use crate::spec::{AccelChoice, ExecutorKind, LoadedSpec};
use crate::{devices, guestbin, hostinfo, image, kernel, paths};

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub accel: Option<AccelChoice>,
    /// The run directory itself (default results/<experiment>/<run-id>).
    pub out: Option<PathBuf>,
    pub resume: bool,
    pub fail_fast: bool,
    pub results_root: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Spec(#[from] crate::spec::SpecError),
    #[error("{0}")]
    Setup(String),
    #[error("interrupted; finished points are kept in {0} (continue with --resume --out {0})")]
    Interrupted(String),
}

fn setup<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> RunError + '_ {
    move |e| RunError::Setup(format!("{context}: {e}"))
}

#[derive(Debug)]
pub struct RunResult {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// Parses, validates and plans a spec without running it.
pub fn check_spec(spec_path: &Path) -> Result<(LoadedSpec, Plan), RunError> {
    let loaded = crate::spec::load(spec_path)?;
    let plan = crate::plan::plan(&loaded)?;
    Ok((loaded, plan))
}

pub fn run(
    spec_path: &Path,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<RunResult, RunError> {
    crate::phases::time("runs", || run_timed(spec_path, opts, progress))
}

/// The host tools a spec's run needs, by executor and workload.
pub fn needs(spec: &crate::spec::Spec, plan: &Plan) -> Vec<&'static str> {
    let mut needs = Vec::new();
    if spec.experiment.executor == ExecutorKind::Qemu {
        needs.push("vm");
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
    crate::kernel::failed_earlier(&paths::kernel_configs(), name)
        .map(|r| format!("skipped: kernel `{name}` failed to build earlier in this run:\n{r}"))
}

fn run_timed(
    spec_path: &Path,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<RunResult, RunError> {
    let started = Instant::now();
    let (loaded, plan) = check_spec(spec_path)?;
    let spec = &loaded.spec;
    // Missing tools are named now, before a run directory or a build.
    crate::hosttools::preflight(&needs(spec, &plan)).map_err(|e| RunError::Setup(e.to_string()))?;
    // The kernel too (fetched, built or found in the cache): a build that
    // fails leaves no run directory behind.
    let kernel = match spec.experiment.executor {
        ExecutorKind::Qemu => Some(resolve_kernel(&loaded, &paths::cache_root())?),
        _ => None,
    };
    let spec_sha = hex::encode(Sha256::digest(loaded.source.as_bytes()));
    let repo = paths::repo_root();
    let cache = paths::cache_root();

    let dir = choose_run_dir(&loaded, opts, &spec_sha)?;
    let rd = RunDir { root: dir.clone() };
    crate::fsutil::create_dir(&rd.root).map_err(setup("run directory"))?;
    crate::fsutil::write_atomic(&rd.spec_copy(), loaded.source.as_bytes())
        .map_err(setup("copy spec"))?;
    let previous = rd.records().map_err(RunError::Setup)?;
    let mut m = Manifest {
        testbed_version: env!("CARGO_PKG_VERSION").into(),
        status: RunStatus::Running,
        experiment: spec.experiment.name.clone(),
        run_id: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        figures: spec.experiment.figures.clone(),
        spec_file: spec_path.display().to_string(),
        spec_sha256: spec_sha,
        spec: serde_json::to_value(spec).unwrap_or_default(),
        executor: format!("{:?}", spec.experiment.executor).to_lowercase(),
        inputs: BTreeMap::new(),
        accel: None,
        timing_note: String::new(),
        qemu_argv: Vec::new(),
        host: serde_json::Value::Null,
        guest: None,
        boots: Vec::new(),
        boot_to_agent_ms: Vec::new(),
        devices: Vec::new(),
        seed: spec.experiment.seed,
        points: previous.values().cloned().collect(),
        started_at: manifest::utc_now(),
        finished_at: None,
        wall_s: None,
    };

    // Inputs: devices first (cheap, and they fail fast on a bad passthrough).
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let prepared = devices::prepare(&spec.devices, &rd.devices_dir(), Path::new("/sys"), &mounts)
        .map_err(|e| RunError::Setup(e.to_string()))?;
    m.devices = prepared.iter().map(|d| d.manifest_entry()).collect();
    for d in &prepared {
        if let Some(n) = &d.note {
            progress.event(Event::Warn(n.clone()));
        }
    }
    let mut stage = |s: &str| progress.event(Event::Stage(s.to_string()));
    let agent =
        guestbin::ensure(&repo, guestbin::AGENT, &mut stage).map_err(setup("guest agent"))?;
    m.inputs.insert("agent".into(), file_input(&agent));
    // Helper binaries the agent runs as child processes, as the points'
    // workloads declare them.
    let wanted: std::collections::BTreeSet<guestbin::Helper> = plan
        .points
        .iter()
        .flat_map(|p| p.workload.needs().helpers)
        .collect();
    let mut helpers: Vec<(guestbin::Helper, PathBuf)> = Vec::new();
    for helper in wanted {
        let f = guestbin::ensure(&repo, helper, &mut stage)
            .map_err(setup(&format!("{} binary", helper.binary)))?;
        m.inputs.insert(helper.binary.into(), file_input(&f));
        helpers.push((helper, f));
    }
    let qemu = crate::qemu::qemu_binary();
    m.host = serde_json::to_value(hostinfo::collect(&repo, qemu.as_deref())).unwrap_or_default();
    let mut executor: Box<dyn Executor> = match spec.experiment.executor {
        ExecutorKind::Qemu => {
            let qemu = qemu.ok_or_else(|| {
                RunError::Setup("qemu-system-x86_64 is not installed: run `./x setup` (apt-get install qemu-system-x86)".into())
            })?;
            // Any point may need them, not only the base workload: a sweep
            // can turn `engine = "read"` into a hook engine.
            let needs_bpf = plan.points.iter().any(|p| p.workload.needs().bpf_programs);
            let kernel = kernel.ok_or_else(|| {
                RunError::Setup("internal: the qemu executor's kernel was not resolved".into())
            })?;
            let (config, decision, inputs) = prepare_vm(
                &loaded, &qemu, &kernel, &agent, &helpers, &prepared, needs_bpf, &cache, opts,
                progress,
            )?;
            m.inputs.extend(inputs);
            m.timing_note = decision.timing_note().to_string();
            progress.event(Event::Stage(format!(
                "accelerator: {} ({})",
                decision.used,
                decision.reasons.join("; ")
            )));
            m.accel = Some(serde_json::to_value(&decision).unwrap_or_default());
            Box::new(QemuExecutor {
                config,
                cmdline_extra: spec.vm.cmdline.clone(),
                devices: plan.devices.clone(),
                timeouts: spec.timeouts.clone(),
                run_dir: dir.clone(),
                pair: pair_setup(&loaded),
            })
        }
        ExecutorKind::Host => {
            m.timing_note = "host executor: timings are of this host".into();
            let env = helpers
                .iter()
                .map(|(h, f)| (h.env.to_string(), f.to_string_lossy().into_owned()))
                .collect();
            Box::new(HostExecutor {
                agent: agent.clone(),
                devices: devices::host_refs(&prepared, &plan.devices),
                timeouts: spec.timeouts.clone(),
                env,
            })
        }
        ExecutorKind::Slurm => {
            return Err(RunError::Setup(
                "the slurm executor is not implemented yet; use executor = \"qemu\" or \"host\""
                    .into(),
            ));
        }
    };
    manifest::write(&rd.manifest(), &m).map_err(RunError::Setup)?;

    let done: Vec<String> = previous
        .values()
        .filter(|r| r.ok)
        .map(|r| r.id.clone())
        .collect();
    let mut queue: Vec<Point> = plan
        .points
        .iter()
        .filter(|p| !done.contains(&p.id()))
        .cloned()
        .collect();
    progress.event(Event::RunStarted {
        dir: dir.display().to_string(),
        total: plan.points.len(),
        already_done: done.len(),
    });

    let mut records: BTreeMap<String, PointRecord> = previous;
    // The executor reports boot events while on_point reports points: both
    // go to the one progress renderer, never at the same time.
    let progress_cell = std::cell::RefCell::new(&mut *progress);
    let mut boot_index = m.boots.len() as u32;
    let mut stop: Option<RunStatus> = None;
    let mut fatal: Option<String> = None;
    while !queue.is_empty() && stop.is_none() {
        let batch: Vec<Point> = match spec.vm.boot {
            crate::spec::BootPolicy::PerRun => queue.clone(),
            crate::spec::BootPolicy::PerPoint => queue[..1].to_vec(),
        };
        let mut failed_fast = false;
        let run_id = m.run_id.clone();
        let mut on_point = |point: &Point, outcome: PointOutcome| -> Result<(), String> {
            let rec = store_point(&rd, &run_id, point, outcome, boot_index)?;
            progress_note(&rec, &mut **progress_cell.borrow_mut());
            let ok = rec.ok;
            records.insert(rec.id.clone(), rec);
            if !ok && opts.fail_fast {
                failed_fast = true;
                return Err("--fail-fast: stopping at the first failed point".into());
            }
            Ok(())
        };
        let mut events = |e: Event| progress_cell.borrow_mut().event(e);
        let result = executor.run_boot(boot_index, &batch, &mut on_point, &mut events);
        match result {
            Ok((record, handled)) => {
                if let Some(ms) = record.ready_ms {
                    m.boot_to_agent_ms.push(ms);
                }
                if m.guest.is_none()
                    && let Some(h) = &record.hello
                {
                    m.guest = Some(serde_json::json!({
                        "uname": h.uname, "cmdline": h.kernel_cmdline, "cpus": h.ncpus,
                        "mem_total_kib": h.mem_total_kib, "modules_loaded": h.modules_loaded,
                        "devices": h.devices, "agent_version": h.agent_version,
                        "uptime_at_ready_ms": h.uptime_ms,
                    }));
                }
                if m.qemu_argv.is_empty() {
                    m.qemu_argv = record.argv.clone();
                }
                m.boots
                    .push(serde_json::to_value(&record).unwrap_or_default());
                queue.drain(..handled.min(queue.len()));
                if failed_fast {
                    stop = Some(RunStatus::Partial);
                }
                if handled == 0 && !queue.is_empty() {
                    fatal = Some(format!("boot {boot_index} ran no point: {}", record.ended));
                    stop = Some(RunStatus::Failed);
                }
            }
            Err(BootError::Interrupted) => stop = Some(RunStatus::Interrupted),
            Err(BootError::Failed(e)) => {
                fatal = Some(format!("boot {boot_index} failed: {e}"));
                stop = Some(RunStatus::Failed);
            }
        }
        boot_index += 1;
        if crate::executor::interrupted() {
            stop = Some(RunStatus::Interrupted);
        }
    }

    // Merge what is done, whatever happened; failed points are listed, not drawn.
    let mut ok_files: Vec<PathBuf> = records
        .values()
        .filter(|r| r.ok)
        .map(|r| rd.point_samples(&r.id))
        .collect();
    ok_files.sort();
    if !ok_files.is_empty() {
        samples::merge(&ok_files, &rd.samples()).map_err(setup("merge samples"))?;
        let done: Vec<&PointRecord> = records.values().filter(|r| r.ok).collect();
        let table = summary_table::batch(&m.run_id, &done).map_err(setup("summary table"))?;
        samples::write_parquet(&rd.summary(), table.schema(), &[table])
            .map_err(setup("summary table"))?;
    }
    m.points = records.values().cloned().collect();
    let any_failed = m.points.iter().any(|p| !p.ok);
    m.status = match stop {
        Some(s) => s,
        None if any_failed => RunStatus::Partial,
        None => RunStatus::Complete,
    };
    m.finished_at = Some(manifest::utc_now());
    m.wall_s = Some(started.elapsed().as_secs_f64());
    manifest::write(&rd.manifest(), &m).map_err(RunError::Setup)?;
    match (m.status, fatal) {
        (RunStatus::Interrupted, _) => Err(RunError::Interrupted(dir.display().to_string())),
        (RunStatus::Failed, Some(e)) => Err(RunError::Setup(format!(
            "{e}\n(run directory: {})",
            dir.display()
        ))),
        _ => Ok(RunResult { dir, manifest: m }),
    }
}

fn progress_note(rec: &PointRecord, progress: &mut dyn Progress) {
    let note = match (&rec.error, rec.wall_s) {
        (Some(e), _) => e.lines().next().unwrap_or("").to_string(),
        (None, Some(w)) => format!("{} samples in {w:.1}s", rec.samples),
        _ => String::new(),
    };
    progress.event(Event::PointFinished {
        id: rec.id.clone(),
        ok: rec.ok,
        note,
    });
}

/// Writes a finished point: samples first, then its record (the record's
/// presence is what marks the point done for --resume).
fn store_point(
    rd: &RunDir,
    run_id: &str,
    point: &Point,
    outcome: PointOutcome,
    boot: u32,
) -> Result<PointRecord, String> {
    let mut rec = PointRecord {
        id: point.id(),
        point: point.point,
        rep: point.rep,
        params: point.params.clone(),
        workload: Some(point.workload.resolved()),
        seed: point.seed,
        ok: false,
        error: None,
        wall_s: None,
        samples: 0,
        summary: BTreeMap::new(),
        boot,
    };
    match outcome {
        PointOutcome::Done {
            summary,
            chunks,
            wall_s,
        } => {
            let batch =
                samples::point_batch(run_id, point, boot, &chunks).map_err(|e| e.to_string())?;
            samples::write_parquet(&rd.point_samples(&rec.id), batch.schema(), &[batch])
                .map_err(|e| e.to_string())?;
            rec.ok = true;
            rec.samples = chunks.iter().map(|c| c.values.len()).sum();
            rec.wall_s = Some(wall_s);
            rec.summary = summary;
        }
        PointOutcome::Failed { error } => {
            let _ = std::fs::remove_file(rd.point_samples(&rec.id));
            rec.error = Some(error);
        }
    }
    let text = serde_json::to_vec_pretty(&rec).map_err(|e| e.to_string())?;
    crate::fsutil::write_atomic(&rd.point_record(&rec.id), &text).map_err(|e| e.to_string())?;
    Ok(rec)
}

fn choose_run_dir(
    loaded: &LoadedSpec,
    opts: &RunOptions,
    spec_sha: &str,
) -> Result<PathBuf, RunError> {
    let root = opts
        .results_root
        .clone()
        .unwrap_or_else(|| paths::repo_root().join("results"));
    let exp_dir = root.join(&loaded.spec.experiment.name);
    if opts.resume {
        let dir = match &opts.out {
            Some(d) => d.clone(),
            None => latest_run(&exp_dir).ok_or_else(|| {
                RunError::Setup(format!(
                    "--resume: no earlier run of this spec under {}",
                    exp_dir.display()
                ))
            })?,
        };
        let rd = RunDir { root: dir.clone() };
        let old = std::fs::read(rd.spec_copy()).map_err(|e| {
            RunError::Setup(format!("--resume: {} has no spec.toml: {e}", dir.display()))
        })?;
        if hex::encode(Sha256::digest(&old)) != spec_sha {
            return Err(RunError::Setup(format!(
                "--resume: the spec changed since {} was started; start a new run instead",
                dir.display()
            )));
        }
        return Ok(dir);
    }
    let dir = opts
        .out
        .clone()
        .unwrap_or_else(|| exp_dir.join(new_run_id()));
    if dir.exists() && !is_empty_dir(&dir) {
        return Err(RunError::Setup(format!(
            "{} already holds a run: use --resume to continue it, or another --out",
            dir.display()
        )));
    }
    Ok(dir)
}

fn latest_run(exp_dir: &Path) -> Option<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(exp_dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("spec.toml").is_file())
        .collect();
    runs.sort();
    runs.pop()
}

fn pair_setup(loaded: &LoadedSpec) -> Option<crate::executor::qemu::PairSetup> {
    let t = loaded.spec.topology.as_ref()?;
    let workload = loaded.server_workload.clone()?;
    Some(crate::executor::qemu::PairSetup {
        server_job: Point {
            point: u32::MAX,
            rep: 0,
            params: BTreeMap::new(),
            workload,
            seed: crate::plan::point_seed(loaded.spec.experiment.seed, u64::MAX, 0),
        },
        server_addr: t.server_address.clone(),
        client_addr: t.client_address.clone(),
    })
}

fn file_input(path: &Path) -> serde_json::Value {
    let sha = std::fs::read(path)
        .map(|b| hex::encode(Sha256::digest(&b)))
        .unwrap_or_default();
    serde_json::json!({ "path": path, "sha256": sha })
}

/// The spec's kernel; an error points at `kernel.name` in the spec.
fn resolve_kernel(loaded: &LoadedSpec, cache: &Path) -> Result<kernel::KernelArtifact, RunError> {
    kernel::resolve(
        &paths::kernel_configs(),
        &loaded.spec.kernel.name,
        cache,
        &|s: &str| eprintln!("[testbed] kernel: {s}"),
    )
    .map_err(|e| {
        let mut err = loaded.error_at("kernel", Some("name"), e.to_string());
        err.message = e.to_string();
        RunError::Spec(err)
    })
}

type VmPrep = (VmConfig, AccelDecision, BTreeMap<String, serde_json::Value>);

#[allow(clippy::too_many_arguments)]
fn prepare_vm(
    loaded: &LoadedSpec,
    qemu: &Path,
    kernel: &kernel::KernelArtifact,
    agent: &Path,
    helpers: &[(guestbin::Helper, PathBuf)],
    prepared: &[devices::PreparedDevice],
    needs_bpf: bool,
    cache: &Path,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<VmPrep, RunError> {
    let spec = &loaded.spec;
    let mut inputs = BTreeMap::new();
    inputs.insert(
        "kernel".into(),
        serde_json::json!({
            "name": kernel.name, "key": kernel.key, "release": kernel.release,
            "description": kernel.description, "config_sha256": kernel.config_sha256,
            "patches": kernel.patches, "bzimage": kernel.bzimage,
        }),
    );
    let mut wanted = kernel.default_modules();
    wanted.extend(spec.image.modules.iter().cloned());
    let modules = kernel
        .module_load_order(&wanted)
        .map_err(setup("kernel modules"))?
        .into_iter()
        .map(|m| image::ModuleInput {
            name: m.name,
            path: m.path,
        })
        .collect();
    let mut files = Vec::new();
    for (helper, f) in helpers {
        files.push((format!("bin/{}", helper.binary), f.clone()));
    }
    // Storage-hook jobs: the BPF programs, built against this kernel.
    if needs_bpf {
        let bpf = crate::ebpf::build_for(kernel, &paths::repo_root().join("ebpf-programs"), cache)
            .map_err(setup("BPF programs"))?;
        inputs.insert(
            "bpf_programs".into(),
            bpf.iter().map(|(_, host)| file_input(host)).collect(),
        );
        files.extend(bpf);
    }
    let img_inputs = image::InitramfsInputs {
        agent: agent.to_path_buf(),
        busybox: paths::busybox(),
        kernel_release: kernel.release.clone(),
        modules,
        include: spec.image.include.clone(),
        files,
    };
    progress.event(Event::Stage("building initramfs".into()));
    let img = crate::phases::time("images", || image::build_initramfs(&img_inputs, cache))
        .map_err(setup("initramfs"))?;
    inputs.insert(
        "initramfs".into(),
        serde_json::to_value(&img).unwrap_or_default(),
    );

    let mut config = VmConfig {
        qemu: qemu.to_path_buf(),
        accel: Accel::Tcg,
        vcpus: spec.vm.vcpus,
        memory_mib: spec.vm.memory.mib(),
        kernel: kernel.bzimage.clone(),
        initrd: img.path.clone(),
        append: String::new(),
        console_log: PathBuf::new(),
        agent_socket: PathBuf::new(),
        devices: prepared.iter().map(|d| d.qemu.clone()).collect(),
        nics: Vec::new(),
    };
    let requested = opts.accel.unwrap_or(spec.vm.accel);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let probe_config = config.clone();
    let mut probe = || {
        progress.event(Event::Stage("probing KVM with a real boot".into()));
        probe_boot(&probe_config, accel::probe_timeout())
    };
    let decision = accel::decide(requested, Path::new("/dev/kvm"), &cpuinfo, &mut probe)
        .map_err(|e| RunError::Setup(e.to_string()))?;
    config.accel = decision.used;
    Ok((config, decision, inputs))
}

/// Boots the image under KVM until the agent says hello (then kills it).
pub fn probe_boot(base: &VmConfig, timeout: std::time::Duration) -> accel::ProbeResult {
    let started = Instant::now();
    let nonce = crate::executor::qemu::random_hex(8);
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return accel::probe_outcome(started, Err(format!("temp dir: {e}"))),
    };
    let mut c = base.clone();
    c.accel = Accel::Kvm;
    // No devices: the probe asks only whether a guest runs at all.
    c.devices.clear();
    c.memory_mib = c.memory_mib.min(512);
    c.append = crate::qemu::argv::kernel_append(Accel::Kvm, &nonce, true, &[]);
    c.console_log = dir.path().join("console.log");
    c.agent_socket = dir.path().join("a.sock");
    let argv = crate::qemu::argv::build_argv(&c);
    let log = dir.path().join("qemu.log");
    let outcome = (|| {
        let mut vm =
            crate::qemu::process::VmProcess::spawn(&argv, &log).map_err(|e| e.to_string())?;
        let ch = crate::qemu::channel::Channel::connect_vm(&c.agent_socket, &mut vm, timeout)
            .map_err(|e| {
                format!(
                    "{e}: {}",
                    crate::qemu::process::tail_lines(&log, 3).replace('\n', " | ")
                )
            })?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = vm.try_wait() {
                return Err(format!(
                    "QEMU exited ({status}): {}",
                    crate::qemu::process::tail_lines(&log, 3).replace('\n', " | ")
                ));
            }
            match ch.recv_timeout(std::time::Duration::from_millis(100)) {
                Ok(Some(testbed_agent::protocol::GuestMsg::Hello(h))) if h.nonce == nonce => {
                    return Ok(());
                }
                Ok(_) => {}
                Err(e) => return Err(format!("agent channel: {e}")),
            }
        }
        Err(format!(
            "no agent within {}s (guest hung; last console line: {:?})",
            timeout.as_secs(),
            crate::qemu::process::tail_lines(&c.console_log, 1)
        ))
    })();
    accel::probe_outcome(started, outcome)
}
