//! `monotonic`: along x, no step goes the other way by more than
//! `tolerance` × the previous value.

use serde::{Deserialize, Serialize};

use super::super::claims::{
    Ctx, Outcome, Part, SeriesPart, combined, judge, per_series, show_interval,
};
use super::super::extract::{SeriesPoint, fmt_num};
use super::super::interval::Interval;
use super::super::quantity::{self, Joint, Shape};
use super::{Bounds, Check};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    Increasing,
    Decreasing,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Monotonic {
    pub direction: Direction,
    /// A step may go against the direction by this fraction.
    #[serde(default)]
    pub tolerance: f64,
    /// Fewer points are not measurable (at least 2).
    #[serde(default = "two")]
    pub min_points: usize,
}

fn two() -> usize {
    2
}

impl Check for Monotonic {
    fn decide(&self, ctx: &Ctx<'_>) -> Outcome {
        let limit = format!(
            " (claim: {}{})",
            match self.direction {
                Direction::Increasing => "increasing",
                Direction::Decreasing => "decreasing",
            },
            if self.tolerance > 0.0 {
                format!(", tolerance {} %", fmt_num(self.tolerance * 100.0))
            } else {
                String::new()
            }
        );
        per_series(ctx, limit, |ctx, sp| self.part(ctx, sp))
    }
}

impl Monotonic {
    fn part(&self, ctx: &Ctx<'_>, sp: &SeriesPart<'_>) -> Part {
        let mut part = sp.part();
        let (pts, name, of) = (&sp.points, &sp.name, &sp.of);
        let need = self.min_points.max(2);
        if pts.len() < need {
            part.words = format!("{name}{} point(s), {need} needed", pts.len());
            return part;
        }
        let up = self.direction == Direction::Increasing;
        let tol = self.tolerance;
        // A step's move in the claimed direction plus the slack:
        // the claim wants it ≥ 0 at every step.
        let step = move |a: f64, b: f64| {
            let slack = tol * a.abs();
            if up { b - a + slack } else { a - b + slack }
        };
        // The step is linear in the two medians: a's coefficient
        // takes the slack's sign from a.
        let coef = move |a: f64| {
            let sign = if a < 0.0 { -1.0 } else { 1.0 };
            if up {
                (-1.0 + tol * sign, 1.0)
            } else {
                (1.0 + tol * sign, -1.0)
            }
        };
        struct Step<'p> {
            a: &'p SeriesPoint,
            b: &'p SeriesPoint,
            est: f64,
            iv: Result<Joint, String>,
        }
        // Each step at 1 − α/(k − 1): all of them hold together at 1 − α.
        let sub = 1.0 - (1.0 - ctx.level) / (pts.len() - 1) as f64;
        let steps: Vec<Step<'_>> = pts
            .windows(2)
            .map(|w| {
                let est = step(w[0].est.value, w[1].est.value);
                let (ca, cb) = coef(w[0].est.value);
                let iv = quantity::over(
                    &[&w[0].reps, &w[1].reps],
                    |m| Some(step(m[0], m[1])),
                    Shape::Linear(ca, cb),
                    sub,
                )
                .map(|mut j| {
                    j.interval.lo = j.interval.lo.min(est);
                    j.interval.hi = j.interval.hi.max(est);
                    j
                });
                Step {
                    a: w[0],
                    b: w[1],
                    est,
                    iv,
                }
            })
            .collect();
        let est = steps.iter().map(|s| s.est).fold(f64::INFINITY, f64::min);
        // Every step holds ⇔ the lowest bottom end is ≥ 0; some step
        // clearly fails ⇔ the lowest top end is < 0.
        let ivs: Result<Vec<Joint>, String> = steps.iter().map(|s| s.iv.clone()).collect();
        let interval = ivs.map(|v| {
            let (lo, hi) = v.iter().fold((f64::INFINITY, f64::INFINITY), |acc, j| {
                (acc.0.min(j.interval.lo), acc.1.min(j.interval.hi))
            });
            let parts: Vec<Interval> = v.iter().map(|j| j.interval).collect();
            let how = v.first().map_or("measured independently", |j| j.how);
            combined(&parts, lo, hi, ctx.level, how)
        });
        let what = if up { "smallest rise" } else { "smallest fall" };
        let with_tol = if tol > 0.0 { " (with tolerance)" } else { "" };
        part.decided = Some(judge(
            format!("{what}{with_tol} between neighbouring x{of}"),
            est,
            interval,
            Bounds::Min(0.0),
            sp.fewest,
        ));
        let trace: Vec<String> = pts
            .iter()
            .map(|p| format!("{}→{}", p.x.label(), fmt_num(p.est.value)))
            .collect();
        part.words = format!("{name}{}", trace.join(", "));
        // The weakest step: broken on the medians, or the one whose
        // interval reaches furthest below 0.
        let bottom = |s: &Step<'_>| s.iv.as_ref().map_or(s.est, |j| j.interval.lo);
        let weakest = steps.iter().min_by(|x, y| bottom(x).total_cmp(&bottom(y)));
        if let Some(w) = weakest
            && bottom(w) < 0.0
        {
            part.words.push_str(&format!(
                " ({} → {} from x={} to x={}: step {})",
                fmt_num(w.a.est.value),
                fmt_num(w.b.est.value),
                w.a.x.label(),
                w.b.x.label(),
                show_interval(
                    w.est,
                    w.iv.as_ref().ok().map(|j| (j.interval.lo, j.interval.hi))
                )
            ));
        }
        part
    }
}
