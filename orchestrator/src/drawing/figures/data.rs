//! A run directory as figures see it: the manifest and samples.parquet,
//! and the rows one panel needs (selected with arrow compute kernels).
//! Nothing comes from in-memory state of the run that produced them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use arrow::array::{
    Array, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray, UInt32Array,
    UInt64Array,
};
use arrow::compute::kernels::boolean::and;
use arrow::compute::kernels::cmp::eq;
use arrow::compute::{concat_batches, filter_record_batch};
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, Schema};

use super::def::{MetricKind, Panel};
use super::error::{FigureError, file_err};
use crate::results::manifest::{self, Manifest};
use crate::results::samples;

pub struct RunData {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// Every sample row; `None` when no point finished.
    pub samples: Option<RecordBatch>,
}

/// One value of a column.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(String),
}

impl Cell {
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Cell::Int(i) => Some(*i as f64),
            Cell::Float(f) => Some(*f),
            Cell::Bool(_) => None,
            Cell::Text(s) => s.trim().parse().ok(),
        }
    }

    pub fn text(&self) -> String {
        match self {
            Cell::Int(i) => i.to_string(),
            Cell::Float(f) => f.to_string(),
            Cell::Bool(b) => b.to_string(),
            Cell::Text(s) => s.clone(),
        }
    }

    pub fn from_toml(v: &toml::Value) -> Option<Cell> {
        Some(match v {
            toml::Value::Integer(i) => Cell::Int(*i),
            toml::Value::Float(f) => Cell::Float(*f),
            toml::Value::Boolean(b) => Cell::Bool(*b),
            toml::Value::String(s) => Cell::Text(s.clone()),
            _ => return None,
        })
    }

    pub fn from_json(v: &serde_json::Value) -> Option<Cell> {
        Some(match v {
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Cell::Int(i),
                None => Cell::Float(n.as_f64()?),
            },
            serde_json::Value::Bool(b) => Cell::Bool(*b),
            serde_json::Value::String(s) => Cell::Text(s.clone()),
            _ => return None,
        })
    }

    /// Equal to a filter value (numbers compare as numbers, else as text).
    pub fn matches(&self, v: &toml::Value) -> bool {
        if let toml::Value::Array(a) = v {
            return a.iter().any(|x| self.matches(x));
        }
        let Some(other) = Cell::from_toml(v) else {
            return false;
        };
        match (self.as_f64(), other.as_f64()) {
            (Some(a), Some(b))
                if !matches!(self, Cell::Text(_)) || !matches!(other, Cell::Text(_)) =>
            {
                a == b
            }
            _ => self.text() == other.text(),
        }
    }
}

fn cell_at(a: &dyn Array, i: usize) -> Option<Cell> {
    if a.is_null(i) {
        return None;
    }
    let any = a.as_any();
    match a.data_type() {
        DataType::Int64 => any
            .downcast_ref::<Int64Array>()
            .map(|x| Cell::Int(x.value(i))),
        DataType::UInt32 => any
            .downcast_ref::<UInt32Array>()
            .map(|x| Cell::Int(i64::from(x.value(i)))),
        DataType::UInt64 => any
            .downcast_ref::<UInt64Array>()
            .map(|x| Cell::Int(x.value(i) as i64)),
        DataType::Float64 => any
            .downcast_ref::<Float64Array>()
            .map(|x| Cell::Float(x.value(i))),
        DataType::Boolean => any
            .downcast_ref::<BooleanArray>()
            .map(|x| Cell::Bool(x.value(i))),
        DataType::Utf8 => any
            .downcast_ref::<StringArray>()
            .map(|x| Cell::Text(x.value(i).to_string())),
        _ => arrow::util::display::array_value_to_string(a, i)
            .ok()
            .map(Cell::Text),
    }
}

/// Reads a run directory; damaged or missing files are errors naming them.
pub fn load(dir: &Path) -> Result<RunData, FigureError> {
    let mpath = dir.join("manifest.json");
    if !mpath.is_file() {
        return Err(file_err(&mpath, "missing: not a run directory"));
    }
    let manifest = manifest::read(&mpath)?;
    let spath = dir.join("samples.parquet");
    let finished = manifest.points.iter().filter(|p| p.ok).count();
    if !spath.exists() {
        if finished > 0 {
            return Err(file_err(
                &spath,
                format!("missing, but the manifest lists {finished} finished points"),
            ));
        }
        return Ok(RunData {
            dir: dir.to_path_buf(),
            manifest,
            samples: None,
        });
    }
    let raw = read_table(&spath, "raw")?;
    let summary_path = dir.join("summary.parquet");
    let summary = if summary_path.exists() {
        Some(read_table(&summary_path, "summary")?)
    } else {
        None
    };
    let parts: Vec<RecordBatch> = [Some(raw), summary].into_iter().flatten().collect();
    let unified = samples::unify(&parts).map_err(|e| file_err(&spath, e))?;
    let batch = match unified.first() {
        Some(first) => {
            concat_batches(&first.schema(), &unified).map_err(|e| file_err(&spath, e))?
        }
        None => return Err(file_err(&spath, "no rows")),
    };
    Ok(RunData {
        dir: dir.to_path_buf(),
        manifest,
        samples: Some(batch),
    })
}

/// One result table with a `kind` column ("raw" or "summary") added, so
/// a panel selects from both with one mask; summary rows without a
/// number (text only) are left out.
fn read_table(path: &Path, kind: &str) -> Result<RecordBatch, FigureError> {
    let (schema, batches) = samples::read_parquet(path)?;
    if schema.field_with_name("kind").is_ok() || schema.field_with_name("rep").is_ok() {
        return Err(file_err(
            path,
            "written by an older testbed (columns kind/rep/param.*): run `testbed upgrade RUN` to rewrite it in the tidy layout",
        ));
    }
    for (name, ty) in [
        ("point", DataType::UInt32),
        ("repetition", DataType::UInt32),
        ("metric", DataType::Utf8),
        ("value", DataType::Float64),
    ] {
        match schema.field_with_name(name) {
            Ok(f) if *f.data_type() == ty => {}
            Ok(f) => {
                return Err(file_err(
                    path,
                    format!("column {name} is {}, expected {ty}", f.data_type()),
                ));
            }
            Err(_) => return Err(file_err(path, format!("no column {name}"))),
        }
    }
    let batch = concat_batches(&schema, &batches).map_err(|e| file_err(path, e))?;
    let batch = match batch.column_by_name("value") {
        Some(v) if v.null_count() > 0 => {
            let keep = arrow::compute::is_not_null(v).map_err(|e| file_err(path, e))?;
            filter_record_batch(&batch, &keep).map_err(|e| file_err(path, e))?
        }
        _ => batch,
    };
    let kinds: ArrayRef = Arc::new(StringArray::from(vec![kind; batch.num_rows()]));
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let mut cols = batch.columns().to_vec();
    fields.push(Field::new("kind", DataType::Utf8, false));
    cols.push(kinds);
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(|e| file_err(path, e))
}

impl RunData {
    /// A workload field of the spec as run, standing in for `param_<axis>`
    /// when the axis was not swept.
    pub fn workload_value(&self, column: &str) -> Option<Cell> {
        let axis = column.strip_prefix("param_")?;
        Cell::from_json(self.manifest.spec.get("workload")?.get(axis)?)
    }
}

/// One selected sample (or summary number) of a panel.
#[derive(Debug, Clone)]
pub struct Row {
    pub point: u32,
    pub rep: u32,
    pub x: Cell,
    pub series: Vec<String>,
    /// Value of the ratio column (numerator / denominator name).
    pub ratio: Option<String>,
    pub value: f64,
}

pub struct Selected {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

fn strings<'a>(b: &'a RecordBatch, name: &str) -> Option<&'a StringArray> {
    b.column_by_name(name)?
        .as_any()
        .downcast_ref::<StringArray>()
}

fn u32s<'a>(b: &'a RecordBatch, name: &str) -> Option<&'a UInt32Array> {
    b.column_by_name(name)?
        .as_any()
        .downcast_ref::<UInt32Array>()
}

/// Values of tag `key` on each (point, rep)'s raw rows: what a bare summary
/// key of that point belongs to.
fn point_tags(b: &RecordBatch, key: &str) -> BTreeMap<(u32, u32), BTreeSet<String>> {
    let mut out: BTreeMap<(u32, u32), BTreeSet<String>> = BTreeMap::new();
    let (Some(kind), Some(tag), Some(p), Some(r)) = (
        strings(b, "kind"),
        strings(b, &format!("tag_{key}")),
        u32s(b, "point"),
        u32s(b, "repetition"),
    ) else {
        return out;
    };
    for i in 0..b.num_rows() {
        if kind.value(i) == "raw" && !tag.is_null(i) {
            out.entry((p.value(i), r.value(i)))
                .or_default()
                .insert(tag.value(i).to_string());
        }
    }
    out
}

/// The rows of `panel`: its metric, its filters, with x, series and ratio
/// columns resolved.
pub fn select(run: &RunData, panel: &Panel) -> Result<Selected, FigureError> {
    let mut notes = Vec::new();
    let Some(batch) = &run.samples else {
        return Ok(Selected {
            rows: Vec::new(),
            notes,
        });
    };
    let spath = run.dir.join("samples.parquet");
    let arrow_err = |e: arrow::error::ArrowError| file_err(&spath, e);
    let y = &panel.y;
    let kind_name = match y.kind {
        MetricKind::Raw => "raw",
        MetricKind::Summary => "summary",
    };
    let col = |n: &str| {
        batch
            .column_by_name(n)
            .ok_or_else(|| file_err(&spath, format!("no column {n}")))
    };
    let kind_mask = eq(col("kind")?, &StringArray::new_scalar(kind_name)).map_err(arrow_err)?;
    let metric = col("metric")?;
    let metric_mask = eq(metric, &StringArray::new_scalar(&y.metric)).map_err(arrow_err)?;
    let summary_tag = panel
        .summary_tag
        .as_deref()
        .filter(|_| y.kind == MetricKind::Summary);
    let mask = and(&kind_mask, &metric_mask).map_err(arrow_err)?;
    let sel = filter_record_batch(batch, &mask).map_err(arrow_err)?;

    let tags = summary_tag.map(|k| point_tags(batch, k));
    let tag_col = summary_tag.map(|k| format!("tag_{k}"));
    let (Some(points), Some(reps), Some(values)) = (
        u32s(&sel, "point"),
        u32s(&sel, "repetition"),
        sel.column_by_name("value")
            .and_then(|c| c.as_any().downcast_ref::<Float64Array>()),
    ) else {
        return Err(file_err(
            &spath,
            "point, repetition or value has the wrong type",
        ));
    };

    // A column is in the samples, a workload constant, or absent.
    let present = |name: &str| {
        sel.column_by_name(name).is_some()
            || tag_col.as_deref() == Some(name)
            || run.workload_value(name).is_some()
    };
    let mut applicable = Vec::new();
    for (c, v) in &panel.filter {
        if present(c) {
            applicable.push((c.clone(), v.clone()));
        } else {
            notes.push(format!(
                "filter {c} does not apply: this run has no such column"
            ));
        }
    }
    if !present(&panel.x.column) {
        notes.push(format!("column {} is not in this run", panel.x.column));
    }

    let mut rows = Vec::new();
    for i in 0..sel.num_rows() {
        let key = (points.value(i), reps.value(i));
        // The tag a summary number belongs to: its own tag column (the
        // summary table splits `engine.metric` keys), or else the one tag
        // value of its point's raw samples.
        let own = tag_col
            .as_deref()
            .and_then(|c| sel.column_by_name(c))
            .and_then(|c| cell_at(c.as_ref(), i))
            .map(|c| c.text());
        let tag_value: Option<String> = own.or_else(|| {
            tags.as_ref().and_then(|t| {
                t.get(&key)
                    .filter(|s| s.len() == 1)
                    .and_then(|s| s.iter().next().cloned())
            })
        });
        let get = |name: &str| -> Option<Cell> {
            if tag_col.as_deref() == Some(name) {
                return tag_value.clone().map(Cell::Text);
            }
            match sel.column_by_name(name) {
                Some(c) => cell_at(c.as_ref(), i),
                None => run.workload_value(name),
            }
        };
        let passes = applicable
            .iter()
            .all(|(c, v)| get(c).is_some_and(|cell| cell.matches(v)));
        if !passes {
            continue;
        }
        let Some(x) = get(&panel.x.column) else {
            continue;
        };
        // A series column the run lacks (or a null) makes no split.
        let series: Vec<String> = panel
            .series
            .columns
            .iter()
            .map(|c| get(c).map(|v| v.text()).unwrap_or_default())
            .collect();
        let ratio = match &panel.ratio {
            Some(r) => match get(&r.column) {
                Some(v) => Some(v.text()),
                None => continue,
            },
            None => None,
        };
        rows.push(Row {
            point: key.0,
            rep: key.1,
            x,
            series,
            ratio,
            value: values.value(i),
        });
    }
    Ok(Selected { rows, notes })
}

/// A point the manifest lists as failed, placed on a panel where its
/// parameters allow.
#[derive(Debug, Clone)]
pub struct Failed {
    pub id: String,
    pub params: String,
    pub error: String,
    pub x: Option<Cell>,
    /// Series key when every series column is a sweep parameter.
    pub series: Option<Vec<String>>,
}

pub fn failed_points(run: &RunData, panel: &Panel) -> Vec<Failed> {
    let mut out = Vec::new();
    for p in run.manifest.points.iter().filter(|p| !p.ok) {
        let param = |col: &str| -> Option<Cell> {
            let axis = col.strip_prefix("param_")?;
            match p.params.get(axis) {
                Some(v) => Cell::from_toml(v),
                None => run.workload_value(col),
            }
        };
        let excluded = panel.filter.iter().any(|(c, v)| match param(c) {
            Some(cell) => !cell.matches(v),
            None => false,
        });
        if excluded {
            continue;
        }
        let series: Option<Vec<String>> = panel
            .series
            .columns
            .iter()
            .map(|c| param(c).map(|v| v.text()))
            .collect();
        out.push(Failed {
            id: p.id.clone(),
            params: p
                .params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
            error: p
                .error
                .as_deref()
                .and_then(|e| e.lines().next())
                .unwrap_or("failed")
                .to_string(),
            x: param(&panel.x.column),
            series,
        });
    }
    out
}
