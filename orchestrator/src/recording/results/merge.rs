//! Merging per-point sample files into samples.parquet in bounded memory:
//! a first pass reads only each file's schema (its footer) to build the
//! union of their columns, a second pass copies each file a batch at a time
//! into one writer, cast and filled to that union. Peak memory is a few
//! batches plus the writer's open row group, whatever the run's size.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, new_null_array};
use arrow::datatypes::{Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::samples::{self, SamplesError};

/// Rows read (and written) at a time.
pub const BATCH_ROWS: usize = 65_536;
/// Rows per row group of the merged file: the writer holds one open group
/// (encoded and compressed) in memory...
const ROW_GROUP_ROWS: usize = 1024 * 1024;
/// ...and no more than this many bytes of it, however wide the rows.
const ROW_GROUP_BYTES: usize = 64 << 20;

fn file_err(path: &Path, e: impl std::fmt::Display) -> SamplesError {
    SamplesError::File {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

fn open(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>, SamplesError> {
    let file = File::open(path).map_err(|e| file_err(path, e))?;
    ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| file_err(path, format!("not a readable parquet file ({e})")))
}

/// The schema of a parquet file, from its footer alone.
pub fn read_schema(path: &Path) -> Result<SchemaRef, SamplesError> {
    Ok(open(path)?.schema().clone())
}

/// The union of the files' columns, by the rules of `samples::unify`
/// (which it applies to one empty batch per file).
pub fn unified_schema(files: &[PathBuf]) -> Result<SchemaRef, SamplesError> {
    let mut empties = Vec::with_capacity(files.len());
    for f in files {
        empties.push(RecordBatch::new_empty(read_schema(f)?));
    }
    Ok(samples::unify(&empties)?
        .first()
        .map_or_else(|| Arc::new(Schema::empty()), RecordBatch::schema))
}

/// `batch` with the columns of `schema`: cast where the type differs,
/// null where absent.
pub fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, SamplesError> {
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        cols.push(match batch.column_by_name(f.name()) {
            Some(c) if c.data_type() == f.data_type() => c.clone(),
            Some(c) => arrow::compute::cast(c, f.data_type())?,
            None => new_null_array(f.data_type(), batch.num_rows()),
        });
    }
    Ok(RecordBatch::try_new(schema.clone(), cols)?)
}

/// Merges per-point files into `out` (written atomically) with the union of
/// their columns; returns the rows written.
pub fn merge(files: &[PathBuf], out: &Path) -> Result<usize, SamplesError> {
    let schema = unified_schema(files)?;
    let dir = out.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| file_err(dir, e))?;
    let tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| file_err(dir, e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_created_by("testbed".into())
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
        .build();
    let file = tmp.reopen().map_err(|e| file_err(out, e))?;
    let mut w =
        ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(|e| file_err(out, e))?;
    let mut rows = 0;
    for f in files {
        let reader = open(f)?
            .with_batch_size(BATCH_ROWS)
            .build()
            .map_err(|e| file_err(f, e))?;
        for b in reader {
            let b = b.map_err(|e| file_err(f, format!("corrupt data ({e})")))?;
            rows += b.num_rows();
            w.write(&conform(&b, &schema)?)
                .map_err(|e| file_err(out, e))?;
        }
    }
    let file = w.into_inner().map_err(|e| file_err(out, e))?;
    file.sync_all().map_err(|e| file_err(out, e))?;
    tmp.persist(out).map_err(|e| file_err(out, e.error))?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::process::{Command, Stdio};
    use std::time::Instant;

    use arrow::array::{Array, Float64Array, StringArray, UInt32Array, UInt64Array};
    use arrow::datatypes::{DataType, Field};

    use super::*;

    /// A per-point file shaped as the run writes them: the fixed columns,
    /// two parameters and one tag, `rows` rows.
    fn point_batch(point: u32, first: u64, rows: usize, tag: Option<&str>) -> RecordBatch {
        let mut fields = samples::fixed_fields();
        fields.push(Field::new("param_threads", DataType::Int64, false));
        fields.push(Field::new("param_kind", DataType::Utf8, false));
        let n = rows;
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["run"; n])),
            Arc::new(UInt32Array::from(vec![point; n])),
            Arc::new(UInt32Array::from(vec![0; n])),
            Arc::new(UInt32Array::from(vec![0; n])),
            Arc::new(StringArray::from(vec!["read_latency"; n])),
            Arc::new(Float64Array::from_iter_values(
                (0..n as u64).map(|i| ((first + i) % 10_007) as f64),
            )),
            Arc::new(StringArray::from(vec!["ns"; n])),
            Arc::new(UInt32Array::from_iter_values((0..n as u32).map(|i| i % 4))),
            Arc::new(UInt64Array::from_iter_values(first..first + n as u64)),
            Arc::new(arrow::array::Int64Array::from(vec![
                i64::from(point % 8);
                n
            ])),
            Arc::new(StringArray::from(vec!["randread"; n])),
        ];
        if let Some(t) = tag {
            fields.push(Field::new("tag_engine", DataType::Utf8, true));
            cols.push(Arc::new(StringArray::from(vec![t; n])));
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
    }

    #[test]
    fn streams_the_same_table_as_the_in_memory_merge() {
        let t = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        // More rows than one read batch, a file without the tag, an empty one.
        for (i, (rows, tag)) in [
            (BATCH_ROWS + 10, None),
            (3, Some("read")),
            (0, Some("uring")),
        ]
        .into_iter()
        .enumerate()
        {
            let b = point_batch(i as u32, 0, rows, tag);
            let f = t.path().join(format!("p{i}.parquet"));
            samples::write_parquet(&f, b.schema(), &[b]).unwrap();
            files.push(f);
        }
        let out = t.path().join("samples.parquet");
        assert_eq!(merge(&files, &out).unwrap(), BATCH_ROWS + 13);
        let (schema, batches) = samples::read_parquet(&out).unwrap();
        // What the in-memory way makes of the same files.
        let mut all = Vec::new();
        for f in &files {
            all.extend(samples::read_parquet(f).unwrap().1);
        }
        let want = samples::unify(&all).unwrap();
        assert_eq!(schema, want[0].schema());
        let got = arrow::compute::concat_batches(&schema, &batches).unwrap();
        let want = arrow::compute::concat_batches(&schema, &want).unwrap();
        assert_eq!(got, want);
        assert_eq!(
            got.column_by_name("tag_engine").unwrap().null_count(),
            BATCH_ROWS + 10
        );
    }

    #[test]
    fn no_files_make_an_empty_table() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("samples.parquet");
        assert_eq!(merge(&[], &out).unwrap(), 0);
        assert!(out.is_file());
    }

    #[test]
    fn a_damaged_input_is_named_and_leaves_no_output() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("p0003-r01.parquet");
        std::fs::write(&f, b"PAR1 not parquet").unwrap();
        let out = t.path().join("samples.parquet");
        let e = merge(&[f], &out).unwrap_err().to_string();
        assert!(e.contains("p0003-r01.parquet"), "{e}");
        assert!(!out.exists());
    }

    const CHILD_ENV: &str = "TESTBED_TEST_MERGE_CHILD";

    /// VmHWM (peak resident set) of this process, in KiB.
    fn peak_rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// Not a test: the process `merges_100m_samples_in_bounded_memory`
    /// starts, so that the peak it reads is the merge's alone.
    #[test]
    #[ignore = "helper process for the 100 M-row merge test, run by it"]
    fn merge_in_child() {
        let Some(dir) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        let dir = PathBuf::from(dir);
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("points"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let before = peak_rss_kib();
        let started = Instant::now();
        let rows = merge(&files, &dir.join("samples.parquet")).unwrap();
        println!(
            "merged rows={rows} seconds={:.1} peak_kib_before={before} peak_kib={}",
            started.elapsed().as_secs_f64(),
            peak_rss_kib()
        );
    }

    #[test]
    #[ignore = "slow: 4 M rows in 4 per-point files (~1 min); TESTBED_TEST_MERGE_FILES=100 for 100 M"]
    fn merges_100m_samples_in_bounded_memory() {
        // 1 M rows a file; CI merges 4 M, TESTBED_TEST_MERGE_FILES=100
        // the 100 M of the issue (43.6 MiB peak in a release build).
        let files: u64 = std::env::var("TESTBED_TEST_MERGE_FILES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(4);
        const ROWS: u64 = 1_000_000;
        let t = tempfile::tempdir().unwrap();
        let started = Instant::now();
        for i in 0..files {
            // Every tenth point has a tag column the others lack.
            let tag = (i % 10 == 0).then_some("uring");
            let batches: Vec<RecordBatch> = (0..ROWS / BATCH_ROWS as u64 + 1)
                .map(|k| {
                    let first = k * BATCH_ROWS as u64;
                    let n = (ROWS.saturating_sub(first)).min(BATCH_ROWS as u64) as usize;
                    point_batch(i as u32, i * ROWS + first, n, tag)
                })
                .filter(|b| b.num_rows() > 0)
                .collect();
            let f = t.path().join(format!("points/p{i:04}-r00.parquet"));
            samples::write_parquet(&f, batches[0].schema(), &batches).unwrap();
        }
        eprintln!(
            "wrote {files} files of {ROWS} rows in {:.0} s",
            started.elapsed().as_secs_f64()
        );
        // Still runs if cargo rebuilt the binary meanwhile (not a host
        // tool: this very test binary).
        let me = Path::new("/proc/self/exe");
        let child = Command::new(me)
            .args([
                "--exact",
                &crate::host::lock::test_support::unit_test_name(module_path!(), "merge_in_child"),
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, t.path())
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(child.status.success(), "the merging process failed");
        let said = String::from_utf8_lossy(&child.stdout);
        // libtest prints the test's name before it on the same line.
        let line = said
            .lines()
            .find_map(|l| l.find("merged rows=").map(|at| l[at..].to_string()))
            .unwrap_or_default();
        println!("{line}");
        let fields: BTreeMap<&str, &str> = line
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .collect();
        assert_eq!(fields["rows"], (files * ROWS).to_string(), "{line}");
        let peak_mib = fields["peak_kib"].parse::<u64>().unwrap() / 1024;
        println!("peak RSS of the merge of {files} M rows: {peak_mib} MiB");
        // Holding the rows, as the merge before this one did, took ~105 MiB
        // a million rows (1 056 MiB for 10 M); streaming ~50 MiB for any count.
        assert!(peak_mib < 256, "merge peak {peak_mib} MiB: not bounded");
        // The merged file is whole: its footer counts every row.
        let m = open(&t.path().join("samples.parquet")).unwrap();
        assert_eq!(m.metadata().file_metadata().num_rows() as u64, files * ROWS);
    }
}
