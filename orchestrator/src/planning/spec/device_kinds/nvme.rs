//! An emulated NVMe controller (QEMU's `nvme`) with one to eight
//! namespaces, each backed by a file or null-co.

use super::{FieldError, KindDef, Origin, check_emulated};
use crate::inputs::image::kernel_needs::Need;
use crate::machine::qemu::argv::{Backing, QemuDevice};
use crate::planning::spec::{DeviceSpec, ExecutorKind};

pub struct Nvme;

pub(super) const NVME_DRIVER: Need = Need {
    option: "CONFIG_BLK_DEV_NVME",
    module: "nvme",
    why: "NVMe devices",
};

impl KindDef for Nvme {
    fn origin(&self) -> Origin {
        Origin::Emulated
    }

    fn check(&self, d: &DeviceSpec, _executor: ExecutorKind) -> Result<(), FieldError> {
        check_emulated(d)?;
        if let Some(ns) = d.namespaces
            && !(1..=8).contains(&ns)
        {
            return Err(("namespaces", format!("{ns} must be between 1 and 8")));
        }
        Ok(())
    }

    fn qemu(&self, d: &DeviceSpec, backings: Vec<Backing>) -> QemuDevice {
        QemuDevice::Nvme {
            serial: d.name.clone(),
            namespaces: backings,
            logical_block_size: d.logical_block_size,
            queues: d.queues,
        }
    }

    fn kernel_needs(&self) -> &'static [Need] {
        &[NVME_DRIVER]
    }
}
