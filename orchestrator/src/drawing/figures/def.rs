//! Figure definitions: `experiments/figures/<id>.toml`, one per paper
//! figure (format reference: `experiments/figures/README.md`). Strict like
//! specs: unknown keys, keys of another claim kind and missing per-kind
//! fields are errors naming the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use super::claim_kinds::{
    At, Bounds, ClaimCheck, ClaimKind, Direction, GainRemaining, LinearInX, MaxLe, MinGe,
    Monotonic, Place, RatioAt, ValueAt,
};
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

/// What is wrong inside a figure definition; `FigureError::Definition`
/// names the file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DefError {
    #[error("bad percentile {0}")]
    BadPercentile(String),
    #[error("percentile {0} outside p0..p100")]
    PercentileRange(String),
    #[error("unknown stat {0}: mean, median, min, max, sum, count or pNN")]
    UnknownStat(String),
    #[error("{0}: `x` and `at` both given, use one")]
    XAndAt(&'static str),
    #[error("{0}: missing field `x` or `at`")]
    NoPlace(&'static str),
    #[error("{0}: missing field `min` and/or `max`")]
    NoBounds(&'static str),
    #[error("gain_remaining: `rivals` names no series")]
    NoRivals,
    #[error("claim {claim:?} ({kind}): {why}")]
    ClaimOnPanel {
        claim: String,
        kind: &'static str,
        why: String,
    },
    #[error("id {id:?} differs from the file name {stem:?}")]
    IdNotFileName { id: String, stem: String },
    #[error("no [[panels]]")]
    NoPanels,
    #[error("panel name {0:?} used twice")]
    PanelTwice(String),
    #[error("panel {panel}: {why}")]
    Panel { panel: String, why: Box<DefError> },
    #[error("claim id {0:?} used twice")]
    ClaimTwice(String),
    #[error("claim {claim}: no panel {panel:?}")]
    NoSuchPanel {
        claim: String,
        panel: Option<String>,
    },
    #[error("claim {claim}: requires {required:?}, which is not a claim listed before it")]
    RequiresLater { claim: String, required: String },
    #[error("column {0:?}: expected param_<name> or tag_<key>")]
    NotAColumn(String),
    #[error("y.scale must be a positive number")]
    BadScale,
    #[error("ratio.numerator is empty")]
    EmptyNumerator,
    #[error(
        "reference {0:?}: points need x and y of equal length, hline a value, band low <= high"
    )]
    BadReference(String),
}

impl TryFrom<String> for Stat {
    type Error = DefError;
    fn try_from(s: String) -> Result<Self, DefError> {
        Ok(match s.as_str() {
            "mean" => Stat::Mean,
            "median" => Stat::Median,
            "min" => Stat::Min,
            "max" => Stat::Max,
            "sum" => Stat::Sum,
            "count" => Stat::Count,
            p if p.starts_with('p') => {
                let v: f64 = p[1..]
                    .parse()
                    .map_err(|_| DefError::BadPercentile(p.into()))?;
                if !(0.0..=100.0).contains(&v) {
                    return Err(DefError::PercentileRange(p.into()));
                }
                Stat::Percentile(v)
            }
            o => return Err(DefError::UnknownStat(o.into())),
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

/// One `[[claims]]` entry: the keys every kind has, and the check.
///
/// No `deny_unknown_fields` here: serde does not combine it with
/// `flatten`. Keys this struct does not know go to `check`, whose
/// variants refuse any key that is not theirs (tests:
/// `unknown_and_other_kinds_keys_are_refused`).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ClaimDef {
    pub id: String,
    pub text: String,
    /// Panel name (default: the first panel).
    pub panel: Option<String>,
    /// Series keys the claim is about (default: every series with data).
    /// `ratio_at` names its two series itself and ignores this.
    #[serde(default)]
    pub series: Vec<String>,
    pub x_min: Option<f64>,
    pub x_max: Option<f64>,
    /// Ids of earlier claims of this figure that this one's reading rests
    /// on (a start-up bound, say): unless each holds, this one is not
    /// measurable here, its numbers still shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// The claim is about timing that only hardware virtualisation shows
    /// (polled completions, a poller's CPU): under TCG, where polling is
    /// emulation-bound, it is not measurable here, its numbers still shown.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_kvm: bool,
    /// `kind` and exactly the fields of that kind.
    #[serde(flatten)]
    pub check: ClaimCheck,
}

impl FigureDef {
    pub fn panel(&self, name: Option<&str>) -> Option<&Panel> {
        match name {
            None => self.panels.first(),
            Some(n) => self.panels.iter().find(|p| p.name == n),
        }
    }

    fn validate(&self, stem: &str) -> Result<(), DefError> {
        if self.id != stem {
            return Err(DefError::IdNotFileName {
                id: self.id.clone(),
                stem: stem.into(),
            });
        }
        if self.panels.is_empty() {
            return Err(DefError::NoPanels);
        }
        let mut names = BTreeSet::new();
        for p in &self.panels {
            if !names.insert(p.name.as_str()) {
                return Err(DefError::PanelTwice(p.name.clone()));
            }
            p.validate().map_err(|why| DefError::Panel {
                panel: p.name.clone(),
                why: Box::new(why),
            })?;
        }
        let mut ids = BTreeSet::new();
        for c in &self.claims {
            if !ids.insert(c.id.as_str()) {
                return Err(DefError::ClaimTwice(c.id.clone()));
            }
            if self.panel(c.panel.as_deref()).is_none() {
                return Err(DefError::NoSuchPanel {
                    claim: c.id.clone(),
                    panel: c.panel.clone(),
                });
            }
            if let Some(p) = self.panel(c.panel.as_deref())
                && let Err(why) = c.check.validate(p)
            {
                return Err(DefError::ClaimOnPanel {
                    claim: c.id.clone(),
                    kind: c.check.kind().name(),
                    why,
                });
            }
            if let Some(r) = c
                .requires
                .iter()
                .find(|r| !ids.contains(r.as_str()) || *r == &c.id)
            {
                return Err(DefError::RequiresLater {
                    claim: c.id.clone(),
                    required: r.clone(),
                });
            }
        }
        Ok(())
    }
}

fn is_column(c: &str) -> bool {
    c.starts_with("param_") || c.starts_with("tag_")
}

impl Panel {
    fn validate(&self) -> Result<(), DefError> {
        let cols = std::iter::once(&self.x.column)
            .chain(&self.series.columns)
            .chain(self.filter.keys())
            .chain(self.ratio.as_ref().map(|r| &r.column));
        for c in cols {
            if !is_column(c) {
                return Err(DefError::NotAColumn(c.clone()));
            }
        }
        if !(self.y.scale.is_finite() && self.y.scale > 0.0) {
            return Err(DefError::BadScale);
        }
        if let Some(r) = &self.ratio
            && r.numerator.is_empty()
        {
            return Err(DefError::EmptyNumerator);
        }
        for r in &self.reference {
            let ok = match r.kind {
                RefKind::Points => !r.x.is_empty() && r.x.len() == r.y.len(),
                RefKind::Hline => r.value.is_some(),
                RefKind::Band => matches!((r.low, r.high), (Some(l), Some(h)) if l <= h),
            };
            if !ok {
                return Err(DefError::BadReference(r.label.clone()));
            }
        }
        Ok(())
    }
}

// Moved to the host layer (crate::host::paths, as the plan needs it); this
// re-export keeps main.rs as it is. To be removed once it uses paths.
pub use crate::host::paths::figure_defs as default_dir;

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
    def.validate(&stem).map_err(|e| bad(e.to_string()))?;
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
        assert_eq!(d.claims[0].check.kind(), ClaimKind::Monotonic);
        assert!(matches!(
            d.claims[0].check,
            ClaimCheck::Monotonic(Monotonic {
                direction: Direction::Increasing,
                tolerance: 0.0,
                min_points: 2
            })
        ));
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
        assert!(
            e.contains("t.toml") && e.contains("missing field `direction`"),
            "{e}"
        );

        std::fs::write(&p, format!("{MINIMAL}\nbogus = 1\n")).unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("t.toml") && e.contains("bogus"), "{e}");
    }

    /// `MINIMAL` with its claim replaced by `claim` (the lines after
    /// `[[claims]]`), loaded as `t.toml`.
    fn load_claim(claim: &str) -> Result<FigureDef, String> {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("t.toml");
        let head = &MINIMAL[..MINIMAL.find("[[claims]]").unwrap()];
        std::fs::write(
            &p,
            format!("{head}[[claims]]\nid = \"c\"\ntext = \"c\"\n{claim}\n"),
        )
        .unwrap();
        load(&p).map_err(|e| e.to_string())
    }

    #[test]
    fn gain_remaining_needs_rivals_bounds_and_a_panel_that_says_what_is_better() {
        let claim = "kind = \"gain_remaining\"\nhook = \"h\"\nbaseline = \"b\"\nrivals = [\"r\"]\nat = \"largest\"\nmin = 0.5";
        // MINIMAL's panel has no `better`: the best rival is undefined.
        let e = load_claim(claim).unwrap_err();
        assert!(e.contains("must say `better"), "{e}");
        let e = load_claim(&claim.replace("[\"r\"]", "[]")).unwrap_err();
        assert!(e.contains("`rivals` names no series"), "{e}");
        let e = load_claim(&claim.replace("\nmin = 0.5", "")).unwrap_err();
        assert!(e.contains("missing field `min` and/or `max`"), "{e}");
        let e = load_claim(&format!("{claim}\nnumerator = \"a\"")).unwrap_err();
        assert!(e.contains("unknown field `numerator`"), "{e}");
    }

    #[test]
    fn a_claim_requires_only_claims_listed_before_it() {
        let e = load_claim("kind = \"max_le\"\nvalue = 1\nrequires = [\"later\"]").unwrap_err();
        assert!(e.contains("claim c: requires \"later\""), "{e}");
        let e = load_claim("kind = \"max_le\"\nvalue = 1\nrequires = [\"c\"]").unwrap_err();
        assert!(e.contains("requires \"c\""), "{e}");
    }

    #[test]
    fn each_claim_kind_loads_with_exactly_its_fields() {
        let check = |claim: &str| load_claim(claim).unwrap().claims.remove(0).check;
        assert!(matches!(
            check("kind = \"max_le\"\nvalue = 200"),
            ClaimCheck::MaxLe(MaxLe { value: 200.0 })
        ));
        assert!(matches!(
            check("kind = \"min_ge\"\nvalue = 0.5"),
            ClaimCheck::MinGe(MinGe { value: 0.5 })
        ));
        assert!(matches!(
            check(
                "kind = \"monotonic\"\ndirection = \"decreasing\"\ntolerance = 0.05\nmin_points = 4"
            ),
            ClaimCheck::Monotonic(Monotonic {
                direction: Direction::Decreasing,
                tolerance: 0.05,
                min_points: 4
            })
        ));
        let ClaimCheck::ValueAt(v) = check("kind = \"value_at\"\nx = 2\nmin = 50\nmax = 70") else {
            panic!("not value_at")
        };
        assert_eq!(v.place, Place::X(toml::Value::Integer(2)));
        assert_eq!(v.bounds, Bounds::Both(50.0, 70.0));
        let ClaimCheck::RatioAt(r) = check(
            "kind = \"ratio_at\"\nnumerator = \"a\"\ndenominator = \"b\"\nat = \"largest\"\nmax = 0.75",
        ) else {
            panic!("not ratio_at")
        };
        assert_eq!((r.numerator.as_str(), r.denominator.as_str()), ("a", "b"));
        assert_eq!(r.place, Place::At(At::Largest));
        assert_eq!(r.bounds, Bounds::Max(0.75));
        assert!(matches!(
            check("kind = \"linear_in_x\"\nr2_min = 0.95"),
            ClaimCheck::LinearInX(LinearInX {
                r2_min: 0.95,
                min_points: 3
            })
        ));
        // The keys every kind has stay on the claim.
        let d = load_claim(
            "panel = \"p\"\nseries = [\"a\"]\nx_min = 1\nx_max = 6\nkind = \"min_ge\"\nvalue = 1",
        )
        .unwrap();
        let c = &d.claims[0];
        assert_eq!(
            (c.panel.as_deref(), c.series.as_slice(), c.x_min, c.x_max),
            (Some("p"), &["a".to_string()][..], Some(1.0), Some(6.0))
        );
    }

    /// `ClaimDef` flattens its check and so cannot deny unknown fields
    /// itself: the check's variants do, for keys of no kind and for keys
    /// of another kind alike.
    #[test]
    fn unknown_and_other_kinds_keys_are_refused() {
        for (claim, field) in [
            (
                "kind = \"monotonic\"\ndirection = \"increasing\"\nbogus = 1",
                "bogus",
            ),
            // A misspelt common key is unknown to the check too.
            (
                "kind = \"monotonic\"\ndirection = \"increasing\"\nserie = [\"a\"]",
                "serie",
            ),
            (
                "kind = \"monotonic\"\ndirection = \"increasing\"\nvalue = 3",
                "value",
            ),
            (
                "kind = \"monotonic\"\ndirection = \"increasing\"\nr2_min = 0.9",
                "r2_min",
            ),
            (
                "kind = \"max_le\"\nvalue = 1\ndirection = \"increasing\"",
                "direction",
            ),
            ("kind = \"max_le\"\nvalue = 1\ntolerance = 0.1", "tolerance"),
            ("kind = \"min_ge\"\nvalue = 1\nmin_points = 3", "min_points"),
            (
                "kind = \"value_at\"\nx = 1\nmin = 1\nnumerator = \"a\"",
                "numerator",
            ),
            ("kind = \"value_at\"\nx = 1\nmin = 1\nvalue = 2", "value"),
            (
                "kind = \"ratio_at\"\nnumerator = \"a\"\ndenominator = \"b\"\nx = 1\nmin = 1\nr2_min = 0.9",
                "r2_min",
            ),
            (
                "kind = \"linear_in_x\"\nr2_min = 0.9\ntolerance = 0.1",
                "tolerance",
            ),
            (
                "kind = \"linear_in_x\"\nr2_min = 0.9\nat = \"largest\"",
                "at",
            ),
        ] {
            let e = load_claim(claim).unwrap_err();
            assert!(
                e.contains("t.toml") && e.contains(&format!("unknown field `{field}`")),
                "{claim}: {e}"
            );
        }
    }

    #[test]
    fn missing_and_conflicting_claim_fields_are_refused() {
        for (claim, want) in [
            ("direction = \"increasing\"", "missing field `kind`"),
            ("kind = \"rises\"", "unknown variant `rises`"),
            ("kind = \"max_le\"", "missing field `value`"),
            ("kind = \"linear_in_x\"", "missing field `r2_min`"),
            ("kind = \"value_at\"\nmin = 1", "missing field `x` or `at`"),
            (
                "kind = \"value_at\"\nx = 1\nat = \"largest\"\nmin = 1",
                "`x` and `at` both given",
            ),
            (
                "kind = \"value_at\"\nx = 1",
                "missing field `min` and/or `max`",
            ),
            (
                "kind = \"ratio_at\"\nnumerator = \"a\"\nx = 1\nmin = 1",
                "missing field `denominator`",
            ),
            (
                "kind = \"ratio_at\"\nnumerator = \"a\"\ndenominator = \"b\"\nmin = 1",
                "missing field `x` or `at`",
            ),
            (
                "kind = \"ratio_at\"\nnumerator = \"a\"\ndenominator = \"b\"\nat = \"largest\"",
                "missing field `min` and/or `max`",
            ),
        ] {
            let e = load_claim(claim).unwrap_err();
            assert!(e.contains("t.toml") && e.contains(want), "{claim}: {e}");
        }
    }

    #[test]
    fn claims_serialize_back_to_the_same_keys() {
        let d = load_claim(
            "kind = \"ratio_at\"\nnumerator = \"a\"\ndenominator = \"b\"\nx = \"4k\"\nmin = 1\nmax = 2\nseries = []",
        )
        .unwrap();
        let text = toml::to_string(&d).unwrap();
        let back: FigureDef = toml::from_str(&text).unwrap();
        let ClaimCheck::RatioAt(r) = &back.claims[0].check else {
            panic!("{text}")
        };
        assert_eq!(r.place, Place::X(toml::Value::String("4k".into())));
        assert_eq!(r.bounds, Bounds::Both(1.0, 2.0));
        assert!(!text.contains("\nat ="), "{text}");
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
            "flight-query-types",
            "flight-ingest",
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
