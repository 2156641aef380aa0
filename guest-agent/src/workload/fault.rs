//! Deliberate failures, so the host's handling of a guest panic, a hang, an
//! agent crash and a failing job is tested against a real VM.

use serde::{Deserialize, Serialize};

use super::{JobContext, Summary, WorkloadError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultMode {
    /// The job returns an error (the agent survives).
    Error,
    /// The agent process exits abruptly (as PID 1 this panics the kernel).
    Exit,
    /// The kernel panics (via sysrq-trigger).
    Panic,
    /// The agent stops answering, heartbeats included.
    Hang,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultParams {
    pub mode: FaultMode,
    /// Seconds to wait before failing.
    #[serde(default)]
    pub after_s: f64,
}

/// Set by the agent while a `hang` fault runs, so its heartbeat thread stops too.
pub static HANGING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn run(p: &FaultParams, _ctx: &JobContext) -> Result<Summary, WorkloadError> {
    std::thread::sleep(std::time::Duration::from_secs_f64(p.after_s.max(0.0)));
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
    }
}

impl super::WorkloadParams for FaultParams {
    fn validate(
        &self,
        _devices: &std::collections::BTreeMap<String, crate::protocol::DeviceRef>,
    ) -> Result<(), super::ParamError> {
        Ok(())
    }
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run(self, ctx)
    }
    fn metrics(&self) -> Vec<super::MetricInfo> {
        Vec::new()
    }
}
