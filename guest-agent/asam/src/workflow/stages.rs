//! `testbed-asam stage ...`: the ArrowSAM placement's stage processes.
//! Each maps what the previous one left in the shared store (see
//! [`super::shared`]) and writes its own output there:
//!
//! | stage        | reads                              | writes                       |
//! |--------------|------------------------------------|------------------------------|
//! | `load`       | SAM on stdin (bwa's stream)        | aligned.arrow, header, refs  |
//! | `sort`       | aligned.arrow                      | sorted.arrow                 |
//! | `markdup`    | sorted.arrow, header               | flags.arrow (the new FLAGs)  |
//! | `bqsr`       | sorted + flags, reference, sites   | recal.json, recal.txt        |
//! | `apply-bqsr` | sorted + flags, recal.json         | quals.arrow (the new QUALs)  |
//! | `write-bam`  | sorted + flags (+ quals)           | a BAM file                   |
//! | `write-sam`  | aligned.arrow                      | a SAM file (for the checks)  |
//! | `fused`      | aligned.arrow, header (reference, sites) | sorted, flags (recal.txt) |
//!
//! `fused` is the arrowsam-fused placement's one stage between align and
//! apply-bqsr (the elPrep idea): sort, duplicate marking and, with
//! `--reference`, BQSR's counting in one process over the batches in its
//! memory, nothing stored or mapped between them. It leaves the same files
//! sort, markdup and bqsr leave, so the stages after it are the staged
//! pipeline's own, and the workflow checks its files equal theirs.
//!
//! Markdup and apply-bqsr store only the column they change: the next
//! process puts it beside the mapped sorted columns without copying them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int32Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::shared::SharedDir;
use crate::schema::{schema, with_flags};
use crate::{AsamError, Result};

pub const ALIGNED: &str = "aligned.arrow";
pub const SORTED: &str = "sorted.arrow";
pub const FLAGS: &str = "flags.arrow";
pub const HEADER: &str = "header.sam";
pub const REFERENCES: &str = "references.txt";

#[derive(Debug, clap::Subcommand)]
pub enum StageCommand {
    /// SAM on stdin → aligned.arrow (the writer process after bwa).
    Load {
        #[arg(long)]
        store: PathBuf,
    },
    /// aligned.arrow → sorted.arrow.
    Sort {
        #[arg(long)]
        store: PathBuf,
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// sorted.arrow → flags.arrow.
    Markdup {
        #[arg(long)]
        store: PathBuf,
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// sorted + flags → a BAM file.
    WriteBam {
        #[arg(long)]
        store: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// Use the qualities apply-bqsr wrote.
        #[arg(long)]
        recalibrated: bool,
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// aligned.arrow → SAM (the same records, for the reference tools).
    WriteSam {
        #[arg(long)]
        store: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
    /// aligned.arrow → sorted.arrow, flags.arrow (and recal.txt with
    /// --reference) in one process, in memory.
    Fused {
        #[arg(long)]
        store: PathBuf,
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Also count BQSR's table (the reference, bwa's FASTA).
        #[arg(long)]
        reference: Option<PathBuf>,
        #[arg(long, requires = "reference")]
        known_sites: Option<PathBuf>,
    },
    #[command(flatten)]
    Bqsr(super::bqsr_stage::BqsrCommand),
}

pub fn run(cmd: StageCommand) -> Result<()> {
    match cmd {
        StageCommand::Load { store } => load(&SharedDir::open(&store)?),
        StageCommand::Sort { store, threads } => sort(&SharedDir::open(&store)?, threads),
        StageCommand::Markdup { store, threads } => markdup(&SharedDir::open(&store)?, threads),
        StageCommand::WriteBam {
            store,
            out,
            recalibrated,
            threads,
        } => write_bam(&SharedDir::open(&store)?, &out, recalibrated, threads),
        StageCommand::WriteSam { store, out } => write_sam(&SharedDir::open(&store)?, &out),
        StageCommand::Fused {
            store,
            threads,
            reference,
            known_sites,
        } => fused(
            &SharedDir::open(&store)?,
            threads,
            reference.as_deref(),
            known_sites.as_deref(),
        ),
        StageCommand::Bqsr(c) => super::bqsr_stage::run(c),
    }
}

fn load(s: &SharedDir) -> Result<()> {
    // Read through the descriptor: a minimal guest has no /dev/stdin link.
    let stdin = std::io::BufReader::with_capacity(1 << 20, std::io::stdin().lock());
    let t = crate::load::read_sam(
        stdin,
        Path::new("<stdin: the aligner's SAM>"),
        &crate::schema::BatchLimits::default(),
    )?;
    s.put(ALIGNED, &schema(), &t.batches)?;
    s.put_text(HEADER, &t.header_text)?;
    s.put_text(REFERENCES, &t.reference_names.join("\n"))
}

pub fn references(s: &SharedDir) -> Result<Vec<String>> {
    Ok(s.get_text(REFERENCES)?
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

fn sort(s: &SharedDir, threads: usize) -> Result<()> {
    let aligned = s.get(ALIGNED)?;
    let sorted = crate::sort::sort_batches(&aligned, threads)?;
    s.put(SORTED, &schema(), &sorted)
}

fn flags_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "flags",
        DataType::Int32,
        false,
    )]))
}

fn markdup(s: &SharedDir, threads: usize) -> Result<()> {
    let sorted = s.get(SORTED)?;
    let marked = crate::markdup::mark_duplicates(&sorted, &s.get_text(HEADER)?, threads)?;
    s.put(FLAGS, &flags_schema(), &flags_batches(&marked.flags)?)
}

/// markdup's FLAG columns as the batches of flags.arrow.
fn flags_batches(flags: &[Int32Array]) -> Result<Vec<RecordBatch>> {
    let schema = flags_schema();
    flags
        .iter()
        .map(|f| {
            RecordBatch::try_new(schema.clone(), vec![Arc::new(f.clone()) as ArrayRef])
                .map_err(|e| AsamError::arrow("flags batch", e))
        })
        .collect()
}

/// Sort, markdup and (with a reference) BQSR's table in one process: each
/// step reads the previous one's batches from memory. The store gets what
/// the staged pipeline's stages put there, at the end.
fn fused(
    s: &SharedDir,
    threads: usize,
    reference: Option<&Path>,
    known_sites: Option<&Path>,
) -> Result<()> {
    let sorted = crate::sort::sort_batches(&s.get(ALIGNED)?, threads)?;
    let marked = crate::markdup::mark_duplicates(&sorted, &s.get_text(HEADER)?, threads)?;
    if let Some(reference) = reference {
        let with_flags: Vec<RecordBatch> = sorted
            .iter()
            .zip(&marked.flags)
            .map(|(b, f)| with_flags(b, f.clone()))
            .collect::<Result<_>>()?;
        super::bqsr_stage::put_table(s, &with_flags, reference, known_sites, threads)?;
    }
    s.put(SORTED, &schema(), &sorted)?;
    s.put(FLAGS, &flags_schema(), &flags_batches(&marked.flags)?)
}

/// The sorted records with markdup's flags in place (no copy of the
/// other columns).
pub fn marked(s: &SharedDir) -> Result<Vec<RecordBatch>> {
    let sorted = s.get(SORTED)?;
    let flags = s.get(FLAGS)?;
    if sorted.len() != flags.len() {
        return Err(AsamError::Invalid(format!(
            "{}: {} batches of flags for {} sorted batches",
            s.path(FLAGS).display(),
            flags.len(),
            sorted.len()
        )));
    }
    sorted
        .iter()
        .zip(&flags)
        .map(|(b, f)| {
            let col = f
                .column(0)
                .as_any()
                .downcast_ref::<Int32Array>()
                .filter(|c| c.len() == b.num_rows())
                .ok_or_else(|| {
                    AsamError::Invalid(format!(
                        "{}: not one int32 flag per record",
                        s.path(FLAGS).display()
                    ))
                })?;
            with_flags(b, col.clone())
        })
        .collect()
}

fn write_bam(s: &SharedDir, out: &Path, recalibrated: bool, threads: usize) -> Result<()> {
    let batches = if recalibrated {
        super::bqsr_stage::recalibrated(s)?
    } else {
        marked(s)?
    };
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    crate::bam_out::write_bam(
        out,
        &s.get_text(HEADER)?,
        &references(s)?,
        &batches,
        threads,
        &command_line,
    )?;
    Ok(())
}

fn write_sam(s: &SharedDir, out: &Path) -> Result<()> {
    let file = std::fs::File::create_new(out).map_err(|e| AsamError::io(out, e))?;
    let mut w = std::io::BufWriter::new(file);
    crate::sam_text::write_sam(
        &mut w,
        &s.get_text(HEADER)?,
        &references(s)?,
        &s.get(ALIGNED)?,
    )?;
    std::io::Write::flush(&mut w).map_err(|e| AsamError::io(out, e))
}
