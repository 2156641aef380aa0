//! `testbed check RUN --baseline BASE`: the paper's claims as a CI gate,
//! and the outcomes (and exit codes) the gates share with `testbed history
//! --fail-on-change`.
//!
//! Both runs are checked with the same figure definitions. A claim that
//! held in the baseline and does not hold in the run is a regression. One
//! that became undecided at this noise, not measurable, or was not checked
//! makes the gate inconclusive: it is no evidence against the claim, and
//! none for it. So do points measured on a busy host that were not run
//! again.
//!
//! A noisy point excuses no lost claim: other processes slow a run down
//! as a regression would, but they may as well hide one, and a gate that
//! passes whenever the host was busy gates nothing. A claim lost on a busy
//! run is a regression unless the run's noisy points were measured again
//! (`check --rerun-noisy`) and are still noisy: then the host, not the
//! code, may have lost it, and the gate is inconclusive with that reason.

use std::fmt::Write;

use serde::Serialize;

use super::claims::{ClaimResult, Verdict};
use crate::recording::results::manifest::NoisyPoints;

/// A gate's outcome; its exit code is [`Outcome::code`]. An error of the
/// command itself exits [`EXIT_ERROR`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Exit 0: nothing that held was lost, and nothing left undecided.
    Pass,
    /// Exit 2: a claim that held is now undecided, not measurable, not
    /// checked, or lost on points still noisy after a rerun; or the run
    /// has noisy points that were not run again.
    Inconclusive,
    /// Exit 1: a claim that held no longer holds (check); the newest run
    /// starts a change the worse way (history).
    Regression,
}

/// The exit code of a gate command that failed (a path that is no run,
/// an unreadable claims.json or manifest, a bad argument).
pub const EXIT_ERROR: u8 = 3;

impl Outcome {
    pub fn code(self) -> u8 {
        match self {
            Outcome::Pass => 0,
            Outcome::Regression => 1,
            Outcome::Inconclusive => 2,
        }
    }

    /// "pass", "REGRESSION", "INCONCLUSIVE".
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Regression => "REGRESSION",
            Outcome::Inconclusive => "INCONCLUSIVE",
        }
    }

    /// "REGRESSION (exit 1)".
    pub fn label(self) -> String {
        format!("{} (exit {})", self.word(), self.code())
    }
}

/// What the gate reads of one claim.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub figure: String,
    pub id: String,
    pub text: String,
    pub verdict: Verdict,
    /// Its interval (or, without one, the numbers it was decided on).
    pub numbers: String,
}

impl From<&ClaimResult> for Seen {
    fn from(c: &ClaimResult) -> Seen {
        Seen {
            figure: c.figure.clone(),
            id: c.id.clone(),
            text: c.text.clone(),
            verdict: c.verdict,
            numbers: c.interval_text().unwrap_or_else(|| c.numbers.clone()),
        }
    }
}

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

/// What the gate found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gate {
    /// Claims that held in the baseline and do not hold now: regressions.
    pub lost: Vec<Change>,
    /// Claims that held and do not hold now, on a run whose noisy points
    /// were all measured again and are still noisy (`--rerun-noisy`):
    /// inconclusive.
    pub lost_on_noise: Vec<Change>,
    /// Claims that held in the baseline and are now undecided, not
    /// measurable, or not checked: inconclusive.
    pub weakened: Vec<Change>,
    /// Claims that held in both.
    pub kept: usize,
    /// The run's noisy points.
    pub noise: NoisyPoints,
    /// Whether the run's noisy points were to be run again (`--rerun-noisy`).
    pub rerun_asked: bool,
}

impl Gate {
    pub fn outcome(&self) -> Outcome {
        if !self.lost.is_empty() {
            Outcome::Regression
        } else if !self.lost_on_noise.is_empty()
            || !self.weakened.is_empty()
            || self.noise.not_rerun() > 0
        {
            Outcome::Inconclusive
        } else {
            Outcome::Pass
        }
    }

    /// What to do about noisy points that were not measured again.
    fn rerun_hint(&self) -> &'static str {
        if self.rerun_asked {
            "the rerun did not measure them again (it failed, or they had run again as often as --rerun-noisy allows): see testbed show RUN"
        } else {
            "run them again with --rerun-noisy"
        }
    }

    /// The gate's lines for the terminal; the last names the outcome and
    /// its exit code.
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
        if !self.lost.is_empty() {
            let _ = writeln!(s, "held in the baseline, lost here (REGRESSION):");
            for c in &self.lost {
                line(&mut s, c);
            }
            if self.noise.noisy > 0 {
                let why = if self.rerun_asked {
                    "not every one of them was measured again"
                } else {
                    "they were not run again (--rerun-noisy)"
                };
                let _ = writeln!(
                    s,
                    "  ({}: a noisy point excuses no lost claim, and {why})",
                    self.noise.text()
                );
            }
        }
        if !self.lost_on_noise.is_empty() {
            let _ = writeln!(
                s,
                "held in the baseline, lost on a busy host (INCONCLUSIVE: {}; run it again on a quiet host):",
                self.noise.text()
            );
            for c in &self.lost_on_noise {
                line(&mut s, c);
            }
        }
        if !self.weakened.is_empty() {
            let _ = writeln!(s, "held in the baseline, not decided here (INCONCLUSIVE):");
            for c in &self.weakened {
                line(&mut s, c);
            }
        }
        // With a claim lost, said beside it above.
        if self.lost.is_empty() && self.noise.not_rerun() > 0 {
            let _ = writeln!(
                s,
                "noisy points not run again (INCONCLUSIVE): {}: {}",
                self.noise.text(),
                self.rerun_hint()
            );
        }
        let _ = writeln!(
            s,
            "baseline gate: {} held and still hold, {} no longer hold, {} lost on a busy host, {} not decided here: {}",
            self.kept,
            self.lost.len(),
            self.lost_on_noise.len(),
            self.weakened.len(),
            self.outcome().label()
        );
        s
    }
}

/// Every claim that held in `baseline`, looked up in `run` by figure and
/// id. `noise` is the run's noisy points; `rerun_asked` says they were to
/// be measured again (`--rerun-noisy`): only then, and only when every one
/// was and is still noisy, is a lost claim inconclusive instead of lost.
pub fn against_baseline(
    baseline: &[ClaimResult],
    run: &[ClaimResult],
    noise: &NoisyPoints,
    rerun_asked: bool,
) -> Gate {
    let seen = |c: &[ClaimResult]| c.iter().map(Seen::from).collect::<Vec<_>>();
    judge(&seen(baseline), &seen(run), noise, rerun_asked)
}

/// [`against_baseline`] on what the gate reads of each claim.
pub fn judge(baseline: &[Seen], run: &[Seen], noise: &NoisyPoints, rerun_asked: bool) -> Gate {
    let mut gate = Gate {
        noise: noise.clone(),
        rerun_asked,
        ..Gate::default()
    };
    let excused = rerun_asked && noise.all_rerun();
    for b in baseline.iter().filter(|b| b.verdict == Verdict::Holds) {
        let now = run.iter().find(|r| r.figure == b.figure && r.id == b.id);
        let change = Change {
            figure: b.figure.clone(),
            id: b.id.clone(),
            text: b.text.clone(),
            now: now.map(|r| r.verdict),
            numbers: now.map(|r| r.numbers.clone()).unwrap_or_default(),
        };
        match change.now {
            Some(Verdict::Holds) => gate.kept += 1,
            Some(Verdict::DoesNotHold) if excused => gate.lost_on_noise.push(change),
            Some(Verdict::DoesNotHold) => gate.lost.push(change),
            Some(Verdict::Undecided | Verdict::NotMeasurable) | None => gate.weakened.push(change),
        }
    }
    gate
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(id: &str, verdict: Verdict) -> Seen {
        Seen {
            figure: "f".into(),
            id: id.into(),
            text: format!("claim {id}"),
            verdict,
            numbers: format!("{id}: 1.0 [0.9–1.1] against ≥ 0.5"),
        }
    }

    fn quiet() -> NoisyPoints {
        NoisyPoints {
            noisy: 0,
            rerun: 0,
            measured: 8,
            limit_pct: 10.0,
        }
    }

    /// `noisy` of 8 points noisy, `rerun` of them measured again.
    fn busy(noisy: usize, rerun: usize) -> NoisyPoints {
        NoisyPoints {
            noisy,
            rerun,
            ..quiet()
        }
    }

    fn baseline() -> Vec<Seen> {
        vec![
            claim("a", Verdict::Holds),
            claim("b", Verdict::Holds),
            // Did not hold in the baseline: never part of the gate.
            claim("c", Verdict::DoesNotHold),
            claim("d", Verdict::Undecided),
        ]
    }

    /// The baseline's claims with `id` now `verdict` (None: not checked).
    fn run_with(id: &str, verdict: Option<Verdict>) -> Vec<Seen> {
        baseline()
            .into_iter()
            .filter_map(|mut c| {
                if c.id == id {
                    c.verdict = verdict?;
                }
                Some(c)
            })
            .collect()
    }

    fn last_line(g: &Gate) -> String {
        g.text().lines().last().unwrap().to_string()
    }

    #[test]
    fn the_outcomes_exit_with_their_codes() {
        assert_eq!(Outcome::Pass.code(), 0);
        assert_eq!(Outcome::Regression.code(), 1);
        assert_eq!(Outcome::Inconclusive.code(), 2);
        assert_eq!(EXIT_ERROR, 3);
        assert_eq!(Outcome::Regression.label(), "REGRESSION (exit 1)");
        assert_eq!(Outcome::Inconclusive.label(), "INCONCLUSIVE (exit 2)");
        assert_eq!(Outcome::Pass.label(), "pass (exit 0)");
    }

    #[test]
    fn every_claim_kept_on_a_quiet_run_passes() {
        let g = judge(&baseline(), &baseline(), &quiet(), false);
        assert_eq!(g.outcome(), Outcome::Pass);
        assert_eq!(g.kept, 2);
        assert_eq!(g.text().lines().count(), 1, "{}", g.text());
        assert_eq!(
            last_line(&g),
            "baseline gate: 2 held and still hold, 0 no longer hold, 0 lost on a busy host, 0 not decided here: pass (exit 0)"
        );
        // A claim that did not hold in the baseline and holds now changes nothing.
        let better = run_with("c", Some(Verdict::Holds));
        assert_eq!(
            judge(&baseline(), &better, &quiet(), false).outcome(),
            Outcome::Pass
        );
    }

    #[test]
    fn a_claim_that_held_and_does_not_hold_now_is_a_regression() {
        let g = judge(
            &baseline(),
            &run_with("b", Some(Verdict::DoesNotHold)),
            &quiet(),
            false,
        );
        assert_eq!(g.outcome(), Outcome::Regression);
        assert_eq!(g.lost.len(), 1);
        assert_eq!(g.lost[0].id, "b");
        assert_eq!(g.lost[0].now, Some(Verdict::DoesNotHold));
        let text = g.text();
        assert!(
            text.contains("  f/b (claim b): held, now does not hold: b: 1.0"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "no longer hold, 0 lost on a busy host, 0 not decided here: REGRESSION (exit 1)\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_claim_that_held_and_is_now_undecided_unmeasurable_or_unchecked_is_inconclusive() {
        for now in [Some(Verdict::Undecided), Some(Verdict::NotMeasurable), None] {
            let g = judge(&baseline(), &run_with("a", now), &quiet(), false);
            assert_eq!(g.outcome(), Outcome::Inconclusive, "{now:?}");
            assert_eq!(g.weakened.len(), 1, "{now:?}");
            assert_eq!(g.weakened[0].now, now);
            assert!(
                g.text()
                    .starts_with("held in the baseline, not decided here (INCONCLUSIVE):\n  f/a (claim a): held, now "),
                "{}",
                g.text()
            );
            assert!(last_line(&g).ends_with("1 not decided here: INCONCLUSIVE (exit 2)"));
        }
        // A lost claim beside an undecided one: the regression decides.
        let mut run = run_with("a", Some(Verdict::Undecided));
        run[1].verdict = Verdict::DoesNotHold;
        let g = judge(&baseline(), &run, &quiet(), false);
        assert_eq!(g.outcome(), Outcome::Regression);
        assert_eq!((g.lost.len(), g.weakened.len()), (1, 1));
    }

    #[test]
    fn a_noisy_point_excuses_no_lost_claim_unless_it_was_run_again_and_is_still_noisy() {
        let lost = run_with("a", Some(Verdict::DoesNotHold));
        // Busy, not run again: still a regression, whatever was asked.
        for asked in [false, true] {
            let g = judge(&baseline(), &lost, &busy(2, 0), asked);
            assert_eq!(g.outcome(), Outcome::Regression, "asked {asked}");
            let text = g.text();
            assert!(
                text.contains("2 of 8 points measured on a busy host (other processes above 10 % of its CPU), none run again: a noisy point excuses no lost claim"),
                "{text}"
            );
            // Said once, beside the lost claim: no inconclusive line.
            assert!(!text.contains("INCONCLUSIVE"), "{text}");
        }
        // Only some of the noisy points measured again: still lost.
        let g = judge(&baseline(), &lost, &busy(2, 1), true);
        assert_eq!(g.outcome(), Outcome::Regression);
        // Every noisy point measured again, but no rerun asked of the
        // gate: the loss stands.
        let g = judge(&baseline(), &lost, &busy(2, 2), false);
        assert_eq!(g.outcome(), Outcome::Regression);
        // --rerun-noisy, and each noisy point still noisy after its
        // rerun: inconclusive, with the reason.
        let g = judge(&baseline(), &lost, &busy(2, 2), true);
        assert_eq!(g.outcome(), Outcome::Inconclusive);
        assert!(g.lost.is_empty());
        assert_eq!(g.lost_on_noise.len(), 1);
        let text = g.text();
        assert!(
            text.starts_with("held in the baseline, lost on a busy host (INCONCLUSIVE: 2 of 8 points measured on a busy host (other processes above 10 % of its CPU), each run again and still noisy; run it again on a quiet host):\n  f/a (claim a): held, now does not hold: "),
            "{text}"
        );
        assert!(
            text.ends_with("0 no longer hold, 1 lost on a busy host, 0 not decided here: INCONCLUSIVE (exit 2)\n"),
            "{text}"
        );
    }

    #[test]
    fn noisy_points_not_run_again_make_a_kept_run_inconclusive() {
        let g = judge(&baseline(), &baseline(), &busy(3, 1), false);
        assert_eq!(g.outcome(), Outcome::Inconclusive);
        assert_eq!(g.kept, 2);
        assert_eq!(
            g.text().lines().next().unwrap(),
            "noisy points not run again (INCONCLUSIVE): 3 of 8 points measured on a busy host (other processes above 10 % of its CPU), 1 of them run again and still noisy: run them again with --rerun-noisy"
        );
        // Asked to rerun and still not measured again: said so.
        let g = judge(&baseline(), &baseline(), &busy(3, 1), true);
        assert_eq!(g.outcome(), Outcome::Inconclusive);
        assert!(
            g.text().contains("the rerun did not measure them again"),
            "{}",
            g.text()
        );
        // Every noisy point measured again, every claim kept: a pass.
        let g = judge(&baseline(), &baseline(), &busy(3, 3), false);
        assert_eq!(g.outcome(), Outcome::Pass);
    }
}
