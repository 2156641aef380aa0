//! Coordinate sort of ArrowSAM, one worker thread per chromosome. A
//! chromosome may span several batches, anywhere in the input (the loader
//! emits a batch as soon as it is full): its rows are ordered as one
//! permutation over all of them, then gathered (Arrow's
//! `interleave_record_batch`) into new batches cut at the same
//! [`BatchLimits`] as the loader's.

use std::cmp::Ordering;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

use arrow::array::RecordBatch;
use arrow::compute::interleave_record_batch;

use crate::schema::{BatchLimits, Columns, chromosome_groups, flag, string_bytes};
use crate::{AsamError, Result};

/// Sorts each chromosome by position. Ties are ordered as htsjdk's
/// coordinate comparator (the one Picard's SortSam uses) orders them:
/// reverse strand after forward, then read name, flags, MAPQ, mate
/// reference, mate position, TLEN, then input order. Keeping Picard's tie order makes "first best" in duplicate
/// marking pick the same read Picard picks. Unplaced records (no
/// reference) keep input order.
pub fn sort_batches(batches: &[RecordBatch], threads: usize) -> Result<Vec<RecordBatch>> {
    sort_batches_with(batches, threads, &BatchLimits::default())
}

/// As [`sort_batches`], the output cut at `limits`.
pub fn sort_batches_with(
    batches: &[RecordBatch],
    threads: usize,
    limits: &BatchLimits,
) -> Result<Vec<RecordBatch>> {
    limits.validate()?;
    let groups = chromosome_groups(batches)?;
    let sorted = parallel_map(&groups, threads, |_, (rid, idx)| {
        let run: Vec<&RecordBatch> = idx.iter().map(|&i| &batches[i]).collect();
        if *rid < 0 {
            Ok(run.into_iter().cloned().collect())
        } else {
            sort_run(*rid, &run, limits)
        }
    })?;
    Ok(sorted.into_iter().flatten().collect())
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
    parallel_map(batches, threads, job)
}

/// Runs `job(index, item)` on every item, `threads` workers each taking
/// the next one; results come back in item order.
pub fn parallel_map<'b, I, T, F>(items: &'b [I], threads: usize, job: F) -> Result<Vec<T>>
where
    I: Sync,
    T: Send,
    F: Fn(usize, &'b I) -> Result<T> + Sync,
{
    let next = AtomicUsize::new(0);
    let workers = threads.clamp(1, items.len().max(1));
    let mut results: Vec<(usize, Result<T>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, AtomicOrdering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        mine.push((i, job(i, item)));
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
    if results.len() != items.len() {
        return Err(AsamError::Invalid("a worker thread panicked".into()));
    }
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

/// The rows of one chromosome's batches in coordinate order, gathered
/// into batches within `limits`.
fn sort_run(rid: i32, run: &[&RecordBatch], limits: &BatchLimits) -> Result<Vec<RecordBatch>> {
    let columns = run
        .iter()
        .map(|b| Columns::of(b))
        .collect::<Result<Vec<_>>>()?;
    let mut order: Vec<(usize, usize)> = Vec::new();
    for (b, c) in columns.iter().enumerate() {
        if let Some(i) = c.rids.values().iter().position(|&r| r != rid) {
            return Err(AsamError::Invalid(format!(
                "read {}: reference {} in a batch of reference {rid}",
                c.qnames.value(i),
                c.rids.value(i)
            )));
        }
        order.extend((0..run[b].num_rows()).map(|row| (b, row)));
    }
    let key = |&(b, row): &(usize, usize)| {
        let c = &columns[b];
        let f = c.flags.value(row);
        (
            (c.poss.value(row), f & flag::REVERSE, c.qnames.value(row), f),
            (
                c.mapqs.value(row),
                c.rnext_ids.value(row),
                c.pnexts.value(row),
                c.tlens.value(row),
            ),
        )
    };
    // Input order (batch, row) breaks the remaining ties: a stable sort.
    order.sort_unstable_by(|a, b| match key(a).cmp(&key(b)) {
        Ordering::Equal => a.cmp(b),
        o => o,
    });
    let mut out = Vec::new();
    let mut start = 0;
    while start < order.len() {
        // As many rows as the limits allow (at least one).
        let mut bytes = [0usize; 5];
        let mut end = start;
        while end < order.len() && end - start < limits.max_rows {
            let (b, row) = order[end];
            let add = string_bytes(&columns[b].row(row));
            if end > start
                && bytes
                    .iter()
                    .zip(add)
                    .any(|(have, a)| have + a > limits.max_string_bytes)
            {
                break;
            }
            for (have, a) in bytes.iter_mut().zip(add) {
                *have += a;
            }
            end += 1;
        }
        out.push(
            interleave_record_batch(run, &order[start..end])
                .map_err(|e| AsamError::arrow("gather sorted rows", e))?,
        );
        start = end;
    }
    Ok(out)
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
        let sorted = sort_batches(&[batch.clone(), unplaced], 2).unwrap();
        assert_eq!(sorted.len(), 1);
        let c = Columns::of(&sorted[0]).unwrap();
        let got: Vec<Row<'_>> = (0..sorted[0].num_rows()).map(|i| c.row(i)).collect();
        // The same rows cut into batches of at most 7, in and out, sort
        // to the same sequence: the order spans batch boundaries.
        let small = BatchLimits {
            max_rows: 7,
            max_string_bytes: 1 << 20,
        };
        let pieces: Vec<RecordBatch> = (0..batch.num_rows())
            .step_by(7)
            .map(|o| batch.slice(o, 7.min(batch.num_rows() - o)))
            .collect();
        let resorted = sort_batches_with(&pieces, 2, &small).unwrap();
        assert!(resorted.iter().all(|b| b.num_rows() <= 7));
        let again: Vec<Row<'_>> = resorted
            .iter()
            .flat_map(|b| {
                let c = Columns::of(b).unwrap();
                (0..b.num_rows()).map(move |i| c.row(i))
            })
            .collect();
        assert_eq!(again, got);
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
