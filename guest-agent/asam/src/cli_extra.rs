//! Subcommands for BQSR, calling and scoring by hand (`testbed-asam bqsr
//! | apply-bqsr | call | score`); each prints one JSON line. Wired into
//! [`crate::cli::AsamCommand`] as a flattened subcommand group.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::bqsr::{self, ApplyOptions, KnownSites, RecalTable, Reference};
use crate::call::{Caller, call_variants};
use crate::load::{SamTable, load_sam};
use crate::vcfscore::{ScoreOptions, score_files};

#[derive(Debug, clap::Subcommand)]
pub enum ExtraCommand {
    /// Build a BQSR recalibration table from a SAM (duplicates as flagged
    /// in it are skipped); optionally write the recalibrated SAM too.
    Bqsr {
        #[arg(long)]
        sam: PathBuf,
        #[arg(long)]
        reference: PathBuf,
        /// VCF (plain or bgzipped) of sites not to count as errors.
        #[arg(long)]
        known_sites: Option<PathBuf>,
        /// Where the GATK-like text report goes.
        #[arg(long)]
        table: PathBuf,
        #[arg(long)]
        out_sam: Option<PathBuf>,
        /// Keep the reported qualities in OQ:Z tags.
        #[arg(long)]
        keep_original: bool,
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// Apply a recalibration table (as written by `bqsr`) to a SAM.
    ApplyBqsr {
        #[arg(long)]
        sam: PathBuf,
        #[arg(long)]
        table: PathBuf,
        #[arg(long)]
        out_sam: PathBuf,
        #[arg(long)]
        keep_original: bool,
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// Call variants in a sorted BAM with bcftools or freebayes.
    Call {
        #[arg(long, default_value = "bcftools")]
        caller: String,
        #[arg(long)]
        reference: PathBuf,
        #[arg(long)]
        bam: PathBuf,
        /// Output .vcf.gz (indexed beside it).
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// Score calls against a truth VCF: precision, recall, F1.
    Score {
        #[arg(long)]
        calls: PathBuf,
        #[arg(long)]
        truth: PathBuf,
        /// FASTA for left-aligning indels (without it: trimming only).
        #[arg(long)]
        reference: Option<PathBuf>,
        /// BED of targets; only variants inside count.
        #[arg(long)]
        targets: Option<PathBuf>,
        /// A call must also have the truth's ALT dosage.
        #[arg(long)]
        genotype: bool,
        /// Count calls whose FILTER is not PASS or ".".
        #[arg(long)]
        include_filtered: bool,
    },
}

/// Runs one of these subcommands to completion.
pub fn run_extra(cmd: ExtraCommand) -> anyhow::Result<()> {
    let line = match cmd {
        ExtraCommand::Bqsr {
            sam,
            reference,
            known_sites,
            table,
            out_sam,
            keep_original,
            threads,
        } => {
            let t = load_sam(&sam).with_context(|| format!("load {}", sam.display()))?;
            let r = Reference::from_fasta(&reference, &t.reference_names)?;
            let known = match &known_sites {
                Some(p) => KnownSites::from_vcf(p, &t.reference_names)?,
                None => KnownSites::none(),
            };
            let (recal, stats) = bqsr::build_table_with_stats(&t.batches, &r, &known, threads)?;
            std::fs::write(&table, recal.to_report()?)
                .with_context(|| format!("write {}", table.display()))?;
            if let Some(out) = &out_sam {
                write_recalibrated(&t, &recal, out, keep_original, threads)?;
            }
            serde_json::json!({
                "stage": "bqsr",
                "table": table,
                "out_sam": out_sam,
                "known_site_intervals": known.intervals(),
                "reads_used": stats.reads_used,
                "reads_skipped": stats.reads_skipped,
                "bases_counted": stats.bases_counted,
                "bases_low_quality": stats.bases_low_quality,
                "bases_masked": stats.bases_masked,
                "bases_clipped": stats.bases_clipped,
                "bases_not_acgt": stats.bases_not_acgt,
            })
        }
        ExtraCommand::ApplyBqsr {
            sam,
            table,
            out_sam,
            keep_original,
            threads,
        } => {
            let t = load_sam(&sam).with_context(|| format!("load {}", sam.display()))?;
            let text = std::fs::read_to_string(&table)
                .with_context(|| format!("read {}", table.display()))?;
            let recal = RecalTable::parse_report(&text)?;
            write_recalibrated(&t, &recal, &out_sam, keep_original, threads)?;
            serde_json::json!({"stage": "apply-bqsr", "out_sam": out_sam, "records": t.records()})
        }
        ExtraCommand::Call {
            caller,
            reference,
            bam,
            out,
            threads,
        } => {
            let c: Caller = caller.parse()?;
            let started = std::time::Instant::now();
            call_variants(c, &reference, &bam, &out, threads)
                .with_context(|| format!("{} on {}", c.name(), bam.display()))?;
            serde_json::json!({
                "stage": "call",
                "caller": c.name(),
                "vcf": out,
                "seconds": started.elapsed().as_secs_f64(),
            })
        }
        ExtraCommand::Score {
            calls,
            truth,
            reference,
            targets,
            genotype,
            include_filtered,
        } => {
            let o = ScoreOptions {
                genotype_aware: genotype,
                include_filtered,
            };
            let s = score_files(&calls, &truth, reference.as_deref(), targets.as_deref(), &o)?;
            serde_json::to_value(&s)?
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

fn write_recalibrated(
    t: &SamTable,
    recal: &RecalTable,
    out: &Path,
    keep_original: bool,
    threads: usize,
) -> anyhow::Result<()> {
    let batches = bqsr::apply_with(&t.batches, recal, ApplyOptions { keep_original }, threads)?;
    let f = std::fs::File::create(out).with_context(|| format!("create {}", out.display()))?;
    let mut w = std::io::BufWriter::new(f);
    crate::sam_text::write_sam(&mut w, &t.header_text, &t.reference_names, &batches)?;
    w.flush()?;
    Ok(())
}
