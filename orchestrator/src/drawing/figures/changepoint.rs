//! Change points in a history of runs: the t-test variant of E-Divisive
//! means that Apache Otava (formerly DataStax's Hunter) uses.
//!
//! Where a series splits is found as E-Divisive finds it (Matteson and
//! James 2014: the split that maximises the energy divergence of the two
//! sides, by binary segmentation); whether a split is real is decided by a
//! two-sided Student's t-test between the two sides, not by E-Divisive's
//! permutation test. Why not the permutation test: its null hypothesis is
//! that the runs are exchangeable (run-to-run variance dominates here, so
//! a run's repetitions cannot be permuted on their own), and a change at
//! the newest run then has p ≥ 1/n at best: with the 12 to 20 runs a CI
//! cache keeps it could never reach 0.05, and a CI gate must judge the
//! newest run. It is also random: Hunter's authors replaced it because
//! change points came and went as points were added; the t-test is
//! deterministic.
//!
//! A change point must also move the segment median by the minimum effect
//! (as `compare` asks of a change), and, as in Otava, every change point is
//! re-tested against its neighbouring change points until all pass. The
//! newest observation may start a segment of its own (tested against the
//! segment it would extend): a CI job has to know whether the run it just
//! made is a step; every other segment has `min_size` observations, so one
//! outlier inside the history is not a change.

pub use super::distributions::student_two_sided;
use super::stats::median;

/// Thresholds of [`detect`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// A split is a change point at this p-value or below.
    pub max_p: f64,
    /// … and when the segment medians differ by this fraction or more.
    pub min_effect: f64,
    /// The fewest observations of a segment (but the newest one's).
    pub min_size: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_p: 0.01,
            min_effect: super::compare::DEFAULT_MIN_EFFECT,
            min_size: 2,
        }
    }
}

/// A change point: observation `index` starts a new segment.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ChangePoint {
    pub index: usize,
    /// Median of the segment before (from the previous change point).
    pub before: f64,
    /// Median of the segment after (up to the next change point).
    pub after: f64,
    /// after / before − 1.
    pub change: f64,
    /// Two-sided p-value of the t-test between the two segments.
    pub p: f64,
}

/// Change points of `x` (in order, oldest first), sorted by index.
pub fn detect(x: &[f64], cfg: &Config) -> Vec<ChangePoint> {
    let min = cfg.min_size.max(1);
    let mut cuts = Vec::new();
    segment(x, 0, x.len(), min, cfg, &mut cuts);
    cuts.sort_unstable();
    prune(x, &mut cuts, cfg);
    // The newest observation against the segment it would extend.
    let n = x.len();
    let start = cuts.last().copied().unwrap_or(0);
    if n > start + min && !cuts.contains(&(n - 1)) {
        let cp = test(x, start, n - 1, n);
        if passes(&cp, cfg) {
            cuts.push(n - 1);
        }
    }
    points(x, &cuts)
}

/// Binary segmentation of x[a..b]: the best split, if it passes, then
/// each side.
fn segment(x: &[f64], a: usize, b: usize, min: usize, cfg: &Config, out: &mut Vec<usize>) {
    let Some(t) = best_split(&x[a..b], min).map(|t| a + t) else {
        return;
    };
    if !passes(&test(x, a, t, b), cfg) {
        return;
    }
    out.push(t);
    segment(x, a, t, min, cfg, out);
    segment(x, t, b, min, cfg, out);
}

/// Drops the weakest change point that no longer passes against its
/// neighbours, until all pass (a split found early may be explained by
/// two found later).
fn prune(x: &[f64], cuts: &mut Vec<usize>, cfg: &Config) {
    loop {
        let weakest = points(x, cuts)
            .iter()
            .enumerate()
            .filter(|(_, cp)| !passes(cp, cfg))
            .max_by(|a, b| a.1.p.total_cmp(&b.1.p))
            .map(|(i, _)| i);
        match weakest {
            Some(i) => {
                cuts.remove(i);
            }
            None => return,
        }
    }
}

fn points(x: &[f64], cuts: &[usize]) -> Vec<ChangePoint> {
    (0..cuts.len())
        .map(|i| {
            let a = if i == 0 { 0 } else { cuts[i - 1] };
            let b = cuts.get(i + 1).copied().unwrap_or(x.len());
            test(x, a, cuts[i], b)
        })
        .collect()
}

fn passes(cp: &ChangePoint, cfg: &Config) -> bool {
    cp.p <= cfg.max_p && cp.change.abs() >= cfg.min_effect
}

/// x[a..t] against x[t..b].
fn test(x: &[f64], a: usize, t: usize, b: usize) -> ChangePoint {
    let (l, r) = (&x[a..t], &x[t..b]);
    let before = median(l).unwrap_or(f64::NAN);
    let after = median(r).unwrap_or(f64::NAN);
    ChangePoint {
        index: t,
        before,
        after,
        change: if before != 0.0 {
            after / before - 1.0
        } else {
            f64::NAN
        },
        p: t_test(l, r),
    }
}

/// The split of `x` (sizes ≥ `min` on both sides) of largest energy
/// divergence (E-Divisive's q̂ with α = 1), None if none fits.
pub fn best_split(x: &[f64], min: usize) -> Option<usize> {
    let n = x.len();
    if n < 2 * min {
        return None;
    }
    // Pairwise distances once; n is a history's length (tens).
    let d = |i: usize, j: usize| (x[i] - x[j]).abs();
    let within = |r: std::ops::Range<usize>| -> f64 {
        let k = r.len();
        if k < 2 {
            return 0.0;
        }
        let mut s = 0.0;
        for i in r.clone() {
            for j in i + 1..r.end {
                s += d(i, j);
            }
        }
        2.0 * s / (k * (k - 1)) as f64
    };
    let mut best: Option<(usize, f64)> = None;
    for t in min..=n - min {
        let (m, k) = (t as f64, (n - t) as f64);
        let mut between = 0.0;
        for i in 0..t {
            for j in t..n {
                between += d(i, j);
            }
        }
        let e = 2.0 * between / (m * k) - within(0..t) - within(t..n);
        let q = m * k / (m + k) * e;
        if best.is_none_or(|(_, bq)| q > bq) {
            best = Some((t, q));
        }
    }
    best.map(|(t, _)| t)
}

fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let ss = v.iter().map(|x| (x - m).powi(2)).sum::<f64>();
    (m, ss)
}

/// Two-sided p-value of Student's t-test (pooled variance, as Otava's
/// `ttest_ind_from_stats`): a side of one observation adds no variance of
/// its own but is still tested against the other's spread.
pub fn t_test(l: &[f64], r: &[f64]) -> f64 {
    let (n1, n2) = (l.len(), r.len());
    if n1 == 0 || n2 == 0 || n1 + n2 < 3 {
        return 1.0;
    }
    let ((m1, ss1), (m2, ss2)) = (mean_var(l), mean_var(r));
    let df = (n1 + n2 - 2) as f64;
    let se = ((ss1 + ss2) / df * (1.0 / n1 as f64 + 1.0 / n2 as f64)).sqrt();
    if se == 0.0 {
        return if m1 == m2 { 1.0 } else { 0.0 };
    }
    let t = (m2 - m1) / se;
    student_two_sided(t, df)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drawing::figures::stats::Rng;

    /// `levels[i]` with relative normal noise of `sd` (a fraction).
    fn noisy(levels: &[f64], sd: f64, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        levels
            .iter()
            .map(|l| l * (1.0 + sd * rng.normal()))
            .collect()
    }

    fn steps(parts: &[(usize, f64)]) -> Vec<f64> {
        parts
            .iter()
            .flat_map(|&(n, v)| std::iter::repeat_n(v, n))
            .collect()
    }

    fn indices(cps: &[ChangePoint]) -> Vec<usize> {
        cps.iter().map(|c| c.index).collect()
    }

    #[test]
    fn student_t_p_values_match_tables() {
        // df 1 is the Cauchy distribution: P(|T| ≥ 1) = 1/2.
        assert!((student_two_sided(1.0, 1.0) - 0.5).abs() < 1e-9);
        // Two-sided 5 % critical values: 12.706 (df 1), 2.228 (df 10), 1.960 (∞).
        assert!((student_two_sided(12.706, 1.0) - 0.05).abs() < 1e-4);
        assert!((student_two_sided(2.228, 10.0) - 0.05).abs() < 1e-4);
        assert!((student_two_sided(1.96, 1e6) - 0.05).abs() < 1e-4);
        assert!((student_two_sided(0.0, 5.0) - 1.0).abs() < 1e-12);
        assert!(student_two_sided(-8.0, 20.0) < 1e-6);
    }

    #[test]
    fn a_flat_noisy_series_has_no_change_point() {
        for seed in 0..20 {
            let x = noisy(&[100.0; 12], 0.02, seed);
            let cps = detect(&x, &Config::default());
            assert!(cps.is_empty(), "seed {seed}: {cps:?} in {x:?}");
        }
    }

    #[test]
    fn a_ten_percent_step_after_run_six_of_twelve_is_found_there() {
        for seed in 0..20 {
            let x = noisy(&steps(&[(6, 100.0), (6, 110.0)]), 0.02, seed);
            let cps = detect(&x, &Config::default());
            assert_eq!(indices(&cps), [6], "seed {seed}: {x:?}");
            let c = cps[0];
            assert!((c.change - 0.10).abs() < 0.04, "{c:?}");
            assert!(c.p < 0.001 && c.before < c.after, "{c:?}");
        }
    }

    #[test]
    fn two_steps_are_both_found() {
        for seed in 0..20 {
            let x = noisy(&steps(&[(6, 100.0), (6, 110.0), (6, 95.0)]), 0.02, seed);
            let cps = detect(&x, &Config::default());
            assert_eq!(indices(&cps), [6, 12], "seed {seed}: {x:?}");
            assert!(cps[0].change > 0.0 && cps[1].change < 0.0, "{cps:?}");
        }
    }

    #[test]
    fn a_single_outlier_is_not_a_change() {
        for seed in 0..20 {
            for at in [3, 6, 9] {
                let mut x = noisy(&[100.0; 12], 0.02, seed);
                x[at] *= 1.3;
                let cps = detect(&x, &Config::default());
                assert!(cps.is_empty(), "seed {seed}, outlier at {at}: {cps:?}");
            }
        }
    }

    #[test]
    fn the_newest_run_may_start_a_segment_of_its_own() {
        let mut x = noisy(&[100.0; 11], 0.02, 3);
        x.push(115.0);
        let cps = detect(&x, &Config::default());
        assert_eq!(indices(&cps), [11], "{x:?}");
        // Within the minimum effect it is no change, however certain.
        let mut x = vec![100.0; 11];
        x.push(103.0);
        assert!(detect(&x, &Config::default()).is_empty());
        // And a series too short to have a segment before it has none.
        assert!(detect(&[100.0, 150.0], &Config::default()).is_empty());
    }

    #[test]
    fn the_energy_split_is_at_the_step() {
        let x = steps(&[(4, 1.0), (7, 2.0)]);
        assert_eq!(best_split(&x, 2), Some(4));
        assert_eq!(best_split(&[1.0, 2.0, 3.0], 2), None);
    }
}
