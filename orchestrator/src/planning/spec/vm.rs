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
    pub pin: crate::qemu::pin::PinSetting,
}

fn is_off(p: &crate::qemu::pin::PinSetting) -> bool {
    *p == crate::qemu::pin::PinSetting::Off
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
        }
    }
}

/// `[vm]`: vCPUs and memory within what QEMU and the guest can use.
pub(super) fn check_vm(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let spec = &loaded.spec;
    if spec.vm.vcpus == 0 || spec.vm.vcpus > 64 {
        return Err(loaded.error_at("vm", Some("vcpus"), "must be between 1 and 64"));
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
