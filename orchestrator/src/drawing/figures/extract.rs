//! From a panel's rows to its series: one value per repetition (the
//! panel's statistic over that repetition's samples, or its summary
//! number), then the median over repetitions with its interval; ratios are
//! paired per repetition before the median. Failed points become gaps.

use std::cmp::Ordering;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use super::data::{self, Cell, Failed, RunData};
use super::def::{MetricKind, Panel, Stat};
use super::error::FigureError;
use super::stats::{self, Estimate, Rep};
use super::unit::{self, UnitValues};

/// A position on the x axis: a number, or a category with its rank.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(untagged)]
pub enum XKey {
    Num(f64),
    Cat(usize, String),
}

impl XKey {
    pub fn label(&self) -> String {
        match self {
            XKey::Num(v) => fmt_num(*v),
            XKey::Cat(_, s) => s.clone(),
        }
    }
    /// Where it is drawn: the value, or the category's index.
    pub fn pos(&self) -> f64 {
        match self {
            XKey::Num(v) => *v,
            XKey::Cat(i, _) => *i as f64,
        }
    }
}

impl PartialEq for XKey {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for XKey {}
impl PartialOrd for XKey {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for XKey {
    fn cmp(&self, o: &Self) -> Ordering {
        match (self, o) {
            (XKey::Num(a), XKey::Num(b)) => a.total_cmp(b),
            (XKey::Cat(a, _), XKey::Cat(b, _)) => a.cmp(b),
            (XKey::Num(_), XKey::Cat(..)) => Ordering::Less,
            (XKey::Cat(..), XKey::Num(_)) => Ordering::Greater,
        }
    }
}

/// Short, stable number formatting for labels and tables.
pub fn fmt_num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let a = v.abs();
    let s = if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    };
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct SeriesPoint {
    pub x: XKey,
    #[serde(flatten)]
    pub est: Estimate,
    /// The values the median is over (scaled like it; for ratio panels the
    /// paired per-repetition ratios), what claims resample.
    pub reps: Vec<Rep>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Series {
    /// What claims call it: the series columns' values joined with "/",
    /// or for ratios the numerator (and values).
    pub key: String,
    /// The series columns' values alone (what failed points can match).
    pub base: String,
    pub label: String,
    pub points: Vec<SeriesPoint>,
}

#[derive(Debug, Clone)]
pub struct Gap {
    pub x: XKey,
    /// Series base it breaks, or every series.
    pub base: Option<String>,
}

#[derive(Debug, Clone)]
pub struct PanelData {
    pub series: Vec<Series>,
    /// Series the paper has (or ratio numerators) with no data in this run.
    pub absent: Vec<String>,
    pub failed: Vec<Failed>,
    pub gaps: Vec<Gap>,
    /// Labels of a categorical x axis, in order.
    pub categories: Option<Vec<String>>,
    pub notes: Vec<String>,
    /// Why the run could not measure the panel's metric, as its points
    /// said (summary `<metric>_unavailable`, e.g. no PMU under TCG).
    pub unavailable: Option<String>,
}

impl PanelData {
    /// Series and nothing else: no absences, failures, gaps or notes (a
    /// panel built in memory, as tests and simulations do).
    pub fn of(series: Vec<Series>) -> PanelData {
        PanelData {
            series,
            absent: Vec::new(),
            failed: Vec::new(),
            gaps: Vec::new(),
            categories: None,
            notes: Vec::new(),
            unavailable: None,
        }
    }

    pub fn series(&self, key: &str) -> Option<&Series> {
        self.series.iter().find(|s| s.key == key)
    }
}

/// Orders "2" before "10" and "a/2" before "a/10".
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let mut pa = a.split('/');
    let mut pb = b.split('/');
    loop {
        match (pa.next(), pb.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let o = match (x.parse::<f64>(), y.parse::<f64>()) {
                    (Ok(u), Ok(v)) => u.total_cmp(&v),
                    _ => x.cmp(y),
                };
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

struct Axis {
    categorical: bool,
    order: Vec<String>,
    /// Declared categories this run has no point at (a quick run's sizes):
    /// left off the axis and named in a note instead of drawn empty.
    unmeasured: Vec<String>,
}

impl Axis {
    fn new(panel: &Panel, cells: &[&Cell]) -> Axis {
        let categorical =
            !panel.x.categories.is_empty() || cells.iter().any(|c| c.as_f64().is_none());
        let seen: BTreeSet<String> = cells.iter().map(|c| c.text()).collect();
        let (mut order, unmeasured): (Vec<String>, Vec<String>) = panel
            .x
            .categories
            .iter()
            .cloned()
            .partition(|c| seen.contains(c));
        if categorical {
            let extra: Vec<String> = seen.into_iter().filter(|t| !order.contains(t)).collect();
            order.extend(extra);
        }
        Axis {
            categorical,
            order,
            unmeasured,
        }
    }
    fn key(&self, c: &Cell) -> Option<XKey> {
        if self.categorical {
            let t = c.text();
            let i = self.order.iter().position(|o| *o == t)?;
            Some(XKey::Cat(i, t))
        } else {
            c.as_f64().map(XKey::Num)
        }
    }
}

type Units = BTreeMap<(u32, u32), UnitValues>;
/// The boot of each (point, repetition), from the manifest.
type Boots = BTreeMap<(u32, u32), u32>;

fn series_label(panel: &Panel, base: &str) -> String {
    match (panel.series.label.is_empty(), base.is_empty()) {
        (_, true) => "this run".to_string(),
        (true, false) => base.to_string(),
        (false, false) => format!("{} {base}", panel.series.label),
    }
}

fn ratio_key(numerators: usize, num: &str, base: &str) -> String {
    match (numerators == 1, base.is_empty()) {
        (_, true) => num.to_string(),
        (true, false) => base.to_string(),
        (false, false) => format!("{num}/{base}"),
    }
}

/// One value per repetition unit: the statistic of its raw samples, or
/// its summary number.
fn unit_value(panel: &Panel, v: &UnitValues) -> Option<f64> {
    match panel.y.kind {
        MetricKind::Raw => v.stat(panel.y.stat),
        MetricKind::Summary => v.stat(super::def::Stat::Mean),
    }
}

pub fn panel_data(run: &RunData, panel: &Panel) -> Result<PanelData, FigureError> {
    let mut sel = data::select(run, panel)?;
    let failed = data::failed_points(run, panel);
    let cells: Vec<&Cell> = sel
        .groups
        .iter()
        .map(|r| &r.x)
        .chain(failed.iter().filter_map(|f| f.x.as_ref()))
        .collect();
    let axis = Axis::new(panel, &cells);
    let mut notes = std::mem::take(&mut sel.notes);
    if !axis.unmeasured.is_empty() {
        notes.push(format!(
            "{} not in this run: {}",
            panel.x.label,
            axis.unmeasured.join(", ")
        ));
    }

    let mut groups: BTreeMap<(String, Option<String>, XKey), Units> = BTreeMap::new();
    let mut ratio_values_seen: BTreeSet<String> = BTreeSet::new();
    let (mut sketched, mut largest) = (0usize, 0u64);
    for g in sel.groups {
        let Some(x) = axis.key(&g.x) else { continue };
        if panel.x.log && x.pos() <= 0.0 {
            continue;
        }
        if let Some(v) = &g.ratio {
            ratio_values_seen.insert(v.clone());
        }
        let units = groups
            .entry((g.series.join("/"), g.ratio.clone(), x))
            .or_default();
        match units.entry((g.point, g.rep)) {
            Entry::Vacant(e) => {
                e.insert(g.values);
            }
            Entry::Occupied(mut e) => e.get_mut().merge(g.values, &mut sel.budget),
        }
    }
    for u in groups.values().flat_map(|units| units.values()) {
        if u.is_sketched() {
            sketched += 1;
            largest = largest.max(u.count());
        }
    }
    if sketched > 0 {
        let how = match panel.y.stat {
            Stat::Median | Stat::Percentile(_) => format!(
                "their {} is from a DDSketch (within {} % of the exact value)",
                panel.y.stat.name(),
                unit::SKETCH_ALPHA * 100.0
            ),
            _ => format!("their {} is exact (running totals)", panel.y.stat.name()),
        };
        notes.push(format!(
            "{sketched} repetition(s) of up to {largest} samples exceed what a panel keeps exactly ({} per repetition, {} in all): {how}; a single repetition's interval is resampled from a uniform sample of {} of its samples",
            run.limits.per_unit,
            run.limits.per_panel,
            unit::RESERVOIR,
        ));
    }

    // The boot that ran each (point, repetition): repetitions spread over
    // boots are resampled boot first.
    let boots: Boots = run
        .manifest
        .points
        .iter()
        .map(|p| ((p.point, p.rep), p.boot))
        .collect();
    let mut series: BTreeMap<String, Series> = BTreeMap::new();
    let mut push =
        |key: String, base: &str, label: String, x: XKey, est: Estimate, reps: &[Rep]| {
            series
                .entry(key.clone())
                .or_insert_with(|| Series {
                    key,
                    base: base.to_string(),
                    label,
                    points: Vec::new(),
                })
                .points
                .push(SeriesPoint {
                    x,
                    est: est.scaled(panel.y.scale),
                    reps: reps
                        .iter()
                        .map(|r| Rep {
                            value: r.value * panel.y.scale,
                            ..*r
                        })
                        .collect(),
                });
        };
    let mut absent = Vec::new();
    match &panel.ratio {
        None => {
            for ((base, _, x), units) in &groups {
                let reps: Vec<Rep> = units
                    .iter()
                    .filter_map(|(k, v)| {
                        Some(Rep {
                            id: Some(*k),
                            value: unit_value(panel, v)?,
                            boot: boots.get(k).copied(),
                        })
                    })
                    .collect();
                let raw = (panel.y.kind == MetricKind::Raw && units.len() == 1)
                    .then(|| {
                        units
                            .values()
                            .next()
                            .map(|v| (v.for_bootstrap(), panel.y.stat))
                    })
                    .flatten();
                if let Some(est) = stats::estimate_reps(&reps, raw) {
                    push(
                        base.clone(),
                        base,
                        series_label(panel, base),
                        x.clone(),
                        est,
                        &reps,
                    );
                }
            }
        }
        Some(ratio) => {
            let bases: BTreeSet<(String, XKey)> = groups
                .keys()
                .map(|(b, _, x)| (b.clone(), x.clone()))
                .collect();
            for (base, x) in &bases {
                let Some(den) =
                    groups.get(&(base.clone(), Some(ratio.denominator.clone()), x.clone()))
                else {
                    continue;
                };
                for num in &ratio.numerator {
                    let Some(nu) = groups.get(&(base.clone(), Some(num.clone()), x.clone())) else {
                        continue;
                    };
                    let reps = paired_ratios(panel, nu, den, &boots);
                    if let Some(est) = stats::estimate_reps(&reps, None) {
                        let label = if base.is_empty() {
                            format!("{num}/{}", ratio.denominator)
                        } else {
                            format!("{num}/{}, {}", ratio.denominator, series_label(panel, base))
                        };
                        push(
                            ratio_key(ratio.numerator.len(), num, base),
                            base,
                            label,
                            x.clone(),
                            est,
                            &reps,
                        );
                    }
                }
            }
            for v in ratio.numerator.iter().chain([&ratio.denominator]) {
                if !ratio_values_seen.contains(v) {
                    absent.push(v.clone());
                }
            }
        }
    }
    let mut series: Vec<Series> = series.into_values().collect();
    for s in &mut series {
        s.points.sort_by(|a, b| a.x.cmp(&b.x));
    }
    let rank = |k: &str| {
        panel
            .series
            .expected
            .iter()
            .position(|e| e == k)
            .unwrap_or(usize::MAX)
    };
    series.sort_by(|a, b| {
        rank(&a.key)
            .cmp(&rank(&b.key))
            .then(natural_cmp(&a.key, &b.key))
    });
    // A missing ratio engine is the root cause; its series need no listing.
    let root_cause = !absent.is_empty();
    for e in panel.series.expected.iter().filter(|_| !root_cause) {
        if !series.iter().any(|s| &s.key == e) && !absent.contains(e) {
            absent.push(e.clone());
        }
    }

    let gaps = failed
        .iter()
        .filter_map(|f| {
            Some(Gap {
                x: axis.key(f.x.as_ref()?)?,
                base: f.series.as_ref().map(|s| s.join("/")),
            })
        })
        .collect();
    let unavailable = series
        .is_empty()
        .then(|| unavailable_reason(run, &panel.y.metric))
        .flatten();
    Ok(PanelData {
        series,
        absent,
        failed,
        gaps,
        categories: axis.categorical.then_some(axis.order),
        notes,
        unavailable,
    })
}

/// The distinct reasons the run's points gave for not measuring `metric`
/// (their summary text `<metric>_unavailable`), joined; None if none did.
pub fn unavailable_reason(run: &RunData, metric: &str) -> Option<String> {
    let key = format!("{metric}_unavailable");
    let mut why: Vec<&str> = run
        .manifest
        .points
        .iter()
        .filter_map(|p| p.summary.get(&key)?.as_str())
        .collect();
    why.sort_unstable();
    why.dedup();
    (!why.is_empty()).then(|| why.join("; "))
}

/// numerator / denominator per repetition: the same (point, rep) when the
/// engines ran interleaved in one job (keeping that id), else in order of
/// repetition (no id: the pair is not one repetition of anything).
fn paired_ratios(panel: &Panel, num: &Units, den: &Units, boots: &Boots) -> Vec<Rep> {
    let mut out = Vec::new();
    let mut leftover_num = Vec::new();
    let mut used = BTreeSet::new();
    for (k, v) in num {
        match den.get(k) {
            Some(d) => {
                used.insert(*k);
                out.extend(ratio(panel, v, d).map(|value| Rep {
                    id: Some(*k),
                    value,
                    boot: boots.get(k).copied(),
                }));
            }
            None => leftover_num.push(v),
        }
    }
    let leftover_den = den
        .iter()
        .filter(|(k, _)| !used.contains(*k))
        .map(|(_, v)| v);
    for (n, d) in leftover_num.into_iter().zip(leftover_den) {
        out.extend(ratio(panel, n, d).map(|value| Rep {
            id: None,
            value,
            boot: None,
        }));
    }
    out
}

fn ratio(panel: &Panel, n: &UnitValues, d: &UnitValues) -> Option<f64> {
    let (n, d) = (unit_value(panel, n)?, unit_value(panel, d)?);
    (d != 0.0 && n.is_finite() && d.is_finite()).then(|| n / d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order_of_series_keys() {
        let mut v = vec!["10", "2", "1", "b", "a"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["1", "2", "10", "a", "b"]);
    }

    #[test]
    fn numbers_format_short() {
        assert_eq!(fmt_num(3.0), "3");
        assert_eq!(fmt_num(1.25), "1.25");
        assert_eq!(fmt_num(1234.5678), "1234.6");
        assert_eq!(fmt_num(0.012345), "0.0123");
    }
}
