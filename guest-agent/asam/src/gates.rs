//! Correctness gates: a measurement of ArrowSAM counts only if its result
//! is right. Three gates, on files read with noodles (BAM) or as text
//! (metrics); the BAM gates stream both coordinate-sorted files side by
//! side, holding one position's records at a time:
//!
//! - [`check_duplicates`]: the records marked duplicate (FLAG 0x400) in our
//!   BAM are exactly those Picard's MarkDuplicates marked in its BAM of the
//!   same input, and both hold the same records.
//! - [`check_order`]: our BAM is in the coordinate order of `samtools
//!   sort`'s BAM of the same input, comparing whole records: every field
//!   and every tag, each record decoded from BAM and printed as SAM by the
//!   same code on both sides, with tags sorted by name and the FLAG bits
//!   the caller names (e.g. 0x400, which markdup sets and sort does not)
//!   cleared on both sides. Coordinate order does not order records with
//!   the same (reference, position, strand): samtools keeps input order,
//!   we keep Picard's (name, flags). Such a run of ties is compared as a
//!   multiset, as are the records without a reference at the end.
//! - [`check_metrics`]: our duplicate metrics file has Picard's counts for
//!   every library.
//!
//! A failed gate is a [`GateError::Failed`] naming how many records
//! differ and the first [`MAX_NAMES`] read names.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use noodles::bam;
use noodles::bgzf;
use noodles::sam;
use noodles::sam::alignment::io::Write as _;

use crate::AsamError;
pub use testbed_lines::asam::Agreement;

/// How many differing read names an error lists.
pub const MAX_NAMES: usize = 20;

/// The FLAG bits that tell the records of one read apart (first/second of
/// a pair, secondary, supplementary).
const IDENTITY_BITS: u16 = 0x40 | 0x80 | 0x100 | 0x800;
const DUPLICATE: u16 = 0x400;
const REVERSE: u16 = 0x10;

/// Which gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Duplicate set against Picard MarkDuplicates.
    Duplicates,
    /// Whole-record coordinate order against samtools sort.
    Order,
    /// Duplicate metrics' counts against Picard's metrics file.
    Metrics,
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Gate::Duplicates => "duplicate set differs from Picard MarkDuplicates'",
            Gate::Order => "coordinate order differs from samtools sort's (whole records)",
            Gate::Metrics => "duplicate metrics' counts differ from Picard's (names are libraries)",
        })
    }
}

/// What a failed gate found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub gate: Gate,
    /// Records that differ (counted on both sides).
    pub records: usize,
    /// Distinct read names of those records, sorted, at most [`MAX_NAMES`].
    pub reads: Vec<String>,
    /// Distinct read names in all.
    pub read_count: usize,
    pub ours: String,
    pub theirs: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} against {}: {} records of {} reads differ; ",
            self.gate, self.ours, self.theirs, self.records, self.read_count
        )?;
        let more = self.read_count.saturating_sub(self.reads.len());
        write!(f, "reads: {}", self.reads.join(", "))?;
        if more > 0 {
            write!(f, " and {more} more")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("correctness gate failed: {0}")]
    Failed(Mismatch),
    #[error(transparent)]
    Read(#[from] AsamError),
}

/// What a passed gate compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passed {
    /// Records compared (the metrics gate: libraries).
    pub records: u64,
    /// Records marked duplicate (the duplicate and metrics gates; 0 for
    /// the order gate).
    pub duplicates: u64,
}

/// A BAM file's header and records, read with noodles.
struct BamFile {
    path: Arc<str>,
    header: Arc<sam::Header>,
    reader: bam::io::Reader<bgzf::io::Reader<File>>,
    record: bam::Record,
}

impl BamFile {
    fn open(path: &Path) -> Result<Self, AsamError> {
        let mut reader = bam::io::reader::Builder
            .build_from_path(path)
            .map_err(|e| AsamError::io(path, e))?;
        let header = reader.read_header().map_err(|e| AsamError::io(path, e))?;
        Ok(BamFile {
            path: path.display().to_string().into(),
            header: Arc::new(header),
            reader,
            record: bam::Record::default(),
        })
    }

    /// The next record, or None at the end.
    fn next(&mut self) -> Result<Option<&bam::Record>, AsamError> {
        let n = self
            .reader
            .read_record(&mut self.record)
            .map_err(|e| AsamError::Invalid(format!("{}: {e}", self.path)))?;
        Ok((n > 0).then_some(&self.record))
    }
}

fn bad(path: &str, what: &str, e: impl fmt::Display) -> AsamError {
    AsamError::Invalid(format!("{path}: {what}: {e}"))
}

/// The name, reference name and position of a record (for keys).
fn identity(
    path: &str,
    header: &sam::Header,
    r: &bam::Record,
) -> Result<(String, u16, String, usize), AsamError> {
    let name = r
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|| "*".into());
    let flags = u16::from(r.flags());
    let rname = match r.reference_sequence_id() {
        None => "*".to_string(),
        Some(id) => {
            let id = id.map_err(|e| bad(path, "reference id", e))?;
            header
                .reference_sequences()
                .get_index(id)
                .map(|(n, _)| n.to_string())
                .ok_or_else(|| bad(path, "reference id", id))?
        }
    };
    let pos = match r.alignment_start() {
        None => 0,
        Some(p) => usize::from(p.map_err(|e| bad(path, "position", e))?),
    };
    Ok((name, flags, rname, pos))
}

/// Fails unless `ours` marks exactly the records `picard` marks, and both
/// hold the same records (by name, read-identity FLAG bits, reference and
/// position). Both files must be coordinate-sorted.
pub fn check_duplicates(ours: &Path, picard: &Path) -> Result<Passed, GateError> {
    let (passed, diff) = duplicate_differences(ours, picard)?;
    diff.into_result(Gate::Duplicates, ours, picard)?;
    Ok(passed)
}

/// The duplicate gate's comparison as a report instead of a verdict: how
/// many records of `tool`'s BAM differ from Picard's (duplicate bit, or
/// held by one side only) and which reads, for tools whose definition of
/// a duplicate may differ by design.
pub fn compare_duplicates(
    tool: &str,
    theirs: &Path,
    picard: &Path,
) -> Result<Agreement, AsamError> {
    let (passed, diff) = duplicate_differences(theirs, picard)?;
    Ok(Agreement {
        tool: tool.to_string(),
        records: passed.records,
        duplicates: passed.duplicates,
        differing_records: diff.records as u64,
        differing_reads: diff.names.len() as u64,
        reads: diff.names.into_iter().take(MAX_NAMES).collect(),
    })
}

fn duplicate_differences(ours: &Path, picard: &Path) -> Result<(Passed, Differences), AsamError> {
    let mut a = Lines::open(ours, Mode::Duplicates)?;
    let mut b = Lines::open(picard, Mode::Duplicates)?;
    let mut diff = Differences::default();
    merge(&mut a, &mut b, &mut diff, duplicate_difference)?;
    Ok((
        Passed {
            records: a.records,
            duplicates: a.duplicates,
        },
        diff,
    ))
}

/// Records in a BAM file, and those marked duplicate.
pub fn count_records(path: &Path) -> Result<(u64, u64), AsamError> {
    let mut bam = BamFile::open(path)?;
    let (mut records, mut duplicates) = (0u64, 0u64);
    while let Some(r) = bam.next()? {
        records += 1;
        duplicates += u64::from(u16::from(r.flags()) & DUPLICATE != 0);
    }
    Ok((records, duplicates))
}

/// (QNAME, FLAG with 0x400 cleared) of every record marked duplicate in a
/// BAM file: a tool's duplicate set, to compare with an expected one.
pub fn duplicate_records(path: &Path) -> Result<BTreeSet<(String, u16)>, AsamError> {
    let mut bam = BamFile::open(path)?;
    let mut out = BTreeSet::new();
    while let Some(r) = bam.next()? {
        let flags = u16::from(r.flags());
        if flags & DUPLICATE != 0 {
            let name = r
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|| "*".into());
            out.insert((name, flags & !DUPLICATE));
        }
    }
    Ok(out)
}

/// Collects read names of differing records: a count and the sorted first
/// [`MAX_NAMES`] distinct names.
#[derive(Default)]
struct Differences {
    records: usize,
    names: BTreeSet<String>,
}

impl Differences {
    fn add(&mut self, name: &str, records: usize) {
        self.records += records;
        self.names.insert(name.to_string());
    }

    fn into_result(self, gate: Gate, ours: &Path, theirs: &Path) -> Result<(), GateError> {
        if self.records == 0 {
            return Ok(());
        }
        Err(GateError::Failed(Mismatch {
            gate,
            records: self.records,
            read_count: self.names.len(),
            reads: self.names.into_iter().take(MAX_NAMES).collect(),
            ours: ours.display().to_string(),
            theirs: theirs.display().to_string(),
        }))
    }
}

/// Fails unless every library's counts in our metrics file (Picard's
/// format) equal those in Picard's, and the same libraries appear.
pub fn check_metrics(ours: &Path, picard: &Path) -> Result<Passed, GateError> {
    let mine = crate::metrics::read_metrics(ours)?;
    let theirs = crate::metrics::read_metrics(picard)?;
    let mut diff = Differences::default();
    for m in &mine {
        match theirs.iter().find(|p| p.library == m.library) {
            Some(p) if p.counts() == m.counts() => {}
            _ => diff.add(&m.library, 1),
        }
    }
    for p in theirs
        .iter()
        .filter(|p| !mine.iter().any(|m| m.library == p.library))
    {
        diff.add(&p.library, 1);
    }
    diff.into_result(Gate::Metrics, ours, picard)?;
    Ok(Passed {
        records: mine.len() as u64,
        duplicates: mine
            .iter()
            .map(|m| m.unpaired_read_duplicates + 2 * m.read_pair_duplicates)
            .sum(),
    })
}

/// The coordinate-order key of a record: reference (none last), position,
/// strand; records without a reference share one key.
type OrderKey = (u64, i64, bool);

/// A record as a gate compares it: its run key, its read name, its FLAG
/// and (order gate) its whole SAM line after normalisation, or (duplicate
/// gate) its identity: name and identity FLAG bits.
struct Line {
    key: OrderKey,
    name: String,
    flags: u16,
    text: String,
}

/// What the records of a file are read as.
#[derive(Clone, Copy)]
enum Mode {
    /// Whole normalised lines with these FLAG bits cleared; runs by
    /// (reference, position, strand).
    Order { clear: u16 },
    /// Identities; runs by (reference, position): Picard's tie order on a
    /// position is not asked for here.
    Duplicates,
}

/// Reads a BAM file's records, grouped into runs of equal keys: both
/// files of a gate are coordinate-sorted, so runs are compared one pair at
/// a time and memory holds a run, not a file.
struct Lines {
    bam: BamFile,
    mode: Mode,
    out: sam::io::Writer<Vec<u8>>,
    peeked: Option<Line>,
    records: u64,
    duplicates: u64,
}

impl Lines {
    fn open(path: &Path, mode: Mode) -> Result<Self, AsamError> {
        let mut l = Lines {
            bam: BamFile::open(path)?,
            mode,
            out: sam::io::Writer::new(Vec::new()),
            peeked: None,
            records: 0,
            duplicates: 0,
        };
        l.peeked = l.read()?;
        Ok(l)
    }

    fn read(&mut self) -> Result<Option<Line>, AsamError> {
        let header = self.bam.header.clone();
        let path = self.bam.path.clone();
        let Some(r) = self.bam.next()? else {
            return Ok(None);
        };
        let (name, flags, _, pos) = identity(&path, &header, r)?;
        let strand = matches!(self.mode, Mode::Order { .. }) && flags & REVERSE != 0;
        let key = match r.reference_sequence_id() {
            None => (u64::MAX, 0, false),
            Some(id) => (
                id.map_err(|e| bad(&path, "reference id", e))? as u64,
                pos as i64,
                strand,
            ),
        };
        let text = match self.mode {
            Mode::Order { clear } => {
                self.out.get_mut().clear();
                self.out
                    .write_alignment_record(&header, r)
                    .map_err(|e| bad(&path, &format!("record {name}"), e))?;
                let text = String::from_utf8_lossy(self.out.get_ref());
                normalise(text.trim_end_matches('\n'), clear)
            }
            Mode::Duplicates => format!("{name}\t{}", flags & IDENTITY_BITS),
        };
        self.records += 1;
        self.duplicates += u64::from(flags & DUPLICATE != 0);
        Ok(Some(Line {
            key,
            name,
            flags,
            text,
        }))
    }

    /// The next run of records with one key, or None at the end.
    fn next_run(&mut self) -> Result<Option<(OrderKey, Vec<Line>)>, AsamError> {
        let Some(first) = self.peeked.take() else {
            return Ok(None);
        };
        let key = first.key;
        let mut run = vec![first];
        loop {
            match self.read()? {
                Some(l) if l.key == key => run.push(l),
                other => {
                    self.peeked = other;
                    return Ok(Some((key, run)));
                }
            }
        }
    }
}

/// A SAM line with the FLAG bits `clear` cleared and its optional fields
/// sorted by tag (the order of tags carries no meaning).
pub fn normalise(line: &str, clear: u16) -> String {
    let mut fields: Vec<&str> = line.split('\t').collect();
    let flag = fields
        .get(1)
        .and_then(|f| f.parse::<u16>().ok())
        .map(|f| (f & !clear).to_string());
    let mut tags: Vec<&str> = fields.split_off(fields.len().min(11));
    tags.sort_by_key(|t| t.get(..2).unwrap_or(t).to_string());
    let mut out: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
    if let (Some(f), Some(slot)) = (flag, out.get_mut(1)) {
        *slot = f;
    }
    out.extend(tags.iter().map(|s| s.to_string()));
    out.join("\t")
}

/// Fails unless `ours` holds the records of `samtools_sorted`, whole, in
/// the same coordinate order (ties and unplaced records as multisets),
/// after clearing the FLAG bits `clear_flags` on both sides.
pub fn check_order(
    ours: &Path,
    samtools_sorted: &Path,
    clear_flags: u16,
) -> Result<Passed, GateError> {
    let mode = Mode::Order { clear: clear_flags };
    let mut a = Lines::open(ours, mode)?;
    let mut b = Lines::open(samtools_sorted, mode)?;
    let mut diff = Differences::default();
    merge(&mut a, &mut b, &mut diff, multiset_difference)?;
    diff.into_result(Gate::Order, ours, samtools_sorted)?;
    Ok(Passed {
        records: a.records,
        duplicates: 0,
    })
}

/// Walks the runs of two coordinate-sorted files side by side: a run only
/// one side has differs whole; runs with the same key go to `both`.
fn merge(
    a: &mut Lines,
    b: &mut Lines,
    diff: &mut Differences,
    both: fn(Vec<Line>, Vec<Line>, &mut Differences),
) -> Result<(), AsamError> {
    let mut ra = a.next_run()?;
    let mut rb = b.next_run()?;
    loop {
        let order = match (&ra, &rb) {
            (None, None) => return Ok(()),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((ka, _)), Some((kb, _))) => ka.cmp(kb),
        };
        match order {
            Ordering::Less => {
                if let Some((_, run)) = ra.take() {
                    run.iter().for_each(|l| diff.add(&l.name, 1));
                }
                ra = a.next_run()?;
            }
            Ordering::Greater => {
                if let Some((_, run)) = rb.take() {
                    run.iter().for_each(|l| diff.add(&l.name, 1));
                }
                rb = b.next_run()?;
            }
            Ordering::Equal => {
                if let (Some((_, x)), Some((_, y))) = (ra.take(), rb.take()) {
                    both(x, y, diff);
                }
                ra = a.next_run()?;
                rb = b.next_run()?;
            }
        }
    }
}

/// Within one position: every record of one side must have its identity
/// on the other, with the same duplicate bit.
fn duplicate_difference(a: Vec<Line>, b: Vec<Line>, diff: &mut Differences) {
    let mut theirs: HashMap<String, Vec<bool>> = HashMap::new();
    for l in b {
        theirs
            .entry(l.text)
            .or_default()
            .push(l.flags & DUPLICATE != 0);
    }
    for l in a {
        let dup = l.flags & DUPLICATE != 0;
        match theirs.get_mut(&l.text) {
            Some(bits) if !bits.is_empty() => {
                // Prefer a record with the same bit (identical twins).
                let i = bits.iter().position(|&d| d == dup).unwrap_or(0);
                if bits.swap_remove(i) != dup {
                    diff.add(&l.name, 1);
                }
            }
            _ => diff.add(&l.name, 1),
        }
    }
    for (text, bits) in theirs {
        let name = text.split('\t').next().unwrap_or("");
        for _ in bits {
            diff.add(name, 1);
        }
    }
}

/// Adds the records one run has and the other lacks (by whole line).
fn multiset_difference(mut a: Vec<Line>, mut b: Vec<Line>, diff: &mut Differences) {
    a.sort_by(|x, y| x.text.cmp(&y.text));
    b.sort_by(|x, y| x.text.cmp(&y.text));
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.text == y.text => {
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x.text < y.text => {
                diff.add(&x.name, 1);
                i += 1;
            }
            (Some(_), Some(y)) | (None, Some(y)) => {
                diff.add(&y.name, 1);
                j += 1;
            }
            (Some(x), None) => {
                diff.add(&x.name, 1);
                i += 1;
            }
            (None, None) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_clears_the_named_bits_and_sorts_tags() {
        let a = "r\t1123\tchr1\t5\t60\t4M\t=\t9\t8\tACGT\tIIII\tRG:Z:x\tNM:i:0\tAS:i:4";
        assert_eq!(
            normalise(a, 0x400),
            "r\t99\tchr1\t5\t60\t4M\t=\t9\t8\tACGT\tIIII\tAS:i:4\tNM:i:0\tRG:Z:x"
        );
        assert_eq!(normalise("r\t4\t*\t0", 0x400), "r\t4\t*\t0");
    }

    #[test]
    fn metrics_must_have_picards_counts_for_every_library() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, rows: &[&str]| {
            let p = dir.path().join(name);
            let cols = crate::metrics::COLUMNS.join("\t");
            let text = format!(
                "## htsjdk.samtools.metrics.StringHeader\n# x\n\n## METRICS CLASS\tpicard.sam.DuplicationMetrics\n{cols}\n{}\n\n",
                rows.join("\n")
            );
            std::fs::write(&p, text).unwrap();
            p
        };
        let a = "libA\t3\t9\t1\t2\t2\t7\t1\t0.761905\t2";
        let b = "libB\t0\t4\t0\t0\t0\t1\t0\t0.25\t6";
        let picard = file("picard.txt", &[b, a]);
        let same = file("same.txt", &[a, b]);
        assert!(check_metrics(&same, &picard).is_ok());
        let off = file("off.txt", &[&a.replace("\t7\t1\t", "\t7\t0\t"), b]);
        let e = check_metrics(&off, &picard).unwrap_err().to_string();
        assert!(
            e.contains("metrics") && e.contains("reads: libA") && !e.contains("libB"),
            "{e}"
        );
        let missing = file("missing.txt", &[a]);
        let e = check_metrics(&missing, &picard).unwrap_err().to_string();
        assert!(e.contains("reads: libB"), "{e}");
    }

    #[test]
    fn a_mismatch_lists_twenty_names_and_the_count() {
        let mut d = Differences::default();
        for i in 0..25 {
            d.add(&format!("read{i:02}"), 2);
        }
        let e = d
            .into_result(Gate::Duplicates, Path::new("a.bam"), Path::new("p.bam"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("50 records of 25 reads differ"), "{e}");
        assert!(
            e.contains("read00, read01") && e.contains("read19 and 5 more"),
            "{e}"
        );
        assert!(!e.contains("read20"), "{e}");
        assert!(e.contains("Picard"), "{e}");
    }
}
