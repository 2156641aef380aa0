//! Lines of `testbed-asam`.
//!
//! - `prepare`: one [`Prepared`] line.
//! - `bench-preproc --json`: one [`BenchLine::Stage`] per timed stage, then
//!   one [`BenchLine::Summary`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The tools `bench-preproc --tools` knows.
pub const TOOLS: [&str; 6] = [
    "picard",
    "sambamba",
    "samtools",
    "samblaster",
    "bamsormadup",
    "arrowsam",
];

/// Every stage a tool of `bench-preproc` reports, in pipeline order:
/// Picard's JVM start-up (timed on its own), sambamba's SAM -> BAM
/// conversion, samtools' fixmate, ArrowSAM's SAM -> Arrow load, then every
/// tool's sort and markdup (samblaster marks before it sorts; bamsormadup
/// does both in one pass, `sort-markdup`), and ArrowSAM's BAM write.
pub const STAGES: [&str; 8] = [
    "jvm-startup",
    "convert",
    "fixmate",
    "load",
    "sort",
    "markdup",
    "sort-markdup",
    "write",
];

/// What `prepare` made (or found cached); also the data set's
/// `prepared.json`. Fields after `duplicate_pairs` came with the realistic
/// generator and default when absent, so older lines still parse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    /// The aligned, unsorted SAM (bwa mem, every read group).
    pub sam: PathBuf,
    /// The FASTA reference, bwa-indexed (`<reference>.bwt`, ...).
    pub reference: PathBuf,
    pub cached: bool,
    /// Read pairs in the FASTQs, duplicates included.
    pub pairs: u64,
    /// Pairs that are a copy of another pair (PCR or optical); 0 when
    /// unknown (user files).
    pub duplicate_pairs: u64,
    /// The data set directory (the cache entry).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Size preset or label ("tiny", "small", "medium", "paper", ...).
    #[serde(default)]
    pub name: Option<String>,
    /// "wgs" or "wes".
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub read_length: Option<u32>,
    /// One FASTQ pair per read group, in the SAM header's @RG order.
    #[serde(default)]
    pub read_groups: Vec<PreparedReadGroup>,
    /// The sample's genotypes (VCFv4.2, phased GT); none for user data
    /// without one.
    #[serde(default)]
    pub truth_vcf: Option<PathBuf>,
    /// dbSNP-like sites-only VCF for BQSR masking.
    #[serde(default)]
    pub known_sites: Option<PathBuf>,
    /// WES capture targets (BED).
    #[serde(default)]
    pub targets_bed: Option<PathBuf>,
    /// Ground truth of duplicates: one row per pair (read_name, read_group,
    /// library, fragment, copies, kind = original|pcr|optical, ...).
    #[serde(default)]
    pub duplicates_tsv: Option<PathBuf>,
    #[serde(default)]
    pub optical_duplicate_pairs: Option<u64>,
    #[serde(default)]
    pub variants: Option<VariantCounts>,
    /// sha256 over the data set's files (names and contents; the bwa
    /// index and prepared.json left out).
    #[serde(default)]
    pub sha256: Option<String>,
    /// e.g. {"bwa": "0.7.17-r1188"}.
    #[serde(default)]
    pub tool_versions: std::collections::BTreeMap<String, String>,
    /// Version of the generator that made the data set.
    #[serde(default)]
    pub generator_version: Option<u32>,
    /// Every parameter of the data set (the generator's spec, or the user's
    /// files), as the cache key hashed them.
    #[serde(default)]
    pub params: Option<serde_json::Value>,
    /// Seconds the build took: "generate", "index", "align" (of the build
    /// that made the cache entry; a cached answer repeats them).
    #[serde(default)]
    pub seconds: std::collections::BTreeMap<String, f64>,
}

/// One read group of a prepared data set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreparedReadGroup {
    pub id: String,
    pub sample: String,
    pub library: String,
    pub platform: String,
    pub unit: String,
    pub reads1: PathBuf,
    pub reads2: PathBuf,
    pub pairs: u64,
}

impl PreparedReadGroup {
    /// The tab-separated `@RG` header line.
    pub fn header_line(&self) -> String {
        format!(
            "@RG\tID:{}\tSM:{}\tLB:{}\tPL:{}\tPU:{}",
            self.id, self.sample, self.library, self.platform, self.unit
        )
    }
}

/// Counts of the truth VCF and the known sites.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VariantCounts {
    pub snps: u64,
    pub indels: u64,
    pub het: u64,
    pub hom: u64,
    /// Records of the known-sites VCF (true sites and decoys).
    pub known_sites: u64,
}

/// One line of `bench-preproc`: a stage, or the closing summary. They
/// carry no tag and are told apart by their keys (`tool`, `stage`, ... vs
/// `summary`, `verification`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BenchLine {
    Stage(StageResult),
    Summary(SummaryLine),
}

/// One timed stage of one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageResult {
    pub tool: String,
    pub stage: String,
    pub seconds: f64,
    pub records: u64,
    /// Records with the duplicate bit after the stage (markdup stages).
    pub duplicates: Option<u64>,
    /// The stage's peak resident memory: an external tool's `wait4`
    /// ru_maxrss (the largest of its processes), ArrowSAM's own high-water
    /// mark over the stage (VmHWM, reset when the stage starts). Absent in
    /// lines of older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// What ArrowSAM's shared-memory store holds on tmpfs when the stage
    /// ends: memory in use outside any process between stages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_bytes: Option<u64>,
}

/// `bench-preproc`'s last line: `{"summary": true, "verification": ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryLine {
    /// Always true; marks the line.
    pub summary: bool,
    pub verification: Verification,
}

impl SummaryLine {
    pub fn new(verification: Verification) -> Self {
        SummaryLine {
            summary: true,
            verification,
        }
    }
}

/// The correctness gates. `bench-preproc` prints a summary only when
/// every gate passed (a failed gate exits non-zero naming the differing
/// reads), so a gate here is one that passed; `None` when its tool did not
/// run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    /// ArrowSAM's duplicate set equals Picard MarkDuplicates'.
    pub duplicates_vs_picard: Option<GatePassed>,
    /// ArrowSAM's records, whole, are in `samtools sort`'s order.
    pub order_vs_samtools: Option<GatePassed>,
    /// ArrowSAM's duplicate metrics have Picard's counts for every library
    /// (`records`: libraries; `duplicates`: duplicate reads). Absent in
    /// lines of older binaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_vs_picard: Option<GatePassed>,
    /// Every other tool's duplicate set against Picard's on the same
    /// input: how many records differ (reported), and the duplicate-set
    /// gate each passed ([`Agreement::duplicate_sets`]): which member of a
    /// set a tool keeps differs by design (samblaster keeps the first pair
    /// it sees, not the best-scoring one), the sets do not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agreement: Vec<Agreement>,
}

/// How far one tool's duplicate set is from Picard MarkDuplicates'.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agreement {
    pub tool: String,
    /// Records in the tool's BAM.
    pub records: u64,
    /// Of them, marked duplicate.
    pub duplicates: u64,
    /// Records whose duplicate bit differs from Picard's, or that only one
    /// side holds; 0 is exact agreement.
    pub differing_records: u64,
    /// Distinct read names among them.
    pub differing_reads: u64,
    /// The first of those names, sorted (at most 20).
    pub reads: Vec<String>,
    /// The duplicate-set gate passed: in each of Picard's duplicate sets
    /// the tool marks as many records as Picard, whichever it keeps, and
    /// elsewhere what Picard marks. Absent in lines of older binaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_sets: Option<GatePassed>,
}

/// What a passed gate compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatePassed {
    pub records: u64,
    /// Records marked duplicate (0 for the order gate).
    pub duplicates: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prepared_line_of_the_old_generator_still_parses() {
        let old = r#"{"sam":"/d/aligned.sam","reference":"/d/ref.fa","cached":true,"pairs":100,"duplicate_pairs":10}"#;
        let p: Prepared = serde_json::from_str(old).unwrap();
        assert!(p.read_groups.is_empty() && p.truth_vcf.is_none() && p.sha256.is_none());
        let back: Prepared = serde_json::from_value(serde_json::to_value(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn stage_and_summary_lines_are_told_apart_by_their_keys() {
        let stage =
            r#"{"tool":"picard","stage":"markdup","seconds":1.5,"records":8,"duplicates":null}"#;
        let summary = r#"{"summary":true,"verification":{"duplicates_vs_picard":{"records":8,"duplicates":2},"order_vs_samtools":null}}"#;
        let lines: Vec<BenchLine> = [stage, summary]
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(matches!(&lines[0], BenchLine::Stage(s) if s.duplicates.is_none()));
        assert!(matches!(
            &lines[1],
            BenchLine::Summary(s) if s.summary
                && s.verification.duplicates_vs_picard == Some(GatePassed { records: 8, duplicates: 2 })
                && s.verification.order_vs_samtools.is_none()
        ));
        for (l, text) in lines.iter().zip([stage, summary]) {
            let want: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_value(l).unwrap(), want);
        }
        assert!(serde_json::from_str::<BenchLine>(r#"{"tool":"picard"}"#).is_err());
    }
}
