//! `asam-workflow`: the variant-calling workflow with its intermediate data
//! in one placement (disk, ramdisk, pipes, ArrowSAM), via `testbed-asam
//! prepare` and `testbed-asam workflow --json`. Stages become
//! `stage_seconds` samples tagged `stage`, `placement` and `tool`; CPU
//! readings `cpu_utilisation` tagged `placement`, `second` and `cpu`; the
//! scored calls `call_precision`/`call_recall`/`call_f1` tagged `caller`,
//! `bqsr` and `class`; hardware counters one metric per event tagged
//! `stage` and `placement`, or the reason there are none in the summary.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use testbed_vocab::asam::Prepared;
use testbed_vocab::asam_workflow::{PIPE_BASELINES, PLACEMENTS, WorkflowLine};
use testbed_vocab::request::asam::{AsamRequest, PrepareRequest, WorkflowRequest};

use super::child;
use super::{JobContext, ParamError, Summary, WorkloadError, defaults};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsamWorkflowParams {
    /// Data set size: tiny | small | medium (see `testbed-asam prepare`).
    pub dataset: String,
    /// disk | ramdisk | pipes | arrowsam | arrowsam-fused (a sweep axis).
    pub placement: String,
    /// Sort and markdup tools outside ArrowSAM: samtools | picard | sambamba
    /// | samblaster (marks bwa's stream, then samtools sorts) | bamsormadup
    /// (both in one pass: stage `sort-markdup`).
    #[serde(default = "default_baseline")]
    pub baseline: String,
    #[serde(default = "default_callers")]
    pub callers: Vec<String>,
    /// Recalibrate base qualities before calling (ArrowSAM only; ignored
    /// for the other placements, which have no packaged BQSR).
    #[serde(default = "defaults::yes")]
    pub bqsr: bool,
    #[serde(default = "default_threads")]
    pub threads: u32,
    /// CPU utilisation samples per second (0: none).
    #[serde(default = "default_cpu_hz")]
    pub cpu_hz: f64,
    /// Hardware counters per stage where the machine has a PMU.
    #[serde(default = "defaults::yes")]
    pub counters: bool,
    /// Check ArrowSAM's order and duplicates against samtools and Picard,
    /// and samblaster's or bamsormadup's duplicate sets against Picard's.
    #[serde(default = "defaults::yes")]
    pub check: bool,
    /// Parent of the disk placement's files: a directory on a disk file
    /// system (in the VM, the mount point of an ext4-formatted device).
    #[serde(default)]
    pub disk_dir: Option<String>,
    /// Parent of tmpfs files (ramdisk, pipes' result, ArrowSAM's store).
    #[serde(default = "default_ram_dir")]
    pub ram_dir: String,
    #[serde(default = "defaults::one_u64")]
    pub data_seed: u64,
    /// Where data sets are cached (default `$TESTBED_CACHE/asam`).
    #[serde(default)]
    pub data_dir: Option<String>,
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
}

pub const BASELINES: [&str; 5] = ["samtools", "picard", "sambamba", "samblaster", "bamsormadup"];
/// The metrics of `perf stat`'s events (workflow::counters::EVENTS).
pub const COUNTER_METRICS: [&str; 4] = [
    "cache_references",
    "cache_misses",
    "llc_loads",
    "llc_load_misses",
];
pub const CALLERS: [&str; 2] = ["bcftools", "freebayes"];
pub const DATASETS: [&str; 3] = ["tiny", "small", "medium"];

fn default_baseline() -> String {
    "samtools".into()
}
fn default_callers() -> Vec<String> {
    vec!["bcftools".into()]
}
fn default_threads() -> u32 {
    2
}
fn default_cpu_hz() -> f64 {
    10.0
}
fn default_ram_dir() -> String {
    "/dev/shm".into()
}
fn default_timeout() -> u64 {
    3600
}

impl AsamWorkflowParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        let one_of = |field: &str, v: &str, known: &[&str]| {
            if known.contains(&v) {
                Ok(())
            } else {
                Err(ParamError::new(
                    field,
                    format!("unknown {v:?}; known: {}", known.join(", ")),
                ))
            }
        };
        one_of("dataset", &self.dataset, &DATASETS)?;
        one_of("placement", &self.placement, &PLACEMENTS)?;
        one_of("baseline", &self.baseline, &BASELINES)?;
        for c in &self.callers {
            one_of("callers", c, &CALLERS)?;
        }
        if self.placement == "pipes" && !PIPE_BASELINES.contains(&self.baseline.as_str()) {
            return Err(ParamError::new(
                "baseline",
                format!(
                    "placement pipes runs samtools, samblaster or bamsormadup only ({} reads its input twice when marking duplicates)",
                    self.baseline
                ),
            ));
        }
        if !(1..=256).contains(&self.threads) {
            return Err(ParamError::new("threads", "must be 1..=256"));
        }
        if !(0.0..=100.0).contains(&self.cpu_hz) {
            return Err(ParamError::new("cpu_hz", "must be 0..=100"));
        }
        if self.timeout_seconds == 0 {
            return Err(ParamError::new("timeout_seconds", "must be at least 1"));
        }
        for (field, d) in [
            ("disk_dir", self.disk_dir.as_deref()),
            ("ram_dir", Some(&self.ram_dir)),
        ] {
            if let Some(d) = d
                && !d.starts_with('/')
            {
                return Err(ParamError::new(field, "must be an absolute path"));
            }
        }
        Ok(())
    }

    fn cache_root(&self) -> PathBuf {
        std::env::var_os("TESTBED_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/testbed")))
            .unwrap_or_else(std::env::temp_dir)
    }

    fn data_dir(&self) -> PathBuf {
        self.data_dir
            .as_ref()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.cache_root().join("asam"))
    }

    /// The disk placement's parent: the one given, else the cache's disk.
    fn disk_dir(&self) -> PathBuf {
        self.disk_dir
            .as_ref()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.cache_root().join("asam-work"))
    }
}

pub fn run(p: &AsamWorkflowParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    p.validate()
        .map_err(|e| WorkloadError::Other(e.to_string()))?;
    let bin = super::registry::ASAM
        .find()
        .ok_or_else(|| super::registry::ASAM.not_found())?;
    let timeout = Duration::from_secs(p.timeout_seconds);
    let mut prepare = PrepareRequest::new(p.data_dir());
    prepare.name = Some(p.dataset.clone());
    prepare.seed = p.data_seed;
    prepare.threads = p.threads as usize;
    let prepared: Vec<Prepared> = child::run_request(
        &bin,
        &AsamRequest::Prepare(Box::new(prepare)),
        timeout,
        "testbed-asam prepare",
    )?;
    let dataset = prepared
        .into_iter()
        .next()
        .ok_or_else(|| WorkloadError::Other("testbed-asam prepare printed nothing".into()))?;
    let info = dataset
        .dir
        .as_ref()
        .ok_or_else(|| {
            WorkloadError::Other("testbed-asam prepare named no data set directory".into())
        })?
        .join("prepared.json");
    let mut workflow = WorkflowRequest::new(info, &p.placement, p.disk_dir());
    workflow.baseline = p.baseline.clone();
    workflow.callers = p.callers.clone();
    workflow.threads = p.threads as usize;
    workflow.ram_dir = PathBuf::from(&p.ram_dir);
    workflow.cpu_hz = p.cpu_hz;
    workflow.timeout_seconds = p.timeout_seconds;
    // Only the ArrowSAM placements have a BQSR (GATK is not packaged).
    workflow.bqsr = p.bqsr && matches!(p.placement.as_str(), "arrowsam" | "arrowsam-fused");
    workflow.counters = p.counters;
    workflow.check = p.check;
    workflow.json = true;
    let lines: Vec<WorkflowLine> = child::run_request(
        &bin,
        &AsamRequest::Workflow(workflow),
        timeout,
        "testbed-asam workflow",
    )?;
    record(ctx, &dataset, &lines)
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Counter events as metric names (`cache-misses` → `cache_misses`).
fn counter_metric(event: &str) -> String {
    event.replace(['-', '.'], "_").to_ascii_lowercase()
}

/// Samples and summary from the workflow's lines.
fn record(
    ctx: &JobContext,
    dataset: &Prepared,
    lines: &[WorkflowLine],
) -> Result<Summary, WorkloadError> {
    let mut s = Summary::new();
    let mut cpu: BTreeMap<(String, String, String), Vec<f64>> = BTreeMap::new();
    let mut done = None;
    for (i, l) in lines.iter().enumerate() {
        match l {
            WorkflowLine::Stage(st) => {
                let t = tags(&[
                    ("stage", &st.stage),
                    ("placement", &st.placement),
                    ("tool", &st.tool),
                ]);
                ctx.emit_samples("stage_seconds", "s", i as u32, &t, &[st.seconds]);
                s.insert(
                    format!("{}.stage_seconds", st.stage),
                    serde_json::json!(st.seconds),
                );
                // The stage's largest process peak, plus what ArrowSAM's
                // store holds on tmpfs then (an upper bound: the store
                // pages a stage maps count in both).
                if let Some(rss) = st.peak_rss_bytes {
                    let memory = rss + st.store_bytes.unwrap_or(0);
                    ctx.emit_samples(
                        "stage_peak_memory_bytes",
                        "B",
                        i as u32,
                        &t,
                        &[memory as f64],
                    );
                    s.insert(
                        format!("{}.peak_memory_bytes", st.stage),
                        serde_json::json!(memory),
                    );
                }
            }
            WorkflowLine::Cpu(c) => {
                // Tenths of a second: the sampling period at 10 Hz.
                let second = format!("{:.1}", c.second);
                cpu.entry((c.placement.clone(), second, c.cpu.clone()))
                    .or_default()
                    .push(c.utilisation);
            }
            WorkflowLine::Calls(c) => {
                let bqsr = if c.bqsr { "yes" } else { "no" };
                let t = tags(&[
                    ("caller", &c.caller),
                    ("bqsr", bqsr),
                    ("class", &c.class),
                    ("placement", &c.placement),
                ]);
                for (m, v) in [
                    ("call_precision", c.precision),
                    ("call_recall", c.recall),
                    ("call_f1", c.f1),
                ] {
                    ctx.emit_samples(m, "", 0, &t, &[v]);
                }
                if c.class == "all" {
                    let key = format!("{}.{}", c.caller, if c.bqsr { "bqsr_f1" } else { "f1" });
                    s.insert(key, serde_json::json!(c.f1));
                }
            }
            WorkflowLine::Counters(c) => {
                if let Some(why) = &c.unavailable {
                    // `<metric>_unavailable`: figures say why the metric
                    // is missing instead of drawing nothing.
                    for m in COUNTER_METRICS {
                        s.insert(format!("{m}_unavailable"), serde_json::json!(why));
                    }
                }
                let t = tags(&[("stage", &c.stage), ("placement", &c.placement)]);
                for (event, v) in &c.values {
                    ctx.emit_samples(&counter_metric(event), "count", 0, &t, &[*v]);
                }
            }
            WorkflowLine::Done(d) => done = Some(d),
        }
    }
    for ((placement, second, cpu_name), v) in cpu {
        let t = tags(&[
            ("placement", &placement),
            ("second", &second),
            ("cpu", &cpu_name),
        ]);
        ctx.emit_samples("cpu_utilisation", "%", 0, &t, &v);
    }
    let d = done.ok_or_else(|| {
        WorkloadError::Other("testbed-asam workflow printed no closing line".into())
    })?;
    s.insert("workflow_seconds".into(), serde_json::json!(d.seconds));
    s.insert("records".into(), serde_json::json!(d.records));
    s.insert("duplicates".into(), serde_json::json!(d.duplicates));
    s.insert("checks".into(), serde_json::json!(d.checks));
    s.insert("dataset.pairs".into(), serde_json::json!(dataset.pairs));
    s.insert("dataset.cached".into(), serde_json::json!(dataset.cached));
    Ok(s)
}

impl super::WorkloadParams for AsamWorkflowParams {
    fn validate(
        &self,
        _devices: &BTreeMap<String, testbed_vocab::protocol::DeviceRef>,
    ) -> Result<(), ParamError> {
        AsamWorkflowParams::validate(self)
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
            M::raw("stage_seconds", "s", &["stage", "placement", "tool"]),
            M::raw("stage_peak_memory_bytes", "B", &["stage", "placement", "tool"]),
            M::raw("cpu_utilisation", "%", &["placement", "second", "cpu"]),
            M::raw(
                "call_precision",
                "",
                &["caller", "bqsr", "class", "placement"],
            ),
            M::raw("call_recall", "", &["caller", "bqsr", "class", "placement"]),
            M::raw("call_f1", "", &["caller", "bqsr", "class", "placement"]),
            M::raw("cache_misses", "count", &["stage", "placement"]),
            M::raw("cache_references", "count", &["stage", "placement"]),
            M::raw("llc_loads", "count", &["stage", "placement"]),
            M::raw("llc_load_misses", "count", &["stage", "placement"]),
            M::summary("workflow_seconds", "s", &[]),
            M::summary("records", "", &[]),
            M::summary("duplicates", "", &[]),
        ]
    }
    fn show_lines(&self, summary: &Summary) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(t) = summary.get("workflow_seconds").and_then(|v| v.as_f64()) {
            out.push(format!("{}: whole workflow {t:.2} s", self.placement));
        }
        if let Some(why) = summary
            .get("cache_misses_unavailable")
            .and_then(|v| v.as_str())
        {
            out.push(format!("hardware counters: not measurable here ({why})"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    fn params(v: serde_json::Value) -> Result<AsamWorkflowParams, String> {
        let mut v = v;
        v["kind"] = "asam-workflow".into();
        match serde_json::from_value::<Workload>(v).map_err(|e| e.to_string())? {
            Workload::AsamWorkflow(p) => Ok(p),
            other => Err(format!("wrong kind {other:?}")),
        }
    }

    #[test]
    fn bad_parameters_name_their_field() {
        let field = |v: serde_json::Value| params(v).unwrap().validate().unwrap_err().field;
        let ok = params(serde_json::json!({"dataset": "tiny", "placement": "arrowsam"})).unwrap();
        assert!(ok.validate().is_ok());
        assert_eq!(ok.callers, vec!["bcftools"]);
        assert_eq!(
            field(serde_json::json!({"dataset": "tiny", "placement": "nvram"})),
            "placement"
        );
        assert_eq!(
            field(
                serde_json::json!({"dataset": "tiny", "placement": "pipes", "baseline": "picard"})
            ),
            "baseline"
        );
        for fed_by_a_pipe in ["samtools", "samblaster", "bamsormadup"] {
            let p = params(serde_json::json!({"dataset": "tiny", "placement": "pipes", "baseline": fed_by_a_pipe}))
                .unwrap();
            assert!(p.validate().is_ok(), "{fed_by_a_pipe}");
        }
        assert_eq!(
            field(serde_json::json!({"dataset": "tiny", "placement": "disk", "callers": ["gatk"]})),
            "callers"
        );
        assert_eq!(
            field(serde_json::json!({"dataset": "tiny", "placement": "disk", "disk_dir": "rel"})),
            "disk_dir"
        );
    }

    #[test]
    fn lines_become_tagged_samples_and_cpu_readings_group_by_tenth() {
        let sink = std::sync::Arc::new(crate::workload::VecSink::default());
        let ctx = JobContext {
            job_id: 7,
            seed: 1,
            devices: BTreeMap::new(),
            sink: sink.clone(),
        };
        let text = [
            r#"{"stage":{"stage":"sort","placement":"disk","tool":"samtools","seconds":1.5,"start":2.0,"end":3.5,"peak_rss_bytes":3000,"store_bytes":500}}"#,
            r#"{"cpu":{"placement":"disk","second":0.1,"cpu":"all","utilisation":50.0}}"#,
            r#"{"cpu":{"placement":"disk","second":0.2,"cpu":"all","utilisation":70.0}}"#,
            r#"{"calls":{"placement":"disk","caller":"bcftools","bqsr":false,"class":"all","true_positives":9,"false_positives":1,"false_negatives":1,"precision":0.9,"recall":0.9,"f1":0.9}}"#,
            r#"{"counters":{"placement":"disk","stage":"sort","values":{},"unavailable":"no PMU"}}"#,
            r#"{"done":{"placement":"disk","records":10,"duplicates":2,"seconds":4.0,"checks":[]}}"#,
        ];
        let lines: Vec<WorkflowLine> = text
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let dataset: Prepared = serde_json::from_value(serde_json::json!({
            "sam": "/d/aligned.sam", "reference": "/d/ref.fa", "cached": true,
            "pairs": 5, "duplicate_pairs": 1
        }))
        .unwrap();
        let s = record(&ctx, &dataset, &lines).unwrap();
        assert_eq!(s["cache_misses_unavailable"], "no PMU");
        assert_eq!(s["llc_load_misses_unavailable"], "no PMU");
        assert_eq!(s["bcftools.f1"], 0.9);
        let chunks = sink.0.lock().unwrap();
        let stage = chunks.iter().find(|c| c.metric == "stage_seconds").unwrap();
        assert_eq!(stage.tags["placement"], "disk");
        assert_eq!(stage.values, vec![1.5]);
        // Peak memory: the processes' peak plus the store's bytes.
        let memory = chunks
            .iter()
            .find(|c| c.metric == "stage_peak_memory_bytes")
            .unwrap();
        assert_eq!((memory.unit.as_str(), memory.values[0]), ("B", 3500.0));
        assert_eq!(memory.tags["stage"], "sort");
        assert_eq!(s["sort.peak_memory_bytes"], 3500);
        let cpu: Vec<_> = chunks
            .iter()
            .filter(|c| c.metric == "cpu_utilisation")
            .collect();
        assert_eq!(cpu.len(), 2);
        assert_eq!(cpu[0].tags["second"], "0.1");
        drop(chunks);
        // No closing line: the point fails.
        assert!(record(&ctx, &dataset, &lines[..5]).is_err());
    }
}
