//! A virtio-blk disk (`virtio-blk-pci`), backed by a file or null-co.

use super::{FieldError, KindDef, Origin, check_emulated, check_one_namespace, single_backing};
use crate::inputs::image::kernel_needs::Need;
use crate::machine::qemu::argv::{Backing, QemuDevice};
use crate::planning::spec::{DeviceSpec, ExecutorKind};

pub struct VirtioBlk;

impl KindDef for VirtioBlk {
    fn origin(&self) -> Origin {
        Origin::Emulated
    }

    fn check(&self, d: &DeviceSpec, _executor: ExecutorKind) -> Result<(), FieldError> {
        check_emulated(d)?;
        check_one_namespace(d)
    }

    fn qemu(&self, d: &DeviceSpec, backings: Vec<Backing>) -> QemuDevice {
        QemuDevice::VirtioBlk {
            serial: d.name.clone(),
            backing: single_backing(backings),
            logical_block_size: d.logical_block_size,
            queues: d.queues,
        }
    }

    fn kernel_needs(&self) -> &'static [Need] {
        &[Need {
            option: "CONFIG_VIRTIO_BLK",
            module: "virtio_blk",
            why: "virtio-blk devices",
        }]
    }
}
