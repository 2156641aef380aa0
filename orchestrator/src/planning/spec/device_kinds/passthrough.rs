//! A real NVMe controller of the host passed through with vfio-pci
//! (`kind = "passthrough"`). The host side — the checks that keep the
//! testbed off disks it must not touch, and the rebinding — lives in
//! `devices::checks` and `devices::passthrough`; here is what the spec and
//! the guest need.

use super::nvme::NVME_DRIVER;
use super::{FieldError, KindDef, Origin, check_host_pci, check_one_namespace};
use crate::inputs::image::kernel_needs::Need;
use crate::machine::qemu::argv::{Backing, QemuDevice};
use crate::planning::spec::{DeviceSpec, ExecutorKind};

pub struct Vfio;

impl KindDef for Vfio {
    fn origin(&self) -> Origin {
        Origin::HostPci
    }

    fn check(&self, d: &DeviceSpec, executor: ExecutorKind) -> Result<(), FieldError> {
        check_host_pci(d, executor)?;
        // The controller's namespaces are its own; the spec cannot add any.
        check_one_namespace(d)
    }

    fn qemu(&self, d: &DeviceSpec, _backings: Vec<Backing>) -> QemuDevice {
        QemuDevice::Vfio {
            host: d.pci.clone().unwrap_or_default(),
        }
    }

    fn kernel_needs(&self) -> &'static [Need] {
        // The guest drives the controller with its own nvme driver.
        &[NVME_DRIVER]
    }
}
