//! `testbed reproduce [FAMILY|FIGURE] [--quick]`: finds the specs that feed
//! the wanted figures, runs each (reusing a complete run of the same spec,
//! resuming an unfinished one), then plots, checks and reports every run and
//! joins them in `results/reproduce/report.html` and `claims.json`, where
//! each claim is reported once, decided on the run that measured it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::drawing::figures::def::{self, FigureDef};
use crate::drawing::figures::error::{FigureError, file_err};
use crate::drawing::figures::report::{self, JoinedClaim, RunLink, SpecOutcome};
use crate::drawing::figures::{compute, write, write_claims, write_figures};
use crate::execution::run::{self, RunError, RunOptions};
use crate::host::lock::LockError;
use crate::host::progress::{Event, Progress};
use crate::planning::spec::AccelChoice;
use crate::recording::results::manifest::{self, RunStatus};
use crate::recording::results::rundir::RunDir;

pub struct Options {
    /// A family (`bpf-storage`) or a figure id; None = every figure.
    pub target: Option<String>,
    /// CI size: `*-quick.toml` specs and `smoke.toml`.
    pub quick: bool,
    pub experiments: PathBuf,
    pub definitions: PathBuf,
    pub results: PathBuf,
    pub accel: Option<AccelChoice>,
}

impl Options {
    pub fn defaults(target: Option<String>, quick: bool) -> Options {
        let root = crate::host::paths::repo_root();
        Options {
            target,
            quick,
            experiments: root.join("experiments"),
            definitions: root.join("experiments/figures"),
            results: root.join("results"),
            accel: None,
        }
    }
}

pub struct Summary {
    pub outcomes: Vec<SpecOutcome>,
    /// Each (figure, claim) once, with the run it was decided on.
    pub claims: Vec<JoinedClaim>,
    pub report: PathBuf,
}

/// The figure ids a target names.
pub fn target_figures(
    target: Option<&str>,
    defs: &BTreeMap<String, FigureDef>,
) -> Result<BTreeSet<String>, FigureError> {
    let Some(t) = target else {
        return Ok(defs.keys().cloned().collect());
    };
    if defs.contains_key(t) {
        return Ok(BTreeSet::from([t.to_string()]));
    }
    let fam: BTreeSet<String> = defs
        .values()
        .filter(|d| d.family == t)
        .map(|d| d.id.clone())
        .collect();
    if fam.is_empty() {
        let families: BTreeSet<&str> = defs.values().map(|d| d.family.as_str()).collect();
        return Err(FigureError::Other(format!(
            "{t} is neither a figure id nor a family; families: {}",
            families.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(fam)
}

fn is_quick(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with("-quick.toml") || n == "smoke.toml")
}

/// Specs (path, experiment name) that feed any of `figures`, at the size asked.
pub fn select_specs(
    opts: &Options,
    figures: &BTreeSet<String>,
    defs: &BTreeMap<String, FigureDef>,
) -> Vec<(PathBuf, Result<String, crate::planning::spec::SpecError>)> {
    let mut out = Vec::new();
    for p in crate::reporting::show::find_specs(&opts.experiments) {
        if p.starts_with(&opts.definitions) || is_quick(&p) != opts.quick {
            continue;
        }
        if !opts.quick && p.file_name().is_some_and(|n| n == "smoke.toml") {
            continue;
        }
        match crate::planning::spec::load(&p) {
            Ok(l) => {
                let e = &l.spec.experiment;
                let (known, _) = def::figures_for(&e.figures, &e.name, defs);
                if known.iter().any(|f| figures.contains(f)) {
                    out.push((p, Ok(e.name.clone())));
                }
            }
            Err(err) => out.push((p, Err(err))),
        }
    }
    out
}

fn sha_of(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|b| hex::encode(Sha256::digest(&b)))
}

/// The latest earlier run of this exact spec, with its status.
fn previous_run(results: &Path, experiment: &str, spec: &Path) -> Option<(PathBuf, RunStatus)> {
    let want = sha_of(spec)?;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(results.join(experiment))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|d| sha_of(&d.join("spec.toml")).as_deref() == Some(want.as_str()))
        .collect();
    dirs.sort();
    let dir = dirs.pop()?;
    // No readable manifest: it stopped before its first point; resume it.
    let status =
        manifest::read(&dir.join("manifest.json")).map_or(RunStatus::Interrupted, |m| m.status);
    Some((dir, status))
}

/// Runs (or reuses) one spec; returns its run directory.
fn ensure_run(
    opts: &Options,
    spec: &Path,
    experiment: &str,
    progress: &mut dyn Progress,
) -> Result<PathBuf, FigureError> {
    // A kernel that failed for an earlier spec is not built again: skip
    // before a run directory is made.
    if let Ok(loaded) = crate::planning::spec::load(spec)
        && let Some(why) = run::blocked(&loaded)
    {
        return Err(FigureError::Other(why));
    }
    let previous = previous_run(&opts.results, experiment, spec);
    // A run another process is running now is neither reused (it may not
    // be finished) nor resumed (its points would collide), and a second run
    // of the same spec next to it would double the load and skew both
    // runs' timings: it is skipped, with a note saying by whom.
    if let Some((dir, _)) = &previous
        && let Err(LockError::Busy { pid, .. }) = (RunDir { root: dir.clone() }).lock()
    {
        return Err(FigureError::Other(in_use_note(dir, pid)));
    }
    if let Some((dir, RunStatus::Complete)) = &previous {
        progress.event(Event::Stage(format!(
            "{}: complete run {} reused",
            spec.display(),
            dir.display()
        )));
        return Ok(dir.clone());
    }
    let mut ro = RunOptions {
        accel: opts.accel,
        results_root: Some(opts.results.clone()),
        ..RunOptions::default()
    };
    if let Some((dir, status)) = previous {
        progress.event(Event::Stage(format!(
            "{}: resuming {} ({status:?})",
            spec.display(),
            dir.display()
        )));
        ro.out = Some(dir);
        ro.resume = true;
    }
    let result = resume_or_start_afresh(spec, ro, progress, &mut |ro, progress| {
        run::run(spec, ro, progress)
    });
    match result {
        Ok(r) => Ok(r.dir),
        Err(RunError::Interrupted(d)) => Err(FigureError::Other(format!(
            "interrupted; finished points are kept in {d}: run `testbed reproduce` again to resume"
        ))),
        // Taken between the check above and the run.
        Err(RunError::InUse { dir, pid }) => Err(FigureError::Other(in_use_note(&dir, pid))),
        Err(e) => Err(FigureError::Other(e.to_string())),
    }
}

/// Runs with `ro`; if that resume is refused because the inputs changed
/// since the earlier attempt, starts a new run of the spec instead: points
/// measured with another agent, kernel or testbed are not mixed into one run.
fn resume_or_start_afresh(
    spec: &Path,
    mut ro: RunOptions,
    progress: &mut dyn Progress,
    run: &mut dyn FnMut(&RunOptions, &mut dyn Progress) -> Result<run::RunResult, RunError>,
) -> Result<run::RunResult, RunError> {
    match run(&ro, progress) {
        Err(RunError::InputsChanged { dir, differences }) if ro.resume => {
            progress.event(Event::Stage(format!(
                "{}: not resuming {} ({}): starting a new run",
                spec.display(),
                dir.display(),
                differences.join("; ")
            )));
            ro.out = None;
            ro.resume = false;
            run(&ro, progress)
        }
        other => other,
    }
}

fn in_use_note(dir: &Path, pid: Option<u32>) -> String {
    format!(
        "skipped: run {} is in use by {} (another testbed is running it now); run `testbed reproduce` again once it has finished",
        dir.display(),
        crate::host::lock::holder_text(pid)
    )
}

/// `../<experiment>/<run-id>/` from results/reproduce/, else a file URL.
fn href(results: &Path, dir: &Path) -> String {
    match dir.strip_prefix(results) {
        Ok(rel) => format!("../{}/", rel.display()),
        Err(_) => format!("file://{}/", dir.display()),
    }
}

pub fn reproduce(opts: &Options, progress: &mut dyn Progress) -> Result<Summary, FigureError> {
    let defs = def::load_all(&opts.definitions)?;
    let figures = target_figures(opts.target.as_deref(), &defs)?;
    let specs = select_specs(opts, &figures, &defs);
    if specs.is_empty() {
        return Err(FigureError::Other(format!(
            "no {} spec under {} feeds {}",
            if opts.quick { "quick" } else { "full-size" },
            opts.experiments.display(),
            opts.target.as_deref().unwrap_or("any figure")
        )));
    }
    let mut outcomes = Vec::new();
    for (spec, loaded) in specs {
        let shown = spec
            .strip_prefix(opts.experiments.parent().unwrap_or(&opts.experiments))
            .unwrap_or(&spec)
            .display()
            .to_string();
        let result = loaded
            .map_err(|e| FigureError::Spec(Box::new(e)))
            .and_then(|exp| ensure_run(opts, &spec, &exp, progress))
            .and_then(|dir| {
                crate::host::phases::time("figures", || {
                    let rf = compute(&dir, &defs)?;
                    write_figures(&rf)?;
                    write_claims(&rf)?;
                    let page = report::run_page(&rf)?;
                    write(&dir.join("report.html"), page.as_bytes())?;
                    Ok(RunLink {
                        href: href(&opts.results, &dir),
                        figures: rf,
                    })
                })
            });
        match result {
            Ok(link) => outcomes.push(SpecOutcome {
                spec: shown,
                run: Some(link),
                error: None,
            }),
            Err(FigureError::Other(m)) if m.starts_with("interrupted") => {
                return Err(FigureError::Other(m));
            }
            Err(e) => {
                progress.event(Event::Warn(format!("{shown}: {e}")));
                outcomes.push(SpecOutcome {
                    spec: shown,
                    run: None,
                    error: Some(e.to_string()),
                });
            }
        }
    }
    let out_dir = opts.results.join("reproduce");
    std::fs::create_dir_all(&out_dir).map_err(|e| file_err(&out_dir, e))?;
    let target = opts.target.clone().unwrap_or_else(|| "all".into());
    let label = format!("{target}{}", if opts.quick { " --quick" } else { "" });
    let page = report::joined_page(&outcomes, &label)?;
    let report_path = out_dir.join("report.html");
    write(&report_path, page.as_bytes())?;
    let claims = report::join_claims(&outcomes);
    let doc = serde_json::json!({
        "target": label,
        "runs": outcomes.iter().map(|o| serde_json::json!({
            "spec": o.spec,
            "run": o.run.as_ref().map(|r| r.href.clone()),
            "wall_s": o.run.as_ref().and_then(|r| r.figures.run.manifest.wall_s),
            "error": o.error,
        })).collect::<Vec<_>>(),
        "claims": claims.iter().map(|j| serde_json::json!({
            "experiment": j.experiment,
            "run": j.run,
            "checked_in": j.checked_in,
            "claim": j.claim,
        })).collect::<Vec<_>>(),
    });
    let cpath = out_dir.join("claims.json");
    let text = serde_json::to_vec_pretty(&doc).map_err(|e| FigureError::Other(e.to_string()))?;
    write(&cpath, &text)?;
    Ok(Summary {
        outcomes,
        claims,
        report: report_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_resolve_to_figure_ids_or_families() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/figures");
        let defs = def::load_all(&dir).unwrap();
        let fam = target_figures(Some("bpf-storage"), &defs).unwrap();
        assert!(fam.contains("bpf-fig3a") && fam.contains("xrp-fig6a"));
        assert!(!fam.contains("flight-bulk"));
        assert_eq!(
            target_figures(Some("flight-bulk"), &defs).unwrap(),
            BTreeSet::from(["flight-bulk".to_string()])
        );
        let e = target_figures(Some("nope"), &defs).unwrap_err().to_string();
        assert!(e.contains("families") && e.contains("flight"), "{e}");
    }

    /// orchestrator/guest-build.txt's families are the figure families,
    /// each listing exactly the helpers that the specs feeding its figures
    /// run (quick and full): `./x reproduce FAMILY` builds those alone.
    #[test]
    fn each_family_builds_exactly_the_helpers_its_specs_run() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let figures_dir = root.join("experiments/figures");
        let defs = def::load_all(&figures_dir).unwrap();
        let build = crate::inputs::guestbin::build_spec();
        let families: BTreeSet<&str> = defs.values().map(|d| d.family.as_str()).collect();
        let listed: BTreeSet<&str> = build.families.keys().map(String::as_str).collect();
        assert_eq!(families, listed, "figure families against guest-build.txt");
        let host = crate::planning::plan::HostLimits {
            mem_total: None,
            figures_dir: figures_dir.clone(),
            cpus: None,
        };
        let mut specs = 0;
        for family in families {
            let figures = target_figures(Some(family), &defs).unwrap();
            let mut needed = BTreeSet::new();
            for quick in [true, false] {
                let opts = Options {
                    target: None,
                    quick,
                    experiments: root.join("experiments"),
                    definitions: figures_dir.clone(),
                    results: root.join("results"),
                    accel: None,
                };
                for (path, name) in select_specs(&opts, &figures, &defs) {
                    name.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    let loaded = crate::planning::spec::load(&path).unwrap();
                    let plan = crate::planning::plan::plan_on(&loaded, &host)
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    let server = loaded.server_workload.iter().map(|w| w.needs());
                    for needs in plan.points.iter().map(|p| p.workload.needs()).chain(server) {
                        needed.extend(needs.helpers.iter().map(|h| h.package));
                    }
                    specs += 1;
                }
            }
            let table: BTreeSet<&str> = build
                .family(family)
                .unwrap_or_default()
                .iter()
                .map(String::as_str)
                .collect();
            assert_eq!(
                table, needed,
                "family {family}: guest-build.txt against its specs"
            );
            for p in table {
                assert!(
                    build.helpers.iter().chain(&build.dynamic).any(|h| h == p),
                    "family {family}: {p} is no helper or dynamic line"
                );
            }
        }
        assert!(specs > 40, "only {specs} specs seen");
    }

    #[test]
    fn the_latest_run_of_the_same_spec_is_found_with_its_status() {
        let t = tempfile::tempdir().unwrap();
        let spec = t.path().join("s.toml");
        std::fs::write(&spec, "[experiment]\nname = \"e\"\n").unwrap();
        let results = t.path().join("results");
        for (id, text) in [("r1", "[experiment]\nname = \"e\"\n"), ("r2", "other spec")] {
            let d = results.join("e").join(id);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("spec.toml"), text).unwrap();
        }
        // r1 has the same spec but never wrote a manifest: resume it.
        let (dir, status) = previous_run(&results, "e", &spec).unwrap();
        assert!(dir.ends_with("e/r1"));
        assert_eq!(status, RunStatus::Interrupted);
        std::fs::write(&spec, "changed").unwrap();
        assert!(
            previous_run(&results, "e", &spec).is_none(),
            "a changed spec starts afresh"
        );
    }

    /// A spec, and an earlier run of it under results/ (with a manifest of
    /// `status`, or none).
    fn earlier_run(t: &Path, status: Option<&str>) -> (Options, PathBuf, PathBuf) {
        let text = "[experiment]\nname = \"e\"\nexecutor = \"host\"\n\n[workload]\nkind = \"fault\"\nmode = \"error\"\n";
        let spec = t.join("e.toml");
        std::fs::write(&spec, text).unwrap();
        let dir = t.join("results/e/r1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("spec.toml"), text).unwrap();
        if let Some(status) = status {
            let m = serde_json::json!({
                "testbed_version": "0.1.0", "status": status, "experiment": "e",
                "run_id": "r1", "figures": [], "spec_file": "e.toml", "spec_sha256": "",
                "spec": {}, "executor": "host", "accel": null, "timing_note": "",
                "qemu_argv": [], "guest": null, "boots": [], "boot_to_agent_ms": [],
                "devices": [], "seed": 0, "points": [], "started_at": "",
                "finished_at": null, "wall_s": null,
            });
            std::fs::write(dir.join("manifest.json"), m.to_string()).unwrap();
        }
        let mut opts = Options::defaults(None, true);
        opts.results = t.join("results");
        (opts, spec, dir)
    }

    #[test]
    fn a_run_another_process_is_running_is_skipped_with_a_note() {
        for status in [Some("complete"), Some("interrupted"), None] {
            let t = tempfile::tempdir().unwrap();
            let (opts, spec, dir) = earlier_run(t.path(), status);
            let holder = crate::host::lock::test_support::Holder::exclusive(&dir.join(".lock"));
            let mut progress = crate::host::progress::Collect(Vec::new());
            let e = ensure_run(&opts, &spec, "e", &mut progress)
                .unwrap_err()
                .to_string();
            assert_eq!(
                e,
                format!(
                    "skipped: run {} is in use by pid {} (another testbed is running it now); run `testbed reproduce` again once it has finished",
                    dir.display(),
                    holder.pid()
                ),
                "{status:?}"
            );
            assert!(
                progress.0.is_empty(),
                "neither reused nor resumed: {:?}",
                progress.0
            );
            // Once it is free, the complete run is reused as before.
            holder.release();
            if status == Some("complete") {
                assert_eq!(ensure_run(&opts, &spec, "e", &mut progress).unwrap(), dir);
            }
        }
    }

    #[test]
    fn a_resume_refused_for_changed_inputs_starts_a_new_run() {
        let mut tried = Vec::new();
        let ro = RunOptions {
            out: Some("/r/e/old".into()),
            resume: true,
            ..RunOptions::default()
        };
        let mut progress = crate::host::progress::Collect(Vec::new());
        let r = resume_or_start_afresh(Path::new("e.toml"), ro, &mut progress, &mut |ro, _| {
            tried.push((ro.out.clone(), ro.resume));
            if ro.resume {
                Err(RunError::InputsChanged {
                    dir: "/r/e/old".into(),
                    differences: vec!["agent (sha256): earlier a, now b".into()],
                })
            } else {
                Err(RunError::Setup("ran afresh".into()))
            }
        });
        assert_eq!(r.unwrap_err().to_string(), "ran afresh");
        assert_eq!(tried, [(Some("/r/e/old".into()), true), (None, false)]);
        assert!(matches!(&progress.0[0], Event::Stage(s) if s.contains("starting a new run")));
    }

    #[test]
    fn quick_selection_takes_quick_specs_and_smoke() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut opts = Options::defaults(None, true);
        opts.experiments = root.join("experiments");
        opts.definitions = root.join("experiments/figures");
        let defs = def::load_all(&opts.definitions).unwrap();
        let figs = target_figures(None, &defs).unwrap();
        let specs = select_specs(&opts, &figs, &defs);
        let names: Vec<String> = specs
            .iter()
            .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(names.contains(&"smoke.toml".to_string()), "{names:?}");
        assert!(
            names.contains(&"fig3-baseline-quick.toml".to_string()),
            "{names:?}"
        );
        assert!(
            names
                .iter()
                .all(|n| n == "smoke.toml" || n.ends_with("-quick.toml"))
        );
        opts.quick = false;
        let full = select_specs(&opts, &figs, &defs);
        assert!(full.iter().all(|(p, _)| !is_quick(p)));
    }
}
