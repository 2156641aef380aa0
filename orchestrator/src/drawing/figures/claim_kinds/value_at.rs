//! `value_at`: the series' median at one x (`x` or `at`) is within
//! bounds (`min` and/or `max`).

use serde::{Deserialize, Serialize};

use super::super::claims::{
    Ctx, Outcome, Part, SeriesPart, bounds_text, judge, per_series, show, used,
};
use super::super::def::DefError;
use super::super::quantity::{self, Joint};
use super::place::{self, At};
use super::{Bounds, Check, Place};

/// `value_at`: one of `x` / `at`, and `min` and/or `max`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "RawValueAt", into = "RawValueAt")]
pub struct ValueAt {
    pub place: Place,
    pub bounds: Bounds,
}

/// `value_at` as written; `ValueAt` is it checked.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawValueAt {
    #[serde(skip_serializing_if = "Option::is_none")]
    x: Option<toml::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<At>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<f64>,
}

impl TryFrom<RawValueAt> for ValueAt {
    type Error = DefError;
    fn try_from(r: RawValueAt) -> Result<Self, DefError> {
        let (place, bounds) = place::read("value_at", (r.x, r.at, r.min, r.max))?;
        Ok(ValueAt { place, bounds })
    }
}

impl From<ValueAt> for RawValueAt {
    fn from(v: ValueAt) -> Self {
        let (x, at, min, max) = place::keys(v.place, v.bounds);
        RawValueAt { x, at, min, max }
    }
}

impl Check for ValueAt {
    fn decide(&self, ctx: &Ctx<'_>) -> Outcome {
        per_series(
            ctx,
            format!(" (claim: {})", bounds_text(self.bounds)),
            |ctx, sp| self.part(ctx, sp),
        )
    }
}

impl ValueAt {
    fn part(&self, ctx: &Ctx<'_>, sp: &SeriesPart<'_>) -> Part {
        let mut part = sp.part();
        let s = sp.series;
        let Some(p) = ctx.at(&self.place, s, None) else {
            part.words = format!("{}{}", sp.name, ctx.missing_place(&self.place, &[s]));
            return part;
        };
        let interval = quantity::point(&p.reps, ctx.level).map(|iv| Joint {
            interval: iv,
            how: "one point",
        });
        part.decided = Some(judge(
            format!("value{} at x={}", sp.of, p.x.label()),
            p.est.value,
            interval,
            self.bounds,
            p.est.n,
        ));
        part.words = format!("{}{} at x={}", sp.name, show(p, ctx.unit), p.x.label());
        part.values = vec![used(s, p)];
        part
    }
}
