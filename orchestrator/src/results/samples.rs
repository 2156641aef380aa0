//! Raw samples as Arrow/Parquet, one row per measurement.
//!
//! Columns: `point` u32, `rep` u32, `point_id` utf8, `kind` utf8 ("raw" for
//! a measured sample, "summary" for a per-point number the agent computed),
//! `metric` utf8, `unit` utf8, `thread` u32, `seq` u64, `value` f64, then one
//! `param.<axis>` column per sweep axis (typed from the spec) and one
//! `tag.<key>` utf8 column per sample tag (null where absent).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, RecordBatch, StringBuilder,
    UInt32Builder, UInt64Builder, new_null_array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use testbed_agent::protocol::SampleChunk;
use testbed_agent::workload::Summary;

use crate::plan::Point;

#[derive(Debug, thiserror::Error)]
pub enum SamplesError {
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("building sample table: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
}

fn file_err(path: &Path, e: impl std::fmt::Display) -> SamplesError {
    SamplesError::File {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// The table of one finished point.
pub fn point_batch(
    point: &Point,
    chunks: &[SampleChunk],
    summary: &Summary,
) -> Result<RecordBatch, SamplesError> {
    let tag_keys: BTreeSet<&String> = chunks.iter().flat_map(|c| c.tags.keys()).collect();
    let rows: usize = chunks.iter().map(|c| c.values.len()).sum::<usize>()
        + summary.values().filter(|v| v.is_number()).count();
    let mut b = Builders::new(rows);
    for c in chunks {
        for (i, v) in c.values.iter().enumerate() {
            b.push(
                point,
                "raw",
                &c.metric,
                &c.unit,
                c.thread,
                c.first_seq + i as u64,
                *v,
            );
        }
    }
    for (k, v) in summary {
        if let Some(x) = v.as_f64() {
            b.push(point, "summary", k, "", u32::MAX, 0, x);
        }
    }
    let mut fields = b.fields();
    let mut columns = b.finish();
    for (axis, value) in &point.params {
        let (field, col) = param_column(axis, value, columns[0].len());
        fields.push(field);
        columns.push(col);
    }
    for key in tag_keys {
        let mut sb = StringBuilder::new();
        for c in chunks {
            for _ in &c.values {
                match c.tags.get(key) {
                    Some(v) => sb.append_value(v),
                    None => sb.append_null(),
                }
            }
        }
        for v in summary.values().filter(|v| v.is_number()) {
            let _ = v;
            sb.append_null();
        }
        fields.push(Field::new(format!("tag.{key}"), DataType::Utf8, true));
        columns.push(Arc::new(sb.finish()));
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

struct Builders {
    point: UInt32Builder,
    rep: UInt32Builder,
    point_id: StringBuilder,
    kind: StringBuilder,
    metric: StringBuilder,
    unit: StringBuilder,
    thread: UInt32Builder,
    seq: UInt64Builder,
    value: Float64Builder,
}

impl Builders {
    fn new(rows: usize) -> Self {
        Builders {
            point: UInt32Builder::with_capacity(rows),
            rep: UInt32Builder::with_capacity(rows),
            point_id: StringBuilder::new(),
            kind: StringBuilder::new(),
            metric: StringBuilder::new(),
            unit: StringBuilder::new(),
            thread: UInt32Builder::with_capacity(rows),
            seq: UInt64Builder::with_capacity(rows),
            value: Float64Builder::with_capacity(rows),
        }
    }
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        p: &Point,
        kind: &str,
        metric: &str,
        unit: &str,
        thread: u32,
        seq: u64,
        v: f64,
    ) {
        self.point.append_value(p.point);
        self.rep.append_value(p.rep);
        self.point_id.append_value(p.id());
        self.kind.append_value(kind);
        self.metric.append_value(metric);
        self.unit.append_value(unit);
        self.thread.append_value(thread);
        self.seq.append_value(seq);
        self.value.append_value(v);
    }
    fn fields(&self) -> Vec<Field> {
        vec![
            Field::new("point", DataType::UInt32, false),
            Field::new("rep", DataType::UInt32, false),
            Field::new("point_id", DataType::Utf8, false),
            Field::new("kind", DataType::Utf8, false),
            Field::new("metric", DataType::Utf8, false),
            Field::new("unit", DataType::Utf8, false),
            Field::new("thread", DataType::UInt32, false),
            Field::new("seq", DataType::UInt64, false),
            Field::new("value", DataType::Float64, false),
        ]
    }
    fn finish(mut self) -> Vec<ArrayRef> {
        vec![
            Arc::new(self.point.finish()),
            Arc::new(self.rep.finish()),
            Arc::new(self.point_id.finish()),
            Arc::new(self.kind.finish()),
            Arc::new(self.metric.finish()),
            Arc::new(self.unit.finish()),
            Arc::new(self.thread.finish()),
            Arc::new(self.seq.finish()),
            Arc::new(self.value.finish()),
        ]
    }
}

/// A sweep parameter as a constant column, typed from its TOML value.
fn param_column(axis: &str, v: &toml::Value, rows: usize) -> (Field, ArrayRef) {
    let name = format!("param.{axis}");
    match v {
        toml::Value::Integer(i) => {
            let mut b = Int64Builder::with_capacity(rows);
            b.append_slice(&vec![*i; rows]);
            (
                Field::new(name, DataType::Int64, true),
                Arc::new(b.finish()),
            )
        }
        toml::Value::Float(f) => {
            let mut b = Float64Builder::with_capacity(rows);
            b.append_slice(&vec![*f; rows]);
            (
                Field::new(name, DataType::Float64, true),
                Arc::new(b.finish()),
            )
        }
        toml::Value::Boolean(x) => {
            let mut b = BooleanBuilder::with_capacity(rows);
            for _ in 0..rows {
                b.append_value(*x);
            }
            (
                Field::new(name, DataType::Boolean, true),
                Arc::new(b.finish()),
            )
        }
        other => {
            let text = match other {
                toml::Value::String(s) => s.clone(),
                o => o.to_string(),
            };
            let mut b = StringBuilder::new();
            for _ in 0..rows {
                b.append_value(&text);
            }
            (Field::new(name, DataType::Utf8, true), Arc::new(b.finish()))
        }
    }
}

/// Writes batches to `path` atomically (temp file + rename).
pub fn write_parquet(
    path: &Path,
    schema: SchemaRef,
    batches: &[RecordBatch],
) -> Result<(), SamplesError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| file_err(dir, e))?;
    let tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| file_err(dir, e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_created_by("testbed".into())
        .build();
    let file = tmp.reopen().map_err(|e| file_err(path, e))?;
    let mut w = ArrowWriter::try_new(file, schema, Some(props)).map_err(|e| file_err(path, e))?;
    for b in batches {
        w.write(b).map_err(|e| file_err(path, e))?;
    }
    let file = w.into_inner().map_err(|e| file_err(path, e))?;
    file.sync_all().map_err(|e| file_err(path, e))?;
    tmp.persist(path).map_err(|e| file_err(path, e.error))?;
    Ok(())
}

/// Reads every batch of a parquet file, naming the file on any damage.
pub fn read_parquet(path: &Path) -> Result<(SchemaRef, Vec<RecordBatch>), SamplesError> {
    let file = File::open(path).map_err(|e| file_err(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| file_err(path, format!("not a readable parquet file ({e})")))?;
    let schema = builder.schema().clone();
    let reader = builder.build().map_err(|e| file_err(path, e))?;
    let mut batches = Vec::new();
    for b in reader {
        batches.push(b.map_err(|e| file_err(path, format!("corrupt data ({e})")))?);
    }
    Ok((schema, batches))
}

/// Merges per-point files into one table with the union of their columns.
pub fn merge(files: &[PathBuf], out: &Path) -> Result<usize, SamplesError> {
    let mut all = Vec::new();
    let mut fields: BTreeMap<String, Field> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for f in files {
        let (schema, batches) = read_parquet(f)?;
        for field in schema.fields() {
            if !fields.contains_key(field.name()) {
                order.push(field.name().clone());
                fields.insert(
                    field.name().clone(),
                    field.as_ref().clone().with_nullable(true),
                );
            }
        }
        all.extend(batches);
    }
    // Fixed columns first, then params, then tags, each sorted: stable output.
    order.sort_by_key(|n| {
        let rank = if n.starts_with("param.") {
            1
        } else if n.starts_with("tag.") {
            2
        } else {
            0
        };
        (rank, if rank == 0 { String::new() } else { n.clone() })
    });
    let schema = Arc::new(Schema::new(
        order
            .iter()
            .filter_map(|n| fields.get(n).cloned())
            .collect::<Vec<_>>(),
    ));
    let mut unified = Vec::new();
    let mut rows = 0;
    for b in &all {
        let cols: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| match b.column_by_name(f.name()) {
                Some(c) if c.data_type() == f.data_type() => c.clone(),
                Some(c) => arrow::compute::cast(c, f.data_type())
                    .unwrap_or_else(|_| new_null_array(f.data_type(), b.num_rows())),
                None => new_null_array(f.data_type(), b.num_rows()),
            })
            .collect();
        rows += b.num_rows();
        unified.push(RecordBatch::try_new(schema.clone(), cols)?);
    }
    write_parquet(out, schema, &unified)?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(id: u32, threads: i64) -> Point {
        Point {
            point: id,
            rep: 0,
            params: BTreeMap::from([("threads".to_string(), toml::Value::Integer(threads))]),
            workload: testbed_agent::workload::Workload::Fault(
                testbed_agent::workload::fault::FaultParams {
                    mode: testbed_agent::workload::fault::FaultMode::Error,
                    after_s: 0.0,
                },
            ),
            seed: 1,
        }
    }

    fn chunk(tags: &[(&str, &str)], values: Vec<f64>) -> SampleChunk {
        SampleChunk {
            job_id: 1,
            metric: "read_latency".into(),
            unit: "ns".into(),
            thread: 0,
            first_seq: 0,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            values,
        }
    }

    #[test]
    fn points_write_and_merge_with_union_of_columns() {
        let t = tempfile::tempdir().unwrap();
        let summary = Summary::from([("iops".to_string(), serde_json::json!(1234.5))]);
        let b1 = point_batch(&point(0, 1), &[chunk(&[], vec![1.0, 2.0])], &summary).unwrap();
        let b2 = point_batch(
            &point(1, 2),
            &[chunk(&[("engine", "read")], vec![3.0])],
            &Summary::new(),
        )
        .unwrap();
        assert_eq!(b1.num_rows(), 3);
        let f1 = t.path().join("a.parquet");
        let f2 = t.path().join("b.parquet");
        write_parquet(&f1, b1.schema(), &[b1]).unwrap();
        write_parquet(&f2, b2.schema(), &[b2]).unwrap();
        let out = t.path().join("samples.parquet");
        assert_eq!(merge(&[f1, f2], &out).unwrap(), 4);
        let (schema, batches) = read_parquet(&out).unwrap();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "point",
                "rep",
                "point_id",
                "kind",
                "metric",
                "unit",
                "thread",
                "seq",
                "value",
                "param.threads",
                "tag.engine"
            ]
        );
        let tags = batches[0].column_by_name("tag.engine").unwrap();
        assert_eq!(tags.null_count(), 3);
    }

    #[test]
    fn a_corrupt_file_is_named() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("p0001-r00.parquet");
        std::fs::write(&f, b"PAR1 this is not parquet").unwrap();
        let e = read_parquet(&f).unwrap_err().to_string();
        assert!(e.contains("p0001-r00.parquet"), "{e}");
    }
}
