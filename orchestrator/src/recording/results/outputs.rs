//! What a run wrote, file by file: size, sha256 and, for a Parquet table,
//! its rows. The list goes into the manifest when the run finishes, so
//! that `testbed verify` can tell years later (or on a reviewer's machine,
//! after `testbed pack`) whether any file changed since.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::fsutil::sha256_file;

/// One file the run wrote, relative to its run directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputFile {
    /// `/`-separated, relative to the run directory.
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
    /// Rows of a Parquet table, from its footer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
}

/// Names at the top of a run directory that are not the run's output: the
/// manifest (which lists the outputs) with its digest, `pack`'s index of
/// what it added, the devices' backing files (scratch
/// the run may delete), what `plot`, `check` and `report` derive from the
/// run later (they can be drawn again), and the kernel files `pack` adds.
/// Names starting with `.` (the lock, temporary and spill files) are never
/// outputs either.
pub const NOT_OUTPUTS: &[&str] = &[
    "manifest.json",
    super::integrity::MANIFEST_DIGEST,
    super::integrity::PACK_INDEX,
    "devices",
    "figures",
    "claims.json",
    "report.html",
    PACKED_KERNEL_DIR,
];

/// Where `testbed pack` puts the kernel's configuration and patches
/// inside a packed run directory.
pub const PACKED_KERNEL_DIR: &str = "kernel";

#[derive(Debug, thiserror::Error)]
pub enum OutputsError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a readable parquet file ({source})", path.display())]
    Parquet {
        path: PathBuf,
        source: parquet::errors::ParquetError,
    },
}

/// Every output file under `root`, sorted by path.
pub fn record(root: &Path) -> Result<Vec<OutputFile>, OutputsError> {
    let mut out = Vec::new();
    for rel in output_paths(root)? {
        out.push(describe(root, &rel)?);
    }
    Ok(out)
}

/// The output files' paths under `root` (relative, sorted).
fn output_paths(root: &Path) -> Result<Vec<String>, OutputsError> {
    let mut found = Vec::new();
    walk(root, "", NOT_OUTPUTS, &mut found)?;
    found.sort();
    Ok(found)
}

/// Every regular file under `dir` but dot-named ones (relative, sorted).
pub fn files_under(dir: &Path) -> Result<Vec<String>, OutputsError> {
    let mut found = Vec::new();
    walk(dir, "", &[], &mut found)?;
    found.sort();
    Ok(found)
}

/// Files under `dir` into `found`, as `prefix` + their path; `skip_top`
/// names what to leave out at the top.
fn walk(
    dir: &Path,
    prefix: &str,
    skip_top: &[&str],
    found: &mut Vec<String>,
) -> Result<(), OutputsError> {
    let read = |source| OutputsError::Read {
        path: dir.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(read)? {
        let entry = entry.map_err(read)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || (prefix.is_empty() && skip_top.contains(&name.as_str())) {
            continue;
        }
        let rel = format!("{prefix}{name}");
        // Not followed: a link is not something the run wrote.
        let kind = entry.file_type().map_err(read)?;
        if kind.is_dir() {
            walk(&entry.path(), &format!("{rel}/"), skip_top, found)?;
        } else if kind.is_file() {
            found.push(rel);
        }
    }
    Ok(())
}

/// The record of the file `rel` under `root`: size, sha256, a table's rows.
pub fn describe(root: &Path, rel: &str) -> Result<OutputFile, OutputsError> {
    let path = root.join(rel);
    let (sha256, bytes) = sha256_file(&path).map_err(|source| OutputsError::Read {
        path: path.clone(),
        source,
    })?;
    let rows = if rel.ends_with(".parquet") {
        Some(parquet_rows(&path)?)
    } else {
        None
    };
    Ok(OutputFile {
        path: rel.to_string(),
        bytes,
        sha256,
        rows,
    })
}

fn parquet_rows(path: &Path) -> Result<u64, OutputsError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let file = std::fs::File::open(path).map_err(|source| OutputsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = SerializedFileReader::new(file).map_err(|source| OutputsError::Parquet {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(reader.metadata().file_metadata().num_rows().max(0) as u64)
}

/// What `verify` found: the files that match their record, those that do
/// not (each with why), and files that are not in the record.
#[derive(Debug, Default)]
pub struct Verification {
    pub matched: usize,
    pub bytes: u64,
    pub rows: u64,
    pub problems: Vec<String>,
    /// Output files the manifest does not list (written after the run).
    pub unrecorded: Vec<String>,
}

/// Checks every recorded file under `root`: present, the same size, the
/// same sha256 and, for a table, the same rows.
pub fn verify(root: &Path, recorded: &[OutputFile]) -> Verification {
    let mut v = Verification::default();
    for want in recorded {
        let now = match describe(root, &want.path) {
            Ok(now) => now,
            Err(e) => {
                v.problems.push(format!("{}: {e}", want.path));
                continue;
            }
        };
        if now.bytes != want.bytes {
            v.problems.push(format!(
                "{}: {} bytes, the manifest records {}",
                want.path, now.bytes, want.bytes
            ));
        } else if now.sha256 != want.sha256 {
            v.problems.push(format!(
                "{}: its sha256 is {}, the manifest records {} (same size: bytes changed in place)",
                want.path, now.sha256, want.sha256
            ));
        } else if now.rows != want.rows {
            v.problems.push(format!(
                "{}: {:?} rows, the manifest records {:?}",
                want.path, now.rows, want.rows
            ));
        } else {
            v.matched += 1;
            v.bytes += now.bytes;
            v.rows += now.rows.unwrap_or(0);
        }
    }
    match output_paths(root) {
        Ok(paths) => {
            v.unrecorded = paths
                .into_iter()
                .filter(|p| !recorded.iter().any(|r| &r.path == p))
                .collect()
        }
        Err(e) => v.problems.push(e.to_string()),
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_dir() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("points")).unwrap();
        std::fs::create_dir_all(root.join("figures")).unwrap();
        std::fs::create_dir_all(root.join("devices")).unwrap();
        std::fs::write(root.join("spec.toml"), "[experiment]\n").unwrap();
        std::fs::write(root.join("points/p0.json"), "{}").unwrap();
        std::fs::write(root.join("console.log"), "boot\n").unwrap();
        std::fs::write(root.join("manifest.json"), "{}").unwrap();
        std::fs::write(root.join(".lock"), "").unwrap();
        std::fs::write(root.join("points/.spill-p1"), "x").unwrap();
        std::fs::write(root.join("figures/f.svg"), "<svg/>").unwrap();
        std::fs::write(root.join("devices/data.img"), "disk").unwrap();
        t
    }

    #[test]
    fn the_record_lists_what_the_run_wrote_and_nothing_derived() {
        let t = run_dir();
        let paths: Vec<String> = record(t.path())
            .unwrap()
            .into_iter()
            .map(|o| o.path)
            .collect();
        assert_eq!(paths, ["console.log", "points/p0.json", "spec.toml"]);
    }

    #[test]
    fn verify_names_a_changed_byte_a_lost_file_and_a_new_one() {
        let t = run_dir();
        let recorded = record(t.path()).unwrap();
        let v = verify(t.path(), &recorded);
        assert_eq!((v.matched, v.problems.len()), (3, 0), "{:?}", v.problems);
        std::fs::write(t.path().join("console.log"), "boot!").unwrap();
        std::fs::remove_file(t.path().join("spec.toml")).unwrap();
        std::fs::write(t.path().join("points/p2.json"), "{}").unwrap();
        let v = verify(t.path(), &recorded);
        assert_eq!(v.matched, 1);
        assert!(
            v.problems[0].starts_with("console.log: its sha256 is"),
            "{:?}",
            v.problems
        );
        assert!(v.problems[1].starts_with("spec.toml: "), "{:?}", v.problems);
        assert_eq!(v.unrecorded, ["points/p2.json"]);
    }
}
