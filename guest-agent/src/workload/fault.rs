//! Deliberate failures, so the host's handling of a guest panic, a hang, an
//! agent crash and a failing job is tested against a real VM.

use serde::{Deserialize, Serialize};

use super::{JobContext, Summary, WorkloadError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultMode {
    /// The job returns an error (the agent survives).
    Error,
    /// The agent process exits abruptly (PID 1 then ends too, which panics
    /// the kernel).
    Exit,
    /// The kernel panics (via sysrq-trigger).
    Panic,
    /// The agent stops answering, heartbeats included.
    Hang,
    /// One line of `size` bytes that is not a message (a flooding guest).
    FloodLine,
    /// `size` sample chunks, each with a tag key of its own.
    TagFlood,
    /// Log lines without end; the job never finishes.
    LogFlood,
    /// A sample that is not a number.
    Nan,
    /// No fault: `size` samples of one metric, and success.
    Samples,
    /// `size` orphans: grandchildren whose parent exits at once, so they
    /// are re-parented to PID 1, and exit 10 ms later. A second later the
    /// zombies left in the guest are counted (summary `zombies`): PID 1
    /// reaps them, so there are none.
    Orphans,
    /// `size` escapees: grandchildren that call `setsid`, leaving the
    /// process group (and session) the host kills, and sleep an hour. What
    /// contains them on the host is the run's cgroup; summary `escaped`.
    Escape,
    /// `size` MiB allocated and written, held for a second, then freed
    /// (a point that needs memory; summary `allocated_mib`).
    Alloc,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultParams {
    pub mode: FaultMode,
    /// Seconds to wait before failing.
    #[serde(default)]
    pub after_s: f64,
    /// How much a flood sends: bytes for `flood-line`, chunks for `tag-flood`.
    #[serde(default = "default_size")]
    pub size: u64,
}

fn default_size() -> u64 {
    1000
}

/// Set by the agent while a `hang` fault runs, so its heartbeat thread stops too.
pub static HANGING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn run(p: &FaultParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    let wait = std::time::Duration::try_from_secs_f64(p.after_s.max(0.0))
        .map_err(|e| WorkloadError::Other(format!("after_s = {}: {e}", p.after_s)))?;
    std::thread::sleep(wait);
    match p.mode {
        FaultMode::Error => Err(WorkloadError::Other(
            "fault workload: requested error".into(),
        )),
        FaultMode::Exit => std::process::exit(3),
        FaultMode::Panic => {
            std::fs::write("/proc/sysrq-trigger", b"c")
                .map_err(|e| WorkloadError::io("write /proc/sysrq-trigger", e))?;
            Err(WorkloadError::Other(
                "sysrq crash did not panic the kernel".into(),
            ))
        }
        FaultMode::Hang => {
            HANGING.store(true, std::sync::atomic::Ordering::SeqCst);
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        FaultMode::FloodLine => {
            let piece = vec![b'x'; 1 << 20];
            ctx.sink
                .write_raw(&mut |w| {
                    let mut left = p.size;
                    while left > 0 {
                        let n = left.min(piece.len() as u64) as usize;
                        w.write_all(&piece[..n])?;
                        left -= n as u64;
                    }
                    w.write_all(b"\n")?;
                    w.flush()
                })
                .map_err(|e| WorkloadError::io("write a flood line", e))?;
            Ok(Summary::new())
        }
        FaultMode::TagFlood => {
            for i in 0..p.size {
                let tags = std::collections::BTreeMap::from([(format!("k{i}"), "v".to_string())]);
                ctx.emit_samples("flood", "count", 0, &tags, &[i as f64]);
            }
            Ok(Summary::new())
        }
        FaultMode::LogFlood => loop {
            ctx.sink.log("fault workload: still flooding the log");
        },
        FaultMode::Samples => {
            let none = std::collections::BTreeMap::new();
            let values: Vec<f64> = (0..p.size).map(|i| i as f64).collect();
            ctx.emit_samples("value", "count", 0, &none, &values);
            Ok(Summary::from([("samples".to_string(), p.size.into())]))
        }
        FaultMode::Nan => {
            let none = std::collections::BTreeMap::new();
            ctx.emit_samples("value", "count", 0, &none, &[1.0, f64::NAN]);
            Ok(Summary::new())
        }
        FaultMode::Orphans => {
            for _ in 0..p.size {
                leave_orphan()?;
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
            Ok(Summary::from([
                ("orphans".to_string(), p.size.into()),
                ("zombies".to_string(), count_zombies()?.into()),
            ]))
        }
        FaultMode::Escape => {
            for _ in 0..p.size {
                leave_escapee()?;
            }
            Ok(Summary::from([("escaped".to_string(), p.size.into())]))
        }
        FaultMode::Alloc => {
            // Written, so every page is resident, not merely reserved.
            let held = vec![1u8; (p.size as usize) << 20];
            std::thread::sleep(std::time::Duration::from_secs(1));
            let touched = held.iter().step_by(4096).filter(|&&b| b == 1).count();
            Ok(Summary::from([(
                "allocated_mib".to_string(),
                ((touched * 4096) >> 20).into(),
            )]))
        }
    }
}

/// Forks a child that starts a session of its own (out of the agent's
/// process group) and forks a grandchild that sleeps an hour, then exits:
/// the grandchild outlives the job unless something kills it.
fn leave_escapee() -> Result<(), WorkloadError> {
    leave_grandchild(true, 3600, 0, "wait for the escapee's parent")
}

/// Forks a child that forks a grandchild and exits: the grandchild, an
/// orphan, sleeps 10 ms and exits, to be reaped by whoever adopted it.
fn leave_orphan() -> Result<(), WorkloadError> {
    leave_grandchild(false, 0, 10_000_000, "wait for the orphan's parent")
}

/// Forks a child (in a session of its own if `new_session`) that forks a
/// grandchild sleeping `secs` + `nanos`, and exits; waits for that child.
fn leave_grandchild(
    new_session: bool,
    secs: libc::time_t,
    nanos: libc::c_long,
    waiting: &str,
) -> Result<(), WorkloadError> {
    // SAFETY: the agent has other threads, so the children call only
    // async-signal-safe functions (fork, setsid, nanosleep, _exit).
    match unsafe { libc::fork() } {
        -1 => Err(WorkloadError::io("fork", std::io::Error::last_os_error())),
        0 => unsafe {
            if new_session {
                libc::setsid();
            }
            if libc::fork() == 0 {
                let pause = libc::timespec {
                    tv_sec: secs,
                    tv_nsec: nanos,
                };
                libc::nanosleep(&pause, std::ptr::null_mut());
            }
            libc::_exit(0)
        },
        middle => {
            let mut status = 0;
            // SAFETY: waits for the child forked above, which is ours.
            if unsafe { libc::waitpid(middle, &mut status, 0) } == -1 {
                return Err(WorkloadError::io(waiting, std::io::Error::last_os_error()));
            }
            Ok(())
        }
    }
}

/// Processes in state Z (`/proc/PID/stat`, the field after the name).
fn count_zombies() -> Result<u64, WorkloadError> {
    let mut zombies = 0;
    for entry in std::fs::read_dir("/proc").map_err(|e| WorkloadError::io("read /proc", e))? {
        let Ok(entry) = entry else { continue };
        if !entry.file_name().as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        // A process may end between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        {
            zombies += 1;
        }
    }
    Ok(zombies)
}

impl super::WorkloadParams for FaultParams {
    fn validate(
        &self,
        _devices: &std::collections::BTreeMap<String, testbed_vocab::protocol::DeviceRef>,
    ) -> Result<(), super::ParamError> {
        if !(0.0..=86_400.0).contains(&self.after_s) {
            return Err(super::ParamError::new(
                "after_s",
                format!("{} is not between 0 and 86400 seconds", self.after_s),
            ));
        }
        // Samples are built in memory before they are sent.
        let limit = match self.mode {
            FaultMode::Samples | FaultMode::TagFlood => 50_000_000,
            FaultMode::Orphans => 10_000,
            FaultMode::Escape => 100,
            FaultMode::Alloc => 16 << 10,
            _ => 1 << 32,
        };
        if self.size > limit {
            return Err(super::ParamError::new(
                "size",
                format!("{} is more than {limit} for mode {:?}", self.size, self.mode),
            ));
        }
        Ok(())
    }
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run(self, ctx)
    }
    fn metrics(&self) -> Vec<super::MetricInfo> {
        Vec::new()
    }
}
