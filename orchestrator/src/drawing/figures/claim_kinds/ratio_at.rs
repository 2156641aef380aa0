//! `ratio_at`: median(numerator) / median(denominator) at one x is
//! within bounds; decided on the two series together.

use serde::{Deserialize, Serialize};

use super::super::claims::{
    Ctx, Outcome, bounds_text, judge, not_measurable, show, show_interval, two_series, used,
};
use super::super::def::DefError;
use super::super::quantity::{self, Shape};
use super::place::{self, At};
use super::{Bounds, Check, Place};

/// `ratio_at`: `numerator`, `denominator` (series keys), one of `x` /
/// `at`, and `min` and/or `max`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "RawRatioAt", into = "RawRatioAt")]
pub struct RatioAt {
    pub numerator: String,
    pub denominator: String,
    pub place: Place,
    pub bounds: Bounds,
}

/// `ratio_at` as written; `RatioAt` is it checked.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawRatioAt {
    numerator: String,
    denominator: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    x: Option<toml::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<At>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<f64>,
}

impl TryFrom<RawRatioAt> for RatioAt {
    type Error = DefError;
    fn try_from(r: RawRatioAt) -> Result<Self, DefError> {
        let (place, bounds) = place::read("ratio_at", (r.x, r.at, r.min, r.max))?;
        Ok(RatioAt {
            numerator: r.numerator,
            denominator: r.denominator,
            place,
            bounds,
        })
    }
}

impl From<RatioAt> for RawRatioAt {
    fn from(v: RatioAt) -> Self {
        let (x, at, min, max) = place::keys(v.place, v.bounds);
        RawRatioAt {
            numerator: v.numerator,
            denominator: v.denominator,
            x,
            at,
            min,
            max,
        }
    }
}

impl Check for RatioAt {
    fn decide(&self, ctx: &Ctx<'_>) -> Outcome {
            let r = self;
        let (num_key, den_key) = (&r.numerator, &r.denominator);
        let (num, den) = match two_series(ctx, num_key, den_key) {
            Ok(pair) => pair,
            Err(why) => return not_measurable(why),
        };
        let (Some(n), Some(d)) = (
            ctx.at(&r.place, num, Some(den)),
            ctx.at(&r.place, den, Some(num)),
        ) else {
            let why = match r.place {
                Place::X(_) => format!(
                    "{num_key} and {den_key}: {}",
                    ctx.missing_place(&r.place, &[num, den])
                ),
                Place::At(_) => {
                    format!("{num_key} and {den_key} have no point at the claim's x in common")
                }
            };
            return not_measurable(why);
        };
        if n.x != d.x || d.est.value == 0.0 {
            return not_measurable(format!("{num_key} and {den_key} have no comparable point"));
        }
        let ratio = n.est.value / d.est.value;
        let interval = quantity::over(
            &[&n.reps, &d.reps],
            |m| (m[1] != 0.0).then_some(m[0] / m[1]),
            Shape::Ratio,
            ctx.level,
        );
        let paired = interval.as_ref().map_or("no interval", |j| j.how);
        let decided = judge(
            format!("{num_key}/{den_key} at x={}", n.x.label()),
            ratio,
            interval,
            r.bounds,
            n.est.n.min(d.est.n),
        );
        let words = format!(
            "{num_key}/{den_key} at x={} = {} / {} = {} ({paired}) (claim: {})",
            n.x.label(),
            show(n, ctx.unit),
            show(d, ctx.unit),
            show_interval(ratio, decided.interval),
            bounds_text(r.bounds)
        );
        (
            decided.verdict,
            words,
            vec![used(num, n), used(den, d)],
            Some(decided),
        )
    }
}
