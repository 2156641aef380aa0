//! `asam-preproc`: sorting + duplicate marking time of Picard, Sambamba,
//! samtools and ArrowSAM on one synthetic aligned data set. The agent stays
//! free of arrow: it runs the `testbed-asam` binary (`prepare`, then
//! `bench-preproc --json`) as a child process, reads its JSON lines into
//! the types testbed-asam prints them with (`testbed_lines::asam`) and
//! turns them into `stage_seconds` samples tagged `tool` and `stage`.
//!
//! `dataset` names a size preset (chromosomes × length, coverage); any of
//! them may be set explicitly, so a sweep over `dataset` walks the sizes
//! while the figure's x axis stays the label.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use testbed_lines::asam::{BenchLine, Prepared, StageResult, SummaryLine};

use super::child;
use super::{JobContext, ParamError, Summary, WorkloadError, defaults};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsamPreprocParams {
    /// Size preset and label: tiny | small | medium | large.
    pub dataset: String,
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
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
}

/// The tools `bench-preproc --tools` knows.
pub use testbed_lines::asam::TOOLS;

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

    pub fn validate(&self) -> Result<(), ParamError> {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
        let s = self.sizes().ok_or_else(|| {
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
        if self.tools.is_empty() {
            return Err(ParamError::new("tools", "name at least one tool"));
        }
        if let Some(t) = self.tools.iter().find(|t| !TOOLS.contains(&t.as_str())) {
            return Err(ParamError::new(
                "tools",
                format!("unknown tool {t:?}; known: {}", TOOLS.join(", ")),
            ));
        }
        if !(1..=256).contains(&self.threads) {
            return Err(ParamError::new("threads", "must be 1..=256"));
        }
        if self.timeout_seconds == 0 {
            return Err(ParamError::new("timeout_seconds", "must be at least 1"));
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

pub fn run_with_binary(
    p: &AsamPreprocParams,
    ctx: &JobContext,
    bin: &Path,
) -> Result<Summary, WorkloadError> {
    p.validate()
        .map_err(|e| WorkloadError::Other(e.to_string()))?;
    let sizes = p
        .sizes()
        .ok_or_else(|| WorkloadError::Other(format!("unknown data set {:?}", p.dataset)))?;
    let timeout = Duration::from_secs(p.timeout_seconds);
    let threads = p.threads.to_string();
    let prepare_args: Vec<String> = vec![
        "prepare".into(),
        "--dir".into(),
        p.data_dir().display().to_string(),
        "--name".into(),
        p.dataset.clone(),
        "--chromosomes".into(),
        sizes.chromosomes.to_string(),
        "--chromosome-length".into(),
        sizes.chromosome_length.to_string(),
        "--coverage".into(),
        sizes.coverage.to_string(),
        "--dup-fraction".into(),
        p.dup_fraction.to_string(),
        "--seed".into(),
        p.data_seed.to_string(),
        "--threads".into(),
        threads.clone(),
    ];
    let prepared: Vec<Prepared> =
        child::run_json(bin, &prepare_args, timeout, "testbed-asam prepare")?;
    let dataset = prepared
        .into_iter()
        .next()
        .ok_or_else(|| WorkloadError::Other("testbed-asam prepare printed nothing".into()))?;

    // The BAM scratch directory: private (mode 0700), removed on return.
    let workdir = child::private_dir(&format!("testbed-asam-{}-", ctx.job_id))?;
    let bench_args: Vec<String> = vec![
        "bench-preproc".into(),
        "--json".into(),
        "--sam".into(),
        dataset.sam.display().to_string(),
        "--tools".into(),
        p.tools.join(","),
        "--workdir".into(),
        workdir.path().display().to_string(),
        "--threads".into(),
        threads,
    ];
    let lines: Vec<BenchLine> =
        child::run_json(bin, &bench_args, timeout, "testbed-asam bench-preproc")?;
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
        } = st;
        let tags = BTreeMap::from([
            ("tool".to_string(), tool.clone()),
            ("stage".to_string(), stage.clone()),
        ]);
        ctx.emit_samples("stage_seconds", "s", i as u32, &tags, &[*seconds]);
        s.insert(
            format!("{tool}.{stage}_seconds"),
            serde_json::json!(seconds),
        );
        s.insert("records".into(), serde_json::json!(records));
        if let Some(d) = duplicates {
            s.insert(format!("{tool}.duplicates"), serde_json::json!(d));
        }
    }
    for tool in &p.tools {
        if !s.contains_key(&format!("{tool}.markdup_seconds")) {
            return Err(WorkloadError::Other(format!(
                "testbed-asam bench-preproc reported no markdup stage for {tool}"
            )));
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
    s.insert(
        "arrowsam.dup_mismatches_vs_picard".into(),
        serde_json::json!(verification.dup_mismatches_vs_picard),
    );
    s.insert(
        "arrowsam.order_matches_samtools".into(),
        serde_json::json!(verification.order_matches_samtools),
    );
    s.insert("dataset.pairs".into(), serde_json::json!(dataset.pairs));
    s.insert(
        "dataset.duplicate_pairs".into(),
        serde_json::json!(dataset.duplicate_pairs),
    );
    s.insert("dataset.cached".into(), serde_json::json!(dataset.cached));
    Ok(s)
}

/// An asam-preproc point in one line: each tool's sort + markdup seconds
/// (what the figure sums) and ArrowSAM's checks against Picard and samtools.
pub fn preproc_line(summary: &Summary) -> Option<String> {
    let num = |k: String| summary.get(&k).and_then(serde_json::Value::as_f64);
    let tools: Vec<String> = TOOLS
        .iter()
        .filter_map(|t| {
            let total = num(format!("{t}.sort_seconds"))? + num(format!("{t}.markdup_seconds"))?;
            Some(format!("{t} {total:.3} s"))
        })
        .collect();
    if tools.is_empty() {
        return None;
    }
    let mut line = format!("sort+markdup: {}", tools.join(", "));
    if let Some(n) = num("arrowsam.dup_mismatches_vs_picard".into()) {
        line.push_str(&format!(
            "; arrowsam vs picard: {n:.0} duplicate flags differ"
        ));
    }
    if let Some(same) = summary
        .get("arrowsam.order_matches_samtools")
        .and_then(serde_json::Value::as_bool)
    {
        let verdict = if same { "matches" } else { "DIFFERS from" };
        line.push_str(&format!(", order {verdict} samtools"));
    }
    Some(line)
}

impl super::WorkloadParams for AsamPreprocParams {
    fn validate(
        &self,
        _devices: &BTreeMap<String, crate::protocol::DeviceRef>,
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
            M::summary("sort_seconds", "s", &["tool"]),
            M::summary("markdup_seconds", "s", &["tool"]),
            M::summary("duplicates", "", &["tool"]),
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
        assert_eq!(p.tools.len(), 4);
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
        assert!(params(serde_json::json!({"dataset": "tiny", "bogus": 1})).is_err());
        assert!(params(serde_json::json!({})).is_err());
    }

    #[test]
    fn stage_and_summary_lines_make_samples_and_the_summary() {
        let p = params(serde_json::json!({"dataset": "tiny", "tools": ["picard", "arrowsam"]}))
            .unwrap();
        let dataset: Prepared = serde_json::from_value(serde_json::json!({
            "sam": "/d/aligned.sam", "reference": "/d/ref.fa", "cached": true,
            "pairs": 100, "duplicate_pairs": 10,
        }))
        .unwrap();
        let out = [
            r#"{"tool":"picard","stage":"sort","seconds":1.5,"records":200,"duplicates":null}"#,
            r#"{"tool":"picard","stage":"markdup","seconds":2.0,"records":200,"duplicates":20}"#,
            r#"{"tool":"arrowsam","stage":"markdup","seconds":0.5,"records":200,"duplicates":20}"#,
            r#"{"summary":true,"verification":{"dup_mismatches_vs_picard":0,"order_matches_samtools":null,"order_first_difference":null}}"#,
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
        assert_eq!(s["arrowsam.duplicates"], 20);
        assert!(!s.contains_key("picard.sort_duplicates"));
        assert_eq!(s["records"], 200);
        assert_eq!(s["arrowsam.dup_mismatches_vs_picard"], 0);
        assert!(s["arrowsam.order_matches_samtools"].is_null());
        assert_eq!(s["dataset.pairs"], 100);
        assert_eq!(s["dataset.cached"], true);
        assert_eq!(sink.0.lock().unwrap().len(), 3);
        // Without the summary line, or a markdup stage of a tool, it fails.
        let e = record(&p, &ctx, &dataset, &lines[..3]).unwrap_err();
        assert!(e.to_string().contains("no summary"), "{e}");
        let e = record(&p, &ctx, &dataset, &lines[..1]).unwrap_err();
        assert!(e.to_string().contains("markdup"), "{e}");
    }

    fn real_binary() -> PathBuf {
        crate::workload::child::built_binary(
            crate::workload::registry::ASAM.env,
            crate::workload::registry::ASAM.binary,
        )
    }

    #[test]
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
        assert_eq!(s["arrowsam.dup_mismatches_vs_picard"], 0, "{s:?}");
        assert!(s["arrowsam.duplicates"].as_u64().unwrap() > 0, "{s:?}");
        assert_eq!(s["arrowsam.duplicates"], s["picard.duplicates"]);
        let chunks = sink.0.lock().unwrap();
        let stages: Vec<(String, String)> = chunks
            .iter()
            .map(|c| (c.tags["tool"].clone(), c.tags["stage"].clone()))
            .collect();
        for want in [
            ("picard", "sort"),
            ("picard", "markdup"),
            ("arrowsam", "load"),
            ("arrowsam", "sort"),
            ("arrowsam", "markdup"),
        ] {
            assert!(
                stages.contains(&(want.0.to_string(), want.1.to_string())),
                "{stages:?}"
            );
        }
        assert!(
            chunks
                .iter()
                .all(|c| c.metric == "stage_seconds" && c.unit == "s")
        );
    }

    #[test]
    fn the_preproc_line_sums_sort_and_markdup_and_shows_the_checks() {
        let summary: Summary = [
            ("picard.sort_seconds", serde_json::json!(2.0)),
            ("picard.markdup_seconds", serde_json::json!(3.5)),
            ("sambamba.sort_seconds", serde_json::json!(0.5)),
            ("arrowsam.sort_seconds", serde_json::json!(0.04)),
            ("arrowsam.markdup_seconds", serde_json::json!(0.05)),
            ("arrowsam.dup_mismatches_vs_picard", serde_json::json!(0)),
            ("arrowsam.order_matches_samtools", serde_json::json!(false)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(
            preproc_line(&summary).unwrap(),
            "sort+markdup: picard 5.500 s, arrowsam 0.090 s; arrowsam vs picard: 0 duplicate flags differ, order DIFFERS from samtools"
        );
    }

    #[test]
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
        assert_eq!(r.unwrap()["arrowsam.order_matches_samtools"], true);
    }
}
