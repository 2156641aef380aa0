//! A point's raw samples on their way from the guest to its parquet file:
//! checked chunk by chunk as they arrive and appended to a file in the run
//! directory, so a point's size is bounded by the disk, not the host's
//! memory. The file is removed when the spill is dropped.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use testbed_agent::protocol::SampleChunk;
use testbed_agent::text::printable;

/// Distinct tag keys one point may use: each becomes a column of every row.
pub const MAX_TAG_KEYS: usize = 16;
pub const MAX_NAME: usize = 64;
pub const MAX_TAG_VALUE: usize = 256;
/// Samples one point may send (JSON on disk, ~25 bytes each).
pub const MAX_VALUES: u64 = 200_000_000;

#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    /// The guest sent something no point may hold; the point fails.
    #[error("{0}")]
    Refused(String),
    #[error("spill file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// A line of the spill file does not read back as the chunk written.
    #[error("spill file {path}, line {line}: {source}")]
    Corrupt {
        path: String,
        line: usize,
        source: serde_json::Error,
    },
}

/// Samples being received for one point.
pub struct Spill {
    out: BufWriter<File>,
    path: tempfile::TempPath,
    summary: SpillSummary,
}

/// What the spilled samples hold, known before they are read back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpillSummary {
    pub values: u64,
    /// Tag key -> whether every value seen is an integer.
    pub tag_keys: BTreeMap<String, bool>,
}

/// A finished point's samples, read back chunk by chunk.
#[derive(Debug)]
pub struct SpillFile {
    path: tempfile::TempPath,
    pub summary: SpillSummary,
}

impl Spill {
    /// A new spill file in `dir` (created if missing).
    pub fn new(dir: &Path) -> Result<Spill, SpillError> {
        let io = |source| SpillError::Io {
            path: dir.display().to_string(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let (file, path) = tempfile::Builder::new()
            .prefix(".spill-")
            .tempfile_in(dir)
            .map_err(io)?
            .into_parts();
        Ok(Spill {
            out: BufWriter::new(file),
            path,
            summary: SpillSummary::default(),
        })
    }

    /// Checks a chunk and appends it; a refusal names what is wrong.
    pub fn push(&mut self, chunk: &SampleChunk) -> Result<(), SpillError> {
        check_chunk(chunk, &self.summary)?;
        let values = self.summary.values + chunk.values.len() as u64;
        if values > MAX_VALUES {
            return Err(SpillError::Refused(format!(
                "the point sent more than {MAX_VALUES} samples"
            )));
        }
        for (k, v) in &chunk.tags {
            let int = v.parse::<i64>().is_ok();
            let entry = self.summary.tag_keys.entry(k.clone()).or_insert(int);
            *entry &= int;
        }
        self.summary.values = values;
        let io = |source| SpillError::Io {
            path: self.path.display().to_string(),
            source,
        };
        serde_json::to_writer(&mut self.out, chunk).map_err(|e| io(e.into()))?;
        self.out.write_all(b"\n").map_err(io)?;
        Ok(())
    }

    pub fn finish(mut self) -> Result<SpillFile, SpillError> {
        self.out.flush().map_err(|source| SpillError::Io {
            path: self.path.display().to_string(),
            source,
        })?;
        Ok(SpillFile {
            path: self.path,
            summary: self.summary,
        })
    }
}

impl SpillFile {
    /// The chunks in the order they arrived.
    pub fn chunks(
        &self,
    ) -> Result<impl Iterator<Item = Result<SampleChunk, SpillError>>, SpillError> {
        let path = self.path.display().to_string();
        let file = File::open(&self.path).map_err(|source| SpillError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(BufReader::new(file)
            .lines()
            .enumerate()
            .map(move |(n, line)| {
                let line = line.map_err(|source| SpillError::Io {
                    path: path.clone(),
                    source,
                })?;
                serde_json::from_str(&line).map_err(|source| SpillError::Corrupt {
                    path: path.clone(),
                    line: n + 1,
                    source,
                })
            }))
    }

    /// A spill of `chunks`, checked as if they had arrived from a guest.
    pub fn from_chunks(dir: &Path, chunks: &[SampleChunk]) -> Result<SpillFile, SpillError> {
        let mut s = Spill::new(dir)?;
        for c in chunks {
            s.push(c)?;
        }
        s.finish()
    }
}

/// Removes the spill files a killed run left in `dir` (a point in flight
/// when `testbed` died: never stored, so it runs again). Only safe while
/// the run directory's lock is held.
pub fn remove_stale(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".spill-"))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

fn refuse(what: String) -> SpillError {
    SpillError::Refused(what)
}

fn check_name(what: &str, s: &str, max: usize) -> Result<(), SpillError> {
    if s.is_empty() || s.len() > max || !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(refuse(format!(
            "{what} {:?} is not a name of 1 to {max} letters, digits or '_'",
            printable(s, 40)
        )));
    }
    Ok(())
}

/// What a chunk may hold: names that make clean columns, a bounded number
/// of tag keys per point, bounded tag values, and only finite numbers.
fn check_chunk(c: &SampleChunk, seen: &SpillSummary) -> Result<(), SpillError> {
    check_name("metric", &c.metric, MAX_NAME)?;
    if c.unit.len() > MAX_NAME || c.unit.chars().any(char::is_control) {
        return Err(refuse(format!(
            "metric {}: unit {:?} is longer than {MAX_NAME} bytes or holds control characters",
            c.metric,
            printable(&c.unit, 40)
        )));
    }
    for (k, v) in &c.tags {
        check_name("tag key", k, MAX_NAME)?;
        if v.len() > MAX_TAG_VALUE || v.chars().any(char::is_control) {
            return Err(refuse(format!(
                "metric {}: tag {k} = {:?} is longer than {MAX_TAG_VALUE} bytes or holds control characters",
                c.metric,
                printable(v, 40)
            )));
        }
    }
    let new_keys = c
        .tags
        .keys()
        .filter(|k| !seen.tag_keys.contains_key(*k))
        .count();
    if seen.tag_keys.len() + new_keys > MAX_TAG_KEYS {
        return Err(refuse(format!(
            "metric {}: the point uses more than {MAX_TAG_KEYS} distinct tag keys (each becomes a column)",
            c.metric
        )));
    }
    if let Some(i) = c.values.iter().position(|v| !v.is_finite()) {
        return Err(refuse(format!(
            "metric {} thread {} sample {}: not a finite number (NaN or infinite)",
            c.metric,
            c.thread,
            c.first_seq + i as u64
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(metric: &str, tags: &[(&str, &str)], values: Vec<f64>) -> SampleChunk {
        SampleChunk {
            job_id: 1,
            metric: metric.into(),
            unit: "ns".into(),
            thread: 0,
            first_seq: 10,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            values,
        }
    }

    #[test]
    fn chunks_come_back_in_order_and_the_file_goes_with_the_spill() {
        let dir = tempfile::tempdir().unwrap();
        let a = chunk("lat", &[("hop", "1")], vec![1.0, 2.0]);
        let b = chunk("lat", &[("hop", "x"), ("engine", "read")], vec![3.0]);
        let f = SpillFile::from_chunks(dir.path(), &[a.clone(), b.clone()]).unwrap();
        assert_eq!(f.summary.values, 3);
        assert_eq!(
            f.summary.tag_keys,
            BTreeMap::from([("engine".into(), false), ("hop".into(), false)])
        );
        let back: Vec<SampleChunk> = f.chunks().unwrap().map(Result::unwrap).collect();
        assert_eq!(back, [a, b]);
        // A damaged line is found by its number, after the good ones.
        let mut out = std::fs::OpenOptions::new()
            .append(true)
            .open(&f.path)
            .unwrap();
        out.write_all(b"{\"metric\": 1}\n").unwrap();
        let read: Vec<_> = f.chunks().unwrap().collect();
        assert!(read[..2].iter().all(Result::is_ok));
        assert!(
            matches!(read[2], Err(SpillError::Corrupt { line: 3, .. })),
            "{read:?}"
        );
        drop(f);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn what_no_point_may_hold_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let refused = |c: SampleChunk| match Spill::new(dir.path()).unwrap().push(&c) {
            Err(SpillError::Refused(why)) => why,
            other => panic!("expected a refusal, got {other:?}"),
        };
        let why = refused(chunk("lat", &[], vec![1.0, f64::NAN]));
        assert!(why.contains("sample 11: not a finite number"), "{why}");
        let why = refused(chunk("lat\x1b[2J", &[], vec![1.0]));
        assert!(why.contains("\\u{1b}") && !why.contains('\x1b'), "{why}");
        let why = refused(chunk("lat", &[("a-b", "1")], vec![1.0]));
        assert!(why.contains("tag key"), "{why}");
        let why = refused(chunk("lat", &[("k", &"v".repeat(300))], vec![1.0]));
        assert!(why.contains("longer than 256"), "{why}");
    }

    #[test]
    fn tag_keys_are_bounded_per_point() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spill::new(dir.path()).unwrap();
        for i in 0..MAX_TAG_KEYS {
            let key = format!("k{i}");
            s.push(&chunk("lat", &[(&key, "1")], vec![1.0])).unwrap();
        }
        // Keys already seen stay welcome.
        s.push(&chunk("lat", &[("k3", "2")], vec![1.0])).unwrap();
        let err = s.push(&chunk("lat", &[("one_more", "1")], vec![1.0]));
        assert!(
            matches!(&err, Err(SpillError::Refused(w)) if w.contains("more than 16 distinct tag keys")),
            "{err:?}"
        );
    }
}
