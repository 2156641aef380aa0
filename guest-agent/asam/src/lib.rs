//! ArrowSAM for the testbed: SAM records as Arrow record batches, one per
//! chromosome (plus one for unmapped reads), kept in a shared-memory store,
//! sorted and duplicate-marked per chromosome; and the benchmark that times
//! this against Picard, Sambamba and samtools on the same aligned reads.
//!
//! [`cli`] holds the `testbed asam ...` / `testbed-asam ...` commands.
//!
//! Layers, lowest first (a module uses its own layer and lower ones;
//! orchestrator/tests/layers.rs checks every `crate::` path against this):
//! - base: cigar, cpu, optical, peak, schema, store, tools, vcf
//! - records: load, sort, bam_in, sam_text, bam_out
//! - stages: markdup, bqsr, call, data, prepare, vcfscore
//! - measuring: metrics, gates, testdata
//! - runs: bench, workflow, cli_extra
//! - commands: cli

pub mod bam_in;
pub mod bam_out;
pub mod bench;
pub mod bqsr;
pub mod call;
pub mod cigar;
pub mod cli;
pub mod cli_extra;
pub mod cpu;
pub mod data;
pub mod gates;
pub mod load;
pub mod markdup;
pub mod metrics;
pub mod optical;
pub mod peak;
pub mod prepare;
pub mod sam_text;
pub mod schema;
pub mod sort;
pub mod store;
#[cfg(test)]
mod testdata;
pub mod tools;
pub mod vcf;
pub mod vcfscore;
pub mod workflow;

pub use cli::{AsamCommand, run_command};

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum AsamError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: line {line}: bad SAM record: {reason}")]
    Sam {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("arrow: {context}: {source}")]
    Arrow {
        context: String,
        source: arrow::error::ArrowError,
    },
    #[error("{tool} failed ({status}): {stderr}")]
    Tool {
        tool: String,
        status: String,
        stderr: String,
    },
    #[error("{tool} could not be started ({source}); is it installed? (apt-get install {package})")]
    Spawn {
        tool: String,
        package: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

impl AsamError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        AsamError::Io {
            path: path.into(),
            source,
        }
    }

    pub fn arrow(context: impl Into<String>, source: arrow::error::ArrowError) -> Self {
        AsamError::Arrow {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, AsamError>;
