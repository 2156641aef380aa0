//! `testbed compare RUN_A RUN_B`: per figure, panel, series and x, the
//! change from A to B with its 95 % interval: B / A − 1 from the two runs'
//! units (repetitions, or boots where boots ran several) taken as
//! independent measurements, whatever their point ids (`quantity.rs`:
//! Welch's t on logarithms below six units a side, the distribution-free
//! box from there). A change is flagged when its whole interval lies
//! beyond the minimum effect (default 5 %, `--min-effect`), as a claim
//! holds only on its whole interval; it is a regression when it goes the
//! panel's worse way (`y.better`). An interval that excludes no change but
//! reaches inside the minimum effect is "below min effect" or "undecided".
//! Among many values some intervals miss by luck: a flagged change must
//! also be a discovery of Benjamini–Hochberg at 5 % over the values
//! compared (Welch's p on logarithms), else it "could be chance"
//! ([`weigh`]). Unlike Bonferroni over exact rank tests (whose smallest p
//! at three repetitions a side is 1/20), this leaves a large change at
//! three repetitions decidable. Beside every value compare prints the
//! smallest change its repetitions could detect (80 % of the time, at 5 %
//! false alarms): "within noise" then says how much noise.
//! A point needs two or more repetitions on both sides: one repetition's
//! samples-based interval is no measure of run-to-run spread ("no
//! interval"). Variation between boots is in the interval only as far as
//! the runs' repetitions spread over boots (`[experiment] boots`): then
//! each run is resampled boot first, then repetitions within each boot.
//! Variation of the host itself is not. The two runs' canaries
//! (calibrate.rs) are printed beside the comparison, but decide nothing:
//! on this shared machine both canaries tried (8 MiB and 256 KiB walks)
//! moved by 25–50 % between runs whose A/A data stayed within 2 %, and
//! letting them excuse a change hid a 10 % slower device in CI.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::def::{Better, FigureDef};
use super::distributions;
use super::error::FigureError;
use super::extract::{PanelData, Series, SeriesPoint, XKey, fmt_num};
use super::interval;
use super::quantity::{self, Shape};
use super::stats::{Estimate, Rep};
use super::{Figure, RunFigures, compute};
use crate::machine::calibrate;

/// The smallest change flagged unless asked otherwise: 5 %.
pub const DEFAULT_MIN_EFFECT: f64 = 0.05;

/// Two runs' canaries count as the same while less than 5 % apart.
pub const HOST_SAME: f64 = 0.05;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flag {
    Regression,
    Improvement,
    /// A change at least the minimum effect; the panel has no better
    /// direction.
    Changed,
    /// The interval excludes no change, but all of it is below the
    /// minimum effect.
    BelowMinEffect,
    /// The interval excludes no change and straddles the minimum effect.
    Undecided,
    /// The interval includes no change.
    Same,
    /// A side has no interval: the change cannot be told from noise.
    NoInterval,
    /// Decided, but no larger than the host's own change of speed between
    /// the runs (plus the minimum effect): the host could explain it.

    /// Beyond the minimum effect, but the repetitions on either side are
    /// too few for their order to be told from chance among this many
    /// values (rank test, Bonferroni).
    Chance,
}

impl Flag {
    fn text(self) -> &'static str {
        match self {
            Flag::Regression => "REGRESSION",
            Flag::Improvement => "improvement",
            Flag::Changed => "changed",
            Flag::BelowMinEffect => "below min effect",
            Flag::Undecided => "undecided",
            Flag::Same => "within noise",
            Flag::NoInterval => "no interval",
            Flag::Chance => "could be chance",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub figure: String,
    pub panel: String,
    pub series: String,
    pub x: String,
    pub a: Estimate,
    pub b: Estimate,
    /// (b − a) / a in percent.
    pub change_pct: f64,
    /// Its 95 % interval in percent, where both sides have one.
    pub change_lo_pct: Option<f64>,
    pub change_hi_pct: Option<f64>,
    /// Two-sided p-value of Welch's t on the logarithms of the two runs'
    /// units (no change as the null).
    pub p: Option<f64>,
    /// The smallest change (a fraction) these units would detect 80 % of
    /// the time at 5 % false alarms: exp((t₀.₉₇₅ + t₀.₈₀)·se) − 1.
    pub detectable: Option<f64>,
    pub flag: Flag,
}

#[derive(Debug, Default, Serialize)]
pub struct Comparison {
    pub changes: Vec<Change>,
    /// "figure/panel: series only in A" and the like.
    pub unmatched: Vec<String>,
    /// The minimum effect a flag needs, as a fraction.
    pub min_effect: f64,
    /// The canaries' ns per step (lower quartile) in A and B, where both
    /// ran one.
    pub host_a_ns: Option<f64>,
    pub host_b_ns: Option<f64>,
    /// B's host against A's: canary(B) / canary(A) − 1.
    pub host_shift: Option<f64>,
    /// The p-value a decided change needed: Benjamini–Hochberg's
    /// threshold at 5 % over the values compared with an interval.
    pub max_p: Option<f64>,
}

impl Comparison {
    pub fn regressions(&self) -> usize {
        self.changes
            .iter()
            .filter(|c| c.flag == Flag::Regression)
            .count()
    }
}

/// 95 % interval of B / A − 1, the two points' units taken as independent
/// (ids dropped, so equal point ids of two runs are not taken for one
/// repetition). None unless both points have two or more units: one
/// repetition's raw samples say how noisy its reads were, not how far
/// another run lands (measured: two reproductions of one commit differed
/// beyond such intervals at 70 of 1 012 values).
pub fn change_interval(a: &SeriesPoint, b: &SeriesPoint) -> Option<(f64, f64)> {
    if a.reps.len() < 2 || b.reps.len() < 2 || a.est.value == 0.0 {
        return None;
    }
    let unpaired =
        |p: &SeriesPoint| -> Vec<Rep> { p.reps.iter().map(|r| Rep { id: None, ..*r }).collect() };
    let (ra, rb) = (unpaired(a), unpaired(b));
    let change = b.est.value / a.est.value - 1.0;
    quantity::over(
        &[&rb, &ra],
        |m| (m[1] != 0.0).then(|| m[0] / m[1]),
        Shape::Ratio,
        interval::LEVEL,
    )
    .ok()
    .map(|j| {
        (
            (j.interval.lo - 1.0).min(change),
            (j.interval.hi - 1.0).max(change),
        )
    })
}

/// Welch's two-sided p of no change and the smallest detectable change,
/// on the logarithms of the two points' units; None unless both have two
/// or more positive units with some spread.
pub fn welch_test(a: &SeriesPoint, b: &SeriesPoint) -> Option<(f64, f64)> {
    let (ua, ub) = (interval::units(&a.reps), interval::units(&b.reps));
    if ua.iter().chain(&ub).any(|v| *v <= 0.0) {
        return None;
    }
    let (change, se2, df) =
        interval::welch_moments(&interval::ln_all(&ua), &interval::ln_all(&ub), -1.0, 1.0)?;
    let p = distributions::student_two_sided(change / se2.sqrt(), df);
    let detectable =
        ((interval::t_quantile(0.975, df) + interval::t_quantile(0.8, df)) * se2.sqrt()).exp()
            - 1.0;
    Some((p.clamp(0.0, 1.0), detectable))
}

/// The flag of a relative change (a fraction) from its interval, as a
/// claim is decided: a change counts when its whole interval is beyond
/// the minimum effect, so noise alone does not flag one.
pub fn flag(
    change: f64,
    interval: Option<(f64, f64)>,
    better: Option<Better>,
    min_effect: f64,
) -> Flag {
    let Some((lo, hi)) = interval else {
        return Flag::NoInterval;
    };
    if lo <= 0.0 && 0.0 <= hi {
        return Flag::Same;
    }
    if -min_effect < lo && hi < min_effect {
        return Flag::BelowMinEffect;
    }
    if lo < min_effect && hi > -min_effect {
        return Flag::Undecided;
    }
    direction(change, better)
}

/// A decided change by its direction: a regression when it goes the
/// panel's worse way, "changed" when the panel has no better direction.
pub fn direction(change: f64, better: Option<Better>) -> Flag {
    let up = change > 0.0;
    match better {
        None => Flag::Changed,
        Some(Better::Higher) if up => Flag::Improvement,
        Some(Better::Lower) if !up => Flag::Improvement,
        Some(_) => Flag::Regression,
    }
}

fn series_changes(
    fig: &str,
    panel: &str,
    better: Option<Better>,
    a: &Series,
    b: &Series,
    out: &mut Comparison,
) {
    for pa in &a.points {
        match b.points.iter().find(|pb| pb.x == pa.x) {
            Some(pb) => {
                let change = if pa.est.value != 0.0 {
                    pb.est.value / pa.est.value - 1.0
                } else {
                    f64::NAN
                };
                let interval = change_interval(pa, pb);
                let test = interval.and_then(|_| welch_test(pa, pb));
                out.changes.push(Change {
                    figure: fig.to_string(),
                    panel: panel.to_string(),
                    series: a.label.clone(),
                    x: pa.x.label(),
                    a: pa.est,
                    b: pb.est,
                    change_pct: change * 100.0,
                    change_lo_pct: interval.map(|i| i.0 * 100.0),
                    change_hi_pct: interval.map(|i| i.1 * 100.0),
                    p: test.map(|t| t.0),
                    detectable: test.map(|t| t.1),
                    // Chance and the host are weighed once every value is
                    // known (`compare`).
                    flag: flag(change, interval, better, out.min_effect),
                })
            }
            None => out.unmatched.push(format!(
                "{fig}/{panel}: {} x={} only in A",
                a.label,
                pa.x.label()
            )),
        }
    }
    for pb in &b.points {
        if !a.points.iter().any(|pa| pa.x == pb.x) {
            out.unmatched.push(format!(
                "{fig}/{panel}: {} x={} only in B",
                b.label,
                pb.x.label()
            ));
        }
    }
}

/// A figure's panels with the direction that is better in each.
fn panels(fig: &Figure) -> impl Iterator<Item = (&str, Option<Better>, &PanelData)> {
    fig.def
        .panels
        .iter()
        .zip(&fig.panels)
        .map(|(p, (name, d))| (name.as_str(), p.y.better, d))
}

/// Where a value sits, as compare pairs values of two runs and history
/// follows them over many: figure id, panel, series key, x.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ValueKey {
    pub figure: String,
    pub panel: String,
    pub series: String,
    pub x: XKey,
}

/// One value of a run: its point (median and repetitions) and key.
#[derive(Debug, Clone)]
pub struct Value<'a> {
    pub key: ValueKey,
    pub label: &'a str,
    pub better: Option<Better>,
    pub point: &'a SeriesPoint,
}

/// Every value of a run's figures that compare would pair.
pub fn values(rf: &RunFigures) -> Vec<Value<'_>> {
    let mut out = Vec::new();
    for fig in &rf.figures {
        for (panel, better, d) in panels(fig) {
            for s in &d.series {
                for p in &s.points {
                    out.push(Value {
                        key: ValueKey {
                            figure: fig.def.id.clone(),
                            panel: panel.to_string(),
                            series: s.key.clone(),
                            x: p.x.clone(),
                        },
                        label: &s.label,
                        better,
                        point: p,
                    });
                }
            }
        }
    }
    out
}

fn figure_changes(fa: &Figure, fb: &Figure, out: &mut Comparison) {
    for ((name, better, da), (_, _, db)) in panels(fa).zip(panels(fb)) {
        for sa in &da.series {
            match db.series(&sa.key) {
                Some(sb) => series_changes(&fa.def.id, name, better, sa, sb, out),
                None => out.unmatched.push(format!(
                    "{}/{name}: series {} only in A",
                    fa.def.id, sa.label
                )),
            }
        }
        for sb in &db.series {
            if da.series(&sb.key).is_none() {
                out.unmatched.push(format!(
                    "{}/{name}: series {} only in B",
                    fa.def.id, sb.label
                ));
            }
        }
    }
}

/// `min_effect`: the smallest relative change flagged (0.05 = 5 %).
pub fn compare(
    a: &Path,
    b: &Path,
    defs: &BTreeMap<String, FigureDef>,
    min_effect: f64,
) -> Result<Comparison, FigureError> {
    let ra = compute(a, defs)?;
    let rb = compute(b, defs)?;
    let (sa, sb) = (&ra.run.manifest.host.speed, &rb.run.manifest.host.speed);
    let mut out = Comparison {
        min_effect,
        host_a_ns: sa.as_ref().and_then(|s| s.typical()),
        host_b_ns: sb.as_ref().and_then(|s| s.typical()),
        host_shift: sa
            .as_ref()
            .zip(sb.as_ref())
            .and_then(|(a, b)| calibrate::shift(a, b)),
        ..Comparison::default()
    };
    for fa in &ra.figures {
        match rb.figures.iter().find(|f| f.def.id == fa.def.id) {
            Some(fb) => figure_changes(fa, fb, &mut out),
            None => out
                .unmatched
                .push(format!("figure {} only in A", fa.def.id)),
        }
    }
    for fb in &rb.figures {
        if !ra.figures.iter().any(|f| f.def.id == fb.def.id) {
            out.unmatched
                .push(format!("figure {} only in B", fb.def.id));
        }
    }
    weigh(&mut out);
    Ok(out)
}

/// The family-wide step of the flags: a decided change that is not a
/// discovery of Benjamini–Hochberg at 5 % over the values compared could
/// be chance (a run of many values has some beyond their 95 % intervals by
/// luck).
pub fn weigh(c: &mut Comparison) {
    let mut ps: Vec<f64> = c.changes.iter().filter_map(|ch| ch.p).collect();
    ps.sort_by(f64::total_cmp);
    let m = ps.len();
    if m > 0 {
        // The largest p(i) ≤ i/m·α; every p up to it is a discovery.
        let cut = ps
            .iter()
            .enumerate()
            .rev()
            .find(|(i, p)| **p <= (i + 1) as f64 / m as f64 * FAMILY_ALPHA)
            .map(|(_, p)| *p)
            .unwrap_or(0.0);
        c.max_p = Some(cut);
    }
    for ch in &mut c.changes {
        let decided = matches!(
            ch.flag,
            Flag::Regression | Flag::Improvement | Flag::Changed
        );
        let discovered =
            ch.p.zip(c.max_p)
                .is_some_and(|(p, max)| p <= max && max > 0.0);
        if decided && !discovered {
            ch.flag = Flag::Chance;
        }
    }
}

/// The false discovery rate a comparison keeps: 5 %.
pub const FAMILY_ALPHA: f64 = 0.05;

/// One-sided exact Mann–Whitney p-value: the chance, when A and B are
/// draws of one distribution, that B's values lie at least as far beyond
/// A's (above when `b_greater`, else below) as observed. U counts pairs
/// (a, b) with b beyond a, ties a half; its null distribution is counted
/// exactly over the C(n+m, n) orders (normal approximation past 2 500
/// pairs).
pub fn rank_p(a: &[f64], b: &[f64], b_greater: bool) -> f64 {
    let (n, m) = (a.len(), b.len());
    if n == 0 || m == 0 {
        return 1.0;
    }
    let mut u = 0.0;
    for &x in a {
        for &y in b {
            let beyond = if b_greater { y > x } else { y < x };
            u += if beyond {
                1.0
            } else if y == x {
                0.5
            } else {
                0.0
            };
        }
    }
    let pairs = n * m;
    if pairs > 2500 {
        let mean = pairs as f64 / 2.0;
        let sd = (pairs as f64 * (n + m + 1) as f64 / 12.0).sqrt();
        let z = (u - 0.5 - mean) / sd;
        return 0.5 * erfc(z / std::f64::consts::SQRT_2);
    }
    // counts[j][v]: orders of i A's and j B's with U = v, built up over i.
    // With no A, U is 0 whatever the B's.
    let mut counts = vec![vec![0.0f64; pairs + 1]; m + 1];
    for row in counts.iter_mut() {
        row[0] = 1.0;
    }
    for i in 1..=n {
        let mut next = vec![vec![0.0f64; pairs + 1]; m + 1];
        next[0][0] = 1.0;
        for j in 1..=m {
            for v in 0..=i * j {
                // The largest element is an A (adds nothing) or a B
                // (beyond all i A's).
                let last_a = counts[j][v];
                let last_b = if v >= i { next[j - 1][v - i] } else { 0.0 };
                next[j][v] = last_a + last_b;
            }
        }
        counts = next;
    }
    let total: f64 = counts[m].iter().sum();
    let from = (u.ceil() as usize).min(pairs + 1);
    counts[m][from..].iter().sum::<f64>() / total
}

/// Complementary error function (Numerical Recipes' erfcc, |error| < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * (-z * z + poly).exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

fn show(e: &Estimate) -> String {
    match (e.lo, e.hi) {
        (Some(l), Some(h)) => format!("{} [{}–{}]", fmt_num(e.value), fmt_num(l), fmt_num(h)),
        _ => fmt_num(e.value),
    }
}

pub fn render(c: &Comparison) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", host_line(c));
    let mut last = String::new();
    for ch in &c.changes {
        let head = format!("{} / {}", ch.figure, ch.panel);
        if head != last {
            let _ = writeln!(s, "{head}");
            let _ = writeln!(
                s,
                "  {:<28} {:>8}  {:<28} {:<28} {:>24}  flag",
                "series", "x", "A", "B", "change [95 % interval]"
            );
            last = head;
        }
        let change = match (ch.change_lo_pct, ch.change_hi_pct) {
            (Some(l), Some(h)) => format!("{:+.1}% [{l:+.1}, {h:+.1}]", ch.change_pct),
            _ => format!("{:+.1}%", ch.change_pct),
        };
        // "within noise" says how much noise: the change these
        // repetitions could have detected.
        let flag = match (ch.flag, ch.detectable) {
            (Flag::Same | Flag::Undecided | Flag::BelowMinEffect, Some(d)) => {
                format!("{} (could detect ≥ {:.1} %)", ch.flag.text(), d * 100.0)
            }
            _ => ch.flag.text().to_string(),
        };
        let _ = writeln!(
            s,
            "  {:<28} {:>8}  {:<28} {:<28} {:>24}  {}",
            ch.series,
            ch.x,
            show(&ch.a),
            show(&ch.b),
            change,
            flag
        );
    }
    for u in &c.unmatched {
        let _ = writeln!(s, "{u}");
    }
    let _ = writeln!(
        s,
        "{} values compared, {} regressions (the change's whole 95 % interval beyond {}, the worse way)",
        c.changes.len(),
        c.regressions(),
        format_args!("{}%", fmt_num(c.min_effect * 100.0))
    );
    let chance = c
        .changes
        .iter()
        .filter(|ch| ch.flag == Flag::Chance)
        .count();
    if chance > 0 {
        let _ = writeln!(
            s,
            "{chance} changes beyond the minimum effect could be chance: not discoveries of Benjamini–Hochberg at 5 % among {} values (Welch p on logarithms; the largest p that was one: {})",
            c.changes.iter().filter(|ch| ch.p.is_some()).count(),
            c.max_p
                .filter(|p| *p > 0.0)
                .map_or("none".into(), |p| format!("{p:.2e}")),
        );
    }
    s
}

/// What the two runs' canaries say about their hosts.
fn host_line(c: &Comparison) -> String {
    let (Some(a), Some(b), Some(shift)) = (c.host_a_ns, c.host_b_ns, c.host_shift) else {
        return "host speed: not measured the same way in both runs (a run before the canary, or before its 256 KiB walk); a change of the host itself is not ruled out".into();
    };
    let ns = |v: f64| format!("{v:.1} ns");
    if shift.abs() < HOST_SAME {
        format!(
            "host speed: the same within {:.0} % (canary A {}, B {} per step, {:+.1} %)",
            HOST_SAME * 100.0,
            ns(a),
            ns(b),
            shift * 100.0
        )
    } else {
        format!(
            "host speed: B's canary {:.0} % {} than A's (A {}, B {} per step); shown, not used to decide: the canary has moved by up to 50 % between runs whose data did not",
            shift.abs() * 100.0,
            if shift > 0.0 { "slower" } else { "faster" },
            ns(a),
            ns(b),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drawing::figures::stats::CiMethod;

    fn point(values: &[f64]) -> SeriesPoint {
        let reps: Vec<Rep> = values
            .iter()
            .enumerate()
            .map(|(i, &value)| Rep {
                id: Some((0, i as u32)),
                value,
                boot: None,
            })
            .collect();
        SeriesPoint {
            x: XKey::Num(1.0),
            est: crate::drawing::figures::stats::estimate(values, None).unwrap(),
            reps,
        }
    }

    #[test]
    fn flags_follow_the_change_interval_the_minimum_effect_and_direction() {
        let up = Some((0.15, 0.25));
        assert_eq!(flag(0.2, up, Some(Better::Lower), 0.05), Flag::Regression);
        assert_eq!(flag(0.2, up, Some(Better::Higher), 0.05), Flag::Improvement);
        assert_eq!(flag(0.2, up, None, 0.05), Flag::Changed);
        let down = Some((-0.25, -0.15));
        assert_eq!(
            flag(-0.2, down, Some(Better::Higher), 0.05),
            Flag::Regression
        );
        // Clear of 0 but all of it under the minimum effect.
        let small = Some((0.02, 0.04));
        assert_eq!(
            flag(0.03, small, Some(Better::Lower), 0.05),
            Flag::BelowMinEffect
        );
        assert_eq!(
            flag(0.03, small, Some(Better::Lower), 0.01),
            Flag::Regression
        );
        // Clear of 0, but it may be under or over the minimum effect.
        let wide = Some((0.02, 0.12));
        assert_eq!(flag(0.07, wide, Some(Better::Lower), 0.05), Flag::Undecided);
        assert_eq!(
            flag(0.3, Some((-0.1, 0.6)), Some(Better::Lower), 0.05),
            Flag::Same
        );
        assert_eq!(flag(0.3, None, Some(Better::Lower), 0.05), Flag::NoInterval);
    }

    #[test]
    fn the_rank_test_counts_orders_exactly() {
        // All of B above all of A: 1 order of C(6, 3) = 20, of C(12, 6) = 924.
        let p = rank_p(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0], true);
        assert!((p - 1.0 / 20.0).abs() < 1e-12, "{p}");
        let a: Vec<f64> = (0..6).map(f64::from).collect();
        let b: Vec<f64> = (10..16).map(f64::from).collect();
        assert!((rank_p(&a, &b, true) - 1.0 / 924.0).abs() < 1e-12);
        // The other way: as unlikely as can be, so p = 1.
        assert!((rank_p(&a, &b, false) - 1.0).abs() < 1e-12);
        // One swap at the boundary: U = 8 of 9; 2 orders reach it.
        let p = rank_p(&[1.0, 2.0, 4.5], &[4.0, 5.0, 6.0], true);
        assert!((p - 2.0 / 20.0).abs() < 1e-12, "{p}");
        // Fully interleaved: about half.
        let p = rank_p(&[1.0, 3.0, 5.0], &[2.0, 4.0, 6.0], true);
        assert!(p > 0.3 && p < 0.7, "{p}");
        // The normal approximation (51 a side) agrees with the exact count
        // (50 a side) at its edge.
        let a: Vec<f64> = (0..51).map(|i| f64::from(i) * 2.0).collect();
        let b: Vec<f64> = (0..51).map(|i| f64::from(i) * 2.0 + 9.0).collect();
        let approx = rank_p(&a, &b, true);
        let exact = rank_p(&a[..50], &b[..50], true);
        assert!((approx - exact).abs() < 0.01, "{approx} {exact}");
    }

    /// A comparison of `m` values, each B `shift` above A with `n`
    /// repetitions a side spread ±1 %, plus `nulls` values with no change.
    fn family(m: usize, nulls: usize, n: usize, shift: f64) -> Comparison {
        let a: Vec<f64> = (0..n)
            .map(|i| 100.0 * (1.0 + 0.01 * ((i % 3) as f64 - 1.0)))
            .collect();
        let b: Vec<f64> = a.iter().map(|v| v * (1.0 + shift)).collect();
        let mut c = Comparison {
            min_effect: 0.05,
            ..Comparison::default()
        };
        for i in 0..m + nulls {
            let pa = point(&a);
            let pb = if i < m { point(&b) } else { point(&a) };
            let change = pb.est.value / pa.est.value - 1.0;
            let interval = change_interval(&pa, &pb);
            let test = welch_test(&pa, &pb);
            c.changes.push(Change {
                figure: "f".into(),
                panel: "p".into(),
                series: "s".into(),
                x: i.to_string(),
                a: pa.est,
                b: pb.est,
                change_pct: change * 100.0,
                change_lo_pct: interval.map(|i| i.0 * 100.0),
                change_hi_pct: interval.map(|i| i.1 * 100.0),
                p: test.map(|t| t.0),
                detectable: test.map(|t| t.1),
                flag: flag(change, interval, Some(Better::Lower), 0.05),
            });
        }
        weigh(&mut c);
        c
    }

    #[test]
    fn a_large_change_at_three_repetitions_is_decided_among_many_values() {
        // Three repetitions a side, 20 % slower, among 271 values: Bonferroni
        // over rank tests could never decide it (p ≥ 1/20); BH does.
        let c = family(4, 267, 3, 0.2);
        assert_eq!(c.regressions(), 4, "{}", render(&c));
        assert!(c.changes[4..].iter().all(|ch| ch.flag == Flag::Same));
        // Every unchanged value says what it could have detected.
        assert!(render(&c).contains("within noise (could detect ≥ "));
        let d = c.changes[10].detectable.unwrap();
        assert!(d > 0.01 && d < 0.2, "{d}");
    }

    #[test]
    fn a_change_that_is_not_a_discovery_among_all_values_could_be_chance() {
        // Six a side, a 6 % change barely past its interval's 5 % bar:
        // one such value among many null ones is not a discovery.
        let a = point(&[100.0, 104.0, 96.0, 101.0, 99.0, 100.0]);
        let b = point(&[109.0, 113.0, 105.0, 110.0, 108.0, 109.0]);
        let (p, _) = welch_test(&a, &b).unwrap();
        let mut c = family(0, 400, 3, 0.0);
        c.changes.push(Change {
            flag: Flag::Regression,
            p: Some(p),
            ..c.changes[0].clone()
        });
        weigh(&mut c);
        assert_eq!(c.changes.last().unwrap().flag, Flag::Chance, "p {p}");
        assert!(render(&c).contains("could be chance: not discoveries of Benjamini–Hochberg"));
        // Alone, it is one.
        let mut alone = family(0, 0, 3, 0.0);
        alone.changes.push(Change {
            flag: Flag::Regression,
            p: Some(p),
            ..c.changes[0].clone()
        });
        weigh(&mut alone);
        assert_eq!(alone.regressions(), 1);
    }

    #[test]
    fn the_change_interval_resamples_each_run_on_its_own() {
        // Same point ids in both runs; B is A shifted up 10 %. Paired, the
        // ratio would never move; resampled independently it spreads.
        let a = point(&[100.0, 90.0, 110.0, 95.0, 105.0]);
        let b = point(&[110.0, 99.0, 121.0, 104.5, 115.5]);
        let (lo, hi) = change_interval(&a, &b).unwrap();
        assert!(
            lo < 0.05 && hi > 0.15 && lo <= 0.1 && 0.1 <= hi,
            "{lo} {hi}"
        );
        // Tight repetitions and a 10 % shift: decided.
        let a = point(&[100.0, 100.5, 99.5, 100.2, 99.8]);
        let b = point(&[110.0, 110.5, 109.5, 110.2, 109.8]);
        let iv = change_interval(&a, &b).unwrap();
        assert!(iv.0 > 0.08 && iv.1 < 0.12, "{iv:?}");
        assert_eq!(
            flag(0.1, Some(iv), Some(Better::Lower), 0.05),
            Flag::Regression
        );
        // One repetition, even with an interval from its raw samples: that
        // interval is no measure of another run's spread.
        let one = SeriesPoint {
            est: Estimate {
                lo: Some(99.0),
                hi: Some(101.0),
                n: 1,
                ci: CiMethod::Samples,
                level: Some(0.95),
                ..a.est
            },
            reps: a.reps[..1].to_vec(),
            ..a.clone()
        };
        assert_eq!(change_interval(&one, &b), None);
        assert_eq!(change_interval(&b, &one), None);
    }
}
