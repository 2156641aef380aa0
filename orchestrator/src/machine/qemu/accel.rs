//! Choosing KVM or TCG. /dev/kvm opening is not enough: on some hosts it
//! opens but QEMU aborts ("failed to set MSR") or the guest hangs. KVM is
//! used only after /dev/kvm opens, the CPU shows vmx/svm, and a real probe
//! boot reaches the agent; otherwise TCG, with the reason recorded.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::argv::Accel;

/// What a spec or `--accel` asks for (`auto` decides by probe, below).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccelChoice {
    #[default]
    Auto,
    Kvm,
    Tcg,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ProbeResult {
    pub ok: bool,
    pub elapsed_ms: u64,
    /// What happened: "agent ready", "QEMU exited: ...", "no agent within 20s".
    pub detail: String,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct AccelDecision {
    pub requested: AccelChoice,
    pub used: Accel,
    /// Why `used` was chosen, one finding per line.
    pub reasons: Vec<String>,
    pub probe: Option<ProbeResult>,
}

impl AccelDecision {
    /// TCG timings keep only the shape of a result.
    pub fn timing_note(&self) -> &'static str {
        match self.used {
            Accel::Kvm => "KVM: timings are meaningful",
            Accel::Tcg => {
                "TCG (software emulation): timings are shape-only, not comparable to hardware"
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("KVM was requested but is not usable: {}", reasons.join("; "))]
pub struct KvmUnusable {
    pub reasons: Vec<String>,
}

/// Why KVM cannot be used here, found before any probe boot.
#[derive(Debug, thiserror::Error)]
pub enum NoKvm {
    #[error("{} does not open: {source}", dev.display())]
    DevKvm {
        dev: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("the CPU shows no vmx/svm flag{}", if *kvm_pvm {
        " (kvm_pvm loaded: a paging-based nested hypervisor, not hardware virtualisation)"
    } else {
        ""
    })]
    NoVirtFlags { kvm_pvm: bool },
}

/// /dev/kvm opens read-write.
pub fn dev_kvm_opens(dev: &Path) -> Result<(), NoKvm> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dev)
        .map(|_| ())
        .map_err(|source| NoKvm::DevKvm {
            dev: dev.to_path_buf(),
            source,
        })
}

/// The CPU advertises hardware virtualisation (vmx or svm).
pub fn cpu_has_virt_flags(cpuinfo: &str) -> Result<(), NoKvm> {
    let flags = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .unwrap_or_default();
    if flags.contains(&"vmx") || flags.contains(&"svm") {
        Ok(())
    } else {
        Err(NoKvm::NoVirtFlags {
            kvm_pvm: Path::new("/sys/module/kvm_pvm").exists(),
        })
    }
}

/// Decides the accelerator. `probe` boots the real kernel+initramfs under
/// KVM and reports whether the agent came up.
pub fn decide(
    requested: AccelChoice,
    dev_kvm: &Path,
    cpuinfo: &str,
    probe: &mut dyn FnMut() -> ProbeResult,
) -> Result<AccelDecision, KvmUnusable> {
    if requested == AccelChoice::Tcg {
        return Ok(AccelDecision {
            requested,
            used: Accel::Tcg,
            reasons: vec!["TCG requested".into()],
            probe: None,
        });
    }
    let mut reasons = Vec::new();
    let mut prechecks_ok = true;
    for check in [dev_kvm_opens(dev_kvm), cpu_has_virt_flags(cpuinfo)] {
        match check {
            Ok(()) => {}
            Err(r) => {
                prechecks_ok = false;
                reasons.push(r.to_string());
            }
        }
    }
    let mut probe_result = None;
    // An explicit request still probes when /dev/kvm opens, to show why it fails.
    let try_probe =
        prechecks_ok || (requested == AccelChoice::Kvm && dev_kvm_opens(dev_kvm).is_ok());
    if try_probe {
        let p = probe();
        if p.ok {
            reasons.push(format!(
                "KVM probe boot reached the agent in {} ms",
                p.elapsed_ms
            ));
        } else {
            reasons.push(format!("KVM probe boot failed: {}", p.detail));
        }
        probe_result = Some(p);
    }
    let kvm_ok = prechecks_ok && probe_result.as_ref().is_some_and(|p| p.ok);
    if kvm_ok {
        return Ok(AccelDecision {
            requested,
            used: Accel::Kvm,
            reasons,
            probe: probe_result,
        });
    }
    if requested == AccelChoice::Kvm {
        return Err(KvmUnusable { reasons });
    }
    reasons.push("falling back to TCG".into());
    Ok(AccelDecision {
        requested,
        used: Accel::Tcg,
        reasons,
        probe: probe_result,
    })
}

/// Outcome of waiting for a probe VM, shared by the real probe.
pub fn probe_outcome<E: std::fmt::Display>(
    started: Instant,
    outcome: Result<(), E>,
) -> ProbeResult {
    let elapsed_ms = started.elapsed().as_millis() as u64;
    match outcome {
        Ok(()) => ProbeResult {
            ok: true,
            elapsed_ms,
            detail: "agent ready".into(),
        },
        Err(detail) => ProbeResult {
            ok: false,
            elapsed_ms,
            detail: detail.to_string(),
        },
    }
}

/// Time a KVM probe boot may take (a KVM boot takes about a second):
/// $TESTBED_KVM_PROBE_TIMEOUT seconds, default 20.
pub fn probe_timeout() -> Duration {
    std::env::var("TESTBED_KVM_PROBE_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| *v > 0.0)
        .map_or(Duration::from_secs(20), Duration::from_secs_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VMX: &str = "processor\t: 0\nflags\t\t: fpu vme vmx sse\n";
    const NOVMX: &str = "processor\t: 0\nflags\t\t: fpu vme sse\n";

    fn ok_probe() -> ProbeResult {
        ProbeResult {
            ok: true,
            elapsed_ms: 900,
            detail: "agent ready".into(),
        }
    }
    fn hung_probe() -> ProbeResult {
        ProbeResult {
            ok: false,
            elapsed_ms: 20_000,
            detail: "no agent within 20s".into(),
        }
    }

    #[test]
    fn tcg_requested_never_probes() {
        let d = decide(AccelChoice::Tcg, Path::new("/dev/null"), VMX, &mut || {
            panic!("probed")
        })
        .unwrap();
        assert_eq!(d.used, Accel::Tcg);
    }

    #[test]
    fn auto_uses_kvm_only_when_every_check_passes() {
        // /dev/null opens read-write: it stands in for a working /dev/kvm.
        let d = decide(
            AccelChoice::Auto,
            Path::new("/dev/null"),
            VMX,
            &mut ok_probe,
        )
        .unwrap();
        assert_eq!(d.used, Accel::Kvm);
        let d = decide(
            AccelChoice::Auto,
            Path::new("/dev/null"),
            VMX,
            &mut hung_probe,
        )
        .unwrap();
        assert_eq!(d.used, Accel::Tcg);
        assert!(
            d.reasons.iter().any(|r| r.contains("no agent within")),
            "{:?}",
            d.reasons
        );
        let d = decide(
            AccelChoice::Auto,
            Path::new("/dev/null"),
            NOVMX,
            &mut || panic!("probed"),
        )
        .unwrap();
        assert_eq!(d.used, Accel::Tcg);
        assert!(d.reasons[0].contains("no vmx/svm"), "{:?}", d.reasons);
        let d = decide(
            AccelChoice::Auto,
            Path::new("/nonexistent/kvm"),
            VMX,
            &mut || panic!("probed"),
        )
        .unwrap();
        assert!(d.reasons[0].contains("does not open"), "{:?}", d.reasons);
    }

    #[test]
    fn kvm_requested_fails_loudly_with_the_reasons() {
        let e = decide(
            AccelChoice::Kvm,
            Path::new("/dev/null"),
            NOVMX,
            &mut hung_probe,
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("no vmx/svm") && msg.contains("no agent within"),
            "{msg}"
        );
    }
}
