//! Storage devices of a run: backing files the testbed creates in the run
//! directory, and the checks that keep passthrough away from disks it must
//! not touch.

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use testbed_agent::protocol::DeviceRef;

use crate::qemu::argv::{Backing, QemuDevice};
use crate::spec::{Backend, DeviceKind, DeviceSpec, HostCache};

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device {name:?}: {reason}")]
    Refused { name: String, reason: String },
    #[error("device {name:?}: backing file {path}: {source}")]
    Backing {
        name: String,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A device ready to hand to QEMU, plus what the manifest records.
#[derive(Debug, Clone)]
pub struct PreparedDevice {
    pub spec: DeviceSpec,
    pub qemu: QemuDevice,
    /// Backing files (one per namespace), if any.
    pub files: Vec<PathBuf>,
    /// Whether the host reads with O_DIRECT, and why not if not.
    pub host_direct: bool,
    pub note: Option<String>,
}

impl PreparedDevice {
    pub fn manifest_entry(&self) -> crate::results::manifest::DeviceEntry {
        crate::results::manifest::DeviceEntry {
            spec: self.spec.clone(),
            backing_files: self.files.clone(),
            host_o_direct: self.host_direct,
            note: self.note.clone(),
        }
    }
}

/// Creates (or on resume reuses) sparse backing files under `dir`.
pub fn prepare(
    specs: &[DeviceSpec],
    dir: &Path,
    sys: &Path,
    mounts: &str,
) -> Result<Vec<PreparedDevice>, DeviceError> {
    let mut out = Vec::new();
    for d in specs {
        out.push(prepare_one(d, dir, sys, mounts)?);
    }
    Ok(out)
}

fn prepare_one(
    d: &DeviceSpec,
    dir: &Path,
    sys: &Path,
    mounts: &str,
) -> Result<PreparedDevice, DeviceError> {
    if d.kind == DeviceKind::Vfio {
        let host = d.pci.clone().unwrap_or_default();
        check_passthrough(&d.name, &host, sys, mounts)?;
        return Ok(PreparedDevice {
            spec: d.clone(),
            qemu: QemuDevice::Vfio { host },
            files: vec![],
            host_direct: true,
            note: None,
        });
    }
    let size = d.size.map_or(0, |s| s.bytes());
    let namespaces = d.namespaces.unwrap_or(1);
    let mut backings = Vec::new();
    let mut files = Vec::new();
    let mut host_direct = d.host_cache == HostCache::None;
    let mut note = None;
    for ns in 1..=namespaces {
        match d.backend {
            Backend::Null => backings.push(Backing::Null {
                size,
                latency_ns: d.latency_ns.unwrap_or(0),
            }),
            Backend::File => {
                let file = if ns == 1 {
                    dir.join(format!("{}.img", d.name))
                } else {
                    dir.join(format!("{}.ns{ns}.img", d.name))
                };
                create_sparse(&file, size).map_err(|source| DeviceError::Backing {
                    name: d.name.clone(),
                    path: file.clone(),
                    source,
                })?;
                if host_direct && !supports_o_direct(&file) {
                    host_direct = false;
                    note = Some(format!(
                        "{} does not support O_DIRECT (tmpfs?): QEMU uses the host page cache",
                        dir.display()
                    ));
                }
                files.push(file.clone());
                backings.push(Backing::File {
                    path: file,
                    direct: false,
                });
            }
        }
    }
    for b in &mut backings {
        if let Backing::File { direct, .. } = b {
            *direct = host_direct;
        }
    }
    let qemu = match d.kind {
        DeviceKind::Nvme => QemuDevice::Nvme {
            serial: d.name.clone(),
            namespaces: backings,
            logical_block_size: d.logical_block_size,
            queues: d.queues,
        },
        _ => QemuDevice::VirtioBlk {
            serial: d.name.clone(),
            backing: backings.remove(0),
            logical_block_size: d.logical_block_size,
            queues: d.queues,
        },
    };
    Ok(PreparedDevice {
        spec: d.clone(),
        qemu,
        files,
        host_direct: host_direct && d.backend == Backend::File,
        note,
    })
}

/// A sparse file of exactly `size` bytes; an existing one of that size is kept.
fn create_sparse(path: &Path, size: u64) -> std::io::Result<()> {
    if let Ok(m) = std::fs::metadata(path)
        && m.len() == size
    {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)?;
    f.set_len(size)
}

fn supports_o_direct(path: &Path) -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .is_ok()
}

/// Device refs with host paths (for the host executor: the files themselves).
pub fn host_refs(
    prepared: &[PreparedDevice],
    refs: &BTreeMap<String, DeviceRef>,
) -> BTreeMap<String, DeviceRef> {
    let mut out = refs.clone();
    for p in prepared {
        for (i, f) in p.files.iter().enumerate() {
            let name = if i == 0 {
                p.spec.name.clone()
            } else {
                format!("{}.ns{}", p.spec.name, i + 1)
            };
            if let Some(r) = out.get_mut(&name) {
                r.path = Some(f.to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// Refuses a passthrough controller unless it is plainly safe to take: it
/// exists, is an NVMe controller, is bound to vfio-pci (the testbed never
/// rebinds a driver itself), and none of its namespaces is mounted, used as
/// swap, held by another device (LVM, md) or holds the root filesystem.
pub fn check_passthrough(
    name: &str,
    pci: &str,
    sys: &Path,
    mounts: &str,
) -> Result<(), DeviceError> {
    let refuse = |reason: String| DeviceError::Refused {
        name: name.to_string(),
        reason: format!("passthrough of {pci} refused: {reason}"),
    };
    let valid = pci.len() == 12
        && pci.chars().enumerate().all(|(i, c)| match i {
            4 | 7 => c == ':',
            10 => c == '.',
            _ => c.is_ascii_hexdigit(),
        });
    if !valid {
        return Err(refuse("not a full PCI address like 0000:3b:00.0".into()));
    }
    let dev = sys.join("bus/pci/devices").join(pci);
    if !dev.exists() {
        return Err(refuse("no such PCI device".into()));
    }
    let class = std::fs::read_to_string(dev.join("class")).unwrap_or_default();
    if !class.trim().starts_with("0x0108") {
        return Err(refuse(format!(
            "class {} is not an NVMe controller (0x0108xx)",
            class.trim()
        )));
    }
    // Block devices still visible through the nvme driver.
    let mut disks = Vec::new();
    if let Ok(ctrls) = std::fs::read_dir(dev.join("nvme")) {
        for c in ctrls.flatten() {
            if let Ok(entries) = std::fs::read_dir(c.path()) {
                for e in entries.flatten() {
                    let n = e.file_name().to_string_lossy().into_owned();
                    if n.starts_with("nvme") && n.contains('n') && e.path().join("size").exists() {
                        disks.push(n);
                    }
                }
            }
        }
    }
    for disk in &disks {
        for line in mounts.lines() {
            let mut f = line.split_whitespace();
            let (src, target) = (f.next().unwrap_or(""), f.next().unwrap_or(""));
            if src.starts_with(&format!("/dev/{disk}")) {
                let what = if target == "/" {
                    "holds the root filesystem"
                } else {
                    "is mounted"
                };
                return Err(refuse(format!("/dev/{disk} {what} (on {target})")));
            }
        }
        let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
        if swaps
            .lines()
            .any(|l| l.starts_with(&format!("/dev/{disk}")))
        {
            return Err(refuse(format!("/dev/{disk} is in use as swap")));
        }
        let holders = sys.join("block").join(disk).join("holders");
        if std::fs::read_dir(&holders)
            .map(|mut d| d.next().is_some())
            .unwrap_or(false)
        {
            return Err(refuse(format!(
                "/dev/{disk} is held by another device (LVM, md, dm)"
            )));
        }
    }
    let driver = std::fs::read_link(dev.join("driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    match driver.as_deref() {
        Some("vfio-pci") => Ok(()),
        Some(other) => Err(refuse(format!(
            "bound to {other}, not vfio-pci; unbind it and bind vfio-pci yourself once you are sure nothing on it matters"
        ))),
        None => Err(refuse(
            "bound to no driver; bind it to vfio-pci first".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Size;

    fn fake_ctrl(sys: &Path, pci: &str, class: &str, disk: Option<&str>, driver: Option<&str>) {
        let dev = sys.join("bus/pci/devices").join(pci);
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("class"), class).unwrap();
        if let Some(d) = disk {
            let p = dev.join("nvme/nvme0").join(d);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("size"), "100").unwrap();
            std::fs::create_dir_all(sys.join("block").join(d).join("holders")).unwrap();
        }
        if let Some(drv) = driver {
            let target = sys.join("bus/pci/drivers").join(drv);
            std::fs::create_dir_all(&target).unwrap();
            std::os::unix::fs::symlink(&target, dev.join("driver")).unwrap();
        }
    }

    #[test]
    fn passthrough_refuses_unsafe_devices_and_accepts_a_vfio_bound_one() {
        let t = tempfile::tempdir().unwrap();
        let sys = t.path();
        fake_ctrl(
            sys,
            "0000:01:00.0",
            "0x010802\n",
            Some("nvme0n1"),
            Some("nvme"),
        );
        fake_ctrl(sys, "0000:02:00.0", "0x020000\n", None, Some("e1000e"));
        fake_ctrl(sys, "0000:03:00.0", "0x010802\n", None, Some("vfio-pci"));
        let mounts = "/dev/nvme0n1p2 / ext4 rw 0 0\n";
        let e = check_passthrough("d", "0000:01:00.0", sys, mounts)
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds the root filesystem"), "{e}");
        let e = check_passthrough("d", "0000:01:00.0", sys, "/dev/nvme0n1 /data xfs rw 0 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is mounted"), "{e}");
        let e = check_passthrough("d", "0000:01:00.0", sys, "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bound to nvme"), "{e}");
        let e = check_passthrough("d", "0000:02:00.0", sys, "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an NVMe controller"), "{e}");
        let e = check_passthrough("d", "0000:09:00.0", sys, "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no such PCI device"), "{e}");
        let e = check_passthrough("d", "01:00.0", sys, "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a full PCI address"), "{e}");
        check_passthrough("d", "0000:03:00.0", sys, mounts).unwrap();
    }

    #[test]
    fn backing_files_are_sparse_in_the_run_dir_and_kept_on_resume() {
        let t = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let spec = DeviceSpec {
            name: "data".into(),
            kind: DeviceKind::Nvme,
            backend: Backend::File,
            size: Some(Size(64 << 20)),
            logical_block_size: 512,
            namespaces: Some(2),
            queues: None,
            latency_ns: None,
            host_cache: HostCache::None,
            pci: None,
        };
        let p = prepare(std::slice::from_ref(&spec), t.path(), Path::new("/sys"), "").unwrap();
        assert_eq!(p[0].files.len(), 2);
        let meta = std::fs::metadata(&p[0].files[0]).unwrap();
        assert_eq!(meta.len(), 64 << 20);
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 < 1 << 20, "sparse");
        assert!(p[0].host_direct);
        std::fs::write(&p[0].files[1], vec![1u8; 10]).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p[0].files[0])
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        // Same size: kept as is (a resumed run keeps its data).
        let again = prepare(std::slice::from_ref(&spec), t.path(), Path::new("/sys"), "").unwrap();
        assert_eq!(
            std::fs::metadata(&again[0].files[1]).unwrap().len(),
            64 << 20
        );
    }
}
