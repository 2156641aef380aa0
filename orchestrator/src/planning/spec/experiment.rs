//! `[experiment]`: the name, repetitions and boots, the executor, the
//! host-noise limit; their checks.

use super::*;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Paper figure ids (see papers.md) this spec produces data for.
    #[serde(default)]
    pub figures: Vec<String>,
    #[serde(default)]
    pub executor: ExecutorKind,
    #[serde(default = "one")]
    pub repetitions: u32,
    /// Boots the repetitions are spread over (qemu executor, one boot per
    /// run): repetitions r·boots/repetitions.. share boot r, so the
    /// variation between boots is in the repetitions' spread, and the
    /// estimates resample boots first, then repetitions within them.
    #[serde(default = "one")]
    pub boots: u32,
    #[serde(default)]
    pub seed: u64,
    /// A point is noisy when other processes took more than this % of the
    /// host's CPU while it ran (noise.rs).
    #[serde(
        default = "default_noisy_above",
        skip_serializing_if = "is_default_noisy_above"
    )]
    pub noisy_above_pct: f64,
}

fn default_noisy_above() -> f64 {
    crate::machine::noise::DEFAULT_NOISY_ABOVE_PCT
}

fn is_default_noisy_above(v: &f64) -> bool {
    *v == crate::machine::noise::DEFAULT_NOISY_ABOVE_PCT
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecutorKind {
    #[default]
    Qemu,
    Host,
    Slurm,
}

/// A word a command line or spec gave that is none of the choices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {given:?}: use {choices}")]
pub struct UnknownChoice {
    pub what: &'static str,
    pub given: String,
    pub choices: &'static str,
}

impl std::str::FromStr for ExecutorKind {
    type Err = UnknownChoice;
    fn from_str(s: &str) -> Result<Self, UnknownChoice> {
        match s {
            "qemu" => Ok(ExecutorKind::Qemu),
            "host" => Ok(ExecutorKind::Host),
            "slurm" => Ok(ExecutorKind::Slurm),
            _ => Err(UnknownChoice {
                what: "executor",
                given: s.into(),
                choices: "qemu, host or slurm",
            }),
        }
    }
}

/// `boots` spreads repetitions over fresh boots of one run: it needs
/// repetitions to spread and a VM booted once per run.
pub(super) fn check_boots(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let e = &loaded.spec.experiment;
    let at = |m: String| loaded.error_at("experiment", Some("boots"), m);
    if e.boots == 0 {
        return Err(at("must be at least 1".into()));
    }
    if e.boots == 1 {
        return Ok(());
    }
    if e.boots > e.repetitions {
        return Err(at(format!(
            "{} boots for {} repetitions: at most one boot per repetition",
            e.boots, e.repetitions
        )));
    }
    if e.executor != ExecutorKind::Qemu {
        return Err(at(format!(
            "spreading repetitions over boots needs the qemu executor (this spec runs on {:?})",
            e.executor
        )));
    }
    if loaded.spec.vm.boot == BootPolicy::PerPoint {
        return Err(at(
            "[vm] boot = \"per-point\" already boots for every point: drop boots".into(),
        ));
    }
    Ok(())
}

/// Longest experiment name: it is one path component of every run
/// directory, well under any filesystem's limit.
pub const MAX_NAME_LEN: usize = 64;

/// The experiment name becomes `results/<name>/`, so it must be one plain
/// path component that stays inside `results/`: no `/`, not `.` or `..`,
/// not hidden, no control characters.
pub fn check_experiment_name(name: &str) -> Result<(), BadName> {
    if name.trim().is_empty() {
        return Err(BadName::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(BadName::TooLong(name.len()));
    }
    if name == "." || name == ".." {
        return Err(BadName::Outside(name.into()));
    }
    if name.starts_with('.') {
        return Err(BadName::Hidden(name.into()));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Err(BadName::Characters(name.into()));
    }
    Ok(())
}

/// Why an experiment name cannot name its results directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadName {
    #[error("must not be empty")]
    Empty,
    #[error("is {0} bytes long: at most {MAX_NAME_LEN} (it names the results directory)")]
    TooLong(usize),
    #[error("{0:?} would put the run directory outside results/: use a plain name")]
    Outside(String),
    #[error("{0:?} starts with '.': the results directory would be hidden")]
    Hidden(String),
    #[error("{0:?}: use only letters, digits, '-', '_' and '.' (it names the results directory)")]
    Characters(String),
}

/// `[experiment]`: a usable name, repetitions and boots, a noise limit that
/// is a share of the CPU.
pub(super) fn check_experiment(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let spec = &loaded.spec;
    if let Err(why) = check_experiment_name(&spec.experiment.name) {
        return Err(loaded.error_at("experiment", Some("name"), why.to_string()));
    }
    if spec.experiment.repetitions == 0 {
        return Err(loaded.error_at("experiment", Some("repetitions"), "must be at least 1"));
    }
    check_boots(loaded)?;
    let limit = spec.experiment.noisy_above_pct;
    if !(limit > 0.0 && limit <= 100.0) {
        return Err(loaded.error_at(
            "experiment",
            Some("noisy_above_pct"),
            format!("{limit} is not a share of the host's CPU: between 0 and 100 (%)"),
        ));
    }
    Ok(())
}
