//! Coordinate sort of ArrowSAM, one worker thread per chromosome, with
//! Arrow's compute kernels (`lexsort_to_indices` + `take`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow::array::{ArrayRef, Int32Array, RecordBatch, UInt32Array};
use arrow::compute::{SortColumn, lexsort_to_indices, take_record_batch};

use crate::schema::{BEGIN_POSS, Columns, QNAMES, flag};
use crate::{AsamError, Result};

/// Sorts each batch by position. Ties are ordered as htsjdk's coordinate
/// comparator (the one Picard's SortSam uses) orders them: reverse strand
/// after forward, then read name, then flags, then input order. Keeping
/// Picard's tie order makes "first best" in duplicate marking pick the same
/// read Picard picks. The last batch (no reference) keeps input order.
pub fn sort_batches(batches: &[RecordBatch], threads: usize) -> Result<Vec<RecordBatch>> {
    let placed = batches.len().saturating_sub(1);
    let mut out = for_each_batch(&batches[..placed], threads, |_, b| sort_batch(b))?;
    out.extend(batches[placed..].iter().cloned());
    Ok(out)
}

/// Runs `job(index, batch)` on every batch, `threads` workers each taking
/// the next batch; results come back in batch order.
pub fn for_each_batch<'b, T, F>(
    batches: &'b [RecordBatch],
    threads: usize,
    job: F,
) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(usize, &'b RecordBatch) -> Result<T> + Sync,
{
    let next = AtomicUsize::new(0);
    let workers = threads.clamp(1, batches.len().max(1));
    let mut results: Vec<(usize, Result<T>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(b) = batches.get(i) else { break };
                        mine.push((i, job(i, b)));
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    if results.len() != batches.len() {
        return Err(AsamError::Invalid("a worker thread panicked".into()));
    }
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

fn sort_batch(b: &RecordBatch) -> Result<RecordBatch> {
    let c = Columns::of(b)?;
    let reverse: Int32Array = c
        .flags
        .values()
        .iter()
        .map(|f| Some(f & flag::REVERSE))
        .collect();
    let row: UInt32Array = (0..b.num_rows() as u32).map(Some).collect();
    let key = |values: ArrayRef| SortColumn {
        values,
        options: None,
    };
    let keys = [
        key(b.column(BEGIN_POSS).clone()),
        key(Arc::new(reverse)),
        key(b.column(QNAMES).clone()),
        key(b.column(crate::schema::FLAGS).clone()),
        key(Arc::new(row)),
    ];
    let order = lexsort_to_indices(&keys, None).map_err(|e| AsamError::arrow("lexsort", e))?;
    take_record_batch(b, &order).map_err(|e| AsamError::arrow("take", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{BatchBuilder, Row};

    fn row(qname: &str, flags: i32, pos: i32) -> Row<'_> {
        Row {
            qname,
            flags,
            rid: 0,
            pos,
            mapq: 60,
            cigar: "4M",
            rnext_id: -1,
            pnext: 0,
            tlen: 0,
            seq: "ACGT",
            qual: "IIII",
            tags: "",
        }
    }

    /// A pseudo-random batch sorted here equals the same rows sorted naively.
    #[test]
    fn equals_a_naive_sort() {
        let mut rows = Vec::new();
        let mut x: u64 = 12345;
        let names: Vec<String> = (0..500).map(|i| format!("r{}", i % 37)).collect();
        for name in &names {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let pos = (x >> 40) as i32 % 50 + 1;
            let flags = if (x >> 20) & 1 == 1 { 0x10 } else { 0 } | ((x >> 21) & 0x40) as i32;
            rows.push(row(name, flags, pos));
        }
        let mut b = BatchBuilder::default();
        rows.iter().for_each(|r| b.push(r));
        let batch = b.finish().unwrap();
        let unplaced = BatchBuilder::default().finish().unwrap();
        let sorted = sort_batches(&[batch, unplaced], 2).unwrap();
        assert_eq!(sorted.len(), 2);
        let c = Columns::of(&sorted[0]).unwrap();
        let got: Vec<Row<'_>> = (0..sorted[0].num_rows()).map(|i| c.row(i)).collect();
        let mut want: Vec<(usize, &Row<'_>)> = rows.iter().enumerate().collect();
        want.sort_by(|(i, a), (j, b)| {
            (a.pos, a.flags & 0x10, a.qname, a.flags, i).cmp(&(
                b.pos,
                b.flags & 0x10,
                b.qname,
                b.flags,
                j,
            ))
        });
        let want: Vec<Row<'_>> = want.into_iter().map(|(_, r)| r.clone()).collect();
        assert_eq!(got, want);
    }
}
