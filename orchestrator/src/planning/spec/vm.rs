//! `[vm]`: vCPUs, memory, accelerator, boot policy and pinning; their checks.

use super::*;

impl std::str::FromStr for AccelChoice {
    type Err = UnknownChoice;
    fn from_str(s: &str) -> Result<Self, UnknownChoice> {
        match s {
            "auto" => Ok(AccelChoice::Auto),
            "kvm" => Ok(AccelChoice::Kvm),
            "tcg" => Ok(AccelChoice::Tcg),
            _ => Err(UnknownChoice {
                what: "accelerator",
                given: s.into(),
                choices: "auto, kvm or tcg",
            }),
        }
    }
}

/// How points map to boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BootPolicy {
    /// One boot runs every point (engines and points interleave in one boot).
    #[default]
    PerRun,
    /// A fresh boot for every point.
    PerPoint,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSection {
    #[serde(default = "default_vcpus")]
    pub vcpus: u32,
    #[serde(default = "default_memory")]
    pub memory: Size,
    #[serde(default)]
    pub accel: AccelChoice,
    #[serde(default)]
    pub boot: BootPolicy,
    /// Extra kernel command-line words.
    #[serde(default)]
    pub cmdline: Vec<String>,
    /// QEMU's threads on host CPUs: "off", "auto" or a list (qemu::pin).
    #[serde(default, skip_serializing_if = "is_off")]
    pub pin: crate::machine::qemu::pin::PinSetting,
    /// "wall" (the default) or "instructions": the guest's clock counts
    /// instructions (QEMU icount, TCG only, one vCPU), so the times it
    /// reads are work, the same on every run, not latency.
    #[serde(
        default,
        skip_serializing_if = "crate::machine::qemu::argv::Clock::is_wall"
    )]
    pub clock: crate::machine::qemu::argv::Clock,
}

fn is_off(p: &crate::machine::qemu::pin::PinSetting) -> bool {
    *p == crate::machine::qemu::pin::PinSetting::Off
}

fn default_vcpus() -> u32 {
    2
}
fn default_memory() -> Size {
    Size(1 << 30)
}

impl Default for VmSection {
    fn default() -> Self {
        VmSection {
            vcpus: default_vcpus(),
            memory: default_memory(),
            accel: AccelChoice::Auto,
            boot: BootPolicy::PerRun,
            cmdline: Vec::new(),
            pin: Default::default(),
            clock: Default::default(),
        }
    }
}

/// `[vm]`: vCPUs and memory within what QEMU and the guest can use.
pub(super) fn check_vm(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let spec = &loaded.spec;
    if spec.vm.vcpus == 0 || spec.vm.vcpus > 64 {
        return Err(loaded.error_at("vm", Some("vcpus"), "must be between 1 and 64"));
    }
    if spec.vm.clock == crate::machine::qemu::argv::Clock::Instructions {
        if spec.vm.accel == AccelChoice::Kvm {
            return Err(loaded.error_at(
                "vm",
                Some("clock"),
                "\"instructions\" is QEMU's icount, which only TCG has: not with accel = \"kvm\" (leave accel out or give \"tcg\")",
            ));
        }
        if spec.vm.vcpus != 1 {
            return Err(loaded.error_at(
                "vm",
                Some("clock"),
                format!(
                    "\"instructions\" runs the guest in one TCG thread, and with {} vCPUs QEMU 7.2's round-robin starves the second: each vCPU may run until the next timer deadline, the first (busy waiting for the second to come up) uses it all, and the guest hangs at \"smp: Bringing up secondary CPUs\" (docs/icount.md): give vcpus = 1",
                    spec.vm.vcpus
                ),
            ));
        }
    }
    if spec.vm.memory.bytes() < 128 << 20 {
        return Err(loaded.error_at(
            "vm",
            Some("memory"),
            format!("{} is too small: at least 128M", spec.vm.memory),
        ));
    }
    Ok(())
}
