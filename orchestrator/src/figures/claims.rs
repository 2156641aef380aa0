//! The paper's qualitative claims, checked against a run's series: each
//! holds, does not hold, or is not measurable here, with the numbers it
//! was decided on. Decisions use the medians; intervals are shown beside.

use serde::Serialize;

use super::def::{
    At, Bounds, ClaimCheck, ClaimDef, ClaimKind, Direction, FigureDef, Place, RatioAt,
};
use super::extract::{PanelData, Series, SeriesPoint, fmt_num};
use super::stats;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Holds,
    DoesNotHold,
    NotMeasurable,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::DoesNotHold => "does not hold",
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
}

fn used(s: &Series, p: &SeriesPoint) -> Used {
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
fn show(p: &SeriesPoint, unit: &str) -> String {
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

struct Ctx<'a> {
    claim: &'a ClaimDef,
    data: &'a PanelData,
    unit: &'a str,
}

/// Per-series outcome: None = not measurable for this series.
struct Part {
    series: String,
    ok: Option<bool>,
    words: String,
    values: Vec<Used>,
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
    fn at<'s>(
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
    fn missing_place(&self, place: &Place, series: &[&Series]) -> String {
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

    fn part(&self, s: &Series) -> Part {
        let pts = self.points(s);
        let mut part = Part {
            series: s.key.clone(),
            ok: None,
            words: String::new(),
            values: pts.iter().map(|p| used(s, p)).collect(),
        };
        let name = if s.key.is_empty() {
            String::new()
        } else {
            format!("{}: ", s.label)
        };
        match &self.claim.check {
            ClaimCheck::MaxLe { value: limit } | ClaimCheck::MinGe { value: limit } => {
                let limit = *limit;
                let max = matches!(self.claim.check, ClaimCheck::MaxLe { .. });
                let pick = pts.iter().copied().reduce(|a, b| {
                    let better = if max {
                        b.est.value > a.est.value
                    } else {
                        b.est.value < a.est.value
                    };
                    if better { b } else { a }
                });
                let Some(p) = pick else {
                    part.words = format!("{name}no points");
                    return part;
                };
                part.ok = Some(if max {
                    p.est.value <= limit
                } else {
                    p.est.value >= limit
                });
                part.words = format!(
                    "{name}{} {} at x={}",
                    if max { "max" } else { "min" },
                    show(p, self.unit),
                    p.x.label()
                );
                part.values = vec![used(s, p)];
            }
            ClaimCheck::Monotonic {
                direction,
                tolerance,
                min_points,
            } => {
                let need = (*min_points).max(2);
                if pts.len() < need {
                    part.words = format!("{name}{} point(s), {need} needed", pts.len());
                    return part;
                }
                let up = *direction == Direction::Increasing;
                let mut broken = None;
                for w in pts.windows(2) {
                    let (a, b) = (w[0].est.value, w[1].est.value);
                    let slack = tolerance * a.abs();
                    let ok = if up { b >= a - slack } else { b <= a + slack };
                    if !ok && broken.is_none() {
                        broken = Some((w[0], w[1]));
                    }
                }
                part.ok = Some(broken.is_none());
                let trace: Vec<String> = pts
                    .iter()
                    .map(|p| format!("{}→{}", p.x.label(), fmt_num(p.est.value)))
                    .collect();
                part.words = format!("{name}{}", trace.join(", "));
                if let Some((a, b)) = broken {
                    part.words.push_str(&format!(
                        " ({} → {} from x={} to x={})",
                        fmt_num(a.est.value),
                        fmt_num(b.est.value),
                        a.x.label(),
                        b.x.label()
                    ));
                }
            }
            ClaimCheck::ValueAt(v) => {
                let Some(p) = self.at(&v.place, s, None) else {
                    part.words = format!("{name}{}", self.missing_place(&v.place, &[s]));
                    return part;
                };
                part.ok = Some(in_bounds(v.bounds, p.est.value));
                part.words = format!("{name}{} at x={}", show(p, self.unit), p.x.label());
                part.values = vec![used(s, p)];
            }
            ClaimCheck::LinearInX { r2_min, min_points } => {
                let need = (*min_points).max(2);
                let xs: Vec<f64> = pts.iter().map(|p| p.x.pos()).collect();
                let ys: Vec<f64> = pts.iter().map(|p| p.est.value).collect();
                if pts.len() < need {
                    part.words = format!("{name}{} point(s), {need} needed for a fit", pts.len());
                    return part;
                }
                let Some(fit) = stats::linear_fit(&xs, &ys) else {
                    part.words = format!("{name}no fit (one distinct x)");
                    return part;
                };
                part.ok = Some(fit.r2 >= *r2_min);
                part.words = format!(
                    "{name}R² = {:.4} over {} points (slope {})",
                    fit.r2,
                    pts.len(),
                    fmt_num(fit.slope)
                );
            }
            // Decided on two series together, by `ratio_claim`.
            ClaimCheck::RatioAt(_) => {}
        }
        part
    }
}

fn in_bounds(b: Bounds, v: f64) -> bool {
    b.min().is_none_or(|m| v >= m) && b.max().is_none_or(|m| v <= m)
}

fn bounds_text(b: Bounds) -> String {
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

fn ratio_claim(ctx: &Ctx<'_>, r: &RatioAt) -> (Verdict, String, Vec<Used>) {
    let (num_key, den_key) = (&r.numerator, &r.denominator);
    let (Some(num), Some(den)) = (ctx.data.series(num_key), ctx.data.series(den_key)) else {
        let why: Vec<String> = [num_key, den_key]
            .into_iter()
            .filter(|k| ctx.data.series(k).is_none())
            .map(|k| missing(ctx.data, k))
            .collect();
        return (Verdict::NotMeasurable, why.join("; "), Vec::new());
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
        return (Verdict::NotMeasurable, why, Vec::new());
    };
    if n.x != d.x || d.est.value == 0.0 {
        return (
            Verdict::NotMeasurable,
            format!("{num_key} and {den_key} have no comparable point"),
            Vec::new(),
        );
    }
    let ratio = n.est.value / d.est.value;
    let ok = in_bounds(r.bounds, ratio);
    let words = format!(
        "{num_key}/{den_key} at x={} = {} / {} = {} (claim: {})",
        n.x.label(),
        show(n, ctx.unit),
        show(d, ctx.unit),
        fmt_num(ratio),
        bounds_text(r.bounds)
    );
    (
        if ok {
            Verdict::Holds
        } else {
            Verdict::DoesNotHold
        },
        words,
        vec![used(num, n), used(den, d)],
    )
}

fn decide(ctx: &Ctx<'_>) -> (Verdict, String, Vec<Used>) {
    if let ClaimCheck::RatioAt(r) = &ctx.claim.check {
        return ratio_claim(ctx, r);
    }
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
        return (Verdict::NotMeasurable, why, Vec::new());
    }
    let parts: Vec<Part> = chosen.iter().map(|s| ctx.part(s)).collect();
    let mut words: Vec<String> = parts.iter().map(|p| p.words.clone()).collect();
    words.extend(missing_words.iter().cloned());
    let limit = match &ctx.claim.check {
        ClaimCheck::MaxLe { value } => format!(" (claim: ≤ {})", fmt_num(*value)),
        ClaimCheck::MinGe { value } => format!(" (claim: ≥ {})", fmt_num(*value)),
        ClaimCheck::ValueAt(v) => format!(" (claim: {})", bounds_text(v.bounds)),
        ClaimCheck::LinearInX { r2_min, .. } => format!(" (claim: R² ≥ {})", fmt_num(*r2_min)),
        ClaimCheck::Monotonic {
            direction,
            tolerance,
            ..
        } => format!(
            " (claim: {}{})",
            match direction {
                Direction::Increasing => "increasing",
                Direction::Decreasing => "decreasing",
            },
            if *tolerance > 0.0 {
                format!(", tolerance {} %", fmt_num(tolerance * 100.0))
            } else {
                String::new()
            }
        ),
        ClaimCheck::RatioAt(_) => String::new(),
    };
    let values = parts.iter().flat_map(|p| p.values.clone()).collect();
    let measured: Vec<bool> = parts.iter().filter_map(|p| p.ok).collect();
    let all_measured = measured.len() == parts.len() && missing_words.is_empty();
    let verdict = if measured.is_empty() || (explicit && !all_measured) {
        Verdict::NotMeasurable
    } else if measured.iter().all(|ok| *ok) {
        Verdict::Holds
    } else {
        Verdict::DoesNotHold
    };
    let unmeasured: Vec<&str> = parts
        .iter()
        .filter(|p| p.ok.is_none())
        .map(|p| p.series.as_str())
        .collect();
    let mut text = words.join("; ");
    if !explicit && !unmeasured.is_empty() && verdict != Verdict::NotMeasurable {
        text.push_str(&format!(" [not used: {}]", unmeasured.join(", ")));
    }
    (verdict, format!("{text}{limit}"), values)
}

/// Every claim of a figure against its panels' data. A claim whose
/// `requires` do not all hold is not measurable, whatever its numbers say.
pub fn evaluate(def: &FigureDef, panels: &[(String, PanelData)]) -> Vec<ClaimResult> {
    let mut results: Vec<ClaimResult> = Vec::new();
    for c in &def.claims {
        let panel = def.panel(c.panel.as_deref());
        let name = panel.map(|p| p.name.clone()).unwrap_or_default();
        let data = panels.iter().find(|(n, _)| *n == name).map(|(_, d)| d);
        let (mut verdict, mut numbers, values) = match (panel, data) {
            (Some(p), Some(data)) => decide(&Ctx {
                claim: c,
                data,
                unit: &p.y.unit,
            }),
            _ => (Verdict::NotMeasurable, "no such panel".into(), Vec::new()),
        };
        let unmet: Vec<String> = c
            .requires
            .iter()
            .filter_map(|id| {
                let r = results.iter().find(|r| &r.id == id);
                match r {
                    Some(r) if r.verdict == Verdict::Holds => None,
                    Some(r) => Some(format!("{id} {}", r.verdict.text())),
                    None => Some(format!("{id} was not checked")),
                }
            })
            .collect();
        if !unmet.is_empty() {
            verdict = Verdict::NotMeasurable;
            numbers = format!("rests on {}; measured anyway: {numbers}", unmet.join(", "));
        }
        results.push(ClaimResult {
            figure: def.id.clone(),
            id: c.id.clone(),
            text: c.text.clone(),
            kind: c.check.kind(),
            panel: name,
            verdict,
            numbers,
            values,
        });
    }
    results
}

/// A plain-text table for the terminal; rows are (run label, claim), and
/// the run column shows only when some label is non-empty.
pub fn table(rows: &[(&str, &ClaimResult)]) -> String {
    let width = |f: &dyn Fn(&(&str, &ClaimResult)) -> usize| rows.iter().map(f).max().unwrap_or(0);
    let wr = width(&|r| r.0.chars().count());
    let wf = width(&|r| r.1.figure.chars().count()).max(6);
    let run_col = |label: &str| {
        if wr == 0 {
            String::new()
        } else {
            format!("{label:<wr$} ")
        }
    };
    let mut s = format!(
        "{:<19} {}{:<wf$} claim\n",
        "verdict",
        run_col("run"),
        "figure"
    );
    for (run, r) in rows {
        s.push_str(&format!(
            "{:<19} {}{:<wf$} {}\n",
            r.verdict.text(),
            run_col(run),
            r.figure,
            r.text
        ));
        s.push_str(&format!(
            "{:<19} {}{:<wf$}   {}\n",
            "",
            run_col(""),
            "",
            r.numbers
        ));
    }
    let count = |v: Verdict| rows.iter().filter(|r| r.1.verdict == v).count();
    s.push_str(&format!(
        "{} claims: {} hold, {} do not hold, {} not measurable here\n",
        rows.len(),
        count(Verdict::Holds),
        count(Verdict::DoesNotHold),
        count(Verdict::NotMeasurable)
    ));
    s
}
