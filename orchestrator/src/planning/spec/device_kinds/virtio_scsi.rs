//! A SCSI disk on a virtio-scsi controller (`virtio-scsi-pci` with one
//! `scsi-hd`), backed by a file or null-co: the disk most cloud VMs get,
//! with the guest's SCSI layer (sd, the SCSI midlayer) in every I/O's path.
//! The worked example of `experiments/EXTENDING.md`: this module, the
//! registration line in `mod.rs`, `experiments/examples/virtio-scsi-quick.toml`
//! and its test are the whole kind.

use super::{FieldError, KindDef, Origin, check_emulated, check_one_namespace, single_backing};
use crate::inputs::image::kernel_needs::Need;
use crate::machine::qemu::argv::{Backing, QemuDevice};
use crate::planning::spec::{DeviceSpec, ExecutorKind};

pub struct VirtioScsi;

impl KindDef for VirtioScsi {
    fn origin(&self) -> Origin {
        Origin::Emulated
    }

    fn check(&self, d: &DeviceSpec, _executor: ExecutorKind) -> Result<(), FieldError> {
        check_emulated(d)?;
        check_one_namespace(d)
    }

    fn qemu(&self, d: &DeviceSpec, backings: Vec<Backing>) -> QemuDevice {
        // Ids from the device's name, which the spec keeps unique.
        let ctrl = format!("scsi-{}", d.name);
        let drive = format!("scsi-{}-d0", d.name);
        let mut controller = format!("virtio-scsi-pci,id={ctrl}");
        if let Some(q) = d.queues {
            controller.push_str(&format!(",num_queues={q}"));
        }
        // The serial reaches the guest in the disk's unit serial number
        // page (VPD 0x80), where the agent looks for it.
        let disk = format!(
            "scsi-hd,bus={ctrl}.0,drive={drive},serial={},logical_block_size={lbs},physical_block_size={lbs}",
            d.name,
            lbs = d.logical_block_size
        );
        QemuDevice::Custom {
            drives: vec![(drive, single_backing(backings))],
            devices: vec![controller, disk],
        }
    }

    fn kernel_needs(&self) -> &'static [Need] {
        &[
            Need {
                option: "CONFIG_SCSI_VIRTIO",
                module: "virtio_scsi",
                why: "virtio-scsi devices",
            },
            Need {
                option: "CONFIG_BLK_DEV_SD",
                module: "sd_mod",
                why: "SCSI disks (virtio-scsi devices)",
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use crate::machine::qemu::argv::{Backing, VmConfig, build_argv};
    use crate::planning::spec::DeviceSpec;

    fn device(toml_text: &str) -> DeviceSpec {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn a_file_backed_disk_gets_a_controller_a_drive_and_a_scsi_hd() {
        let d = device(
            "name = \"disk\"\nkind = \"virtio-scsi\"\nsize = \"64M\"\nlogical_block_size = 4096\nqueues = 2\n",
        );
        let q = d.kind.def().qemu(
            &d,
            vec![Backing::File {
                path: "/r/disk.img".into(),
                direct: true,
            }],
        );
        let c = VmConfig {
            qemu: "qemu-system-x86_64".into(),
            accel: crate::machine::qemu::argv::Accel::Tcg,
            vcpus: 1,
            memory_mib: 512,
            kernel: "/k".into(),
            initrd: "/i".into(),
            append: String::new(),
            console_log: "/r/console.log".into(),
            agent_socket: "/r/agent.sock".into(),
            qmp_socket: None,
            devices: vec![q],
            nics: vec![],
            clock: Default::default(),
        };
        let argv = build_argv(&c).join(" ");
        assert!(
            argv.ends_with(
                "-drive file=/r/disk.img,if=none,id=scsi-disk-d0,format=raw,cache=none,werror=report,rerror=report \
                 -device virtio-scsi-pci,id=scsi-disk,num_queues=2 \
                 -device scsi-hd,bus=scsi-disk.0,drive=scsi-disk-d0,serial=disk,logical_block_size=4096,physical_block_size=4096"
            ),
            "{argv}"
        );
    }

    #[test]
    fn namespaces_and_a_pci_address_are_refused() {
        let d = device("name = \"d\"\nkind = \"virtio-scsi\"\nsize = \"64M\"\nnamespaces = 2\n");
        let e = d.kind.def().check(&d, crate::planning::spec::ExecutorKind::Qemu).unwrap_err();
        assert_eq!(e.0, "namespaces");
        let d = device("name = \"d\"\nkind = \"virtio-scsi\"\nsize = \"64M\"\npci = \"0000:01:00.0\"\n");
        let e = d.kind.def().check(&d, crate::planning::spec::ExecutorKind::Qemu).unwrap_err();
        assert_eq!(e.0, "pci");
    }
}
