//! Duplicate metrics in Picard's format (`## METRICS CLASS
//! picard.sam.DuplicationMetrics`), counted from duplicate-marked ArrowSAM
//! batches the way Picard's MarkDuplicates counts them, so that tools that
//! read Picard's file (MultiQC, pipelines' QC gates) read ours.
//!
//! READ_PAIR_OPTICAL_DUPLICATES comes from duplicate marking (Picard's
//! optical count, [`crate::optical`]), as do the duplicate-set sizes of the
//! histogram section after the metrics (with, for a single library, the
//! expected return on investment of more sequencing, `CoverageMult`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use arrow::array::RecordBatch;

use crate::markdup::{SetSizeHistogram, libraries, library_of};
use crate::schema::{Columns, flag};
use crate::{AsamError, Result};

/// One library's row of Picard's DuplicationMetrics.
#[derive(Debug, Clone, PartialEq)]
pub struct DuplicationMetrics {
    pub library: String,
    /// Primary mapped reads without a mapped mate (fragments).
    pub unpaired_reads_examined: u64,
    /// Pairs with both mates mapped (primary records / 2).
    pub read_pairs_examined: u64,
    pub secondary_or_supplementary_rds: u64,
    pub unmapped_reads: u64,
    pub unpaired_read_duplicates: u64,
    /// Duplicate pairs (duplicate records of mapped pairs / 2).
    pub read_pair_duplicates: u64,
    pub read_pair_optical_duplicates: u64,
    pub percent_duplication: f64,
    pub estimated_library_size: Option<u64>,
}

/// The column names, in Picard's order.
pub const COLUMNS: [&str; 10] = [
    "LIBRARY",
    "UNPAIRED_READS_EXAMINED",
    "READ_PAIRS_EXAMINED",
    "SECONDARY_OR_SUPPLEMENTARY_RDS",
    "UNMAPPED_READS",
    "UNPAIRED_READ_DUPLICATES",
    "READ_PAIR_DUPLICATES",
    "READ_PAIR_OPTICAL_DUPLICATES",
    "PERCENT_DUPLICATION",
    "ESTIMATED_LIBRARY_SIZE",
];

impl DuplicationMetrics {
    fn new(library: &str) -> Self {
        DuplicationMetrics {
            library: library.to_string(),
            unpaired_reads_examined: 0,
            read_pairs_examined: 0,
            secondary_or_supplementary_rds: 0,
            unmapped_reads: 0,
            unpaired_read_duplicates: 0,
            read_pair_duplicates: 0,
            read_pair_optical_duplicates: 0,
            percent_duplication: 0.0,
            estimated_library_size: None,
        }
    }

    /// Picard's DuplicationMetrics.calculateDerivedFields.
    fn derive(&mut self) {
        self.estimated_library_size = estimate_library_size(
            self.read_pairs_examined
                .saturating_sub(self.read_pair_optical_duplicates),
            self.read_pairs_examined
                .saturating_sub(self.read_pair_duplicates),
        );
        let examined = self.unpaired_reads_examined + 2 * self.read_pairs_examined;
        self.percent_duplication = if examined == 0 {
            0.0
        } else {
            (self.unpaired_read_duplicates + 2 * self.read_pair_duplicates) as f64 / examined as f64
        };
    }

    /// The counts only (what two tools must agree on exactly).
    pub fn counts(&self) -> [u64; 7] {
        [
            self.unpaired_reads_examined,
            self.read_pairs_examined,
            self.secondary_or_supplementary_rds,
            self.unmapped_reads,
            self.unpaired_read_duplicates,
            self.read_pair_duplicates,
            self.read_pair_optical_duplicates,
        ]
    }
}

/// Counts per library over duplicate-marked batches (every record, as
/// Picard counts while writing its output), with the optical duplicate
/// pairs per library that duplicate marking found
/// ([`crate::markdup::Marked::optical_pairs`]); libraries sorted by name.
pub fn duplication_metrics(
    batches: &[RecordBatch],
    header_text: &str,
    optical_pairs: &BTreeMap<String, u64>,
) -> Result<Vec<DuplicationMetrics>> {
    let libs = libraries(header_text);
    let mut by_library: BTreeMap<String, DuplicationMetrics> = BTreeMap::new();
    for b in batches {
        let c = Columns::of(b)?;
        for i in 0..b.num_rows() {
            let library = library_of(c.tagss.value(i), &libs);
            let m = by_library
                .entry(library.to_string())
                .or_insert_with(|| DuplicationMetrics::new(library));
            let f = c.flags.value(i);
            let fragment = f & flag::PAIRED == 0 || f & flag::MATE_UNMAPPED != 0;
            if f & flag::UNMAPPED != 0 {
                m.unmapped_reads += 1;
                continue;
            }
            if f & (flag::SECONDARY | flag::SUPPLEMENTARY) != 0 {
                m.secondary_or_supplementary_rds += 1;
                continue;
            }
            let duplicate = f & flag::DUPLICATE != 0;
            if fragment {
                m.unpaired_reads_examined += 1;
                m.unpaired_read_duplicates += u64::from(duplicate);
            } else {
                // Both records of a pair count; halved below, as Picard does.
                m.read_pairs_examined += 1;
                m.read_pair_duplicates += u64::from(duplicate);
            }
        }
    }
    Ok(by_library
        .into_values()
        .map(|mut m| {
            m.read_pairs_examined /= 2;
            m.read_pair_duplicates /= 2;
            m.read_pair_optical_duplicates = optical_pairs.get(&m.library).copied().unwrap_or(0);
            m.derive();
            m
        })
        .collect())
}

/// Picard's DuplicationMetrics.estimateLibrarySize: the library size under
/// Lander-Waterman, solved by bisection; None unless there are pairs and
/// duplicates among them (or the inputs are inconsistent).
pub fn estimate_library_size(read_pairs: u64, unique_read_pairs: u64) -> Option<u64> {
    let duplicates = read_pairs.checked_sub(unique_read_pairs)?;
    if read_pairs == 0 || duplicates == 0 {
        return None;
    }
    let (n, c) = (read_pairs as f64, unique_read_pairs as f64);
    let f = |x: f64| c / x - 1.0 + (-n / x).exp();
    let (mut m, mut big_m) = (1.0f64, 100.0f64);
    if c >= n || f(m * c) < 0.0 {
        return None;
    }
    while f(big_m * c) > 0.0 {
        big_m *= 10.0;
    }
    for _ in 0..40 {
        let r = (m + big_m) / 2.0;
        let u = f(r * c);
        if u == 0.0 {
            break;
        } else if u > 0.0 {
            m = r;
        } else {
            big_m = r;
        }
    }
    // Java's (long) cast truncates toward zero.
    Some((c * (m + big_m) / 2.0) as u64)
}

/// A double as htsjdk's FormatUtil prints it: at most 6 decimals, no
/// trailing zeros.
fn format_double(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// The metrics file's text: Picard's two header blocks (the command line
/// and a start note), the metrics class line, the column names, one row
/// per library, a blank line, then the histogram section as htsjdk
/// prints it (when `sets` is given).
pub fn metrics_text(
    metrics: &[DuplicationMetrics],
    sets: Option<&SetSizeHistogram>,
    command_line: &str,
) -> String {
    let mut out = String::new();
    out.push_str("## htsjdk.samtools.metrics.StringHeader\n");
    out.push_str(&format!("# {}\n", command_line.replace('\n', " ")));
    out.push_str("## htsjdk.samtools.metrics.StringHeader\n");
    out.push_str(&format!(
        "# Written by {} {}\n\n",
        crate::bam_out::PROGRAM,
        env!("CARGO_PKG_VERSION")
    ));
    out.push_str("## METRICS CLASS\tpicard.sam.DuplicationMetrics\n");
    out.push_str(&COLUMNS.join("\t"));
    out.push('\n');
    for m in metrics {
        let mut row = vec![m.library.clone()];
        row.extend(m.counts().iter().map(u64::to_string));
        row.push(format_double(m.percent_duplication));
        row.push(
            m.estimated_library_size
                .map(|n| n.to_string())
                .unwrap_or_default(),
        );
        out.push_str(&row.join("\t"));
        out.push('\n');
    }
    out.push('\n');
    if let Some(sets) = sets {
        out.push_str(&histogram_text(metrics, sets));
    }
    // htsjdk ends the file with a newline after the (maybe empty)
    // histogram section.
    out.push('\n');
    out
}

/// Picard's ROI estimate: how many more unique pairs x times the
/// sequencing would give, relative to the unique pairs seen.
fn estimate_roi(library_size: u64, x: f64, pairs: u64, unique_pairs: u64) -> f64 {
    let size = library_size as f64;
    size * (1.0 - (-(x * pairs as f64) / size).exp()) / unique_pairs as f64
}

/// The histogram section: htsjdk's MetricsFile prints the non-empty
/// histograms side by side over the union of their bins (keys as Java
/// prints a double: `1.0`), labelled by the first one's bin label. Picard
/// puts the ROI first when there is one library with a library size.
fn histogram_text(metrics: &[DuplicationMetrics], sets: &SetSizeHistogram) -> String {
    let mut columns: Vec<(&str, BTreeMap<u64, f64>)> = Vec::new();
    let mut bin_label = "set_size";
    if let [m] = metrics
        && let Some(size) = m.estimated_library_size
    {
        let unique = m.read_pairs_examined - m.read_pair_duplicates;
        let roi = (1..=100u64)
            .map(|x| {
                let v = estimate_roi(size, x as f64, m.read_pairs_examined, unique);
                (x, v)
            })
            .collect();
        columns.push(("CoverageMult", roi));
        bin_label = "BIN";
    }
    for (label, h) in [
        ("all_sets", &sets.all_sets),
        ("optical_sets", &sets.optical_sets),
        ("non_optical_sets", &sets.non_optical_sets),
    ] {
        if !h.is_empty() {
            columns.push((label, h.iter().map(|(k, v)| (*k, *v as f64)).collect()));
        }
    }
    if columns.is_empty() {
        return String::new();
    }
    let bins: std::collections::BTreeSet<u64> = columns
        .iter()
        .flat_map(|(_, h)| h.keys().copied())
        .collect();
    let mut out = String::from("## HISTOGRAM\tjava.lang.Double\n");
    out.push_str(bin_label);
    for (label, _) in &columns {
        out.push('\t');
        out.push_str(label);
    }
    out.push('\n');
    for bin in bins {
        out.push_str(&format!("{bin}.0"));
        for (_, h) in &columns {
            out.push('\t');
            out.push_str(&format_double(h.get(&bin).copied().unwrap_or(0.0)));
        }
        out.push('\n');
    }
    out
}

/// Writes [`metrics_text`] to `path`.
pub fn write_metrics(
    path: &Path,
    metrics: &[DuplicationMetrics],
    sets: Option<&SetSizeHistogram>,
    command_line: &str,
) -> Result<()> {
    let mut f = std::fs::File::create(path).map_err(|e| AsamError::io(path, e))?;
    f.write_all(metrics_text(metrics, sets, command_line).as_bytes())
        .map_err(|e| AsamError::io(path, e))
}

/// Reads the DuplicationMetrics rows of a Picard metrics file (ours or
/// Picard's).
pub fn read_metrics(path: &Path) -> Result<Vec<DuplicationMetrics>> {
    let text = std::fs::read_to_string(path).map_err(|e| AsamError::io(path, e))?;
    parse_metrics(&text).map_err(|e| AsamError::Invalid(format!("{}: {e}", path.display())))
}

/// Parses the metrics section of Picard's metrics file text.
pub fn parse_metrics(text: &str) -> std::result::Result<Vec<DuplicationMetrics>, String> {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with("## METRICS CLASS"));
    let class = lines.next().ok_or("no `## METRICS CLASS` line")?;
    if !class.ends_with("DuplicationMetrics") {
        return Err(format!("not duplication metrics: {class:?}"));
    }
    let columns: Vec<&str> = lines.next().ok_or("no column names")?.split('\t').collect();
    let col = |name: &str| {
        columns
            .iter()
            .position(|c| *c == name)
            .ok_or(format!("no column {name}"))
    };
    let idx: Vec<usize> = COLUMNS
        .iter()
        .map(|c| col(c))
        .collect::<std::result::Result<_, _>>()?;
    let mut out = Vec::new();
    for line in lines.take_while(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let get = |i: usize| f.get(idx[i]).copied().unwrap_or("");
        let n = |i: usize| {
            get(i)
                .parse::<u64>()
                .map_err(|e| format!("{} {:?}: {e}", COLUMNS[i], get(i)))
        };
        out.push(DuplicationMetrics {
            library: get(0).to_string(),
            unpaired_reads_examined: n(1)?,
            read_pairs_examined: n(2)?,
            secondary_or_supplementary_rds: n(3)?,
            unmapped_reads: n(4)?,
            unpaired_read_duplicates: n(5)?,
            read_pair_duplicates: n(6)?,
            read_pair_optical_duplicates: n(7)?,
            percent_duplication: get(8)
                .parse()
                .map_err(|e| format!("PERCENT_DUPLICATION {:?}: {e}", get(8)))?,
            estimated_library_size: match get(9) {
                "" => None,
                s => Some(
                    s.parse()
                        .map_err(|e| format!("ESTIMATED_LIBRARY_SIZE {s:?}: {e}"))?,
                ),
            },
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_size_is_picards_bisection() {
        // Values Picard 2.27.5 printed for these inputs (9 pairs, 2 unique:
        // 2; see tests/preproc_picard.rs for the end-to-end comparison).
        assert_eq!(estimate_library_size(9, 2), Some(2));
        assert_eq!(estimate_library_size(10, 10), None);
        assert_eq!(estimate_library_size(0, 0), None);
        assert_eq!(estimate_library_size(3, 5), None);
        // Few duplicates: a library much larger than the pairs seen.
        let big = estimate_library_size(1_000_000, 999_000).unwrap();
        assert!(big > 400_000_000 && big < 600_000_000, "{big}");
    }

    #[test]
    fn set_sizes_count_optical_and_non_optical_parts() {
        let mut h = SetSizeHistogram::default();
        h.add(1, 0);
        h.add(1, 0);
        h.add(3, 1);
        h.add(2, 1);
        assert_eq!(h.all_sets, BTreeMap::from([(1, 2), (2, 1), (3, 1)]));
        assert_eq!(h.optical_sets, BTreeMap::from([(2, 2)]));
        assert_eq!(h.non_optical_sets, BTreeMap::from([(1, 3), (2, 1)]));
        // Two libraries: no ROI; bins as Java prints doubles.
        let m = [DuplicationMetrics::new("a"), DuplicationMetrics::new("b")];
        let text = metrics_text(&m, Some(&h), "x");
        let section = &text[text.find("## HISTOGRAM").unwrap()..];
        assert_eq!(
            section,
            "## HISTOGRAM\tjava.lang.Double\nset_size\tall_sets\toptical_sets\tnon_optical_sets\n1.0\t2\t0\t3\n2.0\t1\t2\t1\n3.0\t1\t0\t0\n\n"
        );
    }

    #[test]
    fn doubles_print_as_htsjdk_does() {
        assert_eq!(format_double(16.0 / 21.0), "0.761905");
        assert_eq!(format_double(0.0), "0");
        assert_eq!(format_double(0.25), "0.25");
    }

    #[test]
    fn the_text_reads_back() {
        let mut m = DuplicationMetrics::new("lib1");
        m.unpaired_reads_examined = 3;
        m.read_pairs_examined = 9;
        m.unpaired_read_duplicates = 2;
        m.read_pair_duplicates = 7;
        m.derive();
        let text = metrics_text(std::slice::from_ref(&m), None, "testbed-asam x");
        assert!(text.contains("## METRICS CLASS\tpicard.sam.DuplicationMetrics\n"));
        assert!(
            text.contains("\nlib1\t3\t9\t0\t0\t2\t7\t0\t0.761905\t2\n"),
            "{text}"
        );
        let back = parse_metrics(&text).unwrap();
        assert_eq!(back[0].counts(), m.counts());
        assert_eq!(back[0].estimated_library_size, Some(2));
    }
}
