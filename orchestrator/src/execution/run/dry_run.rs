//! `testbed run SPEC --dry-run`: the passthrough checks, every sysfs write
//! the run would make (in order, binding and restoring) and the QEMU argv
//! it would start, and none of it done: no run directory, no state file,
//! no build. A kernel already cached is shown by its path, one not built
//! by a placeholder, and so is a guest image; the initramfs is always a
//! placeholder (building it is building the agent). KVM is not probed: the argv is KVM's unless TCG is
//! asked for, and passthrough is refused under TCG as a run would.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{RunError, RunOptions};
use crate::execution::devices::passthrough::{self, bind_writes, restore_writes};
use crate::execution::devices::sysfs::{Host, Kernel, ROOT_ENV, Recorder, SysWrite};
use crate::execution::devices::{self, state};
use crate::machine::qemu::accel::AccelDecision;
use crate::machine::qemu::argv::{Accel, QemuDevice, VmConfig, build_argv, kernel_append};
use crate::planning::spec::{AccelChoice, ExecutorKind, LoadedSpec, Origin};
use crate::{host::paths, inputs::image, inputs::kernel};

/// Prints the dry run; [`RunError::DryRun`] when all is printed, else why
/// the run would be refused.
pub(super) fn run(loaded: &LoadedSpec, spec_path: &Path, opts: &RunOptions) -> RunError {
    match report(
        loaded,
        spec_path,
        opts,
        &Host::for_dry_run(),
        &paths::cache_root(),
    ) {
        Ok(text) => {
            crate::host::stdout::print(format_args!("{text}"));
            RunError::DryRun
        }
        Err(e) => e,
    }
}

fn refused(e: devices::DeviceError) -> RunError {
    RunError::Setup(e.to_string())
}

/// The dry run's text.
pub(super) fn report(
    loaded: &LoadedSpec,
    spec_path: &Path,
    opts: &RunOptions,
    host: &Host,
    cache: &Path,
) -> Result<String, RunError> {
    let spec = &loaded.spec;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "dry run of {}: nothing is written, bound or started",
        spec_path.display()
    );
    if !host.is_real() {
        let _ = writeln!(
            out,
            "sysfs and /proc read under {} (${ROOT_ENV}, a test aid)",
            host.root.display()
        );
    }
    let run_dir = opts
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("results/{}/<run-id>", spec.experiment.name)));
    let _ = writeln!(out, "run directory (not created): {}", run_dir.display());
    let state_dir = state::dir(cache);
    let mut kernel = Recorder::default();
    let mut restore: Vec<SysWrite> = Vec::new();
    let mut qemu_devices = Vec::new();
    let mut passthrough = Vec::new();
    for d in &spec.devices {
        match d.kind.def().origin() {
            Origin::Emulated => {
                qemu_devices.push(devices::planned_emulated(d, &run_dir.join("devices")));
                continue;
            }
            Origin::HostPci => {}
        }
        let (p, c) = devices::check_passthrough(d, host).map_err(refused)?;
        let _ = writeln!(
            out,
            "device {:?}: passthrough of {} (vendor {}, device {}), now on {}",
            d.name,
            c.pci,
            c.vendor,
            c.device,
            c.driver.as_deref().unwrap_or("no driver")
        );
        let _ = writeln!(out, "  checked: {}", checked(&c, d.bind));
        if d.bind && c.driver.as_deref() != Some("vfio-pci") {
            passthrough::check_not_taken(&state_dir, &d.name, &c.pci).map_err(refused)?;
            let original = c.driver.clone().unwrap_or_default();
            for w in bind_writes(&c.pci) {
                let _ = kernel.write(host, &w);
            }
            // Restored last bound first, as the run does.
            let mut back = restore_writes(&c.pci, &original, Some("vfio-pci"));
            back.append(&mut restore);
            restore = back;
            let _ = writeln!(
                out,
                "  state file (not written): {}",
                state::file(&state_dir, &c.pci).display()
            );
        } else {
            let _ = writeln!(out, "  no sysfs writes: it is on vfio-pci already");
        }
        qemu_devices.push(p.qemu.clone());
        passthrough.push(p);
    }
    let binds = kernel.0.len();
    for w in restore {
        let _ = kernel.write(host, &w);
    }
    if !kernel.0.is_empty() {
        let _ = writeln!(out, "sysfs writes before the first boot:");
        for (i, w) in kernel.0.iter().enumerate() {
            if i == binds {
                let _ = writeln!(
                    out,
                    "sysfs writes after the run (on errors and Ctrl-C too):"
                );
            }
            let _ = writeln!(out, "  {}. {w}", i + 1);
        }
    }
    let executor = opts.executor.unwrap_or(spec.experiment.executor);
    if executor != ExecutorKind::Qemu {
        let _ = writeln!(out, "executor {executor:?}: no QEMU command line");
        return Ok(out);
    }
    let mut requested = opts.accel.unwrap_or(spec.vm.accel);
    if spec.vm.clock == crate::machine::qemu::argv::Clock::Instructions {
        // As a run: icount is TCG's (a spec asking for KVM was refused).
        let _ = writeln!(
            out,
            "clock: instructions (QEMU icount: the guest's times count instructions, not latency)"
        );
        requested = AccelChoice::Tcg;
    }
    let accel = if requested == AccelChoice::Tcg {
        let decision = AccelDecision {
            requested,
            used: Accel::Tcg,
            reasons: vec!["TCG requested".into()],
            probe: None,
        };
        passthrough::require_kvm(&passthrough, &decision).map_err(refused)?;
        let _ = writeln!(out, "accelerator: tcg (requested)");
        Accel::Tcg
    } else {
        let why = if passthrough.is_empty() {
            "a run probes it and falls back to TCG"
        } else {
            "passthrough needs KVM: a run probes it and refuses without it"
        };
        let _ = writeln!(out, "accelerator: kvm, not probed in a dry run ({why})");
        Accel::Kvm
    };
    let name = &spec.kernel.name;
    let bzimage = match kernel::lookup_cached(&paths::kernel_configs(), name, cache) {
        Ok(Some(k)) => {
            let _ = writeln!(out, "kernel {name}: cached, {}", k.bzimage.display());
            k.bzimage
        }
        found => {
            let why = match found {
                Err(e) => e.to_string(),
                _ => format!("not built (`testbed kernel build {name}` builds it)"),
            };
            let _ = writeln!(
                out,
                "kernel {name}: {why}; a dry run builds nothing, the argv shows a placeholder"
            );
            PathBuf::from(format!("<kernel {name}: not built>"))
        }
    };
    let _ = writeln!(
        out,
        "initramfs: built by the run (agent, helpers, modules); the argv shows a placeholder"
    );
    if let Some(name) = &spec.image.name {
        qemu_devices.push(QemuDevice::RootImage {
            path: root_image_line(loaded, name, cache, &mut out)?,
            serial: image::rootfs::SERIAL.into(),
        });
    }
    if loaded.spec.topology.is_some() {
        let _ = writeln!(
            out,
            "pair topology: this is the client VM's argv, without its link (the server VM's is alike)"
        );
    }
    let qemu = crate::machine::qemu::qemu_binary().unwrap_or_else(|| {
        let _ = writeln!(out, "qemu-system-x86_64 is not installed");
        PathBuf::from("qemu-system-x86_64")
    });
    let config = VmConfig {
        qemu,
        accel,
        vcpus: spec.vm.vcpus,
        memory_mib: spec.vm.memory.mib(),
        kernel: bzimage,
        initrd: PathBuf::from("<initramfs>"),
        append: kernel_append(accel, "<nonce>", false, &spec.vm.cmdline),
        console_log: run_dir.join("console.log"),
        agent_socket: PathBuf::from("<private-dir>/agent.sock"),
        qmp_socket: Some(PathBuf::from("<private-dir>/qmp.sock")),
        devices: qemu_devices,
        nics: Vec::new(),
        clock: spec.vm.clock,
    };
    let _ = writeln!(out, "QEMU command line (not started):");
    out.push_str(&render_argv(&build_argv(&config)));
    Ok(out)
}

/// The guest image's path if it is cached (apt resolves the key, as a run
/// does), else a placeholder; a bad recipe is refused at `image.name`.
fn root_image_line(
    loaded: &LoadedSpec,
    name: &str,
    cache: &Path,
    out: &mut String,
) -> Result<PathBuf, RunError> {
    let at = |e: String| RunError::Spec(loaded.error_at("image", Some("name"), e));
    let recipe = image::recipe::load(&image::recipes_dir(), name).map_err(|e| at(e.to_string()))?;
    match image::rootfs::lookup(&recipe, cache) {
        Ok(Some(built)) => {
            let _ = writeln!(out, "guest image {name}: cached, {}", built.path.display());
            Ok(built.path)
        }
        found => {
            let why = match found {
                Err(e) => e.to_string(),
                _ => format!("not built (`testbed image build {name}` builds it)"),
            };
            let _ = writeln!(
                out,
                "guest image {name}: {why}; a dry run builds nothing, the argv shows a placeholder"
            );
            Ok(PathBuf::from(format!("<image {name}: not built>")))
        }
    }
}

/// What the checks found, in one line.
fn checked(c: &devices::checks::Controller, bind: bool) -> String {
    let mut parts = vec![format!("NVMe controller ({})", devices::checks::NVME_CLASS)];
    if bind {
        let group = c.iommu_group.as_deref().unwrap_or("?");
        parts.push(if c.group_peers.is_empty() {
            format!("IOMMU group {group}, no other device")
        } else {
            format!("IOMMU group {group} with {}", c.group_peers.join(", "))
        });
        parts.push("vfio-pci loaded".into());
    }
    parts.push(if c.disks.is_empty() {
        "no namespace visible".into()
    } else {
        format!(
            "{} not mounted, not swap, not root, no holders",
            c.disks.join(", ")
        )
    });
    parts.join("; ")
}

/// One option and its value a line, quoted for a shell.
fn render_argv(argv: &[String]) -> String {
    let quote = |a: &str| {
        if a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c))
        {
            a.to_string()
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        }
    };
    let mut lines = Vec::new();
    let mut i = 0;
    while i < argv.len() {
        let mut line = quote(&argv[i]);
        if argv[i].starts_with('-') && argv.get(i + 1).is_some_and(|v| !v.starts_with('-')) {
            line.push(' ');
            line.push_str(&quote(&argv[i + 1]));
            i += 1;
        }
        lines.push(line);
        i += 1;
    }
    let mut out = String::new();
    let last = lines.len().saturating_sub(1);
    for (n, l) in lines.iter().enumerate() {
        let indent = if n == 0 { "  " } else { "    " };
        let cont = if n == last { "" } else { " \\" };
        let _ = writeln!(out, "{indent}{l}{cont}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::execution::devices::fake::{FakeHost, PCI};

    const SPEC: &str = "[experiment]\nname = \"pt\"\n[[devices]]\nname = \"fast\"\nkind = \"passthrough\"\npci = \"0000:01:00.0\"\nbind = true\n[[devices]]\nname = \"scratch\"\nkind = \"nvme\"\nsize = \"64M\"\n[workload]\nkind = \"randread\"\ndevice = \"fast\"\n";

    fn dry(f: &FakeHost, src: &str, opts: &RunOptions) -> Result<String, RunError> {
        let loaded = crate::planning::spec::parse(Path::new("pt.toml"), src).unwrap();
        report(
            &loaded,
            Path::new("pt.toml"),
            opts,
            &f.host,
            &f.path("cache"),
        )
    }

    #[test]
    fn a_dry_run_lists_the_writes_in_order_and_does_none() {
        let f = FakeHost::good();
        let opts = RunOptions {
            out: Some("/r/run".into()),
            ..RunOptions::default()
        };
        let text = dry(&f, SPEC, &opts).unwrap();
        let writes: Vec<&str> = text
            .lines()
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .map(str::trim)
            .collect();
        assert_eq!(
            writes,
            [
                "1. write \"0000:01:00.0\" to /sys/bus/pci/devices/0000:01:00.0/driver/unbind",
                "2. write \"vfio-pci\" to /sys/bus/pci/devices/0000:01:00.0/driver_override",
                "3. write \"0000:01:00.0\" to /sys/bus/pci/drivers_probe",
                "4. write \"0000:01:00.0\" to /sys/bus/pci/drivers/vfio-pci/unbind",
                "5. write \"\\n\" to /sys/bus/pci/devices/0000:01:00.0/driver_override",
                "6. write \"0000:01:00.0\" to /sys/bus/pci/drivers/nvme/bind",
            ],
            "{text}"
        );
        assert!(
            text.contains("    -accel kvm \\\n    -cpu host \\\n"),
            "{text}"
        );
        assert!(
            text.contains("-device vfio-pci,host=0000:01:00.0"),
            "{text}"
        );
        assert!(
            text.contains("-drive file=/r/run/devices/scratch.img,"),
            "{text}"
        );
        assert!(text.contains("kernel debian-cloud: not built"), "{text}");
        // Nothing happened: no state file, the controller on nvme.
        assert!(!f.path("cache/passthrough").exists());
        assert_eq!(f.driver(PCI).as_deref(), Some("nvme"));
        assert_eq!(f.read("sys/bus/pci/drivers_probe"), "");
    }

    #[test]
    fn a_dry_run_shows_the_guest_image_drive() {
        let f = FakeHost::good();
        let src = "[experiment]\nname = \"img\"\n[image]\nname = \"test-tiny\"\n[[devices]]\nname = \"scratch\"\nkind = \"nvme\"\nsize = \"64M\"\n[workload]\nkind = \"randread\"\ndevice = \"scratch\"\n";
        let text = dry(&f, src, &RunOptions::default()).unwrap();
        // The fake cache holds no image: a placeholder, read-only.
        assert!(text.contains("guest image test-tiny: "), "{text}");
        assert!(
            text.contains(
                "-drive 'file=<image test-tiny: not built>,if=none,id=root1,format=raw,readonly=on,"
            ),
            "{text}"
        );
        assert!(text.contains("serial=testbed-root"), "{text}");
    }

    #[test]
    fn a_dry_run_refuses_what_the_run_would_refuse() {
        let f = FakeHost::good();
        let tcg = RunOptions {
            accel: Some(AccelChoice::Tcg),
            ..RunOptions::default()
        };
        let e = dry(&f, SPEC, &tcg).unwrap_err().to_string();
        assert_eq!(e, "device \"fast\": passthrough needs KVM: TCG requested");
        f.append("proc/swaps", "/dev/nvme0n1p1 partition 1024 0 -2\n");
        let e = dry(&f, SPEC, &RunOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("partition /dev/nvme0n1p1 is in use as swap"),
            "{e}"
        );
    }
}
