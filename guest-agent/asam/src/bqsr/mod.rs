//! Base quality score recalibration on ArrowSAM batches, as GATK4's
//! BaseRecalibrator and ApplyBQSR do it (GATK is not in Debian, so the
//! workflow's BQSR stage exists only for ArrowSAM).
//!
//! Counting ([`build_table`]) runs one worker per chromosome batch over
//! sorted, duplicate-marked batches and merges the per-batch tables:
//! - reads skipped: unmapped, secondary, supplementary, duplicate, QC-fail,
//!   MAPQ 0 or 255, no SEQ/QUAL. GATK4 keeps supplementary alignments; we
//!   drop them so a chimeric read's bases are not counted twice.
//! - bases skipped: soft-clipped, reported quality < 6, not ACGT (in the
//!   read, or in the reference: GATK counts a mismatch against a reference
//!   N), and any base on a known site (the VCF record's whole REF span).
//! - inserted bases count as observations without a substitution error and
//!   deletions add nothing: GATK4's default mismatch-only model
//!   (`--compute-indel-bqsr-tables` off; no BI/BD tags are written).
//! - covariates: read group ID (GATK prefers PU when set), reported
//!   quality, machine cycle, dinucleotide context; see [`covariates`].
//!
//! Simplifications against GATK4, all documented where they happen:
//! GATK hard-clips soft clips (and adaptor overhang past the mate's start)
//! before taking the cycle and context while counting, but not when
//! applying; we take both from the whole SEQ in both passes, so a base's
//! covariates are the same in the two. No BAQ (GATK4's default is off too).
//! No quantization of the output qualities (GATK4's default).
//!
//! The empirical-quality model and the hierarchical estimate are in
//! [`table`] and [`apply`]; they follow the GATK article "Base Quality
//! Score Recalibration (BQSR)" (Technical Documentation, "How BQSR
//! works") and GATK4's `RecalDatum` / `BQSRReadTransformer`.

pub mod apply;
pub mod count;
pub mod covariates;
pub mod known_sites;
pub mod reference;
pub mod table;

use arrow::array::RecordBatch;

pub use apply::{ApplyOptions, Recalibrator, apply_with};
pub use count::CountStats;
pub use known_sites::KnownSites;
pub use reference::Reference;
pub use table::{Datum, RecalTable};

use std::sync::atomic::{AtomicUsize, Ordering};

use count::Counts;

use crate::{AsamError, Result};

/// Counts every batch (`threads` workers, one batch each at a time) into
/// one recalibration table. `reference` and `known_sites` are indexed by
/// the batches' rID (SAM header order).
pub fn build_table(
    batches: &[RecordBatch],
    reference: &Reference,
    known_sites: &KnownSites,
    threads: usize,
) -> Result<RecalTable> {
    build_table_with_stats(batches, reference, known_sites, threads).map(|(t, _)| t)
}

/// As [`build_table`], with the counts of what was used and skipped.
/// Each worker adds the batches it takes into its own dense counts, merged
/// at the end: memory stays per worker, not per batch, however finely the
/// chromosomes are split; integer sums make the result thread-independent.
pub fn build_table_with_stats(
    batches: &[RecordBatch],
    reference: &Reference,
    known_sites: &KnownSites,
    threads: usize,
) -> Result<(RecalTable, CountStats)> {
    let next = AtomicUsize::new(0);
    let workers = threads.clamp(1, batches.len().max(1));
    let results: Vec<Result<Counts>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut counts = Counts::default();
                    while let Some(b) = batches.get(next.fetch_add(1, Ordering::Relaxed)) {
                        count::count_batch(&mut counts, b, reference, known_sites)?;
                    }
                    Ok(counts)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(AsamError::Invalid("a BQSR worker panicked".into())))
            })
            .collect()
    });
    let mut total = Counts::default();
    for r in results {
        total.merge(r?);
    }
    let stats = total.stats;
    Ok((total.into_table(), stats))
}

/// Recalibrates every batch with `table` (no OQ tag; see [`apply_with`]).
pub fn apply(
    batches: &[RecordBatch],
    table: &RecalTable,
    threads: usize,
) -> Result<Vec<RecordBatch>> {
    apply_with(batches, table, ApplyOptions::default(), threads)
}
