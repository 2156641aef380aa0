//! `testbed compare RUN_A RUN_B`: per figure, panel, series and x, the
//! change from A to B with both intervals. A change counts only when the
//! two 95 % intervals do not overlap; it is a regression when it goes the
//! panel's worse way (`y.better`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::def::{Better, FigureDef};
use super::error::FigureError;
use super::extract::{Series, fmt_num};
use super::stats::Estimate;
use super::{Figure, compute};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flag {
    Regression,
    Improvement,
    /// Intervals do not overlap; the panel has no better direction.
    Changed,
    /// Intervals overlap.
    Same,
    /// A side has no interval: the change cannot be told from noise.
    NoInterval,
}

impl Flag {
    fn text(self) -> &'static str {
        match self {
            Flag::Regression => "REGRESSION",
            Flag::Improvement => "improvement",
            Flag::Changed => "changed",
            Flag::Same => "within noise",
            Flag::NoInterval => "no interval",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub figure: String,
    pub panel: String,
    pub series: String,
    pub x: String,
    pub a: Estimate,
    pub b: Estimate,
    /// (b − a) / a in percent.
    pub change_pct: f64,
    pub flag: Flag,
}

#[derive(Debug, Default, Serialize)]
pub struct Comparison {
    pub changes: Vec<Change>,
    /// "figure/panel: series only in A" and the like.
    pub unmatched: Vec<String>,
}

impl Comparison {
    pub fn regressions(&self) -> usize {
        self.changes
            .iter()
            .filter(|c| c.flag == Flag::Regression)
            .count()
    }
}

pub fn flag(a: &Estimate, b: &Estimate, better: Option<Better>) -> Flag {
    let (Some(al), Some(ah), Some(bl), Some(bh)) = (a.lo, a.hi, b.lo, b.hi) else {
        return Flag::NoInterval;
    };
    if bl <= ah && al <= bh {
        return Flag::Same;
    }
    let up = b.value > a.value;
    match better {
        None => Flag::Changed,
        Some(Better::Higher) if up => Flag::Improvement,
        Some(Better::Lower) if !up => Flag::Improvement,
        Some(_) => Flag::Regression,
    }
}

fn series_changes(
    fig: &str,
    panel: &str,
    better: Option<Better>,
    a: &Series,
    b: &Series,
    out: &mut Comparison,
) {
    for pa in &a.points {
        match b.points.iter().find(|pb| pb.x == pa.x) {
            Some(pb) => out.changes.push(Change {
                figure: fig.to_string(),
                panel: panel.to_string(),
                series: a.label.clone(),
                x: pa.x.label(),
                a: pa.est,
                b: pb.est,
                change_pct: if pa.est.value != 0.0 {
                    (pb.est.value - pa.est.value) / pa.est.value * 100.0
                } else {
                    f64::NAN
                },
                flag: flag(&pa.est, &pb.est, better),
            }),
            None => out.unmatched.push(format!(
                "{fig}/{panel}: {} x={} only in A",
                a.label,
                pa.x.label()
            )),
        }
    }
    for pb in &b.points {
        if !a.points.iter().any(|pa| pa.x == pb.x) {
            out.unmatched.push(format!(
                "{fig}/{panel}: {} x={} only in B",
                b.label,
                pb.x.label()
            ));
        }
    }
}

fn figure_changes(fa: &Figure, fb: &Figure, out: &mut Comparison) {
    for (p, ((name, da), (_, db))) in fa.def.panels.iter().zip(fa.panels.iter().zip(&fb.panels)) {
        for sa in &da.series {
            match db.series(&sa.key) {
                Some(sb) => series_changes(&fa.def.id, name, p.y.better, sa, sb, out),
                None => out.unmatched.push(format!(
                    "{}/{name}: series {} only in A",
                    fa.def.id, sa.label
                )),
            }
        }
        for sb in &db.series {
            if da.series(&sb.key).is_none() {
                out.unmatched.push(format!(
                    "{}/{name}: series {} only in B",
                    fa.def.id, sb.label
                ));
            }
        }
    }
}

pub fn compare(
    a: &Path,
    b: &Path,
    defs: &BTreeMap<String, FigureDef>,
) -> Result<Comparison, FigureError> {
    let ra = compute(a, defs)?;
    let rb = compute(b, defs)?;
    let mut out = Comparison::default();
    for fa in &ra.figures {
        match rb.figures.iter().find(|f| f.def.id == fa.def.id) {
            Some(fb) => figure_changes(fa, fb, &mut out),
            None => out
                .unmatched
                .push(format!("figure {} only in A", fa.def.id)),
        }
    }
    for fb in &rb.figures {
        if !ra.figures.iter().any(|f| f.def.id == fb.def.id) {
            out.unmatched
                .push(format!("figure {} only in B", fb.def.id));
        }
    }
    Ok(out)
}

fn show(e: &Estimate) -> String {
    match (e.lo, e.hi) {
        (Some(l), Some(h)) => format!("{} [{}–{}]", fmt_num(e.value), fmt_num(l), fmt_num(h)),
        _ => fmt_num(e.value),
    }
}

pub fn render(c: &Comparison) -> String {
    let mut s = String::new();
    let mut last = String::new();
    for ch in &c.changes {
        let head = format!("{} / {}", ch.figure, ch.panel);
        if head != last {
            let _ = writeln!(s, "{head}");
            let _ = writeln!(
                s,
                "  {:<28} {:>8}  {:<28} {:<28} {:>9}  flag",
                "series", "x", "A", "B", "change"
            );
            last = head;
        }
        let _ = writeln!(
            s,
            "  {:<28} {:>8}  {:<28} {:<28} {:>8.1}%  {}",
            ch.series,
            ch.x,
            show(&ch.a),
            show(&ch.b),
            ch.change_pct,
            ch.flag.text()
        );
    }
    for u in &c.unmatched {
        let _ = writeln!(s, "{u}");
    }
    let _ = writeln!(
        s,
        "{} values compared, {} regressions (95 % intervals do not overlap, worse direction)",
        c.changes.len(),
        c.regressions()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::stats::CiMethod;

    fn est(v: f64, lo: f64, hi: f64) -> Estimate {
        Estimate {
            value: v,
            lo: Some(lo),
            hi: Some(hi),
            n: 3,
            ci: CiMethod::Repetitions,
        }
    }

    #[test]
    fn flags_follow_intervals_and_direction() {
        let a = est(100.0, 95.0, 105.0);
        assert_eq!(
            flag(&a, &est(80.0, 78.0, 82.0), Some(Better::Higher)),
            Flag::Regression
        );
        assert_eq!(
            flag(&a, &est(80.0, 78.0, 82.0), Some(Better::Lower)),
            Flag::Improvement
        );
        assert_eq!(
            flag(&a, &est(102.0, 98.0, 110.0), Some(Better::Higher)),
            Flag::Same
        );
        assert_eq!(flag(&a, &est(80.0, 78.0, 82.0), None), Flag::Changed);
        let bare = Estimate {
            lo: None,
            hi: None,
            ..a
        };
        assert_eq!(flag(&a, &bare, Some(Better::Higher)), Flag::NoInterval);
    }
}
