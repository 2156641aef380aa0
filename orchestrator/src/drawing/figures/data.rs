//! A run directory as figures see it: the manifest and samples.parquet,
//! and the rows one panel needs, streamed from the Parquet reader with the
//! panel's columns and metric pushed into it and folded into one bounded
//! accumulator per repetition (unit.rs). A 100 M-sample run is drawn in
//! the memory of a few batches and the panel's budget of exact values.
//! Nothing comes from in-memory state of the run that produced them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use std::collections::HashMap;
use std::fs::File;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray, UInt32Array,
    UInt64Array,
};
use arrow::compute::kernels::cmp::eq;
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowPredicateFn, ParquetRecordBatchReaderBuilder, RowFilter};

use super::def::{MetricKind, Panel};
use super::error::{FigureError, file_err};
use super::unit::{Budget, Limits, UnitValues};
use crate::recording::results::manifest::{self, Manifest};
use crate::recording::results::samples;

pub struct RunData {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// The columns of samples.parquet (`None` when no point finished). Its
    /// rows are never all held: each panel streams the columns and the
    /// metric it needs (see [`select`]).
    pub raw: Option<SchemaRef>,
    /// summary.parquet: a few numbers per point, held whole.
    pub summary: Option<RecordBatch>,
    /// How many raw values a panel keeps exactly (unit.rs).
    pub limits: Limits,
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
            raw: None,
            summary: None,
            limits: Limits::default(),
        });
    }
    // The footer alone: a truncated or foreign file fails here.
    let raw = open_table(&spath)?.schema().clone();
    check_columns(&spath, &raw)?;
    let summary_path = dir.join("summary.parquet");
    let summary = if summary_path.exists() {
        Some(read_summary(&summary_path)?)
    } else {
        None
    };
    Ok(RunData {
        dir: dir.to_path_buf(),
        manifest,
        raw: Some(raw),
        summary,
        limits: Limits::default(),
    })
}

fn open_table(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>, FigureError> {
    let file = File::open(path).map_err(|e| file_err(path, e))?;
    ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| file_err(path, format!("not a readable parquet file ({e})")))
}

/// The tidy layout's fixed columns, with their types.
fn check_columns(path: &Path, schema: &Schema) -> Result<(), FigureError> {
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
    Ok(())
}

/// The summary table, whole; rows without a number (text only) left out.
fn read_summary(path: &Path) -> Result<RecordBatch, FigureError> {
    let (schema, batches) = samples::read_parquet(path)?;
    check_columns(path, &schema)?;
    let batch = concat_batches(&schema, &batches).map_err(|e| file_err(path, e))?;
    match batch.column_by_name("value") {
        Some(v) if v.null_count() > 0 => {
            let keep = arrow::compute::is_not_null(v).map_err(|e| file_err(path, e))?;
            filter_record_batch(&batch, &keep).map_err(|e| file_err(path, e))
        }
        _ => Ok(batch),
    }
}

/// Streams the rows of samples.parquet whose metric is `metric`, with only
/// the columns in `columns` (those the file has): the filter and the
/// projection are pushed into the Parquet reader, so memory holds one
/// batch of them at a time.
fn stream_raw(
    path: &Path,
    metric: Option<&str>,
    columns: &[String],
    mut each: impl FnMut(&RecordBatch) -> Result<(), FigureError>,
) -> Result<(), FigureError> {
    let builder = open_table(path)?;
    let parquet_schema = builder.parquet_schema();
    let names: Vec<&str> = columns
        .iter()
        .map(String::as_str)
        .filter(|n| builder.schema().field_with_name(n).is_ok())
        .collect();
    let projection = ProjectionMask::columns(parquet_schema, names.iter().copied());
    let mut builder = builder.with_projection(projection).with_batch_size(65_536);
    if let Some(metric) = metric {
        let wanted = StringArray::new_scalar(metric);
        let on_metric = ProjectionMask::columns(builder.parquet_schema(), ["metric"]);
        let predicate =
            ArrowPredicateFn::new(on_metric, move |b: RecordBatch| eq(b.column(0), &wanted));
        builder = builder.with_row_filter(RowFilter::new(vec![Box::new(predicate)]));
    }
    let reader = builder.build().map_err(|e| file_err(path, e))?;
    for b in reader {
        let b = b.map_err(|e| file_err(path, format!("corrupt data ({e})")))?;
        each(&b)?;
    }
    Ok(())
}

impl RunData {
    /// Whether samples.parquet or summary.parquet has the column.
    pub fn has_column(&self, name: &str) -> bool {
        self.raw
            .as_ref()
            .is_some_and(|s| s.field_with_name(name).is_ok())
            || self
                .summary
                .as_ref()
                .is_some_and(|b| b.schema().field_with_name(name).is_ok())
    }

    /// A workload field of the spec as run, standing in for `param_<axis>`
    /// when the axis was not swept.
    pub fn workload_value(&self, column: &str) -> Option<Cell> {
        let axis = column.strip_prefix("param_")?;
        Cell::from_json(self.manifest.spec.get("workload")?.get(axis)?)
    }
}

/// The samples (or summary numbers) of one repetition at one place of a
/// panel: its x, its series and ratio values.
#[derive(Debug)]
pub struct Group {
    pub point: u32,
    pub rep: u32,
    pub x: Cell,
    pub series: Vec<String>,
    /// Value of the ratio column (numerator / denominator name).
    pub ratio: Option<String>,
    pub values: UnitValues,
}

pub struct Selected {
    pub groups: Vec<Group>,
    pub notes: Vec<String>,
    /// What is left of the panel's budget of exact values.
    pub budget: Budget,
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
/// key of that point belongs to. Streams the three columns it needs.
fn point_tags(run: &RunData, key: &str) -> Result<PointTags, FigureError> {
    let mut out = PointTags::new();
    let col = format!("tag_{key}");
    let has = run
        .raw
        .as_ref()
        .is_some_and(|s| s.field_with_name(&col).is_ok());
    if !has {
        return Ok(out);
    }
    let columns = ["point".to_string(), "repetition".to_string(), col.clone()];
    stream_raw(&run.dir.join("samples.parquet"), None, &columns, |b| {
        let (Some(tag), Some(p), Some(r)) =
            (strings(b, &col), u32s(b, "point"), u32s(b, "repetition"))
        else {
            return Ok(());
        };
        for i in 0..b.num_rows() {
            if !tag.is_null(i) {
                let set = out.entry((p.value(i), r.value(i))).or_default();
                if !set.contains(tag.value(i)) {
                    set.insert(tag.value(i).to_string());
                }
            }
        }
        Ok(())
    })?;
    Ok(out)
}

type PointTags = BTreeMap<(u32, u32), BTreeSet<String>>;

/// Where a group is drawn: (point, rep, x as debug text, series, ratio).
type Place = (u32, u32, String, Vec<String>, Option<String>);

/// Folds a panel's rows into its groups. Rows are told apart by the
/// columns they are grouped and filtered on (in arrow's row format), and
/// each distinct combination is resolved once: millions of samples of one
/// repetition cost a comparison each, not a lookup of every column.
struct Folder<'a> {
    run: &'a RunData,
    panel: &'a Panel,
    filters: Vec<(String, toml::Value)>,
    /// The summary tag column and every point's raw tag values.
    tag_col: Option<String>,
    tags: Option<PointTags>,
    /// Columns of the key, in the table.
    key_columns: Vec<String>,
    converter: Option<RowConverter>,
    /// Key → group (None: filtered out).
    index: HashMap<Vec<u8>, Option<usize>>,
    /// (point, rep, x, series, ratio) → group.
    by_place: HashMap<Place, usize>,
    groups: Vec<Group>,
    budget: Budget,
}

impl Folder<'_> {
    fn fold(&mut self, b: &RecordBatch, path: &Path) -> Result<(), FigureError> {
        let arrow_err = |e: arrow::error::ArrowError| file_err(path, e);
        let (Some(points), Some(reps), Some(values)) = (
            u32s(b, "point"),
            u32s(b, "repetition"),
            b.column_by_name("value")
                .and_then(|c| c.as_any().downcast_ref::<Float64Array>()),
        ) else {
            return Err(file_err(
                path,
                "point, repetition or value has the wrong type",
            ));
        };
        let columns: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .filter_map(|n| b.column_by_name(n).cloned())
            .collect();
        if self.converter.is_none() {
            let fields = columns
                .iter()
                .map(|c| SortField::new(c.data_type().clone()))
                .collect();
            self.converter = Some(RowConverter::new(fields).map_err(arrow_err)?);
        }
        let Some(converter) = &self.converter else {
            return Ok(());
        };
        let rows = converter.convert_columns(&columns).map_err(arrow_err)?;
        let mut last: Option<(usize, Option<usize>)> = None;
        for i in 0..b.num_rows() {
            if values.is_null(i) {
                continue;
            }
            let row = rows.row(i);
            let group = match last {
                Some((j, g)) if rows.row(j) == row => g,
                _ => {
                    let g = match self.index.get(row.as_ref()) {
                        Some(g) => *g,
                        None => {
                            let g = self.resolve(b, i, points.value(i), reps.value(i));
                            self.index.insert(row.as_ref().to_vec(), g);
                            g
                        }
                    };
                    last = Some((i, g));
                    g
                }
            };
            if let Some(g) = group {
                self.groups[g]
                    .values
                    .push(values.value(i), &mut self.budget);
            }
        }
        Ok(())
    }

    /// The group of row `i` (its filters, x, series and ratio), or None
    /// when a filter excludes it or it has no x (or no ratio value).
    fn resolve(&mut self, b: &RecordBatch, i: usize, point: u32, rep: u32) -> Option<usize> {
        let key = (point, rep);
        // The tag a summary number belongs to: its own tag column (the
        // summary table splits `engine.metric` keys), or else the one tag
        // value of its point's raw samples.
        let own = self
            .tag_col
            .as_deref()
            .and_then(|c| b.column_by_name(c))
            .and_then(|c| cell_at(c.as_ref(), i))
            .map(|c| c.text());
        let tag_value: Option<String> = own.or_else(|| {
            self.tags.as_ref().and_then(|t| {
                t.get(&key)
                    .filter(|s| s.len() == 1)
                    .and_then(|s| s.iter().next().cloned())
            })
        });
        let get = |name: &str| -> Option<Cell> {
            if self.tag_col.as_deref() == Some(name) {
                return tag_value.clone().map(Cell::Text);
            }
            match b.column_by_name(name) {
                Some(c) => cell_at(c.as_ref(), i),
                // The other table's column: null here, as in a join.
                None if self.run.has_column(name) => None,
                None => self.run.workload_value(name),
            }
        };
        let passes = self
            .filters
            .iter()
            .all(|(c, v)| get(c).is_some_and(|cell| cell.matches(v)));
        if !passes {
            return None;
        }
        let x = get(&self.panel.x.column)?;
        // A series column the run lacks (or a null) makes no split.
        let series: Vec<String> = self
            .panel
            .series
            .columns
            .iter()
            .map(|c| get(c).map(|v| v.text()).unwrap_or_default())
            .collect();
        let ratio = match &self.panel.ratio {
            Some(r) => Some(get(&r.column)?.text()),
            None => None,
        };
        let place = (point, rep, format!("{x:?}"), series.clone(), ratio.clone());
        if let Some(g) = self.by_place.get(&place) {
            return Some(*g);
        }
        self.groups.push(Group {
            point,
            rep,
            x,
            series,
            ratio,
            values: UnitValues::default(),
        });
        self.by_place.insert(place, self.groups.len() - 1);
        Some(self.groups.len() - 1)
    }
}

/// The groups of `panel`: its metric, its filters, with x, series and
/// ratio columns resolved. Raw samples are streamed from samples.parquet
/// (only the panel's metric and columns); summary numbers come from the
/// summary table.
pub fn select(run: &RunData, panel: &Panel) -> Result<Selected, FigureError> {
    let mut notes = Vec::new();
    let empty = |notes| Selected {
        groups: Vec::new(),
        notes,
        budget: Budget::new(run.limits),
    };
    let spath = run.dir.join("samples.parquet");
    let y = &panel.y;
    let schema = match y.kind {
        MetricKind::Raw => run.raw.clone(),
        MetricKind::Summary => run.summary.as_ref().map(|b| b.schema()),
    };
    let Some(schema) = schema else {
        return Ok(empty(notes));
    };
    let summary_tag = panel
        .summary_tag
        .as_deref()
        .filter(|_| y.kind == MetricKind::Summary);
    let tag_col = summary_tag.map(|k| format!("tag_{k}"));

    // A column is in the table, a workload constant, or absent.
    let present = |name: &str| {
        run.has_column(name)
            || tag_col.as_deref() == Some(name)
            || run.workload_value(name).is_some()
    };
    let mut filters = Vec::new();
    for (c, v) in &panel.filter {
        if present(c) {
            filters.push((c.clone(), v.clone()));
        } else {
            notes.push(format!(
                "filter {c} does not apply: this run has no such column"
            ));
        }
    }
    if !present(&panel.x.column) {
        notes.push(format!("column {} is not in this run", panel.x.column));
    }

    // What a row's group depends on, among the table's columns.
    let mut key_columns: Vec<String> = vec!["point".into(), "repetition".into()];
    let named = std::iter::once(&panel.x.column)
        .chain(&panel.series.columns)
        .chain(panel.ratio.as_ref().map(|r| &r.column))
        .chain(filters.iter().map(|(c, _)| c))
        .chain(tag_col.as_ref());
    for c in named {
        if schema.field_with_name(c).is_ok() && !key_columns.contains(c) {
            key_columns.push(c.clone());
        }
    }
    let tags = match summary_tag {
        Some(k) => Some(point_tags(run, k)?),
        None => None,
    };
    let mut folder = Folder {
        run,
        panel,
        filters,
        tag_col,
        tags,
        key_columns,
        converter: None,
        index: HashMap::new(),
        by_place: HashMap::new(),
        groups: Vec::new(),
        budget: Budget::new(run.limits),
    };
    match (y.kind, &run.summary) {
        (MetricKind::Raw, _) => {
            let mut columns = folder.key_columns.clone();
            columns.push("value".into());
            stream_raw(&spath, Some(&y.metric), &columns, |b| {
                folder.fold(b, &spath)
            })?;
        }
        (MetricKind::Summary, Some(summary)) => {
            let path = run.dir.join("summary.parquet");
            let arrow_err = |e: arrow::error::ArrowError| file_err(&path, e);
            let metric = summary
                .column_by_name("metric")
                .ok_or_else(|| file_err(&path, "no column metric"))?;
            let mask = eq(metric, &StringArray::new_scalar(&y.metric)).map_err(arrow_err)?;
            let rows = filter_record_batch(summary, &mask).map_err(arrow_err)?;
            folder.fold(&rows, &path)?;
        }
        (MetricKind::Summary, None) => {}
    }
    Ok(Selected {
        groups: folder.groups,
        notes,
        budget: folder.budget,
    })
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
