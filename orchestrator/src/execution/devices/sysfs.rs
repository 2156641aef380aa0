//! The host's sysfs and procfs under one root (`/` on a real host, a fake
//! tree in tests and, for `--dry-run` only, `$TESTBED_SYSFS_ROOT`), and the
//! one function every sysfs write goes through.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A test and dry-run aid: the directory holding a fake `sys/` and `proc/`.
/// Only `--dry-run` reads it; a real run always uses `/`, so it can never
/// check one tree and rebind devices of another.
pub const ROOT_ENV: &str = "TESTBED_SYSFS_ROOT";

/// Where `sys/` and `proc/` are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub root: PathBuf,
}

impl Host {
    pub fn new(root: impl Into<PathBuf>) -> Host {
        Host { root: root.into() }
    }

    /// The real host.
    pub fn real() -> Host {
        Host::new("/")
    }

    /// `$TESTBED_SYSFS_ROOT` if set, else the real host (dry runs only).
    pub fn for_dry_run() -> Host {
        match std::env::var_os(ROOT_ENV) {
            Some(r) if !r.is_empty() => Host::new(r),
            _ => Host::real(),
        }
    }

    pub fn is_real(&self) -> bool {
        self.root == Path::new("/")
    }

    /// A path under the root, written as on a real host (`sys/block`).
    pub fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        let rel = rel.as_ref();
        self.root.join(rel.strip_prefix("/").unwrap_or(rel))
    }

    pub fn pci_dev(&self, pci: &str) -> PathBuf {
        self.path("sys/bus/pci/devices").join(pci)
    }

    /// The driver a PCI device is bound to (the name its `driver` link
    /// points at), if any.
    pub fn driver(&self, pci: &str) -> Option<String> {
        link_name(&self.pci_dev(pci).join("driver"))
    }

    /// A /proc file as text; the error names the file as on the host.
    pub fn proc_text(&self, rel: &str) -> Result<String, ProcUnreadable> {
        std::fs::read_to_string(self.path(rel)).map_err(|source| ProcUnreadable {
            file: rel.to_string(),
            source,
        })
    }
}

/// A /proc file the checks need could not be read: "unused" cannot be told
/// from "unknown".
#[derive(Debug, thiserror::Error)]
#[error("cannot read /{file}: {source}")]
pub struct ProcUnreadable {
    /// As on the host, without the leading slash: `proc/mounts`.
    pub file: String,
    pub source: std::io::Error,
}

/// A small sysfs file, trimmed; None when absent or unreadable.
pub fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The last component of a symlink's target (`driver` -> `.../nvme`).
pub fn link_name(path: &Path) -> Option<String> {
    std::fs::read_link(path)
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// Names of the entries of a directory, sorted; empty when it is absent.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// One sysfs write: the file, relative to the host root, and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysWrite {
    pub file: PathBuf,
    pub value: String,
}

impl SysWrite {
    pub fn new(file: impl Into<PathBuf>, value: impl Into<String>) -> SysWrite {
        SysWrite {
            file: file.into(),
            value: value.into(),
        }
    }
}

impl fmt::Display for SysWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "write {:?} to /{}", self.value, self.file.display())
    }
}

/// Whatever carries out sysfs writes: the kernel on a real host, a recorder
/// in a dry run, a simulation in tests.
pub trait Kernel {
    fn write(&mut self, host: &Host, w: &SysWrite) -> std::io::Result<()>;
}

/// Writes to the files themselves; never creates one (sysfs files exist).
#[derive(Debug, Default)]
pub struct RealKernel;

impl Kernel for RealKernel {
    fn write(&mut self, host: &Host, w: &SysWrite) -> std::io::Result<()> {
        let path = host.path(&w.file);
        // As `echo v > file` does (truncating is a no-op on sysfs).
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)?;
        // One write(2): sysfs takes the value whole.
        f.write_all(w.value.as_bytes())
    }
}

/// Records instead of writing (`--dry-run`).
#[derive(Debug, Default)]
pub struct Recorder(pub Vec<SysWrite>);

impl Kernel for Recorder {
    fn write(&mut self, _host: &Host, w: &SysWrite) -> std::io::Result<()> {
        self.0.push(w.clone());
        Ok(())
    }
}
