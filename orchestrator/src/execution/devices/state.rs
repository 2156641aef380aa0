//! The record of a controller the testbed took from its driver, one file
//! per device under `<cache>/passthrough/<pci>.json`, written before the
//! first sysfs write and removed once the original driver has it back; so
//! a testbed killed in between leaves enough to put it back.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub pci: String,
    /// The spec's device name.
    pub name: String,
    /// The driver to give it back to (`nvme`).
    pub original_driver: String,
    pub vendor: String,
    pub device: String,
    pub run_dir: PathBuf,
    /// The testbed that bound it, and its start time (pids are reused).
    pub pid: u32,
    #[serde(default)]
    pub pid_start_ticks: Option<u64>,
    /// UTC, as in manifests.
    pub time: String,
}

impl State {
    /// Whether the testbed that bound it still runs.
    pub fn owner_alive(&self) -> bool {
        self.pid_start_ticks.is_some()
            && crate::host::procfs::start_ticks(self.pid) == self.pid_start_ticks
    }

    /// The restore command, to quote in messages.
    pub fn restore_command(&self) -> String {
        format!("testbed passthrough restore {}", self.pci)
    }
}

pub fn dir(cache: &Path) -> PathBuf {
    cache.join("passthrough")
}

pub fn file(dir: &Path, pci: &str) -> PathBuf {
    dir.join(format!("{pci}.json"))
}

/// Writes the state atomically; the directory is private (0700).
pub fn write(dir: &Path, s: &State) -> std::io::Result<PathBuf> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let path = file(dir, &s.pci);
    let text = serde_json::to_vec_pretty(s).map_err(std::io::Error::other)?;
    crate::host::fsutil::write_atomic(&path, &text)?;
    Ok(path)
}

/// A state file that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a passthrough state file: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
}

pub fn read(path: &Path) -> Result<State, StateFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| StateFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| StateFileError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Every state file in `dir`, sorted by name, with what it says.
pub fn list(dir: &Path) -> Vec<(PathBuf, Result<State, StateFileError>)> {
    super::sysfs::entries(dir)
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .map(|n| {
            let p = dir.join(n);
            let s = read(&p);
            (p, s)
        })
        .collect()
}
