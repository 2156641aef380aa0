//! A fake host for tests: a sysfs and procfs tree of plain files in a
//! private tempdir, and a stand-in for the kernel's side of a sysfs write
//! (unbind, probe and bind move the `driver` link as the kernel would).

use std::cell::RefCell;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::PathBuf;
use std::rc::Rc;

use super::sysfs::{Host, Kernel, RealKernel, SysWrite};

pub const PCI: &str = "0000:01:00.0";

pub struct FakeHost {
    _dir: tempfile::TempDir,
    pub host: Host,
}

impl FakeHost {
    /// IOMMU on, nvme and vfio-pci loaded, nothing mounted, no swap.
    pub fn empty() -> FakeHost {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let f = FakeHost {
            host: Host::new(dir.path()),
            _dir: dir,
        };
        for drv in ["nvme", "vfio-pci", "pci-stub", "e1000e", "pcieport"] {
            f.file(&format!("sys/bus/pci/drivers/{drv}/bind"), "");
            f.file(&format!("sys/bus/pci/drivers/{drv}/unbind"), "");
        }
        f.file("sys/bus/pci/drivers_probe", "");
        f.file("proc/mounts", "sysfs /sys sysfs rw 0 0\n");
        f.file(
            "proc/self/mountinfo",
            "22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw\n",
        );
        f.file("proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n");
        f
    }

    /// [`empty`](Self::empty) plus a controller on nvme alone in IOMMU
    /// group 1, with namespace nvme0n1 (259:0) and its partition nvme0n1p1
    /// (259:1), neither in use.
    pub fn good() -> FakeHost {
        let f = FakeHost::empty();
        f.controller(PCI, "0x010802", Some("nvme"), Some("1"));
        f.namespace(PCI, "nvme0", "nvme0n1", "259:0");
        f.partition("nvme0n1", "nvme0n1p1", "259:1");
        f
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.host.path(rel)
    }

    pub fn file(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    pub fn append(&self, rel: &str, text: &str) {
        let old = std::fs::read_to_string(self.path(rel)).unwrap_or_default();
        self.file(rel, &format!("{old}{text}"));
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    pub fn link(&self, rel: &str, target_rel: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = std::fs::remove_file(&p);
        symlink(self.path(target_rel), p).unwrap();
    }

    pub fn controller(&self, pci: &str, class: &str, driver: Option<&str>, group: Option<&str>) {
        let dev = format!("sys/bus/pci/devices/{pci}");
        self.file(&format!("{dev}/class"), &format!("{class}\n"));
        self.file(&format!("{dev}/vendor"), "0x144d\n");
        self.file(&format!("{dev}/device"), "0xa80a\n");
        self.file(&format!("{dev}/driver_override"), "(null)\n");
        if let Some(d) = driver {
            self.link(
                &format!("{dev}/driver"),
                &format!("sys/bus/pci/drivers/{d}"),
            );
        }
        if let Some(g) = group {
            let gdir = format!("sys/kernel/iommu_groups/{g}");
            self.link(&format!("{dev}/iommu_group"), &gdir);
            self.link(&format!("{gdir}/devices/{pci}"), &dev);
        }
    }

    pub fn namespace(&self, pci: &str, ctrl: &str, disk: &str, dev: &str) {
        self.file(
            &format!("sys/bus/pci/devices/{pci}/nvme/{ctrl}/{disk}/size"),
            "100\n",
        );
        self.file(&format!("sys/block/{disk}/dev"), &format!("{dev}\n"));
        std::fs::create_dir_all(self.path(&format!("sys/block/{disk}/holders"))).unwrap();
    }

    pub fn partition(&self, disk: &str, part: &str, dev: &str) {
        let p = format!("sys/block/{disk}/{part}");
        self.file(&format!("{p}/partition"), "1\n");
        self.file(&format!("{p}/dev"), &format!("{dev}\n"));
        std::fs::create_dir_all(self.path(&format!("{p}/holders"))).unwrap();
    }

    /// `holder` (e.g. dm-0, with its dm name and uuid) holds the block
    /// device whose sysfs directory is `of` (relative to the root).
    pub fn holder(&self, of: &str, holder: &str, dev: &str, dm: Option<(&str, &str)>) {
        let h = format!("sys/block/{holder}");
        self.file(&format!("{h}/dev"), &format!("{dev}\n"));
        std::fs::create_dir_all(self.path(&format!("{h}/holders"))).unwrap();
        if let Some((name, uuid)) = dm {
            self.file(&format!("{h}/dm/name"), &format!("{name}\n"));
            self.file(&format!("{h}/dm/uuid"), &format!("{uuid}\n"));
        }
        self.link(&format!("{of}/holders/{holder}"), &h);
    }

    pub fn driver(&self, pci: &str) -> Option<String> {
        self.host.driver(pci)
    }
}

/// The kernel's side of the fake tree. Every write lands in its file (which
/// must exist, as in sysfs) and is logged; `fail_from` makes the n-th write
/// (0-based) and all later ones fail, as a testbed killed there would
/// leave things; `probe_binds` false makes drivers_probe bind nothing.
pub struct FakeKernel {
    pub log: Rc<RefCell<Vec<SysWrite>>>,
    pub fail_from: Option<usize>,
    pub probe_binds: bool,
    attempts: usize,
}

impl FakeKernel {
    pub fn new() -> FakeKernel {
        FakeKernel {
            log: Rc::default(),
            fail_from: None,
            probe_binds: true,
            attempts: 0,
        }
    }
}

impl Kernel for FakeKernel {
    fn write(&mut self, host: &Host, w: &SysWrite) -> std::io::Result<()> {
        self.attempts += 1;
        if self.fail_from.is_some_and(|n| self.attempts > n) {
            return Err(std::io::Error::other("simulated failure"));
        }
        RealKernel.write(host, w)?;
        self.log.borrow_mut().push(w.clone());
        react(host, w, self.probe_binds);
        Ok(())
    }
}

/// What the kernel does after a write to these files.
fn react(host: &Host, w: &SysWrite, probe_binds: bool) {
    let file = w.file.to_string_lossy();
    let pci = w.value.trim();
    let driver_link = host.pci_dev(pci).join("driver");
    let bind_to = |drv: &str| {
        let _ = std::fs::remove_file(&driver_link);
        symlink(host.path("sys/bus/pci/drivers").join(drv), &driver_link).unwrap();
    };
    let parts: Vec<&str> = file.split('/').collect();
    match parts.as_slice() {
        ["sys", "bus", "pci", "devices", _, "driver", "unbind"]
        | ["sys", "bus", "pci", "drivers", _, "unbind"] => {
            let _ = std::fs::remove_file(&driver_link);
        }
        ["sys", "bus", "pci", "drivers", drv, "bind"] => bind_to(drv),
        ["sys", "bus", "pci", "drivers_probe"] if probe_binds => {
            let over = std::fs::read_to_string(host.pci_dev(pci).join("driver_override"))
                .unwrap_or_default();
            let over = over.trim();
            if !over.is_empty() && over != "(null)" {
                bind_to(over);
            }
        }
        _ => {}
    }
}

/// Where a test's state files go.
pub fn state_dir(f: &FakeHost) -> PathBuf {
    f.path("cache/passthrough")
}
