//! `asam-preproc`: sorting + duplicate marking time of Picard, Sambamba,
//! samtools and ArrowSAM on one synthetic aligned data set. The agent stays
//! free of arrow: it runs the `testbed-asam` binary (`prepare`, then
//! `bench-preproc --json`) as a child process, reads its JSON lines into
//! the types testbed-asam prints them with (`testbed_vocab::asam`) and
//! turns them into `stage_seconds` samples tagged `tool` and `stage`.
//!
//! Every tool goes from the same SAM file to a sorted, duplicate-marked
//! BAM in one output directory, each stage it needs timed (see
//! testbed-asam's `bench` module); Picard's JVM start-up is its own stage
//! (`jvm-startup`). A point fails when a correctness gate fails
//! (bench-preproc exits non-zero naming the tool and the first differing
//! read) or its summary lacks a passed gate: ArrowSAM's order, duplicates
//! and metrics, and every other tool's duplicate sets against Picard's.
//!
//! `dataset` names a size preset (chromosomes × length, coverage); any of
//! them may be set explicitly, so a sweep over `dataset` walks the sizes
//! while the figure's x axis stays the label.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use testbed_vocab::asam::{BenchLine, Prepared, STAGES, StageResult, SummaryLine};
use testbed_vocab::request::asam::{AsamRequest, BenchPreprocRequest, PrepareRequest};

use super::child;
use super::{JobContext, ParamError, Summary, WorkloadError, defaults};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsamPreprocParams {
    /// Size preset and label: tiny | small | medium | large, or paper: the
    /// user's own reads and reference (`reference`, `reads1`, `reads2`).
    pub dataset: String,
    /// paper: the reference FASTA (absolute; indexed by bwa into the cache).
    #[serde(default)]
    pub reference: Option<String>,
    /// paper: read 1 and read 2 FASTQ of one paired-end library (absolute;
    /// may be gzipped).
    #[serde(default)]
    pub reads1: Option<String>,
    #[serde(default)]
    pub reads2: Option<String>,
    /// Overrides of the preset.
    #[serde(default)]
    pub chromosomes: Option<u32>,
    #[serde(default)]
    pub chromosome_length: Option<u64>,
    #[serde(default)]
    pub coverage: Option<f64>,
    /// Fraction of read pairs injected once more as PCR duplicates.
    #[serde(default = "default_dup_fraction")]
    pub dup_fraction: f64,
    #[serde(default = "default_tools")]
    pub tools: Vec<String>,
    /// Seed of the data set (reference, reads, duplicates). Fixed, not the
    /// point's seed, so every point and repetition reads the same data and
    /// the cached set is reused.
    #[serde(default = "defaults::one_u64")]
    pub data_seed: u64,
    /// Threads of bwa, sambamba, samtools and arrowsam's per-chromosome workers.
    #[serde(default = "default_threads")]
    pub threads: u32,
    /// Where data sets are cached (default `$TESTBED_CACHE/asam`,
    /// `~/.cache/testbed/asam`).
    #[serde(default)]
    pub data_dir: Option<String>,
    /// Parent of every tool's output and scratch directory (absolute; the
    /// default is the temp dir). In the VM the spec points it at the ext4
    /// scratch device, so every tool writes to the same disk.
    #[serde(default)]
    pub out_dir: Option<String>,
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
}

/// The tools `bench-preproc --tools` knows.
pub use testbed_vocab::asam::TOOLS;

/// The data set of the user's own files.
pub const PAPER: &str = "paper";
/// What `sizes` stands for with the user's files: nothing to generate.
const PAPER_SIZES: Sizes = Sizes {
    chromosomes: 1,
    chromosome_length: 2000,
    coverage: 1.0,
};

/// (name, chromosomes, chromosome length, coverage)
pub const PRESETS: [(&str, u32, u64, f64); 4] = [
    ("tiny", 2, 100_000, 5.0),
    ("small", 3, 300_000, 10.0),
    ("medium", 4, 1_000_000, 15.0),
    ("large", 8, 2_000_000, 20.0),
];

fn default_dup_fraction() -> f64 {
    0.1
}
fn default_tools() -> Vec<String> {
    TOOLS.iter().map(|s| s.to_string()).collect()
}
fn default_threads() -> u32 {
    2
}
fn default_timeout() -> u64 {
    3600
}

/// The `paper` data set's files, checked (absolute paths).
struct UserFiles<'a> {
    reference: &'a str,
    reads1: &'a str,
    reads2: &'a str,
}

/// The data set's sizes after the preset and the overrides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sizes {
    pub chromosomes: u32,
    pub chromosome_length: u64,
    pub coverage: f64,
}

impl AsamPreprocParams {
    pub fn sizes(&self) -> Option<Sizes> {
        let (_, c, l, x) = PRESETS.iter().find(|p| p.0 == self.dataset)?;
        Some(Sizes {
            chromosomes: self.chromosomes.unwrap_or(*c),
            chromosome_length: self.chromosome_length.unwrap_or(*l),
            coverage: self.coverage.unwrap_or(*x),
        })
    }

    /// The user's files of the `paper` data set, each required there and
    /// refused elsewhere.
    fn user_files(&self) -> Result<Option<UserFiles<'_>>, ParamError> {
        let given = [
            ("reference", self.reference.as_deref()),
            ("reads1", self.reads1.as_deref()),
            ("reads2", self.reads2.as_deref()),
        ];
        if self.dataset != PAPER {
            if let Some((field, _)) = given.iter().find(|(_, v)| v.is_some()) {
                return Err(ParamError::new(
                    *field,
                    format!("only the {PAPER:?} data set reads the user's files"),
                ));
            }
            return Ok(None);
        }
        let mut files = [""; 3];
        for (slot, (field, value)) in files.iter_mut().zip(given) {
            let v = value.ok_or_else(|| {
                ParamError::new(
                    field,
                    format!("the {PAPER:?} data set needs the user's {field} (an absolute path)"),
                )
            })?;
            if !v.starts_with('/') {
                return Err(ParamError::new(field, "must be an absolute path"));
            }
            *slot = v;
        }
        let [reference, reads1, reads2] = files;
        Ok(Some(UserFiles {
            reference,
            reads1,
            reads2,
        }))
    }

    pub fn validate(&self) -> Result<(), ParamError> {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.0).chain([PAPER]).collect();
        let user = self.user_files()?;
        let s = self.sizes().or(user.map(|_| PAPER_SIZES)).ok_or_else(|| {
            ParamError::new(
                "dataset",
                format!(
                    "unknown data set {:?}; known: {}",
                    self.dataset,
                    names.join(", ")
                ),
            )
        })?;
        if !(1..=100).contains(&s.chromosomes) {
            return Err(ParamError::new("chromosomes", "must be 1..=100"));
        }
        if s.chromosome_length < 2000 {
            return Err(ParamError::new(
                "chromosome_length",
                "must be at least 2000 (read pairs span about 300 bp)",
            ));
        }
        if !(s.coverage > 0.0 && s.coverage <= 1000.0) {
            return Err(ParamError::new("coverage", "must be > 0 and <= 1000"));
        }
        if !(0.0..1.0).contains(&self.dup_fraction) {
            return Err(ParamError::new("dup_fraction", "must be in [0, 1)"));
        }
        super::known_names("tools", "tool", &self.tools, &TOOLS)?;
        if !(1..=256).contains(&self.threads) {
            return Err(ParamError::new("threads", "must be 1..=256"));
        }
        if self.timeout_seconds == 0 {
            return Err(ParamError::new("timeout_seconds", "must be at least 1"));
        }
        for (field, d) in [("data_dir", &self.data_dir), ("out_dir", &self.out_dir)] {
            if let Some(d) = d
                && !d.starts_with('/')
            {
                return Err(ParamError::new(field, "must be an absolute path"));
            }
        }
        Ok(())
    }

    fn data_dir(&self) -> PathBuf {
        if let Some(d) = &self.data_dir {
            return PathBuf::from(d);
        }
        std::env::var_os("TESTBED_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/testbed")))
            .unwrap_or_else(std::env::temp_dir)
            .join("asam")
    }
}

/// `$TESTBED_ASAM_BIN`, then `testbed-asam` on PATH, then /bin.
pub fn asam_binary() -> Option<PathBuf> {
    super::registry::ASAM.find()
}

pub fn run(p: &AsamPreprocParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    let bin = asam_binary().ok_or_else(|| {
        WorkloadError::Other("testbed-asam not found ($TESTBED_ASAM_BIN, PATH, /bin)".into())
    })?;
    run_with_binary(p, ctx, &bin)
}

/// `testbed-asam prepare` of the data set `p` names (cached in its data
/// directory): the aligned SAM and its provenance.
pub fn prepare_dataset(p: &AsamPreprocParams, bin: &Path) -> Result<Prepared, WorkloadError> {
    let timeout = Duration::from_secs(p.timeout_seconds);
    let user = p
        .user_files()
        .map_err(|e| WorkloadError::Other(e.to_string()))?;
    let request = match user {
        // The user's reads and reference, checked, indexed and aligned by
        // `prepare` (cached by their contents).
        Some(files) => {
            let mut r = PrepareRequest::new(p.data_dir());
            r.size = Some(PAPER.into());
            r.threads = p.threads as usize;
            r.reference = Some(files.reference.into());
            r.reads1 = Some(files.reads1.into());
            r.reads2 = Some(files.reads2.into());
            r
        }
        None => generated_request(p)?,
    };
    let prepared: Vec<Prepared> = child::run_request(
        bin,
        &AsamRequest::Prepare(Box::new(request)),
        timeout,
        "testbed-asam prepare",
    )?;
    let dataset = prepared
        .into_iter()
        .next()
        .ok_or_else(|| WorkloadError::Other("testbed-asam prepare printed nothing".into()))?;
    Ok(dataset)
}

/// `prepare`'s request for a generated data set of `p`'s size.
fn generated_request(p: &AsamPreprocParams) -> Result<PrepareRequest, WorkloadError> {
    let sizes = p
        .sizes()
        .ok_or_else(|| WorkloadError::Other(format!("unknown data set {:?}", p.dataset)))?;
    let mut r = PrepareRequest::new(p.data_dir());
    r.name = Some(p.dataset.clone());
    r.contigs = Some(sizes.chromosomes);
    r.chromosome_length = Some(sizes.chromosome_length);
    r.coverage = Some(sizes.coverage);
    r.dup_fraction = Some(p.dup_fraction);
    r.seed = p.data_seed;
    r.threads = p.threads as usize;
    Ok(r)
}

pub fn run_with_binary(
    p: &AsamPreprocParams,
    ctx: &JobContext,
    bin: &Path,
) -> Result<Summary, WorkloadError> {
    p.validate()
        .map_err(|e| WorkloadError::Other(e.to_string()))?;
    let timeout = Duration::from_secs(p.timeout_seconds);
    let dataset = prepare_dataset(p, bin)?;

    // Every tool's output and scratch: private (mode 0700), removed on return.
    let prefix = format!("testbed-asam-{}-", ctx.job_id);
    let out_dir = match &p.out_dir {
        Some(parent) => child::private_dir_in(Path::new(parent), &prefix)?,
        None => child::private_dir(&prefix)?,
    };
    let mut bench = BenchPreprocRequest::new(dataset.sam.clone(), out_dir.path().to_path_buf());
    bench.tools = p.tools.clone();
    bench.threads = p.threads as usize;
    let lines: Vec<BenchLine> = child::run_request(
        bin,
        &AsamRequest::BenchPreproc(bench),
        timeout,
        "testbed-asam bench-preproc",
    )?;
    record(p, ctx, &dataset, &lines)
}

/// Samples and summary from bench-preproc's lines.
fn record(
    p: &AsamPreprocParams,
    ctx: &JobContext,
    dataset: &Prepared,
    lines: &[BenchLine],
) -> Result<Summary, WorkloadError> {
    let mut s = Summary::new();
    let stages = lines.iter().filter_map(|l| match l {
        BenchLine::Stage(st) => Some(st),
        BenchLine::Summary(_) => None,
    });
    for (i, st) in stages.enumerate() {
        let StageResult {
            tool,
            stage,
            seconds,
            records,
            duplicates,
            peak_rss_bytes,
            store_bytes,
        } = st;
        let tags = BTreeMap::from([
            ("tool".to_string(), tool.clone()),
            ("stage".to_string(), stage.clone()),
        ]);
        ctx.emit_samples("stage_seconds", "s", i as u32, &tags, &[*seconds]);
        // Memory in use at the stage's peak: the process's (or, for an
        // external tool, the largest of its processes') high-water mark,
        // plus what ArrowSAM's store holds on tmpfs. The store pages the
        // stage maps are in both, so ArrowSAM's is an upper bound.
        if let Some(rss) = peak_rss_bytes {
            let memory = rss + store_bytes.unwrap_or(0);
            ctx.emit_samples("stage_peak_memory_bytes", "B", i as u32, &tags, &[
                memory as f64,
            ]);
            s.insert(
                format!("{tool}.{stage}_peak_memory_bytes"),
                serde_json::json!(memory),
            );
        }
        if let Some(b) = store_bytes {
            ctx.emit_samples("stage_store_bytes", "B", i as u32, &tags, &[*b as f64]);
        }
        s.insert(
            format!("{tool}.{stage}_seconds"),
            serde_json::json!(seconds),
        );
        // A start-up stage handles no records.
        if stage != "jvm-startup" {
            s.insert("records".into(), serde_json::json!(records));
        }
        if let Some(d) = duplicates {
            s.insert(format!("{tool}.duplicates"), serde_json::json!(d));
        }
    }
    for tool in &p.tools {
        for stage in required_stages(tool) {
            if !s.contains_key(&format!("{tool}.{stage}_seconds")) {
                return Err(WorkloadError::Other(format!(
                    "testbed-asam bench-preproc reported no {stage} stage for {tool}"
                )));
            }
        }
    }
    let verification = lines
        .iter()
        .find_map(|l| match l {
            BenchLine::Summary(SummaryLine {
                summary: true,
                verification,
            }) => Some(verification),
            _ => None,
        })
        .ok_or_else(|| {
            WorkloadError::Other("testbed-asam bench-preproc printed no summary".into())
        })?;
    if p.tools.iter().any(|t| t == "arrowsam") {
        // bench-preproc fails on a failed gate; a summary without a passed
        // one means its gates did not run, and its numbers do not count.
        let (Some(dups), Some(order), Some(metrics)) = (
            verification.duplicates_vs_picard,
            verification.order_vs_samtools,
            verification.metrics_vs_picard,
        ) else {
            return Err(WorkloadError::Other(format!(
                "testbed-asam bench-preproc: ArrowSAM's correctness gates did not run: {verification:?}"
            )));
        };
        s.insert(
            "arrowsam.gate_duplicates_records".into(),
            serde_json::json!(dups.records),
        );
        s.insert(
            "arrowsam.gate_duplicates_marked".into(),
            serde_json::json!(dups.duplicates),
        );
        s.insert(
            "arrowsam.gate_order_records".into(),
            serde_json::json!(order.records),
        );
        s.insert(
            "arrowsam.gate_metrics_libraries".into(),
            serde_json::json!(metrics.records),
        );
    }
    // Every other tool's duplicate sets passed their gate against Picard's
    // (bench-preproc fails when one does not); a summary without it means
    // the gate did not run.
    for t in p
        .tools
        .iter()
        .filter(|t| !matches!(t.as_str(), "picard" | "arrowsam"))
    {
        let gate = verification
            .agreement
            .iter()
            .find(|a| &a.tool == t)
            .and_then(|a| a.duplicate_sets)
            .ok_or_else(|| {
                WorkloadError::Other(format!(
                    "testbed-asam bench-preproc: {t}'s duplicate-set gate did not run: {verification:?}"
                ))
            })?;
        s.insert(
            format!("{t}.gate_duplicate_sets_records"),
            serde_json::json!(gate.records),
        );
    }
    // Every other tool's duplicate set against Picard's record for record:
    // reported as the records that differ (0 = agrees exactly; the rest is
    // which member of a set a tool keeps, which its gate allows).
    for (i, a) in verification.agreement.iter().enumerate() {
        let tags = BTreeMap::from([("tool".to_string(), a.tool.clone())]);
        ctx.emit_samples(
            "duplicates_differing_from_picard",
            "records",
            i as u32,
            &tags,
            &[a.differing_records as f64],
        );
        let t = &a.tool;
        s.insert(
            format!("{t}.differing_from_picard"),
            serde_json::json!(a.differing_records),
        );
        s.insert(
            format!("{t}.differing_reads"),
            serde_json::json!(a.differing_reads),
        );
        if !a.reads.is_empty() {
            s.insert(
                format!("{t}.differing_reads_first"),
                serde_json::json!(a.reads),
            );
        }
    }
    s.insert("dataset.pairs".into(), serde_json::json!(dataset.pairs));
    s.insert(
        "dataset.duplicate_pairs".into(),
        serde_json::json!(dataset.duplicate_pairs),
    );
    s.insert("dataset.cached".into(), serde_json::json!(dataset.cached));
    Ok(s)
}

/// The stages every run of `tool` must report.
fn required_stages(tool: &str) -> &'static [&'static str] {
    match tool {
        "picard" => &["jvm-startup", "sort", "markdup"],
        "sambamba" => &["convert", "sort", "markdup"],
        "samtools" => &["fixmate", "sort", "markdup"],
        "arrowsam" => &["load", "sort", "markdup", "write"],
        "samblaster" => &["markdup", "sort"],
        "bamsormadup" => &["sort-markdup"],
        _ => &["sort", "markdup"],
    }
}

/// An asam-preproc point in one line: each tool's SAM-to-marked-BAM total
/// (every stage but Picard's separately timed JVM start-up), its sort +
/// markdup, Picard's start-up, and ArrowSAM's passed gates.
pub fn preproc_line(summary: &Summary) -> Option<String> {
    let num = |k: String| summary.get(&k).and_then(serde_json::Value::as_f64);
    let tools: Vec<String> = TOOLS
        .iter()
        .filter_map(|t| {
            let core = num(format!("{t}.sort-markdup_seconds")).or_else(|| {
                Some(num(format!("{t}.sort_seconds"))? + num(format!("{t}.markdup_seconds"))?)
            })?;
            let total: f64 = STAGES
                .iter()
                .filter(|s| **s != "jvm-startup")
                .filter_map(|s| num(format!("{t}.{s}_seconds")))
                .sum();
            Some(format!("{t} {total:.3} s ({core:.3} s)"))
        })
        .collect();
    if tools.is_empty() {
        return None;
    }
    let mut line = format!("SAM to marked BAM (sort+markdup): {}", tools.join(", "));
    if let Some(j) = num("picard.jvm-startup_seconds".into()) {
        line.push_str(&format!("; picard JVM start-up {j:.3} s per stage"));
    }
    let differing: Vec<String> = TOOLS
        .iter()
        .filter_map(|t| {
            let n = num(format!("{t}.differing_from_picard"))?;
            Some(if n == 0.0 {
                format!("{t} agrees")
            } else {
                format!("{t} {n:.0} records differ")
            })
        })
        .collect();
    if !differing.is_empty() {
        line.push_str(&format!(
            "; duplicates against picard's: {}",
            differing.join(", ")
        ));
    }
    if let Some(n) = num("arrowsam.gate_duplicates_records".into()) {
        line.push_str(&format!(
            "; arrowsam gates passed: duplicates = picard's, whole-record order = samtools', metrics = picard's ({n:.0} records)"
        ));
    }
    let gated: Vec<&str> = TOOLS
        .iter()
        .copied()
        .filter(|t| summary.contains_key(&format!("{t}.gate_duplicate_sets_records")))
        .collect();
    if !gated.is_empty() {
        line.push_str(&format!(
            "; duplicate sets = picard's: {}",
            gated.join(", ")
        ));
    }
    Some(line)
}

impl super::WorkloadParams for AsamPreprocParams {
    fn validate(
        &self,
        _devices: &BTreeMap<String, testbed_vocab::protocol::DeviceRef>,
    ) -> Result<(), ParamError> {
        AsamPreprocParams::validate(self)
    }
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run(self, ctx)
    }
    fn needs(&self) -> super::Needs {
        super::Needs {
            helpers: vec![super::registry::ASAM],
            host_steps: vec!["asam"],
            ..Default::default()
        }
    }
    fn metrics(&self) -> Vec<super::MetricInfo> {
        use super::MetricInfo as M;
        vec![
            M::raw("stage_seconds", "s", &["tool", "stage"]),
            M::raw("stage_peak_memory_bytes", "B", &["tool", "stage"]),
            M::raw("stage_store_bytes", "B", &["tool", "stage"]),
            M::raw("duplicates_differing_from_picard", "records", &["tool"]),
            M::summary("jvm-startup_seconds", "s", &["tool"]),
            M::summary("sort-markdup_seconds", "s", &["tool"]),
            M::summary("differing_from_picard", "records", &["tool"]),
            M::summary("differing_reads", "", &["tool"]),
            M::summary("convert_seconds", "s", &["tool"]),
            M::summary("fixmate_seconds", "s", &["tool"]),
            M::summary("load_seconds", "s", &["tool"]),
            M::summary("sort_seconds", "s", &["tool"]),
            M::summary("markdup_seconds", "s", &["tool"]),
            M::summary("write_seconds", "s", &["tool"]),
            M::summary("duplicates", "", &["tool"]),
            M::summary("jvm-startup_peak_memory_bytes", "B", &["tool"]),
            M::summary("convert_peak_memory_bytes", "B", &["tool"]),
            M::summary("fixmate_peak_memory_bytes", "B", &["tool"]),
            M::summary("load_peak_memory_bytes", "B", &["tool"]),
            M::summary("sort_peak_memory_bytes", "B", &["tool"]),
            M::summary("markdup_peak_memory_bytes", "B", &["tool"]),
            M::summary("sort-markdup_peak_memory_bytes", "B", &["tool"]),
            M::summary("write_peak_memory_bytes", "B", &["tool"]),
            M::summary("records", "", &[]),
        ]
    }
    fn show_lines(&self, summary: &Summary) -> Vec<String> {
        preproc_line(summary).into_iter().collect()
    }
    fn summary_scopes(&self) -> Option<(&'static str, Vec<String>)> {
        Some(("tool", self.tools.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    fn params(toml_like: serde_json::Value) -> Result<AsamPreprocParams, String> {
        let mut v = toml_like;
        v["kind"] = "asam-preproc".into();
        match serde_json::from_value::<Workload>(v).map_err(|e| e.to_string())? {
            Workload::AsamPreproc(p) => Ok(p),
            other => Err(format!("wrong kind {other:?}")),
        }
    }

    #[test]
    fn a_preset_gives_sizes_and_overrides_win() {
        let p = params(serde_json::json!({"dataset": "tiny"})).unwrap();
        assert_eq!(p.tools.len(), 6);
        assert_eq!(
            p.sizes(),
            Some(Sizes {
                chromosomes: 2,
                chromosome_length: 100_000,
                coverage: 5.0
            })
        );
        let p = params(serde_json::json!({"dataset": "small", "coverage": 2.5})).unwrap();
        assert_eq!(p.sizes().unwrap().coverage, 2.5);
        assert_eq!(p.sizes().unwrap().chromosomes, 3);
    }

    #[test]
    fn bad_parameters_name_their_field() {
        let field = |v: serde_json::Value| params(v).unwrap().validate().unwrap_err().field;
        assert_eq!(field(serde_json::json!({"dataset": "huge"})), "dataset");
        assert_eq!(
            field(serde_json::json!({"dataset": "tiny", "tools": ["gatk"]})),
            "tools"
        );
        assert_eq!(
            field(serde_json::json!({"dataset": "tiny", "tools": []})),
            "tools"
        );
        assert_eq!(
            field(serde_json::json!({"dataset": "tiny", "dup_fraction": 1.0})),
            "dup_fraction"
        );
        assert_eq!(
            field(serde_json::json!({"dataset": "tiny", "chromosome_length": 100})),
            "chromosome_length"
        );
        assert_eq!(
            field(serde_json::json!({"dataset": "tiny", "threads": 0})),
            "threads"
        );
        assert_eq!(
            field(serde_json::json!({"dataset": "tiny", "out_dir": "mnt/scratch"})),
            "out_dir"
        );
        assert!(params(serde_json::json!({"dataset": "tiny", "bogus": 1})).is_err());
        assert!(params(serde_json::json!({})).is_err());
    }

    #[test]
    fn the_paper_data_set_takes_the_users_three_files_and_only_it_does() {
        let field = |v: serde_json::Value| params(v).unwrap().validate().unwrap_err().field;
        let files = serde_json::json!({"dataset": "paper", "reference": "/d/ref.fa",
            "reads1": "/d/r1.fq.gz", "reads2": "/d/r2.fq.gz"});
        params(files.clone()).unwrap().validate().unwrap();
        let mut missing = files.clone();
        missing.as_object_mut().unwrap().remove("reads2");
        assert_eq!(field(missing), "reads2");
        let mut relative = files.clone();
        relative["reference"] = "ref.fa".into();
        assert_eq!(field(relative), "reference");
        assert_eq!(
            field(serde_json::json!({"dataset": "tiny", "reads1": "/d/r1.fq"})),
            "reads1"
        );
    }

    #[test]
    fn stage_and_summary_lines_make_samples_and_the_summary() {
        let p = params(
            serde_json::json!({"dataset": "tiny", "tools": ["picard", "samblaster", "arrowsam"]}),
        )
        .unwrap();
        let dataset: Prepared = serde_json::from_value(serde_json::json!({
            "sam": "/d/aligned.sam", "reference": "/d/ref.fa", "cached": true,
            "pairs": 100, "duplicate_pairs": 10,
        }))
        .unwrap();
        let stage = |tool: &str, stage: &str, seconds: f64, dups: &str| {
            format!(
                r#"{{"tool":"{tool}","stage":"{stage}","seconds":{seconds},"records":200,"duplicates":{dups}}}"#
            )
        };
        let passed = r#"{"summary":true,"verification":{"duplicates_vs_picard":{"records":200,"duplicates":20},"order_vs_samtools":{"records":200,"duplicates":0},"metrics_vs_picard":{"records":2,"duplicates":20},"agreement":[{"tool":"samblaster","records":200,"duplicates":21,"differing_records":4,"differing_reads":2,"reads":["r1","r7"],"duplicate_sets":{"records":200,"duplicates":21}}]}}"#;
        let with_memory = r#"{"tool":"arrowsam","stage":"sort","seconds":0.1,"records":200,"duplicates":null,"peak_rss_bytes":1000,"store_bytes":500}"#;
        let out = [
            stage("picard", "jvm-startup", 0.5, "null"),
            stage("picard", "sort", 1.5, "null"),
            stage("picard", "markdup", 2.0, "20"),
            stage("arrowsam", "load", 0.2, "null"),
            with_memory.to_string(),
            stage("arrowsam", "markdup", 0.5, "20"),
            stage("arrowsam", "write", 0.3, "20"),
            stage("samblaster", "markdup", 0.2, "21"),
            stage("samblaster", "sort", 0.4, "null"),
            passed.to_string(),
        ]
        .join("\n");
        let lines: Vec<BenchLine> = child::json_lines(&out, "bench-preproc").unwrap();
        let sink = std::sync::Arc::new(crate::workload::VecSink::default());
        let ctx = JobContext {
            job_id: 1,
            seed: 5,
            devices: BTreeMap::new(),
            sink: sink.clone(),
        };
        let s = record(&p, &ctx, &dataset, &lines).unwrap();
        assert_eq!(s["picard.sort_seconds"], 1.5);
        assert_eq!(s["picard.jvm-startup_seconds"], 0.5);
        assert_eq!(s["arrowsam.write_seconds"], 0.3);
        assert_eq!(s["arrowsam.duplicates"], 20);
        assert!(!s.contains_key("picard.sort_duplicates"));
        assert_eq!(s["records"], 200);
        assert_eq!(s["arrowsam.gate_duplicates_records"], 200);
        assert_eq!(s["arrowsam.gate_order_records"], 200);
        assert_eq!(s["arrowsam.gate_metrics_libraries"], 2);
        assert_eq!(s["samblaster.gate_duplicate_sets_records"], 200);
        assert_eq!(s["dataset.pairs"], 100);
        assert_eq!(s["dataset.cached"], true);
        // The sort's memory is the process's peak plus the store's bytes.
        assert_eq!(s["arrowsam.sort_peak_memory_bytes"], 1500);
        assert!(!s.contains_key("arrowsam.load_peak_memory_bytes"));
        assert_eq!(s["samblaster.differing_from_picard"], 4);
        assert_eq!(s["samblaster.differing_reads"], 2);
        assert_eq!(
            s["samblaster.differing_reads_first"],
            serde_json::json!(["r1", "r7"])
        );
        {
            let chunks = sink.0.lock().unwrap();
            // 9 stage times, the sort's memory and store, one agreement.
            assert_eq!(chunks.len(), 12);
            let a = chunks
                .iter()
                .find(|c| c.metric == "duplicates_differing_from_picard")
                .unwrap();
            assert_eq!(a.tags["tool"], "samblaster");
            assert_eq!(a.values, [4.0]);
        }
        // Without the summary line, a stage a tool needs, or a passed gate,
        // the point fails.
        let e = record(&p, &ctx, &dataset, &lines[..9]).unwrap_err();
        assert!(e.to_string().contains("no summary"), "{e}");
        let mut no_write = lines.clone();
        no_write.remove(6);
        let e = record(&p, &ctx, &dataset, &no_write).unwrap_err();
        assert!(e.to_string().contains("no write stage for arrowsam"), "{e}");
        let mut no_jvm = lines.clone();
        no_jvm.remove(0);
        let e = record(&p, &ctx, &dataset, &no_jvm).unwrap_err();
        assert!(e.to_string().contains("jvm-startup"), "{e}");
        let mut ungated = lines.clone();
        ungated[9] = child::json_line(
            r#"{"summary":true,"verification":{"duplicates_vs_picard":null,"order_vs_samtools":null}}"#,
            "bench-preproc",
        )
        .unwrap();
        let e = record(&p, &ctx, &dataset, &ungated).unwrap_err();
        assert!(e.to_string().contains("gates did not run"), "{e}");
        // A line of an older binary: no metrics gate, no duplicate-set gate.
        let old = |v: &str| {
            let mut l = lines.clone();
            l[9] = child::json_line(&passed.replace(v, ""), "bench-preproc").unwrap();
            record(&p, &ctx, &dataset, &l).unwrap_err().to_string()
        };
        let e = old(r#""metrics_vs_picard":{"records":2,"duplicates":20},"#);
        assert!(e.contains("gates did not run"), "{e}");
        let e = old(r#","duplicate_sets":{"records":200,"duplicates":21}"#);
        assert!(e.contains("samblaster's duplicate-set gate did not run"), "{e}");
    }

    fn real_binary() -> PathBuf {
        crate::workload::child::built_binary(
            crate::workload::registry::ASAM.env,
            crate::workload::registry::ASAM.binary,
        )
    }

    #[test]
    #[ignore = "simulates and aligns a data set with ART and bwa, then runs Picard (~8 s); ./x test runs it"]
    fn runs_prepare_and_bench_and_emits_tagged_stage_samples() {
        let data = tempfile::tempdir().unwrap();
        let p = params(serde_json::json!({
            "dataset": "tiny",
            "chromosome_length": 20000,
            "coverage": 3.0,
            "tools": ["picard", "arrowsam"],
            "data_dir": data.path().display().to_string(),
        }))
        .unwrap();
        let sink = std::sync::Arc::new(crate::workload::VecSink::default());
        let ctx = JobContext {
            job_id: 1,
            seed: 5,
            devices: BTreeMap::new(),
            sink: sink.clone(),
        };
        let s = run_with_binary(&p, &ctx, &real_binary()).unwrap();
        assert!(
            s["arrowsam.gate_duplicates_records"].as_u64().unwrap() > 0,
            "{s:?}"
        );
        assert!(s["arrowsam.duplicates"].as_u64().unwrap() > 0, "{s:?}");
        assert_eq!(s["arrowsam.duplicates"], s["picard.duplicates"]);
        let chunks = sink.0.lock().unwrap();
        let stages: Vec<(String, String)> = chunks
            .iter()
            .filter(|c| c.metric == "stage_seconds")
            .map(|c| (c.tags["tool"].clone(), c.tags["stage"].clone()))
            .collect();
        for want in [
            ("picard", "jvm-startup"),
            ("picard", "sort"),
            ("picard", "markdup"),
            ("arrowsam", "load"),
            ("arrowsam", "sort"),
            ("arrowsam", "markdup"),
            ("arrowsam", "write"),
        ] {
            assert!(
                stages.contains(&(want.0.to_string(), want.1.to_string())),
                "{stages:?}"
            );
        }
        // Time and peak memory of every stage (Picard's start-up has no
        // memory: it exits with an error status), the store only for
        // ArrowSAM's; nothing else.
        let of = |metric: &str| -> Vec<(String, String, String)> {
            chunks
                .iter()
                .filter(|c| c.metric == metric)
                .map(|c| (c.tags["tool"].clone(), c.tags["stage"].clone(), c.unit.clone()))
                .collect()
        };
        assert_eq!(of("stage_seconds").len(), 7);
        let memory = of("stage_peak_memory_bytes");
        assert_eq!(memory.len(), 6, "{memory:?}");
        assert!(memory.iter().all(|(_, st, u)| st != "jvm-startup" && u == "B"));
        let store = of("stage_store_bytes");
        assert_eq!(store.len(), 4, "{store:?}");
        assert!(store.iter().all(|(t, _, _)| t == "arrowsam"));
        assert_eq!(chunks.len(), 7 + 6 + 4);
        assert!(s["arrowsam.sort_peak_memory_bytes"].as_u64().unwrap() > 1 << 20);
    }

    #[test]
    #[ignore = "simulates and aligns a data set with ART and bwa, then runs its tools (~8 s); ./x test runs it"]
    fn runs_the_paper_data_set_from_a_users_fastq_pair_and_reference() {
        // A user's files: one read group's FASTQ pair of a small generated
        // set and its reference, given by path like any user's.
        let user = tempfile::tempdir().unwrap();
        let mut request = PrepareRequest::new(user.path().to_path_buf());
        request.name = Some("tiny".into());
        request.chromosome_length = Some(20_000);
        request.coverage = Some(3.0);
        let made = child::run_request::<_, Prepared>(
            &real_binary(),
            &AsamRequest::Prepare(Box::new(request)),
            Duration::from_secs(300),
            "prepare",
        )
        .unwrap()
        .remove(0);
        let rg = &made.read_groups[0];
        let data = tempfile::tempdir().unwrap();
        let p = params(serde_json::json!({
            "dataset": "paper",
            "reference": made.reference.display().to_string(),
            "reads1": rg.reads1.display().to_string(),
            "reads2": rg.reads2.display().to_string(),
            "tools": ["samtools", "arrowsam"],
            "data_dir": data.path().display().to_string(),
        }))
        .unwrap();
        let ctx = JobContext {
            job_id: 3,
            seed: 5,
            devices: BTreeMap::new(),
            sink: std::sync::Arc::new(crate::workload::VecSink::default()),
        };
        let s = run_with_binary(&p, &ctx, &real_binary()).unwrap();
        // Every pair of the user's files, aligned, and ArrowSAM's gates
        // passed on them (against an untimed Picard run).
        assert_eq!(s["dataset.pairs"], rg.pairs, "{s:?}");
        assert_eq!(s["records"].as_u64(), Some(2 * rg.pairs), "{s:?}");
        assert_eq!(s["arrowsam.gate_duplicates_records"], s["records"]);
        assert!(s["samtools.differing_from_picard"].is_u64(), "{s:?}");
    }

    #[test]
    fn the_preproc_line_sums_sort_and_markdup_and_shows_the_checks() {
        let summary: Summary = [
            ("picard.sort_seconds", serde_json::json!(2.0)),
            ("picard.markdup_seconds", serde_json::json!(3.5)),
            ("picard.jvm-startup_seconds", serde_json::json!(0.75)),
            ("sambamba.sort_seconds", serde_json::json!(0.5)),
            ("bamsormadup.sort-markdup_seconds", serde_json::json!(1.25)),
            ("bamsormadup.differing_from_picard", serde_json::json!(0)),
            ("samblaster.differing_from_picard", serde_json::json!(12)),
            ("arrowsam.load_seconds", serde_json::json!(0.25)),
            ("arrowsam.sort_seconds", serde_json::json!(0.04)),
            ("arrowsam.markdup_seconds", serde_json::json!(0.05)),
            ("arrowsam.write_seconds", serde_json::json!(0.5)),
            ("arrowsam.gate_duplicates_records", serde_json::json!(200)),
            (
                "samblaster.gate_duplicate_sets_records",
                serde_json::json!(200),
            ),
            (
                "bamsormadup.gate_duplicate_sets_records",
                serde_json::json!(200),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        // sambamba lacks markdup: left out. Picard's total leaves out its
        // separately timed start-up; ArrowSAM's counts load and write.
        assert_eq!(
            preproc_line(&summary).unwrap(),
            "SAM to marked BAM (sort+markdup): picard 5.500 s (5.500 s), bamsormadup 1.250 s (1.250 s), arrowsam 0.840 s (0.090 s); picard JVM start-up 0.750 s per stage; duplicates against picard's: samblaster 12 records differ, bamsormadup agrees; arrowsam gates passed: duplicates = picard's, whole-record order = samtools', metrics = picard's (200 records); duplicate sets = picard's: samblaster, bamsormadup"
        );
    }

    /// asam-preproc-quick's tools through the agent and the real binary:
    /// every gate ran and passed, ArrowSAM's metrics gate and the other
    /// markers' duplicate-set gates included.
    #[test]
    #[ignore = "simulates and aligns a data set with bwa, runs every tool and Picard's gate reference (~40 s); ./x test runs it"]
    fn every_tool_of_the_quick_spec_passes_its_gates() {
        let data = tempfile::tempdir().unwrap();
        let p = params(serde_json::json!({
            "dataset": "tiny",
            "chromosome_length": 20000,
            "coverage": 3.0,
            "data_dir": data.path().display().to_string(),
        }))
        .unwrap();
        assert_eq!(p.tools, TOOLS);
        let sink = std::sync::Arc::new(crate::workload::VecSink::default());
        let ctx = JobContext {
            job_id: 1,
            seed: 5,
            devices: BTreeMap::new(),
            sink,
        };
        let s = run_with_binary(&p, &ctx, &real_binary()).unwrap();
        assert_eq!(s["arrowsam.gate_metrics_libraries"], 2, "{s:?}");
        for t in ["sambamba", "samtools", "samblaster", "bamsormadup"] {
            assert_eq!(
                s[&format!("{t}.gate_duplicate_sets_records")],
                s["arrowsam.gate_duplicates_records"],
                "{t}: {s:?}"
            );
        }
    }

    #[test]
    #[ignore = "simulates and aligns a data set with ART and bwa (~4 s); ./x test runs it"]
    fn the_workdir_is_private_not_a_pre_created_one() {
        let data = tempfile::tempdir().unwrap();
        let victim = tempfile::tempdir().unwrap();
        // The BAM workdir used to be temp_dir/testbed-asam-<pid>-<job>:
        // another user could create it first, as a symlink.
        let planted =
            std::env::temp_dir().join(format!("testbed-asam-{}-{}", std::process::id(), 8));
        std::os::unix::fs::symlink(victim.path(), &planted).unwrap();
        let p = params(serde_json::json!({
            "dataset": "tiny",
            "chromosome_length": 20000,
            "coverage": 2.0,
            "tools": ["samtools", "arrowsam"],
            "data_dir": data.path().display().to_string(),
        }))
        .unwrap();
        let ctx = JobContext {
            job_id: 8,
            seed: 5,
            devices: BTreeMap::new(),
            sink: std::sync::Arc::new(crate::workload::VecSink::default()),
        };
        let r = run_with_binary(&p, &ctx, &real_binary());
        let _ = std::fs::remove_file(&planted);
        let left: Vec<_> = std::fs::read_dir(victim.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            left.is_empty(),
            "written through the planted symlink: {left:?}"
        );
        assert!(r.unwrap()["arrowsam.gate_order_records"].as_u64().unwrap() > 0);
    }
}
