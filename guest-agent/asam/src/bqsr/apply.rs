//! ApplyBQSR: every base reported at Q6 or more gets the quality the
//! hierarchical model predicts from the table (GATK4
//! `BQSRReadTransformer.hierarchicalBayesianQualityEstimate`):
//!
//! ```text
//! ε        = the read group's EstimatedQReported (RecalTable0)
//! ΔQ_rg    = EmpQ(rg cell | prior ε)                        − ε
//! ΔQ_q     = EmpQ((rg, q) cell | prior ε+ΔQ_rg)             − (ε+ΔQ_rg)
//! ΔQ_cov   = Σ over cycle, context: EmpQ((rg, q, cov) cell | prior ε+ΔQ_rg+ΔQ_q) − (ε+ΔQ_rg+ΔQ_q)
//! Q_new    = round(ε + ΔQ_rg + ΔQ_q + ΔQ_cov), bounded to 1..=93
//! ```
//!
//! A missing cell contributes 0 (so a quality never seen while counting
//! gets its read group's level, as in GATK); a read group missing from the
//! table leaves the read unchanged. No quantization (GATK4's
//! `--quantize-quals` default 0 does none either).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringBuilder};

use super::count::qualities;
use super::covariates::{
    CONTEXTS, MAX_CYCLE, MAX_SAM_QUALITY, MIN_USABLE_QUALITY, contexts, cycles, read_group,
};
use super::table::RecalTable;
use crate::schema::{Columns, QUALS, TAGSS, flag};
use crate::sort::for_each_batch;
use crate::{AsamError, Result};

const QUALS_SEEN: usize = MAX_SAM_QUALITY as usize + 1;
/// Cycles -MAX_CYCLE..=MAX_CYCLE as 0..CYCLE_SLOTS.
const CYCLE_SLOTS: usize = 2 * MAX_CYCLE + 1;

/// The model's terms, precomputed per (read group, quality): applying is
/// then array look-ups and additions, not 61-bin posteriors per base.
#[derive(Debug, Clone)]
struct QualityLevel {
    /// ε + ΔQ_rg + ΔQ_q: the prior of the covariate cells.
    base: f64,
    /// ΔQ of each cycle (0 where the table has no cell).
    cycle: Vec<f64>,
    context: [f64; CONTEXTS],
}

/// One read group's terms.
#[derive(Debug, Clone)]
pub struct Group {
    /// ε + ΔQ_rg: the estimate for a quality the table never saw.
    level: f64,
    qualities: Vec<Option<QualityLevel>>,
}

impl Group {
    /// The recalibrated quality of one base (None: keep the reported one).
    pub fn quality(&self, q: u8, cycle: i32, context: Option<u8>) -> Option<u8> {
        if q < MIN_USABLE_QUALITY {
            return None;
        }
        let estimate = match self.qualities.get(usize::from(q)).and_then(Option::as_ref) {
            None => self.level,
            Some(l) => {
                let slot = usize::try_from(cycle + MAX_CYCLE as i32).ok();
                let cyc = slot.and_then(|s| l.cycle.get(s)).copied().unwrap_or(0.0);
                let ctx = context.map_or(0.0, |c| l.context[usize::from(c) % CONTEXTS]);
                l.base + cyc + ctx
            }
        };
        Some(estimate.round().clamp(1.0, f64::from(MAX_SAM_QUALITY)) as u8)
    }
}

/// A table prepared for applying.
#[derive(Debug, Clone)]
pub struct Recalibrator {
    groups: HashMap<String, Group>,
}

impl Recalibrator {
    pub fn new(t: &RecalTable) -> Recalibrator {
        let mut groups: HashMap<String, Group> = HashMap::new();
        for (rg, row) in t.read_groups() {
            let eps = row.estimated_q_reported;
            let group = Group {
                level: row.datum.empirical_quality(eps),
                qualities: vec![None; QUALS_SEEN],
            };
            groups.insert(rg, group);
        }
        for ((rg, q), d) in &t.qualities {
            let Some(g) = groups.get_mut(rg) else {
                continue;
            };
            if let Some(slot) = g.qualities.get_mut(usize::from(*q)) {
                *slot = Some(QualityLevel {
                    base: d.empirical_quality(g.level),
                    cycle: vec![0.0; CYCLE_SLOTS],
                    context: [0.0; CONTEXTS],
                });
            }
        }
        for ((rg, q, c), d) in &t.cycles {
            if let Some(l) = level(&mut groups, rg, *q)
                && let Some(slot) = usize::try_from(c + MAX_CYCLE as i32)
                    .ok()
                    .and_then(|s| l.cycle.get_mut(s))
            {
                *slot = d.empirical_quality(l.base) - l.base;
            }
        }
        for ((rg, q, c), d) in &t.contexts {
            if let Some(l) = level(&mut groups, rg, *q)
                && let Some(slot) = l.context.get_mut(usize::from(*c))
            {
                *slot = d.empirical_quality(l.base) - l.base;
            }
        }
        Recalibrator { groups }
    }

    /// A read group's terms; None for a group the table does not know
    /// (its reads are left as they are).
    pub fn group(&self, rg: &str) -> Option<&Group> {
        self.groups.get(rg)
    }

    /// The recalibrated quality of one base (None: keep the reported one).
    pub fn quality(&self, rg: &str, q: u8, cycle: i32, context: Option<u8>) -> Option<u8> {
        self.group(rg)?.quality(q, cycle, context)
    }
}

fn level<'g>(
    groups: &'g mut HashMap<String, Group>,
    rg: &str,
    q: u8,
) -> Option<&'g mut QualityLevel> {
    groups
        .get_mut(rg)
        .and_then(|g| g.qualities.get_mut(usize::from(q)))
        .and_then(Option::as_mut)
}

/// Options of the apply pass.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyOptions {
    /// Keep the reported qualities in an `OQ:Z:` tag (GATK's
    /// `--emit-original-quals`); an existing OQ tag is left as it is.
    pub keep_original: bool,
}

/// New batches with recalibrated QUAL (and OQ when asked); every other
/// column is shared with the input. All records are recalibrated,
/// duplicates and unmapped ones included, as ApplyBQSR does.
pub fn apply_with(
    batches: &[RecordBatch],
    table: &RecalTable,
    options: ApplyOptions,
    threads: usize,
) -> Result<Vec<RecordBatch>> {
    let r = Recalibrator::new(table);
    for_each_batch(batches, threads, |_, b| apply_batch(b, &r, options))
}

fn apply_batch(b: &RecordBatch, r: &Recalibrator, o: ApplyOptions) -> Result<RecordBatch> {
    let c = Columns::of(b)?;
    let mut quals = StringBuilder::with_capacity(b.num_rows(), c.quals.value_data().len());
    let mut tags = StringBuilder::new();
    let mut buf: Vec<u8> = Vec::new();
    for i in 0..b.num_rows() {
        let row = c.row(i);
        let new = recalibrate_read(r, &row, &mut buf)?;
        quals.append_value(new.unwrap_or(row.qual));
        if o.keep_original && new.is_some() && !has_tag(row.tags, "OQ") {
            if row.tags.is_empty() {
                tags.append_value(format!("OQ:Z:{}", row.qual));
            } else {
                tags.append_value(format!("{}\tOQ:Z:{}", row.tags, row.qual));
            }
        } else {
            tags.append_value(row.tags);
        }
    }
    let mut columns = b.columns().to_vec();
    columns[QUALS] = Arc::new(quals.finish()) as ArrayRef;
    if o.keep_original {
        columns[TAGSS] = Arc::new(tags.finish()) as ArrayRef;
    }
    RecordBatch::try_new(b.schema(), columns).map_err(|e| AsamError::arrow("recalibrated batch", e))
}

fn has_tag(tags: &str, tag: &str) -> bool {
    tags.split('\t')
        .any(|t| t.len() > 2 && t.starts_with(tag) && t.as_bytes()[2] == b':')
}

/// The read's new quality string, or None when it has none to change.
fn recalibrate_read<'b>(
    r: &Recalibrator,
    row: &crate::schema::Row<'_>,
    buf: &'b mut Vec<u8>,
) -> Result<Option<&'b str>> {
    if row.qual == "*" || row.seq == "*" {
        return Ok(None);
    }
    let bad = |m: String| AsamError::Invalid(format!("read {}: {m}", row.qname));
    let q = qualities(row.qual).map_err(bad)?;
    let seq = row.seq.as_bytes();
    if q.len() != seq.len() {
        return Err(bad(format!(
            "{} bases but {} qualities",
            seq.len(),
            q.len()
        )));
    }
    if seq.len() > MAX_CYCLE {
        return Err(bad(format!(
            "{} bases; BQSR handles reads up to {MAX_CYCLE}",
            seq.len()
        )));
    }
    let Some(group) = r.group(read_group(row.tags)) else {
        return Ok(None);
    };
    let cyc = cycles(seq.len(), row.flags);
    let ctx = contexts(seq, &q, row.flags & flag::REVERSE != 0);
    buf.clear();
    for k in 0..seq.len() {
        let nq = group.quality(q[k], cyc[k], ctx[k]).unwrap_or(q[k]);
        buf.push(nq + 33);
    }
    std::str::from_utf8(buf)
        .map(Some)
        .map_err(|e| AsamError::Invalid(format!("recalibrated quality: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bqsr::table::Datum;

    #[test]
    fn unseen_quality_gets_the_read_group_level_and_low_quality_is_kept() {
        let mut t = RecalTable::default();
        t.qualities.insert(
            ("rg".into(), 30),
            Datum {
                observations: 1_000_000,
                errors: 1000,
            },
        );
        t.cycles.insert(
            ("rg".into(), 30, 5),
            Datum {
                observations: 10_000,
                errors: 200,
            },
        );
        let r = Recalibrator::new(&t);
        assert_eq!(r.quality("rg", 30, 1, None), Some(30));
        let bad_cycle = r.quality("rg", 30, 5, None).unwrap();
        assert!(bad_cycle < 25, "{bad_cycle}");
        assert_eq!(r.quality("rg", 20, 1, None), Some(30));
        assert_eq!(r.quality("rg", 5, 1, None), None);
        assert_eq!(r.quality("other", 30, 1, None), None);
        assert!(has_tag("NM:i:0\tOQ:Z:II", "OQ") && !has_tag("XOQ:Z:I", "OQ"));
    }
}
