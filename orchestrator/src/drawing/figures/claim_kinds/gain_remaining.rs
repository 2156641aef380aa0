//! `gain_remaining`: how much of `hook`'s gain over `baseline` remains
//! over the best of `rivals` at one x: (best rival − hook) / (baseline −
//! hook), 1 when the best rival is no better than the baseline, 0 when it
//! matches the hook, below 0 when it beats it. "Best" follows the panel's
//! `better` and is chosen on the medians.

use serde::{Deserialize, Serialize};

use super::super::claims::{
    Ctx, Outcome, bounds_text, judge, not_measurable, show, show_interval, two_series, used,
};
use super::super::def::{Better, DefError, Panel};
use super::super::extract::{Series, SeriesPoint};
use super::super::quantity::{self, Shape};
use super::place::{self, At};
use super::{Bounds, Check, Place};

/// `gain_remaining`: `hook`, `baseline`, `rivals` (series keys), one of
/// `x` / `at`, and `min` and/or `max`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "RawGainRemaining", into = "RawGainRemaining")]
pub struct GainRemaining {
    pub hook: String,
    pub baseline: String,
    pub rivals: Vec<String>,
    pub place: Place,
    pub bounds: Bounds,
}

/// `gain_remaining` as written; `GainRemaining` is it checked.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawGainRemaining {
    hook: String,
    baseline: String,
    rivals: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    x: Option<toml::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<At>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<f64>,
}

impl TryFrom<RawGainRemaining> for GainRemaining {
    type Error = DefError;
    fn try_from(r: RawGainRemaining) -> Result<Self, DefError> {
        let (place, bounds) = place::read("gain_remaining", (r.x, r.at, r.min, r.max))?;
        if r.rivals.is_empty() {
            return Err(DefError::NoRivals);
        }
        Ok(GainRemaining {
            hook: r.hook,
            baseline: r.baseline,
            rivals: r.rivals,
            place,
            bounds,
        })
    }
}

impl From<GainRemaining> for RawGainRemaining {
    fn from(v: GainRemaining) -> Self {
        let (x, at, min, max) = place::keys(v.place, v.bounds);
        RawGainRemaining {
            hook: v.hook,
            baseline: v.baseline,
            rivals: v.rivals,
            x,
            at,
            min,
            max,
        }
    }
}

impl Check for GainRemaining {
    /// The best rival is the lowest or the highest: the panel must say
    /// which is better.
    fn validate(&self, panel: &Panel) -> Result<(), String> {
        match panel.y.better {
            Some(_) => Ok(()),
            None => Err("its panel must say `better = \"lower\"` or `\"higher\"` in `y`, to tell the best rival".into()),
        }
    }

    fn decide(&self, ctx: &Ctx<'_>) -> Outcome {
            let g = self;
        let Some(better) = ctx.better else {
            return not_measurable("the panel does not say which direction is better".into());
        };
        let (hook, base) = match two_series(ctx, &g.hook, &g.baseline) {
            Ok(pair) => pair,
            Err(why) => return not_measurable(why),
        };
        let (Some(h), Some(b)) = (
            ctx.at(&g.place, hook, Some(base)),
            ctx.at(&g.place, base, Some(hook)),
        ) else {
            return not_measurable(format!(
                "{} and {}: {}",
                g.hook,
                g.baseline,
                ctx.missing_place(&g.place, &[hook, base])
            ));
        };
        // Rivals measured at the same x; the others are named, not used.
        let mut rivals: Vec<(&Series, &SeriesPoint)> = Vec::new();
        let mut unused: Vec<&str> = Vec::new();
        for key in &g.rivals {
            match ctx
                .data
                .series(key)
                .and_then(|s| s.points.iter().find(|p| p.x == h.x).map(|p| (s, p)))
            {
                Some(r) => rivals.push(r),
                None => unused.push(key),
            }
        }
        let x = h.x.label();
        if rivals.is_empty() {
            return not_measurable(format!(
                "none of the rivals ({}) was measured at x={x}",
                g.rivals.join(", ")
            ));
        }
        // The best rival on the medians, held fixed in the bootstrap: taking
        // the best of several in every resample would favour whichever rival
        // was lucky in it and shift the interval below the estimate.
        let lower = better == Better::Lower;
        let Some((best, best_point)) = rivals
            .iter()
            .copied()
            .reduce(|a, r| {
                if (r.1.est.value < a.1.est.value) == lower {
                    r
                } else {
                    a
                }
            })
            .map(|(s, p)| (s.key.clone(), p))
        else {
            return not_measurable("no rival measured".into());
        };
        let share = |m: &[f64]| {
            let gain = m[1] - m[0];
            (gain != 0.0).then(|| (m[2] - m[0]) / gain)
        };
        let Some(estimate) = share(&[h.est.value, b.est.value, best_point.est.value]) else {
            return not_measurable(format!(
                "{} and {} are equal at x={x}: no gain to share",
                g.hook, g.baseline
            ));
        };
        let interval = quantity::over(
            &[&h.reps, &b.reps, &best_point.reps],
            share,
            Shape::Share,
            ctx.level,
        );
        let fewest = [h, b, best_point]
            .iter()
            .map(|p| p.est.n)
            .min()
            .unwrap_or(0);
        let decided = judge(
            format!(
                "share of the {} gain over {} left by the best rival at x={x}",
                g.hook, g.baseline
            ),
            estimate,
            interval,
            g.bounds,
            fewest,
        );
        let mut words = format!(
            "at x={x}: {} {}, {} {}, best rival {best} {} → (best − {})/({} − {}) = {} (claim: {})",
            g.hook,
            show(h, ctx.unit),
            g.baseline,
            show(b, ctx.unit),
            show(best_point, ctx.unit),
            g.hook,
            g.baseline,
            g.hook,
            show_interval(estimate, decided.interval),
            bounds_text(g.bounds)
        );
        if !unused.is_empty() {
            words.push_str(&format!(" [not measured here: {}]", unused.join(", ")));
        }
        let values = [used(hook, h), used(base, b)]
            .into_iter()
            .chain(rivals.iter().map(|(s, p)| used(s, p)))
            .collect();
        (decided.verdict, words, values, Some(decided))
    }
}
