//! `testbed upgrade RUN`: rewrites a run directory written before the tidy
//! layout (samples with `kind`, `rep`, `param.*`, `tag.*` columns and
//! summary numbers mixed in) into today's samples.parquet and
//! summary.parquet. Nothing is lost: the raw rows are converted one to one,
//! the summary comes from the point records, the resolved workload of each
//! point from the run's own spec.toml, and the old files are kept under
//! `legacy/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray, UInt32Array};
use arrow::compute::kernels::cmp::eq;
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::{DataType, Schema};

use super::columns;
use super::manifest::{self, PointRecord};
use super::rundir::RunDir;
use super::samples::{self, read_parquet, write_parquet};
use super::summary_table;

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error(transparent)]
    Samples(#[from] samples::SamplesError),
    #[error("converting {path}: {source}")]
    Arrow {
        path: PathBuf,
        source: arrow::error::ArrowError,
    },
}

fn file(path: &Path, reason: impl std::fmt::Display) -> UpgradeError {
    UpgradeError::File {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// What happened to one run directory.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    AlreadyTidy,
    Upgraded {
        raw_rows: usize,
        summary_rows: usize,
    },
}

/// Whether a samples file is in the layout before the tidy tables.
pub fn is_legacy(path: &Path) -> Result<bool, UpgradeError> {
    let (schema, _) = read_parquet(path)?;
    Ok(schema.field_with_name("kind").is_ok())
}

pub fn upgrade(dir: &Path) -> Result<Outcome, UpgradeError> {
    let rd = RunDir {
        root: dir.to_path_buf(),
    };
    let mpath = rd.manifest();
    let mut m = manifest::read(&mpath).map_err(|e| file(&mpath, e))?;
    let spath = rd.samples();
    if spath.exists() && !is_legacy(&spath)? {
        return Ok(Outcome::AlreadyTidy);
    }
    // The workload of each point, as the run's own spec resolves it.
    let workloads = resolve_workloads(&rd);
    for rec in &mut m.points {
        if rec.workload.is_none() {
            rec.workload = workloads.get(&rec.id).cloned();
        }
    }
    let records: BTreeMap<String, PointRecord> =
        m.points.iter().map(|r| (r.id.clone(), r.clone())).collect();

    let legacy = dir.join("legacy");
    std::fs::create_dir_all(legacy.join("points")).map_err(|e| file(&legacy, e))?;
    // Per-point files first, so a later --resume merges like files.
    let mut converted = Vec::new();
    if let Ok(entries) = std::fs::read_dir(rd.points_dir()) {
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
            .collect();
        paths.sort();
        for p in paths {
            if !is_legacy(&p)? {
                converted.push(p);
                continue;
            }
            let (_, batches) = read_parquet(&p)?;
            let new: Vec<RecordBatch> = batches
                .iter()
                .map(|b| convert(b, &m.run_id, &records, &p))
                .collect::<Result<_, _>>()?;
            let unified = samples::unify(&new)?;
            keep(&p, &legacy.join("points"))?;
            if let Some(first) = unified.first() {
                write_parquet(&p, first.schema(), &unified)?;
            }
            converted.push(p);
        }
    }
    if spath.exists() {
        keep(&spath, &legacy)?;
    }
    let raw_rows = if converted.is_empty() {
        0
    } else {
        samples::merge(&converted, &spath)?
    };
    let done: Vec<&PointRecord> = m.points.iter().filter(|r| r.ok).collect();
    let table = summary_table::batch(&m.run_id, &done)?;
    let summary_rows = table.num_rows();
    write_parquet(&rd.summary(), table.schema(), &[table])?;
    for rec in &m.points {
        let text =
            serde_json::to_vec_pretty(rec).map_err(|e| file(&rd.point_record(&rec.id), e))?;
        crate::host::fsutil::write_atomic(&rd.point_record(&rec.id), &text)
            .map_err(|e| file(&rd.point_record(&rec.id), e))?;
    }
    manifest::write(&mpath, &m).map_err(|e| file(&mpath, e))?;
    Ok(Outcome::Upgraded {
        raw_rows,
        summary_rows,
    })
}

/// Copies `path` into `dir` (once: an earlier copy is the original).
fn keep(path: &Path, dir: &Path) -> Result<(), UpgradeError> {
    let Some(name) = path.file_name() else {
        return Err(file(path, "no file name"));
    };
    let to = dir.join(name);
    if !to.exists() {
        std::fs::copy(path, &to).map_err(|e| file(&to, e))?;
    }
    Ok(())
}

/// Point id → resolved workload, from the run's spec.toml. A spec the
/// current testbed cannot read leaves the records without it (the
/// columns then hold only the sweep axes).
fn resolve_workloads(rd: &RunDir) -> BTreeMap<String, serde_json::Value> {
    let Ok(loaded) = crate::planning::spec::load(&rd.spec_copy()) else {
        return BTreeMap::new();
    };
    let Ok(plan) = crate::planning::plan::plan(&loaded) else {
        return BTreeMap::new();
    };
    plan.points
        .iter()
        .map(|p| (p.id(), p.workload.resolved()))
        .collect()
}

/// A legacy batch's raw rows in the tidy layout.
fn convert(
    b: &RecordBatch,
    run_id: &str,
    records: &BTreeMap<String, PointRecord>,
    path: &Path,
) -> Result<RecordBatch, UpgradeError> {
    let arrow = |source| UpgradeError::Arrow {
        path: path.to_path_buf(),
        source,
    };
    let col = |n: &str| {
        b.column_by_name(n)
            .cloned()
            .ok_or_else(|| file(path, format!("no column {n}")))
    };
    let raw = eq(&col("kind")?, &StringArray::new_scalar("raw")).map_err(arrow)?;
    let b = filter_record_batch(b, &raw).map_err(arrow)?;
    let rows = b.num_rows();
    let get = |n: &str| {
        b.column_by_name(n)
            .cloned()
            .ok_or_else(|| file(path, format!("no column {n}")))
    };
    let point_ids = get("point_id")?;
    let point_ids = point_ids
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| file(path, "point_id is not text"))?;
    let boots: UInt32Array = (0..rows)
        .map(|i| records.get(point_ids.value(i)).map_or(0, |r| r.boot))
        .collect();
    // The columns in samples.parquet's order.
    let mut fields = samples::fixed_fields();
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![run_id; rows])),
        get("point")?,
        get("rep")?,
        Arc::new(boots),
        get("metric")?,
        get("value")?,
        get("unit")?,
        get("thread")?,
        get("seq")?,
    ];
    // Params are constant per point; rows of several points are possible.
    let mut by_point: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for i in 0..rows {
        by_point
            .entry(point_ids.value(i).to_string())
            .or_default()
            .push(i);
    }
    if by_point.len() > 1 {
        return Err(file(path, "a per-point file holds rows of several points"));
    }
    if let Some(rec) = by_point.keys().next().and_then(|id| records.get(id)) {
        let params = columns::point_params(
            rec.workload.as_ref().unwrap_or(&serde_json::Value::Null),
            &rec.params,
        );
        for (name, v) in &params {
            let (f, c) = columns::constant_column(&columns::column_name("param", name), v, rows);
            fields.push(f);
            cols.push(c);
        }
    }
    for f in b.schema().fields() {
        if let Some(key) = f.name().strip_prefix("tag.") {
            let text = cast(
                b.column_by_name(f.name())
                    .ok_or_else(|| file(path, "tag"))?,
                &DataType::Utf8,
            )
            .map_err(arrow)?;
            let text = text
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| file(path, "tag column"))?;
            let values: Vec<Option<&str>> = (0..rows)
                .map(|i| (!text.is_null(i)).then(|| text.value(i)))
                .collect();
            let (tf, tc) = columns::tag_column(&columns::column_name("tag", key), &values);
            fields.push(tf);
            cols.push(tc);
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(arrow)
}
