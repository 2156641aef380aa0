//! Intervals whose confidence is what they say at the repetitions a run
//! has. A claim is decided on one of these, never on a bootstrap of three
//! values (whose "95 %" interval is [min, max]: a 75 % one).
//!
//! The unit is a repetition, or a boot where several repetitions share
//! one (their median: repetitions of one boot are not independent). What
//! an interval is about is the median of such units: where a further boot
//! or repetition lands as often above as below.
//!
//! - Order statistics (the sign test's interval): [x₍ₖ₎, x₍ₙ₊₁₋ₖ₎] covers
//!   the median with probability 1 − 2·P(Bin(n, ½) < k), for any
//!   distribution. Exact and distribution-free; it reaches 95 % from six
//!   units (96.9 %).
//! - Student t, on logarithms where every unit is positive (a lognormal's
//!   median is its geometric mean): below six units, where no
//!   distribution-free interval reaches 95 %. Its coverage at 2–5 units
//!   over lognormal, bimodal and heavy-tailed units with boot effects is
//!   measured by `./x bench coverage`, not assumed.
//! - Welch: a ratio (on logarithms) or difference of two points measured
//!   independently, below six units a side.
//! - Bonferroni box: a function of several independently measured points,
//!   each point's interval at 1 − α/k; the function's range over the box's
//!   corners. A corner where the function is undefined (a denominator's
//!   interval reaching zero) gives no interval, never a narrower one.

use serde::Serialize;

use super::distributions::{ln_gamma, t_cdf};
use super::stats::{Rep, median};

/// The confidence a claim is decided at.
pub const LEVEL: f64 = 0.95;

/// How an interval was obtained; said in captions, reports and claims.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Order statistics of the units (sign test): exact, distribution-free.
    OrderStatistic,
    /// Student t on the units.
    StudentT,
    /// Student t on the logarithms of the units.
    StudentTLog,
    /// Welch's t on two independent points' units (difference).
    Welch,
    /// Welch's t on the logarithms (ratio of geometric means).
    WelchLog,
    /// Each of k independent points at 1 − α/k, the range over the box.
    Box,
}

impl Method {
    pub fn text(self) -> &'static str {
        match self {
            Method::OrderStatistic => "order statistics (distribution-free)",
            Method::StudentT => "Student t",
            Method::StudentTLog => "Student t on logarithms",
            Method::Welch => "Welch t",
            Method::WelchLog => "Welch t on logarithms",
            Method::Box => "Bonferroni box over the points' intervals",
        }
    }
}

/// An interval with the confidence its method reaches at `units`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
    /// Its confidence: exact for order statistics, nominal otherwise.
    pub level: f64,
    pub method: Method,
    /// Independent units it rests on (the fewest of its points').
    pub units: usize,
}

impl Interval {
    /// "95 %, Student t on logarithms, 3 boots".
    pub fn describe(&self, unit: &str) -> String {
        format!(
            "{} %, {}, {} {unit}{}",
            fmt_level(self.level),
            self.method.text(),
            self.units,
            if self.units == 1 { "" } else { "s" }
        )
    }
}

/// 96.875 → "96.9"; 95 → "95".
pub fn fmt_level(level: f64) -> String {
    let p = (level * 1000.0 + 1e-6).floor() / 10.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{}", p.round())
    } else {
        format!("{p:.1}")
    }
}

/// The units of one point: its repetitions, or the median of each boot's
/// repetitions where two or more boots ran several of them.
pub fn units(reps: &[Rep]) -> Vec<f64> {
    let mut boots: Vec<(u32, Vec<f64>)> = Vec::new();
    let mut loose = Vec::new();
    for r in reps {
        match r.boot {
            Some(b) => match boots.iter_mut().find(|(k, _)| *k == b) {
                Some((_, v)) => v.push(r.value),
                None => boots.push((b, vec![r.value])),
            },
            None => loose.push(r.value),
        }
    }
    // Grouped where the run spread several repetitions over each of two or
    // more boots. One boot of many with a point rerun in a boot of its
    // own (a noisy point measured again) stays repetitions: that rerun is
    // no second level, and would otherwise turn ten repetitions into two.
    let grouped = boots.iter().filter(|(_, v)| v.len() > 1).count() >= 2;
    if !grouped {
        return reps.iter().map(|r| r.value).collect();
    }
    boots
        .iter()
        .filter_map(|(_, v)| median(v))
        .chain(loose)
        .collect()
}

/// What the units are called in words: boots where repetitions were
/// grouped by boot, else repetitions.
pub fn unit_name(reps: &[Rep]) -> &'static str {
    if units(reps).len() < reps.len() {
        "boot"
    } else {
        "repetition"
    }
}

// ---- distributions -------------------------------------------------------

/// The p-quantile (p in 0.5..1) of Student's t, by bisection on its CDF;
/// remembered per (p, df), since a run asks for a few of them many times.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    use std::cell::RefCell;
    use std::collections::HashMap;
    thread_local! {
        static KNOWN: RefCell<HashMap<(u64, u64), f64>> = RefCell::new(HashMap::new());
    }
    let key = (p.to_bits(), df.to_bits());
    if let Some(q) = KNOWN.with(|k| k.borrow().get(&key).copied()) {
        return q;
    }
    let q = t_quantile_uncached(p, df);
    KNOWN.with(|k| {
        let mut k = k.borrow_mut();
        if k.len() > 100_000 {
            k.clear();
        }
        k.insert(key, q);
    });
    q
}

fn t_quantile_uncached(p: f64, df: f64) -> f64 {
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    while t_cdf(hi, df) < p && hi < 1e12 {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-12 * hi.max(1.0) {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// P(Bin(n, ½) < k).
fn binomial_below(n: usize, k: usize) -> f64 {
    if n <= 1000 {
        // Exact in binary for the small n runs have: ½ⁿ, then the ratio
        // of neighbouring terms.
        let mut term = 0.5f64.powi(n as i32);
        let mut sum = 0.0;
        for i in 0..k.min(n + 1) {
            sum += term;
            term *= (n - i) as f64 / (i + 1) as f64;
        }
        return sum;
    }
    let ln2n = n as f64 * std::f64::consts::LN_2;
    let ln_choose = |i: usize| {
        ln_gamma(n as f64 + 1.0) - ln_gamma(i as f64 + 1.0) - ln_gamma((n - i) as f64 + 1.0)
    };
    (0..k.min(n + 1)).map(|i| (ln_choose(i) - ln2n).exp()).sum()
}

/// The exact confidence of [x₍ₖ₎, x₍ₙ₊₁₋ₖ₎] (1-based k) for the median.
pub fn order_level(n: usize, k: usize) -> f64 {
    1.0 - 2.0 * binomial_below(n, k)
}

/// The fewest units whose order statistics reach `level`.
pub fn order_min_units(level: f64) -> usize {
    (1..10_000)
        .find(|&n| order_level(n, 1) >= level)
        .unwrap_or(usize::MAX)
}

// ---- intervals -----------------------------------------------------------

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// The order-statistic interval at `level` or better (the narrowest that
/// reaches it), None when the units are too few for it.
pub fn order_statistic(values: &[f64], level: f64) -> Option<Interval> {
    let n = values.len();
    if n == 0 || order_level(n, 1) < level {
        return None;
    }
    let k = (1..=n.div_ceil(2))
        .take_while(|&k| order_level(n, k) >= level)
        .last()?;
    let s = sorted(values);
    Some(Interval {
        lo: s[k - 1],
        hi: s[n - k],
        level: order_level(n, k),
        method: Method::OrderStatistic,
        units: n,
    })
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
    (m, var.max(0.0).sqrt())
}

/// Student t interval of the centre at `level`, on logarithms when `log`
/// and every value is positive. None below two values or with no spread.
pub fn student_t(values: &[f64], level: f64, log: bool) -> Option<Interval> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let log = log && values.iter().all(|v| *v > 0.0);
    let v: Vec<f64> = if log { ln_all(values) } else { values.to_vec() };
    let (m, sd) = mean_sd(&v);
    if sd.is_nan() || sd <= 0.0 || !m.is_finite() {
        return None;
    }
    let half = t_quantile(1.0 - (1.0 - level) / 2.0, (n - 1) as f64) * sd / (n as f64).sqrt();
    let (lo, hi) = (m - half, m + half);
    let (lo, hi, method) = if log {
        (lo.exp(), hi.exp(), Method::StudentTLog)
    } else {
        (lo, hi, Method::StudentT)
    };
    Some(Interval {
        lo,
        hi,
        level,
        method,
        units: n,
    })
}

/// The fewest units a Student t (or Welch) interval is used on. Below
/// these, `./x bench coverage` measured it under 93 % on bimodal units (a
/// single point's median: 88.7 % at two units, 92.1 % at three; a paired
/// ratio or step: 91.9 % at two), so no 95 % interval is claimed there.
pub const T_MIN_POINT: usize = 4;
pub const T_MIN_JOINT: usize = 3;

/// Why one sample of units has no interval at `level`.
pub fn no_interval_reason(n: usize, level: f64, unit: &str, t_min: usize) -> String {
    let need = order_min_units(level);
    if n < 2 {
        format!(
            "one {unit}: its own samples say how noisy its reads were, not where another {unit} lands; \
             {t_min} or more {unit}s give an interval, {need} a distribution-free one"
        )
    } else if n < t_min {
        format!(
            "{n} {unit}s: a t interval reaches 95 % only from {t_min} (measured by ./x bench coverage), \
             a distribution-free one from {need}"
        )
    } else {
        format!(
            "all {n} {unit}s are equal: no spread to build a t interval on; \
             {need} {unit}s give a distribution-free one ({} % at {n})",
            fmt_level(order_level(n, 1))
        )
    }
}

/// The interval of one sample of units at `level`: order statistics where
/// they reach it, else Student t (on logarithms when `log`) from `t_min`
/// units.
pub fn one_sample(values: &[f64], level: f64, log: bool, t_min: usize) -> Result<Interval, String> {
    if let Some(iv) = order_statistic(values, level) {
        return Ok(iv);
    }
    let t = (values.len() >= t_min)
        .then(|| student_t(values, level, log))
        .flatten();
    t.ok_or_else(|| no_interval_reason(values.len(), level, "unit", t_min))
}

/// Welch's interval of ca·centre(a) + cb·centre(b), or on logarithms of
/// centre(a) / centre(b) when `log` (ca, cb ignored). None when a side has
/// fewer than two values or neither has spread.
pub fn welch(a: &[f64], b: &[f64], level: f64, log: bool, ca: f64, cb: f64) -> Option<Interval> {
    if a.len() < T_MIN_JOINT || b.len() < T_MIN_JOINT {
        return None;
    }
    let log = log && a.iter().chain(b).all(|v| *v > 0.0);
    let (ta, tb) = if log {
        (ln_all(a), ln_all(b))
    } else {
        (a.to_vec(), b.to_vec())
    };
    let (ca, cb) = if log { (1.0, -1.0) } else { (ca, cb) };
    let (c, se2, df) = welch_moments(&ta, &tb, ca, cb)?;
    let half = t_quantile(1.0 - (1.0 - level) / 2.0, df) * se2.sqrt();
    let (lo, hi, method) = if log {
        ((c - half).exp(), (c + half).exp(), Method::WelchLog)
    } else {
        (c - half, c + half, Method::Welch)
    };
    Some(Interval {
        lo,
        hi,
        level,
        method,
        units: a.len().min(b.len()),
    })
}

/// The natural logarithm of every value.
pub fn ln_all(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| x.ln()).collect()
}

/// ca·mean(a) + cb·mean(b) with its squared standard error and Welch–
/// Satterthwaite degrees of freedom; None below two values a side or with
/// no spread on either.
pub fn welch_moments(a: &[f64], b: &[f64], ca: f64, cb: f64) -> Option<(f64, f64, f64)> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (ma, sa) = mean_sd(a);
    let (mb, sb) = mean_sd(b);
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (va, vb) = (ca * ca * sa * sa / na, cb * cb * sb * sb / nb);
    let se2 = va + vb;
    if se2.is_nan() || se2 <= 0.0 {
        return None;
    }
    let df = se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    Some((ca * ma + cb * mb, se2, df))
}

/// The range of `f` over the corners of the box the intervals span. None
/// where `f` is undefined at a corner (or past 12 dimensions).
pub fn box_range<F>(ranges: &[(f64, f64)], f: F) -> Option<(f64, f64)>
where
    F: Fn(&[f64]) -> Option<f64>,
{
    let k = ranges.len();
    if k == 0 || k > 12 {
        return None;
    }
    let mut corner = vec![0.0; k];
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for mask in 0u32..(1 << k) {
        for (i, r) in ranges.iter().enumerate() {
            corner[i] = if mask & (1 << i) == 0 { r.0 } else { r.1 };
        }
        let v = f(&corner).filter(|v| v.is_finite())?;
        lo = lo.min(v);
        hi = hi.max(v);
    }
    Some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_match_the_tables() {
        for (df, want) in [
            (1.0, 12.706_204_736),
            (2.0, 4.302_652_730),
            (4.0, 2.776_445_105),
            (30.0, 2.042_272_456),
        ] {
            let got = t_quantile(0.975, df);
            assert!((got - want).abs() < 1e-6, "df {df}: {got} vs {want}");
        }
        assert!((t_cdf(0.0, 3.0) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn order_statistics_have_their_exact_levels() {
        assert!((order_level(3, 1) - 0.75).abs() < 1e-12);
        assert!((order_level(2, 1) - 0.5).abs() < 1e-12);
        assert!((order_level(6, 1) - 0.968_75).abs() < 1e-12);
        assert_eq!(order_min_units(0.95), 6);
        assert!(order_statistic(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.95).is_none());
        let iv = order_statistic(&[5.0, 1.0, 4.0, 2.0, 3.0, 6.0], 0.95).unwrap();
        assert_eq!((iv.lo, iv.hi), (1.0, 6.0));
        // 20 values: k = 6 gives 95.9 %, k = 7 falls below 95 %.
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        let iv = order_statistic(&v, 0.95).unwrap();
        assert_eq!((iv.lo, iv.hi), (6.0, 15.0));
        assert!(iv.level >= 0.95 && iv.level < 0.97, "{}", iv.level);
        assert_eq!(fmt_level(iv.level), "95.8");
    }

    #[test]
    fn three_values_get_a_t_interval_wider_than_their_range() {
        assert!(one_sample(&[10.0, 11.0, 12.0], 0.95, false, 4).is_err());
        let iv = one_sample(&[10.0, 11.0, 12.0], 0.95, false, 3).unwrap();
        assert_eq!(iv.method, Method::StudentT);
        // mean 11, sd 1: 11 ± 4.303/√3.
        assert!((iv.hi - 11.0 - 4.302_652_73 / 3f64.sqrt()).abs() < 1e-6);
        assert!(iv.lo < 10.0 && iv.hi > 12.0);
        let lg = one_sample(&[10.0, 11.0, 12.0], 0.95, true, 3).unwrap();
        assert_eq!(lg.method, Method::StudentTLog);
        assert!(one_sample(&[4.0, 4.0, 4.0], 0.95, true, 3).is_err());
        assert!(one_sample(&[4.0], 0.95, true, 3).is_err());
    }

    #[test]
    fn welch_on_logs_is_a_ratio_and_a_corner_at_zero_gives_nothing() {
        let iv = welch(
            &[20.0, 21.0, 19.0],
            &[10.0, 10.5, 9.5],
            0.95,
            true,
            0.0,
            0.0,
        )
        .unwrap();
        assert_eq!(iv.method, Method::WelchLog);
        assert!(iv.lo < 2.0 && iv.hi > 2.0 && iv.lo > 1.5 && iv.hi < 2.6);
        let r = box_range(&[(1.0, 2.0), (4.0, 8.0)], |m| Some(m[0] / m[1])).unwrap();
        assert_eq!(r, (0.125, 0.5));
        let r = box_range(&[(1.0, 2.0), (0.0, 1.0)], |m| {
            (m[1] != 0.0).then(|| m[0] / m[1])
        });
        assert!(r.is_none());
    }

    #[test]
    fn boots_holding_several_repetitions_are_the_units() {
        let rep = |value, boot| Rep {
            id: None,
            value,
            boot: Some(boot),
        };
        let r = [rep(1.0, 0), rep(3.0, 0), rep(10.0, 1), rep(12.0, 1)];
        assert_eq!(units(&r), vec![2.0, 11.0]);
        assert_eq!(unit_name(&r), "boot");
        let rerun = [rep(1.0, 0), rep(2.0, 0), rep(3.0, 0), rep(9.0, 1)];
        assert_eq!(units(&rerun), vec![1.0, 2.0, 3.0, 9.0]);
        let one_each = [rep(1.0, 0), rep(2.0, 1), rep(3.0, 2)];
        assert_eq!(units(&one_each), vec![1.0, 2.0, 3.0]);
        assert_eq!(unit_name(&one_each), "repetition");
    }
}
