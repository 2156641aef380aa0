//! Starting a run: its directory (new, or the one `--resume` continues),
//! locked for this process, with the spec copied in, and the manifest's
//! first version.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{RunError, RunOptions, setup};
use crate::host::lock::{Lock, LockError};
use crate::host::paths;
use crate::host::progress::{Event, Progress};
use crate::planning::spec::LoadedSpec;
use crate::recording::results::manifest::{self, FORCED_RESUME, Manifest, RunStatus};
use crate::recording::results::rundir::{RunDir, holds_no_run, new_run_id};

/// A started run: its directory (held by this process until the lock is
/// dropped), the manifest as it starts, and for --resume what the earlier
/// attempt left.
pub(crate) struct Started {
    pub rd: RunDir,
    pub m: Manifest,
    pub lock: Lock,
    /// The earlier attempt's manifest, if it wrote one (--resume).
    pub earlier: Option<Manifest>,
    /// Points the earlier attempt finished whose files are damaged, with
    /// why: they run again.
    pub rerun: Vec<(String, String)>,
}

/// The run directory with the spec in it, and the manifest as it starts
/// (with the points an earlier attempt finished whole, for --resume).
pub(crate) fn begin(
    loaded: &LoadedSpec,
    spec_path: &Path,
    opts: &RunOptions,
) -> Result<Started, RunError> {
    let spec = &loaded.spec;
    let spec_sha = hex::encode(Sha256::digest(loaded.source.as_bytes()));
    let dir = choose_run_dir(loaded, opts)?;
    let rd = RunDir { root: dir.clone() };
    if opts.resume {
        // Before anything is created: a directory that holds no run stays as it was.
        check_same_spec(&rd, &spec_sha)?;
    }
    crate::host::fsutil::create_dir(&rd.root).map_err(setup("run directory"))?;
    // Held for the whole run: a second run or resume of this directory is
    // refused rather than interleaving its points and logs with ours.
    let lock = rd.lock().map_err(|e| match e {
        LockError::Busy { pid, .. } => RunError::InUse {
            dir: dir.clone(),
            pid,
        },
        other => RunError::Setup(other.to_string()),
    })?;
    if !opts.resume && !holds_no_run(&dir) {
        return Err(RunError::Setup(format!(
            "{} already holds a run: use --resume to continue it, or another --out",
            dir.display()
        )));
    }
    crate::host::fsutil::write_atomic(&rd.spec_copy(), loaded.source.as_bytes())
        .map_err(setup("copy spec"))?;
    // The samples of a point in flight when an earlier testbed was killed
    // (never stored: that point runs again). Safe: we hold the lock.
    let stale = crate::recording::results::spill::remove_stale(&rd.points_dir());
    if stale > 0 {
        eprintln!(
            "[testbed] removed {stale} spill file(s) of a point in flight when a run was killed"
        );
    }
    let (mut previous, damaged) = if opts.resume {
        rd.scan_records()
    } else {
        Default::default()
    };
    // Every finished point's samples are checked now, before any point
    // runs: a damaged one runs again instead of failing the merge at the end.
    let mut rerun = damaged;
    previous.retain(|id, rec| match rd.check_point(rec) {
        Ok(()) => true,
        Err(why) => {
            rerun.push((id.clone(), why.to_string()));
            false
        }
    });
    rerun.sort();
    let earlier = if opts.resume && rd.manifest().is_file() {
        Some(manifest::read(&rd.manifest())?)
    } else {
        None
    };
    let mut m = Manifest {
        testbed_version: env!("CARGO_PKG_VERSION").into(),
        status: RunStatus::Running,
        experiment: spec.experiment.name.clone(),
        run_id: match &opts.task {
            Some(t) => t.run_id.clone(),
            None => dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        },
        figures: spec.experiment.figures.clone(),
        spec_file: spec_path.display().to_string(),
        spec_sha256: spec_sha,
        spec: serde_json::to_value(spec).unwrap_or_default(),
        executor: format!("{:?}", spec.experiment.executor).to_lowercase(),
        containment: crate::host::cgroup::current().describe(),
        inputs: Default::default(),
        accel: None,
        timing_note: String::new(),
        qemu_argv: Vec::new(),
        host: Default::default(),
        guest: None,
        boots: Vec::new(),
        boot_to_agent_ms: Vec::new(),
        variance: Vec::new(),
        devices: Vec::new(),
        seed: spec.experiment.seed,
        points: previous.values().cloned().collect(),
        started_at: manifest::utc_now(),
        finished_at: None,
        wall_s: None,
        outputs: Vec::new(),
    };
    if let Some(t) = &opts.task {
        m.inputs
            .files
            .insert(crate::execution::slurm::TASK_INPUT.into(), t.info.clone());
    }
    if let Some(e) = &earlier {
        // The earlier attempt's boots stay listed, and numbering goes on
        // after them (boots.rs), so its logs are kept.
        m.boots = e.boots.clone();
        m.boot_to_agent_ms = e.boot_to_agent_ms.clone();
        m.guest = e.guest.clone();
        m.qemu_argv = e.qemu_argv.clone();
    }
    Ok(Started {
        rd,
        m,
        lock,
        earlier,
        rerun,
    })
}

/// Says, before any point runs, which finished points run again and why.
pub(super) fn announce_reruns(rerun: &[(String, String)], progress: &mut dyn Progress) {
    for (id, why) in rerun {
        progress.event(Event::Warn(format!(
            "--resume: point {id} runs again: {why}"
        )));
    }
}

/// The inputs a resumed run must share with its earlier attempt, with
/// their values then and now; only those that differ.
fn differing_inputs(earlier: &Manifest, now: &Manifest) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    if earlier.testbed_version != now.testbed_version {
        out.push((
            "testbed version",
            earlier.testbed_version.clone(),
            now.testbed_version.clone(),
        ));
    }
    // An earlier manifest without a value cannot be compared: not a refusal.
    if let (Some(a), Some(b)) = (
        earlier.inputs.file_sha256("agent"),
        now.inputs.file_sha256("agent"),
    ) && a != b
    {
        out.push(("agent (sha256)", a.to_string(), b.to_string()));
    }
    let kernel = |m: &Manifest| {
        m.inputs
            .kernel
            .as_ref()
            .map(|k| format!("{} {} (key {})", k.name, k.release, k.key))
    };
    let same_kernel = match (&earlier.inputs.kernel, &now.inputs.kernel) {
        (Some(a), Some(b)) => a.key == b.key,
        (a, b) => a.is_none() == b.is_none(),
    };
    let shown = |k: Option<String>| k.unwrap_or_else(|| "none".into());
    if !same_kernel {
        out.push(("kernel", shown(kernel(earlier)), shown(kernel(now))));
    }
    // The guest image: its key covers the recipe and the package versions.
    let rootfs = |m: &Manifest| {
        let r = m.inputs.files.get("rootfs")?;
        let key = r.get("key")?.as_str()?;
        let name = r.get("name").and_then(|n| n.as_str()).unwrap_or("?");
        Some((key.to_string(), format!("{name} (key {key})")))
    };
    let (a, b) = (rootfs(earlier), rootfs(now));
    if a.as_ref().map(|r| &r.0) != b.as_ref().map(|r| &r.0) {
        out.push(("guest image", shown(a.map(|r| r.1)), shown(b.map(|r| r.1))));
    }
    out
}

/// A resumed run continues only with the inputs its earlier attempt used;
/// with --force it goes on anyway and the manifest records what differed.
pub(super) fn check_resume_inputs(
    earlier: &Manifest,
    rd: &RunDir,
    m: &mut Manifest,
    force: bool,
    progress: &mut dyn Progress,
) -> Result<(), RunError> {
    let diff = differing_inputs(earlier, m);
    let mut forced: Vec<serde_json::Value> = earlier
        .inputs
        .files
        .get(FORCED_RESUME)
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    if !diff.is_empty() {
        let lines: Vec<String> = diff
            .iter()
            .map(|(what, then, now)| format!("{what}: earlier {then}, now {now}"))
            .collect();
        if !force {
            return Err(RunError::InputsChanged {
                dir: rd.root.clone(),
                differences: lines,
            });
        }
        progress.event(Event::Warn(format!(
            "--resume --force: continuing with other inputs than the earlier attempt ({})",
            lines.join("; ")
        )));
        forced.push(serde_json::json!({
            "at": manifest::utc_now(),
            "differs": diff
                .iter()
                .map(|(what, then, now)| serde_json::json!({"input": what, "earlier": then, "now": now}))
                .collect::<Vec<_>>(),
        }));
    }
    if !forced.is_empty() {
        m.inputs
            .files
            .insert(FORCED_RESUME.into(), serde_json::Value::Array(forced));
    }
    Ok(())
}

/// Where the run goes: a new directory, or for --resume the one named (or
/// the latest run of this experiment).
fn choose_run_dir(loaded: &LoadedSpec, opts: &RunOptions) -> Result<PathBuf, RunError> {
    let root = opts
        .results_root
        .clone()
        .unwrap_or_else(|| paths::repo_root().join("results"));
    let exp_dir = root.join(&loaded.spec.experiment.name);
    if opts.resume {
        return match &opts.out {
            Some(d) => Ok(d.clone()),
            None => latest_run(&exp_dir).ok_or_else(|| {
                RunError::Setup(format!(
                    "--resume: no earlier run of this spec under {}",
                    exp_dir.display()
                ))
            }),
        };
    }
    Ok(opts
        .out
        .clone()
        .unwrap_or_else(|| exp_dir.join(new_run_id())))
}

/// --resume continues only the same spec.
fn check_same_spec(rd: &RunDir, spec_sha: &str) -> Result<(), RunError> {
    let old = std::fs::read(rd.spec_copy()).map_err(|e| {
        RunError::Setup(format!(
            "--resume: {} has no spec.toml: {e}",
            rd.root.display()
        ))
    })?;
    if hex::encode(Sha256::digest(&old)) != spec_sha {
        return Err(RunError::Setup(format!(
            "--resume: the spec changed since {} was started; start a new run instead",
            rd.root.display()
        )));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn with_rootfs(key: Option<&str>) -> Manifest {
        let mut m: Manifest = serde_json::from_value(serde_json::json!({
            "testbed_version": "0.1.0", "status": "running", "experiment": "e",
            "run_id": "r", "figures": [], "spec_file": "s.toml", "spec_sha256": "",
            "spec": {}, "executor": "qemu", "timing_note": "", "qemu_argv": [],
            "boots": [], "boot_to_agent_ms": [], "devices": [], "seed": 1,
            "points": [], "started_at": "",
        }))
        .unwrap();
        if let Some(key) = key {
            m.inputs.files.insert(
                "rootfs".into(),
                serde_json::json!({"name": "bookworm-asam", "key": key}),
            );
        }
        m
    }

    #[test]
    fn another_guest_image_is_a_differing_input() {
        let same = differing_inputs(&with_rootfs(Some("k1")), &with_rootfs(Some("k1")));
        assert!(same.is_empty(), "{same:?}");
        let other = differing_inputs(&with_rootfs(Some("k1")), &with_rootfs(Some("k2")));
        assert_eq!(
            other,
            [(
                "guest image",
                "bookworm-asam (key k1)".to_string(),
                "bookworm-asam (key k2)".to_string()
            )]
        );
        let added = differing_inputs(&with_rootfs(None), &with_rootfs(Some("k2")));
        assert_eq!(added[0].1, "none");
        assert!(differing_inputs(&with_rootfs(None), &with_rootfs(None)).is_empty());
    }
}
