//! What the agent asks `testbed-asam` to do. `testbed-asam request FILE`
//! reads one [`AsamRequest`]; `testbed-asam prepare --dir …` parses the
//! same [`PrepareRequest`] from its flags (feature `cli`), so the agent's
//! field and the helper's flag are one declaration.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One command of `testbed-asam`, as JSON: `{"command": "prepare", …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum AsamRequest {
    Prepare(Box<PrepareRequest>),
    BenchPreproc(BenchPreprocRequest),
    Workflow(WorkflowRequest),
}

impl AsamRequest {
    /// The subcommand it stands for, for messages.
    pub fn command(&self) -> &'static str {
        match self {
            AsamRequest::Prepare(_) => "prepare",
            AsamRequest::BenchPreproc(_) => "bench-preproc",
            AsamRequest::Workflow(_) => "workflow",
        }
    }
}

/// Whole genome, or exome: reads from exon-like targets only (plus
/// `off_target` of them from anywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Wgs,
    Wes,
}

/// `prepare`: make (or find cached) a data set, generated from a size
/// preset with any of its parameters overridden, or the user's files (the
/// `paper` size), aligned by bwa.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct PrepareRequest {
    /// The cache root; data sets go in <dir>/<name>-<key>.
    #[cfg_attr(feature = "cli", arg(long))]
    pub dir: PathBuf,
    /// Size preset: tiny, small, medium, paper (default: --name when it
    /// names one, else tiny).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub size: Option<String>,
    /// Label of the data set (the cache directory's prefix); default the
    /// size.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub name: Option<String>,
    /// Contig lengths as a fraction of hg19's.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub scale: Option<f64>,
    /// How many of chr1..22, X, Y, M to make.
    #[cfg_attr(feature = "cli", arg(long, alias = "chromosomes"))]
    #[serde(default)]
    pub contigs: Option<u32>,
    /// Length of chr1 (sets --scale; the others follow hg19).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub chromosome_length: Option<u64>,
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub coverage: Option<f64>,
    /// 100 or 150.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub read_length: Option<u32>,
    /// Fraction of all pairs that are duplicates.
    #[cfg_attr(feature = "cli", arg(long, alias = "dup-rate"))]
    #[serde(default)]
    pub dup_fraction: Option<f64>,
    /// Fraction of duplicates that are optical.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub optical_fraction: Option<f64>,
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub libraries: Option<u32>,
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub lanes: Option<u32>,
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    #[serde(default)]
    pub mode: Option<Mode>,
    /// WES: fraction of fragments from outside the targets.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub off_target: Option<f64>,
    /// Fraction of chimeric fragments (read 2 from elsewhere).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub chimera_rate: Option<f64>,
    /// Fraction of fragments from outside the reference (unmapped pairs).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub contaminant_rate: Option<f64>,
    /// Fraction of fragments shorter than a read (adapter in the read).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub short_fragment_rate: Option<f64>,
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub sample: Option<String>,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1))]
    #[serde(default = "one")]
    pub seed: u64,
    /// bwa mem -t (the SAM does not depend on it).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 2))]
    #[serde(default = "two")]
    pub threads: usize,
    /// paper: the reference FASTA.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub reference: Option<PathBuf>,
    /// paper: read 1 FASTQ (may be .gz).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub reads1: Option<PathBuf>,
    /// paper: read 2 FASTQ (may be .gz).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub reads2: Option<PathBuf>,
    /// paper: the truth VCF, if any.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub truth_vcf: Option<PathBuf>,
    /// paper: known sites VCF for BQSR, if any.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub known_sites: Option<PathBuf>,
    /// paper: capture targets BED (WES), if any.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub targets_bed: Option<PathBuf>,
    /// paper: LB of the read group.
    #[cfg_attr(feature = "cli", arg(long, default_value = "lib1"))]
    #[serde(default = "lib1")]
    pub library: String,
}

impl PrepareRequest {
    /// The tiny preset in `dir`, every other field at its default (the
    /// command line's defaults: a test holds the two equal).
    pub fn new(dir: PathBuf) -> PrepareRequest {
        PrepareRequest {
            dir,
            size: None,
            name: None,
            scale: None,
            contigs: None,
            chromosome_length: None,
            coverage: None,
            read_length: None,
            dup_fraction: None,
            optical_fraction: None,
            libraries: None,
            lanes: None,
            mode: None,
            off_target: None,
            chimera_rate: None,
            contaminant_rate: None,
            short_fragment_rate: None,
            sample: None,
            seed: one(),
            threads: two(),
            reference: None,
            reads1: None,
            reads2: None,
            truth_vcf: None,
            known_sites: None,
            targets_bed: None,
            library: lib1(),
        }
    }
}

/// `bench-preproc`: sort and mark duplicates of one SAM by each tool, every
/// stage timed; one line per stage, then a summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct BenchPreprocRequest {
    #[cfg_attr(feature = "cli", arg(long))]
    pub sam: PathBuf,
    /// Of crate::asam::TOOLS.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_delimiter = ',',
            default_value = "picard,sambamba,samtools,arrowsam"
        )
    )]
    #[serde(default = "default_tools")]
    pub tools: Vec<String>,
    /// Where every tool writes its sorted, duplicate-marked BAM
    /// (`<tool>.md.bam`), its intermediate and temporary files, and the
    /// gates their reference BAMs: one place for all tools.
    #[cfg_attr(feature = "cli", arg(long, alias = "workdir"))]
    pub out_dir: PathBuf,
    /// Where the ArrowSAM store's private directory (mode 0700) is made;
    /// default /dev/shm.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub store_dir: Option<PathBuf>,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 2))]
    #[serde(default = "two")]
    pub threads: usize,
    /// ArrowSAM cuts a batch at this many rows (a chromosome spans several
    /// batches); string columns are also cut below 1 GiB.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1 << 20))]
    #[serde(default = "default_max_batch_rows")]
    pub max_batch_rows: usize,
    /// JSON lines (the only output format; accepted for symmetry with
    /// testbed-flight).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub json: bool,
}

impl BenchPreprocRequest {
    /// Every field but the two paths at its default.
    pub fn new(sam: PathBuf, out_dir: PathBuf) -> BenchPreprocRequest {
        BenchPreprocRequest {
            sam,
            tools: default_tools(),
            out_dir,
            store_dir: None,
            threads: two(),
            max_batch_rows: default_max_batch_rows(),
            json: false,
        }
    }
}

/// `workflow`: the variant-calling workflow in one data placement; JSON
/// lines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct WorkflowRequest {
    /// The data set's prepared.json (what `testbed-asam prepare` made).
    #[cfg_attr(feature = "cli", arg(long))]
    pub prepared: PathBuf,
    /// disk | ramdisk | pipes | arrowsam | arrowsam-fused
    #[cfg_attr(feature = "cli", arg(long))]
    pub placement: String,
    /// samtools | picard | sambamba | samblaster | bamsormadup (disk and
    /// ramdisk; pipes is samtools, samblaster or bamsormadup).
    #[cfg_attr(feature = "cli", arg(long, default_value = "samtools"))]
    #[serde(default = "samtools")]
    pub baseline: String,
    #[cfg_attr(
        feature = "cli",
        arg(long, value_delimiter = ',', default_value = "bcftools")
    )]
    #[serde(default = "default_callers")]
    pub callers: Vec<String>,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 2))]
    #[serde(default = "two")]
    pub threads: usize,
    /// Parent of the disk placement's files.
    #[cfg_attr(feature = "cli", arg(long))]
    pub disk_dir: PathBuf,
    /// Parent of tmpfs files.
    #[cfg_attr(feature = "cli", arg(long, default_value = "/dev/shm"))]
    #[serde(default = "dev_shm")]
    pub ram_dir: PathBuf,
    /// CPU samples per second (0: none).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 10.0))]
    #[serde(default = "ten")]
    pub cpu_hz: f64,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 3600))]
    #[serde(default = "an_hour")]
    pub timeout_seconds: u64,
    /// BQSR before calling (arrowsam only).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub bqsr: bool,
    /// Hardware counters per stage where there is a PMU.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub counters: bool,
    /// Check ArrowSAM's order and duplicates against samtools and Picard,
    /// and samblaster's or bamsormadup's duplicate sets against Picard's.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub check: bool,
    /// JSON lines (the only output format).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub json: bool,
}

impl WorkflowRequest {
    /// Every field but these three at its default.
    pub fn new(prepared: PathBuf, placement: &str, disk_dir: PathBuf) -> WorkflowRequest {
        WorkflowRequest {
            prepared,
            placement: placement.to_string(),
            baseline: samtools(),
            callers: default_callers(),
            threads: two(),
            disk_dir,
            ram_dir: dev_shm(),
            cpu_hz: ten(),
            timeout_seconds: an_hour(),
            bqsr: false,
            counters: false,
            check: false,
            json: false,
        }
    }
}

fn one() -> u64 {
    1
}

fn two() -> usize {
    2
}

fn ten() -> f64 {
    10.0
}

fn an_hour() -> u64 {
    3600
}

fn lib1() -> String {
    "lib1".into()
}

fn samtools() -> String {
    "samtools".into()
}

fn dev_shm() -> PathBuf {
    PathBuf::from("/dev/shm")
}

fn default_callers() -> Vec<String> {
    vec!["bcftools".into()]
}

fn default_tools() -> Vec<String> {
    ["picard", "sambamba", "samtools", "arrowsam"]
        .map(String::from)
        .to_vec()
}

fn default_max_batch_rows() -> usize {
    1 << 20
}

#[cfg(all(test, feature = "cli"))]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    enum Cli {
        Prepare(Box<PrepareRequest>),
        BenchPreproc(BenchPreprocRequest),
        Workflow(WorkflowRequest),
    }

    fn parse(args: &[&str]) -> Cli {
        Cli::parse_from(std::iter::once("testbed-asam").chain(args.iter().copied()))
    }

    fn json(v: serde_json::Value) -> AsamRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_command_lines_defaults_are_the_requests() {
        let Cli::Prepare(p) = parse(&["prepare", "--dir", "/d"]) else {
            panic!()
        };
        assert_eq!(*p, PrepareRequest::new("/d".into()));
        assert_eq!(
            json(serde_json::json!({"command": "prepare", "dir": "/d"})),
            AsamRequest::Prepare(p)
        );
        let Cli::BenchPreproc(b) = parse(&["bench-preproc", "--sam", "/a.sam", "--out-dir", "/o"])
        else {
            panic!()
        };
        assert_eq!(b, BenchPreprocRequest::new("/a.sam".into(), "/o".into()));
        assert_eq!(
            json(serde_json::json!({"command": "bench-preproc", "sam": "/a.sam", "out_dir": "/o"})),
            AsamRequest::BenchPreproc(b)
        );
        let Cli::Workflow(w) = parse(&[
            "workflow",
            "--prepared",
            "/p.json",
            "--placement",
            "pipes",
            "--disk-dir",
            "/d",
        ]) else {
            panic!()
        };
        assert_eq!(
            w,
            WorkflowRequest::new("/p.json".into(), "pipes", "/d".into())
        );
        assert_eq!(
            json(
                serde_json::json!({"command": "workflow", "prepared": "/p.json", "placement": "pipes", "disk_dir": "/d"})
            ),
            AsamRequest::Workflow(w)
        );
    }

    #[test]
    fn a_request_round_trips_and_an_unknown_field_is_named() {
        let mut p = PrepareRequest::new("/d".into());
        p.mode = Some(Mode::Wes);
        p.dup_fraction = Some(0.2);
        let r = AsamRequest::Prepare(Box::new(p));
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""command":"prepare""#), "{text}");
        assert_eq!(serde_json::from_str::<AsamRequest>(&text).unwrap(), r);
        let e = serde_json::from_value::<AsamRequest>(
            serde_json::json!({"command": "prepare", "dir": "/d", "dup_rate": 0.2}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("dup_rate"), "{e}");
    }
}
