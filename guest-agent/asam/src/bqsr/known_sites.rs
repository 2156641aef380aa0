//! Known variant sites (dbSNP-like VCF) as reference intervals per rID:
//! BQSR does not count a base that overlaps one, since a mismatch there may
//! be a real variant rather than a sequencing error.

use std::collections::HashMap;
use std::path::Path;

use crate::Result;
use crate::vcf::{VcfRecord, read_vcf};

/// Merged, sorted 1-based inclusive intervals, one list per rID.
#[derive(Debug, Clone, Default)]
pub struct KnownSites {
    per_rid: Vec<Vec<(i64, i64)>>,
}

impl KnownSites {
    /// No known sites (every base counts).
    pub fn none() -> KnownSites {
        KnownSites::default()
    }

    /// Reads a VCF; records on contigs missing from `reference_names` are
    /// ignored (they can overlap no read of these batches).
    pub fn from_vcf(path: &Path, reference_names: &[String]) -> Result<KnownSites> {
        Ok(Self::from_records(&read_vcf(path)?, reference_names))
    }

    /// Each record masks POS..POS+len(REF)-1, as GATK masks a known
    /// variant's whole reference span (a deletion covers every deleted base).
    pub fn from_records(records: &[VcfRecord], reference_names: &[String]) -> KnownSites {
        let index: HashMap<&str, usize> = reference_names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let mut per_rid: Vec<Vec<(i64, i64)>> = vec![Vec::new(); reference_names.len()];
        for r in records {
            if let Some(&i) = index.get(r.chrom.as_str()) {
                per_rid[i].push((r.pos as i64, r.end() as i64));
            }
        }
        for v in &mut per_rid {
            v.sort_unstable();
            let mut merged: Vec<(i64, i64)> = Vec::with_capacity(v.len());
            for &(s, e) in v.iter() {
                match merged.last_mut() {
                    Some(last) if s <= last.1 + 1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            *v = merged;
        }
        KnownSites { per_rid }
    }

    /// Whether every position in `from..=to` lies in one known interval
    /// (`from == to` asks about a single base).
    pub fn covers(&self, rid: i32, from: i64, to: i64) -> bool {
        let Some(v) = usize::try_from(rid).ok().and_then(|i| self.per_rid.get(i)) else {
            return false;
        };
        // First interval ending at or after `from`.
        let at = v.partition_point(|&(_, e)| e < from);
        v.get(at).is_some_and(|&(s, e)| s <= from && to <= e)
    }

    pub fn intervals(&self) -> usize {
        self.per_rid.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(chrom: &str, pos: u64, reference: &str) -> VcfRecord {
        VcfRecord {
            chrom: chrom.into(),
            pos,
            reference: reference.into(),
            alts: vec!["A".into()],
            filter: ".".into(),
            genotype: None,
            line: 0,
        }
    }

    #[test]
    fn masks_the_reference_span_and_merges_adjacent_sites() {
        let names = vec!["chr1".to_string(), "chr2".to_string()];
        let k = KnownSites::from_records(
            &[
                rec("chr1", 10, "A"),
                rec("chr1", 11, "CGT"),
                rec("chr2", 5, "A"),
                rec("chrX", 1, "A"),
            ],
            &names,
        );
        assert_eq!(k.intervals(), 2);
        assert!(k.covers(0, 10, 10) && k.covers(0, 13, 13) && k.covers(0, 10, 13));
        assert!(!k.covers(0, 9, 9) && !k.covers(0, 14, 14) && !k.covers(0, 13, 14));
        assert!(k.covers(1, 5, 5) && !k.covers(1, 10, 10) && !k.covers(-1, 5, 5));
    }
}
