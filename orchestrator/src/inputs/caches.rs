//! What the cache directory (`$TESTBED_CACHE`, `~/.cache/testbed`) holds,
//! entry by entry, and how it is kept to a size: `testbed cache list` and
//! `testbed cache prune`.
//!
//! An entry is one thing a run or build can reuse: a kernel (`kernels/KEY`)
//! and its build tree (`kernel-work/KEY`), a root image
//! (`images/KEY.ext4` with its `.json`), an initramfs (`initramfs/SHA.cpio`),
//! BPF objects (`bpf/KEY`), a download (`downloads/NAME`). Each has the lock
//! file its builder takes (`lock.rs`); a run holds the locks of the kernel,
//! initramfs and root image it boots, shared, until it ends
//! ([`hold_for_run`]), and prune takes an entry's lock exclusively before it
//! removes anything, so an entry in use is never removed. Taking a lock
//! also marks the entry used: its last use is its lock file's time.
//! ccache's directory and cargo's target directory are listed, never
//! pruned (ccache keeps its own limit, `ccache -M`; `cargo clean`).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::host::lock::{self, Lock, LockError, Mode};

/// One reusable thing in the cache.
#[derive(Debug, Clone)]
pub struct Entry {
    /// `kernels`, `kernel-work`, `images`, ...
    pub area: &'static str,
    /// The key, hash or file name within the area.
    pub name: String,
    /// What it is, for people ("kernel vm-hooks 6.1.0", "build tree").
    pub what: String,
    /// Its files (an image has two).
    pub paths: Vec<PathBuf>,
    /// Disk blocks in use (sparse images count what they hold).
    pub bytes: u64,
    /// When it was last made or used.
    pub last_used: SystemTime,
    /// `None`: listed, never pruned.
    pub lock: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CacheError + '_ {
    move |source| CacheError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Areas holding one entry per key or file, and how each names its lock.
const AREAS: &[&str] = &[
    "kernels",
    "kernel-work",
    "images",
    "initramfs",
    "bpf",
    "downloads",
];

/// Directories listed whole and never pruned.
const WHOLE: &[(&str, &str)] = &[
    ("ccache", "kernel compiler cache (ccache -M sets its size)"),
    (
        "cargo-target",
        "cargo's build output (.ci/run's; cargo clean)",
    ),
];

/// The entry (area, name) a cache path belongs to, and its lock file.
pub fn entry_of(root: &Path, path: &Path) -> Option<(&'static str, String, PathBuf)> {
    let rel = path.strip_prefix(root).ok()?;
    let mut parts = rel.components();
    let area = parts.next()?.as_os_str().to_str()?;
    let file = parts.next()?.as_os_str().to_str()?.to_string();
    let area = *AREAS.iter().find(|a| **a == area)?;
    if file.starts_with('.') {
        return None;
    }
    let name = match area {
        "images" => file
            .strip_suffix(".ext4")
            .or_else(|| file.strip_suffix(".json"))
            .unwrap_or(&file)
            .to_string(),
        "initramfs" => file.strip_suffix(".cpio").unwrap_or(&file).to_string(),
        _ => file,
    };
    let lock = lock_path(root, area, &name);
    Some((area, name, lock))
}

/// The lock file the builder of entry `name` in `area` takes.
fn lock_path(root: &Path, area: &str, name: &str) -> PathBuf {
    match area {
        // A kernel's build tree goes with its kernel.
        "kernels" | "kernel-work" => root.join("kernels").join(format!(".{name}.lock")),
        "bpf" => root.join("bpf").join(format!("{name}.lock")),
        _ => root.join(area).join(format!(".{name}.lock")),
    }
}

/// Every entry under `root`, oldest use first.
pub fn list(root: &Path) -> Result<Vec<Entry>, CacheError> {
    let kernels: std::collections::BTreeMap<String, String> =
        crate::inputs::kernel::list_cached(root)
            .unwrap_or_default()
            .into_iter()
            .map(|k| (k.key, format!("kernel {} {}", k.name, k.release)))
            .collect();
    let mut out: Vec<Entry> = Vec::new();
    for area in AREAS {
        let dir = root.join(area);
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in read.flatten() {
            let path = e.path();
            // Lock files, staging and temporary files are not entries;
            // nor is a BPF object directory's lock beside it.
            let Some((area, name, lock)) = entry_of(root, &path) else {
                continue;
            };
            if area == "bpf" && path.extension().is_some_and(|x| x == "lock") {
                continue;
            }
            let bytes = disk_usage(&path)?;
            let modified = modified(&path);
            if let Some(same) = out.iter_mut().find(|x| x.area == area && x.name == name) {
                same.paths.push(path);
                same.bytes += bytes;
                same.last_used = same.last_used.max(modified);
                continue;
            }
            let last_used = std::fs::metadata(&lock)
                .and_then(|m| m.modified())
                .map_or(modified, |t| t.max(modified));
            out.push(Entry {
                area,
                what: describe(area, &name, &kernels),
                name,
                paths: vec![path],
                bytes,
                last_used,
                lock: Some(lock),
            });
        }
    }
    for (dir, what) in WHOLE {
        let path = root.join(dir);
        if path.is_dir() {
            out.push(Entry {
                area: dir,
                name: String::new(),
                what: what.to_string(),
                bytes: disk_usage(&path)?,
                last_used: modified(&path),
                paths: vec![path],
                lock: None,
            });
        }
    }
    out.sort_by_key(|e| e.last_used);
    Ok(out)
}

fn modified(path: &Path) -> SystemTime {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// What an entry is; `kernels` names the cached kernels by key.
fn describe(
    area: &str,
    name: &str,
    kernels: &std::collections::BTreeMap<String, String>,
) -> String {
    let kernel = || kernels.get(name).cloned();
    match area {
        "kernels" => kernel().unwrap_or_else(|| "kernel (not loadable)".into()),
        "kernel-work" => format!(
            "build tree of {}",
            kernel().unwrap_or_else(|| "a kernel not in the cache".into())
        ),
        "images" => "root image".into(),
        "initramfs" => "initramfs".into(),
        "bpf" => format!(
            "BPF objects for {}",
            kernel().unwrap_or_else(|| "a kernel not in the cache".into())
        ),
        _ => "download".into(),
    }
}

/// Bytes of disk a file or directory tree takes (links not followed).
pub fn disk_usage(path: &Path) -> Result<u64, CacheError> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        // Gone since it was listed (a build finished and renamed it).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(path)(e)),
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        for e in std::fs::read_dir(path).map_err(io(path))?.flatten() {
            total += disk_usage(&e.path())?;
        }
    }
    Ok(total)
}

/// What to remove: entries unused for longer than `older_than`, then the
/// least recently used until the cache is at most `max_bytes`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Policy {
    pub max_bytes: Option<u64>,
    pub older_than: Option<Duration>,
}

/// What prune did.
#[derive(Debug, Default)]
pub struct Pruned {
    pub removed: Vec<Entry>,
    /// Entries it would have removed but another process holds, with who.
    pub busy: Vec<(Entry, String)>,
    /// Bytes the cache holds after.
    pub bytes_after: u64,
}

/// Removes what `policy` asks, least recently used first, never an entry
/// whose lock another process holds (a run booting it, a build).
pub fn prune(root: &Path, policy: Policy, now: SystemTime) -> Result<Pruned, CacheError> {
    let entries = list(root)?;
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    let mut done = Pruned::default();
    for e in entries {
        let Some(lock_file) = &e.lock else {
            continue;
        };
        let old = policy
            .older_than
            .is_some_and(|d| now.duration_since(e.last_used).unwrap_or_default() > d);
        let over = policy.max_bytes.is_some_and(|max| total > max);
        if !old && !over {
            continue;
        }
        let held = match lock::try_lock(lock_file, Mode::Exclusive, &e.what) {
            Ok(held) => held,
            Err(LockError::Busy { pid, .. }) => {
                done.busy.push((e, lock::holder_text(pid)));
                continue;
            }
            Err(other) => return Err(other.into()),
        };
        for p in &e.paths {
            let gone = if p.is_dir() {
                std::fs::remove_dir_all(p)
            } else {
                std::fs::remove_file(p)
            };
            match gone {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => return Err(io(p)(err)),
            }
        }
        drop(held);
        total = total.saturating_sub(e.bytes);
        done.removed.push(e);
    }
    done.bytes_after = total;
    Ok(done)
}

/// Shared holds on the cache entries among `paths` (a run's kernel,
/// initramfs and root image), each marked used now; prune leaves them
/// alone until the holds are dropped. Paths outside the cache are skipped.
pub fn hold_for_run(root: &Path, paths: &[PathBuf]) -> Result<Vec<Lock>, CacheError> {
    let mut held = Vec::new();
    for p in paths {
        let Some((area, name, lock_file)) = entry_of(root, p) else {
            continue;
        };
        // BPF objects are copied into the initramfs, never read again; and
        // their build takes its lock even when nothing is to be made (a
        // Slurm task beside a running one would wait for it).
        if area == "bpf" || held_already(&held, &lock_file) {
            continue;
        }
        if let Some(dir) = lock_file.parent() {
            crate::host::fsutil::create_dir(dir).map_err(io(dir))?;
        }
        held.push(lock::lock(
            &lock_file,
            Mode::Shared,
            &format!("cache entry {name}"),
            &mut |_| {},
        )?);
        // The lock file's time is the entry's last use.
        let _ = std::fs::File::options()
            .write(true)
            .open(&lock_file)
            .and_then(|f| f.set_modified(SystemTime::now()));
    }
    Ok(held)
}

fn held_already(held: &[Lock], lock_file: &Path) -> bool {
    held.iter().any(|l| l.path() == lock_file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in [
            "kernels/k1",
            "kernel-work/k1",
            "bpf/k1",
            "images",
            "initramfs",
            "ccache",
        ] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        std::fs::write(r.join("kernels/k1/bzImage"), vec![1u8; 8192]).unwrap();
        std::fs::write(r.join("kernel-work/k1/big"), vec![1u8; 64 << 10]).unwrap();
        std::fs::write(r.join("kernels/.k1.lock"), "").unwrap();
        std::fs::write(r.join("bpf/k1.lock"), "").unwrap();
        std::fs::write(r.join("images/i1.ext4"), vec![1u8; 8192]).unwrap();
        std::fs::write(r.join("images/i1.json"), "{}").unwrap();
        std::fs::write(r.join("initramfs/s1.cpio"), vec![1u8; 4096]).unwrap();
        t
    }

    #[test]
    fn lists_each_entry_once_with_its_lock_and_skips_lock_files() {
        let t = cache();
        let entries = list(t.path()).unwrap();
        let mut names: Vec<(&str, &str)> =
            entries.iter().map(|e| (e.area, e.name.as_str())).collect();
        names.sort();
        assert_eq!(
            names,
            [
                ("bpf", "k1"),
                ("ccache", ""),
                ("images", "i1"),
                ("initramfs", "s1"),
                ("kernel-work", "k1"),
                ("kernels", "k1")
            ]
        );
        let image = entries.iter().find(|e| e.area == "images").unwrap();
        assert_eq!(image.paths.len(), 2, "the image and its sidecar");
        let tree = entries.iter().find(|e| e.area == "kernel-work").unwrap();
        assert_eq!(
            tree.lock.as_deref(),
            Some(t.path().join("kernels/.k1.lock").as_path())
        );
        assert!(tree.bytes >= 64 << 10, "{}", tree.bytes);
    }

    #[test]
    fn prune_spares_an_entry_a_run_holds_and_what_fits() {
        let t = cache();
        let root = t.path();
        let held = hold_for_run(root, &[root.join("images/i1.ext4")]).unwrap();
        assert_eq!(held.len(), 1);
        // The lock file is shared with another open file description: a
        // second holder is what a running `testbed run` would be.
        let out = prune(
            root,
            Policy {
                max_bytes: Some(0),
                older_than: None,
            },
            SystemTime::now(),
        )
        .unwrap();
        let removed: Vec<&str> = out.removed.iter().map(|e| e.area).collect();
        assert!(
            removed.contains(&"kernel-work") && removed.contains(&"kernels"),
            "{removed:?}"
        );
        assert_eq!(out.busy.len(), 1, "{:?}", out.busy);
        assert_eq!(out.busy[0].0.area, "images");
        assert!(root.join("images/i1.ext4").exists() && root.join("images/i1.json").exists());
        assert!(!root.join("kernel-work/k1").exists());
        assert!(root.join("ccache").exists(), "ccache is never pruned");
        drop(held);
        // Nothing is older than a day: an age limit alone removes nothing.
        let out = prune(
            root,
            Policy {
                max_bytes: None,
                older_than: Some(Duration::from_secs(86_400)),
            },
            SystemTime::now(),
        )
        .unwrap();
        assert!(out.removed.is_empty(), "{:?}", out.removed);
    }
}
