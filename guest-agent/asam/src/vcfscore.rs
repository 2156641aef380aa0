//! Calls against a truth VCF: TP, FP, FN, precision, recall and F1 for
//! SNPs, indels and all variants.
//!
//! Both sides are normalised the same way before they are compared:
//! - multiallelic records are split, one variant per ALT; ALTs "*", "." and
//!   symbolic ones (`<DEL>`) are dropped, as are ALT == REF;
//! - alleles are trimmed (common suffix, then common prefix, keeping one
//!   base) and, given the reference, left-aligned (vt's algorithm: while the
//!   alleles end with the same base, drop it, re-extending both by the base
//!   before POS when one becomes empty) — so an indel written at two places
//!   of a repeat, or with extra context bases, becomes one key;
//! - a variant is then the key (CHROM, POS, REF, ALT).
//!
//! Calls filtered by a FILTER other than PASS or "." are left out unless
//! asked; a call whose genotype carries no ALT (0/0, ./.) is not a call.
//!
//! Genotype-aware scoring also compares the ALT dosage of the first
//! sample's GT (0/1 and 0|1 = 1, 1/1 = 2; for a split multiallelic site,
//! the copies of that ALT): a key match with a different dosage counts as
//! one FP and one FN (hap.py's "genotype mismatch" convention). Dosage is
//! not compared when either side has no GT.
//!
//! Targets (BED, 0-based half-open) keep only variants whose POS, after
//! normalisation, lies in a target, on both sides.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Serialize;

use crate::vcf::{VcfRecord, read_vcf};
use crate::{AsamError, Result};

/// A normalised biallelic variant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VariantKey {
    pub chrom: String,
    pub pos: u64,
    pub reference: String,
    pub alt: String,
}

impl VariantKey {
    pub fn class(&self) -> VariantClass {
        match (self.reference.len(), self.alt.len()) {
            (1, 1) => VariantClass::Snp,
            (r, a) if r != a => VariantClass::Indel,
            _ => VariantClass::Other,
        }
    }
}

impl std::fmt::Display for VariantKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}>{}",
            self.chrom, self.pos, self.reference, self.alt
        )
    }
}

/// SNP (1 base to 1 base), indel (lengths differ) or other (MNP or a
/// complex same-length change; counted only in `all`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VariantClass {
    Snp,
    Indel,
    Other,
}

#[derive(Debug, Clone, Default)]
pub struct ScoreOptions {
    /// Compare ALT dosage too (see the module docs).
    pub genotype_aware: bool,
    /// Count calls whatever their FILTER says.
    pub include_filtered: bool,
}

/// Counts of one class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub tp: u64,
    pub fp: u64,
    #[serde(rename = "fn")]
    pub fn_: u64,
}

impl Counts {
    /// None when nothing was called.
    pub fn precision(&self) -> Option<f64> {
        ratio(self.tp, self.tp + self.fp)
    }

    /// None when the truth is empty.
    pub fn recall(&self) -> Option<f64> {
        ratio(self.tp, self.tp + self.fn_)
    }

    /// Harmonic mean of precision and recall; None when either is.
    pub fn f1(&self) -> Option<f64> {
        let (p, r) = (self.precision()?, self.recall()?);
        Some(if p + r == 0.0 {
            0.0
        } else {
            2.0 * p * r / (p + r)
        })
    }
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// One class's counts and rates, as printed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClassScore {
    #[serde(flatten)]
    pub counts: Counts,
    pub precision: Option<f64>,
    pub recall: Option<f64>,
    pub f1: Option<f64>,
}

impl From<Counts> for ClassScore {
    fn from(counts: Counts) -> Self {
        ClassScore {
            counts,
            precision: counts.precision(),
            recall: counts.recall(),
            f1: counts.f1(),
        }
    }
}

/// The score, with a few example keys of each kind of miss.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Score {
    pub snp: ClassScore,
    pub indel: ClassScore,
    pub all: ClassScore,
    pub genotype_aware: bool,
    /// Up to 20 false positives and false negatives ("chr:pos:REF>ALT").
    pub fp_examples: Vec<String>,
    pub fn_examples: Vec<String>,
}

const EXAMPLES: usize = 20;

/// Reference contigs by name (for left-alignment).
pub type Contigs = HashMap<String, Vec<u8>>;

/// Target intervals per contig, 0-based half-open, sorted and merged.
#[derive(Debug, Clone, Default)]
pub struct Targets(HashMap<String, Vec<(u64, u64)>>);

impl Targets {
    pub fn from_bed(path: &Path) -> Result<Targets> {
        let text = std::fs::read_to_string(path).map_err(|e| AsamError::io(path, e))?;
        Self::parse(&text).map_err(|(line, m)| {
            AsamError::Invalid(format!("{}: line {line}: {m}", path.display()))
        })
    }

    pub fn parse(text: &str) -> std::result::Result<Targets, (usize, String)> {
        let mut per: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty()
                || line.starts_with('#')
                || line.starts_with("track")
                || line.starts_with("browser")
            {
                continue;
            }
            let f: Vec<&str> = line.split('\t').collect();
            let num = |s: Option<&&str>| -> std::result::Result<u64, (usize, String)> {
                s.ok_or((i + 1, "fewer than 3 columns".to_string()))?
                    .trim()
                    .parse()
                    .map_err(|e| (i + 1, format!("{e}")))
            };
            let (start, end) = (num(f.get(1))?, num(f.get(2))?);
            if end < start {
                return Err((i + 1, format!("end {end} before start {start}")));
            }
            per.entry(f[0].to_string()).or_default().push((start, end));
        }
        for v in per.values_mut() {
            v.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for &(s, e) in v.iter() {
                match merged.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            *v = merged;
        }
        Ok(Targets(per))
    }

    /// Whether 1-based `pos` on `chrom` lies in a target.
    pub fn contains(&self, chrom: &str, pos: u64) -> bool {
        let Some(v) = self.0.get(chrom) else {
            return false;
        };
        let p0 = pos.saturating_sub(1);
        let at = v.partition_point(|&(_, e)| e <= p0);
        v.get(at).is_some_and(|&(s, _)| s <= p0)
    }
}

/// Trims and (with `contig`) left-aligns one biallelic variant.
pub fn normalize(
    chrom: &str,
    pos: u64,
    reference: &str,
    alt: &str,
    contig: Option<&[u8]>,
) -> VariantKey {
    let (mut r, mut a, mut p) = (reference.as_bytes().to_vec(), alt.as_bytes().to_vec(), pos);
    if let Some(contig) = contig {
        // vt normalize: drop a shared last base; when that empties an
        // allele, prepend the reference base before POS to both.
        while !r.is_empty() && r.last() == a.last() {
            let (rl, al) = (r.pop(), a.pop());
            if r.is_empty() || a.is_empty() {
                let before = p
                    .checked_sub(2)
                    .and_then(|i| contig.get(usize::try_from(i).ok()?));
                match before {
                    Some(&b) => {
                        r.insert(0, b);
                        a.insert(0, b);
                        p -= 1;
                    }
                    None => {
                        // At the contig start: keep the base and stop.
                        r.extend(rl);
                        a.extend(al);
                        break;
                    }
                }
            }
        }
    }
    // Trimming: common suffix, then common prefix, one base kept each.
    while r.len() >= 2 && a.len() >= 2 && r.last() == a.last() {
        r.pop();
        a.pop();
    }
    let shared = r
        .iter()
        .zip(&a)
        .take(r.len().min(a.len()) - 1)
        .take_while(|(x, y)| x == y)
        .count();
    p += shared as u64;
    VariantKey {
        chrom: chrom.to_string(),
        pos: p,
        reference: String::from_utf8_lossy(&r[shared..]).into_owned(),
        alt: String::from_utf8_lossy(&a[shared..]).into_owned(),
    }
}

/// The normalised variants of a record set, with their ALT dosage (None:
/// no GT). Records that carry no variant are dropped.
pub fn variants(
    records: &[VcfRecord],
    reference: Option<&Contigs>,
    keep_filtered: bool,
) -> BTreeMap<VariantKey, Option<u8>> {
    let mut out = BTreeMap::new();
    for r in records {
        if !keep_filtered && r.filter != "PASS" && r.filter != "." {
            continue;
        }
        let contig = reference.and_then(|c| c.get(&r.chrom)).map(Vec::as_slice);
        for (i, alt) in r.alts.iter().enumerate() {
            if alt == "*"
                || alt == "."
                || alt.starts_with('<')
                || alt.contains('[')
                || alt.contains(']')
                || *alt == r.reference
            {
                continue;
            }
            let dosage = r
                .genotype
                .as_ref()
                .map(|gt| gt.iter().filter(|a| **a == Some(i + 1)).count().min(255) as u8);
            if dosage == Some(0) {
                continue;
            }
            let key = normalize(&r.chrom, r.pos, &r.reference, alt, contig);
            // Two records normalising to one key: keep the higher dosage.
            let e = out.entry(key).or_insert(dosage);
            if dosage > *e {
                *e = dosage;
            }
        }
    }
    out
}

/// Scores `calls` against `truth` (both already read).
pub fn score_records(
    calls: &[VcfRecord],
    truth: &[VcfRecord],
    reference: Option<&Contigs>,
    targets: Option<&Targets>,
    o: &ScoreOptions,
) -> Score {
    let in_targets = |k: &VariantKey| targets.is_none_or(|t| t.contains(&k.chrom, k.pos));
    let called: BTreeMap<_, _> = variants(calls, reference, o.include_filtered)
        .into_iter()
        .filter(|(k, _)| in_targets(k))
        .collect();
    let true_set: BTreeMap<_, _> = variants(truth, reference, true)
        .into_iter()
        .filter(|(k, _)| in_targets(k))
        .collect();
    let mut by_class: [Counts; 3] = Default::default();
    let slot = |k: &VariantKey| match k.class() {
        VariantClass::Snp => Some(0),
        VariantClass::Indel => Some(1),
        VariantClass::Other => None,
    };
    let mut add = |k: &VariantKey, f: &dyn Fn(&mut Counts)| {
        if let Some(s) = slot(k) {
            f(&mut by_class[s]);
        }
        f(&mut by_class[2]);
    };
    let (mut fp_examples, mut fn_examples) = (Vec::new(), Vec::new());
    for (k, dosage) in &called {
        let matched = match true_set.get(k) {
            None => false,
            Some(t) => !o.genotype_aware || dosage.is_none() || t.is_none() || dosage == t,
        };
        if matched {
            add(k, &|c| c.tp += 1);
        } else {
            add(k, &|c| c.fp += 1);
            if fp_examples.len() < EXAMPLES {
                fp_examples.push(k.to_string());
            }
        }
    }
    for (k, dosage) in &true_set {
        let matched = match called.get(k) {
            None => false,
            Some(c) => !o.genotype_aware || dosage.is_none() || c.is_none() || dosage == c,
        };
        if !matched {
            add(k, &|c| c.fn_ += 1);
            if fn_examples.len() < EXAMPLES {
                fn_examples.push(k.to_string());
            }
        }
    }
    Score {
        snp: by_class[0].into(),
        indel: by_class[1].into(),
        all: by_class[2].into(),
        genotype_aware: o.genotype_aware,
        fp_examples,
        fn_examples,
    }
}

/// Reads the VCFs (plain or bgzipped), the optional reference FASTA (for
/// left-alignment) and BED, and scores.
pub fn score_files(
    calls: &Path,
    truth: &Path,
    reference: Option<&Path>,
    targets: Option<&Path>,
    o: &ScoreOptions,
) -> Result<Score> {
    let contigs: Option<Contigs> = reference
        .map(|p| crate::bqsr::reference::read_fasta(p).map(|v| v.into_iter().collect()))
        .transpose()?;
    let targets = targets.map(Targets::from_bed).transpose()?;
    Ok(score_records(
        &read_vcf(calls)?,
        &read_vcf(truth)?,
        contigs.as_ref(),
        targets.as_ref(),
        o,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vcf::parse_vcf;

    const HEAD: &str =
        "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\ts\n";

    fn vcf(lines: &[&str]) -> Vec<VcfRecord> {
        let body: String = lines
            .iter()
            .map(|l| format!("{}\n", l.replace(' ', "\t")))
            .collect();
        parse_vcf(&format!("{HEAD}{body}"), Path::new("t.vcf")).unwrap()
    }

    /// chr1 = TTCAGAGAGTT: deleting one "AG" of the repeat can be written
    /// at POS 3 (CAG>C, leftmost) or POS 7 (GAG>G).
    fn contigs() -> Contigs {
        [
            ("chr1".to_string(), b"TTCAGAGAGTT".to_vec()),
            ("chr2".to_string(), b"ACGTACGTAC".to_vec()),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn normalisation_trims_and_left_aligns() {
        let c = contigs();
        let chr1 = c.get("chr1").map(Vec::as_slice);
        let left = normalize("chr1", 3, "CAG", "C", chr1);
        assert_eq!(normalize("chr1", 7, "GAG", "G", chr1), left);
        assert_eq!(normalize("chr1", 3, "CAGA", "CA", chr1), left);
        assert_eq!(
            (left.pos, left.reference.as_str(), left.alt.as_str()),
            (3, "CAG", "C")
        );
        // Without the reference only trimming happens.
        assert_eq!(normalize("chr1", 3, "CAGA", "CA", None), left);
        assert_ne!(normalize("chr1", 7, "GAG", "G", None), left);
        // A padded SNP (as an MNP with shared bases) becomes the SNP.
        let snp = normalize("chr2", 1, "ACG", "ATG", None);
        assert_eq!(
            (snp.pos, snp.reference.as_str(), snp.alt.as_str()),
            (2, "C", "T")
        );
        assert_eq!(snp.class(), VariantClass::Snp);
        // An insertion at the contig start cannot be extended left.
        let ins = normalize("chr2", 1, "A", "AA", c.get("chr2").map(Vec::as_slice));
        assert_eq!(
            (ins.pos, ins.reference.as_str(), ins.alt.as_str()),
            (1, "A", "AA")
        );
    }

    #[test]
    fn counts_match_missing_extra_different_alt_and_equivalent_indel() {
        let truth = vcf(&[
            "chr2 2 . C T 50 PASS . GT 0/1",   // matched
            "chr2 4 . T G 50 PASS . GT 1/1",   // missed
            "chr2 6 . C A 50 PASS . GT 0/1",   // called with another ALT
            "chr1 3 . CAG C 50 PASS . GT 0/1", // called as GAG>G at 7
        ]);
        let calls = vcf(&[
            "chr2 2 . C T 50 PASS . GT 0/1",
            "chr2 6 . C G 50 PASS . GT 0/1",
            "chr2 8 . T A 50 PASS . GT 0/1",    // extra
            "chr2 9 . A C 50 LowQual . GT 0/1", // filtered: not a call
            "chr2 10 . C G 50 PASS . GT 0/0",   // no ALT in GT: not a call
            "chr1 7 . GAG G 50 PASS . GT 0/1",
        ]);
        let c = contigs();
        let s = score_records(&calls, &truth, Some(&c), None, &ScoreOptions::default());
        assert_eq!(
            s.snp.counts,
            Counts {
                tp: 1,
                fp: 2,
                fn_: 2
            }
        );
        assert_eq!(
            s.indel.counts,
            Counts {
                tp: 1,
                fp: 0,
                fn_: 0
            }
        );
        assert_eq!(
            s.all.counts,
            Counts {
                tp: 2,
                fp: 2,
                fn_: 2
            }
        );
        assert_eq!(s.all.precision, Some(0.5));
        assert_eq!(s.all.recall, Some(0.5));
        assert_eq!(s.all.f1, Some(0.5));
        assert!(s.fp_examples.contains(&"chr2:6:C>G".to_string()), "{s:?}");
        assert!(s.fn_examples.contains(&"chr2:6:C>A".to_string()), "{s:?}");
        // Without the reference the two indel spellings differ.
        let s = score_records(&calls, &truth, None, None, &ScoreOptions::default());
        assert_eq!(
            s.indel.counts,
            Counts {
                tp: 0,
                fp: 1,
                fn_: 1
            }
        );
        // Filtered calls count when asked.
        let o = ScoreOptions {
            include_filtered: true,
            ..Default::default()
        };
        assert_eq!(
            score_records(&calls, &truth, Some(&c), None, &o)
                .all
                .counts
                .fp,
            3
        );
    }

    #[test]
    fn multiallelic_records_split_and_genotypes_count_when_asked() {
        let truth = vcf(&[
            "chr2 2 . C T,G 50 PASS . GT 1/2",
            "chr2 4 . T G 50 PASS . GT 0/1",
        ]);
        let calls = vcf(&[
            "chr2 2 . C G 50 PASS . GT 0/1",
            "chr2 2 . C T 50 PASS . GT 0/1",
            "chr2 4 . T G 50 PASS . GT 1/1", // right allele, wrong genotype
        ]);
        let s = score_records(&calls, &truth, None, None, &ScoreOptions::default());
        assert_eq!(
            s.all.counts,
            Counts {
                tp: 3,
                fp: 0,
                fn_: 0
            }
        );
        let o = ScoreOptions {
            genotype_aware: true,
            ..Default::default()
        };
        let s = score_records(&calls, &truth, None, None, &o);
        assert_eq!(
            s.all.counts,
            Counts {
                tp: 2,
                fp: 1,
                fn_: 1
            }
        );
        assert!(s.genotype_aware);
        // Empty sides: rates undefined, not NaN.
        let e = score_records(&[], &[], None, None, &o);
        assert_eq!(
            (e.all.precision, e.all.recall, e.all.f1),
            (None, None, None)
        );
    }

    #[test]
    fn targets_restrict_both_sides() {
        let truth = vcf(&[
            "chr2 2 . C T 50 PASS . GT 0/1",
            "chr2 8 . T A 50 PASS . GT 0/1",
        ]);
        let calls = vcf(&[
            "chr2 5 . A T 50 PASS . GT 0/1",
            "chr2 8 . T A 50 PASS . GT 0/1",
        ]);
        // 0-based [6, 9) holds 1-based 7..=9.
        let t = Targets::parse("track name=x\nchr2\t6\t9\nchr2\t8\t9\n").unwrap();
        assert!(t.contains("chr2", 7) && t.contains("chr2", 9) && !t.contains("chr2", 6));
        let s = score_records(&calls, &truth, None, Some(&t), &ScoreOptions::default());
        assert_eq!(
            s.all.counts,
            Counts {
                tp: 1,
                fp: 0,
                fn_: 0
            }
        );
        assert_eq!(Targets::parse("chr2\tx\t9\n").unwrap_err().0, 1);
    }
}
