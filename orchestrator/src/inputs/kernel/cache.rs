//! Cache layout: `<cache_root>/kernels/<key>/` holds one finished artefact
//! (bzImage, meta.json, ...). Artefacts are staged in a sibling temp dir and
//! renamed into place, so an interrupted fetch or build leaves no half entry.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{KernelArtifact, KernelError};

pub const META: &str = "meta.json";
pub const BZIMAGE: &str = "bzImage";
pub const MODULES_DIR: &str = "modules";
/// `modules.builtin` of a built kernel (stock kernels keep theirs in lib/modules).
pub const BUILTIN_LIST: &str = "modules.builtin";

/// Default cache root: `$TESTBED_CACHE`, else `~/.cache/testbed`.
pub fn default_cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("TESTBED_CACHE").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache").join("testbed")
}

pub fn kernels_dir(cache_root: &Path) -> PathBuf {
    cache_root.join("kernels")
}

pub fn downloads_dir(cache_root: &Path) -> PathBuf {
    cache_root.join("downloads")
}

pub fn entry_dir(cache_root: &Path, key: &str) -> PathBuf {
    kernels_dir(cache_root).join(key)
}

/// What `meta.json` records about one artefact.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Meta {
    pub name: String,
    pub key: String,
    pub kind: String,
    pub release: String,
    pub description: String,
    pub config_sha256: Option<String>,
    pub patches: Vec<String>,
    pub has_modules: bool,
    /// Modules the descriptor asked the guest to load.
    pub modules: Vec<String>,
    /// Inputs of the key, for `kernel show` (free-form, informational).
    #[serde(default)]
    pub inputs: serde_json::Map<String, serde_json::Value>,
    /// Seconds since the epoch when the artefact was made.
    pub created_unix: u64,
}

impl Meta {
    pub fn write(&self, dir: &Path) -> Result<(), KernelError> {
        let path = dir.join(META);
        let text = serde_json::to_string_pretty(self).map_err(|e| KernelError::Json {
            path: path.clone(),
            message: e.to_string(),
        })?;
        std::fs::write(&path, text + "\n").map_err(|e| KernelError::io(&path, e))
    }

    pub fn read(dir: &Path) -> Result<Self, KernelError> {
        let path = dir.join(META);
        let text = std::fs::read_to_string(&path).map_err(|e| KernelError::io(&path, e))?;
        serde_json::from_str(&text).map_err(|e| KernelError::Json {
            path,
            message: e.to_string(),
        })
    }

    pub fn into_artifact(self, dir: &Path) -> KernelArtifact {
        KernelArtifact {
            name: self.name,
            key: self.key,
            bzimage: dir.join(BZIMAGE),
            release: self.release,
            modules_dir: self.has_modules.then(|| dir.join(MODULES_DIR)),
            config_sha256: self.config_sha256,
            patches: self.patches,
            description: self.description,
            needed_modules: self.modules,
        }
    }
}

/// The finished artefact for `key`, if present and sound.
pub fn load_entry(cache_root: &Path, key: &str) -> Result<Option<KernelArtifact>, KernelError> {
    let dir = entry_dir(cache_root, key);
    if !dir.join(META).is_file() {
        return Ok(None);
    }
    let meta = Meta::read(&dir)?;
    if !dir.join(BZIMAGE).is_file() {
        return Err(KernelError::CacheDamaged {
            dir,
            message: format!("{BZIMAGE} is missing"),
        });
    }
    Ok(Some(meta.into_artifact(&dir)))
}

/// Every finished artefact, sorted by name then key.
pub fn list(cache_root: &Path) -> Result<Vec<KernelArtifact>, KernelError> {
    let root = kernels_dir(cache_root);
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(KernelError::io(&root, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| KernelError::io(&root, e))?;
        let name = entry.file_name();
        let Some(key) = name.to_str() else { continue };
        if key.starts_with('.') {
            continue; // staging dirs
        }
        if let Some(a) = load_entry(cache_root, key)? {
            out.push(a);
        }
    }
    out.sort_by(|a, b| (&a.name, &a.key).cmp(&(&b.name, &b.key)));
    Ok(out)
}

/// Holds the cache entry `key` while this process fetches, builds or
/// installs it (and its build tree). A second process waits, saying once
/// for whom, and then finds the finished entry instead of making it again.
pub fn lock_entry(
    cache_root: &Path,
    key: &str,
    what: &str,
    progress: &dyn Fn(&str),
) -> Result<crate::host::lock::Lock, KernelError> {
    // Dot-named, so `list` skips it like the staging dirs.
    let path = kernels_dir(cache_root).join(format!(".{key}.lock"));
    lock_file(&path, what, progress)
}

/// An exclusive lock on `path` for the kernel module's caches, waiting
/// (and saying so once) while another process holds it.
pub fn lock_file(
    path: &Path,
    what: &str,
    progress: &dyn Fn(&str),
) -> Result<crate::host::lock::Lock, KernelError> {
    crate::host::lock::lock(path, crate::host::lock::Mode::Exclusive, what, &mut |m| {
        progress(m)
    })
    .map_err(|e| match e {
        crate::host::lock::LockError::Io { path, source } => KernelError::io(path, source),
        busy => KernelError::io(path, std::io::Error::other(busy.to_string())),
    })
}

/// A staging directory for `key`, removed on drop unless committed.
pub struct Staging {
    pub dir: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl Staging {
    pub fn new(cache_root: &Path, key: &str) -> Result<Self, KernelError> {
        let root = kernels_dir(cache_root);
        remove_dead_staging(&root, key);
        let dir = root.join(format!(".tmp-{key}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| KernelError::io(&dir, e))?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| KernelError::io(&dir, e))?;
        Ok(Staging {
            dir,
            target: entry_dir(cache_root, key),
            committed: false,
        })
    }

    /// Move into place. If another process finished the same key first, keep theirs.
    pub fn commit(mut self) -> Result<PathBuf, KernelError> {
        match std::fs::rename(&self.dir, &self.target) {
            Ok(()) => {
                self.committed = true;
                Ok(self.target.clone())
            }
            Err(_) if self.target.join(META).is_file() => Ok(self.target.clone()),
            Err(e) => Err(KernelError::io(&self.target, e)),
        }
    }
}

/// Staging dirs of `key` left by processes that died (killed mid-build).
fn remove_dead_staging(root: &Path, key: &str) {
    let prefix = format!(".tmp-{key}-");
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            // Best effort: a leftover is harmless, only wasted space.
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            // Best effort: a leftover staging dir is ignored by `list` anyway.
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
