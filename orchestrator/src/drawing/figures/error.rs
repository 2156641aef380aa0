//! The one error type of figures, claims, reports and compare.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FigureError {
    /// A file of a run directory (or a definitions directory) is missing,
    /// unreadable or damaged.
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("figure definition {path}: {reason}")]
    Definition { path: PathBuf, reason: String },
    #[error(transparent)]
    Samples(#[from] crate::recording::results::samples::SamplesError),
    #[error(transparent)]
    Manifest(#[from] crate::recording::results::manifest::ManifestError),
    #[error("figure {figure}: drawing failed: {reason}")]
    Draw { figure: String, reason: String },
    #[error(
        "{run}: a run of experiment {found}, the runs before it are of {expected}; a history is of one experiment's runs"
    )]
    MixedExperiments {
        run: PathBuf,
        found: String,
        expected: String,
    },
    /// A spec `reproduce` would run does not load.
    #[error(transparent)]
    Spec(#[from] Box<crate::planning::spec::SpecError>),
    #[error("{0}")]
    Other(String),
}

pub fn file_err(path: impl Into<PathBuf>, reason: impl std::fmt::Display) -> FigureError {
    FigureError::File {
        path: path.into(),
        reason: reason.to_string(),
    }
}
