//! Duplicate marking with Picard's MarkDuplicates semantics on sorted
//! ArrowSAM batches. The result is a new `flags` column per batch; no other
//! column is touched.
//!
//! - A read end is (library, reference, unclipped 5' position, strand) of a
//!   primary mapped record. Unmapped, secondary and supplementary records are
//!   never duplicates (Picard marks the latter only on name-sorted input).
//! - Pairs (both mates mapped) are duplicates when their two ends agree
//!   (read 1 = the end with the lower reference/position, orientation of both);
//!   the pair with the highest score survives, ties going to the first in
//!   Picard's order: flow-cell location (tile, x, y from an Illumina read
//!   name), then coordinate order.
//! - A fragment (a read whose mate is unmapped, or unpaired) is a duplicate
//!   when a pair has an end at its position; among fragments only, the best
//!   score survives.
//! - Score: the sum of base qualities of at least 15, over both reads of a pair.

use std::collections::{BTreeMap, HashMap};

use arrow::array::{Int32Array, RecordBatch};

use crate::cigar::{quality_score, unclipped_five_prime};
use crate::optical;
use crate::schema::{Columns, flag};
use crate::sort::for_each_batch;
use crate::{AsamError, Result};

/// The new `flags` columns (one per input batch) and how many records got
/// the duplicate bit.
pub struct Marked {
    pub flags: Vec<Int32Array>,
    pub duplicates: usize,
    /// Optical duplicate pairs per library (Picard's count; see
    /// [`crate::optical`]), for the metrics.
    pub optical_pairs: BTreeMap<String, u64>,
    /// Sizes of the sets of duplicate pairs (Picard's histogram).
    pub pair_sets: SetSizeHistogram,
}

/// Picard's histograms of duplicate-set sizes (over all libraries, pairs
/// only): a set of n pairs with k optical duplicates counts once in
/// `all_sets` at n, in `optical_sets` at k + 1 (when k > 0) and in
/// `non_optical_sets` at n - k; a pair without duplicates is a set of 1.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetSizeHistogram {
    pub all_sets: BTreeMap<u64, u64>,
    pub optical_sets: BTreeMap<u64, u64>,
    pub non_optical_sets: BTreeMap<u64, u64>,
}

impl SetSizeHistogram {
    /// One set of `size` pairs, `optical` of them optical duplicates.
    pub fn add(&mut self, size: u64, optical: u64) {
        *self.all_sets.entry(size).or_default() += 1;
        if size > optical {
            *self.non_optical_sets.entry(size - optical).or_default() += 1;
        }
        if optical > 0 {
            *self.optical_sets.entry(optical + 1).or_default() += 1;
        }
    }
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

/// The library of a record with optional fields `tags` (its read group's
/// LB), or Picard's "Unknown Library".
pub fn library_of<'a>(tags: &str, libs: &'a HashMap<String, String>) -> &'a str {
    libs.get(read_group_of(tags))
        .map_or(UNKNOWN_LIBRARY, String::as_str)
}

/// The RG tag's value ("" without one).
fn read_group_of(tags: &str) -> &str {
    tags.split('\t')
        .find_map(|t| t.strip_prefix("RG:Z:"))
        .unwrap_or("")
}

/// Picard's name for the library of reads without one.
pub const UNKNOWN_LIBRARY: &str = "Unknown Library";

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
    read_group: &'a str,
    first_of_pair: bool,
    /// Picard's (tile, x, y) from the read name, -1s without one: part of
    /// its order of read ends, so it decides which of equal scores stays.
    location: (i16, i32, i32),
}

/// Marks duplicates in coordinate-sorted `batches`, `threads` workers
/// reading the batches. Pairs and fragments are grouped over all batches
/// at once, so a chromosome cut into several batches (or a pair with its
/// mates on two chromosomes) is handled as one.
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
    let (pair_dups, optical_pairs, pair_sets) = pair_duplicates(&ends);
    for (batch, row) in fragment_duplicates(&ends).into_iter().chain(pair_dups) {
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
    Ok(Marked {
        flags,
        duplicates,
        optical_pairs,
        pair_sets,
    })
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
        let library = library_of(c.tagss.value(row), libs);
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
            read_group: read_group_of(c.tagss.value(row)),
            first_of_pair: f & flag::FIRST_OF_PAIR != 0,
            location: optical::location(c.qnames.value(row))
                .map_or((-1, -1, -1), |l| (l.tile, l.x, l.y)),
        });
    }
    Ok(ends)
}

/// Fragments: every end, grouped by its own position and strand.
fn fragment_duplicates(ends: &[End<'_>]) -> Vec<(usize, usize)> {
    let mut order: Vec<&End<'_>> = ends.iter().collect();
    // Picard's order of read ends: key, then location, then file order.
    order.sort_by(|a, b| {
        (a.library, a.rid, a.coord, a.reverse, a.location, a.index)
            .cmp(&(b.library, b.rid, b.coord, b.reverse, b.location, b.index))
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
    location: (i16, i32, i32),
    indexes: (usize, usize),
    score: i32,
    records: [(usize, usize); 2],
    optical: optical::Member<'a>,
}

/// Pairs: both mates mapped, grouped by both ends. The duplicate records,
/// the optical duplicate pairs per library, and the set sizes.
fn pair_duplicates<'a>(
    ends: &[End<'a>],
) -> (Vec<(usize, usize)>, BTreeMap<String, u64>, SetSizeHistogram) {
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
        // Strands by first-of-pair, then second (by order seen when the
        // flags do not tell).
        let strands = match (first.first_of_pair, e.first_of_pair) {
            (false, true) => (e.reverse, first.reverse),
            _ => (first.reverse, e.reverse),
        };
        pairs.push(Pair {
            key: (first.library, r1.rid, r1.coord, o, r2.rid, r2.coord),
            location: first.location,
            indexes: (r1.index, r2.index),
            score: r1.score + r2.score,
            records: [(r1.batch, r1.row), (r2.batch, r2.row)],
            optical: optical::Member {
                read_group: first.read_group,
                location: optical::location(first.qname),
                strands,
            },
        });
    }
    // Picard's ReadEndsMDComparator: key, location, then file order; the
    // first best score in this order stays.
    pairs.sort_by(|a, b| (a.key, a.location, a.indexes).cmp(&(b.key, b.location, b.indexes)));
    let mut out = Vec::new();
    let mut optical_pairs: BTreeMap<String, u64> = BTreeMap::new();
    let mut sets = SetSizeHistogram::default();
    for group in pairs.chunk_by(|a, b| a.key == b.key) {
        let best = best_of(group.iter().map(|p| p.score));
        for (_, p) in group.iter().enumerate().filter(|(i, _)| *i != best) {
            out.extend(p.records);
        }
        let mut n = 0;
        if group.len() > 1 {
            let members: Vec<optical::Member<'_>> = group.iter().map(|p| p.optical).collect();
            n = optical::count(&members);
            if n > 0 {
                *optical_pairs.entry(group[0].key.0.to_string()).or_default() += n;
            }
        }
        sets.add(group.len() as u64, n);
    }
    (out, optical_pairs, sets)
}

/// The hand-written duplicate-marking cases: each a small SAM file and
/// the records Picard's MarkDuplicates marks in it. Public so that the
/// tests in `tests/` run the same cases through Picard and sambamba.
pub mod cases {
    /// A header with two references and one read group (library lib1).
    pub const HEADER: &str = "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:10000\n@SQ\tSN:chr2\tLN:10000\n@RG\tID:rg1\tSM:s\tLB:lib1\n";

    /// One SAM line of a 10 bp read with qualities all `q`, MAPQ 60, in
    /// read group rg1.
    // One argument per SAM column keeps the records readable.
    #[allow(clippy::too_many_arguments)]
    pub fn rec(
        name: &str,
        flags: u16,
        rname: &str,
        pos: u32,
        cigar: &str,
        rnext: &str,
        pnext: u32,
        q: char,
    ) -> String {
        let qual = q.to_string().repeat(10);
        format!(
            "{name}\t{flags}\t{rname}\t{pos}\t60\t{cigar}\t{rnext}\t{pnext}\t0\tACGTACGTAC\t{qual}\tRG:Z:rg1"
        )
    }

    /// A forward/reverse pair on chr1: read 1 forward at `p1`, read 2
    /// reverse at `p2`.
    pub fn pair(name: &str, p1: u32, p2: u32, q: char) -> [String; 2] {
        [
            rec(name, 99, "chr1", p1, "10M", "=", p2, q),
            rec(name, 147, "chr1", p2, "10M", "=", p1, q),
        ]
    }

    /// One case: its SAM text and the (QNAME, FLAG) of every record that
    /// must get the duplicate bit (FLAG as in the input, bit 0x400 clear).
    #[derive(Debug, Clone)]
    pub struct Case {
        pub name: &'static str,
        pub sam: String,
        pub duplicates: Vec<(&'static str, u16)>,
    }

    fn case(name: &'static str, lines: Vec<String>, duplicates: &[(&'static str, u16)]) -> Case {
        Case {
            name,
            sam: format!("{HEADER}{}\n", lines.join("\n")),
            duplicates: duplicates.to_vec(),
        }
    }

    /// The seven cases.
    pub fn all() -> Vec<Case> {
        let mut v = Vec::new();

        // 'I' = 40, '5' = 20: a_low sorts first but scores lower.
        let mut lines = Vec::new();
        lines.extend(pair("a_low", 100, 300, '5'));
        lines.extend(pair("b_high", 100, 300, 'I'));
        lines.extend(pair("other", 101, 300, '5'));
        v.push(case(
            "the_pair_with_the_higher_quality_sum_survives",
            lines,
            &[("a_low", 99), ("a_low", 147)],
        ));

        let mut lines = Vec::new();
        lines.extend(pair("t2", 100, 300, 'I'));
        lines.extend(pair("t1", 100, 300, 'I'));
        v.push(case(
            "on_equal_scores_the_first_in_coordinate_order_survives",
            lines,
            &[("t2", 99), ("t2", 147)],
        ));

        // x: 10 × 15 = 150 per read. y: 3 × 40 = 120 counted (7 × 13
        // not), 211 if every base counted. Picard keeps x.
        let y = |flags, pos, pnext| {
            rec("y", flags, "chr1", pos, "10M", "=", pnext, 'I').replace("IIIIIIIIII", "III.......")
        };
        let mut lines: Vec<String> = pair("x", 100, 300, '0').into();
        lines.push(y(99, 100, 300));
        lines.push(y(147, 300, 100));
        v.push(case(
            "qualities_below_15_do_not_count",
            lines,
            &[("y", 99), ("y", 147)],
        ));

        // Mate unmapped: a fragment, with better qualities than the pair;
        // its unmapped mate is never a duplicate.
        let mut lines: Vec<String> = pair("p", 100, 300, '5').into();
        lines.push(rec("f", 73, "chr1", 100, "10M", "=", 100, 'I'));
        lines.push(rec("f", 133, "chr1", 100, "*", "=", 100, 'I'));
        v.push(case(
            "a_fragment_at_a_pair_end_is_a_duplicate_and_the_pair_is_not",
            lines,
            &[("f", 73)],
        ));

        let lines = vec![
            rec("f1", 0, "chr1", 100, "10M", "*", 0, '5'),
            // soft clip: unclipped start 100, same end as f1, better score
            rec("f2", 0, "chr1", 105, "5S5M", "*", 0, 'I'),
            // reverse strand, 5' end 109: not a duplicate of the forward ones
            rec("f3", 16, "chr1", 100, "10M", "*", 0, '5'),
            // same end on chr2: another reference
            rec("f4", 0, "chr2", 100, "10M", "*", 0, '5'),
        ];
        v.push(case(
            "fragments_compare_unclipped_five_prime_ends_and_strand",
            lines,
            &[("f1", 0)],
        ));

        let lines = vec![
            rec("u1", 4, "*", 0, "*", "*", 0, 'I'),
            rec("u2", 4, "*", 0, "*", "*", 0, 'I'),
            rec("s0", 0, "chr1", 100, "10M", "*", 0, 'I'),
            rec("s1", 0, "chr1", 100, "10M", "*", 0, '5'),
            rec("s2", 256, "chr1", 100, "10M", "*", 0, '5'),
            rec("s3", 2048, "chr1", 100, "10M", "*", 0, '5'),
        ];
        v.push(case(
            "unmapped_secondary_and_supplementary_records_are_never_duplicates",
            lines,
            &[("s1", 0)],
        ));

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
        v.push(case(
            "pairs_with_ends_on_two_chromosomes_are_matched",
            lines,
            &[("c1", 97), ("c1", 145)],
        ));
        v
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;
    use crate::load::read_sam;
    use crate::schema::BatchLimits;
    use crate::sort::sort_batches_with;

    /// (QNAME, FLAG without 0x400) of the records marked after load, sort
    /// and markdup with batches of at most `rows` rows.
    fn marked(sam: &str, rows: usize) -> BTreeSet<(String, u16)> {
        let limits = BatchLimits {
            max_rows: rows,
            max_string_bytes: 1 << 20,
        };
        let t = read_sam(sam.as_bytes(), Path::new("test.sam"), &limits).unwrap();
        let sorted = sort_batches_with(&t.batches, 2, &limits).unwrap();
        let m = mark_duplicates(&sorted, &t.header_text, 2).unwrap();
        let mut out = BTreeSet::new();
        let mut seen = BTreeSet::new();
        for (b, f) in sorted.iter().zip(&m.flags) {
            let c = Columns::of(b).unwrap();
            for i in 0..b.num_rows() {
                let key = (c.qnames.value(i).to_string(), c.flags.value(i) as u16);
                assert!(seen.insert(key.clone()), "{key:?} twice");
                if f.value(i) & flag::DUPLICATE != 0 {
                    out.insert(key);
                }
            }
        }
        assert_eq!(m.duplicates, out.len());
        out
    }

    /// Every case marks exactly its expected records, with one batch per
    /// chromosome and with batches of one or two rows (so that groups of
    /// duplicates span batch boundaries).
    #[test]
    fn the_hand_written_cases_mark_what_picard_marks() {
        for case in cases::all() {
            let want: BTreeSet<(String, u16)> = case
                .duplicates
                .iter()
                .map(|(n, f)| (n.to_string(), *f))
                .collect();
            for rows in [1 << 20, 1, 2] {
                assert_eq!(marked(&case.sam, rows), want, "{} (rows {rows})", case.name);
            }
        }
        assert_eq!(cases::all().len(), 7);
    }

    /// Picard orders read ends by flow-cell location (tile, x, y of an
    /// Illumina name) before file order: of two pairs with equal scores,
    /// the one at the lower x stays though its name sorts later. (Found by
    /// the duplicate gate against Picard on synthetic data.)
    #[test]
    fn equal_scores_go_to_the_lower_flow_cell_location() {
        let (a, b) = ("A:1:FC:1:1101:500:100", "B:1:FC:1:1101:400:100");
        let mut lines: Vec<String> = cases::pair(a, 100, 300, 'I').into();
        lines.extend(cases::pair(b, 100, 300, 'I'));
        // A fragment pair of its own to show the same for fragments.
        lines.push(cases::rec(
            "C:1:FC:1:1101:900:9",
            0,
            "chr2",
            50,
            "10M",
            "*",
            0,
            'I',
        ));
        lines.push(cases::rec(
            "D:1:FC:1:1101:800:9",
            0,
            "chr2",
            50,
            "10M",
            "*",
            0,
            'I',
        ));
        let sam = format!("{}{}\n", cases::HEADER, lines.join("\n"));
        let want: BTreeSet<(String, u16)> = [(a, 99), (a, 147), ("C:1:FC:1:1101:900:9", 0)]
            .into_iter()
            .map(|(n, f)| (n.to_string(), f))
            .collect();
        assert_eq!(marked(&sam, 1 << 20), want);
    }

    /// Both pairs are one cluster on the flow cell (same read group and
    /// tile, within 100 pixels): one optical duplicate pair, in lib1.
    #[test]
    fn optical_duplicates_are_counted_per_library() {
        let mut lines: Vec<String> = cases::pair("A:1:FC:1:1101:500:100", 100, 300, 'I').into();
        lines.extend(cases::pair("B:1:FC:1:1101:420:150", 100, 300, '5'));
        lines.extend(cases::pair("C:1:FC:1:1101:9000:150", 100, 300, '5'));
        let sam = format!("{}{}\n", cases::HEADER, lines.join("\n"));
        let t = read_sam(sam.as_bytes(), Path::new("t.sam"), &BatchLimits::default()).unwrap();
        let sorted = sort_batches_with(&t.batches, 1, &BatchLimits::default()).unwrap();
        let m = mark_duplicates(&sorted, &t.header_text, 1).unwrap();
        assert_eq!(m.duplicates, 4);
        assert_eq!(m.optical_pairs, BTreeMap::from([("lib1".to_string(), 1)]));
    }
}
