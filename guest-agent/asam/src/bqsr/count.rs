//! BaseRecalibrator's counting pass over one chromosome's batch: each
//! usable base adds an observation (and an error when it differs from the
//! reference) to its (read group, quality), cycle and context cells.

use std::collections::HashMap;

use arrow::array::RecordBatch;

use super::covariates::{
    CONTEXTS, MAX_CYCLE, MAX_SAM_QUALITY, MIN_USABLE_QUALITY, Placement, base_code, contexts,
    cycles, placements, read_group, skipped_for_table,
};
use super::known_sites::KnownSites;
use super::reference::Reference;
use super::table::{Datum, RecalTable};
use crate::schema::{Columns, flag};
use crate::{AsamError, Result};

const QUALS: usize = MAX_SAM_QUALITY as usize + 1;
/// Cycles -MAX_CYCLE..=MAX_CYCLE as 0..CYCLE_SLOTS.
const CYCLE_SLOTS: usize = 2 * MAX_CYCLE + 1;

/// Dense counts of one read group (quality × covariate value): the hot
/// loop adds to arrays, not hash maps.
struct GroupCounts {
    quality: Vec<Datum>,
    cycle: Vec<Datum>,
    context: Vec<Datum>,
}

impl GroupCounts {
    fn new() -> Self {
        GroupCounts {
            quality: vec![Datum::default(); QUALS],
            cycle: vec![Datum::default(); QUALS * CYCLE_SLOTS],
            context: vec![Datum::default(); QUALS * CONTEXTS],
        }
    }
}

/// How many bases were counted and why others were not (for the caller's
/// log; masked = on a known site).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountStats {
    pub reads_used: u64,
    pub reads_skipped: u64,
    pub bases_counted: u64,
    pub bases_low_quality: u64,
    pub bases_masked: u64,
    pub bases_clipped: u64,
    pub bases_not_acgt: u64,
}

impl CountStats {
    pub fn add(&mut self, o: &CountStats) {
        self.reads_used += o.reads_used;
        self.reads_skipped += o.reads_skipped;
        self.bases_counted += o.bases_counted;
        self.bases_low_quality += o.bases_low_quality;
        self.bases_masked += o.bases_masked;
        self.bases_clipped += o.bases_clipped;
        self.bases_not_acgt += o.bases_not_acgt;
    }
}

/// One worker's running counts: dense per read group, so adding a batch
/// costs no allocation per cell and memory does not grow with the number
/// of batches.
#[derive(Default)]
pub struct Counts {
    groups: HashMap<String, GroupCounts>,
    pub stats: CountStats,
}

impl Counts {
    pub fn merge(&mut self, other: Counts) {
        self.stats.add(&other.stats);
        for (rg, g) in other.groups {
            match self.groups.get_mut(&rg) {
                None => {
                    self.groups.insert(rg, g);
                }
                Some(mine) => {
                    for (a, b) in [
                        (&mut mine.quality, &g.quality),
                        (&mut mine.cycle, &g.cycle),
                        (&mut mine.context, &g.context),
                    ] {
                        a.iter_mut().zip(b).for_each(|(x, y)| x.add(*y));
                    }
                }
            }
        }
    }

    /// The cells that saw a base.
    pub fn into_table(self) -> RecalTable {
        sparse(self.groups)
    }
}

/// Adds one batch's usable bases to `counts`. Batches may hold any mix of
/// references: each record's rID picks its contig.
pub fn count_batch(
    counts: &mut Counts,
    b: &RecordBatch,
    reference: &Reference,
    known: &KnownSites,
) -> Result<()> {
    let c = Columns::of(b)?;
    let Counts { groups, stats } = counts;
    for i in 0..b.num_rows() {
        let r = c.row(i);
        if skipped_for_table(r.flags, r.mapq) || r.rid < 0 || r.seq == "*" || r.qual == "*" {
            stats.reads_skipped += 1;
            continue;
        }
        let bad =
            |m: String| AsamError::Invalid(format!("read {} at {}:{}: {m}", r.qname, r.rid, r.pos));
        let seq = r.seq.as_bytes();
        let quals = qualities(r.qual).map_err(bad)?;
        if quals.len() != seq.len() {
            return Err(bad(format!(
                "{} bases but {} qualities",
                seq.len(),
                quals.len()
            )));
        }
        if seq.len() > MAX_CYCLE {
            return Err(bad(format!(
                "{} bases; BQSR handles reads up to {MAX_CYCLE}",
                seq.len()
            )));
        }
        let contig = reference
            .sequence(r.rid)
            .ok_or_else(|| bad("rID has no reference sequence".into()))?;
        let place = placements(r.pos, r.cigar, seq.len())
            .ok_or_else(|| bad(format!("CIGAR {} does not fit the sequence", r.cigar)))?;
        let cyc = cycles(seq.len(), r.flags);
        let ctx = contexts(seq, &quals, r.flags & flag::REVERSE != 0);
        let rg = read_group(r.tags);
        if !groups.contains_key(rg) {
            groups.insert(rg.to_string(), GroupCounts::new());
        }
        let Some(g) = groups.get_mut(rg) else {
            continue;
        };
        stats.reads_used += 1;
        for k in 0..seq.len() {
            let q = quals[k];
            let error = match place[k] {
                Placement::Clipped => {
                    stats.bases_clipped += 1;
                    continue;
                }
                _ if q < MIN_USABLE_QUALITY => {
                    stats.bases_low_quality += 1;
                    continue;
                }
                _ if base_code(seq[k]).is_none() => {
                    stats.bases_not_acgt += 1;
                    continue;
                }
                Placement::Aligned(p) => {
                    if known.covers(r.rid, p, p) {
                        stats.bases_masked += 1;
                        continue;
                    }
                    let refb = usize::try_from(p - 1)
                        .ok()
                        .and_then(|x| contig.get(x))
                        .copied();
                    match refb.and_then(base_code) {
                        Some(rc) => base_code(seq[k]) != Some(rc),
                        // Past the contig end or an N in the reference: no
                        // truth to compare with (GATK would count a mismatch).
                        None => {
                            stats.bases_not_acgt += 1;
                            continue;
                        }
                    }
                }
                // An inserted base is an observation without a substitution
                // error in GATK's mismatch model; masked when a known site
                // spans both reference bases around it.
                Placement::Inserted(anchor) => {
                    if known.covers(r.rid, anchor, anchor + 1) {
                        stats.bases_masked += 1;
                        continue;
                    }
                    false
                }
            };
            stats.bases_counted += 1;
            let d = Datum {
                observations: 1,
                errors: u64::from(error),
            };
            let qi = usize::from(q);
            g.quality[qi].add(d);
            let slot = (cyc[k] + MAX_CYCLE as i32) as usize;
            g.cycle[qi * CYCLE_SLOTS + slot].add(d);
            if let Some(cx) = ctx[k] {
                g.context[qi * CONTEXTS + usize::from(cx)].add(d);
            }
        }
    }
    Ok(())
}

/// SAM quality text as Phred scores; an error past Q93 or below '!'.
pub fn qualities(qual: &str) -> std::result::Result<Vec<u8>, String> {
    qual.bytes()
        .map(|b| {
            b.checked_sub(33)
                .filter(|&q| q <= MAX_SAM_QUALITY)
                .ok_or_else(|| format!("quality byte {:?} outside '!'..='~'", b as char))
        })
        .collect()
}

fn sparse(groups: HashMap<String, GroupCounts>) -> RecalTable {
    let mut t = RecalTable::default();
    for (rg, g) in groups {
        for (q, d) in g
            .quality
            .iter()
            .enumerate()
            .filter(|(_, d)| d.observations > 0)
        {
            let q = q as u8;
            t.qualities.insert((rg.to_string(), q), *d);
            let qi = usize::from(q);
            for (s, d) in g.cycle[qi * CYCLE_SLOTS..(qi + 1) * CYCLE_SLOTS]
                .iter()
                .enumerate()
            {
                if d.observations > 0 {
                    t.cycles
                        .insert((rg.to_string(), q, s as i32 - MAX_CYCLE as i32), *d);
                }
            }
            for (cx, d) in g.context[qi * CONTEXTS..(qi + 1) * CONTEXTS]
                .iter()
                .enumerate()
            {
                if d.observations > 0 {
                    t.contexts.insert((rg.to_string(), q, cx as u8), *d);
                }
            }
        }
    }
    t
}
