//! `[limits]`: what one point may cost the host. Memory and processes are
//! enforced by the kernel where it can (host/kernel_limits.rs: cgroup
//! memory and pids controllers, else `RLIMIT_AS`), and memory and CPU time
//! are polled (machine/hostcost.rs). A point over a limit fails alone, the
//! limit named; the VM or host agent it ran in is killed with everything
//! it started, and the next point runs in a new boot.

use super::*;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Peak resident memory of the run's processes over one point (QEMU's
    /// whole footprint, guest memory it touched included; or the host
    /// agent and its helpers), e.g. "2G".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Size>,
    /// CPU time, user and system, of the run's processes over one point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time: Option<Span>,
    /// Processes and threads the run's processes may have at once (QEMU's
    /// threads count too), e.g. 512: a fork bomb stops at it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u32>,
}

impl Limits {
    /// Whether any limit is polled (`exceeded`); `processes` is the
    /// kernel's alone.
    pub fn any(&self) -> bool {
        self.memory.is_some() || self.cpu_time.is_some()
    }

    /// The limits the kernel can enforce (memory, processes), for the
    /// group the run's processes start in; `address_space_fallback` for a
    /// host agent (`RLIMIT_AS` where no memory controller is writable),
    /// not for QEMU. CPU time over a point has no
    /// kernel limit that fits (`RLIMIT_CPU` is per process, `cpu.max` a
    /// rate): it stays polled.
    pub fn for_the_kernel(
        &self,
        address_space_fallback: bool,
    ) -> crate::host::kernel_limits::Wanted {
        use crate::host::kernel_limits::Limit;
        crate::host::kernel_limits::Wanted {
            memory: self.memory.map(|m| Limit {
                value: m.bytes(),
                named: format!("limits.memory = \"{m}\""),
            }),
            processes: self.processes.map(|n| Limit {
                value: u64::from(n),
                named: format!("limits.processes = {n}"),
            }),
            address_space_fallback,
        }
    }

    /// The limit `cost` is over, named as the spec writes it; `None`
    /// within both.
    pub fn exceeded(&self, cost: &crate::machine::hostcost::HostCost) -> Option<String> {
        if let (Some(limit), Some(peak)) = (self.memory, cost.peak_rss_mib)
            && peak * 1024.0 * 1024.0 > limit.bytes() as f64
        {
            return Some(format!(
                "over its memory limit: limits.memory = \"{limit}\", and the run's processes reached {peak:.1} MiB ({})",
                cost.source
            ));
        }
        let cpu = cost.cpu_user_s + cost.cpu_system_s;
        if let Some(limit) = self.cpu_time
            && cpu > limit.0.as_secs_f64()
        {
            return Some(format!(
                "over its CPU-time limit: limits.cpu_time = \"{}s\", and the run's processes used {cpu:.2} s ({})",
                limit.0.as_secs_f64(),
                cost.source
            ));
        }
        None
    }
}
