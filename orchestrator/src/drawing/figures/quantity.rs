//! A claim's quantity over one or several points, with an interval at the
//! confidence the claim asks for (`interval.rs` has the methods):
//!
//! - one point: its units (repetitions, or boots);
//! - points measured as the same repetitions (one job's series) or in the
//!   same boots: the quantity per repetition (or boot), then one sample of
//!   those, so the drift they share cancels instead of widening it;
//! - two points measured apart: Welch (a ratio on logarithms, a step on
//!   values) below six units a side;
//! - otherwise each point at 1 − α/k and the quantity's range over the box,
//!   which is distribution-free once every point has the units for it.
//!
//! One repetition never decides: a point with fewer than two gives no
//! interval, whatever its own samples say.

use super::interval::{self, Interval, Method};
use super::stats::{self, Rep};

/// What the quantity is, which decides how it is treated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// numerator / denominator of two positive points: logarithms.
    Ratio,
    /// ca·a + cb·b of two points (a step between neighbours).
    Linear(f64, f64),
    /// (c − a) / (b − a) of three points: undefined where b − a can be 0.
    Share,
    /// Anything else (R² of a line): paired units, or the box.
    General,
}

/// A quantity's interval and how its points were combined.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Joint {
    pub interval: Interval,
    pub how: &'static str,
}

/// The interval of one point's centre at `level`.
pub fn point(reps: &[Rep], level: f64) -> Result<Interval, String> {
    let units = interval::units(reps);
    let t_min = interval::T_MIN_POINT;
    interval::one_sample(&units, level, true, t_min).map_err(|_| {
        interval::no_interval_reason(units.len(), level, interval::unit_name(reps), t_min)
    })
}

/// The interval of `f` over the points' centres at `level`.
pub fn over<F>(points: &[&[Rep]], f: F, shape: Shape, level: f64) -> Result<Joint, String>
where
    F: Fn(&[f64]) -> Option<f64>,
{
    let t_min = interval::T_MIN_JOINT;
    if let Some(p) = points.iter().find(|p| interval::units(p).len() < t_min) {
        return Err(interval::no_interval_reason(
            interval::units(p).len(),
            level,
            interval::unit_name(p),
            t_min,
        ));
    }
    if let Some(lined) = stats::aligned(points) {
        return paired(&lined, &f, shape, level);
    }
    independent(points, &f, shape, level)
}

fn paired<F>(lined: &[Vec<Rep>], f: &F, shape: Shape, level: f64) -> Result<Joint, String>
where
    F: Fn(&[f64]) -> Option<f64>,
{
    let n = lined[0].len();
    let mut per = Vec::with_capacity(n);
    let mut m = vec![0.0; lined.len()];
    for i in 0..n {
        for (j, reps) in lined.iter().enumerate() {
            m[j] = reps[i].value;
        }
        let Some(q) = f(&m).filter(|q| q.is_finite()) else {
            return Err(format!(
                "the quantity is undefined in repetition {} of {n} (a zero denominator)",
                i + 1
            ));
        };
        per.push(Rep {
            value: q,
            ..lined[0][i]
        });
    }
    let units = interval::units(&per);
    let t_min = interval::T_MIN_JOINT;
    let iv = interval::one_sample(&units, level, shape == Shape::Ratio, t_min).map_err(|_| {
        interval::no_interval_reason(units.len(), level, interval::unit_name(&per), t_min)
    })?;
    let how = match stats::Pairing::of(&lined[0], &lined[lined.len().min(2) - 1]) {
        stats::Pairing::Repetition => "paired by repetition",
        _ => "paired by boot",
    };
    Ok(Joint { interval: iv, how })
}

fn independent<F>(points: &[&[Rep]], f: &F, shape: Shape, level: f64) -> Result<Joint, String>
where
    F: Fn(&[f64]) -> Option<f64>,
{
    let how = "measured independently";
    let units: Vec<Vec<f64>> = points.iter().map(|p| interval::units(p)).collect();
    let k = points.len();
    let sub = 1.0 - (1.0 - level) / k as f64;
    let fewest = units.iter().map(Vec::len).min().unwrap_or(0);
    let distribution_free = fewest >= interval::order_min_units(sub);
    if !distribution_free && k == 2 {
        let welch = match shape {
            Shape::Ratio => interval::welch(&units[0], &units[1], level, true, 0.0, 0.0),
            Shape::Linear(ca, cb) => interval::welch(&units[0], &units[1], level, false, ca, cb),
            Shape::Share | Shape::General => None,
        };
        if let Some(iv) = welch {
            return Ok(Joint { interval: iv, how });
        }
    }
    let mut ranges = Vec::with_capacity(k);
    for (u, p) in units.iter().zip(points) {
        // Each point of the box is a point: its t needs T_MIN_POINT.
        let t_min = interval::T_MIN_POINT;
        let iv = interval::one_sample(u, sub, true, t_min).map_err(|_| {
            interval::no_interval_reason(u.len(), sub, interval::unit_name(p), t_min)
        })?;
        ranges.push((iv.lo, iv.hi));
    }
    let crosses = |(lo, hi): (f64, f64)| lo <= 0.0 && hi >= 0.0;
    let singular = match shape {
        Shape::Ratio => crosses(ranges[1]),
        Shape::Share => crosses((ranges[1].0 - ranges[0].1, ranges[1].1 - ranges[0].0)),
        Shape::Linear(..) | Shape::General => false,
    };
    let range = (!singular)
        .then(|| interval::box_range(&ranges, f))
        .flatten()
        .ok_or_else(|| {
            "the quantity is undefined inside its points' intervals (a denominator's interval reaches zero)"
                .to_string()
        })?;
    Ok(Joint {
        interval: Interval {
            lo: range.0,
            hi: range.1,
            level,
            method: Method::Box,
            units: fewest,
        },
        how,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reps(job: u32, v: &[f64], boots: Option<&[u32]>) -> Vec<Rep> {
        v.iter()
            .enumerate()
            .map(|(i, &value)| Rep {
                id: Some((job, i as u32)),
                value,
                boot: boots.map(|b| b[i]),
            })
            .collect()
    }

    #[test]
    fn one_repetition_never_gives_an_interval() {
        let a = reps(0, &[5.0], None);
        let b = reps(1, &[5.0, 6.0, 7.0], None);
        let e = over(&[&a, &b], |m| Some(m[0] / m[1]), Shape::Ratio, 0.95).unwrap_err();
        assert!(e.contains("one repetition"), "{e}");
        assert!(point(&a, 0.95).is_err());
    }

    #[test]
    fn points_of_the_same_boots_are_paired_and_their_drift_cancels() {
        let boots = [0, 1, 2];
        let a = reps(0, &[20.0, 30.0, 40.0], Some(&boots));
        let b = reps(1, &[10.1, 14.9, 20.0], Some(&boots));
        let j = over(&[&a, &b], |m| Some(m[0] / m[1]), Shape::Ratio, 0.95).unwrap();
        assert_eq!(j.how, "paired by boot");
        assert_eq!(j.interval.method, Method::StudentTLog);
        assert!(
            j.interval.lo > 1.9 && j.interval.hi < 2.1,
            "{:?}",
            j.interval
        );
        // The same values in unrelated boots: Welch, far wider.
        let c = reps(1, &[10.1, 14.9, 20.0], Some(&[5, 6, 7]));
        let j = over(&[&a, &c], |m| Some(m[0] / m[1]), Shape::Ratio, 0.95).unwrap();
        assert_eq!(
            (j.how, j.interval.method),
            ("measured independently", Method::WelchLog)
        );
        assert!(
            j.interval.lo < 1.5 && j.interval.hi > 2.6,
            "{:?}",
            j.interval
        );
    }

    #[test]
    fn many_independent_units_use_the_distribution_free_box() {
        let a = reps(0, &[20.0, 21.0, 19.0, 20.5, 19.5, 20.2, 19.8], None);
        let b = reps(1, &[10.0, 10.5, 9.5, 10.2, 9.8, 10.1, 9.9], None);
        let j = over(&[&a, &b], |m| Some(m[0] / m[1]), Shape::Ratio, 0.95).unwrap();
        assert_eq!(j.interval.method, Method::Box);
        // Each point at 97.5 % is its [min, max] at 7 units: 19/10.5, 21/9.5.
        assert!((j.interval.lo - 19.0 / 10.5).abs() < 1e-12);
        assert!((j.interval.hi - 21.0 / 9.5).abs() < 1e-12);
    }

    #[test]
    fn an_undefined_pair_gives_no_interval_rather_than_a_narrower_one() {
        let a = reps(0, &[1.0, 2.0, 3.0], None);
        let b = reps(0, &[1.0, 0.0, 3.0], None);
        let e = over(
            &[&a, &b],
            |m| (m[1] != 0.0).then(|| m[0] / m[1]),
            Shape::Ratio,
            0.95,
        )
        .unwrap_err();
        assert!(e.contains("undefined"), "{e}");
    }
}
