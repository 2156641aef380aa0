//! The recalibration table, GATK's empirical-quality model and its text
//! report.
//!
//! Model (GATK4 `RecalDatum.bayesianEstimateOfEmpiricalQuality`, described
//! in the GATK article "Base Quality Score Recalibration (BQSR)", section
//! "How BQSR works" / the hierarchical model): the empirical quality of a
//! table cell is the maximum a posteriori Phred score Q in 0..=60 of
//! - a prior on Q − Q_prior: a normal density with mean 0 and sd 0.5
//!   evaluated at the truncated integer difference (capped at 40), and
//! - a binomial likelihood of (errors + 1) errors in (observations + 2)
//!   trials (one smoothing error and one smoothing success) at rate 10^(−Q/10).
//!
//! The report mimics GATK's `GATKReport.v1.1` layout (RecalTable0/1/2) so a
//! genomics user can read it; it is parsed back by [`RecalTable::parse_report`].

use std::collections::BTreeMap;
use std::fmt::Write;

use super::covariates::{CONTEXTS, context_from_name, context_name};
use crate::{AsamError, Result};

/// Counts of one table cell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Datum {
    pub observations: u64,
    pub errors: u64,
}

impl Datum {
    pub fn add(&mut self, other: Datum) {
        self.observations += other.observations;
        self.errors += other.errors;
    }

    /// GATK's `getEmpiricalQuality(conditionalPrior)`.
    pub fn empirical_quality(&self, prior: f64) -> f64 {
        bayesian_quality(self.observations + 2, self.errors + 1, prior)
    }
}

/// Highest quality the Bayesian estimate considers (GATK's
/// `MAX_REASONABLE_Q_SCORE`).
pub const MAX_REASONABLE_Q: u32 = 60;
/// Prior differences are capped here (GATK's `MAX_GATK_USABLE_Q_SCORE`).
const MAX_PRIOR_DIFFERENCE: i64 = 40;
/// sd of the normal prior on Q_empirical − Q_reported.
const PRIOR_SD: f64 = 0.5;

fn log_prior(q: f64, prior: f64) -> f64 {
    // GATK casts the difference to int (truncation toward zero) before |.|.
    let d = ((q - prior) as i64).abs().min(MAX_PRIOR_DIFFERENCE) as f64;
    // Normal log density without its constant (it cancels in the argmax).
    -(d * d) / (2.0 * PRIOR_SD * PRIOR_SD)
}

/// GATK scales larger counts down to this (its binomial takes ints).
const MAX_OBSERVATIONS: u64 = i32::MAX as u64 - 1;

fn log_likelihood(q: f64, n: u64, k: u64) -> f64 {
    let (n, k) = if n > MAX_OBSERVATIONS {
        let scaled = (k as f64 * MAX_OBSERVATIONS as f64 / n as f64).round() as u64;
        (MAX_OBSERVATIONS, scaled)
    } else {
        (n, k)
    };
    let p = 10f64.powf(-q / 10.0);
    // The binomial coefficient is the same for every Q: left out.
    let l = k as f64 * p.ln() + (n - k) as f64 * (-p).ln_1p();
    if l.is_finite() { l } else { f64::MIN }
}

/// MAP Phred score for `k` errors in `n` observations around `prior`.
pub fn bayesian_quality(n: u64, k: u64, prior: f64) -> f64 {
    let mut best = (0u32, f64::NEG_INFINITY);
    for q in 0..=MAX_REASONABLE_Q {
        let qf = f64::from(q);
        let post = log_prior(qf, prior) + log_likelihood(qf, n, k);
        // Strictly greater: the first maximum wins, as in GATK's maxElementIndex.
        if post > best.1 {
            best = (q, post);
        }
    }
    f64::from(best.0)
}

/// Phred score of an error probability (unbounded).
pub fn phred(error: f64) -> f64 {
    -10.0 * error.log10()
}

/// A read group's row of RecalTable0: its counts and the mean reported
/// quality in the error-probability sense (GATK's `EstimatedQReported`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadGroupRow {
    pub datum: Datum,
    pub estimated_q_reported: f64,
}

/// The recalibration table: counts per (read group, reported quality)
/// and per (read group, reported quality, covariate value). RecalTable0 is
/// derived from the quality table, as GATK collapses it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecalTable {
    pub qualities: BTreeMap<(String, u8), Datum>,
    pub cycles: BTreeMap<(String, u8, i32), Datum>,
    pub contexts: BTreeMap<(String, u8, u8), Datum>,
}

impl RecalTable {
    /// RecalTable0: per read group, the sums over reported qualities.
    pub fn read_groups(&self) -> BTreeMap<String, ReadGroupRow> {
        let mut sums: BTreeMap<String, (Datum, f64)> = BTreeMap::new();
        for ((rg, q), d) in &self.qualities {
            let e = sums.entry(rg.clone()).or_default();
            e.0.add(*d);
            e.1 += d.observations as f64 * 10f64.powf(-f64::from(*q) / 10.0);
        }
        sums.into_iter()
            .map(|(rg, (datum, expected_errors))| {
                let estimated_q_reported = if datum.observations == 0 {
                    0.0
                } else {
                    phred(expected_errors / datum.observations as f64)
                };
                (
                    rg,
                    ReadGroupRow {
                        datum,
                        estimated_q_reported,
                    },
                )
            })
            .collect()
    }

    pub fn merge(&mut self, other: RecalTable) {
        for (k, d) in other.qualities {
            self.qualities.entry(k).or_default().add(d);
        }
        for (k, d) in other.cycles {
            self.cycles.entry(k).or_default().add(d);
        }
        for (k, d) in other.contexts {
            self.contexts.entry(k).or_default().add(d);
        }
    }

    /// The GATK-like text report (Arguments, RecalTable0/1/2; event type M:
    /// only the base-substitution model is built, as GATK4 does by default).
    pub fn to_report(&self) -> Result<String> {
        if let Some(rg) = self
            .qualities
            .keys()
            .map(|(rg, _)| rg)
            .find(|rg| rg.is_empty() || rg.contains(char::is_whitespace))
        {
            return Err(AsamError::Invalid(format!(
                "read group {rg:?} cannot be written to a whitespace-separated report"
            )));
        }
        let mut s = String::from("#:GATKReport.v1.1:4\n");
        let args = [
            (
                "covariate",
                "ReadGroupCovariate,QualityScoreCovariate,ContextCovariate,CycleCovariate",
            ),
            ("mismatches_context_size", "2"),
            ("low_quality_tail", "2"),
            ("preserve_qscores_less_than", "6"),
            ("maximum_cycle_value", "500"),
            ("compute_indel_bqsr_tables", "false"),
            ("implementation", "testbed-asam (ArrowSAM)"),
        ];
        table(
            &mut s,
            "Arguments",
            &["Argument", "Value"],
            args.iter().map(|(a, v)| vec![a.to_string(), v.to_string()]),
        );
        let rg_rows = self.read_groups().into_iter().map(|(rg, r)| {
            vec![
                rg,
                "M".into(),
                format!("{:.4}", r.datum.empirical_quality(r.estimated_q_reported)),
                format!("{:.4}", r.estimated_q_reported),
                r.datum.observations.to_string(),
                format!("{:.2}", r.datum.errors as f64),
            ]
        });
        table(
            &mut s,
            "RecalTable0",
            &[
                "ReadGroup",
                "EventType",
                "EmpiricalQuality",
                "EstimatedQReported",
                "Observations",
                "Errors",
            ],
            rg_rows,
        );
        let q_rows = self.qualities.iter().map(|((rg, q), d)| {
            vec![
                rg.clone(),
                q.to_string(),
                "M".into(),
                format!("{:.4}", d.empirical_quality(f64::from(*q))),
                d.observations.to_string(),
                format!("{:.2}", d.errors as f64),
            ]
        });
        table(
            &mut s,
            "RecalTable1",
            &[
                "ReadGroup",
                "QualityScore",
                "EventType",
                "EmpiricalQuality",
                "Observations",
                "Errors",
            ],
            q_rows,
        );
        let row = |rg: &str, q: u8, value: String, name: &str, d: &Datum| {
            vec![
                rg.to_string(),
                q.to_string(),
                value,
                name.to_string(),
                "M".into(),
                format!("{:.4}", d.empirical_quality(f64::from(q))),
                d.observations.to_string(),
                format!("{:.2}", d.errors as f64),
            ]
        };
        let ctx = self
            .contexts
            .iter()
            .map(|((rg, q, c), d)| row(rg, *q, context_name(*c), "Context", d));
        let cyc = self
            .cycles
            .iter()
            .map(|((rg, q, c), d)| row(rg, *q, c.to_string(), "Cycle", d));
        table(
            &mut s,
            "RecalTable2",
            &[
                "ReadGroup",
                "QualityScore",
                "CovariateValue",
                "CovariateName",
                "EventType",
                "EmpiricalQuality",
                "Observations",
                "Errors",
            ],
            ctx.chain(cyc),
        );
        Ok(s)
    }

    /// Reads back what [`RecalTable::to_report`] wrote (RecalTable1 and 2;
    /// RecalTable0 is derived again).
    pub fn parse_report(text: &str) -> Result<RecalTable> {
        let mut t = RecalTable::default();
        let mut section = "";
        let mut header_next = false;
        for (i, line) in text.lines().enumerate() {
            let bad =
                |m: String| AsamError::Invalid(format!("recalibration report line {}: {m}", i + 1));
            if let Some(name) = line.strip_prefix("#:GATKTable:") {
                if !name.starts_with(|c: char| c.is_ascii_digit()) {
                    section = name.trim_end_matches(':');
                    header_next = true;
                }
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            if header_next {
                header_next = false;
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            let num = |s: &str| -> Result<u64> {
                s.parse::<f64>()
                    .ok()
                    .filter(|v| *v >= 0.0)
                    .map(|v| v.round() as u64)
                    .ok_or_else(|| bad(format!("{s:?} is not a count")))
            };
            let qual = |s: &str| -> Result<u8> {
                s.parse().map_err(|e| bad(format!("quality {s:?}: {e}")))
            };
            match section {
                "RecalTable1" => {
                    if f.len() != 6 {
                        return Err(bad(format!("{} columns, RecalTable1 has 6", f.len())));
                    }
                    let d = Datum {
                        observations: num(f[4])?,
                        errors: num(f[5])?,
                    };
                    t.qualities.insert((f[0].to_string(), qual(f[1])?), d);
                }
                "RecalTable2" => {
                    if f.len() != 8 {
                        return Err(bad(format!("{} columns, RecalTable2 has 8", f.len())));
                    }
                    let d = Datum {
                        observations: num(f[6])?,
                        errors: num(f[7])?,
                    };
                    let (rg, q) = (f[0].to_string(), qual(f[1])?);
                    match f[3] {
                        "Context" => {
                            let c = context_from_name(f[2])
                                .filter(|&c| usize::from(c) < CONTEXTS)
                                .ok_or_else(|| bad(format!("context {:?}", f[2])))?;
                            t.contexts.insert((rg, q, c), d);
                        }
                        "Cycle" => {
                            let c = f[2]
                                .parse()
                                .map_err(|e| bad(format!("cycle {:?}: {e}", f[2])))?;
                            t.cycles.insert((rg, q, c), d);
                        }
                        other => return Err(bad(format!("unknown covariate {other:?}"))),
                    }
                }
                _ => {}
            }
        }
        if t.qualities.is_empty() {
            return Err(AsamError::Invalid(
                "recalibration report has no RecalTable1 rows".into(),
            ));
        }
        Ok(t)
    }
}

/// Appends one GATK-report table: a format line, its name, the header and
/// space-aligned rows, then a blank line.
fn table(out: &mut String, name: &str, header: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    let rows: Vec<Vec<String>> = rows.collect();
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let _ = writeln!(
        out,
        "#:GATKTable:{}:{}:{}:;",
        header.len(),
        rows.len(),
        vec!["%s"; header.len()].join(":")
    );
    let _ = writeln!(out, "#:GATKTable:{name}:");
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for r in &rows {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empirical_quality_moves_towards_the_data_but_not_past_the_prior() {
        // No data: the prior wins.
        assert_eq!(Datum::default().empirical_quality(30.0), 30.0);
        // 1 % errors in 1e6 observations: Q20, whatever the prior.
        let d = Datum {
            observations: 1_000_000,
            errors: 10_000,
        };
        assert_eq!(d.empirical_quality(30.0), 20.0);
        // Little data: stays near the prior.
        let few = Datum {
            observations: 100,
            errors: 1,
        };
        let q = few.empirical_quality(30.0);
        assert!((27.0..=30.0).contains(&q), "{q}");
    }

    #[test]
    fn read_group_row_weights_error_probabilities() {
        let mut t = RecalTable::default();
        t.qualities.insert(
            ("rg".into(), 10),
            Datum {
                observations: 100,
                errors: 10,
            },
        );
        t.qualities.insert(
            ("rg".into(), 30),
            Datum {
                observations: 100,
                errors: 0,
            },
        );
        let r = t.read_groups()["rg"];
        assert_eq!(
            r.datum,
            Datum {
                observations: 200,
                errors: 10
            }
        );
        // mean error (0.1 + 0.001) / 2 = 0.0505 -> Q12.97
        assert!((r.estimated_q_reported - 12.967).abs() < 0.01, "{r:?}");
    }

    #[test]
    fn report_round_trips_and_has_the_gatk_sections() {
        let mut t = RecalTable::default();
        t.qualities.insert(
            ("rg1".into(), 30),
            Datum {
                observations: 1000,
                errors: 3,
            },
        );
        t.cycles.insert(
            ("rg1".into(), 30, -7),
            Datum {
                observations: 10,
                errors: 1,
            },
        );
        t.contexts.insert(
            ("rg1".into(), 30, 0b1011),
            Datum {
                observations: 20,
                errors: 0,
            },
        );
        let s = t.to_report().unwrap();
        for name in ["RecalTable0", "RecalTable1", "RecalTable2", "Arguments"] {
            assert!(s.contains(&format!("#:GATKTable:{name}:")), "{s}");
        }
        assert!(s.contains("GT") && s.contains("-7"), "{s}");
        assert_eq!(RecalTable::parse_report(&s).unwrap(), t);
        let mut bad = RecalTable::default();
        bad.qualities.insert(("a b".into(), 30), Datum::default());
        assert!(bad.to_report().is_err());
        assert!(RecalTable::parse_report("").is_err());
    }
}
