//! The samples of one repetition unit (a point's repetition on one panel
//! position) in bounded memory.
//!
//! Count, sum, minimum and maximum are always exact. Medians and
//! percentiles are exact while the unit keeps its values: up to
//! [`EXACT_PER_UNIT`] of them, and while the panel's [`Budget`] of kept
//! values lasts. Past either, the unit turns into a DDSketch (Masson et al.,
//! VLDB 2019: every quantile within [`SKETCH_ALPHA`] of the true value,
//! relatively) plus a uniform reservoir of [`RESERVOIR`] values, which is
//! what a single repetition's interval is bootstrapped from. Peak memory
//! is then the budget's 8 bytes per kept value, whatever the run's size.

use sketches_ddsketch::{Config, DDSketch};

use super::def::Stat;
use super::stats::{self, Rng, SEED};

/// Values one unit keeps exactly (8 MiB).
pub const EXACT_PER_UNIT: usize = 1 << 20;
/// Values all units of one panel keep exactly together (128 MiB).
pub const EXACT_PER_PANEL: usize = 1 << 24;
/// Relative accuracy of a sketched unit's quantiles.
pub const SKETCH_ALPHA: f64 = 0.005;
/// Values a sketched unit keeps, uniformly drawn, for the bootstrap.
pub const RESERVOIR: usize = 1 << 15;

/// How many values are kept exactly: per unit and per panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub per_unit: usize,
    pub per_panel: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            per_unit: EXACT_PER_UNIT,
            per_panel: EXACT_PER_PANEL,
        }
    }
}

/// Exact values a panel may still keep.
#[derive(Debug)]
pub struct Budget {
    left: usize,
    per_unit: usize,
}

impl Budget {
    pub fn new(limits: Limits) -> Budget {
        Budget {
            left: limits.per_panel,
            per_unit: limits.per_unit,
        }
    }
}

#[derive(Clone)]
enum Kept {
    Exact(Vec<f64>),
    Sketch {
        sketch: Box<DDSketch>,
        reservoir: Vec<f64>,
        rng: Rng,
    },
}

/// One unit's samples: exact while they fit, sketched beyond.
#[derive(Clone)]
pub struct UnitValues {
    count: u64,
    kept: Kept,
}

impl std::fmt::Debug for UnitValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnitValues")
            .field("count", &self.count)
            .field("sketched", &self.is_sketched())
            .finish()
    }
}

impl Default for UnitValues {
    fn default() -> Self {
        UnitValues {
            count: 0,
            kept: Kept::Exact(Vec::new()),
        }
    }
}

impl UnitValues {
    pub fn push(&mut self, v: f64, budget: &mut Budget) {
        self.count += 1;
        if let Kept::Exact(values) = &mut self.kept {
            if values.len() < budget.per_unit && budget.left > 0 {
                values.push(v);
                budget.left -= 1;
                return;
            }
            // Full: what it kept goes back to the panel, and from here on
            // the unit is a sketch.
            budget.left += values.len();
            self.become_sketch();
        }
        if let Kept::Sketch {
            sketch,
            reservoir,
            rng,
        } = &mut self.kept
        {
            sample(sketch, reservoir, rng, self.count, v);
        }
    }

    fn become_sketch(&mut self) {
        let Kept::Exact(values) = &mut self.kept else {
            return;
        };
        let values = std::mem::take(values);
        let mut sketch = Box::new(DDSketch::new(Config::new(SKETCH_ALPHA, 4096, 1e-12)));
        let mut reservoir = Vec::with_capacity(RESERVOIR);
        // Seeded by the unit's size, so a redraw keeps the same draws.
        let mut rng = Rng::new(SEED ^ values.len() as u64);
        for (i, v) in values.into_iter().enumerate() {
            sample(&mut sketch, &mut reservoir, &mut rng, i as u64 + 1, v);
        }
        self.kept = Kept::Sketch {
            sketch,
            reservoir,
            rng,
        };
    }

    /// Adds another unit's samples (two x cells that fall on one axis
    /// position): exact while both are and the budget lasts.
    pub fn merge(&mut self, other: UnitValues, budget: &mut Budget) {
        match other.kept {
            Kept::Exact(values) => {
                budget.left += values.len();
                for v in values {
                    self.push(v, budget);
                }
            }
            Kept::Sketch {
                sketch, reservoir, ..
            } => {
                if let Kept::Exact(values) = &self.kept {
                    budget.left += values.len();
                }
                self.become_sketch();
                self.count += other.count;
                if let Kept::Sketch {
                    sketch: mine,
                    reservoir: kept,
                    ..
                } = &mut self.kept
                {
                    // Same configuration on both sides: merging cannot fail.
                    let _ = mine.merge(&sketch);
                    kept.extend(reservoir);
                    kept.truncate(RESERVOIR);
                }
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn is_sketched(&self) -> bool {
        matches!(self.kept, Kept::Sketch { .. })
    }

    /// The statistic: exact as `stats::stat` over every value while the
    /// unit kept them; from the sketch (quantiles) or its exact running
    /// totals (the rest) beyond.
    pub fn stat(&self, s: Stat) -> Option<f64> {
        let (sketch, _) = match &self.kept {
            Kept::Exact(values) => return stats::stat(values, s),
            Kept::Sketch {
                sketch, reservoir, ..
            } => (sketch, reservoir),
        };
        let q = |q: f64| sketch.quantile(q).ok().flatten();
        match s {
            Stat::Mean => Some(sketch.sum()? / self.count as f64),
            Stat::Sum => sketch.sum(),
            Stat::Count => Some(self.count as f64),
            Stat::Min => sketch.min(),
            Stat::Max => sketch.max(),
            Stat::Median => q(0.5),
            Stat::Percentile(p) => q(p / 100.0),
        }
    }

    /// The values a single repetition's interval is resampled from: all of
    /// them, or the uniform reservoir of a sketched unit.
    pub fn for_bootstrap(&self) -> &[f64] {
        match &self.kept {
            Kept::Exact(values) => values,
            Kept::Sketch { reservoir, .. } => reservoir,
        }
    }
}

/// Adds the `n`-th value (from 1) to a sketch and, by Vitter's algorithm R,
/// to a reservoir that stays a uniform sample of the first `n`.
fn sample(sketch: &mut DDSketch, reservoir: &mut Vec<f64>, rng: &mut Rng, n: u64, v: f64) {
    sketch.add(v);
    if reservoir.len() < RESERVOIR {
        reservoir.push(v);
    } else {
        let j = rng.below(usize::try_from(n).unwrap_or(usize::MAX));
        if let Some(slot) = reservoir.get_mut(j) {
            *slot = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lognormal(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| (10.0 + 0.8 * rng.normal()).exp()).collect()
    }

    #[test]
    fn a_unit_within_its_budget_gives_exactly_what_all_its_values_give() {
        let values = lognormal(10_000, 1);
        let mut budget = Budget::new(Limits::default());
        let mut unit = UnitValues::default();
        for &v in &values {
            unit.push(v, &mut budget);
        }
        assert!(!unit.is_sketched());
        for s in [
            Stat::Mean,
            Stat::Median,
            Stat::Percentile(99.0),
            Stat::Min,
            Stat::Max,
            Stat::Sum,
            Stat::Count,
        ] {
            assert_eq!(unit.stat(s), stats::stat(&values, s), "{s:?}");
        }
        assert_eq!(unit.for_bootstrap(), values.as_slice());
    }

    #[test]
    fn past_the_budget_a_unit_is_sketched_within_its_stated_accuracy() {
        let values = lognormal(300_000, 2);
        // A panel budget of 100 000 values: the unit turns into a sketch
        // at the 100 001st and gives the budget back.
        let mut budget = Budget::new(Limits {
            per_unit: EXACT_PER_UNIT,
            per_panel: 100_000,
        });
        let mut unit = UnitValues::default();
        for &v in &values {
            unit.push(v, &mut budget);
        }
        assert!(unit.is_sketched());
        assert_eq!(budget.left, 100_000, "the exact values were released");
        assert_eq!(unit.count(), 300_000);
        assert_eq!(unit.for_bootstrap().len(), RESERVOIR);
        for s in [Stat::Median, Stat::Percentile(99.0), Stat::Percentile(99.9)] {
            let exact = stats::stat(&values, s).unwrap();
            let got = unit.stat(s).unwrap();
            // The sketch's bound, plus the rank step between quantile
            // definitions (interpolated vs nearest rank).
            assert!(
                (got - exact).abs() <= 2.0 * SKETCH_ALPHA * exact,
                "{s:?}: sketch {got}, exact {exact}"
            );
        }
        let mean = stats::stat(&values, Stat::Mean).unwrap();
        assert!((unit.stat(Stat::Mean).unwrap() - mean).abs() <= 1e-9 * mean);
        assert_eq!(unit.stat(Stat::Count), Some(300_000.0));
        // The reservoir is a uniform sample: its median is near the data's.
        let mut r = unit.for_bootstrap().to_vec();
        r.sort_by(f64::total_cmp);
        let rm = r[r.len() / 2];
        let m = stats::stat(&values, Stat::Median).unwrap();
        assert!((rm - m).abs() < 0.05 * m, "reservoir median {rm} vs {m}");
    }

    #[test]
    fn merging_keeps_every_value_counted() {
        let a = lognormal(1000, 3);
        let b = lognormal(2000, 4);
        let mut budget = Budget::new(Limits {
            per_unit: EXACT_PER_UNIT,
            per_panel: 2500,
        });
        let (mut ua, mut ub) = (UnitValues::default(), UnitValues::default());
        a.iter().for_each(|&v| ua.push(v, &mut budget));
        b.iter().for_each(|&v| ub.push(v, &mut budget));
        assert!(ub.is_sketched(), "the budget ran out during b");
        ua.merge(ub, &mut budget);
        assert_eq!(ua.count(), 3000);
        assert!(ua.is_sketched());
        let all: Vec<f64> = a.iter().chain(&b).copied().collect();
        let exact = stats::stat(&all, Stat::Median).unwrap();
        let got = ua.stat(Stat::Median).unwrap();
        assert!((got - exact).abs() <= 0.02 * exact, "{got} vs {exact}");
    }
}
