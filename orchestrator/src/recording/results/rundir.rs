//! Layout of results/<experiment>/<run-id>/ and what is already done in it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parquet::file::reader::{FileReader, SerializedFileReader};

use super::manifest::PointRecord;
use crate::host::lock::{self, Lock, LockError, Mode};

/// The run directory's lock file: held (exclusive) by the process running
/// or resuming the run.
pub const LOCK_FILE: &str = ".lock";

/// Why a finished point's samples cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub enum DamagedSamples {
    #[error("{}: {source}", path.display())]
    Missing {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a readable parquet file ({source})", path.display())]
    Unreadable {
        path: PathBuf,
        source: parquet::errors::ParquetError,
    },
    #[error("{}: holds {rows} rows, its record says {recorded}", path.display())]
    RowCount {
        path: PathBuf,
        rows: i64,
        recorded: usize,
    },
}

pub struct RunDir {
    pub root: PathBuf,
}

impl RunDir {
    pub fn manifest(&self) -> PathBuf {
        self.root.join("manifest.json")
    }
    pub fn samples(&self) -> PathBuf {
        self.root.join("samples.parquet")
    }
    pub fn summary(&self) -> PathBuf {
        self.root.join("summary.parquet")
    }
    pub fn spec_copy(&self) -> PathBuf {
        self.root.join("spec.toml")
    }
    pub fn points_dir(&self) -> PathBuf {
        self.root.join("points")
    }
    pub fn point_samples(&self, id: &str) -> PathBuf {
        self.points_dir().join(format!("{id}.parquet"))
    }
    pub fn point_record(&self, id: &str) -> PathBuf {
        self.points_dir().join(format!("{id}.json"))
    }
    pub fn devices_dir(&self) -> PathBuf {
        self.root.join("devices")
    }
    pub fn lock_file(&self) -> PathBuf {
        self.root.join(LOCK_FILE)
    }

    /// Takes the directory for this process, or says which process has it.
    pub fn lock(&self) -> Result<Lock, LockError> {
        lock::try_lock(
            &self.lock_file(),
            Mode::Exclusive,
            &format!("run directory {}", self.root.display()),
        )
    }

    /// Why a finished point's samples cannot be trusted: the file is
    /// missing, unreadable (its footer is read), or holds another number of
    /// rows than its record says. Failed points have no samples to check.
    pub fn check_point(&self, rec: &PointRecord) -> Result<(), DamagedSamples> {
        if !rec.ok {
            return Ok(());
        }
        let path = self.point_samples(&rec.id);
        let file = std::fs::File::open(&path).map_err(|source| DamagedSamples::Missing {
            path: path.clone(),
            source,
        })?;
        let reader =
            SerializedFileReader::new(file).map_err(|source| DamagedSamples::Unreadable {
                path: path.clone(),
                source,
            })?;
        let rows = reader.metadata().file_metadata().num_rows();
        if usize::try_from(rows).ok() != Some(rec.samples) {
            return Err(DamagedSamples::RowCount {
                path,
                rows,
                recorded: rec.samples,
            });
        }
        Ok(())
    }

    /// Records of points written so far, by id, and the record files that
    /// cannot be read (by file stem, with the reason): for --resume, which
    /// runs those points again instead of refusing.
    pub fn scan_records(&self) -> (BTreeMap<String, PointRecord>, Vec<(String, String)>) {
        let mut out = BTreeMap::new();
        let mut damaged = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.points_dir()) else {
            return (out, damaged);
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let stem = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let parsed = std::fs::read_to_string(&p)
                .map_err(|err| format!("{}: {err}", p.display()))
                .and_then(|text| {
                    serde_json::from_str::<PointRecord>(&text)
                        .map_err(|err| format!("{}: corrupt point record: {err}", p.display()))
                });
            match parsed {
                Ok(rec) => {
                    out.insert(rec.id.clone(), rec);
                }
                Err(why) => damaged.push((stem, why)),
            }
        }
        damaged.sort();
        (out, damaged)
    }

    /// The index the next boot takes: at least `at_least`, and after every
    /// boot whose console or QEMU log is in the directory, so an earlier
    /// attempt's logs are never overwritten.
    pub fn next_boot_index(&self, at_least: u32) -> u32 {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return at_least;
        };
        entries
            .flatten()
            .filter_map(|e| log_boot_index(&e.file_name().to_string_lossy()))
            .map(|i| i.saturating_add(1))
            .fold(at_least, u32::max)
    }
}

/// A new run id: UTC time plus a short random suffix.
pub fn new_run_id() -> String {
    let t = super::manifest::utc_now().replace([':', '-'], "");
    format!(
        "{}-{}",
        t.trim_end_matches('Z'),
        &crate::host::random::hex(2)
    )
}

pub fn is_empty_dir(p: &Path) -> bool {
    std::fs::read_dir(p)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true)
}

/// Whether `p` holds nothing but (perhaps) a run directory's lock file.
pub fn holds_no_run(p: &Path) -> bool {
    std::fs::read_dir(p).map_or(true, |d| d.flatten().all(|e| e.file_name() == LOCK_FILE))
}

/// The boot a log file belongs to: `console.log` and `qemu-server.log` are
/// boot 0, `console.boot3.log` and `qemu-client.boot3.log` boot 3.
fn log_boot_index(name: &str) -> Option<u32> {
    let stem = name.strip_suffix(".log")?;
    let rest = stem
        .strip_prefix("console")
        .or_else(|| stem.strip_prefix("qemu"))?;
    match rest.rsplit_once(".boot") {
        Some((_, n)) => n.parse().ok(),
        None if rest.is_empty() || rest.starts_with('-') => Some(0),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_logs_name_the_boots_they_belong_to() {
        for (name, boot) in [
            ("console.log", Some(0)),
            ("qemu.log", Some(0)),
            ("console.boot3.log", Some(3)),
            ("qemu-server.log", Some(0)),
            ("console-client.boot12.log", Some(12)),
            ("manifest.json", None),
            ("consoles.log", None),
        ] {
            assert_eq!(log_boot_index(name), boot, "{name}");
        }
        let t = tempfile::tempdir().unwrap();
        let rd = RunDir {
            root: t.path().to_path_buf(),
        };
        assert_eq!(rd.next_boot_index(0), 0);
        std::fs::write(t.path().join("console.log"), "").unwrap();
        assert_eq!(rd.next_boot_index(0), 1);
        std::fs::write(t.path().join("qemu-client.boot4.log"), "").unwrap();
        assert_eq!(rd.next_boot_index(2), 5);
        assert_eq!(rd.next_boot_index(9), 9);
    }

    #[test]
    fn only_a_lock_file_is_no_run() {
        let t = tempfile::tempdir().unwrap();
        assert!(holds_no_run(t.path()));
        std::fs::write(t.path().join(LOCK_FILE), "").unwrap();
        assert!(holds_no_run(t.path()));
        std::fs::write(t.path().join("spec.toml"), "").unwrap();
        assert!(!holds_no_run(t.path()));
    }
}
