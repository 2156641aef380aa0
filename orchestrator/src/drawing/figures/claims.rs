//! The paper's qualitative claims, checked against a run's series. Each
//! claim's quantity (a value, a ratio, the largest value, the worst step,
//! an R²) gets an interval over the run's repetitions (or boots) that
//! reaches 95 % with them (`quantity.rs`, `interval.rs`; several points or
//! series in one claim share the 5 % by Bonferroni): the claim holds when
//! the whole interval is inside its bounds, does not hold when the whole
//! interval is outside, and is undecided at this noise otherwise (with how
//! many repetitions would likely decide it), or when no method reaches 95 %
//! with the repetitions at hand (one repetition never decides). It is not
//! measurable here when the run lacks the data.

use serde::Serialize;

use super::claim_kinds::{At, Bounds, ClaimKind, Place};
use super::def::{Better, ClaimDef, FigureDef};
use super::extract::{PanelData, Series, SeriesPoint, fmt_num};
use super::interval::{self, Interval, Method};
use super::quantity::Joint;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Holds,
    DoesNotHold,
    /// Measured, but the interval straddles a bound (or there is none).
    Undecided,
    NotMeasurable,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::DoesNotHold => "does not hold",
            Verdict::Undecided => "undecided at this noise",
            Verdict::NotMeasurable => "not measurable here",
        }
    }
}

/// One value a decision used.
#[derive(Debug, Clone, Serialize)]
pub struct Used {
    pub series: String,
    pub x: String,
    pub value: f64,
    pub lo: Option<f64>,
    pub hi: Option<f64>,
    pub n: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClaimResult {
    pub figure: String,
    pub id: String,
    pub text: String,
    pub kind: ClaimKind,
    pub panel: String,
    pub verdict: Verdict,
    /// The numbers behind the verdict, in words.
    pub numbers: String,
    pub values: Vec<Used>,
    /// The quantity the verdict was decided on ("io-uring/read at x=1"),
    /// its estimate on the medians and 95 % interval over repetitions, the
    /// bound it was held against; None where nothing was measured.
    pub quantity: Option<String>,
    pub estimate: Option<f64>,
    pub lo: Option<f64>,
    pub hi: Option<f64>,
    pub bound: Option<String>,
    /// Repetitions the interval rests on (the fewest of its points).
    pub repetitions: Option<usize>,
    /// How the interval was obtained, its confidence (exact for order
    /// statistics; several points or series share the 5 % by Bonferroni)
    /// and the independent units (repetitions or boots) it rests on.
    pub method: Option<Method>,
    pub level: Option<f64>,
    pub units: Option<usize>,
    /// How its points were combined: "paired by boot", "measured
    /// independently", ...
    pub pairing: Option<String>,
    /// For an undecided claim: about how many would decide it.
    pub repetitions_needed: Option<usize>,
    /// Claim ids this one rests on (`requires`).
    pub requires: Vec<String>,
    /// Verdict and numbers on this claim's own data, before `requires`
    /// (what a reproduction joins runs on).
    #[serde(skip)]
    pub own: (Verdict, String),
}

impl ClaimResult {
    /// "io-uring/read at x=1: 1.02 [0.98–1.06] against in [0.9, 1.1]".
    pub fn interval_text(&self) -> Option<String> {
        let (q, e, b) = (
            self.quantity.as_ref()?,
            self.estimate?,
            self.bound.as_ref()?,
        );
        let iv = match (self.lo, self.hi, self.method, self.level) {
            (Some(l), Some(h), Some(m), Some(level)) => format!(
                " [{}–{}] ({} %, {}{}{})",
                fmt_num(l),
                fmt_num(h),
                interval::fmt_level(level),
                m.text(),
                self.pairing
                    .as_ref()
                    .map_or(String::new(), |p| format!(", {p}")),
                self.units.map_or(String::new(), |u| format!(", {u} units"))
            ),
            (Some(l), Some(h), ..) => format!(" [{}–{}]", fmt_num(l), fmt_num(h)),
            _ => " (no interval)".to_string(),
        };
        Some(format!("{q}: {}{iv} against {b}", fmt_num(e)))
    }
}

pub(super) fn used(s: &Series, p: &SeriesPoint) -> Used {
    Used {
        series: s.key.clone(),
        x: p.x.label(),
        value: p.est.value,
        lo: p.est.lo,
        hi: p.est.hi,
        n: p.est.n,
    }
}

/// "1.21 [1.15–1.30]" with the unit.
pub(super) fn show(p: &SeriesPoint, unit: &str) -> String {
    let u = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    match (p.est.lo, p.est.hi) {
        (Some(l), Some(h)) => format!(
            "{}{u} [{}–{}]",
            fmt_num(p.est.value),
            fmt_num(l),
            fmt_num(h)
        ),
        _ => format!("{}{u}", fmt_num(p.est.value)),
    }
}

#[derive(Clone, Copy)]
pub(super) struct Ctx<'a> {
    pub claim: &'a ClaimDef,
    pub data: &'a PanelData,
    pub unit: &'a str,
    pub better: Option<Better>,
    /// The confidence each part is decided at: 95 % shared by Bonferroni
    /// among the series a claim checks.
    pub level: f64,
}

/// A claim's quantity with its interval, and what that says.
#[derive(Debug, Clone)]
pub(super) struct Decided {
    /// Holds, DoesNotHold or Undecided.
    pub verdict: Verdict,
    pub quantity: String,
    pub estimate: f64,
    pub interval: Option<(f64, f64)>,
    /// The interval's method, confidence and units, and how its points
    /// were combined.
    pub how: Option<(Interval, String)>,
    pub bounds: Bounds,
    pub n: usize,
    pub needed: Option<usize>,
    /// Why it is undecided, in words.
    pub note: Option<String>,
}

/// Relative distance under which an estimate counts as on its bound.
const ON_BOUND: f64 = 1e-9;

/// The units an interval of half-width `half` from `n` units needs to
/// shrink to `dist`: the t half-width goes as t(m − 1)/√m.
fn units_needed(n: usize, half: f64, dist: f64, level: f64) -> Option<usize> {
    let q = 1.0 - (1.0 - level) / 2.0;
    let width =
        |m: usize| interval::t_quantile(q, (m.max(2) - 1) as f64) / (m.max(2) as f64).sqrt();
    let now = width(n);
    let fits = |m: usize| half * width(m) / now < dist;
    // The width falls with m: the first m that fits, by bisection.
    let (mut lo, mut hi) = (n + 1, 10_000);
    if !fits(hi) {
        return None;
    }
    while lo < hi {
        let mid = (lo + hi) / 2;
        if fits(mid) { hi = mid } else { lo = mid + 1 }
    }
    Some(lo)
}

/// Holds when the whole interval is inside `bounds`, does not hold when
/// the whole interval is outside, undecided otherwise or with no interval
/// (`interval` then says why).
pub(super) fn judge(
    quantity: String,
    estimate: f64,
    interval: Result<Joint, String>,
    bounds: Bounds,
    n: usize,
) -> Decided {
    let mut d = Decided {
        verdict: Verdict::Undecided,
        quantity,
        estimate,
        interval: None,
        how: None,
        bounds,
        n,
        needed: None,
        note: None,
    };
    let j = match interval {
        Ok(j) => j,
        Err(why) => {
            d.note = Some(why);
            return d;
        }
    };
    // Like a point's, the interval brackets its estimate.
    let (lo, hi) = (j.interval.lo.min(estimate), j.interval.hi.max(estimate));
    d.interval = Some((lo, hi));
    d.how = Some((j.interval, j.how.to_string()));
    // Units that never varied (six equal ones give [x, x]) measured no
    // spread: the value is below its resolution or deterministic, and a
    // zero-width interval would claim more than the data can.
    if hi <= lo {
        d.note = Some(format!(
            "all {} units read the same value: no spread was measured (below the metric's resolution?), \
             so no interval is claimed",
            j.interval.units
        ));
        return d;
    }
    let outside = bounds.min().is_some_and(|m| hi < m) || bounds.max().is_some_and(|m| lo > m);
    let inside = bounds.min().is_none_or(|m| lo >= m) && bounds.max().is_none_or(|m| hi <= m);
    if outside {
        d.verdict = Verdict::DoesNotHold;
    } else if inside {
        d.verdict = Verdict::Holds;
    } else {
        let (dist, bound) = [bounds.min(), bounds.max()]
            .into_iter()
            .flatten()
            .map(|b| ((estimate - b).abs(), b))
            .fold((f64::INFINITY, 0.0), |a, b| if b.0 < a.0 { b } else { a });
        let half = (hi - lo) / 2.0;
        let scale = estimate.abs().max(bound.abs()).max(f64::MIN_POSITIVE);
        let units = j.interval.units;
        let needed = (dist > ON_BOUND * scale)
            .then(|| units_needed(units, half, dist, j.interval.level))
            .flatten();
        match needed {
            None => {
                d.note = Some(format!(
                    "the estimate sits on the bound {}: more repetitions alone will not decide it",
                    fmt_num(bound)
                ))
            }
            Some(needed) => {
                d.needed = Some(needed);
                d.note = Some(format!(
                    "about {needed} repetitions (or boots) would decide it ({units} now)"
                ));
            }
        }
    }
    d
}

/// How strongly a part decides the claim: the claim reports the part that
/// sets its verdict (the first that does not hold, else the undecided one
/// needing the most repetitions, else the holding one nearest its bound).
fn rank(d: &Decided) -> (u8, f64) {
    match d.verdict {
        Verdict::DoesNotHold => (0, 0.0),
        Verdict::Undecided => (1, -(d.needed.map_or(f64::INFINITY, |n| n as f64))),
        _ => {
            let margin = d.interval.map_or(f64::INFINITY, |(lo, hi)| {
                let a = d.bounds.min().map_or(f64::INFINITY, |m| lo - m);
                let b = d.bounds.max().map_or(f64::INFINITY, |m| m - hi);
                a.min(b)
            });
            (2, margin)
        }
    }
}

/// Per-series outcome: `decided` None = not measurable for this series.
pub(super) struct Part {
    pub series: String,
    pub decided: Option<Decided>,
    pub words: String,
    pub values: Vec<Used>,
}

/// One interval from several points' intervals of the same claim: what
/// a maximum, a minimum or the weakest step is decided on.
pub(super) fn combined(
    parts: &[Interval],
    lo: f64,
    hi: f64,
    level: f64,
    how: &'static str,
) -> Joint {
    let method = parts.first().map_or(Method::Box, |p| p.method);
    let same = parts.iter().all(|p| p.method == method);
    Joint {
        interval: Interval {
            lo,
            hi,
            level,
            method: if same { method } else { Method::Box },
            units: parts.iter().map(|p| p.units).min().unwrap_or(0),
        },
        how,
    }
}

/// "a [lo–hi]" of an interval.
pub(super) fn show_interval(v: f64, iv: Option<(f64, f64)>) -> String {
    match iv {
        Some((l, h)) => format!("{} [{}–{}]", fmt_num(v), fmt_num(l), fmt_num(h)),
        None => fmt_num(v),
    }
}

impl Ctx<'_> {
    fn in_range(&self, p: &SeriesPoint) -> bool {
        let x = p.x.pos();
        self.claim.x_min.is_none_or(|m| x >= m) && self.claim.x_max.is_none_or(|m| x <= m)
    }

    fn points<'s>(&self, s: &'s Series) -> Vec<&'s SeriesPoint> {
        s.points.iter().filter(|p| self.in_range(p)).collect()
    }

    /// The point at `place`: a given x, or the smallest/largest x (that
    /// `among` has too, if given).
    pub(super) fn at<'s>(
        &self,
        place: &Place,
        s: &'s Series,
        among: Option<&Series>,
    ) -> Option<&'s SeriesPoint> {
        let pts = self.points(s);
        let common = |p: &&SeriesPoint| among.is_none_or(|o| o.points.iter().any(|q| q.x == p.x));
        match place {
            Place::X(x) => {
                let want = super::data::Cell::from_toml(x)?;
                pts.into_iter().find(|p| match want.as_f64() {
                    Some(v) if matches!(p.x, super::extract::XKey::Num(_)) => p.x.pos() == v,
                    _ => p.x.label() == want.text(),
                })
            }
            Place::At(At::Largest) => pts.into_iter().rfind(common),
            Place::At(At::Smallest) => pts.into_iter().find(common),
        }
    }

    /// Why nothing is at `place`: for a given x, which x this run has (a
    /// claim tied to depth 6 is not decided at the deepest point present).
    pub(super) fn missing_place(&self, place: &Place, series: &[&Series]) -> String {
        let Place::X(x) = place else {
            return "no point at the claim's x".into();
        };
        let want = super::data::Cell::from_toml(x).map_or_else(|| x.to_string(), |c| c.text());
        let mut have: Vec<String> = Vec::new();
        for s in series {
            for p in self.points(s) {
                let l = p.x.label();
                if !have.contains(&l) {
                    have.push(l);
                }
            }
        }
        format!(
            "the claim is about x={want}, which this run did not reach (it has x={})",
            if have.is_empty() {
                "none".to_string()
            } else {
                have.join(", ")
            }
        )
    }

    /// What a per-series kind decides `s` from.
    fn series_part<'s>(&self, s: &'s Series) -> SeriesPart<'s> {
        let points = self.points(s);
        SeriesPart {
            series: s,
            fewest: points.iter().map(|p| p.est.n).min().unwrap_or(0),
            points,
            name: if s.key.is_empty() {
                String::new()
            } else {
                format!("{}: ", s.label)
            },
            of: if s.key.is_empty() {
                String::new()
            } else {
                format!(" of {}", s.key)
            },
        }
    }
}

/// One series of a claim decided series by series, as its kind gets it.
pub(super) struct SeriesPart<'s> {
    pub series: &'s Series,
    /// Its points in the claim's x range.
    pub points: Vec<&'s SeriesPoint>,
    /// "label: " (nothing for a panel's one unnamed series), before its words.
    pub name: String,
    /// " of key" (or nothing): names the series in the quantity.
    pub of: String,
    /// The fewest repetitions of its points.
    pub fewest: usize,
}

impl SeriesPart<'_> {
    /// Its part before the kind decides it: not measurable, every point used.
    pub fn part(&self) -> Part {
        Part {
            series: self.series.key.clone(),
            decided: None,
            words: String::new(),
            values: self.points.iter().map(|p| used(self.series, p)).collect(),
        }
    }
}

pub(super) fn bounds_text(b: Bounds) -> String {
    match b {
        Bounds::Both(a, b) => format!("in [{}, {}]", fmt_num(a), fmt_num(b)),
        Bounds::Min(a) => format!("≥ {}", fmt_num(a)),
        Bounds::Max(b) => format!("≤ {}", fmt_num(b)),
    }
}

fn missing(data: &PanelData, key: &str) -> String {
    if let Some(why) = &data.unavailable {
        format!("series {key} has no data: the run could not measure it ({why})")
    } else if data.absent.iter().any(|a| a == key) {
        format!("series {key} has no data in this run (not implemented or not run)")
    } else if !data.absent.is_empty() {
        format!(
            "series {key} has no data in this run (absent: {})",
            data.absent.join(", ")
        )
    } else {
        format!("series {key} has no data in this run")
    }
}

/// What `decide` found: verdict, numbers, values, and the quantity.
pub(super) type Outcome = (Verdict, String, Vec<Used>, Option<Decided>);

pub(super) fn not_measurable(why: String) -> Outcome {
    (Verdict::NotMeasurable, why, Vec::new(), None)
}

/// The series `a` and `b` of a claim about two, or why it is not
/// measurable: whichever has no data.
pub(super) fn two_series<'d>(
    ctx: &Ctx<'d>,
    a: &str,
    b: &str,
) -> Result<(&'d Series, &'d Series), String> {
    match (ctx.data.series(a), ctx.data.series(b)) {
        (Some(x), Some(y)) => Ok((x, y)),
        _ => {
            let why: Vec<String> = [a, b]
                .into_iter()
                .filter(|k| ctx.data.series(k).is_none())
                .map(|k| missing(ctx.data, k))
                .collect();
            Err(why.join("; "))
        }
    }
}

/// A claim decided series by series (each series' part by `one`), that
/// holds only when every series does; `limit` says the claim's bound
/// after the numbers.
pub(super) fn per_series(
    ctx: &Ctx<'_>,
    limit: String,
    one: impl Fn(&Ctx<'_>, &SeriesPart<'_>) -> Part,
) -> Outcome {
    let explicit = !ctx.claim.series.is_empty();
    let mut missing_words = Vec::new();
    let chosen: Vec<&Series> = if explicit {
        ctx.claim
            .series
            .iter()
            .filter_map(|k| {
                let s = ctx.data.series(k);
                if s.is_none() {
                    missing_words.push(missing(ctx.data, k));
                }
                s
            })
            .collect()
    } else {
        ctx.data.series.iter().collect()
    };
    if chosen.is_empty() {
        let why = if missing_words.is_empty() {
            let absent = if ctx.data.absent.is_empty() {
                String::new()
            } else {
                format!(" (absent: {})", ctx.data.absent.join(", "))
            };
            format!("no series with data in this run{absent}")
        } else {
            missing_words.join("; ")
        };
        return not_measurable(why);
    }
    // The claim holds only when every series does: each at 1 − α/k.
    let shared = Ctx {
        level: 1.0 - (1.0 - ctx.level) / chosen.len() as f64,
        ..*ctx
    };
    let parts: Vec<Part> = chosen
        .iter()
        .map(|s| one(&shared, &shared.series_part(s)))
        .collect();
    let mut words: Vec<String> = parts.iter().map(|p| p.words.clone()).collect();
    words.extend(missing_words.iter().cloned());
    let values = parts.iter().flat_map(|p| p.values.clone()).collect();
    let measured: Vec<&Decided> = parts.iter().filter_map(|p| p.decided.as_ref()).collect();
    let all_measured = measured.len() == parts.len() && missing_words.is_empty();
    // The part that sets the verdict; ties go to the first.
    let deciding = measured
        .iter()
        .copied()
        .reduce(|a, b| {
            let (ra, rb) = (rank(a), rank(b));
            if rb.0 < ra.0 || (rb.0 == ra.0 && rb.1 < ra.1) {
                b
            } else {
                a
            }
        })
        .cloned();
    let verdict = if measured.is_empty() || (explicit && !all_measured) {
        Verdict::NotMeasurable
    } else {
        deciding
            .as_ref()
            .map_or(Verdict::NotMeasurable, |d| d.verdict)
    };
    let unmeasured: Vec<&str> = parts
        .iter()
        .filter(|p| p.decided.is_none())
        .map(|p| p.series.as_str())
        .collect();
    let mut text = words.join("; ");
    if !explicit && !unmeasured.is_empty() && verdict != Verdict::NotMeasurable {
        text.push_str(&format!(" [not used: {}]", unmeasured.join(", ")));
    }
    // A named series missing: what was measured is not the claim's quantity.
    let deciding = deciding.filter(|_| verdict != Verdict::NotMeasurable);
    (verdict, format!("{text}{limit}"), values, deciding)
}

/// Every claim of a figure against its panels' data. A claim whose
/// `requires` do not all hold is not measurable, whatever its numbers say.
pub fn evaluate(def: &FigureDef, panels: &[(String, PanelData)]) -> Vec<ClaimResult> {
    evaluate_under(def, panels, false)
}

/// As [`evaluate`], for a run whose VM ran under TCG when `tcg`: claims
/// that need KVM (`needs_kvm`) are then not measurable, numbers shown.
pub fn evaluate_under(
    def: &FigureDef,
    panels: &[(String, PanelData)],
    tcg: bool,
) -> Vec<ClaimResult> {
    let mut results: Vec<ClaimResult> = Vec::new();
    for c in &def.claims {
        let panel = def.panel(c.panel.as_deref());
        let name = panel.map(|p| p.name.clone()).unwrap_or_default();
        let data = panels.iter().find(|(n, _)| *n == name).map(|(_, d)| d);
        let (verdict, mut numbers, values, decided) = match (panel, data) {
            (Some(p), Some(data)) => c.check.decide(&Ctx {
                claim: c,
                data,
                unit: &p.y.unit,
                better: p.y.better,
                level: interval::LEVEL,
            }),
            _ => not_measurable("no such panel".into()),
        };
        if verdict == Verdict::Undecided
            && let Some(note) = decided.as_ref().and_then(|d| d.note.as_ref())
        {
            numbers.push_str(&format!("; undecided: {note}"));
        }
        let (verdict, numbers) = if tcg && c.needs_kvm && verdict != Verdict::NotMeasurable {
            (
                Verdict::NotMeasurable,
                format!(
                    "under TCG polling and device timing are emulation-bound (the claim needs KVM); \
                     measured anyway: {numbers}"
                ),
            )
        } else {
            (verdict, numbers)
        };
        let d = decided.as_ref();
        let how = d.and_then(|d| d.how.as_ref());
        results.push(ClaimResult {
            figure: def.id.clone(),
            id: c.id.clone(),
            text: c.text.clone(),
            kind: c.check.kind(),
            panel: name,
            verdict,
            numbers: numbers.clone(),
            values,
            quantity: d.map(|d| d.quantity.clone()),
            estimate: d.map(|d| d.estimate),
            lo: d.and_then(|d| d.interval).map(|i| i.0),
            hi: d.and_then(|d| d.interval).map(|i| i.1),
            bound: d.map(|d| bounds_text(d.bounds)),
            repetitions: d.map(|d| d.n),
            method: how.map(|h| h.0.method),
            level: how.map(|h| h.0.level),
            units: how.map(|h| h.0.units),
            pairing: how.map(|h| h.1.clone()),
            repetitions_needed: d.and_then(|d| d.needed),
            requires: c.requires.clone(),
            own: (verdict, numbers),
        });
    }
    apply_requires(&mut results);
    results
}

/// Sets each claim's verdict from its own and from the earlier claims of
/// its figure that it requires: unless each of them holds (an undecided
/// one included), it is not measurable, and says which one and why.
pub fn apply_requires(results: &mut [ClaimResult]) {
    for i in 0..results.len() {
        let (before, rest) = results.split_at_mut(i);
        let r = &mut rest[0];
        let unmet: Vec<String> = r
            .requires
            .iter()
            .filter_map(
                |id| match before.iter().find(|b| b.figure == r.figure && &b.id == id) {
                    Some(b) if b.verdict == Verdict::Holds => None,
                    Some(b) => Some(format!("{id} {}", b.verdict.text())),
                    None => Some(format!("{id} was not checked")),
                },
            )
            .collect();
        let (verdict, numbers) = r.own.clone();
        if unmet.is_empty() {
            r.verdict = verdict;
            r.numbers = numbers;
        } else {
            r.verdict = Verdict::NotMeasurable;
            r.numbers = format!("rests on {}; measured anyway: {numbers}", unmet.join(", "));
        }
    }
}

/// "N claims: a hold, b do not hold, c undecided at this noise, d not
/// measurable here".
pub fn count_line<'a>(claims: impl IntoIterator<Item = &'a ClaimResult>) -> String {
    let mut n = [0usize; 4];
    let mut total = 0;
    for c in claims {
        total += 1;
        n[match c.verdict {
            Verdict::Holds => 0,
            Verdict::DoesNotHold => 1,
            Verdict::Undecided => 2,
            Verdict::NotMeasurable => 3,
        }] += 1;
    }
    format!(
        "{total} claims: {} hold, {} do not hold, {} undecided at this noise, {} not measurable here",
        n[0], n[1], n[2], n[3]
    )
}

/// A plain-text table for the terminal; rows are (run label, claim), and
/// the run column shows only when some label is non-empty. Under each
/// claim: its estimate and interval against the bound, then its numbers.
pub fn table(rows: &[(&str, &ClaimResult)]) -> String {
    let width = |f: &dyn Fn(&(&str, &ClaimResult)) -> usize| rows.iter().map(f).max().unwrap_or(0);
    let wr = width(&|r| r.0.chars().count());
    let wf = width(&|r| r.1.figure.chars().count()).max(6);
    // "undecided at this noise"
    let wv = 23;
    let run_col = |label: &str| {
        if wr == 0 {
            String::new()
        } else {
            format!("{label:<wr$} ")
        }
    };
    let mut s = format!(
        "{:<wv$} {}{:<wf$} claim\n",
        "verdict",
        run_col("run"),
        "figure"
    );
    for (run, r) in rows {
        s.push_str(&format!(
            "{:<wv$} {}{:<wf$} {}\n",
            r.verdict.text(),
            run_col(run),
            r.figure,
            r.text
        ));
        if let Some(iv) = r.interval_text() {
            s.push_str(&format!("{:<wv$} {}{:<wf$}   {iv}\n", "", run_col(""), ""));
        }
        s.push_str(&format!(
            "{:<wv$} {}{:<wf$}   {}\n",
            "",
            run_col(""),
            "",
            r.numbers
        ));
    }
    s.push_str(&count_line(rows.iter().map(|r| r.1)));
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::super::extract::XKey;
    use super::super::stats::{self, Rep};
    use super::*;

    /// A point at x measured as job `job` (its repetitions' ids).
    fn point(x: f64, job: u32, v: &[f64]) -> SeriesPoint {
        SeriesPoint {
            x: XKey::Num(x),
            est: stats::estimate(v, None).unwrap(),
            reps: (0u32..)
                .zip(v)
                .map(|(r, &value)| Rep {
                    id: Some((job, r)),
                    value,
                    boot: None,
                })
                .collect(),
        }
    }

    fn series(key: &str, points: Vec<SeriesPoint>) -> Series {
        Series {
            key: key.into(),
            base: key.into(),
            label: key.into(),
            points,
        }
    }

    fn data(series: Vec<Series>) -> PanelData {
        PanelData::of(series)
    }

    fn figure(claims: &str) -> FigureDef {
        toml::from_str(&format!(
            r#"
id = "t"
title = "T"
family = "testbed"
[[panels]]
name = "p"
x = {{ column = "param_depth", label = "depth" }}
y = {{ metric = "lookups_per_s", kind = "summary", label = "throughput", unit = "ops/s" }}
{claims}"#
        ))
        .unwrap()
    }

    const RATIO: &str = r#"
[[claims]]
id = "r"
text = "hook at least 0.95 of read"
kind = "ratio_at"
numerator = "hook"
denominator = "read"
x = 1
min = 0.95
"#;

    /// hook/read at x=1, the two measured in separate jobs (unpaired).
    fn ratio(hook: &[f64]) -> ClaimResult {
        let d = data(vec![
            series("hook", vec![point(1.0, 0, hook)]),
            series("read", vec![point(1.0, 1, &[100.0; 5])]),
        ]);
        evaluate(&figure(RATIO), &[("p".into(), d)]).remove(0)
    }

    #[test]
    fn a_ratio_whose_interval_straddles_the_bound_is_undecided_with_a_repetitions_estimate() {
        let c = ratio(&[80.0, 90.0, 100.0, 110.0, 120.0]);
        assert_eq!(c.verdict, Verdict::Undecided, "{}", c.numbers);
        let (lo, hi) = (c.lo.unwrap(), c.hi.unwrap());
        assert!(lo < 0.95 && hi > 1.0, "{lo} {hi}");
        assert_eq!(c.estimate, Some(1.0));
        // Welch's half-width ~0.19 at 0.05 from the bound, on 5
        // repetitions: the t half-width t(m−1)/√m fits beside the bound at
        // about 40.
        let need = c.repetitions_needed.unwrap();
        assert!((30..=60).contains(&need), "{need}");
        assert!(
            c.numbers.ends_with(&format!(
                "; undecided: about {need} repetitions (or boots) would decide it (5 now)"
            )),
            "{}",
            c.numbers
        );
        let line = c.interval_text().unwrap();
        assert!(
            line.starts_with("hook/read at x=1: 1 [")
                && line.ends_with(
                    "] (95 %, Welch t on logarithms, measured independently, 5 units) against ≥ 0.95"
                ),
            "{line}"
        );
        assert_eq!((c.method, c.level), (Some(Method::WelchLog), Some(0.95)));
    }

    #[test]
    fn the_same_ratio_with_a_tight_spread_holds_and_a_clearly_low_one_does_not() {
        let c = ratio(&[99.0, 99.5, 100.0, 100.5, 101.0]);
        assert_eq!(c.verdict, Verdict::Holds, "{}", c.numbers);
        assert!(c.lo.unwrap() >= 0.95 && c.repetitions_needed.is_none());
        let c = ratio(&[80.0, 82.0, 84.0, 86.0, 88.0]);
        assert_eq!(c.verdict, Verdict::DoesNotHold, "{}", c.numbers);
        assert!(c.hi.unwrap() < 0.95, "{:?}", c.hi);
    }

    #[test]
    fn a_ratio_measured_repetition_by_repetition_is_paired() {
        // Each repetition's hook is read within ±0.5 %: the ratio is about
        // 1 whatever the spread between repetitions.
        let v = [60.0, 80.0, 100.0, 120.0, 140.0, 90.0];
        let jitter = [1.0, 1.005, 0.995, 1.002, 0.998, 1.001];
        let h: Vec<f64> = v.iter().zip(jitter).map(|(v, j)| v * j).collect();
        let paired = data(vec![
            series("hook", vec![point(1.0, 0, &h)]),
            series("read", vec![point(1.0, 0, &v)]),
        ]);
        let c = evaluate(&figure(RATIO), &[("p".into(), paired)]).remove(0);
        assert_eq!(c.verdict, Verdict::Holds, "{}", c.numbers);
        assert_eq!((c.lo, c.hi), (Some(0.995), Some(1.005)));
        assert!(c.numbers.contains("paired by repetition"), "{}", c.numbers);
        assert_eq!(c.method, Some(Method::OrderStatistic));
        assert!((c.level.unwrap() - 0.968_75).abs() < 1e-12);
        // Five: Student t on the logarithms of the ratios.
        let five = data(vec![
            series("hook", vec![point(1.0, 0, &h[..5])]),
            series("read", vec![point(1.0, 0, &v[..5])]),
        ]);
        let c = evaluate(&figure(RATIO), &[("p".into(), five)]).remove(0);
        assert_eq!(c.verdict, Verdict::Holds, "{}", c.numbers);
        assert_eq!(c.method, Some(Method::StudentTLog));
        // Exactly equal ratios measured no spread: nothing is claimed on
        // a zero-width interval, even from six.
        let same = data(vec![
            series("hook", vec![point(1.0, 0, &v)]),
            series("read", vec![point(1.0, 0, &v)]),
        ]);
        let c = evaluate(&figure(RATIO), &[("p".into(), same)]).remove(0);
        assert_eq!(c.verdict, Verdict::Undecided, "{}", c.numbers);
        assert!(
            c.numbers.contains("no spread was measured"),
            "{}",
            c.numbers
        );
        // The same values from two separate jobs: nothing to pair.
        let apart = data(vec![
            series("hook", vec![point(1.0, 0, &h)]),
            series("read", vec![point(1.0, 1, &v)]),
        ]);
        let c = evaluate(&figure(RATIO), &[("p".into(), apart)]).remove(0);
        assert_eq!(c.verdict, Verdict::Undecided, "{}", c.numbers);
    }

    /// Job `job`'s repetitions with each one's boot: `boots[r]`.
    fn booted(x: f64, job: u32, v: &[f64], boots: &[u32]) -> SeriesPoint {
        let mut p = point(x, job, v);
        for (rep, &b) in p.reps.iter_mut().zip(boots) {
            rep.boot = Some(b);
        }
        p
    }

    #[test]
    fn two_points_measured_in_the_same_boots_are_paired_by_boot() {
        // Six boots that drift by ±40 %; in each, hook reads 0.9 of read
        // (within ±0.3 %).
        let read = [60.0, 80.0, 100.0, 120.0, 140.0, 90.0];
        let within = [0.9, 0.903, 0.897, 0.901, 0.899, 0.9];
        let hook: Vec<f64> = read.iter().zip(within).map(|(v, w)| v * w).collect();
        let boots = [0, 1, 2, 3, 4, 5];
        let same = data(vec![
            series("hook", vec![booted(1.0, 0, &hook, &boots)]),
            series("read", vec![booted(1.0, 1, &read, &boots)]),
        ]);
        let c = evaluate(&figure(RATIO), &[("p".into(), same)]).remove(0);
        // The drift cancels: the boots' ratios span 0.897–0.903, below 0.95.
        assert_eq!(c.verdict, Verdict::DoesNotHold, "{}", c.numbers);
        assert!(c.numbers.contains("paired by boot"), "{}", c.numbers);
        let (lo, hi) = (c.lo.unwrap(), c.hi.unwrap());
        assert!(
            (lo - 0.897).abs() < 1e-9 && (hi - 0.903).abs() < 1e-9,
            "{lo} {hi}"
        );
        // The same values from other boots (another boot each): the drift
        // is in the interval and nothing is decided.
        let apart = data(vec![
            series("hook", vec![booted(1.0, 0, &hook, &boots)]),
            series("read", vec![booted(1.0, 1, &read, &[6, 7, 8, 9, 10, 11])]),
        ]);
        let c = evaluate(&figure(RATIO), &[("p".into(), apart)]).remove(0);
        assert_eq!(c.verdict, Verdict::Undecided, "{}", c.numbers);
        assert!(
            c.numbers.contains("measured independently"),
            "{}",
            c.numbers
        );
        // Several repetitions in one boot pair by their repetition.
        let one_boot = data(vec![
            series("hook", vec![booted(1.0, 0, &hook, &[0; 6])]),
            series("read", vec![booted(1.0, 1, &read, &[0; 6])]),
        ]);
        let c = evaluate(&figure(RATIO), &[("p".into(), one_boot)]).remove(0);
        assert_eq!(c.verdict, Verdict::DoesNotHold, "{}", c.numbers);
        assert!(c.numbers.contains("paired by boot"), "{}", c.numbers);
    }

    #[test]
    fn a_trend_over_points_of_the_same_boots_is_decided_through_their_drift() {
        // Each boot's level drifts ±40 %, and within every boot the series
        // falls 10 % per step: paired by boot, every step's interval is
        // below zero; resampled independently, the drift hides it.
        let level = [60.0, 80.0, 100.0, 120.0, 140.0];
        let at = |k: i32| -> Vec<f64> { level.iter().map(|v| v * 0.9f64.powi(k)).collect() };
        let boots = [0, 1, 2, 3, 4];
        let d = data(vec![series(
            "read",
            (0..4)
                .map(|k| booted(f64::from(k + 1), k as u32, &at(k), &boots))
                .collect(),
        )]);
        let c = evaluate(&figure(FALLS), &[("p".into(), d)]).remove(0);
        assert_eq!(c.verdict, Verdict::Holds, "{}", c.numbers);
        let apart = data(vec![series(
            "read",
            (0..4)
                .map(|k| {
                    let b: Vec<u32> = boots.iter().map(|b| b + 5 * k as u32).collect();
                    booted(f64::from(k + 1), k as u32, &at(k), &b)
                })
                .collect(),
        )]);
        let c = evaluate(&figure(FALLS), &[("p".into(), apart)]).remove(0);
        assert_eq!(c.verdict, Verdict::Undecided, "{}", c.numbers);
    }

    const FALLS: &str = r#"
[[claims]]
id = "m"
text = "read falls with depth"
kind = "monotonic"
direction = "decreasing"
series = ["read"]
"#;

    fn falls(third: &[f64]) -> ClaimResult {
        let d = data(vec![series(
            "read",
            vec![
                point(1.0, 0, &[99.0, 100.0, 101.0]),
                point(2.0, 1, &[49.0, 50.0, 51.0]),
                point(3.0, 2, third),
                point(4.0, 3, &[19.0, 20.0, 21.0]),
            ],
        )]);
        evaluate(&figure(FALLS), &[("p".into(), d)]).remove(0)
    }

    #[test]
    fn monotonic_with_one_noisy_step_is_undecided() {
        // Depth 3's repetitions straddle depth 2's value.
        let c = falls(&[25.0, 35.0, 45.0, 55.0, 65.0]);
        assert_eq!(c.verdict, Verdict::Undecided, "{}", c.numbers);
        assert!(
            c.lo.unwrap() < 0.0 && c.hi.unwrap() > 0.0,
            "{:?}",
            (c.lo, c.hi)
        );
        assert!(c.numbers.contains("from x=2 to x=3"), "{}", c.numbers);
        assert!(c.repetitions_needed.is_some(), "{}", c.numbers);
        // Tight there, it holds; clearly rising there, it does not.
        assert_eq!(falls(&[44.0, 45.0, 46.0]).verdict, Verdict::Holds);
        assert_eq!(falls(&[70.0, 71.0, 72.0]).verdict, Verdict::DoesNotHold);
    }

    #[test]
    fn one_repetition_with_no_interval_is_never_decided_on_its_value() {
        let d = data(vec![
            series("hook", vec![point(1.0, 0, &[50.0])]),
            series("read", vec![point(1.0, 1, &[100.0])]),
        ]);
        let c = evaluate(&figure(RATIO), &[("p".into(), d)]).remove(0);
        assert_eq!(c.verdict, Verdict::Undecided, "{}", c.numbers);
        assert!(
            c.numbers
                .contains("; undecided: one repetition: its own samples say"),
            "{}",
            c.numbers
        );
        assert_eq!((c.lo, c.hi, c.repetitions_needed), (None, None, None));
        // Even with an interval from its raw samples (an error bar), one
        // repetition decides nothing: a tight 0.5 is still undecided.
        let raw: Vec<f64> = (0..200).map(|i| 50.0 + f64::from(i % 3) * 0.01).collect();
        let one = |x: f64, job: u32, v: f64, raw: &[f64]| SeriesPoint {
            est: stats::estimate(&[v], Some((raw, super::super::def::Stat::Mean))).unwrap(),
            ..point(x, job, &[v])
        };
        let hook = one(1.0, 0, 50.0, &raw);
        assert_eq!(hook.est.ci, stats::CiMethod::Samples);
        assert!(hook.est.lo.is_some());
        let read_raw: Vec<f64> = raw.iter().map(|v| v * 2.0).collect();
        let d = data(vec![
            series("hook", vec![hook]),
            series("read", vec![one(1.0, 1, 100.0, &read_raw)]),
        ]);
        let c = evaluate(&figure(RATIO), &[("p".into(), d)]).remove(0);
        assert_eq!(c.verdict, Verdict::Undecided, "{}", c.numbers);
        assert_eq!((c.lo, c.hi), (None, None));
    }

    #[test]
    fn the_same_input_gives_the_same_result() {
        let claims = format!(
            "{RATIO}{FALLS}{}",
            r#"
[[claims]]
id = "l"
text = "linear"
kind = "linear_in_x"
series = ["read"]
r2_min = 0.9
[[claims]]
id = "x"
text = "max"
kind = "max_le"
value = 100
"#
        );
        let run = || {
            let d = data(vec![
                series(
                    "hook",
                    vec![
                        point(1.0, 0, &[80.0, 90.0, 100.0, 110.0]),
                        point(2.0, 2, &[70.0, 71.0, 75.0]),
                    ],
                ),
                series(
                    "read",
                    vec![
                        point(1.0, 1, &[95.0, 100.0, 102.0]),
                        point(2.0, 3, &[50.0, 60.0, 55.0]),
                        point(3.0, 4, &[30.0, 45.0, 20.0]),
                    ],
                ),
            ]);
            let r = evaluate(&figure(&claims), &[("p".into(), d)]);
            serde_json::to_string(&r).unwrap()
        };
        let a = run();
        assert_eq!(a, run());
        assert!(a.contains("\"lo\":") && a.contains("\"repetitions_needed\":"));
    }

    /// Mean latency (lower is better) of a hook, its baseline and rivals.
    const GAIN: &str = r#"
id = "t"
title = "T"
family = "testbed"
[[panels]]
name = "p"
x = { column = "param_depth", label = "depth" }
y = { metric = "lookup_latency", kind = "raw", label = "latency", unit = "µs", better = "lower" }
[[claims]]
id = "g"
text = "at least a third of the hook's gain remains over the best user-space engine"
kind = "gain_remaining"
hook = "hook"
baseline = "read"
rivals = ["uring", "poll", "passthru"]
at = "largest"
min = 0.33
needs_kvm = true
"#;

    fn gain(poll: &[f64], tcg: bool) -> ClaimResult {
        let jitter = |v: f64| [v - 1.0, v - 0.5, v, v + 0.5, v + 1.0];
        let d = data(vec![
            // The hook's repetitions in another order than the others':
            // the share then varies between repetitions, as measured ones do.
            series("hook", vec![point(6.0, 0, &[60.5, 59.5, 60.0, 61.0, 59.0])]),
            series("read", vec![point(6.0, 0, &jitter(100.0))]),
            series("uring", vec![point(6.0, 0, &jitter(98.0))]),
            series("poll", vec![point(6.0, 0, poll)]),
        ]);
        let def: FigureDef = toml::from_str(GAIN).unwrap();
        evaluate_under(&def, &[("p".into(), d)], tcg).remove(0)
    }

    #[test]
    fn gain_remaining_is_read_against_the_best_rival_measured() {
        // The best rival (poll, 80) leaves (80 − 60)/(100 − 60) = 0.5 of
        // the hook's gain over read.
        let c = gain(&[79.0, 79.5, 80.0, 80.5, 81.0], false);
        assert_eq!(c.verdict, Verdict::Holds, "{}", c.numbers);
        assert!((c.estimate.unwrap() - 0.5).abs() < 1e-9);
        let (lo, hi) = (c.lo.unwrap(), c.hi.unwrap());
        assert!(lo > 0.4 && hi < 0.6 && lo <= 0.5 && hi >= 0.5, "{lo}–{hi}");
        assert!(c.numbers.contains("best rival poll"), "{}", c.numbers);
        assert!(
            c.numbers.contains("[not measured here: passthru]"),
            "{}",
            c.numbers
        );
        assert_eq!(c.values.len(), 4);
        // A rival faster than the hook leaves none: (55 − 60)/40 < 0.
        let c = gain(&[54.0, 54.5, 55.0, 55.5, 56.0], false);
        assert_eq!(c.verdict, Verdict::DoesNotHold, "{}", c.numbers);
        assert!(c.estimate.unwrap() < 0.0);
        // A slow rival is not the best: uring (98) is, 0.95 remains.
        let c = gain(&[199.0, 199.5, 200.0, 200.5, 201.0], false);
        assert!((c.estimate.unwrap() - 0.95).abs() < 1e-9, "{}", c.numbers);
    }

    #[test]
    fn a_claim_that_needs_kvm_is_not_measurable_under_tcg_with_its_numbers() {
        let c = gain(&[79.0, 79.5, 80.0, 80.5, 81.0], true);
        assert_eq!(c.verdict, Verdict::NotMeasurable);
        assert!(
            c.numbers.starts_with("under TCG") && c.numbers.contains("best rival poll"),
            "{}",
            c.numbers
        );
        // The quantity is still reported.
        assert!((c.estimate.unwrap() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn gain_remaining_without_a_rival_at_the_x_is_not_measurable() {
        let d = data(vec![
            series("hook", vec![point(6.0, 0, &[60.0, 61.0])]),
            series("read", vec![point(6.0, 0, &[100.0, 101.0])]),
            series("uring", vec![point(1.0, 0, &[98.0, 99.0])]),
        ]);
        let def: FigureDef = toml::from_str(GAIN).unwrap();
        let c = evaluate(&def, &[("p".into(), d)]).remove(0);
        assert_eq!(c.verdict, Verdict::NotMeasurable);
        assert!(c.numbers.contains("none of the rivals"), "{}", c.numbers);
    }

    #[test]
    fn the_count_line_names_undecided_claims() {
        let c = ratio(&[80.0, 90.0, 100.0, 110.0, 120.0]);
        let t = table(&[("", &c)]);
        assert!(
            t.ends_with(
                "1 claims: 0 hold, 0 do not hold, 1 undecided at this noise, 0 not measurable here\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("undecided at this noise") && t.contains("against ≥ 0.95"),
            "{t}"
        );
    }
}
