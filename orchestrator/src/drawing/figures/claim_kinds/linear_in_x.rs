//! `linear_in_x`: a least-squares line through the medians has
//! R² ≥ `r2_min`.

use serde::{Deserialize, Serialize};

use super::super::claims::{Ctx, Outcome, Part, SeriesPart, judge, per_series, show_interval};
use super::super::extract::fmt_num;
use super::super::quantity::{self, Shape};
use super::super::stats::{self, Rep};
use super::{Bounds, Check};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinearInX {
    pub r2_min: f64,
    /// Fewer points are not measurable (at least 2).
    #[serde(default = "three")]
    pub min_points: usize,
}

fn three() -> usize {
    3
}

impl Check for LinearInX {
    fn decide(&self, ctx: &Ctx<'_>) -> Outcome {
        per_series(
            ctx,
            format!(" (claim: R² ≥ {})", fmt_num(self.r2_min)),
            |ctx, sp| self.part(ctx, sp),
        )
    }
}

impl LinearInX {
    fn part(&self, ctx: &Ctx<'_>, sp: &SeriesPart<'_>) -> Part {
        let mut part = sp.part();
        let (pts, name) = (&sp.points, &sp.name);
        let need = self.min_points.max(2);
        let xs: Vec<f64> = pts.iter().map(|p| p.x.pos()).collect();
        let ys: Vec<f64> = pts.iter().map(|p| p.est.value).collect();
        if pts.len() < need {
            part.words = format!("{name}{} point(s), {need} needed for a fit", pts.len());
            return part;
        }
        let Some(fit) = stats::linear_fit(&xs, &ys) else {
            part.words = format!("{name}no fit (one distinct x)");
            return part;
        };
        // The line refitted per repetition (or boot) where every x
        // was measured in the same ones, else over the box.
        let reps: Vec<&[Rep]> = pts.iter().map(|p| p.reps.as_slice()).collect();
        let interval = quantity::over(
            &reps,
            |m| stats::linear_fit(&xs, m).map(|f| f.r2),
            Shape::General,
            ctx.level,
        )
        .map(|mut j| {
            // R² lives in [0, 1]; a t interval's ends need not.
            j.interval.lo = j.interval.lo.clamp(0.0, 1.0);
            j.interval.hi = j.interval.hi.clamp(0.0, 1.0);
            j
        });
        part.decided = Some(judge(
            format!("R² of a line{}", sp.of),
            fit.r2,
            interval,
            Bounds::Min(self.r2_min),
            sp.fewest,
        ));
        part.words = format!(
            "{name}R² = {} over {} points (slope {})",
            show_interval(fit.r2, part.decided.as_ref().and_then(|d| d.interval)),
            pts.len(),
            fmt_num(fit.slope)
        );
        part
    }
}
