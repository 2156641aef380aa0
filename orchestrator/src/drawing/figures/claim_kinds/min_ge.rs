//! `min_ge`: the smallest median of each series is at least `value`.

use serde::{Deserialize, Serialize};

use super::super::claims::{Ctx, Outcome, per_series};
use super::super::extract::fmt_num;
use super::Check;
use super::max_le::extreme;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MinGe {
    pub value: f64,
}

impl Check for MinGe {
    fn decide(&self, ctx: &Ctx<'_>) -> Outcome {
        per_series(
            ctx,
            format!(" (claim: ≥ {})", fmt_num(self.value)),
            |ctx, sp| extreme(ctx, sp, self.value, false),
        )
    }
}
