//! Figure definitions: `experiments/figures/<id>.toml`, one per paper
//! figure (format reference: `experiments/figures/README.md`). Strict like
//! specs: unknown keys and missing per-kind fields are errors naming the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::FigureError;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FigureDef {
    pub id: String,
    pub title: String,
    pub family: String,
    #[serde(default)]
    pub description: String,
    /// Experiments whose runs feed this figure even when their spec does
    /// not list it (testbed figures such as `smoke-latency`).
    #[serde(default)]
    pub experiments: Vec<String>,
    pub source: Option<Source>,
    pub panels: Vec<Panel>,
    #[serde(default)]
    pub claims: Vec<ClaimDef>,
}

/// Where the paper's numbers come from.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub paper: String,
    #[serde(rename = "where")]
    pub location: String,
    pub hardware: String,
    #[serde(default)]
    pub note: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Panel {
    pub name: String,
    #[serde(default)]
    pub title: String,
    pub x: XAxis,
    pub y: YAxis,
    #[serde(default)]
    pub series: SeriesDef,
    /// Column → allowed value (or list of values). A column the run has
    /// neither as a sweep axis nor as a workload field does not apply.
    #[serde(default)]
    pub filter: BTreeMap<String, toml::Value>,
    pub ratio: Option<RatioDef>,
    /// Tag whose value prefixes summary keys (`read.lookups_per_s` is
    /// `lookups_per_s` with `tag_engine = read`).
    pub summary_tag: Option<String>,
    #[serde(default)]
    pub legend: LegendPos,
    #[serde(default)]
    pub reference: Vec<Reference>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct XAxis {
    pub column: String,
    pub label: String,
    #[serde(default)]
    pub unit: String,
    #[serde(default)]
    pub log: bool,
    /// Categorical axis in this order (values as text).
    #[serde(default)]
    pub categories: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetricKind {
    Raw,
    Summary,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Better {
    Higher,
    Lower,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct YAxis {
    pub metric: String,
    pub kind: MetricKind,
    /// Per repetition, over its raw samples.
    #[serde(default)]
    pub stat: Stat,
    /// Multiplies every value (ns → µs: 0.001).
    #[serde(default = "one")]
    pub scale: f64,
    pub label: String,
    #[serde(default)]
    pub unit: String,
    #[serde(default)]
    pub log: bool,
    /// Which direction is an improvement (for `testbed compare`).
    pub better: Option<Better>,
}

fn one() -> f64 {
    1.0
}

/// Statistic of one repetition's raw samples.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub enum Stat {
    #[default]
    Mean,
    Median,
    Min,
    Max,
    Sum,
    Count,
    /// Percentile 0..100.
    Percentile(f64),
}

impl TryFrom<String> for Stat {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Ok(match s.as_str() {
            "mean" => Stat::Mean,
            "median" => Stat::Median,
            "min" => Stat::Min,
            "max" => Stat::Max,
            "sum" => Stat::Sum,
            "count" => Stat::Count,
            p if p.starts_with('p') => {
                let v: f64 = p[1..].parse().map_err(|_| format!("bad percentile {p}"))?;
                if !(0.0..=100.0).contains(&v) {
                    return Err(format!("percentile {p} outside p0..p100"));
                }
                Stat::Percentile(v)
            }
            o => {
                return Err(format!(
                    "unknown stat {o}: mean, median, min, max, sum, count or pNN"
                ));
            }
        })
    }
}

impl From<Stat> for String {
    fn from(s: Stat) -> String {
        s.name()
    }
}

impl Stat {
    pub fn name(self) -> String {
        match self {
            Stat::Mean => "mean".into(),
            Stat::Median => "median".into(),
            Stat::Min => "min".into(),
            Stat::Max => "max".into(),
            Stat::Sum => "sum".into(),
            Stat::Count => "count".into(),
            Stat::Percentile(p) => format!("p{p}"),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SeriesDef {
    /// Columns whose values make one series each (joined with "/").
    #[serde(default)]
    pub columns: Vec<String>,
    /// Legend prefix, e.g. "threads".
    #[serde(default)]
    pub label: String,
    /// Series the paper has: those without data are listed as absent.
    #[serde(default)]
    pub expected: Vec<String>,
}

/// A derived quantity: y(numerator) / y(denominator) at the same x and
/// series, paired per repetition.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RatioDef {
    pub column: String,
    pub numerator: Vec<String>,
    pub denominator: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LegendPos {
    #[default]
    UpperRight,
    UpperLeft,
    LowerRight,
    LowerLeft,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefKind {
    /// Paper values at given x.
    #[default]
    Points,
    /// A bound or level across the plot (`value`).
    Hline,
    /// A range (`low`..`high`), optionally only over `x_from`..`x_to`.
    Band,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    #[serde(default)]
    pub kind: RefKind,
    pub label: String,
    /// Our series this corresponds to (same colour).
    pub series: Option<String>,
    #[serde(default)]
    pub x: Vec<toml::Value>,
    #[serde(default)]
    pub y: Vec<f64>,
    pub value: Option<f64>,
    pub low: Option<f64>,
    pub high: Option<f64>,
    pub x_from: Option<f64>,
    pub x_to: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimKind {
    MaxLe,
    MinGe,
    Monotonic,
    ValueAt,
    RatioAt,
    LinearInX,
}

impl ClaimKind {
    pub fn name(self) -> &'static str {
        match self {
            ClaimKind::MaxLe => "max_le",
            ClaimKind::MinGe => "min_ge",
            ClaimKind::Monotonic => "monotonic",
            ClaimKind::ValueAt => "value_at",
            ClaimKind::RatioAt => "ratio_at",
            ClaimKind::LinearInX => "linear_in_x",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    Increasing,
    Decreasing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum At {
    Smallest,
    Largest,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimDef {
    pub id: String,
    pub text: String,
    pub kind: ClaimKind,
    /// Panel name (default: the first panel).
    pub panel: Option<String>,
    /// Series keys the claim is about (default: every series with data).
    #[serde(default)]
    pub series: Vec<String>,
    pub x_min: Option<f64>,
    pub x_max: Option<f64>,
    pub value: Option<f64>,
    pub direction: Option<Direction>,
    /// monotonic: a step may go against the direction by this fraction.
    #[serde(default)]
    pub tolerance: f64,
    pub x: Option<toml::Value>,
    pub at: Option<At>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub numerator: Option<String>,
    pub denominator: Option<String>,
    pub r2_min: Option<f64>,
    pub min_points: Option<usize>,
}

impl FigureDef {
    pub fn panel(&self, name: Option<&str>) -> Option<&Panel> {
        match name {
            None => self.panels.first(),
            Some(n) => self.panels.iter().find(|p| p.name == n),
        }
    }

    fn validate(&self, stem: &str) -> Result<(), String> {
        if self.id != stem {
            return Err(format!(
                "id {:?} differs from the file name {stem:?}",
                self.id
            ));
        }
        if self.panels.is_empty() {
            return Err("no [[panels]]".into());
        }
        let mut names = BTreeSet::new();
        for p in &self.panels {
            if !names.insert(p.name.as_str()) {
                return Err(format!("panel name {:?} used twice", p.name));
            }
            p.validate().map_err(|e| format!("panel {}: {e}", p.name))?;
        }
        let mut ids = BTreeSet::new();
        for c in &self.claims {
            if !ids.insert(c.id.as_str()) {
                return Err(format!("claim id {:?} used twice", c.id));
            }
            if self.panel(c.panel.as_deref()).is_none() {
                return Err(format!("claim {}: no panel {:?}", c.id, c.panel));
            }
            c.validate().map_err(|e| format!("claim {}: {e}", c.id))?;
        }
        Ok(())
    }
}

fn is_column(c: &str) -> bool {
    c.starts_with("param_") || c.starts_with("tag_")
}

impl Panel {
    fn validate(&self) -> Result<(), String> {
        let cols = std::iter::once(&self.x.column)
            .chain(&self.series.columns)
            .chain(self.filter.keys())
            .chain(self.ratio.as_ref().map(|r| &r.column));
        for c in cols {
            if !is_column(c) {
                return Err(format!("column {c:?}: expected param_<name> or tag_<key>"));
            }
        }
        if !(self.y.scale.is_finite() && self.y.scale > 0.0) {
            return Err("y.scale must be a positive number".into());
        }
        if let Some(r) = &self.ratio
            && r.numerator.is_empty()
        {
            return Err("ratio.numerator is empty".into());
        }
        for r in &self.reference {
            let ok = match r.kind {
                RefKind::Points => !r.x.is_empty() && r.x.len() == r.y.len(),
                RefKind::Hline => r.value.is_some(),
                RefKind::Band => matches!((r.low, r.high), (Some(l), Some(h)) if l <= h),
            };
            if !ok {
                return Err(format!(
                    "reference {:?}: points need x and y of equal length, hline a value, band low <= high",
                    r.label
                ));
            }
        }
        Ok(())
    }
}

impl ClaimDef {
    fn validate(&self) -> Result<(), String> {
        let need = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(format!("kind {:?} needs {what}", self.kind))
            }
        };
        match self.kind {
            ClaimKind::MaxLe | ClaimKind::MinGe => need(self.value.is_some(), "value"),
            ClaimKind::Monotonic => need(self.direction.is_some(), "direction"),
            ClaimKind::ValueAt => need(
                (self.x.is_some() ^ self.at.is_some())
                    && (self.min.is_some() || self.max.is_some()),
                "one of x / at, and min and/or max",
            ),
            ClaimKind::RatioAt => need(
                (self.x.is_some() ^ self.at.is_some())
                    && (self.min.is_some() || self.max.is_some())
                    && self.numerator.is_some()
                    && self.denominator.is_some(),
                "numerator, denominator, one of x / at, and min and/or max",
            ),
            ClaimKind::LinearInX => need(self.r2_min.is_some(), "r2_min"),
        }
    }
}

/// The directory of figure definitions in this source tree.
pub fn default_dir() -> PathBuf {
    crate::paths::repo_root().join("experiments/figures")
}

/// Loads one definition file.
pub fn load(path: &Path) -> Result<FigureDef, FigureError> {
    let bad = |reason: String| FigureError::Definition {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let def: FigureDef = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    def.validate(&stem).map_err(bad)?;
    Ok(def)
}

/// Every definition in `dir`, by id.
pub fn load_all(dir: &Path) -> Result<BTreeMap<String, FigureDef>, FigureError> {
    let entries = std::fs::read_dir(dir).map_err(|e| FigureError::File {
        path: dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    let mut out = BTreeMap::new();
    for p in paths {
        let d = load(&p)?;
        out.insert(d.id.clone(), d);
    }
    Ok(out)
}

/// The figure ids a run feeds: those its spec lists, plus definitions
/// naming its experiment. Returns (defined, unknown ids).
pub fn figures_for(
    figure_ids: &[String],
    experiment: &str,
    defs: &BTreeMap<String, FigureDef>,
) -> (Vec<String>, Vec<String>) {
    let mut known = Vec::new();
    let mut unknown = Vec::new();
    for id in figure_ids {
        if defs.contains_key(id) {
            if !known.contains(id) {
                known.push(id.clone());
            }
        } else if !unknown.contains(id) {
            unknown.push(id.clone());
        }
    }
    for d in defs.values() {
        if d.experiments.iter().any(|e| e == experiment) && !known.contains(&d.id) {
            known.push(d.id.clone());
        }
    }
    (known, unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
id = "t"
title = "T"
family = "testbed"
[[panels]]
name = "p"
x = { column = "param_threads", label = "threads" }
y = { metric = "read_latency", kind = "raw", stat = "p99", label = "latency", unit = "µs", scale = 0.001 }
[[claims]]
id = "c"
text = "rises"
kind = "monotonic"
direction = "increasing"
"#;

    #[test]
    fn a_minimal_definition_loads() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("t.toml");
        std::fs::write(&p, MINIMAL).unwrap();
        let d = load(&p).unwrap();
        assert_eq!(d.panels[0].y.stat, Stat::Percentile(99.0));
        assert_eq!(d.claims[0].kind, ClaimKind::Monotonic);
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("other.toml");
        std::fs::write(&p, MINIMAL).unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(
            e.contains("other.toml") && e.contains("differs from the file name"),
            "{e}"
        );

        let p = t.path().join("t.toml");
        std::fs::write(&p, MINIMAL.replace("direction = \"increasing\"", "")).unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("needs direction"), "{e}");

        std::fs::write(&p, format!("{MINIMAL}\nbogus = 1\n")).unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn every_checked_in_definition_is_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/figures");
        let defs = load_all(&dir).unwrap();
        // One per paper figure in shared/papers.md, plus the smoke figure.
        for id in [
            "bpf-fig1",
            "bpf-table1",
            "bpf-fig3a",
            "bpf-fig3b",
            "bpf-fig3c",
            "bpf-fig3d",
            "xrp-table2",
            "xrp-table3",
            "xrp-fig6a",
            "xrp-fig6b",
            "asam-preproc",
            "asam-workflow",
            "asam-memory",
            "asam-cpu",
            "flight-bulk",
            "flight-query",
            "flight-datafusion",
            "flight-genomics",
            "smoke-latency",
        ] {
            assert!(defs.contains_key(id), "no definition for {id}");
        }
    }

    #[test]
    fn figures_for_joins_spec_ids_and_experiment_links() {
        let mut defs = BTreeMap::new();
        let mut d: FigureDef = toml::from_str(MINIMAL).unwrap();
        d.experiments = vec!["smoke".into()];
        defs.insert("t".to_string(), d);
        let (known, unknown) = figures_for(&["nope".into()], "smoke", &defs);
        assert_eq!(known, ["t"]);
        assert_eq!(unknown, ["nope"]);
    }
}
