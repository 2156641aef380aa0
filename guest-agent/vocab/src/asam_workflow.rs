//! Lines of `testbed-asam workflow --json`: one [`WorkflowLine`] per
//! stage, per CPU sample, per scored call set, per hardware-counter reading,
//! then one closing [`WorkflowLine::Done`]. Each line is an object with a
//! single key naming its kind (`{"stage": {...}}`), so the two sides need
//! no field guessing.

use serde::{Deserialize, Serialize};

/// The data placements of the workflow figure.
pub const PLACEMENTS: [&str; 5] = ["disk", "ramdisk", "pipes", "arrowsam", "arrowsam-fused"];

/// The baselines that read their input once, so the pipes placement can
/// feed them (picard and sambamba read it twice when marking duplicates).
pub const PIPE_BASELINES: [&str; 3] = ["samtools", "samblaster", "bamsormadup"];

/// The stages, in workflow order (x axis of asam-workflow).
pub const STAGES: [&str; 8] = [
    "align",
    "sort",
    "markdup",
    "sort-markdup",
    "bqsr",
    "fused",
    "apply-bqsr",
    "call",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkflowLine {
    Stage(StageLine),
    Cpu(CpuLine),
    Calls(CallsLine),
    Counters(CountersLine),
    Done(DoneLine),
}

/// One timed stage. `seconds` is the wall time the stage adds to the
/// workflow: for stages that run one after another, its own run time; for
/// stages joined by pipes (they overlap), the time from the previous
/// stage's end to its own end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageLine {
    pub stage: String,
    pub placement: String,
    /// The program(s) that did the stage, e.g. "bwa", "samtools", "arrowsam".
    pub tool: String,
    pub seconds: f64,
    /// Seconds since the workflow started, at the stage's start and end.
    pub start: f64,
    pub end: f64,
    /// The largest peak resident memory of the stage's processes (each
    /// one's `wait4` ru_maxrss; perf and its program count as one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// ArrowSAM: what the shared store holds on tmpfs at the stage's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_bytes: Option<u64>,
}

/// CPU utilisation over one sampling interval, from /proc/stat: busy
/// (everything but idle and iowait) over all time, in percent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuLine {
    pub placement: String,
    /// Seconds since the workflow started, at the interval's end.
    pub second: f64,
    /// "all", or the CPU's number.
    pub cpu: String,
    pub utilisation: f64,
}

/// Calls of one caller on the final BAM, scored against the truth VCF.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallsLine {
    pub placement: String,
    pub caller: String,
    /// Whether the BAM was base-quality recalibrated.
    pub bqsr: bool,
    /// "all", "snp" or "indel".
    pub class: String,
    pub true_positives: u64,
    pub false_positives: u64,
    pub false_negatives: u64,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
}

/// Hardware counters of one stage (`perf stat`), or why there are none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CountersLine {
    pub placement: String,
    pub stage: String,
    /// Counter name → value; empty when not measurable.
    pub values: std::collections::BTreeMap<String, f64>,
    /// Why `values` is empty (e.g. no PMU in the VM).
    pub unavailable: Option<String>,
}

/// The closing line: what was checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoneLine {
    pub placement: String,
    pub records: u64,
    pub duplicates: u64,
    /// Total wall time of the workflow.
    pub seconds: f64,
    /// Correctness checks that ran, each "name: passed" (a failed one ends
    /// the workflow with an error instead).
    pub checks: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_keyed_by_kind_and_read_back() {
        let text = r#"{"stage":{"stage":"sort","placement":"disk","tool":"samtools","seconds":1.5,"start":2.0,"end":3.5}}"#;
        let l: WorkflowLine = serde_json::from_str(text).unwrap();
        assert!(matches!(&l, WorkflowLine::Stage(s) if s.stage == "sort"));
        assert_eq!(
            serde_json::to_value(&l).unwrap(),
            serde_json::from_str::<serde_json::Value>(text).unwrap()
        );
        let apply = r#"{"stage":{"stage":"apply-bqsr","placement":"arrowsam","tool":"arrowsam","seconds":1,"start":0,"end":1}}"#;
        assert!(serde_json::from_str::<WorkflowLine>(apply).is_ok());
        assert!(serde_json::from_str::<WorkflowLine>(r#"{"cpu":{"placement":"x"}}"#).is_err());
    }
}
