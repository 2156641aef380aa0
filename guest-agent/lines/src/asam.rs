//! Lines of `testbed-asam`.
//!
//! - `prepare`: one [`Prepared`] line.
//! - `bench-preproc --json`: one [`BenchLine::Stage`] per timed stage, then
//!   one [`BenchLine::Summary`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The tools `bench-preproc --tools` knows.
pub const TOOLS: [&str; 4] = ["picard", "sambamba", "samtools", "arrowsam"];

/// What `prepare` made (or found cached).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    pub sam: PathBuf,
    pub reference: PathBuf,
    pub cached: bool,
    pub pairs: u64,
    pub duplicate_pairs: u64,
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

/// arrowsam against the references.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    /// Records whose duplicate bit differs from Picard's (or that only one
    /// side has); `None` when Picard did not run.
    pub dup_mismatches_vs_picard: Option<u64>,
    /// arrowsam's (reference, position) sequence equals samtools sort's.
    pub order_matches_samtools: Option<bool>,
    pub order_first_difference: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_and_summary_lines_are_told_apart_by_their_keys() {
        let stage =
            r#"{"tool":"picard","stage":"markdup","seconds":1.5,"records":8,"duplicates":null}"#;
        let summary = r#"{"summary":true,"verification":{"dup_mismatches_vs_picard":0,"order_matches_samtools":true,"order_first_difference":null}}"#;
        let lines: Vec<BenchLine> = [stage, summary]
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(matches!(&lines[0], BenchLine::Stage(s) if s.duplicates.is_none()));
        assert!(matches!(
            &lines[1],
            BenchLine::Summary(s) if s.summary && s.verification.order_matches_samtools == Some(true)
        ));
        for (l, text) in lines.iter().zip([stage, summary]) {
            let want: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_value(l).unwrap(), want);
        }
        assert!(serde_json::from_str::<BenchLine>(r#"{"tool":"picard"}"#).is_err());
    }
}
