//! `max_le`: the largest median of each series is at most `value` (and,
//! mirrored, `min_ge`'s smallest at least).

use serde::{Deserialize, Serialize};

use super::super::claims::{Ctx, Outcome, Part, SeriesPart, combined, judge, per_series, show};
use super::super::extract::fmt_num;
use super::super::interval::Interval;
use super::super::quantity;
use super::{Bounds, Check};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MaxLe {
    pub value: f64,
}

impl Check for MaxLe {
    fn decide(&self, ctx: &Ctx<'_>) -> Outcome {
        per_series(
            ctx,
            format!(" (claim: ≤ {})", fmt_num(self.value)),
            |ctx, sp| extreme(ctx, sp, self.value, true),
        )
    }
}

/// The largest (`max`) or smallest value of a series against `limit`.
pub(super) fn extreme(ctx: &Ctx<'_>, sp: &SeriesPart<'_>, limit: f64, max: bool) -> Part {
    let mut part = sp.part();
    let pts = &sp.points;
    let pick = pts.iter().copied().reduce(|a, b| {
        let better = if max {
            b.est.value > a.est.value
        } else {
            b.est.value < a.est.value
        };
        if better { b } else { a }
    });
    let Some(p) = pick else {
        part.words = format!("{}no points", sp.name);
        return part;
    };
    // Every point is below the limit exactly when the highest
    // top end is, and one is clearly above exactly when the
    // highest bottom end is: the interval of the maximum is
    // (max of the bottoms, max of the tops); likewise for min.
    // Each point at 1 − α/k, so all k hold together at 1 − α.
    let sub = 1.0 - (1.0 - ctx.level) / pts.len() as f64;
    let ivs: Result<Vec<Interval>, String> =
        pts.iter().map(|p| quantity::point(&p.reps, sub)).collect();
    let interval = ivs.map(|ivs| {
        let (lo, hi) = if max {
            (
                ivs.iter().map(|i| i.lo).fold(f64::NEG_INFINITY, f64::max),
                ivs.iter().map(|i| i.hi).fold(f64::NEG_INFINITY, f64::max),
            )
        } else {
            (
                ivs.iter().map(|i| i.lo).fold(f64::INFINITY, f64::min),
                ivs.iter().map(|i| i.hi).fold(f64::INFINITY, f64::min),
            )
        };
        combined(&ivs, lo, hi, ctx.level, "each point at 1 − α/k")
    });
    let (what, bounds) = if max {
        ("largest value", Bounds::Max(limit))
    } else {
        ("smallest value", Bounds::Min(limit))
    };
    part.decided = Some(judge(
        format!("{what}{}", sp.of),
        p.est.value,
        interval,
        bounds,
        sp.fewest,
    ));
    part.words = format!(
        "{}{} {} at x={}",
        sp.name,
        if max { "max" } else { "min" },
        show(p, ctx.unit),
        p.x.label()
    );
    part
}
