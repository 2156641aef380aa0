//! samples.parquet: raw samples, one row per measured value (schema in
//! results/README.md): `run_id`, `point`, `repetition`, `boot`, `metric`,
//! `value`, `unit`, `thread`, `seq`, then `param_<field>` for every field of
//! the point's resolved workload and sweep axis, then `tag_<key>` per tag.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Builder, RecordBatch, StringBuilder, UInt32Builder, UInt64Builder,
    new_null_array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use testbed_agent::protocol::SampleChunk;

use super::columns;
use super::spill::SpillFile;
use crate::planning::plan::Point;

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

/// The raw samples of one finished point, one row per value.
pub fn point_batch(
    run_id: &str,
    point: &Point,
    boot: u32,
    chunks: &[SampleChunk],
) -> Result<RecordBatch, SamplesError> {
    let mut tag_types: BTreeMap<String, bool> = BTreeMap::new();
    for c in chunks {
        for (k, v) in &c.tags {
            *tag_types.entry(k.clone()).or_insert(true) &= v.parse::<i64>().is_ok();
        }
    }
    let params = columns::point_params(&point.workload.resolved(), &point.params);
    rows_batch(run_id, point, boot, chunks, &params, &tag_types)
}

/// Rows of a point per parquet row group: bounds the memory of writing one.
const BATCH_ROWS: usize = 65_536;

/// Writes a finished point's spilled samples to `out`, a batch at a time
/// (atomically: nothing is left at `out` on failure). Returns the rows.
pub fn write_point(
    run_id: &str,
    point: &Point,
    boot: u32,
    spill: &SpillFile,
    out: &Path,
) -> Result<u64, SamplesError> {
    let params = columns::point_params(&point.workload.resolved(), &point.params);
    let tag_types = &spill.summary.tag_keys;
    let empty = rows_batch(run_id, point, boot, &[], &params, tag_types)?;
    let mut file = ParquetOut::create(out, empty.schema())?;
    let mut pending: Vec<SampleChunk> = Vec::new();
    let mut pending_rows = 0;
    let mut rows = 0u64;
    let chunks = spill.chunks().map_err(|e| file_err(out, e))?;
    for c in chunks {
        let c = c.map_err(|e| file_err(out, e))?;
        pending_rows += c.values.len();
        pending.push(c);
        if pending_rows >= BATCH_ROWS {
            file.write(&rows_batch(
                run_id, point, boot, &pending, &params, tag_types,
            )?)?;
            rows += pending_rows as u64;
            pending.clear();
            pending_rows = 0;
        }
    }
    if pending_rows > 0 || rows == 0 {
        file.write(&rows_batch(
            run_id, point, boot, &pending, &params, tag_types,
        )?)?;
        rows += pending_rows as u64;
    }
    file.finish()?;
    Ok(rows)
}

/// One batch of a point's rows: the fixed columns, its parameters as
/// constant columns, and a column per tag key (typed as `tag_types` says).
fn rows_batch(
    run_id: &str,
    point: &Point,
    boot: u32,
    chunks: &[SampleChunk],
    params: &BTreeMap<String, columns::Scalar>,
    tag_types: &BTreeMap<String, bool>,
) -> Result<RecordBatch, SamplesError> {
    let rows: usize = chunks.iter().map(|c| c.values.len()).sum();
    let mut b = Builders::new(rows);
    for c in chunks {
        for (i, v) in c.values.iter().enumerate() {
            b.push(run_id, point, boot, c, c.first_seq + i as u64, *v);
        }
    }
    let mut fields = fixed_fields();
    let mut columns = b.finish();
    for (name, value) in params {
        let (f, c) = columns::constant_column(&columns::column_name("param", name), value, rows);
        fields.push(f);
        columns.push(c);
    }
    for (key, int) in tag_types {
        let values: Vec<Option<&str>> = chunks
            .iter()
            .flat_map(|c| std::iter::repeat_n(c.tags.get(key).map(String::as_str), c.values.len()))
            .collect();
        let (f, c) = columns::tag_column_as(&columns::column_name("tag", key), &values, *int);
        fields.push(f);
        columns.push(c);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

struct Builders {
    run_id: StringBuilder,
    point: UInt32Builder,
    repetition: UInt32Builder,
    boot: UInt32Builder,
    metric: StringBuilder,
    value: Float64Builder,
    unit: StringBuilder,
    thread: UInt32Builder,
    seq: UInt64Builder,
}

impl Builders {
    fn new(rows: usize) -> Self {
        Builders {
            run_id: StringBuilder::new(),
            point: UInt32Builder::with_capacity(rows),
            repetition: UInt32Builder::with_capacity(rows),
            boot: UInt32Builder::with_capacity(rows),
            metric: StringBuilder::new(),
            value: Float64Builder::with_capacity(rows),
            unit: StringBuilder::new(),
            thread: UInt32Builder::with_capacity(rows),
            seq: UInt64Builder::with_capacity(rows),
        }
    }
    fn push(&mut self, run_id: &str, p: &Point, boot: u32, c: &SampleChunk, seq: u64, v: f64) {
        self.run_id.append_value(run_id);
        self.point.append_value(p.point);
        self.repetition.append_value(p.rep);
        self.boot.append_value(boot);
        self.metric.append_value(&c.metric);
        self.value.append_value(v);
        self.unit.append_value(&c.unit);
        self.thread.append_value(c.thread);
        self.seq.append_value(seq);
    }
}

/// The columns every samples.parquet starts with, in order.
pub fn fixed_fields() -> Vec<Field> {
    vec![
        Field::new("run_id", DataType::Utf8, false),
        Field::new("point", DataType::UInt32, false),
        Field::new("repetition", DataType::UInt32, false),
        Field::new("boot", DataType::UInt32, false),
        Field::new("metric", DataType::Utf8, false),
        Field::new("value", DataType::Float64, false),
        Field::new("unit", DataType::Utf8, false),
        Field::new("thread", DataType::UInt32, false),
        Field::new("seq", DataType::UInt64, false),
    ]
}

impl Builders {
    fn finish(mut self) -> Vec<ArrayRef> {
        vec![
            Arc::new(self.run_id.finish()),
            Arc::new(self.point.finish()),
            Arc::new(self.repetition.finish()),
            Arc::new(self.boot.finish()),
            Arc::new(self.metric.finish()),
            Arc::new(self.value.finish()),
            Arc::new(self.unit.finish()),
            Arc::new(self.thread.finish()),
            Arc::new(self.seq.finish()),
        ]
    }
}

/// Writes batches to `path` atomically (temp file + rename).
pub fn write_parquet(
    path: &Path,
    schema: SchemaRef,
    batches: &[RecordBatch],
) -> Result<(), SamplesError> {
    let mut out = ParquetOut::create(path, schema)?;
    for b in batches {
        out.write(b)?;
    }
    out.finish()
}

/// A parquet file being written batch by batch into a temporary file next
/// to its final path; `finish` syncs and renames it into place, and a
/// writer dropped unfinished leaves nothing behind.
pub struct ParquetOut {
    path: PathBuf,
    tmp: tempfile::TempPath,
    writer: ArrowWriter<File>,
}

impl ParquetOut {
    pub fn create(path: &Path, schema: SchemaRef) -> Result<ParquetOut, SamplesError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| file_err(dir, e))?;
        let (file, tmp) = tempfile::NamedTempFile::new_in(dir)
            .map_err(|e| file_err(dir, e))?
            .into_parts();
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_created_by("testbed".into())
            .build();
        let writer =
            ArrowWriter::try_new(file, schema, Some(props)).map_err(|e| file_err(path, e))?;
        Ok(ParquetOut {
            path: path.to_path_buf(),
            tmp,
            writer,
        })
    }

    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), SamplesError> {
        self.writer
            .write(batch)
            .map_err(|e| file_err(&self.path, e))?;
        // Flush each batch out as its own row group: memory stays bounded.
        self.writer.flush().map_err(|e| file_err(&self.path, e))
    }

    pub fn finish(self) -> Result<(), SamplesError> {
        let file = self
            .writer
            .into_inner()
            .map_err(|e| file_err(&self.path, e))?;
        file.sync_all().map_err(|e| file_err(&self.path, e))?;
        self.tmp
            .persist(&self.path)
            .map_err(|e| file_err(&self.path, e.error))?;
        Ok(())
    }
}

/// The tag keys of a point's sample file (from its footer), empty if it
/// cannot be read.
pub fn tag_keys(path: &Path) -> Vec<String> {
    let Ok(file) = File::open(path) else {
        return Vec::new();
    };
    let Ok(builder) = ParquetRecordBatchReaderBuilder::try_new(file) else {
        return Vec::new();
    };
    builder
        .schema()
        .fields()
        .iter()
        .filter_map(|f| f.name().strip_prefix("tag_").map(str::to_string))
        .collect()
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
    if batches.is_empty() {
        // Keep the columns of a table without rows.
        batches.push(RecordBatch::new_empty(schema.clone()));
    }
    Ok((schema, batches))
}

/// Merges per-point files into one table with the union of their columns.
pub fn merge(files: &[PathBuf], out: &Path) -> Result<usize, SamplesError> {
    // Streamed, in bounded memory.
    super::merge::merge(files, out)
}

/// Batches with the union of their columns: fixed columns first (in the
/// order first seen), then `param_*`, then `tag_*`, each sorted; a column
/// whose type differs between batches becomes text; absent means null.
pub fn unify(batches: &[RecordBatch]) -> Result<Vec<RecordBatch>, SamplesError> {
    let mut fields: BTreeMap<String, Field> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for b in batches {
        for field in b.schema().fields() {
            match fields.get_mut(field.name()) {
                None => {
                    order.push(field.name().clone());
                    fields.insert(
                        field.name().clone(),
                        field.as_ref().clone().with_nullable(true),
                    );
                }
                Some(f) if f.data_type() != field.data_type() => {
                    *f = Field::new(field.name(), DataType::Utf8, true);
                }
                Some(_) => {}
            }
        }
    }
    let rank = |n: &str| {
        if n.starts_with("param_") {
            1
        } else if n.starts_with("tag_") {
            2
        } else {
            0
        }
    };
    order.sort_by_key(|n| {
        (
            rank(n),
            if rank(n) == 0 {
                String::new()
            } else {
                n.clone()
            },
        )
    });
    let schema = Arc::new(Schema::new(
        order
            .iter()
            .filter_map(|n| fields.get(n).cloned())
            .collect::<Vec<_>>(),
    ));
    let mut unified = Vec::new();
    for b in batches {
        let mut cols: Vec<ArrayRef> = Vec::new();
        for f in schema.fields() {
            cols.push(match b.column_by_name(f.name()) {
                Some(c) if c.data_type() == f.data_type() => c.clone(),
                Some(c) => arrow::compute::cast(c, f.data_type())?,
                None => new_null_array(f.data_type(), b.num_rows()),
            });
        }
        unified.push(RecordBatch::try_new(schema.clone(), cols)?);
    }
    Ok(unified)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Array;

    fn point(id: u32, threads: i64) -> Point {
        Point {
            point: id,
            rep: 0,
            params: BTreeMap::from([("threads".to_string(), toml::Value::Integer(threads))]),
            workload: testbed_agent::workload::Workload::Fault(
                testbed_agent::workload::fault::FaultParams {
                    mode: testbed_agent::workload::fault::FaultMode::Error,
                    after_s: 0.0,
                    size: 1000,
                },
            ),
            seed: 1,
            vm_vcpus: None,
            boot_group: 0,
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
        let b1 = point_batch("run", &point(0, 1), 0, &[chunk(&[], vec![1.0, 2.0])]).unwrap();
        let b2 = point_batch(
            "run",
            &point(1, 2),
            1,
            &[chunk(&[("engine", "read"), ("hop", "3")], vec![3.0])],
        )
        .unwrap();
        assert_eq!(b1.num_rows(), 2);
        let f1 = t.path().join("a.parquet");
        let f2 = t.path().join("b.parquet");
        write_parquet(&f1, b1.schema(), &[b1]).unwrap();
        write_parquet(&f2, b2.schema(), &[b2]).unwrap();
        let out = t.path().join("samples.parquet");
        assert_eq!(merge(&[f1, f2], &out).unwrap(), 3);
        let (schema, batches) = read_parquet(&out).unwrap();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "run_id",
                "point",
                "repetition",
                "boot",
                "metric",
                "value",
                "unit",
                "thread",
                "seq",
                "param_after_s",
                "param_kind",
                "param_mode",
                "param_size",
                "param_threads",
                "tag_engine",
                "tag_hop"
            ]
        );
        let tags = batches[0].column_by_name("tag_engine").unwrap();
        assert_eq!(tags.null_count(), 2);
        assert_eq!(
            *schema.field_with_name("tag_hop").unwrap().data_type(),
            DataType::Int64
        );
        assert_eq!(
            *schema.field_with_name("param_threads").unwrap().data_type(),
            DataType::Int64
        );
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
