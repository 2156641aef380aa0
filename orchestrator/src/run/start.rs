//! Starting a run: its directory (new, or the one `--resume` continues)
//! with the spec copied in, and the manifest's first version.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{RunError, RunOptions, setup};
use crate::paths;
use crate::results::manifest::{self, Manifest, RunStatus};
use crate::results::rundir::{RunDir, is_empty_dir, new_run_id};
use crate::spec::LoadedSpec;

/// The run directory with the spec in it, and the manifest as it starts
/// (with the points an earlier attempt finished, for --resume).
pub(super) fn begin(
    loaded: &LoadedSpec,
    spec_path: &Path,
    opts: &RunOptions,
) -> Result<(RunDir, Manifest), RunError> {
    let spec = &loaded.spec;
    let spec_sha = hex::encode(Sha256::digest(loaded.source.as_bytes()));
    let dir = choose_run_dir(loaded, opts, &spec_sha)?;
    let rd = RunDir { root: dir.clone() };
    crate::fsutil::create_dir(&rd.root).map_err(setup("run directory"))?;
    crate::fsutil::write_atomic(&rd.spec_copy(), loaded.source.as_bytes())
        .map_err(setup("copy spec"))?;
    let previous = rd.records().map_err(RunError::Setup)?;
    let m = Manifest {
        testbed_version: env!("CARGO_PKG_VERSION").into(),
        status: RunStatus::Running,
        experiment: spec.experiment.name.clone(),
        run_id: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        figures: spec.experiment.figures.clone(),
        spec_file: spec_path.display().to_string(),
        spec_sha256: spec_sha,
        spec: serde_json::to_value(spec).unwrap_or_default(),
        executor: format!("{:?}", spec.experiment.executor).to_lowercase(),
        inputs: Default::default(),
        accel: None,
        timing_note: String::new(),
        qemu_argv: Vec::new(),
        host: Default::default(),
        guest: None,
        boots: Vec::new(),
        boot_to_agent_ms: Vec::new(),
        devices: Vec::new(),
        seed: spec.experiment.seed,
        points: previous.values().cloned().collect(),
        started_at: manifest::utc_now(),
        finished_at: None,
        wall_s: None,
    };
    Ok((rd, m))
}

fn choose_run_dir(
    loaded: &LoadedSpec,
    opts: &RunOptions,
    spec_sha: &str,
) -> Result<PathBuf, RunError> {
    let root = opts
        .results_root
        .clone()
        .unwrap_or_else(|| paths::repo_root().join("results"));
    let exp_dir = root.join(&loaded.spec.experiment.name);
    if opts.resume {
        let dir = match &opts.out {
            Some(d) => d.clone(),
            None => latest_run(&exp_dir).ok_or_else(|| {
                RunError::Setup(format!(
                    "--resume: no earlier run of this spec under {}",
                    exp_dir.display()
                ))
            })?,
        };
        let rd = RunDir { root: dir.clone() };
        let old = std::fs::read(rd.spec_copy()).map_err(|e| {
            RunError::Setup(format!("--resume: {} has no spec.toml: {e}", dir.display()))
        })?;
        if hex::encode(Sha256::digest(&old)) != spec_sha {
            return Err(RunError::Setup(format!(
                "--resume: the spec changed since {} was started; start a new run instead",
                dir.display()
            )));
        }
        return Ok(dir);
    }
    let dir = opts
        .out
        .clone()
        .unwrap_or_else(|| exp_dir.join(new_run_id()));
    if dir.exists() && !is_empty_dir(&dir) {
        return Err(RunError::Setup(format!(
            "{} already holds a run: use --resume to continue it, or another --out",
            dir.display()
        )));
    }
    Ok(dir)
}

fn latest_run(exp_dir: &Path) -> Option<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(exp_dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("spec.toml").is_file())
        .collect();
    runs.sort();
    runs.pop()
}
