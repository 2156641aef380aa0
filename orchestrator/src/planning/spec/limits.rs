//! `[limits]`: what one point may cost the host (machine/hostcost.rs).
//! A point over a limit fails alone, the limit named; the VM or host agent
//! it ran in is killed with everything it started, and the next point runs
//! in a new boot.

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
}

impl Limits {
    pub fn any(&self) -> bool {
        self.memory.is_some() || self.cpu_time.is_some()
    }

    /// The limit `cost` is over, named as the spec writes it; `None`
    /// within both.
    pub fn exceeded(&self, cost: &crate::hostcost::HostCost) -> Option<String> {
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
