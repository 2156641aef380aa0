//! `testbed history RUN…`: change points over a history of runs of one
//! experiment. Each value compare pairs between two runs (figure, panel,
//! series, x: [`compare::values`]) becomes a series over the runs, one
//! observation per run (its median over repetitions; the repetitions are
//! kept for the JSON), and [`changepoint::detect`] finds where it stepped.
//!
//! Runs of different experiments given together are an error naming the
//! run: their values share no keys, and a CI cache holds one spec's runs.
//! The spec's content may differ between runs (a CI job writes its kernel's
//! path into it), so only the experiment's name is compared.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::changepoint::{self, Config};
use super::compare::{self, Flag, ValueKey};
use super::def::{Better, FigureDef};
use super::error::{FigureError, file_err};
use super::extract::fmt_num;
use super::gate::Outcome;
use crate::recording::results::manifest::{self, NoisyPoints};

#[derive(Debug, Clone, Serialize)]
pub struct RunRef {
    /// The run directory's name.
    pub name: String,
    pub run_id: String,
    pub started_at: String,
    pub dir: PathBuf,
    /// "k of n points measured on a busy host", when any was: a step this
    /// run starts is no evidence of a change in the code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy_host: Option<String>,
    /// Its noisy points, and how many of them were measured again
    /// (`testbed run --rerun-noisy`); absent when none is noisy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noisy: Option<NoisyPoints>,
}

/// One run's value: its median and the repetitions it is over.
#[derive(Debug, Clone, Serialize)]
pub struct RunValue {
    /// Index into [`History::runs`].
    pub run: usize,
    pub median: f64,
    pub reps: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// The last run of the segment before and the first run after.
    pub before_run: String,
    pub after_run: String,
    /// Index into [`History::runs`] of the first run after.
    pub after_index: usize,
    /// Medians of the per-run medians of the two segments.
    pub before: f64,
    pub after: f64,
    pub change_pct: f64,
    pub p: f64,
    /// Regression, improvement, or changed (the panel has no better way).
    pub flag: Flag,
}

#[derive(Debug, Clone, Serialize)]
pub struct ValueHistory {
    pub figure: String,
    pub panel: String,
    pub series: String,
    pub x: String,
    pub better: Option<Better>,
    pub runs: Vec<RunValue>,
    pub steps: Vec<Step>,
}

impl ValueHistory {
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{} x={}",
            self.figure, self.panel, self.series, self.x
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct History {
    pub experiment: String,
    pub runs: Vec<RunRef>,
    /// Values with at least one change point.
    pub changed: Vec<ValueHistory>,
    /// Values followed over at least three runs, with no change point.
    pub unchanged: usize,
    /// Values in fewer than three runs: too short to split.
    pub too_short: usize,
    pub max_p: f64,
    pub min_effect: f64,
    pub min_size: usize,
}

impl History {
    /// Steps that the newest run starts, the worse way (or any way where
    /// the panel has no better direction): what fails a CI job.
    pub fn newest_regressions(&self) -> Vec<(&ValueHistory, &Step)> {
        let newest = self.runs.len().saturating_sub(1);
        self.changed
            .iter()
            .flat_map(|v| v.steps.iter().map(move |s| (v, s)))
            .filter(|(_, s)| {
                s.after_index == newest && matches!(s.flag, Flag::Regression | Flag::Changed)
            })
            .collect()
    }

    /// The newest run's noisy points, when it has any.
    pub fn newest_noisy(&self) -> Option<&NoisyPoints> {
        self.runs
            .last()
            .and_then(|r| r.noisy.as_ref())
            .filter(|n| n.noisy > 0)
    }

    /// The `--fail-on-change` gate: a regression when the newest run
    /// starts a change the worse way. A noisy point excuses none: only
    /// when every noisy point of the newest run was measured again
    /// (`testbed run --rerun-noisy`) and is still noisy is the change
    /// inconclusive, since other processes slow a run down as a regression
    /// would. Noisy points that were not measured again make the newest
    /// run inconclusive even without a change: they may hide one.
    pub fn outcome(&self) -> Outcome {
        let noisy = self.newest_noisy();
        if !self.newest_regressions().is_empty() {
            if noisy.is_some_and(NoisyPoints::all_rerun) {
                Outcome::Inconclusive
            } else {
                Outcome::Regression
            }
        } else if noisy.is_some_and(|n| n.not_rerun() > 0) {
            Outcome::Inconclusive
        } else {
            Outcome::Pass
        }
    }
}

/// The run directories in order: each argument that is a run (has a
/// manifest.json) as given; one that holds runs expands to them, oldest
/// first by the manifest's start time.
pub fn run_dirs(args: &[PathBuf]) -> Result<Vec<PathBuf>, FigureError> {
    let mut out = Vec::new();
    for a in args {
        if a.join("manifest.json").is_file() {
            out.push(a.clone());
            continue;
        }
        let entries = std::fs::read_dir(a).map_err(|e| file_err(a, e))?;
        let mut runs = Vec::new();
        for e in entries {
            let p = e.map_err(|e| file_err(a, e))?.path();
            let m = p.join("manifest.json");
            if m.is_file() {
                let man = manifest::read(&m).map_err(|e| file_err(&m, e))?;
                let t = manifest::parse_utc(&man.started_at).unwrap_or(0);
                runs.push((t, man.run_id, p));
            }
        }
        if runs.is_empty() {
            return Err(file_err(a, "neither a run directory nor one holding runs"));
        }
        runs.sort();
        out.extend(runs.into_iter().map(|(_, _, p)| p));
    }
    Ok(out)
}

fn run_name(dir: &Path) -> String {
    dir.file_name()
        .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into())
}

/// Change points of every value over `runs` (oldest first).
pub fn history(
    runs: &[PathBuf],
    defs: &BTreeMap<String, FigureDef>,
    cfg: &Config,
) -> Result<History, FigureError> {
    let mut refs = Vec::new();
    let mut experiment: Option<String> = None;
    // Per value: what it is, and its observation in each run that has it.
    let mut series: BTreeMap<ValueKey, (String, Option<Better>, Vec<RunValue>)> = BTreeMap::new();
    for (i, dir) in runs.iter().enumerate() {
        let rf = super::compute(dir, defs)?;
        let m = &rf.run.manifest;
        match &experiment {
            None => experiment = Some(m.experiment.clone()),
            Some(e) if *e != m.experiment => {
                return Err(FigureError::MixedExperiments {
                    run: dir.clone(),
                    found: m.experiment.clone(),
                    expected: e.clone(),
                });
            }
            Some(_) => {}
        }
        refs.push(RunRef {
            name: run_name(dir),
            run_id: m.run_id.clone(),
            started_at: m.started_at.clone(),
            dir: dir.clone(),
            busy_host: m.busy_host(),
            noisy: Some(m.noisy()).filter(|n| n.noisy > 0),
        });
        for v in compare::values(&rf) {
            if !v.point.est.value.is_finite() {
                continue;
            }
            let e = series
                .entry(v.key)
                .or_insert_with(|| (v.label.to_string(), v.better, Vec::new()));
            e.2.push(RunValue {
                run: i,
                median: v.point.est.value,
                reps: v.point.reps.iter().map(|r| r.value).collect(),
            });
        }
    }
    let mut h = History {
        experiment: experiment.unwrap_or_default(),
        runs: refs,
        changed: Vec::new(),
        unchanged: 0,
        too_short: 0,
        max_p: cfg.max_p,
        min_effect: cfg.min_effect,
        min_size: cfg.min_size,
    };
    for (key, (label, better, obs)) in series {
        if obs.len() < 3 {
            h.too_short += 1;
            continue;
        }
        let x: Vec<f64> = obs.iter().map(|o| o.median).collect();
        let cps = changepoint::detect(&x, cfg);
        if cps.is_empty() {
            h.unchanged += 1;
            continue;
        }
        let steps = cps
            .iter()
            .map(|c| {
                let (b, a) = (obs[c.index - 1].run, obs[c.index].run);
                Step {
                    before_run: h.runs[b].name.clone(),
                    after_run: h.runs[a].name.clone(),
                    after_index: a,
                    before: c.before,
                    after: c.after,
                    change_pct: c.change * 100.0,
                    p: c.p,
                    flag: compare::direction(c.change, better),
                }
            })
            .collect();
        h.changed.push(ValueHistory {
            figure: key.figure,
            panel: key.panel,
            series: label,
            x: key.x.label(),
            better,
            runs: obs,
            steps,
        });
    }
    Ok(h)
}

fn flag_text(f: Flag) -> &'static str {
    match f {
        Flag::Regression => "REGRESSION",
        Flag::Improvement => "improvement",
        _ => "changed",
    }
}

fn p_text(p: f64) -> String {
    if p < 1e-4 {
        "p < 0.0001".into()
    } else {
        format!("p = {p:.4}")
    }
}

pub fn render(h: &History) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} runs of {}, oldest first: {} … {}",
        h.runs.len(),
        h.experiment,
        h.runs.first().map_or("-", |r| r.name.as_str()),
        h.runs.last().map_or("-", |r| r.name.as_str()),
    );
    for v in &h.changed {
        let _ = writeln!(s, "{}", v.key());
        for st in &v.steps {
            let _ = writeln!(
                s,
                "  {} → {}: {} → {} ({:+.1}%, {})  {}",
                st.before_run,
                st.after_run,
                fmt_num(st.before),
                fmt_num(st.after),
                st.change_pct,
                p_text(st.p),
                flag_text(st.flag)
            );
        }
    }
    let newest = h.newest_regressions();
    let _ = writeln!(
        s,
        "{} values with a change point, {} without, {} in fewer than 3 runs (a change point: t-test p ≤ {}, segment medians {}% apart or more)",
        h.changed.len(),
        h.unchanged,
        h.too_short,
        h.max_p,
        fmt_num(h.min_effect * 100.0)
    );
    let noisy = h.newest_noisy();
    match (newest.len(), h.runs.last(), h.outcome()) {
        (0, _, _) | (_, None, _) => {
            let _ = writeln!(s, "newest run: no regression starts there");
        }
        (n, Some(r), Outcome::Inconclusive) => {
            let _ = writeln!(
                s,
                "newest run: INCONCLUSIVE, {} starts a new segment at {n} values, but {}: run it again on a quiet host",
                r.name,
                noisy.map(NoisyPoints::text).unwrap_or_default()
            );
        }
        (n, Some(r), _) => {
            let _ = writeln!(
                s,
                "newest run: REGRESSION, {} starts a new segment at {n} values",
                r.name
            );
        }
    }
    if let Some(n) = noisy {
        let why = match (newest.is_empty(), n.not_rerun()) {
            (_, 0) => String::new(),
            (true, _) => ": INCONCLUSIVE, they may hide a change; run them again (testbed run SPEC --resume --rerun-noisy --out RUN)".into(),
            (false, _) => ": a noisy point excuses no change unless it was run again (testbed run --rerun-noisy) and is still noisy".into(),
        };
        let _ = writeln!(s, "newest run: {}{why}", n.text());
    }
    s
}
