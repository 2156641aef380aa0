//! Running the points: boot after boot until every point has an outcome,
//! each stored as it finishes; then the tables and the final manifest.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use super::{RunError, RunOptions, RunResult, setup};
use crate::executor::{BootError, Executor, PointOutcome};
use crate::plan::{Plan, Point};
use crate::progress::{Event, Progress};
use crate::results::manifest::{self, Manifest, PointRecord, RunStatus};
use crate::results::rundir::RunDir;
use crate::results::{samples, summary_table};
use crate::spec::BootPolicy;

/// How the boots ended: every record, and why they stopped early if so.
pub(super) struct Ended {
    records: BTreeMap<String, PointRecord>,
    stop: Option<RunStatus>,
    fatal: Option<String>,
}

pub(super) fn run_boots(
    executor: &mut dyn Executor,
    plan: &Plan,
    rd: &RunDir,
    m: &mut Manifest,
    boot_policy: BootPolicy,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Ended {
    // What an earlier attempt finished (--resume), as the manifest starts.
    let previous: BTreeMap<String, PointRecord> =
        m.points.iter().map(|r| (r.id.clone(), r.clone())).collect();
    let done: Vec<String> = previous
        .values()
        .filter(|r| r.ok)
        .map(|r| r.id.clone())
        .collect();
    let mut queue: Vec<Point> = plan
        .points
        .iter()
        .filter(|p| !done.contains(&p.id()))
        .cloned()
        .collect();
    progress.event(Event::RunStarted {
        dir: rd.root.display().to_string(),
        total: plan.points.len(),
        already_done: done.len(),
    });

    let mut records: BTreeMap<String, PointRecord> = previous;
    // The executor reports boot events while on_point reports points: both
    // go to the one progress renderer, never at the same time.
    let progress_cell = std::cell::RefCell::new(&mut *progress);
    let mut boot_index = m.boots.len() as u32;
    let mut stop: Option<RunStatus> = None;
    let mut fatal: Option<String> = None;
    while !queue.is_empty() && stop.is_none() {
        let batch: Vec<Point> = match boot_policy {
            BootPolicy::PerRun => queue.clone(),
            BootPolicy::PerPoint => queue[..1].to_vec(),
        };
        let mut failed_fast = false;
        let run_id = m.run_id.clone();
        let mut on_point = |point: &Point, outcome: PointOutcome| -> Result<(), String> {
            let rec = store_point(rd, &run_id, point, outcome, boot_index)?;
            progress_note(&rec, &mut **progress_cell.borrow_mut());
            let ok = rec.ok;
            records.insert(rec.id.clone(), rec);
            if !ok && opts.fail_fast {
                failed_fast = true;
                return Err("--fail-fast: stopping at the first failed point".into());
            }
            Ok(())
        };
        let mut events = |e: Event| progress_cell.borrow_mut().event(e);
        let result = executor.run_boot(boot_index, &batch, &mut on_point, &mut events);
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
            Err(BootError::Failed(e)) => {
                fatal = Some(format!("boot {boot_index} failed: {e}"));
                stop = Some(RunStatus::Failed);
            }
        }
        boot_index += 1;
        if crate::executor::interrupted() {
            stop = Some(RunStatus::Interrupted);
        }
    }

    Ended {
        records,
        stop,
        fatal,
    }
}

/// Writes the tables of what is done and the final manifest.
pub(super) fn finish(
    rd: &RunDir,
    mut m: Manifest,
    ended: Ended,
    started: Instant,
) -> Result<RunResult, RunError> {
    let Ended {
        records,
        stop,
        fatal,
    } = ended;
    let dir = rd.root.clone();
    // Merge what is done, whatever happened; failed points are listed, not drawn.
    let mut ok_files: Vec<PathBuf> = records
        .values()
        .filter(|r| r.ok)
        .map(|r| rd.point_samples(&r.id))
        .collect();
    ok_files.sort();
    if !ok_files.is_empty() {
        samples::merge(&ok_files, &rd.samples()).map_err(setup("merge samples"))?;
        let done: Vec<&PointRecord> = records.values().filter(|r| r.ok).collect();
        let table = summary_table::batch(&m.run_id, &done).map_err(setup("summary table"))?;
        samples::write_parquet(&rd.summary(), table.schema(), &[table])
            .map_err(setup("summary table"))?;
    }
    m.points = records.values().cloned().collect();
    let any_failed = m.points.iter().any(|p| !p.ok);
    m.status = match stop {
        Some(s) => s,
        None if any_failed => RunStatus::Partial,
        None => RunStatus::Complete,
    };
    m.finished_at = Some(manifest::utc_now());
    m.wall_s = Some(started.elapsed().as_secs_f64());
    manifest::write(&rd.manifest(), &m).map_err(RunError::Setup)?;
    match (m.status, fatal) {
        (RunStatus::Interrupted, _) => Err(RunError::Interrupted(dir.display().to_string())),
        (RunStatus::Failed, Some(e)) => Err(RunError::Setup(format!(
            "{e}\n(run directory: {})",
            dir.display()
        ))),
        _ => Ok(RunResult { dir, manifest: m }),
    }
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

/// Writes a finished point: samples first, then its record (the record's
/// presence is what marks the point done for --resume).
fn store_point(
    rd: &RunDir,
    run_id: &str,
    point: &Point,
    outcome: PointOutcome,
    boot: u32,
) -> Result<PointRecord, String> {
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
    };
    match outcome {
        PointOutcome::Done {
            summary,
            chunks,
            wall_s,
        } => {
            let batch =
                samples::point_batch(run_id, point, boot, &chunks).map_err(|e| e.to_string())?;
            samples::write_parquet(&rd.point_samples(&rec.id), batch.schema(), &[batch])
                .map_err(|e| e.to_string())?;
            rec.ok = true;
            rec.samples = chunks.iter().map(|c| c.values.len()).sum();
            rec.wall_s = Some(wall_s);
            rec.summary = summary;
        }
        PointOutcome::Failed { error } => {
            let _ = std::fs::remove_file(rd.point_samples(&rec.id));
            rec.error = Some(error);
        }
    }
    let text = serde_json::to_vec_pretty(&rec).map_err(|e| e.to_string())?;
    crate::fsutil::write_atomic(&rd.point_record(&rec.id), &text).map_err(|e| e.to_string())?;
    Ok(rec)
}
