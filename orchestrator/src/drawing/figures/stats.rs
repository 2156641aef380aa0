//! Statistics of figures: per-repetition statistics, the median over
//! repetitions with its interval (`interval.rs`: order statistics from
//! six units, Student t below, each at the confidence it reaches), and
//! least-squares fits for claims.
//!
//! The unit of an interval is a repetition, or a boot where several
//! repetitions share one, as Kalibera and Jones recommend for benchmarks
//! with variation at several levels: boot-to-boot drift is then in the
//! interval, which repetitions of one boot cannot show.
//!
//! `joint_interval` (the percentile bootstrap of medians, boots first,
//! that claims and compare were decided on until its coverage was
//! measured: 73 % at three repetitions) is kept only as the "before"
//! column of `./x bench coverage`; nothing is decided on it.

use super::def::Stat;
use super::interval::{self, Interval};

pub const RESAMPLES: usize = 2000;
/// Fixed: intervals must not change between redraws of the same data.
pub const SEED: u64 = 0x7E57_BED0_F16E_5EED;

/// How a point's interval was obtained (stated in captions and tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CiMethod {
    /// Over repetitions (or boots): an `interval::Interval`'s method.
    Units(interval::Method),
    /// Two or three units, where no interval reaches 95 %: their range,
    /// [min, max], whose exact confidence is `level` (50 % at two, 75 % at
    /// three). An error bar; claims decide nothing on it.
    Range,
    /// One repetition: the spread of its raw samples (a percentile
    /// bootstrap of its statistic). An error bar, never a claim's interval:
    /// it says how noisy that repetition's reads were, not where another
    /// repetition lands.
    Samples,
    /// No interval: one value, or units with no spread.
    None,
}

/// Median with its interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Estimate {
    pub value: f64,
    pub lo: Option<f64>,
    pub hi: Option<f64>,
    /// Repetitions (or paired repetitions for ratios).
    pub n: usize,
    pub ci: CiMethod,
    /// The interval's confidence (exact for order statistics).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<f64>,
}

impl Estimate {
    pub fn scaled(self, k: f64) -> Estimate {
        let (lo, hi) = match (self.lo.map(|v| v * k), self.hi.map(|v| v * k)) {
            (Some(a), Some(b)) if b < a => (Some(b), Some(a)),
            other => other,
        };
        Estimate {
            value: self.value * k,
            lo,
            hi,
            ..self
        }
    }
}

/// SplitMix64: tiny, fixed across platforms and crate versions.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Standard normal, by Box–Muller (one of the pair; simple and fixed).
    pub fn normal(&mut self) -> f64 {
        // 53 random bits, shifted off 0 so the logarithm is finite.
        let unit = |v: u64| ((v >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let (u1, u2) = (unit(self.next_u64()), unit(self.next_u64()));
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
    /// Uniform in 0..n (n > 0), by rejection so there is no modulo bias.
    pub fn below(&mut self, n: usize) -> usize {
        let n = n as u64;
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let v = self.next_u64();
            if v < zone {
                return (v % n) as usize;
            }
        }
    }
}

/// Quantile q in 0..=1 of sorted data, linear interpolation (R type 7).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let h = (n - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

pub fn median(v: &[f64]) -> Option<f64> {
    quantile_sorted(&sorted(v), 0.5)
}

/// The statistic of one repetition's samples.
pub fn stat(v: &[f64], s: Stat) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    Some(match s {
        Stat::Mean => v.iter().sum::<f64>() / v.len() as f64,
        Stat::Sum => v.iter().sum(),
        Stat::Count => v.len() as f64,
        Stat::Min => v.iter().copied().fold(f64::INFINITY, f64::min),
        Stat::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        Stat::Median => median(v)?,
        Stat::Percentile(p) => quantile_sorted(&sorted(v), p / 100.0)?,
    })
}

/// Repetitions grouped by the boot that ran them: what a hierarchical
/// resample draws from. A repetition with no known boot is a boot of its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Levels {
    /// Indices into the repetitions, one list per boot, in first-seen order.
    groups: Vec<Vec<usize>>,
}

impl Levels {
    /// Every value a boot of its own: the flat bootstrap.
    pub fn flat(n: usize) -> Levels {
        Levels {
            groups: (0..n).map(|i| vec![i]).collect(),
        }
    }

    pub fn of(boots: &[Option<u32>]) -> Levels {
        let mut groups: Vec<(Option<u32>, Vec<usize>)> = Vec::new();
        for (i, b) in boots.iter().enumerate() {
            match groups.iter_mut().find(|(g, _)| b.is_some() && g == b) {
                Some((_, members)) => members.push(i),
                None => groups.push((*b, vec![i])),
            }
        }
        Levels {
            groups: groups.into_iter().map(|(_, m)| m).collect(),
        }
    }

    /// How many boots the repetitions came from.
    pub fn boots(&self) -> usize {
        self.groups.len()
    }

    /// One hierarchical resample's indices into `out`: boots drawn with
    /// replacement, then each drawn boot's repetitions with replacement.
    /// A single boot is not drawn, a single repetition not redrawn, so
    /// the flat cases consume the random stream as a flat bootstrap does.
    pub fn draw(&self, rng: &mut Rng, out: &mut Vec<usize>) {
        out.clear();
        let within = |g: &Vec<usize>, rng: &mut Rng, out: &mut Vec<usize>| {
            if g.len() == 1 {
                out.push(g[0]);
            } else {
                for _ in 0..g.len() {
                    out.push(g[rng.below(g.len())]);
                }
            }
        };
        match self.groups.as_slice() {
            [] => {}
            [one] => {
                for _ in 0..one.len() {
                    out.push(one[rng.below(one.len())]);
                }
            }
            groups => {
                for _ in 0..groups.len() {
                    within(&groups[rng.below(groups.len())], rng, out);
                }
            }
        }
    }
}

/// 95 % percentile-bootstrap interval of `f` over `v`.
pub fn bootstrap<F: Fn(&[f64]) -> Option<f64>>(v: &[f64], f: F) -> Option<(f64, f64)> {
    bootstrap_levels(v, &Levels::flat(v.len()), f)
}

/// 95 % percentile-bootstrap interval of `f` over `v`, resampled by
/// `levels` (boots, then repetitions within them).
pub fn bootstrap_levels<F: Fn(&[f64]) -> Option<f64>>(
    v: &[f64],
    levels: &Levels,
    f: F,
) -> Option<(f64, f64)> {
    if v.len() < 2 {
        return None;
    }
    let mut rng = Rng::new(SEED);
    let mut idx = Vec::with_capacity(v.len());
    let mut buf = Vec::with_capacity(v.len());
    let mut stats = Vec::with_capacity(RESAMPLES);
    for _ in 0..RESAMPLES {
        levels.draw(&mut rng, &mut idx);
        buf.clear();
        buf.extend(idx.iter().map(|&i| v[i]));
        stats.push(f(&buf)?);
    }
    stats.sort_by(f64::total_cmp);
    Some((
        quantile_sorted(&stats, 0.025)?,
        quantile_sorted(&stats, 0.975)?,
    ))
}

/// Median over repetitions with its 95 % interval over them; with a
/// single repetition, the spread of its raw samples where there are some
/// (an error bar, `CiMethod::Samples`).
pub fn estimate(per_rep: &[f64], single_rep_samples: Option<(&[f64], Stat)>) -> Option<Estimate> {
    let reps: Vec<Rep> = per_rep
        .iter()
        .map(|&value| Rep {
            id: None,
            value,
            boot: None,
        })
        .collect();
    estimate_reps(&reps, single_rep_samples)
}

/// The median of repetitions with the interval of their units (boots
/// where a boot ran several): see `interval.rs`.
pub fn estimate_reps(reps: &[Rep], single_rep_samples: Option<(&[f64], Stat)>) -> Option<Estimate> {
    let values: Vec<f64> = reps.iter().map(|r| r.value).collect();
    let value = median(&values)?;
    let n = values.len();
    let mut e = Estimate {
        value,
        lo: None,
        hi: None,
        n,
        ci: CiMethod::None,
        level: None,
    };
    if n >= 2 {
        // Point values are positive where they are times or rates: t on
        // logarithms then (it falls back to values when one is not).
        let units = interval::units(reps);
        match interval::one_sample(&units, interval::LEVEL, true, interval::T_MIN_POINT) {
            Ok(iv) => set(&mut e, iv),
            Err(_) if units.len() >= 2 => {
                let lo = units.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = units.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                e.lo = Some(lo.min(value));
                e.hi = Some(hi.max(value));
                e.ci = CiMethod::Range;
                e.level = Some(interval::order_level(units.len(), 1));
            }
            Err(_) => {}
        }
    } else if let Some((raw, s)) = single_rep_samples
        && raw.len() >= 2
        && let Some((lo, hi)) = bootstrap(raw, |b| stat(b, s))
    {
        e.lo = Some(lo.min(value));
        e.hi = Some(hi.max(value));
        e.ci = CiMethod::Samples;
        e.level = Some(interval::LEVEL);
    }
    Some(e)
}

fn set(e: &mut Estimate, iv: Interval) {
    e.lo = Some(iv.lo.min(e.value));
    e.hi = Some(iv.hi.max(e.value));
    e.ci = CiMethod::Units(iv.method);
    e.level = Some(iv.level);
}

/// One repetition's value, with its identity (point, repetition) where the
/// data has one: two series measured as the same repetition of one job
/// carry the same ids and are resampled together.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Rep {
    pub id: Option<(u32, u32)>,
    pub value: f64,
    /// The boot that measured it, where known: repetitions of one boot
    /// are resampled together (hierarchical bootstrap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<u32>,
}

/// What one point's median is resampled from in `joint_interval`: its
/// repetitions (the median of a resample of them).
#[derive(Debug, Clone, Copy)]
pub enum Spread<'a> {
    Reps(&'a [Rep]),
}

impl Spread<'_> {
    /// The pairing keys of its repetitions, sorted; None when any
    /// repetition has no id (nothing to pair by).
    fn keys(&self) -> Option<Vec<PairKey>> {
        match self {
            Spread::Reps(r) => sorted_keys(r),
        }
    }
}

/// What lines up the repetitions of two points so that one resample draws
/// them together. Points of one repetition run one after another in one
/// boot, so where every repetition's boot is known, (boot, repetition)
/// pairs two sweep points (two depths, two hooks) measured in the same
/// boots: the drift between boots, which dominates under TCG, is then
/// common to both and cancels in their ratio or step instead of widening
/// it. Without boots, the (point, repetition) id: only two series of one
/// job pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum PairKey {
    Boot { boot: u32, rep: u32 },
    Id(u32, u32),
}

/// A repetition's key; by boot only where every repetition of its point
/// has one (`with_boots`), so a point's keys are all of one kind.
fn pair_key(r: &Rep, with_boots: bool) -> Option<PairKey> {
    let (point, rep) = r.id?;
    Some(match r.boot {
        Some(boot) if with_boots => PairKey::Boot { boot, rep },
        _ => PairKey::Id(point, rep),
    })
}

fn all_booted(reps: &[Rep]) -> bool {
    reps.iter().all(|r| r.boot.is_some())
}

fn sorted_keys(reps: &[Rep]) -> Option<Vec<PairKey>> {
    let with_boots = all_booted(reps);
    let mut keys: Vec<PairKey> = reps
        .iter()
        .map(|r| pair_key(r, with_boots))
        .collect::<Option<_>>()?;
    keys.sort_unstable();
    Some(keys)
}

/// How two points' repetitions are resampled together, if at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing {
    /// The same repetitions of one job (two series of one point).
    Repetition,
    /// Different points measured as the same repetitions in the same boots.
    Boot,
    /// Resampled independently.
    Independent,
}

impl Pairing {
    pub fn of(a: &[Rep], b: &[Rep]) -> Pairing {
        let ids = |r: &[Rep]| -> Option<Vec<(u32, u32)>> {
            let mut v: Vec<(u32, u32)> = r.iter().map(|r| r.id).collect::<Option<_>>()?;
            v.sort_unstable();
            Some(v)
        };
        if a.len() < 2 {
            Pairing::Independent
        } else if ids(a).is_some_and(|x| Some(x) == ids(b)) {
            Pairing::Repetition
        } else if sorted_keys(a).is_some_and(|x| Some(x) == sorted_keys(b)) {
            Pairing::Boot
        } else {
            Pairing::Independent
        }
    }

    pub fn text(self) -> &'static str {
        match self {
            Pairing::Repetition => "paired by repetition",
            Pairing::Boot => "paired by boot",
            Pairing::Independent => "repetitions resampled independently",
        }
    }
}

/// The repetitions of several points lined up by pairing key (the same
/// index is the same repetition, or the same boot's same repetition, in
/// every point), or None when their keys differ or any is missing: then
/// the points were measured independently.
pub fn aligned(points: &[&[Rep]]) -> Option<Vec<Vec<Rep>>> {
    let first = sorted_keys(points.first()?)?;
    if first.len() < 2 {
        return None;
    }
    for p in &points[1..] {
        if sorted_keys(p)? != first {
            return None;
        }
    }
    Some(
        points
            .iter()
            .map(|p| {
                let mut r = p.to_vec();
                let with_boots = all_booted(&r);
                r.sort_by_key(|x| (pair_key(x, with_boots), x.id));
                r
            })
            .collect(),
    )
}

/// The percentile bootstrap formerly called a 95 % interval of `f` over the
/// medians of several points (the coverage benchmark's "before"): each
/// point's repetitions resampled; points whose repetitions
/// have the same pairing keys (one job's series, or points measured in the
/// same boots: see `PairKey`) share one resample, the others are resampled
/// independently. Fixed seed.
pub fn joint_interval<F>(points: &[Spread<'_>], f: F) -> Option<(f64, f64)>
where
    F: Fn(&[f64]) -> Option<f64>,
{
    // Repetitions in key order, so the same index is the same repetition
    // (or the same boot's same repetition) in every paired point.
    let sorted_reps: Vec<Vec<Rep>> = points
        .iter()
        .map(|p| match p {
            Spread::Reps(r) => {
                let mut r = r.to_vec();
                let with_boots = all_booted(&r);
                // The order `sorted_keys` compares in, ids breaking ties.
                r.sort_by_key(|x| (pair_key(x, with_boots), x.id));
                r
            }
        })
        .collect();
    let reps: Vec<Vec<f64>> = sorted_reps
        .iter()
        .map(|r| r.iter().map(|r| r.value).collect())
        .collect();
    let levels: Vec<Levels> = sorted_reps
        .iter()
        .map(|r| Levels::of(&r.iter().map(|r| r.boot).collect::<Vec<_>>()))
        .collect();
    let keys: Vec<Option<Vec<PairKey>>> = points.iter().map(Spread::keys).collect();
    // The first point with the same keys leads the group's resample.
    let leader: Vec<usize> = (0..points.len())
        .map(|i| match &keys[i] {
            Some(v) => (0..i).find(|&j| keys[j].as_ref() == Some(v)).unwrap_or(i),
            None => i,
        })
        .collect();
    let mut rng = Rng::new(SEED);
    let mut idx: Vec<Vec<usize>> = reps.iter().map(|r| Vec::with_capacity(r.len())).collect();
    let mut meds = vec![0.0; points.len()];
    let mut buf = Vec::new();
    let mut stats = Vec::with_capacity(RESAMPLES);
    for _ in 0..RESAMPLES {
        for i in 0..points.len() {
            if leader[i] == i && !reps[i].is_empty() {
                levels[i].draw(&mut rng, &mut idx[i]);
            }
        }
        for (i, p) in points.iter().enumerate() {
            meds[i] = match p {
                Spread::Reps(_) => {
                    buf.clear();
                    buf.extend(idx[leader[i]].iter().map(|&k| reps[i][k]));
                    median(&buf)?
                }
            };
        }
        // A resample where the quantity is undefined (a zero median in a
        // denominator) is left out, not fatal.
        if let Some(v) = f(&meds).filter(|v| v.is_finite()) {
            stats.push(v);
        }
    }
    if stats.len() < RESAMPLES / 2 {
        return None;
    }
    stats.sort_by(f64::total_cmp);
    Some((
        quantile_sorted(&stats, 0.025)?,
        quantile_sorted(&stats, 0.975)?,
    ))
}

/// Least-squares line and its coefficient of determination.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    pub slope: f64,
    pub intercept: f64,
    pub r2: f64,
}

pub fn linear_fit(xs: &[f64], ys: &[f64]) -> Option<Fit> {
    let n = xs.len();
    if n < 2 || n != ys.len() {
        return None;
    }
    let nf = n as f64;
    let mx = xs.iter().sum::<f64>() / nf;
    let my = ys.iter().sum::<f64>() / nf;
    let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let syy: f64 = ys.iter().map(|y| (y - my).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let r2 = if syy == 0.0 {
        1.0
    } else {
        (sxy * sxy) / (sxx * syy)
    };
    Some(Fit {
        slope,
        intercept,
        r2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_stats() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(stat(&[1.0, 2.0, 6.0], Stat::Mean), Some(3.0));
        assert_eq!(stat(&[1.0, 2.0, 6.0], Stat::Sum), Some(9.0));
        let v: Vec<f64> = (1..=101).map(f64::from).collect();
        assert_eq!(stat(&v, Stat::Percentile(99.0)), Some(100.0));
        assert_eq!(stat(&[], Stat::Mean), None);
    }

    #[test]
    fn the_interval_is_deterministic_and_brackets_the_median() {
        let reps = [10.0, 12.0, 11.0, 13.0, 9.0];
        let a = estimate(&reps, None).unwrap();
        let b = estimate(&reps, None).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.value, 11.0);
        // Five values: no distribution-free interval reaches 95 % (93.75 %),
        // so a t interval on logarithms, wider than their range.
        assert_eq!(a.ci, CiMethod::Units(interval::Method::StudentTLog));
        assert_eq!(a.level, Some(0.95));
        let (lo, hi) = (a.lo.unwrap(), a.hi.unwrap());
        assert!(lo < 9.5 && hi > 12.5 && lo > 8.0 && hi < 14.0, "{lo} {hi}");
        // Six: the order statistics, [min, max] at 96.9 %.
        let six = estimate(&[10.0, 12.0, 11.0, 13.0, 9.0, 11.5], None).unwrap();
        assert_eq!(six.ci, CiMethod::Units(interval::Method::OrderStatistic));
        assert_eq!((six.lo, six.hi), (Some(9.0), Some(13.0)));
    }

    #[test]
    fn the_mean_interval_of_many_samples_is_close_to_the_t_interval() {
        // 1..=400: mean 200.5, sd ~115.6, t-based half-width ~11.4.
        let raw: Vec<f64> = (1..=400).map(f64::from).collect();
        let e = estimate(&[200.5], Some((&raw, Stat::Mean))).unwrap();
        assert_eq!(e.ci, CiMethod::Samples);
        let half = (e.hi.unwrap() - e.lo.unwrap()) / 2.0;
        assert!((half - 11.4).abs() < 1.5, "half-width {half}");
    }

    #[test]
    fn one_value_has_no_interval() {
        let e = estimate(&[5.0], None).unwrap();
        assert_eq!((e.lo, e.hi, e.ci), (None, None, CiMethod::None));
        assert!(estimate(&[], None).is_none());
    }

    #[test]
    fn fits_a_line() {
        let f = linear_fit(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]).unwrap();
        assert!((f.slope - 2.0).abs() < 1e-12 && f.r2 > 0.999_999);
        let g = linear_fit(&[1.0, 2.0, 3.0, 4.0], &[1.0, 4.0, 1.0, 4.0]).unwrap();
        assert!(g.r2 < 0.3);
    }

    fn reps(ids: &[(u32, u32)], v: &[f64]) -> Vec<Rep> {
        ids.iter()
            .zip(v)
            .map(|(&id, &value)| Rep {
                id: Some(id),
                value,
                boot: None,
            })
            .collect()
    }

    #[test]
    fn repetitions_group_by_boot_and_unknown_boots_stand_alone() {
        let l = Levels::of(&[Some(3), Some(1), Some(3), None, None, Some(1)]);
        assert_eq!(l.groups, [vec![0, 2], vec![1, 5], vec![3], vec![4]]);
        assert_eq!(l.boots(), 4);
    }

    #[test]
    fn one_boot_or_one_repetition_per_boot_is_the_flat_bootstrap() {
        let v = [10.0, 12.0, 11.0, 13.0, 9.0, 10.5];
        let flat = bootstrap(&v, median).unwrap();
        let one_boot = Levels::of(&[Some(0); 6]);
        let each_own: Vec<Option<u32>> = (0..6).map(Some).collect();
        assert_eq!(bootstrap_levels(&v, &one_boot, median).unwrap(), flat);
        assert_eq!(
            bootstrap_levels(&v, &Levels::of(&each_own), median).unwrap(),
            flat
        );
    }

    #[test]
    fn boot_to_boot_drift_widens_the_interval_a_flat_resample_hides() {
        // Three boots that each measure tightly around their own level
        // (10, 10.5, 11): the level a fourth boot lands on is uncertain by
        // about a whole unit, which ten repetitions per boot do not change.
        let mut v = Vec::new();
        let mut boots = Vec::new();
        for (b, level) in [10.0, 10.5, 11.0].into_iter().enumerate() {
            for k in 0..10 {
                v.push(level + 0.01 * f64::from(k));
                boots.push(Some(b as u32));
            }
        }
        let (flo, fhi) = bootstrap(&v, median).unwrap();
        let (hlo, hhi) = bootstrap_levels(&v, &Levels::of(&boots), median).unwrap();
        assert!(
            hhi - hlo > 1.5 * (fhi - flo),
            "hierarchical [{hlo}, {hhi}] vs flat [{flo}, {fhi}]"
        );
        assert!(hlo <= 10.1 && hhi >= 10.9, "[{hlo}, {hhi}]");
        // And estimate_reps takes each boot as a unit: three boots of ten
        // repetitions are three values (10.045, 10.545, 11.045).
        let reps: Vec<Rep> = v
            .iter()
            .zip(&boots)
            .map(|(&value, &boot)| Rep {
                id: None,
                value,
                boot,
            })
            .collect();
        // Three units reach no 95 % interval: the bar is their range, a
        // 75 % interval, and says so.
        let e = estimate_reps(&reps, None).unwrap();
        assert_eq!(e.ci, CiMethod::Range);
        assert_eq!(e.level, Some(0.75));
        let (lo, hi) = (e.lo.unwrap(), e.hi.unwrap());
        assert!(
            (lo - 10.045).abs() < 1e-9 && (hi - 11.045).abs() < 1e-9,
            "{lo} {hi}"
        );
    }

    #[test]
    fn paired_repetitions_resample_together() {
        // Each repetition's numerator is exactly twice its denominator, but
        // the repetitions differ a lot: paired, the ratio never moves.
        let ids = [(0, 0), (0, 1), (0, 2), (0, 3)];
        let num = reps(&ids, &[20.0, 40.0, 60.0, 80.0]);
        let den = reps(&ids, &[10.0, 20.0, 30.0, 40.0]);
        let ratio = |m: &[f64]| Some(m[0] / m[1]);
        let (lo, hi) = joint_interval(&[Spread::Reps(&num), Spread::Reps(&den)], ratio).unwrap();
        assert!(
            (lo - 2.0).abs() < 1e-12 && (hi - 2.0).abs() < 1e-12,
            "{lo} {hi}"
        );
        // Other ids (another job): independent, so the interval opens up.
        let other = reps(&[(1, 0), (1, 1), (1, 2), (1, 3)], &[10.0, 20.0, 30.0, 40.0]);
        let (lo, hi) = joint_interval(&[Spread::Reps(&num), Spread::Reps(&other)], ratio).unwrap();
        assert!(lo < 1.5 && hi > 2.5, "{lo} {hi}");
        let again = joint_interval(&[Spread::Reps(&num), Spread::Reps(&other)], ratio).unwrap();
        assert_eq!((lo, hi), again, "fixed seed");
    }

    #[test]
    fn rng_is_fixed() {
        let mut r = Rng::new(1);
        let a: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        let mut r = Rng::new(1);
        let b: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(a, b);
        assert!((0..1000).all(|_| r.below(7) < 7));
    }
}
