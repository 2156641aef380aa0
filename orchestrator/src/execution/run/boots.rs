//! Running the points: boot after boot until every point has an outcome,
//! each stored as it finishes; then the tables and the final manifest.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use super::{RunError, RunOptions, RunResult};
use crate::execution::executor::{Boot, BootError, Executor, PointOutcome, PointRefused};
use crate::host::progress::{Event, Progress};
use crate::machine::hostcost;
use crate::machine::noise::{HostNoise, Snapshot};
use crate::planning::plan::{Plan, Point};
use crate::planning::spec::{BootPolicy, Spec};
use crate::recording::results::manifest::{
    self, EarlierMeasurement, Manifest, PointRecord, RunStatus,
};
use crate::recording::results::rundir::RunDir;
use crate::recording::results::{levels, outputs, samples, summary_table};

/// How the boots ended: every record, and why they stopped early if so.
pub(super) struct Ended {
    records: BTreeMap<String, PointRecord>,
    stop: Option<RunStatus>,
    fatal: Option<String>,
    /// Every point of the plan, by id: a complete run has each stored.
    planned: Vec<String>,
    /// When it finished and its wall time, if not now and since `started`
    /// (a collected Slurm array: its last task's end, first start to last end).
    ended_at: Option<(String, f64)>,
}

/// The most times `--rerun-noisy` runs one point again, over all attempts
/// of a run: a host that stays busy ends the retries, not the run.
pub const MAX_NOISY_RERUNS: usize = 2;

/// A finished point `--rerun-noisy` runs again.
fn rerun_for_noise(rec: &PointRecord, opts: &RunOptions) -> bool {
    opts.rerun_noisy && may_rerun_for_noise(rec)
}

/// A finished, noisy point that has not run again as often as
/// `--rerun-noisy` allows: what `--rerun-noisy` would run again.
pub fn may_rerun_for_noise(rec: &PointRecord) -> bool {
    rec.ok && rec.noisy() && rec.earlier.len() < MAX_NOISY_RERUNS
}

pub(super) fn run_boots(
    executor: &mut dyn Executor,
    plan: &Plan,
    rd: &RunDir,
    m: &mut Manifest,
    spec: &Spec,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Ended {
    // What an earlier attempt finished (--resume), as the manifest starts.
    let previous: BTreeMap<String, PointRecord> =
        m.points.iter().map(|r| (r.id.clone(), r.clone())).collect();
    let done: Vec<String> = previous
        .values()
        .filter(|r| r.ok && !rerun_for_noise(r, opts))
        .map(|r| r.id.clone())
        .collect();
    let mut queue: Vec<Point> = plan
        .points
        .iter()
        .filter(|p| !done.contains(&p.id()))
        .cloned()
        .collect();
    let noisy_before = previous
        .values()
        .filter(|r| rerun_for_noise(r, opts))
        .count();
    if noisy_before > 0 {
        progress.event(Event::Warn(format!(
            "--rerun-noisy: {noisy_before} point(s) the earlier attempt measured on a busy host run again"
        )));
    }
    progress.event(Event::RunStarted {
        dir: rd.root.display().to_string(),
        total: plan.points.len(),
        already_done: done.len(),
    });

    let mut records: BTreeMap<String, PointRecord> = previous;
    // The executor reports boot events while on_point reports points: both
    // go to the one progress renderer, never at the same time.
    let progress_cell = std::cell::RefCell::new(&mut *progress);
    // After every boot an earlier attempt made (listed, in a record, or
    // with logs left), so none of its logs is overwritten.
    let after_earlier = m
        .boots
        .iter()
        .map(|b| b.index.saturating_add(1))
        .chain(records.values().map(|r| r.boot.saturating_add(1)))
        .fold(m.boots.len() as u32, u32::max);
    let mut boot_index = rd.next_boot_index(after_earlier);
    // Tag keys of the whole run: each is a column of every merged row.
    let mut run_tags: BTreeSet<String> = records
        .values()
        .filter(|r| r.ok)
        .flat_map(|r| samples::tag_keys(&rd.point_samples(&r.id)))
        .collect();
    let mut stop: Option<RunStatus> = None;
    let mut fatal: Option<String> = None;
    let noisy_above = spec.experiment.noisy_above_pct;
    // The host's counters as the current point started.
    let point_start: std::cell::Cell<Option<Snapshot>> = std::cell::Cell::new(None);
    // ...and the run's processes' CPU time, their peak memory reset.
    let cost_start: std::cell::Cell<Option<hostcost::Start>> = std::cell::Cell::new(None);
    loop {
        if queue.is_empty() && stop.is_none() && opts.rerun_noisy {
            queue = plan
                .points
                .iter()
                .filter(|p| {
                    records
                        .get(&p.id())
                        .is_some_and(|r| rerun_for_noise(r, opts))
                })
                .cloned()
                .collect();
            if !queue.is_empty() {
                progress_cell.borrow_mut().event(Event::Warn(format!(
                    "--rerun-noisy: {} point(s) measured on a busy host run again",
                    queue.len()
                )));
            }
        }
        if queue.is_empty() || stop.is_some() {
            break;
        }
        let batch: Vec<Point> = match spec.vm.boot {
            // One boot per vCPU count of a `vm.vcpus` sweep and per boot
            // group of the repetitions (the plan keeps each together).
            BootPolicy::PerRun => queue
                .iter()
                .take_while(|p| {
                    (p.vm_vcpus, p.boot_group) == (queue[0].vm_vcpus, queue[0].boot_group)
                })
                .cloned()
                .collect(),
            BootPolicy::PerPoint => queue[..1].to_vec(),
        };
        let mut failed_fast = false;
        // A point that cannot be stored fails the run: going on would
        // leave it out of a run that looks complete.
        let mut store_failed: Option<String> = None;
        let run_id = m.run_id.clone();
        let mut on_point = |point: &Point, outcome: PointOutcome| -> Result<(), PointRefused> {
            let id = point.id();
            let noise = match (point_start.take(), Snapshot::take()) {
                (Some(a), Some(b)) => Some(HostNoise::measure(&a, &b, noisy_above)),
                _ => None,
            };
            let host_cost = cost_start.take().map(|s| hostcost::end(&s));
            let outcome = bound_run_tags(outcome, &mut run_tags);
            let stored = Measured {
                boot: boot_index,
                noise,
                host_cost,
                previous: records.get(&id).filter(|r| r.ok).cloned(),
            };
            let rec = store_point(rd, &run_id, point, outcome, stored).map_err(|e| {
                let refused = PointRefused::Store {
                    point: id,
                    source: Box::new(e),
                };
                store_failed = Some(refused.to_string());
                refused
            })?;
            progress_note(&rec, &mut **progress_cell.borrow_mut());
            let ok = rec.ok;
            records.insert(rec.id.clone(), rec);
            if !ok && opts.fail_fast {
                failed_fast = true;
                return Err(PointRefused::FailFast);
            }
            Ok(())
        };
        let mut events = |e: Event| {
            if matches!(e, Event::PointStarted { .. }) {
                point_start.set(Snapshot::take());
                cost_start.set(Some(hostcost::start()));
            }
            progress_cell.borrow_mut().event(e)
        };
        let result = executor.run_boot(Boot {
            index: boot_index,
            points: &batch,
            on_point: &mut on_point,
            events: &mut events,
        });
        match result {
            Ok((record, handled)) => {
                if let Some(ms) = record.ready_ms {
                    m.boot_to_agent_ms.push(ms);
                }
                if m.guest.is_none()
                    && let Some(h) = &record.hello
                {
                    m.guest = Some(manifest::GuestInfo::from_hello(h));
                }
                if m.qemu_argv.is_empty() {
                    m.qemu_argv = record.argv.clone();
                }
                m.boots.push(record.clone());
                queue.drain(..handled.min(queue.len()));
                if failed_fast {
                    stop = Some(RunStatus::Partial);
                }
                if handled == 0 && !queue.is_empty() {
                    fatal = Some(format!("boot {boot_index} ran no point: {}", record.ended));
                    stop = Some(RunStatus::Failed);
                }
            }
            Err(BootError::Interrupted) => stop = Some(RunStatus::Interrupted),
            Err(e) => {
                fatal = Some(format!("boot {boot_index} failed: {e}"));
                stop = Some(RunStatus::Failed);
            }
        }
        boot_index += 1;
        if crate::execution::executor::interrupted() {
            stop = Some(RunStatus::Interrupted);
        }
        // Whatever else ended the boot, a lost point is what to report.
        if let Some(e) = store_failed {
            fatal = Some(e);
            stop = Some(RunStatus::Failed);
        }
    }

    Ended {
        records,
        stop,
        fatal,
        planned: plan.points.iter().map(Point::id).collect(),
        ended_at: None,
    }
}

impl Ended {
    /// Points stored by others (Slurm tasks), none stopped early.
    pub(super) fn collected(
        records: BTreeMap<String, PointRecord>,
        planned: Vec<String>,
        ended_at: (String, f64),
    ) -> Ended {
        Ended {
            records,
            stop: None,
            fatal: None,
            planned,
            ended_at: Some(ended_at),
        }
    }
}

/// Writes the tables of what is done and the final manifest. The manifest
/// says complete only if every planned point has its record and every
/// finished point its whole samples file.
pub(super) fn finish(
    rd: &RunDir,
    mut m: Manifest,
    ended: Ended,
    started: Instant,
) -> Result<RunResult, RunError> {
    let Ended {
        mut records,
        mut stop,
        mut fatal,
        planned,
        ended_at,
    } = ended;
    let dir = rd.root.clone();
    // A run that stopped early lacks points by design: check what it has.
    let must_have: Vec<String> = if stop.is_none() {
        planned
    } else {
        records.keys().cloned().collect()
    };
    let lost = verify_stored(rd, &must_have, &mut records);
    if !lost.is_empty() {
        let text = format!(
            "{} point(s) not stored whole, run them again with --resume:\n  {}",
            lost.len(),
            lost.join("\n  ")
        );
        fatal = Some(match fatal {
            Some(f) => format!("{f}\n{text}"),
            None => text,
        });
        stop = Some(RunStatus::Failed);
    }
    // Merge what is done, whatever happened; failed points are listed, not drawn.
    let mut ok_files: Vec<PathBuf> = records
        .values()
        .filter(|r| r.ok)
        .map(|r| rd.point_samples(&r.id))
        .collect();
    ok_files.sort();
    if !ok_files.is_empty() {
        let tables = samples::merge(&ok_files, &rd.samples())
            .map_err(|e| format!("merge samples: {e}"))
            .and_then(|_| {
                let done: Vec<&PointRecord> = records.values().filter(|r| r.ok).collect();
                let table = summary_table::batch(&m.run_id, &done)
                    .map_err(|e| format!("summary table: {e}"))?;
                samples::write_parquet(&rd.summary(), table.schema(), &[table])
                    .map_err(|e| format!("summary table: {e}"))
            });
        // The manifest is still written, saying the run failed and why.
        if let Err(e) = tables {
            fatal = Some(match fatal {
                Some(f) => format!("{f}\n{e}"),
                None => e,
            });
            stop = Some(RunStatus::Failed);
        }
    }
    m.points = records.values().cloned().collect();
    // Last of the files: what verify and pack check later.
    match outputs::record(&rd.root) {
        Ok(files) => m.outputs = files,
        Err(e) => {
            let e = format!("record the run's output files: {e}");
            fatal = Some(match fatal {
                Some(f) => format!("{f}\n{e}"),
                None => e,
            });
            stop = Some(RunStatus::Failed);
        }
    }
    let done: Vec<&PointRecord> = m.points.iter().filter(|p| p.ok).collect();
    m.variance = levels::of_records(&done, level_costs(&m, &done));
    let any_failed = m.points.iter().any(|p| !p.ok);
    m.status = match stop {
        Some(s) => s,
        None if any_failed => RunStatus::Partial,
        None => RunStatus::Complete,
    };
    // The canary again, after the last boot: a host that slowed down
    // during the run shows as a gap between its start and end timings.
    if let Some(speed) = m.host.speed.as_mut().filter(|_| stop.is_none()) {
        speed.end_ns_per_step =
            crate::machine::calibrate::measure(crate::machine::calibrate::PASSES);
    }
    let (finished_at, wall_s) =
        ended_at.unwrap_or_else(|| (manifest::utc_now(), started.elapsed().as_secs_f64()));
    m.finished_at = Some(finished_at);
    m.wall_s = Some(wall_s);
    manifest::write(&rd.manifest(), &m)?;
    match (m.status, fatal) {
        (RunStatus::Interrupted, _) => Err(RunError::Interrupted(dir.display().to_string())),
        (RunStatus::Failed, Some(e)) => Err(RunError::Setup(format!(
            "{e}\n(run directory: {})",
            dir.display()
        ))),
        _ => Ok(RunResult { dir, manifest: m }),
    }
}

/// What one more boot and one more repetition of the sweep cost this run:
/// the median boot to agent, and the points' wall time per repetition.
fn level_costs(m: &Manifest, done: &[&PointRecord]) -> Option<levels::Costs> {
    let mut boots: Vec<u64> = m.boot_to_agent_ms.clone();
    boots.sort_unstable();
    let boot_s = *boots.get(boots.len() / 2)? as f64 / 1000.0;
    let reps: BTreeSet<u32> = done.iter().map(|p| p.rep).collect();
    let wall: f64 = done.iter().filter_map(|p| p.wall_s).sum();
    (!reps.is_empty()).then(|| levels::Costs {
        boot_s,
        repetition_s: wall / reps.len() as f64,
    })
}

/// Checks that each of `ids` has its record on disk and, if finished, its
/// whole samples file; a finished point whose file is not whole is marked
/// failed in `records` (so it is neither merged nor counted as done).
/// Returns one line per point that is not stored whole.
fn verify_stored(
    rd: &RunDir,
    ids: &[String],
    records: &mut BTreeMap<String, PointRecord>,
) -> Vec<String> {
    let (on_disk, _) = rd.scan_records();
    let mut lost = Vec::new();
    for id in ids {
        if !on_disk.contains_key(id) {
            lost.push(format!(
                "{id}: no record ({} is missing or unreadable)",
                rd.point_record(id).display()
            ));
            continue;
        }
        let Some(rec) = records.get_mut(id) else {
            lost.push(format!("{id}: stored by no boot of this run"));
            continue;
        };
        if let Err(why) = rd.check_point(rec) {
            lost.push(format!("{id}: {why}"));
            rec.ok = false;
            rec.error = Some(format!("samples not stored whole: {why}"));
        }
    }
    lost
}

fn progress_note(rec: &PointRecord, progress: &mut dyn Progress) {
    let note = match (&rec.error, rec.wall_s) {
        (Some(e), _) => e.lines().next().unwrap_or("").to_string(),
        (None, Some(w)) => format!("{} samples in {w:.1}s", rec.samples),
        _ => String::new(),
    };
    progress.event(Event::PointFinished {
        id: rec.id.clone(),
        ok: rec.ok,
        note,
    });
}

/// Distinct tag keys one run may use: each becomes a column of every row
/// of samples.parquet (a point may use `spill::MAX_TAG_KEYS`).
pub const MAX_RUN_TAG_KEYS: usize = 64;

/// The outcome, failed when its tag keys would take the run past
/// `MAX_RUN_TAG_KEYS`; otherwise its keys join `seen`.
fn bound_run_tags(outcome: PointOutcome, seen: &mut BTreeSet<String>) -> PointOutcome {
    let PointOutcome::Done { samples, .. } = &outcome else {
        return outcome;
    };
    let new: Vec<&String> = samples
        .summary
        .tag_keys
        .keys()
        .filter(|k| !seen.contains(*k))
        .collect();
    if seen.len() + new.len() > MAX_RUN_TAG_KEYS {
        return PointOutcome::Failed {
            error: format!(
                "the guest sent samples the host refuses: the run would use more than {MAX_RUN_TAG_KEYS} distinct tag keys ({} before this point, {} new)",
                seen.len(),
                new.len()
            ),
        };
    }
    seen.extend(new.into_iter().cloned());
    outcome
}

/// What the host knows of a point beyond its outcome.
struct Measured {
    boot: u32,
    noise: Option<HostNoise>,
    host_cost: Option<hostcost::HostCost>,
    /// The finished record a `--rerun-noisy` run replaces.
    previous: Option<PointRecord>,
}

/// Why a finished point could not be stored (the run stops: going on
/// would leave it out of a run that looks complete).
#[derive(Debug, thiserror::Error)]
enum StoreError {
    #[error(transparent)]
    Samples(#[from] samples::SamplesError),
    #[error("encode its record: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Writes a finished point: samples first, then its record (the record's
/// presence is what marks the point done for --resume). A rerun keeps the
/// earlier measurement in the record; a rerun that fails keeps the earlier
/// measurement as the point, and notes the failed attempt.
fn store_point(
    rd: &RunDir,
    run_id: &str,
    point: &Point,
    outcome: PointOutcome,
    measured: Measured,
) -> Result<PointRecord, StoreError> {
    let Measured {
        boot,
        noise,
        host_cost,
        previous,
    } = measured;
    let rec = match (outcome, previous) {
        (PointOutcome::Failed { error }, Some(mut kept)) => {
            kept.earlier.push(EarlierMeasurement {
                boot,
                error: Some(error),
                noise,
                ..Default::default()
            });
            kept
        }
        (outcome, previous) => {
            let mut rec = new_record(rd, run_id, point, outcome, boot)?;
            rec.noise = noise;
            rec.host_cost = host_cost;
            if let Some(p) = previous {
                rec.earlier = p.earlier.clone();
                rec.earlier.push(EarlierMeasurement::of(&p));
            }
            rec
        }
    };
    let text = serde_json::to_vec_pretty(&rec)?;
    let path = rd.point_record(&rec.id);
    crate::host::fsutil::write_atomic(&path, &text)
        .map_err(|source| StoreError::Write { path, source })?;
    Ok(rec)
}

/// A point's record from its outcome, its samples written.
fn new_record(
    rd: &RunDir,
    run_id: &str,
    point: &Point,
    outcome: PointOutcome,
    boot: u32,
) -> Result<PointRecord, StoreError> {
    let mut rec = PointRecord {
        id: point.id(),
        point: point.point,
        rep: point.rep,
        params: point.params.clone(),
        workload: Some(point.workload.resolved()),
        seed: point.seed,
        ok: false,
        error: None,
        wall_s: None,
        samples: 0,
        summary: BTreeMap::new(),
        boot,
        noise: None,
        host_cost: None,
        earlier: Vec::new(),
    };
    match outcome {
        PointOutcome::Done {
            summary,
            samples: spilled,
            wall_s,
        } => {
            let rows =
                samples::write_point(run_id, point, boot, &spilled, &rd.point_samples(&rec.id))?;
            rec.ok = true;
            rec.samples = rows as usize;
            rec.wall_s = Some(wall_s);
            rec.summary = summary;
        }
        PointOutcome::Failed { error } => {
            let _ = std::fs::remove_file(rd.point_samples(&rec.id));
            rec.error = Some(error);
        }
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::results::spill::SpillFile;
    use testbed_agent::protocol::SampleChunk;

    fn done_with_keys(dir: &std::path::Path, keys: std::ops::Range<usize>) -> PointOutcome {
        let chunks: Vec<SampleChunk> = keys
            .map(|i| SampleChunk {
                job_id: 1,
                metric: "m".into(),
                unit: "ns".into(),
                thread: 0,
                first_seq: 0,
                tags: BTreeMap::from([(format!("k{i}"), "v".to_string())]),
                values: vec![1.0],
            })
            .collect();
        PointOutcome::Done {
            summary: BTreeMap::new(),
            samples: SpillFile::from_chunks(dir, &chunks).unwrap(),
            wall_s: 0.0,
        }
    }

    #[test]
    fn tag_keys_are_bounded_per_run_not_only_per_point() {
        let dir = tempfile::tempdir().unwrap();
        let mut seen = BTreeSet::new();
        // Four points of 16 new keys each fill the run's 64.
        for p in 0..4 {
            let o = bound_run_tags(done_with_keys(dir.path(), p * 16..p * 16 + 16), &mut seen);
            assert!(matches!(o, PointOutcome::Done { .. }), "point {p}: {o:?}");
        }
        // Keys seen before are welcome; one more new one is not.
        let again = bound_run_tags(done_with_keys(dir.path(), 0..16), &mut seen);
        assert!(matches!(again, PointOutcome::Done { .. }));
        let more = bound_run_tags(done_with_keys(dir.path(), 64..65), &mut seen);
        match more {
            PointOutcome::Failed { error } => {
                assert!(error.contains("more than 64 distinct tag keys"), "{error}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(seen.len(), MAX_RUN_TAG_KEYS);
    }

    #[test]
    fn noisy_reruns_are_bounded_per_point() {
        let opts = RunOptions {
            rerun_noisy: true,
            ..RunOptions::default()
        };
        let mut rec: PointRecord = serde_json::from_value(serde_json::json!({
            "id": "p0000-r00", "point": 0, "rep": 0, "params": {}, "seed": 1,
            "ok": true, "boot": 0,
            "noise": {"others_pct": 40.0, "steal_pct": 0.0, "own_pct": 50.0, "load1": 3.0,
                      "interval_s": 1.0, "noisy_above_pct": 10.0, "noisy": true},
        }))
        .unwrap();
        assert!(rerun_for_noise(&rec, &opts));
        assert!(!rerun_for_noise(&rec, &RunOptions::default()));
        for _ in 0..MAX_NOISY_RERUNS {
            rec.earlier.push(EarlierMeasurement::of(&rec));
        }
        assert!(!rerun_for_noise(&rec, &opts), "the bound ends the retries");
        rec.earlier.clear();
        rec.ok = false;
        assert!(
            !rerun_for_noise(&rec, &opts),
            "a failed point is not a noisy one"
        );
    }
}
