//! What the receiver does with a region once it holds it, the same for
//! both pipelines: ArrowSAM's coordinate sort and duplicate marking
//! (testbed-asam), timed; then, untimed, a checksum of the output that the
//! sender compares across pipelines.

use std::time::Instant;

use arrow::array::RecordBatch;
use serde::{Deserialize, Serialize};
use testbed_asam::markdup::mark_duplicates;
use testbed_asam::sam_text::format_row;
use testbed_asam::schema::{Columns, with_flags};
use testbed_asam::sort::sort_batches;

use super::partition::asam;
use crate::error::Result;

/// The receiver's report on one region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Processed {
    pub records: u64,
    pub duplicates: u64,
    /// Sort + duplicate marking, on the receiver's clock.
    pub seconds: f64,
    /// [`checksum`] of the sorted, marked records.
    pub checksum: u64,
}

/// Sorts and marks the region's records; `threads` workers each.
pub fn process(
    batches: &[RecordBatch],
    header_text: &str,
    reference_names: &[String],
    threads: usize,
) -> Result<Processed> {
    let t0 = Instant::now();
    let sorted = sort_batches(batches, threads).map_err(asam)?;
    let marked = mark_duplicates(&sorted, header_text, threads).map_err(asam)?;
    let out = sorted
        .iter()
        .zip(marked.flags)
        .map(|(b, f)| with_flags(b, f))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(asam)?;
    let seconds = t0.elapsed().as_secs_f64();
    Ok(Processed {
        records: out.iter().map(|b| b.num_rows() as u64).sum(),
        duplicates: marked.duplicates as u64,
        seconds,
        checksum: checksum(&out, reference_names)?,
    })
}

/// FNV-1a over the records' SAM lines, in order: equal when both
/// pipelines produced the same records, fields, flags and order.
pub fn checksum(batches: &[RecordBatch], reference_names: &[String]) -> Result<u64> {
    let mut h = Fnv::default();
    let mut line = Vec::new();
    for b in batches {
        let c = Columns::of(b).map_err(asam)?;
        for i in 0..b.num_rows() {
            line.clear();
            format_row(&mut line, &c.row(i), reference_names);
            line.push(b'\n');
            h.write(&line);
        }
    }
    Ok(h.0)
}

/// 64-bit FNV-1a.
pub struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}
