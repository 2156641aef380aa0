//! The ArrowSAM placement's BQSR stages (`testbed-asam stage bqsr`,
//! `stage apply-bqsr`): the recalibration table from the duplicate-marked
//! records, then the recalibrated qualities as a column of their own.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::shared::SharedDir;
use super::stages::{marked, references};
use crate::bqsr::{KnownSites, RecalTable, Reference};
use crate::schema::QUALS;
use crate::{AsamError, Result};

/// The table as text (GATK-like report); apply-bqsr reads it back.
pub const TABLE: &str = "recal.txt";
pub const QUALS_FILE: &str = "quals.arrow";

#[derive(Debug, clap::Subcommand)]
pub enum BqsrCommand {
    /// sorted + flags, reference, known sites → recal.txt.
    Bqsr {
        #[arg(long)]
        store: PathBuf,
        #[arg(long)]
        reference: PathBuf,
        #[arg(long)]
        known_sites: Option<PathBuf>,
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// sorted + flags, recal.txt → quals.arrow.
    ApplyBqsr {
        #[arg(long)]
        store: PathBuf,
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
}

pub fn run(cmd: BqsrCommand) -> Result<()> {
    match cmd {
        BqsrCommand::Bqsr {
            store,
            reference,
            known_sites,
            threads,
        } => table(
            &SharedDir::open(&store)?,
            &reference,
            known_sites.as_deref(),
            threads,
        ),
        BqsrCommand::ApplyBqsr { store, threads } => apply(&SharedDir::open(&store)?, threads),
    }
}

fn table(s: &SharedDir, reference: &Path, known: Option<&Path>, threads: usize) -> Result<()> {
    put_table(s, &marked(s)?, reference, known, threads)
}

/// BQSR's table of `marked` (sorted, duplicate-marked records) into the
/// store: the bqsr stage's work, and the fused stage's last step.
pub fn put_table(
    s: &SharedDir,
    marked: &[RecordBatch],
    reference: &Path,
    known: Option<&Path>,
    threads: usize,
) -> Result<()> {
    let names = references(s)?;
    let reference = Reference::from_fasta(reference, &names)?;
    let known = match known {
        Some(k) => KnownSites::from_vcf(k, &names)?,
        None => KnownSites::none(),
    };
    let t = crate::bqsr::build_table(marked, &reference, &known, threads)?;
    s.put_text(TABLE, &t.to_report()?)
}

fn quals_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "quals",
        DataType::Utf8,
        false,
    )]))
}

fn apply(s: &SharedDir, threads: usize) -> Result<()> {
    let t = RecalTable::parse_report(&s.get_text(TABLE)?)?;
    let recalibrated = crate::bqsr::apply(&marked(s)?, &t, threads)?;
    let schema = quals_schema();
    let batches = recalibrated
        .iter()
        .map(|b| {
            RecordBatch::try_new(schema.clone(), vec![b.column(QUALS).clone()])
                .map_err(|e| AsamError::arrow("quals batch", e))
        })
        .collect::<Result<Vec<_>>>()?;
    s.put(QUALS_FILE, &schema, &batches)
}

/// The marked records with apply-bqsr's qualities in place.
pub fn recalibrated(s: &SharedDir) -> Result<Vec<RecordBatch>> {
    let marked = marked(s)?;
    let quals = s.get(QUALS_FILE)?;
    if quals.len() != marked.len() {
        return Err(AsamError::Invalid(format!(
            "{}: {} batches of qualities for {} records batches",
            s.path(QUALS_FILE).display(),
            quals.len(),
            marked.len()
        )));
    }
    marked
        .iter()
        .zip(&quals)
        .map(|(b, q)| {
            let col = q
                .column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .filter(|c| c.len() == b.num_rows())
                .ok_or_else(|| {
                    AsamError::Invalid(format!(
                        "{}: not one quality string per record",
                        s.path(QUALS_FILE).display()
                    ))
                })?;
            let mut columns = b.columns().to_vec();
            columns[QUALS] = Arc::new(col.clone()) as ArrayRef;
            RecordBatch::try_new(b.schema(), columns)
                .map_err(|e| AsamError::arrow("replace qualities", e))
        })
        .collect()
}
