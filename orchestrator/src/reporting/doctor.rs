//! `testbed doctor`: what this host has and lacks, and how to fix each.

use std::path::Path;

use crate::machine::qemu::accel;
use crate::{host::paths, inputs::guestbin, inputs::image, inputs::kernel};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone)]
pub struct Finding {
    pub level: Level,
    pub what: String,
    pub detail: String,
    pub fix: Option<String>,
}

fn f(level: Level, what: &str, detail: impl Into<String>, fix: Option<&str>) -> Finding {
    Finding {
        level,
        what: what.into(),
        detail: detail.into(),
        fix: fix.map(str::to_string),
    }
}

/// Runs every check. `probe` allows the real KVM probe boot.
pub fn diagnose(probe: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    let qemu = crate::machine::qemu::qemu_binary();
    match &qemu {
        Some(q) => out.push(f(
            Level::Ok,
            "qemu",
            crate::machine::qemu::process::qemu_version(q)
                .unwrap_or_else(|| q.display().to_string()),
            None,
        )),
        None => out.push(f(
            Level::Fail,
            "qemu",
            "qemu-system-x86_64 not found",
            Some("./x setup (apt-get install qemu-system-x86)"),
        )),
    }
    match paths::busybox() {
        Some(b) => out.push(f(Level::Ok, "busybox", b.display().to_string(), None)),
        None => out.push(f(
            Level::Warn,
            "busybox",
            "busybox-static not installed: guests get no shell",
            Some("apt-get install busybox-static"),
        )),
    }
    let containment = crate::host::cgroup::current();
    out.push(match containment {
        crate::host::cgroup::Containment::Cgroup { .. } => {
            f(Level::Ok, "containment", containment.describe(), None)
        }
        crate::host::cgroup::Containment::ProcessGroup { .. } => f(
            Level::Warn,
            "containment",
            containment.describe(),
            Some("run as root where cgroupfs is mounted: a process that calls setsid escapes its process group"),
        ),
    });
    // KVM, step by step, as the run decides it.
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let dev = accel::dev_kvm_opens(Path::new("/dev/kvm"));
    let flags = accel::cpu_has_virt_flags(&cpuinfo);
    out.push(match &dev {
        Ok(()) => f(Level::Ok, "/dev/kvm", "opens read-write", None),
        Err(e) => f(
            Level::Warn,
            "/dev/kvm",
            e.to_string(),
            Some("load kvm_intel/kvm_amd and add yourself to group kvm, or use TCG"),
        ),
    });
    out.push(match &flags {
        Ok(()) => f(Level::Ok, "cpu virtualisation", "vmx/svm present", None),
        Err(e) => f(
            Level::Warn,
            "cpu virtualisation",
            e.to_string(),
            Some("enable VT-x/AMD-V (or nested virtualisation) to use KVM"),
        ),
    });
    let cache = paths::cache_root();
    let kernel = kernel::lookup_cached(&paths::kernel_configs(), "debian-cloud", &cache)
        .ok()
        .flatten();
    match &kernel {
        Some(k) => out.push(f(
            Level::Ok,
            "kernel debian-cloud",
            format!(
                "{} (cached, key {})",
                k.description,
                &k.key[..12.min(k.key.len())]
            ),
            None,
        )),
        None => out.push(f(
            Level::Warn,
            "kernel debian-cloud",
            "not fetched yet (the first run fetches it)",
            Some("testbed kernel fetch debian-cloud"),
        )),
    }
    for pin in kernel::pinned_packages(&paths::kernel_configs(), &cache) {
        let what = format!("pin {} {}", pin.package, pin.version);
        let used_by = format!("pinned by {}", pin.descriptors.join(", "));
        out.push(match (&pin.served, &pin.local_copy) {
            (Ok(true), _) => f(Level::Ok, &what, format!("served by apt; {used_by}"), None),
            (_, Some(copy)) => f(
                Level::Ok,
                &what,
                format!("not served by apt here, but a copy is in {copy}; {used_by}"),
                None,
            ),
            (served, None) => f(
                Level::Warn,
                &what,
                match served {
                    Err(why) => format!("apt could not tell whether it is served ({why}); {used_by}"),
                    Ok(_) => format!(
                        "no longer served by apt and not cached: those kernels cannot be built here; {used_by}"
                    ),
                },
                Some("set TESTBED_KERNEL_SOURCE_<PACKAGE> to a copy of its .deb (checked against the pin), or move the pin to a served version"),
            ),
        });
    }
    let mut probe_result = None;
    if dev.is_ok()
        && probe
        && let (Some(q), Some(k)) = (&qemu, &kernel)
    {
        probe_result = Some(run_probe(q, k, &cache));
    }
    let decision = accel::decide(
        crate::planning::spec::AccelChoice::Auto,
        Path::new("/dev/kvm"),
        &cpuinfo,
        &mut || {
            probe_result.clone().unwrap_or(accel::ProbeResult {
                ok: false,
                elapsed_ms: 0,
                detail: "probe not run (needs qemu, the debian-cloud kernel and --probe)".into(),
            })
        },
    );
    if let Some(p) = &probe_result {
        out.push(f(
            if p.ok { Level::Ok } else { Level::Warn },
            "kvm probe boot",
            format!("{} after {} ms", p.detail, p.elapsed_ms),
            (!p.ok).then_some("KVM is unusable on this host: runs use TCG"),
        ));
    }
    match decision {
        Ok(d) => out.push(f(
            if d.used == crate::machine::qemu::argv::Accel::Kvm {
                Level::Ok
            } else {
                Level::Warn
            },
            "accelerator",
            format!(
                "{} in use: {}. {}",
                d.used,
                d.reasons.join("; "),
                d.timing_note()
            ),
            None,
        )),
        Err(e) => out.push(f(Level::Fail, "accelerator", e.to_string(), None)),
    }
    out.extend(tool_findings(crate::host::hosttools::NEEDS));
    for (label, dir) in [
        ("disk (results)", paths::repo_root().join("results")),
        ("disk (cache)", cache.clone()),
    ] {
        let probe_dir = if dir.exists() {
            dir.clone()
        } else {
            dir.parent().map(Path::to_path_buf).unwrap_or(dir.clone())
        };
        match nix::sys::statvfs::statvfs(&probe_dir) {
            Ok(s) => {
                let free = s.blocks_available() * s.fragment_size();
                let gib = free as f64 / (1u64 << 30) as f64;
                let level = if gib < 5.0 { Level::Warn } else { Level::Ok };
                out.push(f(
                    level,
                    label,
                    format!("{gib:.1} GiB free at {}", probe_dir.display()),
                    (gib < 5.0).then_some("free space: a kernel build needs ~3 GiB"),
                ));
            }
            Err(e) => out.push(f(
                Level::Warn,
                label,
                format!("{}: {e}", probe_dir.display()),
                None,
            )),
        }
    }
    out
}

/// One finding per tool the named steps need: where it is, or its package.
pub fn tool_findings(needs: &[&str]) -> Vec<Finding> {
    let table = match crate::host::hosttools::table() {
        Ok(t) => t,
        Err(e) => return vec![f(Level::Fail, "host-tools.txt", e.to_string(), None)],
    };
    let mut out = Vec::new();
    for t in table
        .iter()
        .filter(|t| t.needs.iter().any(|n| needs.contains(&n.as_str())))
    {
        let what = format!("tool {}", t.tool);
        let steps: Vec<&str> = t.needs.iter().map(|n| n.as_str()).collect();
        out.push(match crate::host::hosttools::locate(&t.tool) {
            Ok(at) => f(
                Level::Ok,
                &what,
                format!("{at} [{}]", steps.join(",")),
                None,
            ),
            Err(why) => f(
                Level::Warn,
                &what,
                format!("{why}; needed for {}", steps.join(", ")),
                Some(&format!("{} (or ./x setup)", t.install_hint())),
            ),
        });
    }
    out
}

fn run_probe(qemu: &Path, k: &kernel::KernelArtifact, cache: &Path) -> accel::ProbeResult {
    let repo = paths::repo_root();
    let agent = match guestbin::ensure(&repo, guestbin::AGENT, &mut |_| {}) {
        Ok(a) => a,
        Err(e) => {
            return accel::ProbeResult {
                ok: false,
                elapsed_ms: 0,
                detail: format!("no agent: {e}"),
            };
        }
    };
    let modules = k
        .module_load_order(&k.default_modules())
        .unwrap_or_default()
        .into_iter()
        .map(|m| image::ModuleInput {
            name: m.name,
            path: m.path,
        })
        .collect();
    let img = match image::build_initramfs(
        &image::InitramfsInputs {
            agent,
            busybox: paths::busybox(),
            kernel_release: k.release.clone(),
            modules,
            include: vec![],
            files: vec![],
        },
        cache,
    ) {
        Ok(i) => i,
        Err(e) => {
            return accel::ProbeResult {
                ok: false,
                elapsed_ms: 0,
                detail: format!("no initramfs: {e}"),
            };
        }
    };
    let config = crate::machine::qemu::argv::VmConfig {
        qemu: qemu.to_path_buf(),
        accel: crate::machine::qemu::argv::Accel::Kvm,
        vcpus: 1,
        memory_mib: 512,
        kernel: k.bzimage.clone(),
        initrd: img.path,
        append: String::new(),
        console_log: Default::default(),
        agent_socket: Default::default(),
        qmp_socket: None,
        devices: vec![],
        nics: vec![],
        clock: Default::default(),
    };
    crate::execution::run::probe_boot(&config, accel::probe_timeout())
}

pub fn render(findings: &[Finding]) -> String {
    // One column for the names, as wide as the longest (tool paths run long).
    let width = findings
        .iter()
        .map(|x| x.what.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(20, 48);
    let mut s = String::new();
    for x in findings {
        let tag = match x.level {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        s.push_str(&format!("[{tag}] {:<width$} {}\n", x.what, x.detail));
        if let Some(fix) = &x.fix {
            s.push_str(&format!("       {:<width$} fix: {fix}\n", ""));
        }
    }
    s
}
