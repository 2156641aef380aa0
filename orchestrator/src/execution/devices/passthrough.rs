//! `bind = true`: take an NVMe controller from the nvme driver for a run
//! and give it back afterwards, on every exit path, and after a crash
//! through the state file and `testbed passthrough restore`.

use std::path::{Path, PathBuf};

use super::checks::{self, Controller};
use super::state::{self, State};
use super::sysfs::{Host, Kernel, RealKernel, SysWrite};
use super::usage::ProcFiles;
use super::{DeviceError, PreparedDevice};
use crate::execution::executor::{Boot, BootError, BootRecord, Executor};
use crate::machine::qemu::accel::AccelDecision;
use crate::machine::qemu::argv::Accel;
use crate::planning::spec::Origin;

const VFIO: &str = "vfio-pci";

/// The writes that move `pci` from its driver to vfio-pci, in order.
pub fn bind_writes(pci: &str) -> Vec<SysWrite> {
    let dev = format!("sys/bus/pci/devices/{pci}");
    vec![
        SysWrite::new(format!("{dev}/driver/unbind"), pci),
        SysWrite::new(format!("{dev}/driver_override"), VFIO),
        SysWrite::new("sys/bus/pci/drivers_probe", pci),
    ]
}

/// The writes that give `pci` back to `original`, from the driver it is on
/// now (`current`): vfio-pci after a run, none after a crash mid-bind.
pub fn restore_writes(pci: &str, original: &str, current: Option<&str>) -> Vec<SysWrite> {
    let mut w = Vec::new();
    if current == Some(VFIO) {
        w.push(SysWrite::new(
            format!("sys/bus/pci/drivers/{VFIO}/unbind"),
            pci,
        ));
    }
    // An empty override ("\n") lets the normal driver match again.
    w.push(SysWrite::new(
        format!("sys/bus/pci/devices/{pci}/driver_override"),
        "\n",
    ));
    if current != Some(original) {
        w.push(SysWrite::new(
            format!("sys/bus/pci/drivers/{original}/bind"),
            pci,
        ));
    }
    w
}

/// A sysfs write the kernel refused: the write and its error.
#[derive(Debug, thiserror::Error)]
#[error("{write}: {source}")]
struct WriteRefused {
    write: SysWrite,
    source: std::io::Error,
}

fn apply(kernel: &mut dyn Kernel, host: &Host, writes: &[SysWrite]) -> Result<(), WriteRefused> {
    for w in writes {
        kernel.write(host, w).map_err(|source| WriteRefused {
            write: w.clone(),
            source,
        })?;
    }
    Ok(())
}

/// A controller the testbed took from its driver.
#[derive(Debug, Clone)]
pub struct Binding {
    pub state_file: PathBuf,
    pub state: State,
}

fn failed(s: &State, reason: String) -> DeviceError {
    DeviceError::Passthrough {
        name: s.name.clone(),
        pci: s.pci.clone(),
        reason,
    }
}

/// Refuses a controller another testbed took (its state file exists).
pub fn check_not_taken(state_dir: &Path, name: &str, pci: &str) -> Result<(), DeviceError> {
    let path = state::file(state_dir, pci);
    if !path.exists() {
        return Ok(());
    }
    let holder = match state::read(&path) {
        Ok(o) if o.owner_alive() => format!("testbed pid {} (running)", o.pid),
        Ok(o) => format!(
            "testbed pid {} (gone; restore it with `{}`)",
            o.pid,
            o.restore_command()
        ),
        Err(e) => e.to_string(),
    };
    Err(DeviceError::Passthrough {
        name: name.to_string(),
        pci: pci.to_string(),
        reason: format!("already taken by {holder}: {}", path.display()),
    })
}

/// Moves a checked controller to vfio-pci, recording its driver first.
/// None when it is already on vfio-pci (nothing to do or undo). On a
/// failure it puts the controller back at once.
pub fn bind(
    host: &Host,
    kernel: &mut dyn Kernel,
    state_dir: &Path,
    name: &str,
    c: &Controller,
    run_dir: &Path,
) -> Result<Option<Binding>, DeviceError> {
    let original = match c.driver.as_deref() {
        Some(VFIO) => return Ok(None),
        Some(d) => d.to_string(),
        None => String::new(),
    };
    let pid = std::process::id();
    let s = State {
        pci: c.pci.clone(),
        name: name.to_string(),
        original_driver: original,
        vendor: c.vendor.clone(),
        device: c.device.clone(),
        run_dir: run_dir.to_path_buf(),
        pid,
        pid_start_ticks: crate::host::procfs::start_ticks(pid),
        time: crate::recording::results::manifest::utc_now(),
    };
    let path = state::file(state_dir, &c.pci);
    check_not_taken(state_dir, name, &c.pci)?;
    if s.original_driver.is_empty() {
        return Err(failed(
            &s,
            "bound to no driver: nothing to restore it to".into(),
        ));
    }
    state::write(state_dir, &s).map_err(|e| {
        failed(
            &s,
            format!("cannot record its driver in {}: {e}", path.display()),
        )
    })?;
    let b = Binding {
        state_file: path,
        state: s,
    };
    let outcome = apply(kernel, host, &bind_writes(&c.pci))
        .map_err(|e| e.to_string())
        .and_then(|()| match host.driver(&c.pci) {
            Some(d) if d == VFIO => Ok(()),
            other => Err(format!(
                "it ended on {}, not {VFIO}",
                other.as_deref().unwrap_or("no driver")
            )),
        });
    match outcome {
        Ok(()) => Ok(Some(b)),
        Err(why) => Err(match restore(host, kernel, &b) {
            Ok(_) => failed(
                &b.state,
                format!(
                    "binding to {VFIO} failed: {why}; it is back on {}",
                    b.state.original_driver
                ),
            ),
            Err(e) => failed(
                &b.state,
                format!("binding to {VFIO} failed: {why}; then {e}"),
            ),
        }),
    }
}

/// Gives the controller back to its original driver and removes the state
/// file; what it did, or why not (the state file is then kept).
pub fn restore(host: &Host, kernel: &mut dyn Kernel, b: &Binding) -> Result<String, DeviceError> {
    let s = &b.state;
    let keep = |why: String| {
        failed(
            s,
            format!(
                "restoring {} failed: {why}; the state is kept in {}: run `{}` as root",
                s.original_driver,
                b.state_file.display(),
                s.restore_command()
            ),
        )
    };
    let current = host.driver(&s.pci);
    if let Some(d) = current.as_deref()
        && d != VFIO
        && d != s.original_driver
    {
        return Err(keep(format!(
            "it is now on {d}, neither {VFIO} nor {}: left as it is",
            s.original_driver
        )));
    }
    apply(
        kernel,
        host,
        &restore_writes(&s.pci, &s.original_driver, current.as_deref()),
    )
    .map_err(|e| keep(e.to_string()))?;
    match host.driver(&s.pci) {
        Some(d) if d == s.original_driver => {}
        other => {
            return Err(keep(format!(
                "it ended on {}",
                other.as_deref().unwrap_or("no driver")
            )));
        }
    }
    match std::fs::remove_file(&b.state_file) {
        // Someone ran `testbed passthrough restore --force` meanwhile.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(keep(format!("removing {}: {e}", b.state_file.display()))),
        Ok(()) => {}
    }
    Ok(format!(
        "passthrough {}: device {:?} is back on {}",
        s.pci, s.name, s.original_driver
    ))
}

/// The controllers a run took; restored when dropped, on every exit path.
pub struct Bound {
    host: Host,
    kernel: Box<dyn Kernel>,
    bindings: Vec<Binding>,
}

impl Bound {
    pub fn new(host: Host, kernel: Box<dyn Kernel>) -> Bound {
        Bound {
            host,
            kernel,
            bindings: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    pub fn bindings(&self) -> &[Binding] {
        &self.bindings
    }

    /// Restores every controller, last bound first.
    pub fn restore_all(&mut self) -> Vec<Result<String, DeviceError>> {
        let mut out = Vec::new();
        while let Some(b) = self.bindings.pop() {
            out.push(restore(&self.host, self.kernel.as_mut(), &b));
        }
        out
    }

    /// The executor, holding the controllers until it is dropped (after
    /// its last QEMU is gone).
    pub fn hold(self, inner: Box<dyn Executor>) -> Box<dyn Executor> {
        if self.is_empty() {
            return inner;
        }
        Box::new(Holding {
            inner,
            _bound: self,
        })
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        for r in self.restore_all() {
            match r {
                Ok(line) => eprintln!("[testbed] {line}"),
                Err(e) => eprintln!("[testbed] error: {e}"),
            }
        }
    }
}

/// An executor and the controllers it uses; fields drop in order, so the
/// executor (and its QEMU) goes before the controllers are given back.
struct Holding {
    inner: Box<dyn Executor>,
    _bound: Bound,
}

impl Executor for Holding {
    fn run_boot(&mut self, boot: Boot<'_>) -> Result<(BootRecord, usize), BootError> {
        self.inner.run_boot(boot)
    }
}

/// Checks again (things may have changed while the image was built) and
/// binds every `bind = true` controller; a failure restores those bound.
pub fn bind_all(
    prepared: &[PreparedDevice],
    host: Host,
    kernel: Box<dyn Kernel>,
    state_dir: &Path,
    run_dir: &Path,
) -> Result<Bound, DeviceError> {
    let mut bound = Bound::new(host, kernel);
    let wanted: Vec<_> = prepared
        .iter()
        .filter(|p| p.spec.kind.def().origin() == Origin::HostPci && p.spec.bind)
        .collect();
    if wanted.is_empty() {
        return Ok(bound);
    }
    let first = &wanted[0].spec;
    let proc = ProcFiles::read(&bound.host).map_err(|reason| {
        super::refused(
            &first.name,
            first.pci.as_deref().unwrap_or_default(),
            reason,
        )
    })?;
    for p in wanted {
        let pci = p.spec.pci.as_deref().unwrap_or_default();
        let c = checks::check_bindable(&bound.host, pci, &proc)
            .map_err(|reason| super::refused(&p.spec.name, pci, reason))?;
        let b = bind(
            &bound.host,
            bound.kernel.as_mut(),
            state_dir,
            &p.spec.name,
            &c,
            run_dir,
        )?;
        bound.bindings.extend(b);
    }
    Ok(bound)
}

/// The run's binding on the real host, state files in the cache.
pub fn bind_for_run(prepared: &[PreparedDevice], run_dir: &Path) -> Result<Bound, DeviceError> {
    bind_all(
        prepared,
        Host::real(),
        Box::new(RealKernel),
        &state::dir(&crate::host::paths::cache_root()),
        run_dir,
    )
}

/// Passthrough needs KVM; refuses once the accelerator is decided.
pub fn require_kvm(prepared: &[PreparedDevice], d: &AccelDecision) -> Result<(), DeviceError> {
    if d.used == Accel::Kvm {
        return Ok(());
    }
    match prepared
        .iter()
        .find(|p| p.spec.kind.def().origin() == Origin::HostPci)
    {
        Some(p) => Err(DeviceError::NeedsKvm {
            name: p.spec.name.clone(),
            why: d.reasons.join("; "),
        }),
        None => Ok(()),
    }
}

/// One line per state file whose controller was not given back (its
/// testbed is gone), with the command that does it.
pub fn unrestored(host: &Host, state_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (path, s) in state::list(state_dir) {
        let s = match s {
            Ok(s) => s,
            Err(e) => {
                out.push(format!("passthrough state file unreadable: {e}"));
                continue;
            }
        };
        if s.owner_alive() {
            continue;
        }
        let now = host.driver(&s.pci);
        let where_ = now.as_deref().unwrap_or("no driver");
        out.push(if now.as_deref() == Some(s.original_driver.as_str()) {
            format!(
                "passthrough {}: back on {} but its state file {} was left by testbed pid {}: `{}` removes it",
                s.pci,
                s.original_driver,
                path.display(),
                s.pid,
                s.restore_command()
            )
        } else {
            format!(
                "passthrough {} (device {:?}) was left on {where_} by testbed pid {} (run {}), not restored to {}: run `{}`",
                s.pci,
                s.name,
                s.pid,
                s.run_dir.display(),
                s.original_driver,
                s.restore_command()
            )
        });
    }
    out
}

/// What `testbed passthrough restore [PCI]` did.
#[derive(Debug, Default)]
pub struct RestoreReport {
    pub lines: Vec<String>,
    pub failed: bool,
}

/// Restores the devices the state files name (or only `pci`). One whose
/// testbed still runs is left alone unless `force`.
pub fn restore_from_state(
    host: &Host,
    kernel: &mut dyn Kernel,
    state_dir: &Path,
    pci: Option<&str>,
    force: bool,
) -> RestoreReport {
    let mut r = RestoreReport::default();
    let files: Vec<_> = state::list(state_dir)
        .into_iter()
        .filter(|(p, _)| pci.is_none_or(|pci| *p == state::file(state_dir, pci)))
        .collect();
    if files.is_empty() {
        r.lines.push(match pci {
            Some(pci) => format!(
                "nothing to restore: no state file for {pci} in {}",
                state_dir.display()
            ),
            None => format!(
                "nothing to restore: no state file in {}",
                state_dir.display()
            ),
        });
        return r;
    }
    for (path, s) in files {
        let line = match s {
            Err(e) => Err(e.to_string()),
            Ok(s) if s.owner_alive() && !force => Err(format!(
                "passthrough {}: testbed pid {} still runs with it (run {}); stop it, or --force",
                s.pci,
                s.pid,
                s.run_dir.display()
            )),
            Ok(state) => restore(
                host,
                kernel,
                &Binding {
                    state_file: path,
                    state,
                },
            )
            .map_err(|e| e.to_string()),
        };
        match line {
            Ok(l) => r.lines.push(l),
            Err(e) => {
                r.failed = true;
                r.lines.push(format!("error: {e}"));
            }
        }
    }
    r
}

#[cfg(test)]
mod tests;
