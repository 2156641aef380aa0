//! `testbed check RUN --baseline BASE`: the paper's claims as a CI gate.
//! Both runs are checked with the same figure definitions; a claim that
//! held in the baseline and does not hold in the run fails the gate. One
//! that became undecided at this noise, not measurable, or was not checked
//! is listed but passes: noise and a missing series are no evidence
//! against the claim, and its interval says what would decide it. So does
//! one that no longer holds in a run measured on a busy host.

use std::fmt::Write;

use super::claims::{ClaimResult, Verdict};

/// A claim that held in the baseline and no longer does.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub figure: String,
    pub id: String,
    pub text: String,
    /// Its verdict in the run; None when the run did not check it.
    pub now: Option<Verdict>,
    /// The interval (or, without one, the numbers) it was decided on now.
    pub numbers: String,
}

/// What the gate found: `lost` fail it, `weakened` do not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gate {
    /// Claims that held in the baseline and do not hold now.
    pub lost: Vec<Change>,
    /// Claims that held in the baseline and are now undecided, not
    /// measurable, or not checked.
    pub weakened: Vec<Change>,
    /// Claims that held in both.
    pub kept: usize,
}

impl Gate {
    pub fn passes(&self) -> bool {
        self.lost.is_empty()
    }

    /// The gate's lines for the terminal.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let line = |s: &mut String, c: &Change| {
            let now = c.now.map_or("not checked in this run", Verdict::text);
            let _ = writeln!(
                s,
                "  {}/{} ({}): held, now {now}: {}",
                c.figure, c.id, c.text, c.numbers
            );
        };
        for c in &self.lost {
            line(&mut s, c);
        }
        if !self.weakened.is_empty() {
            let _ = writeln!(s, "held in the baseline, not decided here (not a failure):");
            for c in &self.weakened {
                line(&mut s, c);
            }
        }
        let _ = writeln!(
            s,
            "baseline gate: {} held and still hold, {} no longer hold, {} not decided here: {}",
            self.kept,
            self.lost.len(),
            self.weakened.len(),
            if self.passes() { "passes" } else { "FAILS" }
        );
        s
    }
}

/// Every claim that held in `baseline`, looked up in `run` by figure and id.
/// `run_busy` says the run was measured on a busy host (some of its points
/// noisy): a claim it no longer holds is then not decided here, since other
/// processes take from the run what a regression would.
pub fn against_baseline(
    baseline: &[ClaimResult],
    run: &[ClaimResult],
    run_busy: Option<&str>,
) -> Gate {
    let mut gate = Gate::default();
    for b in baseline.iter().filter(|b| b.verdict == Verdict::Holds) {
        let now = run.iter().find(|r| r.figure == b.figure && r.id == b.id);
        let change = |now: Option<&ClaimResult>| Change {
            figure: b.figure.clone(),
            id: b.id.clone(),
            text: b.text.clone(),
            now: now.map(|r| r.verdict),
            numbers: now
                .map(|r| r.interval_text().unwrap_or_else(|| r.numbers.clone()))
                .unwrap_or_default(),
        };
        match (now.map(|r| r.verdict), run_busy) {
            (Some(Verdict::Holds), _) => gate.kept += 1,
            (Some(Verdict::DoesNotHold), None) => gate.lost.push(change(now)),
            (Some(Verdict::DoesNotHold), Some(busy)) => {
                let mut c = change(now);
                c.numbers = format!("{}; but {busy}", c.numbers);
                gate.weakened.push(c);
            }
            _ => gate.weakened.push(change(now)),
        }
    }
    gate
}
