//! Storage devices of a run: backing files the testbed creates in the run
//! directory, and passthrough of real NVMe controllers: the checks that
//! keep it away from disks it must not touch (`checks`, `usage`), and with
//! `bind = true` the rebinding to vfio-pci and back (`passthrough`).

pub mod checks;
#[cfg(test)]
pub(crate) mod fake;
pub mod passthrough;
pub mod state;
pub mod sysfs;
pub mod usage;

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use testbed_agent::protocol::DeviceRef;

pub use self::sysfs::Host;
use crate::machine::hostinfo::human_bytes;
use crate::machine::qemu::argv::{Backing, QemuDevice};
use crate::planning::spec::{Backend, DeviceSpec, HostCache, Origin};

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device {name:?}: passthrough of {pci} refused: {reason}")]
    Refused {
        name: String,
        pci: String,
        /// Boxed: the largest refusal would make every DeviceError large.
        reason: Box<checks::Refusal>,
    },
    /// Passthrough needs KVM, and the accelerator decided is not KVM.
    #[error("device {name:?}: passthrough needs KVM: {why}")]
    NeedsKvm { name: String, why: String },
    /// Binding to vfio-pci or restoring the original driver went wrong.
    #[error("device {name:?}: passthrough of {pci}: {reason}")]
    Passthrough {
        name: String,
        pci: String,
        reason: String,
    },
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

/// A passthrough refusal, naming the device, its address and the reason.
pub(crate) fn refused(name: &str, pci: &str, reason: impl Into<checks::Refusal>) -> DeviceError {
    DeviceError::Refused {
        name: name.to_string(),
        pci: pci.to_string(),
        reason: Box::new(reason.into()),
    }
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
    pub fn manifest_entry(&self) -> crate::recording::results::manifest::DeviceEntry {
        crate::recording::results::manifest::DeviceEntry {
            spec: self.spec.clone(),
            backing_files: self.files.clone(),
            host_o_direct: self.host_direct,
            note: self.note.clone(),
        }
    }
}

/// Creates (or on resume reuses) sparse backing files under `dir`, and
/// checks passthrough controllers on `host` (nothing is rebound here: see
/// [`passthrough::bind_for_run`]).
pub fn prepare(
    specs: &[DeviceSpec],
    dir: &Path,
    host: &Host,
) -> Result<Vec<PreparedDevice>, DeviceError> {
    check_space(backing_growth(specs, dir), dir, free_bytes(dir)?)?;
    let mut out = Vec::new();
    for d in specs {
        out.push(match d.kind.def().origin() {
            Origin::HostPci => check_passthrough(d, host)?.0,
            Origin::Emulated => prepare_one(d, dir)?,
        });
    }
    Ok(out)
}

/// The checks of a passthrough device (`bind = true`: all of them, with the
/// controller on nvme; else: already on vfio-pci), as a prepared device and
/// what they found. Reads only.
pub fn check_passthrough(
    d: &DeviceSpec,
    host: &Host,
) -> Result<(PreparedDevice, checks::Controller), DeviceError> {
    let pci = d.pci.clone().unwrap_or_default();
    let proc = usage::ProcFiles::read(host).map_err(|e| refused(&d.name, &pci, e))?;
    let c = if d.bind {
        checks::check_bindable(host, &pci, &proc)
    } else {
        checks::check_prebound(host, &pci, &proc)
    }
    .map_err(|e| refused(&d.name, &pci, e))?;
    let note = match c.driver.as_deref() {
        Some(drv) if d.bind && drv != "vfio-pci" => Some(format!(
            "passthrough {pci}: moved from {drv} to vfio-pci for the run and given back after"
        )),
        _ => None,
    };
    let p = PreparedDevice {
        spec: d.clone(),
        qemu: d.kind.def().qemu(d, vec![]),
        files: vec![],
        host_direct: true,
        note,
    };
    Ok((p, c))
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
        if !crate::planning::spec::device_kinds::has_backing_files(d) {
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

fn prepare_one(d: &DeviceSpec, dir: &Path) -> Result<PreparedDevice, DeviceError> {
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
    Ok(PreparedDevice {
        spec: d.clone(),
        qemu: d.kind.def().qemu(d, backings),
        files,
        host_direct: host_direct && d.backend == Backend::File,
        note,
    })
}

/// What [`prepare`] would hand QEMU for an emulated device, creating
/// nothing (`--dry-run`): backing files named under `dir`, O_DIRECT as the
/// spec asks.
pub fn planned_emulated(d: &DeviceSpec, dir: &Path) -> QemuDevice {
    let backings = (1..=d.namespaces.unwrap_or(1))
        .map(|ns| match d.backend {
            Backend::Null => Backing::Null {
                size: d.size.map_or(0, |s| s.bytes()),
                latency_ns: d.latency_ns.unwrap_or(0),
            },
            Backend::File => Backing::File {
                path: backing_path(dir, &d.name, ns),
                direct: d.host_cache == HostCache::None,
            },
        })
        .collect();
    d.kind.def().qemu(d, backings)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::units::Size;
    use crate::planning::spec::DeviceKind;

    /// A passthrough device as a spec declares it.
    pub(crate) fn passthrough_spec(name: &str, pci: &str, bind: bool) -> DeviceSpec {
        DeviceSpec {
            name: name.into(),
            kind: DeviceKind::Vfio,
            backend: Backend::File,
            size: None,
            logical_block_size: 512,
            namespaces: None,
            queues: None,
            latency_ns: None,
            host_cache: HostCache::None,
            pci: Some(pci.into()),
            bind,
            filesystem: None,
            mount: None,
        }
    }

    /// Without `bind`, as before: a controller someone bound to vfio-pci is
    /// taken as is, anything else is refused and nothing is written.
    #[test]
    fn passthrough_without_bind_takes_only_a_controller_already_on_vfio() {
        use fake::{FakeHost, PCI};
        let f = FakeHost::good();
        f.controller("0000:02:00.0", "0x020000", Some("e1000e"), None);
        f.controller("0000:03:00.0", "0x010802", Some("vfio-pci"), None);
        let check = |pci: &str| {
            check_passthrough(&passthrough_spec("d", pci, false), &f.host)
                .map(|(p, _)| p)
                .map_err(|e| e.to_string())
        };
        f.append("proc/mounts", "/dev/nvme0n1p1 / ext4 rw 0 0\n");
        // The refusal is a value a caller can match, not only a message.
        let typed = check_passthrough(&passthrough_spec("d", PCI, false), &f.host).unwrap_err();
        assert!(
            matches!(
                &typed,
                DeviceError::Refused { reason, .. }
                    if matches!(
                        reason.as_ref(),
                        checks::Refusal::InUse(usage::InUse::Directly { how, .. })
                            if how == "holds the root filesystem"
                    )
            ),
            "{typed:?}"
        );
        let e = check(PCI).unwrap_err();
        assert!(
            e.starts_with("device \"d\": passthrough of 0000:01:00.0 refused: "),
            "{e}"
        );
        assert!(
            e.contains("partition /dev/nvme0n1p1 holds the root filesystem"),
            "{e}"
        );
        f.file("proc/mounts", "/dev/nvme0n1 /data xfs rw 0 0\n");
        let e = check(PCI).unwrap_err();
        assert!(
            e.contains("namespace /dev/nvme0n1 is mounted on /data"),
            "{e}"
        );
        f.file("proc/mounts", "");
        let e = check(PCI).unwrap_err();
        assert!(
            e.contains("bound to nvme, not vfio-pci; set bind = true"),
            "{e}"
        );
        let e = check("0000:02:00.0").unwrap_err();
        assert!(e.contains("not an NVMe controller"), "{e}");
        let e = check("0000:09:00.0").unwrap_err();
        assert!(e.contains("no such PCI device"), "{e}");
        let e = check("01:00.0").unwrap_err();
        assert!(e.contains("not a full PCI address"), "{e}");
        let p = check("0000:03:00.0").unwrap();
        assert_eq!(
            p.qemu,
            QemuDevice::Vfio {
                host: "0000:03:00.0".into()
            }
        );
        assert_eq!(p.note, None);
        // Only the checks ran: the controllers are where they were.
        assert_eq!(f.driver(PCI).as_deref(), Some("nvme"));
        assert_eq!(
            f.read("sys/bus/pci/devices/0000:01:00.0/driver_override"),
            "(null)\n"
        );
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
            bind: false,
            filesystem: None,
            mount: None,
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
        let e = prepare(&[file_device("huge", size, None)], &dir, &Host::real())
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
        let big = prepare(&[file_device("big", 64 << 20, None)], &dir, &Host::real());
        let small = prepare(&[file_device("small", 8 << 20, None)], &dir, &Host::real());
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
            bind: false,
            filesystem: None,
            mount: None,
        };
        let p = prepare(std::slice::from_ref(&spec), t.path(), &Host::real()).unwrap();
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
        let again = prepare(std::slice::from_ref(&spec), t.path(), &Host::real()).unwrap();
        assert_eq!(
            std::fs::metadata(&again[0].files[1]).unwrap().len(),
            64 << 20
        );
    }
}
