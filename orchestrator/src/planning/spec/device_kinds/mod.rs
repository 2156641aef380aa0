//! Device kinds: everything one kind of storage device must supply, in one
//! module per kind, registered by one line in the `device_kinds!` list
//! below. The list makes `DeviceKind` (what `kind = "…"` in a spec names)
//! and its dispatch; a kind that leaves out a part of [`KindDef`] does not
//! compile, and no match over kinds has a catch-all. The rest of the
//! testbed asks the kind (`d.kind.def()`) instead of matching on it:
//! - spec checks: [`KindDef::check`] (the fields it refuses or requires);
//! - what QEMU gets: [`KindDef::qemu`], from one backing per namespace;
//! - kernel options the guest needs to see it: [`KindDef::kernel_needs`];
//! - where it comes from ([`Origin`]): the testbed creates its backing
//!   files (and the dry run names them), or it is a host controller that
//!   `devices::checks` must clear first.
//!
//! The guest finds every kind the same way, by the serial (the device's
//! name) its block device reports; the manifest records the `DeviceSpec`.
//! `experiments/EXTENDING.md` walks through adding one (virtio-scsi).

use serde::{Deserialize, Serialize};

use super::{Backend, DeviceSpec, ExecutorKind};
use crate::inputs::image::kernel_needs::Need;
use crate::machine::qemu::argv::{Backing, QemuDevice};

/// A spec field of a device that a check refused, and why.
pub type FieldError = (&'static str, String);

/// Where a device comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The testbed creates it for the run: one backing per namespace, a
    /// sparse file in the run directory or QEMU's null-co. It may be
    /// formatted.
    Emulated,
    /// A PCI controller of the host, handed to the guest whole with
    /// vfio-pci after `devices::checks` cleared it. Never created, resized
    /// or formatted by the testbed.
    HostPci,
}

/// What a device kind supplies. One implementation per module of this
/// folder; see the module doc for who asks for what.
pub trait KindDef: Sync {
    /// Where the device comes from; decides which generic checks apply
    /// and whether backing files are made.
    fn origin(&self) -> Origin;

    /// Checks of this kind's fields beyond the ones every device gets
    /// (name, block size, backend, file system), as the field at fault and
    /// why. Call [`check_emulated`] or [`check_host_pci`] for the origin's.
    fn check(&self, d: &DeviceSpec, executor: ExecutorKind) -> Result<(), FieldError>;

    /// The device QEMU gets, from one backing per namespace (none for a
    /// host controller). Pure: the golden argv tests build from it.
    fn qemu(&self, d: &DeviceSpec, backings: Vec<Backing>) -> QemuDevice;

    /// Kernel options the guest needs to see the device: built in, or a
    /// module the initramfs loads; a kernel with neither is refused
    /// before boot, naming the option and the device.
    fn kernel_needs(&self) -> &'static [Need];
}

macro_rules! device_kinds {
    ($($module:ident :: $kind:ident = $name:literal $(or $alias:literal)?),* $(,)?) => {
        $( mod $module; )*

        /// The kind of a `[[devices]]` entry, as a spec writes it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum DeviceKind {
            $( #[serde(rename = $name $(, alias = $alias)?)] $kind, )*
        }

        impl DeviceKind {
            /// Every kind, in the order of the list.
            pub const ALL: &'static [DeviceKind] = &[$(DeviceKind::$kind),*];

            /// What this kind supplies.
            pub fn def(self) -> &'static dyn KindDef {
                match self {
                    $( DeviceKind::$kind => &$module::$kind, )*
                }
            }

            /// The name a spec uses (`kind = "…"`).
            pub fn name(self) -> &'static str {
                match self {
                    $( DeviceKind::$kind => $name, )*
                }
            }
        }
    };
}

// The registration list: one line per kind (its module, its type, the
// name a spec uses). `passthrough` was first called `vfio`, which specs may
// still write.
device_kinds! {
    nvme::Nvme = "nvme",
    virtio_blk::VirtioBlk = "virtio-blk",
    passthrough::Vfio = "passthrough" or "vfio",
    virtio_scsi::VirtioScsi = "virtio-scsi",
}

/// The checks every emulated device gets: no PCI address, no rebinding,
/// a size that is a positive multiple of its block size.
pub fn check_emulated(d: &DeviceSpec) -> Result<(), FieldError> {
    if d.pci.is_some() {
        return Err(("pci", "only passthrough devices take a PCI address".into()));
    }
    if d.bind {
        return Err((
            "bind",
            "only passthrough devices take bind (it rebinds a host PCI device)".into(),
        ));
    }
    let Some(size) = d.size else {
        return Err((
            "size",
            "an emulated device needs a size, e.g. size = \"256M\"".into(),
        ));
    };
    if size.bytes() == 0 || size.bytes() % u64::from(d.logical_block_size) != 0 {
        return Err((
            "size",
            format!(
                "{size} is not a positive multiple of the block size {}",
                d.logical_block_size
            ),
        ));
    }
    Ok(())
}

/// The checks every host controller gets: named by its PCI address,
/// rebound only by a VM run, and sized by itself.
pub fn check_host_pci(d: &DeviceSpec, executor: ExecutorKind) -> Result<(), FieldError> {
    if d.pci.is_none() {
        return Err((
            "pci",
            "a passthrough device must name its PCI address explicitly".into(),
        ));
    }
    if d.bind && executor != ExecutorKind::Qemu {
        return Err((
            "bind",
            "bind = true rebinds a controller of this host for a VM: it needs executor = \"qemu\""
                .into(),
        ));
    }
    if d.size.is_some() {
        return Err(("size", "a passed-through device has its own size".into()));
    }
    Ok(())
}

/// Refuses `namespaces` on a kind that has one namespace only.
pub fn check_one_namespace(d: &DeviceSpec) -> Result<(), FieldError> {
    match d.namespaces {
        Some(_) => Err(("namespaces", "only nvme devices have namespaces".into())),
        None => Ok(()),
    }
}

/// The one backing of a single-namespace device (null-co of size 0 if the
/// caller gave none, which `devices` never does).
pub fn single_backing(mut backings: Vec<Backing>) -> Backing {
    if backings.is_empty() {
        Backing::Null {
            size: 0,
            latency_ns: 0,
        }
    } else {
        backings.remove(0)
    }
}

/// Whether a device of this spec keeps its data in backing files.
pub fn has_backing_files(d: &DeviceSpec) -> bool {
    d.kind.def().origin() == Origin::Emulated && d.backend == Backend::File
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_by_its_name() {
        for k in DeviceKind::ALL {
            let text = format!("\"{}\"", k.name());
            let back: DeviceKind = serde_json::from_str(&text).unwrap();
            assert_eq!(back, *k, "{text}");
        }
        let old: DeviceKind = serde_json::from_str("\"vfio\"").unwrap();
        assert_eq!(old, DeviceKind::Vfio);
    }

    #[test]
    fn every_kind_needs_a_kernel_option() {
        for k in DeviceKind::ALL {
            assert!(!k.def().kernel_needs().is_empty(), "{}", k.name());
        }
    }
}
