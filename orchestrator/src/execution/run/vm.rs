//! The QEMU side of a run's inputs: the kernel, the image (agent, helpers,
//! modules, BPF programs) and the accelerator decision with its probe boot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::inputs::file_input;
use super::{RunError, RunOptions, setup};
use crate::host::progress::{Event, Progress};
use crate::host::wait;
use crate::machine::qemu::accel::{self, AccelChoice, AccelDecision};
use crate::machine::qemu::argv::{Accel, VmConfig};
use crate::planning::spec::LoadedSpec;
use crate::recording::results::manifest::{Inputs, KernelInput};
use crate::{execution::devices, host::paths, inputs::guestbin, inputs::image, inputs::kernel};

/// The spec's kernel; an error points at `kernel.name` in the spec.
pub(crate) fn resolve_kernel(
    loaded: &LoadedSpec,
    cache: &Path,
) -> Result<kernel::KernelArtifact, RunError> {
    let name = &loaded.spec.kernel.name;
    let resolved = if let Some(why) = crate::host::paths::no_build() {
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
    /// The root filesystem image, when the spec names one.
    pub rootfs: Option<image::rootfs::BuiltRootfs>,
}

/// The spec's root image (`[image] name`) and its recipe, built if
/// missing; an error points at `image.name`.
fn root_image(
    loaded: &LoadedSpec,
    name: &str,
    cache: &Path,
    progress: &mut dyn Progress,
) -> Result<(image::recipe::Recipe, image::rootfs::BuiltRootfs), RunError> {
    let at = |e: String| RunError::Spec(loaded.error_at("image", Some("name"), e));
    let recipe = image::recipe::load(&image::recipes_dir(), name).map_err(|e| at(e.to_string()))?;
    progress.event(Event::Stage(format!("root image {name}")));
    let built = crate::host::phases::time("images", || {
        image::rootfs::ensure(&recipe, cache, &mut |s| {
            progress.event(Event::Stage(format!("image: {s}")))
        })
    })
    .map_err(|e| at(e.to_string()))?;
    Ok((recipe, built))
}

/// What the agent reads from the initramfs to switch to the root image
/// and to format devices (see guest-agent/src/agent/rootfs.rs), as files
/// in `dir`: (guest path, host path).
fn guest_setup_files(
    loaded: &LoadedSpec,
    rootfs: Option<&(image::recipe::Recipe, image::rootfs::BuiltRootfs)>,
    dir: &Path,
) -> Result<Vec<(String, PathBuf)>, RunError> {
    let mut files = Vec::new();
    let mut write = |guest: &str, text: String| -> Result<(), RunError> {
        let host = dir.join(guest.replace('/', "_"));
        std::fs::write(&host, text).map_err(setup(&format!("write {}", host.display())))?;
        files.push((guest.to_string(), host));
        Ok(())
    };
    if let Some((recipe, r)) = rootfs {
        let mut text = format!(
            "name={}\nkey={}\nserial={}\n",
            recipe.name,
            r.info.key,
            image::rootfs::SERIAL
        );
        for c in &recipe.check {
            text.push_str(&format!("check={c}\n"));
        }
        write("etc/testbed/rootfs", text)?;
    }
    let formatted: String = loaded
        .spec
        .devices
        .iter()
        .filter_map(|d| {
            let fs = d.filesystem?.as_str();
            Some(format!("{}\t{fs}\t{}\n", d.name, d.mount_point()?))
        })
        .collect();
    if !formatted.is_empty() {
        write("etc/testbed/filesystems", formatted)?;
    }
    Ok(files)
}

/// Modules for the devices' kinds (nvme, virtio_blk, …), the root image
/// and formatted devices (virtio_blk, ext4, overlay) where the kernel has
/// them as modules, possibly more than once (the caller adds each once);
/// a kernel that lacks one is refused here, before any boot, naming the
/// device or the image.
fn storage_modules(
    loaded: &LoadedSpec,
    kernel: &kernel::KernelArtifact,
) -> Result<Vec<String>, RunError> {
    let spec = &loaded.spec;
    let mut modules: Vec<String> = Vec::new();
    for (i, d) in spec.devices.iter().enumerate() {
        let found =
            image::kernel_needs::modules_for(kernel, d.kind.def().kernel_needs()).map_err(|e| {
                RunError::Spec(loaded.error_at_path(
                    &[
                        crate::planning::spec::PathSeg::Key("devices"),
                        crate::planning::spec::PathSeg::Index(i),
                        crate::planning::spec::PathSeg::Key("kind"),
                    ],
                    format!("device {:?} ({}): {e}", d.name, d.kind.name()),
                ))
            })?;
        modules.extend(found);
    }
    let formatted = spec.devices.iter().position(|d| d.filesystem.is_some());
    let needs = image::kernel_needs::needs(spec.image.name.is_some(), formatted.is_some());
    let found = image::kernel_needs::modules_for(kernel, &needs).map_err(|e| {
        RunError::Spec(match (&spec.image.name, formatted) {
            (None, Some(i)) => loaded.error_at_path(
                &[
                    crate::planning::spec::PathSeg::Key("devices"),
                    crate::planning::spec::PathSeg::Index(i),
                    crate::planning::spec::PathSeg::Key("filesystem"),
                ],
                e.to_string(),
            ),
            _ => loaded.error_at("image", Some("name"), e.to_string()),
        })
    })?;
    modules.extend(found);
    Ok(modules)
}

/// What the kernel must have, checked before a run directory exists: the
/// options the workload's probes need built in, and the modules (or
/// built-in drivers) of the devices, the image and formatted devices. A
/// refusal names the option and the spec's field.
pub(crate) fn check_kernel_fits(
    loaded: &LoadedSpec,
    kernel: &kernel::KernelArtifact,
) -> Result<(), RunError> {
    image::kernel_needs::check_built_in_for(kernel, &loaded.base_workload.needs().kernel_options)
        .map_err(|e| RunError::Spec(loaded.error_at("workload", Some("kind"), e.to_string())))?;
    storage_modules(loaded, kernel).map(|_| ())
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
            patch_sha256: patch_digests(kernel),
            bzimage: kernel.bzimage.clone(),
        }),
        files: BTreeMap::new(),
    };
    // Before anything is built: the workload's probes need these options.
    image::kernel_needs::check_built_in_for(kernel, &loaded.base_workload.needs().kernel_options)
        .map_err(|e| RunError::Spec(loaded.error_at("workload", Some("kind"), e.to_string())))?;
    let rootfs = match &spec.image.name {
        Some(name) => Some(root_image(loaded, name, cache, progress)?),
        None => None,
    };
    let mut wanted = kernel.default_modules();
    wanted.extend(spec.image.modules.iter().cloned());
    for m in storage_modules(loaded, kernel)? {
        if !wanted.contains(&m) {
            wanted.push(m);
        }
    }
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
        let bpf = crate::inputs::ebpf::build_for(
            kernel,
            &paths::repo_root().join("ebpf-programs"),
            cache,
        )
        .map_err(setup("BPF programs"))?;
        inputs.files.insert(
            "bpf_programs".into(),
            bpf.iter().map(|(_, host)| file_input(host)).collect(),
        );
        files.extend(bpf);
    }
    // Read by build_initramfs below; gone when this function returns.
    let setup_dir = {
        use std::os::unix::fs::PermissionsExt;
        tempfile::Builder::new()
            .prefix("testbed-guest-setup-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(setup("temp dir"))?
    };
    files.extend(guest_setup_files(
        loaded,
        rootfs.as_ref(),
        setup_dir.path(),
    )?);
    let img_inputs = image::InitramfsInputs {
        agent: agent.to_path_buf(),
        busybox: paths::busybox(),
        kernel_release: kernel.release.clone(),
        modules,
        include: spec.image.include.clone(),
        files,
    };
    progress.event(Event::Stage("building initramfs".into()));
    let img = crate::host::phases::time("images", || image::build_initramfs(&img_inputs, cache))
        .map_err(setup("initramfs"))?;
    inputs.files.insert(
        "initramfs".into(),
        serde_json::to_value(&img).unwrap_or_default(),
    );
    if let Some((recipe, r)) = &rootfs {
        inputs
            .files
            .insert("rootfs".into(), rootfs_input(recipe, r));
    }
    Ok(SharedImage {
        image: img,
        inputs,
        rootfs: rootfs.map(|(_, r)| r),
    })
}

/// The manifest's record of the root image: name, key, recipe hash and
/// the package versions (named candidates, and all installed). The name
/// is the spec's: recipes of equal content share one image.
fn rootfs_input(
    recipe: &image::recipe::Recipe,
    r: &image::rootfs::BuiltRootfs,
) -> serde_json::Value {
    serde_json::json!({
        "name": recipe.name,
        "key": r.info.key,
        "recipe_sha256": r.info.recipe_sha256,
        "path": r.path,
        "bytes": r.info.bytes,
        "suite": r.info.suite,
        "candidates": r.info.candidates,
        "installed": r.info.installed,
    })
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
    let SharedImage {
        image: img,
        inputs,
        rootfs,
    } = build_shared_image(loaded, kernel, agent, helpers, needs_bpf, cache, progress)?;
    let mut qemu_devices: Vec<_> = prepared.iter().map(|d| d.qemu.clone()).collect();
    if let Some(r) = rootfs {
        qemu_devices.push(crate::machine::qemu::argv::QemuDevice::RootImage {
            path: r.path,
            serial: image::rootfs::SERIAL.into(),
        });
    }

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
        qmp_socket: None,
        devices: qemu_devices,
        nics: Vec::new(),
        clock: spec.vm.clock,
    };
    let mut requested = opts.accel.unwrap_or(spec.vm.accel);
    if spec.vm.clock == crate::machine::qemu::argv::Clock::Instructions {
        // icount is TCG's: no KVM probe, and no KVM when asked for.
        requested = match requested {
            AccelChoice::Kvm => {
                return Err(RunError::Setup(
                    "[vm] clock = \"instructions\" needs TCG (QEMU's icount), and --accel kvm asks for KVM: drop --accel kvm".into(),
                ));
            }
            _ => AccelChoice::Tcg,
        };
    }
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
    let nonce = crate::host::random::hex(8);
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return accel::probe_outcome(started, Err(format!("temp dir: {e}"))),
    };
    let mut c = base.clone();
    c.accel = Accel::Kvm;
    // No devices: the probe asks only whether a guest runs at all.
    c.devices.clear();
    c.memory_mib = c.memory_mib.min(512);
    c.append = crate::machine::qemu::argv::kernel_append(Accel::Kvm, &nonce, true, &[]);
    c.console_log = dir.path().join("console.log");
    c.agent_socket = dir.path().join("a.sock");
    let argv = crate::machine::qemu::argv::build_argv(&c);
    let log = dir.path().join("qemu.log");
    let outcome = (|| {
        let mut vm = crate::machine::qemu::process::VmProcess::spawn(&argv, &log)
            .map_err(|e| e.to_string())?;
        let ch =
            crate::machine::qemu::channel::Channel::connect_vm(&c.agent_socket, &mut vm, timeout)
                .map_err(|e| {
                format!(
                    "{e}: {}",
                    crate::machine::qemu::process::tail_lines(&log, 3).replace('\n', " | ")
                )
            })?;
        // recv_timeout does the waiting between checks.
        let hello = wait::poll(wait::Until::after(timeout), Duration::ZERO, || {
            if let Some(status) = vm.try_wait() {
                return Some(Err(format!(
                    "QEMU exited ({status}): {}",
                    crate::machine::qemu::process::tail_lines(&log, 3).replace('\n', " | ")
                )));
            }
            match ch.recv_timeout(Duration::from_millis(100)) {
                Ok(Some(testbed_agent::protocol::GuestMsg::Hello(h))) if h.nonce == nonce => {
                    Some(Ok(()))
                }
                Ok(_) => None,
                Err(e) => Some(Err(format!("agent channel: {e}"))),
            }
        });
        match hello {
            wait::Waited::Done(r) => r,
            wait::Waited::TimedOut | wait::Waited::Interrupted => Err(format!(
                "no agent within {}s (guest hung; last console line: {:?})",
                timeout.as_secs(),
                crate::machine::qemu::process::tail_lines(&c.console_log, 1)
            )),
        }
    })();
    accel::probe_outcome(started, outcome)
}

/// sha256 of each patch the kernel was built with, from its cache entry
/// (`<entry>/patches/<name>`, beside the bzImage); a patch the entry does
/// not hold is left out (`pack` says it is missing).
fn patch_digests(kernel: &kernel::KernelArtifact) -> BTreeMap<String, String> {
    let Some(entry) = kernel.bzimage.parent() else {
        return BTreeMap::new();
    };
    kernel
        .patches
        .iter()
        .filter_map(|name| {
            let (sha, _) =
                crate::host::fsutil::sha256_file(&entry.join("patches").join(name)).ok()?;
            Some((name.clone(), sha))
        })
        .collect()
}
