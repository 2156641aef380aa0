//! Correctness gates: a measurement of ArrowSAM counts only if its result
//! is right. Three gates, on files read with noodles (BAM) or as text
//! (metrics); the BAM gates stream both coordinate-sorted files side by
//! side, holding one position's records at a time:
//!
//! - [`check_duplicates`]: the records marked duplicate (FLAG 0x400) in our
//!   BAM are exactly those Picard's MarkDuplicates marked in its BAM of the
//!   same input, and both hold the same records.
//! - [`check_marker`]: another duplicate marker's BAM (samblaster,
//!   bamsormadup, samtools, sambamba) by the same comparison, under
//!   [`Rule::Sets`] (samblaster: [`Rule::SetsButOrphans`]): which member of
//!   a duplicate set a tool keeps differs from Picard's choice by design,
//!   the sets and how many of each are marked do not.
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
//! A failed gate is a [`GateError::Failed`] naming the tool, how many
//! records differ, the first difference in coordinate order (the read, and
//! which side marked it) and the first [`MAX_NAMES`] read names.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use noodles::bam;
use noodles::bgzf;
use noodles::sam;
use noodles::sam::alignment::io::Write as _;

use crate::AsamError;
pub use testbed_vocab::asam::{Agreement, GatePassed};

/// How many differing read names an error lists.
pub const MAX_NAMES: usize = 20;

/// The FLAG bits that tell the records of one read apart (first/second of
/// a pair, secondary, supplementary).
const IDENTITY_BITS: u16 = 0x40 | 0x80 | 0x100 | 0x800;
const SEGMENT_BITS: u16 = 0x40 | 0x80;
const NOT_PRIMARY: u16 = 0x100 | 0x800;
const DUPLICATE: u16 = 0x400;
const REVERSE: u16 = 0x10;
/// Picard's duplicate-set index (`TAG_DUPLICATE_SET_MEMBERS=true`): the
/// file index of the set's representative, on every member.
const DUPLICATE_SET_INDEX: [u8; 2] = *b"DI";

/// Which gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Duplicate set against Picard MarkDuplicates.
    Duplicates,
    /// Duplicate sets against Picard MarkDuplicates' ([`Rule::Sets`],
    /// [`Rule::SetsButOrphans`]).
    DuplicateSets,
    /// Whole-record coordinate order against samtools sort.
    Order,
    /// Duplicate metrics' counts against Picard's metrics file.
    Metrics,
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Gate::Duplicates => "duplicate set differs from Picard MarkDuplicates'",
            Gate::DuplicateSets => {
                "duplicate sets differ from Picard MarkDuplicates' (which member a set keeps may differ, not how many are marked)"
            }
            Gate::Order => "coordinate order differs from samtools sort's (whole records)",
            Gate::Metrics => "duplicate metrics' counts differ from Picard's (names are libraries)",
        })
    }
}

/// What a failed gate found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The tool whose result failed.
    pub tool: String,
    pub gate: Gate,
    /// Records that differ (counted on both sides).
    pub records: usize,
    /// Distinct read names of those records, sorted, at most [`MAX_NAMES`].
    pub reads: Vec<String>,
    /// Distinct read names in all.
    pub read_count: usize,
    /// The first difference, in the order the gate met them: the read, and
    /// what differs (which side marked it, or which side holds it).
    pub first: Option<String>,
    pub ours: String,
    pub theirs: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {} against {}: {} records of {} reads differ; ",
            self.tool, self.gate, self.ours, self.theirs, self.records, self.read_count
        )?;
        if let Some(first) = &self.first {
            write!(f, "first: {first}; ")?;
        }
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
    Failed(Box<Mismatch>),
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

/// The tool named in ArrowSAM's gates.
pub const ARROWSAM: &str = "arrowsam";

/// What a duplicate marker's result must share with Picard's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Picard's marks, record for record: ArrowSAM implements Picard's
    /// rules, down to which member of a set it keeps.
    Exact,
    /// Picard's duplicate sets. Within each set Picard's BAM names (its
    /// `DI` tag, from `TAG_DUPLICATE_SET_MEMBERS=true`) the tool marks as
    /// many records as Picard, whichever members it keeps; outside them it
    /// marks what Picard marks; and a secondary or supplementary record it
    /// marks where Picard does not belongs to a read whose primary record
    /// (same segment) it marked. Both freedoms are the tools' designs:
    /// samblaster keeps the first pair of a set it sees where Picard keeps
    /// the best-scoring one, and marks every alignment of a duplicate read
    /// where Picard, on coordinate-sorted input, marks the primary only;
    /// bamsormadup, samtools and sambamba break ties of the score their own
    /// way. A record marked outside every set, a set with one record too
    /// many or too few marked, or a record only one side holds fails.
    Sets,
    /// [`Rule::Sets`], with orphans (the mapped read of a pair whose mate
    /// is unmapped, and that mate) left out of the verdict, reported only:
    /// samblaster marks an orphan as a duplicate of an earlier orphan only
    /// (on either strand), never of a pair's read, where Picard marks a
    /// fragment that a pair's read, or a better fragment on its strand,
    /// shares its 5' end with (samblaster's README, "Duplicate
    /// Identification").
    SetsButOrphans,
}

impl Rule {
    /// The rule a duplicate marker's result is gated by.
    pub fn of(tool: &str) -> Rule {
        match tool {
            ARROWSAM => Rule::Exact,
            "samblaster" => Rule::SetsButOrphans,
            _ => Rule::Sets,
        }
    }
}

/// One read of a pair whose other read is unmapped.
fn orphan(flags: u16) -> bool {
    flags & 0x1 != 0 && ((flags & 0x4 != 0) != (flags & 0x8 != 0))
}

/// Fails unless `ours` marks exactly the records `picard` marks, and both
/// hold the same records (by name, read-identity FLAG bits, reference and
/// position). Both files must be coordinate-sorted.
pub fn check_duplicates(ours: &Path, picard: &Path) -> Result<Passed, GateError> {
    let c = compare(ARROWSAM, ours, picard, Rule::Exact)?;
    c.exact
        .into_result(ARROWSAM, Gate::Duplicates, ours, picard)?;
    Ok(c.passed)
}

/// `tool`'s duplicate-marked BAM (`theirs`) against Picard's by the
/// comparison [`check_duplicates`] makes for ArrowSAM, under its rule
/// ([`Rule::of`]): fails unless every duplicate set agrees, naming the
/// first differing read. Passed: how many records differ record for
/// record (the members the tool keeps where Picard keeps others, a
/// report) and the gate's counts. Both files coordinate-sorted; `picard`
/// must carry Picard's `DI` tags.
pub fn check_marker(tool: &str, theirs: &Path, picard: &Path) -> Result<Agreement, GateError> {
    let c = compare(tool, theirs, picard, Rule::of(tool))?;
    if let Some(sets) = c.sets {
        sets.into_result(tool, Gate::DuplicateSets, theirs, picard)?;
    }
    Ok(Agreement {
        tool: tool.to_string(),
        records: c.passed.records,
        duplicates: c.passed.duplicates,
        differing_records: c.exact.records as u64,
        differing_reads: c.exact.names.len() as u64,
        reads: c.exact.names.into_iter().take(MAX_NAMES).collect(),
        duplicate_sets: Some(GatePassed {
            records: c.passed.records,
            duplicates: c.passed.duplicates,
        }),
    })
}

/// One comparison of a marker's BAM with Picard's.
struct Compared {
    /// The marker's records and duplicates.
    passed: Passed,
    /// Every record whose bit differs, or which one side only holds.
    exact: Differences,
    /// Under the set rules: the differences the rule does not allow.
    sets: Option<Differences>,
}

fn compare(tool: &str, ours: &Path, picard: &Path, rule: Rule) -> Result<Compared, AsamError> {
    let mut a = Lines::open(ours, Mode::Duplicates)?;
    let mut b = Lines::open(picard, Mode::Duplicates)?;
    let mut c = DuplicateComparison::new(tool, rule);
    merge(&mut a, &mut b, |run| c.run(run))?;
    if rule != Rule::Exact && b.pair_duplicates > 0 && b.in_sets == 0 {
        return Err(AsamError::Invalid(format!(
            "{}: Picard's BAM names no duplicate sets (no DI tag): {tool}'s duplicate-set gate needs MarkDuplicates TAG_DUPLICATE_SET_MEMBERS=true",
            picard.display()
        )));
    }
    let passed = Passed {
        records: a.records,
        duplicates: a.duplicates,
    };
    let (exact, sets) = c.finish(ours)?;
    Ok(Compared {
        passed,
        exact,
        sets,
    })
}

/// A record whose duplicate bit differs between a tool's BAM and
/// Picard's, or which one side only holds.
#[derive(Debug, Clone)]
struct Differing {
    /// The order the comparison met it in (coordinate order).
    seq: u64,
    name: String,
    /// The read, where, and what differs.
    what: String,
}

/// The duplicate comparison, fed runs of records of one position.
struct DuplicateComparison<'t> {
    tool: &'t str,
    rule: Rule,
    seq: u64,
    exact: Differences,
    /// Under the set rules: differences the rule does not allow.
    sets_diff: Differences,
    /// Under the set rules: Picard's sets holding records whose bit differs:
    /// records the tool marks minus those Picard marks, and the records.
    sets: BTreeMap<i64, (i64, Vec<Differing>)>,
    /// Under the set rules: secondary or supplementary records the tool marks
    /// and Picard does not, by (name, segment bits): allowed if the tool
    /// marked that segment's primary record.
    pending: Vec<((String, u16), Differing)>,
}

impl<'t> DuplicateComparison<'t> {
    fn new(tool: &'t str, rule: Rule) -> Self {
        DuplicateComparison {
            tool,
            rule,
            seq: 0,
            exact: Differences::default(),
            sets_diff: Differences::default(),
            sets: BTreeMap::new(),
            pending: Vec::new(),
        }
    }

    fn differing(&mut self, l: &Line, what: String) -> Differing {
        self.seq += 1;
        Differing {
            seq: self.seq,
            name: l.name.clone(),
            what: format!("{} {what}", l.describe()),
        }
    }

    /// Within one position: every record of one side must have its
    /// identity on the other, with the same duplicate bit.
    fn run(&mut self, run: Run) {
        match run {
            Run::Ours(lines) => lines.iter().for_each(|l| self.alone(l, true)),
            Run::Theirs(lines) => lines.iter().for_each(|l| self.alone(l, false)),
            Run::Both(a, b) => {
                let mut theirs: BTreeMap<String, Vec<Line>> = BTreeMap::new();
                for l in b {
                    theirs.entry(l.text.clone()).or_default().push(l);
                }
                for l in a {
                    let dup = l.flags & DUPLICATE != 0;
                    match theirs.get_mut(&l.text) {
                        Some(same) if !same.is_empty() => {
                            // Prefer a record with the same bit (identical twins).
                            let i = same
                                .iter()
                                .position(|t| (t.flags & DUPLICATE != 0) == dup)
                                .unwrap_or(0);
                            let t = same.swap_remove(i);
                            if (t.flags & DUPLICATE != 0) != dup {
                                self.differ(&l, &t);
                            }
                        }
                        _ => self.alone(&l, true),
                    }
                }
                for t in theirs.into_values().flatten() {
                    self.alone(&t, false);
                }
            }
        }
    }

    /// A record only one side holds: a difference under every rule.
    fn alone(&mut self, l: &Line, ours: bool) {
        let whose = if ours {
            format!("{}'s", self.tool)
        } else {
            "Picard's".to_string()
        };
        let d = self.differing(l, format!("is only in {whose} BAM"));
        self.exact.add_differing(&d);
        if self.rule != Rule::Exact {
            self.sets_diff.add_differing(&d);
        }
    }

    /// The same record, its duplicate bit set on one side only.
    fn differ(&mut self, ours: &Line, theirs: &Line) {
        let marked = ours.flags & DUPLICATE != 0;
        let what = if marked {
            format!("is marked duplicate by {}, not by Picard", self.tool)
        } else {
            format!("is marked duplicate by Picard, not by {}", self.tool)
        };
        let d = self.differing(ours, what);
        self.exact.add_differing(&d);
        match self.rule {
            Rule::Exact => return,
            Rule::SetsButOrphans if orphan(ours.flags) => return,
            Rule::Sets | Rule::SetsButOrphans => {}
        }
        if let Some(set) = theirs.set {
            let e = self.sets.entry(set).or_default();
            e.0 += if marked { 1 } else { -1 };
            e.1.push(d);
        } else if marked && ours.flags & NOT_PRIMARY != 0 {
            let key = (ours.name.clone(), ours.flags & SEGMENT_BITS);
            self.pending.push((key, d));
        } else {
            self.sets_diff.add_differing(&d);
        }
    }

    /// The record-level differences, and under the set rules those the
    /// rule does not allow: the records of every set whose count differs,
    /// and every secondary or supplementary mark without a marked primary
    /// (looked up in `ours`, read again only when there are such marks).
    fn finish(mut self, ours: &Path) -> Result<(Differences, Option<Differences>), AsamError> {
        if self.rule == Rule::Exact {
            return Ok((self.exact, None));
        }
        let tool = self.tool;
        for (set, (net, records)) in std::mem::take(&mut self.sets) {
            if net == 0 {
                continue;
            }
            let (n, more) = (net.unsigned_abs(), if net > 0 { "more" } else { "fewer" });
            for mut d in records {
                d.what = format!(
                    "{} (Picard's duplicate set DI:{set}: {tool} marks {n} record(s) {more} of it than Picard)",
                    d.what
                );
                self.sets_diff.add_differing(&d);
            }
        }
        if !self.pending.is_empty() {
            let wanted: BTreeSet<&(String, u16)> = self.pending.iter().map(|(k, _)| k).collect();
            let marked = marked_primaries(ours, &wanted)?;
            for (key, mut d) in std::mem::take(&mut self.pending) {
                if !marked.contains(&key) {
                    d.what = format!("{}, and {tool} does not mark its primary record", d.what);
                    self.sets_diff.add_differing(&d);
                }
            }
        }
        Ok((self.exact, Some(self.sets_diff)))
    }
}

/// Of the (name, segment bits) in `wanted`, those whose primary record in
/// `path` is marked duplicate.
fn marked_primaries(
    path: &Path,
    wanted: &BTreeSet<&(String, u16)>,
) -> Result<BTreeSet<(String, u16)>, AsamError> {
    let mut bam = BamFile::open(path)?;
    let mut out = BTreeSet::new();
    while let Some(r) = bam.next()? {
        let flags = u16::from(r.flags());
        if flags & NOT_PRIMARY != 0 || flags & DUPLICATE == 0 {
            continue;
        }
        let name = r
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|| "*".into());
        let key = (name, flags & SEGMENT_BITS);
        if wanted.contains(&key) {
            out.insert(key);
        }
    }
    Ok(out)
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

/// Collects read names of differing records: a count, the distinct
/// names (the first [`MAX_NAMES`] reported) and the first difference.
#[derive(Default)]
struct Differences {
    records: usize,
    names: BTreeSet<String>,
    first: Option<(u64, String)>,
}

impl Differences {
    fn add(&mut self, name: &str, records: usize) {
        self.records += records;
        self.names.insert(name.to_string());
    }

    /// One record, with what differs; the earliest (by `seq`) is `first`.
    fn add_differing(&mut self, d: &Differing) {
        self.add(&d.name, 1);
        if self.first.as_ref().is_none_or(|(seq, _)| d.seq < *seq) {
            self.first = Some((d.seq, d.what.clone()));
        }
    }

    fn into_result(
        self,
        tool: &str,
        gate: Gate,
        ours: &Path,
        theirs: &Path,
    ) -> Result<(), GateError> {
        if self.records == 0 {
            return Ok(());
        }
        Err(GateError::Failed(Box::new(Mismatch {
            tool: tool.to_string(),
            gate,
            records: self.records,
            read_count: self.names.len(),
            reads: self.names.into_iter().take(MAX_NAMES).collect(),
            first: self.first.map(|(_, what)| what),
            ours: ours.display().to_string(),
            theirs: theirs.display().to_string(),
        })))
    }
}

/// Fails unless every library's counts in our metrics file (Picard's
/// format) equal those in Picard's, and the same libraries appear.
pub fn check_metrics(ours: &Path, picard: &Path) -> Result<Passed, GateError> {
    let mine = crate::metrics::read_metrics(ours)?;
    let theirs = crate::metrics::read_metrics(picard)?;
    let mut diff = Differences::default();
    let mut seq = 0;
    let mut differ = |library: &str, what: String| {
        seq += 1;
        diff.add_differing(&Differing {
            seq,
            name: library.to_string(),
            what: format!("library {library}: {what}"),
        });
    };
    for m in &mine {
        match theirs.iter().find(|p| p.library == m.library) {
            Some(p) if p.counts() == m.counts() => {}
            Some(p) => {
                let (column, a, b) = crate::metrics::COLUMNS[1..]
                    .iter()
                    .zip(m.counts().into_iter().zip(p.counts()))
                    .find(|(_, (a, b))| a != b)
                    .map(|(c, (a, b))| (*c, a, b))
                    .unwrap_or(("counts", 0, 0));
                differ(&m.library, format!("{column} {a}, Picard's {b}"));
            }
            None => differ(&m.library, "not in Picard's metrics".into()),
        }
    }
    for p in theirs
        .iter()
        .filter(|p| !mine.iter().any(|m| m.library == p.library))
    {
        differ(&p.library, "only in Picard's metrics".into());
    }
    diff.into_result(ARROWSAM, Gate::Metrics, ours, picard)?;
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
    rname: String,
    pos: usize,
    /// Picard's duplicate set (its DI tag; duplicate gate only).
    set: Option<i64>,
}

impl Line {
    /// The read, its segment and where: `r7 (second of pair, chr1:218)`.
    fn describe(&self) -> String {
        let segment = match self.flags & SEGMENT_BITS {
            0x40 => "first of pair",
            0x80 => "second of pair",
            _ => "unpaired",
        };
        let kind = match self.flags & NOT_PRIMARY {
            0 => "",
            0x100 => ", secondary",
            _ => ", supplementary",
        };
        let place = if self.rname == "*" {
            "unplaced".to_string()
        } else {
            format!("{}:{}", self.rname, self.pos)
        };
        format!("{} ({segment}{kind}, {place})", self.name)
    }
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
    /// Records in one of Picard's duplicate sets (a DI tag).
    in_sets: u64,
    /// Primary records of pairs with both reads mapped, marked duplicate:
    /// Picard tags these with their set.
    pair_duplicates: u64,
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
            in_sets: 0,
            pair_duplicates: 0,
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
        let (name, flags, rname, pos) = identity(&path, &header, r)?;
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
        let set = match (self.mode, r.data().get(&DUPLICATE_SET_INDEX)) {
            (Mode::Duplicates, Some(v)) => v
                .map_err(|e| bad(&path, &format!("record {name}: DI tag"), e))?
                .as_int(),
            _ => None,
        };
        self.records += 1;
        self.duplicates += u64::from(flags & DUPLICATE != 0);
        self.in_sets += u64::from(set.is_some());
        self.pair_duplicates += u64::from(
            flags & DUPLICATE != 0 && flags & 0x1 != 0 && flags & (0x4 | 0x8 | NOT_PRIMARY) == 0,
        );
        Ok(Some(Line {
            key,
            name,
            flags,
            text,
            rname,
            pos,
            set,
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
    merge(&mut a, &mut b, |run| match run {
        Run::Ours(lines) | Run::Theirs(lines) => lines.iter().for_each(|l| diff.add(&l.name, 1)),
        Run::Both(x, y) => multiset_difference(x, y, &mut diff),
    })?;
    diff.into_result(ARROWSAM, Gate::Order, ours, samtools_sorted)?;
    Ok(Passed {
        records: a.records,
        duplicates: 0,
    })
}

/// The runs of one key: one side's only, or both sides'.
enum Run {
    Ours(Vec<Line>),
    Theirs(Vec<Line>),
    Both(Vec<Line>, Vec<Line>),
}

/// Walks the runs of two coordinate-sorted files side by side, in
/// coordinate order: a run only one side has goes to `f` alone, runs with
/// the same key together.
fn merge(a: &mut Lines, b: &mut Lines, mut f: impl FnMut(Run)) -> Result<(), AsamError> {
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
                    f(Run::Ours(run));
                }
                ra = a.next_run()?;
            }
            Ordering::Greater => {
                if let Some((_, run)) = rb.take() {
                    f(Run::Theirs(run));
                }
                rb = b.next_run()?;
            }
            Ordering::Equal => {
                if let (Some((_, x)), Some((_, y))) = (ra.take(), rb.take()) {
                    f(Run::Both(x, y));
                }
                ra = a.next_run()?;
                rb = b.next_run()?;
            }
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

    /// A BAM of SAM records (coordinate-sorted), written with noodles.
    fn bam_of(dir: &Path, name: &str, records: &[String]) -> std::path::PathBuf {
        let text = format!(
            "@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:chr1\tLN:1000\n{}\n",
            records.join("\n")
        );
        let mut reader = sam::io::Reader::new(text.as_bytes());
        let header = reader.read_header().unwrap();
        let path = dir.join(name);
        let mut w = bam::io::Writer::new(File::create(&path).unwrap());
        w.write_header(&header).unwrap();
        for r in reader.records() {
            w.write_alignment_record(&header, &r.unwrap()).unwrap();
        }
        w.try_finish().unwrap();
        path
    }

    /// Picard's marks on pairs A and B (one duplicate set, DI 1: B
    /// marked), C (no duplicate) and B's supplementary alignment; a tool's
    /// output is the same records with its own flags: `marks` names the
    /// records it marks, as "A1" (A, first of pair) ... "Bs".
    fn marked(dir: &Path, name: &str, marks: &[&str], picard: bool) -> std::path::PathBuf {
        let rec = |id: &str, flag: u16, pos: u32, pnext: u32| {
            let dup = if marks.contains(&id) { DUPLICATE } else { 0 };
            let set = if picard && !id.starts_with('C') && id != "Bs" {
                "\tDI:i:1\tDS:i:2"
            } else {
                ""
            };
            format!(
                "{}\t{}\tchr1\t{pos}\t60\t4M\t=\t{pnext}\t0\tACGT\tIIII{set}",
                &id[..1],
                flag | dup
            )
        };
        let records = [
            rec("A1", 99, 100, 300),
            rec("B1", 99, 100, 300),
            rec("C1", 99, 150, 350),
            rec("A2", 147, 300, 100),
            rec("B2", 147, 300, 100),
            rec("C2", 147, 350, 150),
            rec("Bs", 0x800 | 0x40 | 0x20 | 0x1, 500, 300),
        ];
        bam_of(dir, name, &records)
    }

    #[test]
    fn a_marker_may_keep_another_member_of_a_set_but_not_mark_more_or_fewer() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let picard = marked(d, "picard.bam", &["B1", "B2"], true);
        let check = |marks: &[&str]| {
            let tool = marked(d, "tool.bam", marks, false);
            check_marker("tool", &tool, &picard).map_err(|e| e.to_string())
        };
        // Picard's own marks: no record differs.
        let a = check(&["B1", "B2"]).unwrap();
        assert_eq!((a.records, a.duplicates, a.differing_records), (7, 2, 0));
        assert_eq!(a.duplicate_sets.map(|g| g.duplicates), Some(2));
        // A kept where Picard keeps B (samblaster's first pair): passes,
        // four records differ from Picard's, reported; the exact gate
        // (ArrowSAM's) fails.
        let a = check(&["A1", "A2"]).unwrap();
        assert_eq!((a.differing_records, a.differing_reads), (4, 2));
        assert_eq!(a.reads, ["A", "B"]);
        let tool = marked(d, "tool.bam", &["A1", "A2"], false);
        let e = check_duplicates(&tool, &picard).unwrap_err().to_string();
        assert!(e.contains("arrowsam: duplicate set differs"), "{e}");
        // Every alignment of a marked read (samblaster's design) passes.
        let a = check(&["B1", "B2", "Bs"]).unwrap();
        assert_eq!(a.differing_records, 1);
        // A record marked outside every set fails, naming it first.
        let e = check(&["B1", "B2", "C2"]).unwrap_err();
        assert!(
            e.contains("tool: duplicate sets differ")
                && e.contains("1 records of 1 reads differ")
                && e.contains("first: C (second of pair, chr1:350) is marked duplicate by tool, not by Picard;"),
            "{e}"
        );
        // One end of a duplicate pair left unmarked: its set is short.
        let e = check(&["B2"]).unwrap_err();
        assert!(
            e.contains("first: B (first of pair, chr1:100) is marked duplicate by Picard, not by tool (Picard's duplicate set DI:1: tool marks 1 record(s) fewer of it than Picard)"),
            "{e}"
        );
        // A whole set marked: one pair too many.
        let e = check(&["A1", "A2", "B1", "B2"]).unwrap_err();
        assert!(e.contains("first: A (first of pair, chr1:100) is marked duplicate by tool, not by Picard (Picard's duplicate set DI:1: tool marks 2 record(s) more"), "{e}");
        // A supplementary alignment marked, its primary not.
        let e = check(&["A1", "A2", "Bs"]).unwrap_err();
        assert!(
            e.contains("1 records of 1 reads differ")
                && e.contains("first: B (first of pair, supplementary, chr1:500) is marked duplicate by tool, not by Picard, and tool does not mark its primary record;"),
            "{e}"
        );
        // A record the tool lost.
        let lost = bam_of(
            d,
            "lost.bam",
            &["A\t99\tchr1\t100\t60\t4M\t=\t300\t0\tACGT\tIIII".to_string()],
        );
        let e = check_marker("tool", &lost, &picard)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("first: B (first of pair, chr1:100) is only in Picard's BAM"),
            "{e}"
        );
        // A reference without Picard's set tags cannot decide: an error,
        // not a verdict.
        let untagged = marked(d, "untagged.bam", &["B1", "B2"], false);
        let tool = marked(d, "tool.bam", &["B1", "B2"], false);
        let e = check_marker("tool", &tool, &untagged).unwrap_err();
        assert!(
            matches!(&e, GateError::Read(_)) && e.to_string().contains("TAG_DUPLICATE_SET_MEMBERS"),
            "{e}"
        );
    }

    #[test]
    fn samblasters_orphans_are_its_own_but_no_other_markers() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // A pair's first read and an orphan (its mate unmapped) share a 5'
        // end: Picard marks the orphan, samblaster marks orphans only as
        // duplicates of orphans.
        let records = |orphan_flag: u16| {
            [
                "A\t99\tchr1\t100\t60\t4M\t=\t300\t0\tACGT\tIIII".to_string(),
                format!("O\t{orphan_flag}\tchr1\t100\t60\t4M\t=\t100\t0\tACGT\tIIII"),
                "A\t147\tchr1\t300\t60\t4M\t=\t100\t0\tACGT\tIIII".to_string(),
            ]
        };
        let orphan = 0x1 | 0x8 | 0x40;
        let picard = bam_of(d, "picard.bam", &records(orphan | DUPLICATE));
        let tool = bam_of(d, "tool.bam", &records(orphan));
        let a = check_marker("samblaster", &tool, &picard).unwrap();
        assert_eq!(
            (a.differing_records, a.reads.clone()),
            (1, vec!["O".to_string()])
        );
        let e = check_marker("bamsormadup", &tool, &picard)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("first: O (first of pair, chr1:100) is marked duplicate by Picard, not by bamsormadup;"),
            "{e}"
        );
    }

    #[test]
    fn the_metrics_gate_names_the_first_differing_column() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, row: &str| {
            let p = dir.path().join(name);
            let cols = crate::metrics::COLUMNS.join("\t");
            std::fs::write(
                &p,
                format!("## METRICS CLASS\tpicard.sam.DuplicationMetrics\n{cols}\n{row}\n\n"),
            )
            .unwrap();
            p
        };
        let picard = file("p.txt", "lib1\t0\t7858\t10\t40\t0\t788\t74\t0.10028\t39794");
        let ours = file("o.txt", "lib1\t0\t7858\t10\t40\t0\t788\t75\t0.10028\t39843");
        let e = check_metrics(&ours, &picard).unwrap_err().to_string();
        assert!(
            e.contains("first: library lib1: READ_PAIR_OPTICAL_DUPLICATES 75, Picard's 74"),
            "{e}"
        );
    }

    #[test]
    fn a_mismatch_lists_twenty_names_and_the_count() {
        let mut d = Differences::default();
        for i in 0..25 {
            d.add(&format!("read{i:02}"), 2);
        }
        let e = d
            .into_result(
                ARROWSAM,
                Gate::Duplicates,
                Path::new("a.bam"),
                Path::new("p.bam"),
            )
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
