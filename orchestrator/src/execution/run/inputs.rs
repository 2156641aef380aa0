//! A run's inputs: devices, the guest binaries its workloads declare, and
//! the executor (for QEMU: kernel, image and accelerator, in `vm`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::vm::prepare_vm;
use super::{RunError, RunOptions, setup};
use crate::execution::executor::Executor;
use crate::execution::executor::host::HostExecutor;
use crate::execution::executor::qemu::QemuExecutor;
use crate::host::progress::{Event, Progress};
use crate::planning::plan::{Plan, Point};
use crate::planning::spec::{ExecutorKind, LoadedSpec};
use crate::recording::results::manifest::Manifest;
use crate::recording::results::rundir::RunDir;
use crate::{execution::devices, host::paths, inputs::guestbin, inputs::kernel, machine::hostinfo};

/// Devices, guest binaries and the executor, recorded in the manifest.
pub(super) fn prepare(
    loaded: &LoadedSpec,
    plan: &Plan,
    kernel: Option<kernel::KernelArtifact>,
    rd: &RunDir,
    m: &mut Manifest,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<Box<dyn Executor>, RunError> {
    let spec = &loaded.spec;
    let dir = rd.root.clone();
    let repo = paths::repo_root();
    let cache = paths::cache_root();
    // Inputs: devices first (cheap, and they fail fast on a bad passthrough).
    let prepared = devices::prepare(&spec.devices, &rd.devices_dir(), &devices::Host::real())
        .map_err(|e| RunError::Setup(e.to_string()))?;
    // Controllers taken from their driver (bind = true), given back when
    // the executor holding them is dropped.
    let mut bound = None;
    m.devices = prepared.iter().map(|d| d.manifest_entry()).collect();
    for d in &prepared {
        if let Some(n) = &d.note {
            progress.event(Event::Warn(n.clone()));
        }
    }
    let (agent, helpers) = guest_binaries(&repo, plan, m, progress)?;
    let qemu = crate::machine::qemu::qemu_binary();
    m.host = hostinfo::collect(&repo, qemu.as_deref());
    // The canary before the first boot; boots.rs times it again at the end.
    m.host.speed = Some(crate::machine::calibrate::HostSpeed {
        canary: crate::machine::calibrate::CANARY.into(),
        start_ns_per_step: crate::machine::calibrate::measure(crate::machine::calibrate::PASSES),
        end_ns_per_step: Vec::new(),
    });
    let executor: Box<dyn Executor> = match spec.experiment.executor {
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
                loaded, &qemu, &kernel, &agent, &helpers, &prepared, needs_bpf, &cache, opts,
                progress,
            )?;
            m.inputs.kernel = inputs.kernel;
            m.inputs.files.extend(inputs.files);
            m.timing_note = if spec.vm.clock == crate::machine::qemu::argv::Clock::Instructions {
                "TCG with an instruction clock (QEMU icount, shift=0, sleep off): the guest's clock advances 1 ns per instruction, so its times are instruction counts (deterministic work), not latency".into()
            } else {
                decision.timing_note().to_string()
            };
            progress.event(Event::Stage(format!(
                "accelerator: {} ({})",
                decision.used,
                decision.reasons.join("; ")
            )));
            m.accel = Some(decision);
            let b = devices::passthrough::bind_for_run(&prepared, &dir);
            bound = Some(b.map_err(|e| RunError::Setup(e.to_string()))?);
            Box::new(QemuExecutor {
                config,
                cmdline_extra: spec.vm.cmdline.clone(),
                devices: plan.devices.clone(),
                timeouts: spec.timeouts.clone(),
                limits: spec.limits.clone(),
                run_dir: dir.clone(),
                pin: spec.vm.pin.clone(),
                pair: pair_setup(loaded),
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
                limits: spec.limits.clone(),
                env,
                spill_dir: rd.points_dir(),
            })
        }
        ExecutorKind::Slurm => {
            // run_timed hands a Slurm run to slurm::submit; its tasks run
            // with [slurm] task_executor.
            return Err(RunError::Setup(
                "internal: a Slurm run's points run in its array tasks, not here".into(),
            ));
        }
    };
    Ok(match bound {
        Some(b) => b.hold(executor),
        None => executor,
    })
}

type Helpers = Vec<(guestbin::Helper, PathBuf)>;

/// The agent, and the helper binaries it runs as child processes as the
/// points' workloads declare them; recorded in `m`.
fn guest_binaries(
    repo: &Path,
    plan: &Plan,
    m: &mut Manifest,
    progress: &mut dyn Progress,
) -> Result<(PathBuf, Helpers), RunError> {
    let mut stage = |s: &str| progress.event(Event::Stage(s.to_string()));
    let wanted: std::collections::BTreeSet<guestbin::Helper> = plan
        .points
        .iter()
        .flat_map(|p| p.workload.needs().helpers)
        .collect();
    // One build: the agent and only the helpers these points run.
    let all: Vec<guestbin::Helper> = std::iter::once(guestbin::AGENT).chain(wanted).collect();
    let names: Vec<&str> = all.iter().map(|h| h.binary).collect();
    let mut files = guestbin::ensure_all(repo, &all, &mut stage)
        .map_err(setup(&format!("guest binaries ({})", names.join(", "))))?
        .into_iter();
    let agent = files
        .next()
        .ok_or_else(|| RunError::Setup("internal: no guest agent built".into()))?;
    m.inputs.files.insert("agent".into(), file_input(&agent));
    let mut helpers = Vec::new();
    for (helper, f) in all[1..].iter().zip(files) {
        m.inputs.files.insert(helper.binary.into(), file_input(&f));
        helpers.push((*helper, f));
    }
    Ok((agent, helpers))
}

/// For the Slurm executor: every input a task needs, built once here
/// into the cache, recorded in `m`; the environment that points each
/// task at them (with `TESTBED_NO_BUILD` set, a task builds nothing).
pub(crate) fn build_shared(
    loaded: &LoadedSpec,
    plan: &Plan,
    task_executor: ExecutorKind,
    m: &mut Manifest,
    progress: &mut dyn Progress,
) -> Result<BTreeMap<String, String>, RunError> {
    let repo = paths::repo_root();
    let cache = paths::cache_root();
    let (agent, helpers) = guest_binaries(&repo, plan, m, progress)?;
    let mut env = BTreeMap::new();
    env.insert(guestbin::AGENT.env.to_string(), agent.display().to_string());
    for (h, f) in &helpers {
        env.insert(h.env.to_string(), f.display().to_string());
    }
    env.insert("TESTBED_CACHE".into(), cache.display().to_string());
    env.insert("TESTBED_ROOT".into(), repo.display().to_string());
    env.insert(crate::host::paths::NO_BUILD_ENV.into(), "1".into());
    if task_executor == ExecutorKind::Qemu {
        let kernel = super::vm::resolve_kernel(loaded, &cache)?;
        let needs_bpf = plan.points.iter().any(|p| p.workload.needs().bpf_programs);
        let shared = super::vm::build_shared_image(
            loaded, &kernel, &agent, &helpers, needs_bpf, &cache, progress,
        )?;
        m.inputs.kernel = shared.inputs.kernel;
        m.inputs.files.extend(shared.inputs.files);
    }
    Ok(env)
}

fn pair_setup(loaded: &LoadedSpec) -> Option<crate::execution::executor::qemu::PairSetup> {
    let t = loaded.spec.topology.as_ref()?;
    let workload = loaded.server_workload.clone()?;
    Some(crate::execution::executor::qemu::PairSetup {
        server_job: Point {
            point: u32::MAX,
            rep: 0,
            params: BTreeMap::new(),
            workload,
            seed: crate::planning::plan::point_seed(loaded.spec.experiment.seed, u64::MAX, 0),
            vm_vcpus: None,
            boot_group: 0,
        },
        server_addr: t.server_address.clone(),
        client_addr: t.client_address.clone(),
    })
}

pub(super) fn file_input(path: &Path) -> serde_json::Value {
    let sha = std::fs::read(path)
        .map(|b| hex::encode(Sha256::digest(&b)))
        .unwrap_or_default();
    serde_json::json!({ "path": path, "sha256": sha })
}
