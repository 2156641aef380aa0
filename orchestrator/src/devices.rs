//! Storage devices of a run: backing files the testbed creates in the run
//! directory, and the checks that keep passthrough away from disks it must
//! not touch.

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use testbed_agent::protocol::DeviceRef;

use crate::hostinfo::human_bytes;
use crate::qemu::argv::{Backing, QemuDevice};
use crate::spec::{Backend, DeviceKind, DeviceSpec, HostCache};

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device {name:?}: {reason}")]
    Refused { name: String, reason: String },
    #[error(
        "backing files in {} may grow to {} (their declared sizes), but its filesystem has only {} free; \
         free space, shrink devices[].size or use backend = \"null\"",
        dir.display(), human_bytes(*need), human_bytes(*free)
    )]
    NoSpace { dir: PathBuf, need: u64, free: u64 },
    #[error("cannot check the free space for backing files in {}: {source}", dir.display())]
    Statvfs {
        dir: PathBuf,
        source: nix::errno::Errno,
    },
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
    check_space(backing_growth(specs, dir), dir, free_bytes(dir)?)?;
    let mut out = Vec::new();
    for d in specs {
        out.push(prepare_one(d, dir, sys, mounts)?);
    }
    Ok(out)
}

/// The backing file of namespace `ns` (1-based) of device `name`.
fn backing_path(dir: &Path, name: &str, ns: u32) -> PathBuf {
    if ns == 1 {
        dir.join(format!("{name}.img"))
    } else {
        dir.join(format!("{name}.ns{ns}.img"))
    }
}

/// How many bytes the backing files of `specs` may still take on disk:
/// each sparse file may fill up to its declared size, less what a file
/// kept on resume (same size) already holds.
pub fn backing_growth(specs: &[DeviceSpec], dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    for d in specs {
        if d.kind == DeviceKind::Vfio || d.backend != Backend::File {
            continue;
        }
        let size = d.size.map_or(0, |s| s.bytes());
        for ns in 1..=d.namespaces.unwrap_or(1) {
            let held = std::fs::metadata(backing_path(dir, &d.name, ns))
                .ok()
                .filter(|m| m.len() == size)
                .map_or(0, |m| m.blocks().saturating_mul(512));
            total = total.saturating_add(size.saturating_sub(held));
        }
    }
    total
}

/// Bytes an unprivileged writer may still use on the filesystem of `dir`
/// (or of its nearest existing ancestor, before the run creates it).
pub fn free_bytes(dir: &Path) -> Result<u64, DeviceError> {
    let existing = dir
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or(Path::new(if dir.is_absolute() { "/" } else { "." }));
    let st = nix::sys::statvfs::statvfs(existing).map_err(|source| DeviceError::Statvfs {
        dir: dir.to_path_buf(),
        source,
    })?;
    Ok(st.blocks_available().saturating_mul(st.fragment_size()))
}

/// Refuses backing files that may grow beyond the free space: a guest that
/// fills them would fill the host's disk, and the run's own results with it.
pub fn check_space(need: u64, dir: &Path, free: u64) -> Result<(), DeviceError> {
    if need <= free {
        return Ok(());
    }
    Err(DeviceError::NoSpace {
        dir: dir.to_path_buf(),
        need,
        free,
    })
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
                let file = backing_path(dir, &d.name, ns);
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

    fn file_device(name: &str, size: u64, namespaces: Option<u32>) -> DeviceSpec {
        DeviceSpec {
            name: name.into(),
            kind: DeviceKind::Nvme,
            backend: Backend::File,
            size: Some(Size(size)),
            logical_block_size: 512,
            namespaces,
            queues: None,
            latency_ns: None,
            host_cache: HostCache::None,
            pci: None,
        }
    }

    #[test]
    fn backing_files_may_grow_to_their_declared_sizes() {
        let t = tempfile::tempdir().unwrap();
        let mut null = file_device("zero", 1 << 40, None);
        null.backend = Backend::Null;
        let specs = [
            file_device("a", 64 << 20, Some(2)),
            file_device("b", 1 << 30, None),
            null,
        ];
        // Two namespaces of 64M and 1G; the null device takes no disk.
        assert_eq!(backing_growth(&specs, t.path()), (128 << 20) + (1 << 30));
        // A kept file (resume) counts only for what it may still grow.
        let kept = t.path().join("b.img");
        let f = std::fs::File::create(&kept).unwrap();
        f.set_len(1 << 30).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&vec![7u8; 1 << 20], 0).unwrap();
        f.sync_all().unwrap();
        let growth = backing_growth(&specs, t.path());
        assert!(growth <= (128 << 20) + (1 << 30) - (1 << 20), "{growth}");
    }

    #[test]
    fn the_space_check_says_how_much_the_files_may_grow_and_how_much_is_free() {
        let dir = Path::new("/r/devices");
        check_space(1 << 30, dir, 1 << 30).unwrap();
        let e = check_space((1 << 30) + 1, dir, 512 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/r/devices"), "{e}");
        assert!(e.contains("may grow to 1.0G"), "{e}");
        assert!(e.contains("only 512.0M free"), "{e}");
        // The run directory does not exist yet: its nearest ancestor counts.
        let t = tempfile::tempdir().unwrap();
        assert!(free_bytes(&t.path().join("run/devices")).unwrap() > 0);
    }

    #[test]
    fn prepare_refuses_backing_files_larger_than_the_free_space() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("devices");
        let free = free_bytes(&dir).unwrap();
        // Twice what the filesystem has (others may free some meanwhile).
        let size = (free / 512 * 2 + 1) * 512;
        let e = prepare(
            &[file_device("huge", size, None)],
            &dir,
            Path::new("/sys"),
            "",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("may grow to"), "{e}");
        assert!(!dir.join("huge.img").exists(), "no file created: {e}");
    }

    /// A real small filesystem: 16M of tmpfs.
    #[test]
    #[ignore = "needs root: mounts a tmpfs"]
    fn prepare_on_a_small_tmpfs_refuses_what_does_not_fit() {
        use nix::mount::{MntFlags, MsFlags, mount, umount2};
        let t = tempfile::tempdir().unwrap();
        mount(
            Some("tmpfs"),
            t.path(),
            Some("tmpfs"),
            MsFlags::empty(),
            Some("size=16m"),
        )
        .unwrap();
        let dir = t.path().join("devices");
        let big = prepare(
            &[file_device("big", 64 << 20, None)],
            &dir,
            Path::new("/sys"),
            "",
        );
        let small = prepare(
            &[file_device("small", 8 << 20, None)],
            &dir,
            Path::new("/sys"),
            "",
        );
        umount2(t.path(), MntFlags::MNT_DETACH).unwrap();
        let e = big.unwrap_err().to_string();
        assert!(e.contains("may grow to 64.0M"), "{e}");
        assert!(e.contains("only 16.0M free"), "{e}");
        small.unwrap();
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
