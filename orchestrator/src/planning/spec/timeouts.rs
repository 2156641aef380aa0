//! `[timeouts]`: how long a boot, a point and the agent's silence may last.

use super::*;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    /// From QEMU start to the agent's hello.
    #[serde(default = "default_boot_timeout")]
    pub boot: Span,
    /// Longest a single point may run.
    #[serde(default = "default_point_timeout")]
    pub point: Span,
    /// Silence (no heartbeat) after which the guest counts as hung.
    #[serde(default = "default_heartbeat_timeout")]
    pub heartbeat: Span,
}

fn default_boot_timeout() -> Span {
    Span(std::time::Duration::from_secs(60))
}
fn default_point_timeout() -> Span {
    Span(std::time::Duration::from_secs(900))
}
fn default_heartbeat_timeout() -> Span {
    Span(std::time::Duration::from_secs(15))
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            boot: default_boot_timeout(),
            point: default_point_timeout(),
            heartbeat: default_heartbeat_timeout(),
        }
    }
}
