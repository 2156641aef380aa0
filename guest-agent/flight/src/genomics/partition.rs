//! Region partitioning of ArrowSAM batches: the genome (the header's
//! references end to end) cut into `regions` equal spans. A read goes to
//! the span of its pair's leftmost mapped end, so both mates of a pair are
//! in one region and the receiver can mark pair duplicates region by
//! region; reads placed nowhere go to the last region. Each output batch
//! still holds one reference's reads (what the sort expects).

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use noodles::sam;
use testbed_asam::schema::{Columns, flag};

use crate::error::{FlightError, Result};

/// Start of each reference on the linear genome, and the genome's length.
#[derive(Debug, Clone, PartialEq)]
pub struct Genome {
    offsets: Vec<u64>,
    length: u64,
}

impl Genome {
    /// From `@SQ LN:` of the SAM header text.
    pub fn from_header(header_text: &str) -> Result<Self> {
        let header: sam::Header = header_text
            .parse()
            .map_err(|e| FlightError::Param(format!("SAM header: {e}")))?;
        let lengths: Vec<u64> = header
            .reference_sequences()
            .values()
            .map(|r| usize::from(r.length()) as u64)
            .collect();
        Ok(Self::from_lengths(&lengths))
    }

    pub fn from_lengths(lengths: &[u64]) -> Self {
        let mut offsets = Vec::with_capacity(lengths.len());
        let mut length = 0;
        for l in lengths {
            offsets.push(length);
            length += l;
        }
        Genome { offsets, length }
    }

    /// Linear position of (reference id, 1-based pos); None when unplaced.
    fn linear(&self, rid: i32, pos: i32) -> Option<u64> {
        let start = *self.offsets.get(usize::try_from(rid).ok()?)?;
        Some(start + u64::try_from(pos.max(1) - 1).unwrap_or(0))
    }

    /// The region of a read from its own and its mate's placement.
    pub fn region_of(&self, regions: u32, own: (i32, i32), mate: Option<(i32, i32)>) -> u32 {
        let last = regions.saturating_sub(1);
        let own = self.linear(own.0, own.1);
        let mate = mate.and_then(|(r, p)| self.linear(r, p));
        let left = match (own, mate) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return last,
        };
        if self.length == 0 {
            return last;
        }
        let r = u128::from(left) * u128::from(regions) / u128::from(self.length);
        u32::try_from(r).unwrap_or(last).min(last)
    }
}

/// `batches` split into `regions` lists of batches (index = region).
pub fn partition(
    batches: &[RecordBatch],
    genome: &Genome,
    regions: u32,
) -> Result<Vec<Vec<RecordBatch>>> {
    if regions == 0 {
        return Err(FlightError::Param("regions must be at least 1".into()));
    }
    let mut out: Vec<Vec<RecordBatch>> = vec![Vec::new(); regions as usize];
    for b in batches {
        let c = Columns::of(b).map_err(asam)?;
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); regions as usize];
        for i in 0..b.num_rows() {
            let f = c.flags.value(i);
            // SAM places an unmapped read at its mate: that is still a place.
            let own = (c.rids.value(i), c.poss.value(i));
            let paired = f & flag::PAIRED != 0 && f & flag::MATE_UNMAPPED == 0;
            let mate = paired.then(|| (c.rnext_ids.value(i), c.pnexts.value(i)));
            let r = genome.region_of(regions, own, mate);
            rows[r as usize].push(i as u32);
        }
        for (r, idx) in rows.into_iter().enumerate() {
            if idx.is_empty() {
                continue;
            }
            let taken = take_record_batch(b, &UInt32Array::from(idx))
                .map_err(|e| FlightError::Other(format!("partition: {e}")))?;
            out[r].push(taken);
        }
    }
    Ok(out)
}

pub(crate) fn asam(e: testbed_asam::AsamError) -> FlightError {
    FlightError::Other(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_goes_where_its_leftmost_end_is_and_unplaced_reads_go_last() {
        let g = Genome::from_lengths(&[100, 100]);
        assert_eq!(g.region_of(4, (0, 1), None), 0);
        assert_eq!(g.region_of(4, (0, 51), None), 1);
        assert_eq!(g.region_of(4, (1, 1), None), 2);
        // Mate in region 0: the pair stays together there.
        assert_eq!(g.region_of(4, (1, 80), Some((0, 10))), 0);
        assert_eq!(g.region_of(4, (1, 100), None), 3);
        assert_eq!(g.region_of(4, (-1, 0), None), 3);
        assert_eq!(g.region_of(1, (1, 100), Some((0, 3))), 0);
        // A mate on an unknown reference does not move the read.
        assert_eq!(g.region_of(2, (1, 1), Some((7, 1))), 1);
    }
}
