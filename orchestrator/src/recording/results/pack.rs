//! One file that carries runs to a reviewer: `testbed pack` writes a
//! zstd-compressed tar of each run directory (manifest, tables, point
//! files, console logs, the spec, and the figures, claims and report when
//! drawn) with the kernel's configuration and patches beside it, and
//! `testbed unpack` puts the runs back where `plot`, `check` and `report`
//! read them. Both check the manifest against its digest and every file
//! against the manifest's record (integrity.rs, outputs.rs): a run that
//! does not verify is neither packed nor unpacked. The kernel patches
//! are checked against the sha256 the manifest recorded when the run
//! booted them, and every file `pack` adds beyond the run's outputs is
//! listed with its sha256 in the packed run's `packed.json`, which
//! `unpack` and `verify` check.
//!
//! Layout inside the archive: `<experiment>/<run id>/…` (with
//! `manifest.json.sha256` and `packed.json`), the kernel's files in
//! `<experiment>/<run id>/kernel/` (config, meta.json, patches/).

use std::path::{Path, PathBuf};

use super::integrity::{self, MANIFEST_DIGEST, PACK_INDEX, PackIndex};
use super::manifest::ManifestError;
use super::outputs::{self, PACKED_KERNEL_DIR};

/// zstd's default: most of a run is Parquet, already compressed.
const ZSTD_LEVEL: i32 = 3;

/// Files of a run drawn after it ended, packed when present.
const DERIVED: &[&str] = &["figures", "claims.json", "report.html"];

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Outputs(#[from] outputs::OutputsError),
    #[error(
        "{}: its manifest records no output files (the run was written before testbed recorded them, or did not finish): nothing to check it against",
        run.display()
    )]
    NotRecorded { run: PathBuf },
    #[error("{}: {} file(s) differ from the manifest's record:\n  {}", run.display(), problems.len(), problems.join("\n  "))]
    Damaged { run: PathBuf, problems: Vec<String> },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: already exists; unpack elsewhere (-o DIR) or move it away", path.display())]
    Exists { path: PathBuf },
    #[error("{}: holds no run (no <experiment>/<run>/manifest.json)", path.display())]
    NoRuns { path: PathBuf },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PackError + '_ {
    move |source| PackError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What went into an archive, per run.
#[derive(Debug)]
pub struct Packed {
    /// `<experiment>/<run id>` in the archive.
    pub name: String,
    pub files: usize,
    /// Kernel files that could not be found (a kernel cache entry gone,
    /// or built before its patches were kept with it).
    pub missing: Vec<String>,
}

/// Checks each run against its manifest and writes them all to `out`
/// (replaced whole, never half-written).
pub fn pack(runs: &[PathBuf], out: &Path) -> Result<Vec<Packed>, PackError> {
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let tmp = tempfile::NamedTempFile::new_in(dir).map_err(io(dir))?;
    let encoder = zstd::Encoder::new(tmp.as_file(), ZSTD_LEVEL).map_err(io(out))?;
    let mut tar = tar::Builder::new(encoder);
    let mut packed = Vec::new();
    for run in runs {
        packed.push(pack_run(&mut tar, run, out)?);
    }
    let encoder = tar.into_inner().map_err(io(out))?;
    encoder.finish().map_err(io(out))?;
    tmp.as_file().sync_all().map_err(io(out))?;
    tmp.persist(out).map_err(|e| PackError::Io {
        path: out.to_path_buf(),
        source: e.error,
    })?;
    Ok(packed)
}

fn pack_run<W: std::io::Write>(
    tar: &mut tar::Builder<W>,
    run: &Path,
    out: &Path,
) -> Result<Packed, PackError> {
    let (m, checked) = integrity::check_run(run)?;
    if m.outputs.is_empty() {
        return Err(PackError::NotRecorded {
            run: run.to_path_buf(),
        });
    }
    if !checked.ok() {
        return Err(PackError::Damaged {
            run: run.to_path_buf(),
            problems: checked.problems,
        });
    }
    let name = format!("{}/{}", m.experiment, m.run_id);
    let mut add = |from: &Path, rel: &str| -> Result<(), PackError> {
        tar.append_path_with_name(from, format!("{name}/{rel}"))
            .map_err(io(out))
    };
    add(&run.join("manifest.json"), "manifest.json")?;
    add(&run.join(MANIFEST_DIGEST), MANIFEST_DIGEST)?;
    let mut files = 2;
    for f in &m.outputs {
        add(&run.join(&f.path), &f.path)?;
        files += 1;
    }
    // What is added beyond the outputs, each file as it was read.
    let mut index = PackIndex::default();
    let mut add_extra = |from: &Path, rel: &str| -> Result<(), PackError> {
        let dir = from.parent().unwrap_or(Path::new("."));
        let name_in_dir = from.file_name().unwrap_or_default().to_string_lossy();
        let mut record = outputs::describe(dir, &name_in_dir)?;
        record.path = rel.to_string();
        add(from, rel)?;
        index.files.push(record);
        Ok(())
    };
    for derived in DERIVED {
        let path = run.join(derived);
        if path.is_dir() {
            for rel in outputs::files_under(&path)? {
                add_extra(&path.join(&rel), &format!("{derived}/{rel}"))?;
            }
        } else if path.is_file() {
            add_extra(&path, derived)?;
        }
    }
    let mut missing = Vec::new();
    if let Some(k) = &m.inputs.kernel {
        // The kernel's cache entry: its bzImage's directory.
        let entry = k.bzimage.parent().unwrap_or(Path::new("."));
        for file in ["config", "meta.json"] {
            let path = entry.join(file);
            if path.is_file() {
                add_extra(&path, &format!("{PACKED_KERNEL_DIR}/{file}"))?;
            } else {
                missing.push(format!("kernel {}: {}", k.name, path.display()));
            }
        }
        let patches = entry.join("patches");
        for patch in &k.patches {
            let path = patches.join(patch);
            if !path.is_file() {
                missing.push(format!("kernel {} patch: {}", k.name, path.display()));
                continue;
            }
            // Not the patch the run's kernel was built with: refused.
            if let Some(why) = k
                .patch_sha256
                .get(patch)
                .and_then(|want| integrity::patch_problem(&path, want))
            {
                return Err(PackError::Damaged {
                    run: run.to_path_buf(),
                    problems: vec![format!("kernel patch {}: {why}", path.display())],
                });
            }
            add_extra(&path, &format!("{PACKED_KERNEL_DIR}/patches/{patch}"))?;
        }
    }
    files += index.files.len();
    let json = serde_json::to_vec_pretty(&index).map_err(|e| PackError::Io {
        path: out.to_path_buf(),
        source: e.into(),
    })?;
    let mut header = tar::Header::new_gnu();
    header.set_size(json.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    header.set_cksum();
    tar.append_data(&mut header, format!("{name}/{PACK_INDEX}"), json.as_slice())
        .map_err(io(out))?;
    Ok(Packed {
        name,
        files,
        missing,
    })
}

/// Unpacks `archive` into `into` (as `<experiment>/<run id>/`), each run
/// verified (integrity.rs) before it is moved into place: a damaged
/// archive leaves nothing behind, and no existing directory is replaced.
pub fn unpack(archive: &Path, into: &Path) -> Result<Vec<PathBuf>, PackError> {
    crate::host::fsutil::create_dir(into).map_err(io(into))?;
    let (staging, runs) = extract(archive, into)?;
    let mut targets = Vec::new();
    for run in &runs {
        let rel = run.strip_prefix(staging.path()).unwrap_or(run);
        let (m, checked) = integrity::check_run(run)?;
        if m.outputs.is_empty() || !checked.ok() {
            return Err(PackError::Damaged {
                run: archive.join(rel),
                problems: checked.problems,
            });
        }
        let target = into.join(rel);
        if target.exists() {
            return Err(PackError::Exists { path: target });
        }
        targets.push(target);
    }
    for (run, target) in runs.iter().zip(&targets) {
        if let Some(parent) = target.parent() {
            crate::host::fsutil::create_dir(parent).map_err(io(parent))?;
        }
        std::fs::rename(run, target).map_err(io(target))?;
    }
    Ok(targets)
}

/// Each run of `archive` checked as `unpack` checks it, without unpacking
/// it anywhere that stays (`testbed verify ARCHIVE`): its name in the
/// archive (`<experiment>/<run id>`) and what the check found.
pub fn verify_archive(archive: &Path) -> Result<Vec<(String, integrity::RunCheck)>, PackError> {
    let scratch = std::env::temp_dir();
    let (staging, runs) = extract(archive, &scratch)?;
    let mut out = Vec::new();
    for run in &runs {
        let rel = run.strip_prefix(staging.path()).unwrap_or(run);
        let (_, checked) = integrity::check_run(run)?;
        out.push((rel.display().to_string(), checked));
    }
    Ok(out)
}

/// The archive unpacked into a fresh directory under `dir` (removed when
/// dropped), and the run directories it holds.
fn extract(archive: &Path, dir: &Path) -> Result<(tempfile::TempDir, Vec<PathBuf>), PackError> {
    let staging = tempfile::Builder::new()
        .prefix(".unpack-")
        .tempdir_in(dir)
        .map_err(io(dir))?;
    let file = std::fs::File::open(archive).map_err(io(archive))?;
    let decoder = zstd::Decoder::new(file).map_err(io(archive))?;
    // The tar crate writes nothing outside `staging` (no absolute paths,
    // no `..`).
    tar::Archive::new(decoder)
        .unpack(staging.path())
        .map_err(io(archive))?;
    let mut runs = Vec::new();
    for experiment in sorted_dirs(staging.path())? {
        for run in sorted_dirs(&experiment)? {
            if run.join("manifest.json").is_file() {
                runs.push(run);
            }
        }
    }
    if runs.is_empty() {
        return Err(PackError::NoRuns {
            path: archive.to_path_buf(),
        });
    }
    Ok((staging, runs))
}

fn sorted_dirs(dir: &Path) -> Result<Vec<PathBuf>, PackError> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    out.sort();
    Ok(out)
}
