//! Duplicate marking with Picard's MarkDuplicates semantics on sorted
//! ArrowSAM batches. The result is a new `flags` column per batch; no other
//! column is touched.
//!
//! - A read end is (library, reference, unclipped 5' position, strand) of a
//!   primary mapped record. Unmapped, secondary and supplementary records are
//!   never duplicates (Picard marks the latter only on name-sorted input).
//! - Pairs (both mates mapped) are duplicates when their two ends agree
//!   (read 1 = the end with the lower reference/position, orientation of both);
//!   the pair with the highest score survives, ties going to the earlier one
//!   in coordinate order.
//! - A fragment (a read whose mate is unmapped, or unpaired) is a duplicate
//!   when a pair has an end at its position; among fragments only, the best
//!   score survives.
//! - Score: the sum of base qualities of at least 15, over both reads of a pair.

use std::collections::HashMap;

use arrow::array::{Int32Array, RecordBatch};

use crate::cigar::{quality_score, unclipped_five_prime};
use crate::schema::{Columns, flag};
use crate::sort::for_each_batch;
use crate::{AsamError, Result};

/// The new `flags` columns (one per input batch) and how many records got
/// the duplicate bit.
pub struct Marked {
    pub flags: Vec<Int32Array>,
    pub duplicates: usize,
}

/// Library of each read group: `@RG ID:x ... LB:y`, as Picard reads them.
pub fn libraries(header_text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for line in header_text.lines().filter(|l| l.starts_with("@RG\t")) {
        let field = |tag: &str| {
            line.split('\t')
                .find_map(|f| f.strip_prefix(tag))
                .map(str::to_string)
        };
        if let (Some(id), Some(lb)) = (field("ID:"), field("LB:")) {
            out.insert(id, lb);
        }
    }
    out
}

/// One primary mapped record as duplicate marking sees it.
#[derive(Debug, Clone, Copy)]
struct End<'a> {
    batch: usize,
    row: usize,
    /// Position in coordinate order over all batches ("index in file").
    index: usize,
    library: &'a str,
    rid: i32,
    coord: i32,
    reverse: bool,
    score: i32,
    mate_mapped: bool,
    qname: &'a str,
}

/// Marks duplicates in coordinate-sorted `batches`, `threads` workers
/// reading the batches (one per chromosome).
pub fn mark_duplicates(
    batches: &[RecordBatch],
    header_text: &str,
    threads: usize,
) -> Result<Marked> {
    let libs = libraries(header_text);
    let mut offset = 0;
    let offsets: Vec<usize> = batches
        .iter()
        .map(|b| {
            let o = offset;
            offset += b.num_rows();
            o
        })
        .collect();
    let ends_per_batch =
        for_each_batch(batches, threads, |i, b| read_ends(i, offsets[i], b, &libs))?;
    let ends: Vec<End<'_>> = ends_per_batch.into_iter().flatten().collect();

    let mut dup: Vec<Vec<bool>> = batches.iter().map(|b| vec![false; b.num_rows()]).collect();
    for (batch, row) in fragment_duplicates(&ends)
        .into_iter()
        .chain(pair_duplicates(&ends))
    {
        dup[batch][row] = true;
    }
    let mut duplicates = 0;
    let mut flags = Vec::with_capacity(batches.len());
    for (b, d) in batches.iter().zip(&dup) {
        let c = Columns::of(b)?;
        duplicates += d.iter().filter(|&&x| x).count();
        flags.push(
            c.flags
                .values()
                .iter()
                .zip(d)
                .map(|(&f, &is_dup)| {
                    let cleared = f & !flag::DUPLICATE;
                    Some(if is_dup {
                        cleared | flag::DUPLICATE
                    } else {
                        cleared
                    })
                })
                .collect(),
        );
    }
    Ok(Marked { flags, duplicates })
}

fn read_ends<'a>(
    batch: usize,
    offset: usize,
    b: &'a RecordBatch,
    libs: &'a HashMap<String, String>,
) -> Result<Vec<End<'a>>> {
    let c = Columns::of(b)?;
    let mut ends = Vec::with_capacity(b.num_rows());
    for row in 0..b.num_rows() {
        let f = c.flags.value(row);
        if f & (flag::UNMAPPED | flag::SECONDARY | flag::SUPPLEMENTARY) != 0 {
            continue;
        }
        let reverse = f & flag::REVERSE != 0;
        let coord = unclipped_five_prime(c.poss.value(row), c.cigars.value(row), reverse)
            .ok_or_else(|| {
                AsamError::Invalid(format!(
                    "read {}: malformed CIGAR {:?}",
                    c.qnames.value(row),
                    c.cigars.value(row)
                ))
            })?;
        let tags = c.tagss.value(row);
        let library = tags
            .split('\t')
            .find_map(|t| t.strip_prefix("RG:Z:"))
            .and_then(|rg| libs.get(rg))
            .map_or("Unknown Library", String::as_str);
        ends.push(End {
            batch,
            row,
            index: offset + row,
            library,
            rid: c.rids.value(row),
            coord,
            reverse,
            score: quality_score(c.quals.value(row)),
            mate_mapped: f & flag::PAIRED != 0 && f & flag::MATE_UNMAPPED == 0,
            qname: c.qnames.value(row),
        });
    }
    Ok(ends)
}

/// Fragments: every end, grouped by its own position and strand.
fn fragment_duplicates(ends: &[End<'_>]) -> Vec<(usize, usize)> {
    let mut order: Vec<&End<'_>> = ends.iter().collect();
    order.sort_by(|a, b| {
        (a.library, a.rid, a.coord, a.reverse, a.index)
            .cmp(&(b.library, b.rid, b.coord, b.reverse, b.index))
    });
    let mut out = Vec::new();
    for group in order.chunk_by(|a, b| {
        (a.library, a.rid, a.coord, a.reverse) == (b.library, b.rid, b.coord, b.reverse)
    }) {
        if group.iter().any(|e| e.mate_mapped) {
            // A pair covers this end: every lone fragment here is a duplicate.
            out.extend(
                group
                    .iter()
                    .filter(|e| !e.mate_mapped)
                    .map(|e| (e.batch, e.row)),
            );
        } else {
            let best = best_of(group.iter().map(|e| e.score));
            out.extend(
                group
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != best)
                    .map(|(_, e)| (e.batch, e.row)),
            );
        }
    }
    out
}

/// Index of the first maximum: Picard keeps the earliest of equal scores.
fn best_of(scores: impl Iterator<Item = i32>) -> usize {
    let mut best = (0, i32::MIN);
    for (i, s) in scores.enumerate() {
        if s > best.1 {
            best = (i, s);
        }
    }
    best.0
}

/// Picard's pair orientations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Orientation {
    FF,
    FR,
    RR,
    RF,
}

fn orientation(read1_reverse: bool, read2_reverse: bool) -> Orientation {
    match (read1_reverse, read2_reverse) {
        (false, false) => Orientation::FF,
        (false, true) => Orientation::FR,
        (true, true) => Orientation::RR,
        (true, false) => Orientation::RF,
    }
}

#[derive(Debug)]
struct Pair<'a> {
    key: (&'a str, i32, i32, Orientation, i32, i32),
    indexes: (usize, usize),
    score: i32,
    records: [(usize, usize); 2],
}

/// Pairs: both mates mapped, grouped by both ends.
fn pair_duplicates(ends: &[End<'_>]) -> Vec<(usize, usize)> {
    let mut waiting: HashMap<&str, &End<'_>> = HashMap::new();
    let mut pairs = Vec::new();
    for e in ends.iter().filter(|e| e.mate_mapped) {
        let Some(first) = waiting.remove(e.qname) else {
            waiting.insert(e.qname, e);
            continue;
        };
        // Read 1 is the end with the lower (reference, position); on a tie
        // the one earlier in coordinate order.
        let (r1, r2) = if (e.rid, e.coord) >= (first.rid, first.coord) {
            (first, e)
        } else {
            (e, first)
        };
        let mut o = orientation(r1.reverse, r2.reverse);
        // Same position, opposite strands: RF would depend on file order.
        if (r1.rid, r1.coord) == (r2.rid, r2.coord) && o == Orientation::RF {
            o = Orientation::FR;
        }
        pairs.push(Pair {
            key: (first.library, r1.rid, r1.coord, o, r2.rid, r2.coord),
            indexes: (r1.index, r2.index),
            score: r1.score + r2.score,
            records: [(r1.batch, r1.row), (r2.batch, r2.row)],
        });
    }
    pairs.sort_by(|a, b| (a.key, a.indexes).cmp(&(b.key, b.indexes)));
    let mut out = Vec::new();
    for group in pairs.chunk_by(|a, b| a.key == b.key) {
        let best = best_of(group.iter().map(|p| p.score));
        for (_, p) in group.iter().enumerate().filter(|(i, _)| *i != best) {
            out.extend(p.records);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;
    use crate::load::parse_sam;
    use crate::sort::sort_batches;
    use crate::testdata::{HEADER, pair, rec};

    /// Duplicate bit of each (qname, flags) after load, sort and markdup.
    fn marked(lines: &[String]) -> BTreeMap<(String, i32), bool> {
        let text = format!("{HEADER}{}\n", lines.join("\n"));
        let t = parse_sam(text.as_bytes(), Path::new("test.sam")).unwrap();
        let sorted = sort_batches(&t.batches, 2).unwrap();
        let m = mark_duplicates(&sorted, &t.header_text, 2).unwrap();
        let mut out = BTreeMap::new();
        for (b, f) in sorted.iter().zip(&m.flags) {
            let c = Columns::of(b).unwrap();
            for i in 0..b.num_rows() {
                let key = (c.qnames.value(i).to_string(), c.flags.value(i));
                assert!(out.insert(key, f.value(i) & flag::DUPLICATE != 0).is_none());
            }
        }
        assert_eq!(m.duplicates, out.values().filter(|&&d| d).count());
        out
    }

    fn dups(m: &BTreeMap<(String, i32), bool>) -> Vec<&str> {
        m.iter()
            .filter(|(_, d)| **d)
            .map(|((n, _), _)| n.as_str())
            .collect()
    }

    #[test]
    fn the_pair_with_the_higher_quality_sum_survives() {
        // 'I' = 40, '5' = 20: a_low sorts first but scores lower.
        let mut lines = Vec::new();
        lines.extend(pair("a_low", 100, 300, '5'));
        lines.extend(pair("b_high", 100, 300, 'I'));
        lines.extend(pair("other", 101, 300, '5'));
        assert_eq!(dups(&marked(&lines)), ["a_low", "a_low"]);
    }

    #[test]
    fn on_equal_scores_the_first_in_coordinate_order_survives() {
        let mut lines = Vec::new();
        lines.extend(pair("t2", 100, 300, 'I'));
        lines.extend(pair("t1", 100, 300, 'I'));
        assert_eq!(dups(&marked(&lines)), ["t2", "t2"]);
    }

    #[test]
    fn qualities_below_15_do_not_count() {
        // x: 10 × 15 = 150 per read. y: 3 × 40 = 120 counted (7 × 13 not),
        // 211 if every base counted. Picard keeps x.
        let y = |flags, pos, pnext| {
            rec("y", flags, "chr1", pos, "10M", "=", pnext, 'I').replace("IIIIIIIIII", "III.......")
        };
        let mut lines: Vec<String> = pair("x", 100, 300, '0').into();
        lines.push(y(99, 100, 300));
        lines.push(y(147, 300, 100));
        assert_eq!(dups(&marked(&lines)), ["y", "y"]);
    }

    #[test]
    fn a_fragment_at_a_pair_end_is_a_duplicate_and_the_pair_is_not() {
        let mut lines: Vec<String> = pair("p", 100, 300, '5').into();
        // Mate unmapped: a fragment, with better qualities than the pair.
        lines.push(rec("f", 73, "chr1", 100, "10M", "=", 100, 'I'));
        lines.push(rec("f", 133, "chr1", 100, "*", "=", 100, 'I'));
        let m = marked(&lines);
        assert_eq!(dups(&m), ["f"]);
        assert!(m[&("f".to_string(), 73)]);
        assert!(
            !m[&("f".to_string(), 133)],
            "unmapped reads are never duplicates"
        );
    }

    #[test]
    fn fragments_compare_unclipped_five_prime_ends_and_strand() {
        let lines = vec![
            rec("f1", 0, "chr1", 100, "10M", "*", 0, '5'),
            // soft clip: unclipped start 100, same end as f1, better score
            rec("f2", 0, "chr1", 105, "5S5M", "*", 0, 'I'),
            // reverse strand, 5' end 109: not a duplicate of the forward ones
            rec("f3", 16, "chr1", 100, "10M", "*", 0, '5'),
            // same end on chr2: another reference
            rec("f4", 0, "chr2", 100, "10M", "*", 0, '5'),
        ];
        assert_eq!(dups(&marked(&lines)), ["f1"]);
    }

    #[test]
    fn unmapped_secondary_and_supplementary_records_are_never_duplicates() {
        let lines = vec![
            rec("u1", 4, "*", 0, "*", "*", 0, 'I'),
            rec("u2", 4, "*", 0, "*", "*", 0, 'I'),
            rec("s0", 0, "chr1", 100, "10M", "*", 0, 'I'),
            rec("s1", 0, "chr1", 100, "10M", "*", 0, '5'),
            rec("s2", 256, "chr1", 100, "10M", "*", 0, '5'),
            rec("s3", 2048, "chr1", 100, "10M", "*", 0, '5'),
        ];
        assert_eq!(dups(&marked(&lines)), ["s1"]);
    }

    #[test]
    fn pairs_with_ends_on_two_chromosomes_are_matched() {
        let pair_across = |name: &str, q| {
            vec![
                rec(name, 97, "chr1", 500, "10M", "chr2", 700, q),
                rec(name, 145, "chr2", 700, "10M", "chr1", 500, q),
            ]
        };
        let mut lines = pair_across("c1", '5');
        lines.extend(pair_across("c2", 'I'));
        // same chr1 end, other chr2 end: not a duplicate
        lines.push(rec("c3", 97, "chr1", 500, "10M", "chr2", 900, 'I'));
        lines.push(rec("c3", 145, "chr2", 900, "10M", "chr1", 500, 'I'));
        assert_eq!(dups(&marked(&lines)), ["c1", "c1"]);
    }
}
