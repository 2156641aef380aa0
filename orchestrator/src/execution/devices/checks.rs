//! The checks that keep passthrough away from a controller the host still
//! needs. They only read; each refusal says what it found.

use super::sysfs::{Host, ProcUnreadable, entries, link_name, read_trim};
use super::usage::{self, InUse, ProcFiles};

/// The PCI class of an NVM Express controller (mass storage, NVM, NVMe).
pub const NVME_CLASS: &str = "0x010802";
/// PCI-to-PCI bridges: allowed to share the controller's IOMMU group.
const BRIDGE_CLASS_PREFIX: &str = "0x0604";
/// Drivers a group peer may be bound to: they hand no DMA to the host.
const HARMLESS_DRIVERS: [&str; 2] = ["vfio-pci", "pci-stub"];

/// Why passthrough refuses a controller: what was found, and what the user
/// can do about it.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("not a full PCI address like 0000:3b:00.0")]
    NotAnAddress,
    #[error("no such PCI device")]
    NoSuchDevice,
    #[error("class {class:?} is not an NVMe controller ({NVME_CLASS})")]
    NotNvme { class: String },
    /// `bind = false` and the controller is on another driver.
    #[error(
        "bound to {driver}, not vfio-pci; set bind = true to let the testbed rebind it for the run, or bind vfio-pci yourself"
    )]
    NotOnVfio { driver: String },
    #[error("bound to no driver; bind it to vfio-pci first")]
    UnboundNotOnVfio,
    /// `bind = true` takes a controller from the nvme driver only.
    #[error("bound to {driver}: bind = true takes a controller from the nvme driver only")]
    NotOnNvme { driver: String },
    #[error("bound to no driver: bind = true takes a controller from the nvme driver only")]
    UnboundNotOnNvme,
    #[error(
        "the IOMMU is off (/sys/kernel/iommu_groups is empty): boot the host with intel_iommu=on or amd_iommu=on"
    )]
    IommuOff,
    #[error("it has no IOMMU group (no iommu_group link): vfio-pci cannot take it")]
    NoIommuGroup,
    #[error(
        "its IOMMU group {group} also holds {peer} (class {class}, bound to {driver}): \
         vfio-pci takes the whole group, so {peer} would lose its driver too"
    )]
    GroupPeer {
        group: String,
        peer: String,
        class: String,
        driver: String,
    },
    #[error(
        "the vfio-pci driver is not loaded (no /sys/bus/pci/drivers/vfio-pci): run `modprobe vfio-pci` first"
    )]
    VfioNotLoaded,
    /// A namespace or partition is mounted, swapped, the root, or held.
    #[error(transparent)]
    InUse(#[from] InUse),
    /// A /proc file the checks need could not be read: "unused" cannot be
    /// told from "unknown".
    #[error(transparent)]
    ProcUnreadable(#[from] ProcUnreadable),
}

/// What the checks found, for the dry run and the state file.
#[derive(Debug, Clone, Default)]
pub struct Controller {
    pub pci: String,
    pub vendor: String,
    pub device: String,
    pub driver: Option<String>,
    pub iommu_group: Option<String>,
    /// The other members of its IOMMU group, each with why it is allowed.
    pub group_peers: Vec<String>,
    /// Namespaces and partitions found unused.
    pub disks: Vec<String>,
}

/// `0000:3b:00.0`: domain, bus, slot and function, all written out.
pub fn valid_address(pci: &str) -> bool {
    pci.len() == 12
        && pci.chars().enumerate().all(|(i, c)| match i {
            4 | 7 => c == ':',
            10 => c == '.',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Exists and is an NVMe controller.
fn inspect(host: &Host, pci: &str) -> Result<Controller, Refusal> {
    if !valid_address(pci) {
        return Err(Refusal::NotAnAddress);
    }
    let dev = host.pci_dev(pci);
    if !dev.exists() {
        return Err(Refusal::NoSuchDevice);
    }
    let class = read_trim(&dev.join("class")).unwrap_or_default();
    if class != NVME_CLASS {
        return Err(Refusal::NotNvme { class });
    }
    Ok(Controller {
        pci: pci.to_string(),
        vendor: read_trim(&dev.join("vendor")).unwrap_or_default(),
        device: read_trim(&dev.join("device")).unwrap_or_default(),
        driver: host.driver(pci),
        ..Controller::default()
    })
}

/// `bind = false`: the controller must already be on vfio-pci (someone
/// bound it by hand); the testbed writes nothing.
pub fn check_prebound(host: &Host, pci: &str, proc: &ProcFiles) -> Result<Controller, Refusal> {
    let mut c = inspect(host, pci)?;
    c.disks = usage::check_unused(host, pci, proc)?;
    match c.driver.as_deref() {
        Some("vfio-pci") => Ok(c),
        Some(other) => Err(Refusal::NotOnVfio {
            driver: other.to_string(),
        }),
        None => Err(Refusal::UnboundNotOnVfio),
    }
}

/// `bind = true`: everything that must hold before the testbed rebinds the
/// controller, checked while it is still on the nvme driver (so that its
/// namespaces are visible).
pub fn check_bindable(host: &Host, pci: &str, proc: &ProcFiles) -> Result<Controller, Refusal> {
    let mut c = inspect(host, pci)?;
    match c.driver.as_deref() {
        Some("nvme" | "vfio-pci") => {}
        Some(other) => {
            return Err(Refusal::NotOnNvme {
                driver: other.to_string(),
            });
        }
        None => return Err(Refusal::UnboundNotOnNvme),
    }
    let group = iommu_group(host, pci)?;
    c.group_peers = group_peers(host, pci, &group)?;
    c.iommu_group = Some(group);
    if !host.path("sys/bus/pci/drivers/vfio-pci").is_dir() {
        return Err(Refusal::VfioNotLoaded);
    }
    c.disks = usage::check_unused(host, pci, proc)?;
    Ok(c)
}

/// The IOMMU group of the controller; refuses when the IOMMU is off.
fn iommu_group(host: &Host, pci: &str) -> Result<String, Refusal> {
    if entries(&host.path("sys/kernel/iommu_groups")).is_empty() {
        return Err(Refusal::IommuOff);
    }
    link_name(&host.pci_dev(pci).join("iommu_group")).ok_or(Refusal::NoIommuGroup)
}

/// The other devices of the group; refuses one bound to a host driver.
/// Bridges are allowed whatever their driver (pcieport): vfio accepts
/// them, and they do no DMA of their own.
fn group_peers(host: &Host, pci: &str, group: &str) -> Result<Vec<String>, Refusal> {
    let mut peers = Vec::new();
    let dir = host
        .path("sys/kernel/iommu_groups")
        .join(group)
        .join("devices");
    for peer in entries(&dir).into_iter().filter(|p| p != pci) {
        let class = read_trim(&host.pci_dev(&peer).join("class")).unwrap_or_default();
        let driver = host.driver(&peer);
        let allowed = if class.starts_with(BRIDGE_CLASS_PREFIX) {
            "a bridge"
        } else {
            match driver.as_deref() {
                None => "bound to no driver",
                Some(d) if HARMLESS_DRIVERS.contains(&d) => "bound to a stub driver",
                Some(d) => {
                    return Err(Refusal::GroupPeer {
                        group: group.to_string(),
                        peer,
                        class,
                        driver: d.to_string(),
                    });
                }
            }
        };
        peers.push(format!("{peer} ({allowed})"));
    }
    Ok(peers)
}
