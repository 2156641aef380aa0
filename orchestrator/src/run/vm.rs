//! The QEMU side of a run's inputs: the kernel, the image (agent, helpers,
//! modules, BPF programs) and the accelerator decision with its probe boot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::inputs::file_input;
use super::{RunError, RunOptions, setup};
use crate::progress::{Event, Progress};
use crate::qemu::accel::{self, AccelDecision};
use crate::qemu::argv::{Accel, VmConfig};
use crate::results::manifest::{Inputs, KernelInput};
use crate::spec::LoadedSpec;
use crate::{devices, guestbin, image, kernel, paths};

/// The spec's kernel; an error points at `kernel.name` in the spec.
pub(crate) fn resolve_kernel(
    loaded: &LoadedSpec,
    cache: &Path,
) -> Result<kernel::KernelArtifact, RunError> {
    let name = &loaded.spec.kernel.name;
    let resolved = if let Some(why) = crate::slurm::no_build() {
        // A Slurm task finds what the submitting host built, or stops.
        match kernel::lookup_cached(&paths::kernel_configs(), name, cache) {
            Ok(Some(k)) => Ok(k),
            Ok(None) => {
                return Err(RunError::Setup(format!(
                    "kernel `{name}` is not in the cache {}: {why}",
                    cache.display()
                )));
            }
            Err(e) => Err(e),
        }
    } else {
        kernel::resolve(&paths::kernel_configs(), name, cache, &|s: &str| {
            eprintln!("[testbed] kernel: {s}")
        })
    };
    resolved.map_err(|e| {
        let mut err = loaded.error_at("kernel", Some("name"), e.to_string());
        err.message = e.to_string();
        RunError::Spec(err)
    })
}

pub(super) type VmPrep = (VmConfig, AccelDecision, Inputs);

/// The guest image of a run (agent, helpers, modules, BPF programs) and
/// the inputs it records; content-addressed in the cache, so the Slurm
/// submitter builds it once and every task finds it.
pub(crate) struct SharedImage {
    pub image: image::BuiltImage,
    pub inputs: Inputs,
}

pub(crate) fn build_shared_image(
    loaded: &LoadedSpec,
    kernel: &kernel::KernelArtifact,
    agent: &Path,
    helpers: &[(guestbin::Helper, PathBuf)],
    needs_bpf: bool,
    cache: &Path,
    progress: &mut dyn Progress,
) -> Result<SharedImage, RunError> {
    let spec = &loaded.spec;
    let mut inputs = Inputs {
        kernel: Some(KernelInput {
            name: kernel.name.clone(),
            key: kernel.key.clone(),
            release: kernel.release.clone(),
            description: kernel.description.clone(),
            config_sha256: kernel.config_sha256.clone(),
            patches: kernel.patches.clone(),
            bzimage: kernel.bzimage.clone(),
        }),
        files: BTreeMap::new(),
    };
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
        inputs.files.insert(
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
    inputs.files.insert(
        "initramfs".into(),
        serde_json::to_value(&img).unwrap_or_default(),
    );
    Ok(SharedImage { image: img, inputs })
}

#[allow(clippy::too_many_arguments)]
pub(super) fn prepare_vm(
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
    let SharedImage { image: img, inputs } =
        build_shared_image(loaded, kernel, agent, helpers, needs_bpf, cache, progress)?;

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
    devices::passthrough::require_kvm(prepared, &decision)
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
