//! The sample's two haplotypes: SNPs and short indels on the reference,
//! heterozygous (on one haplotype) or homozygous (on both), and the
//! known-sites set BQSR masks with.
//!
//! Rates follow a typical human genome: one variant per ~800 bp, 12 %
//! indels (1-10 bp, mostly 1-2), Ti/Tv 2.0 for SNPs, het:hom about 1.6.
//! Indels are generated left-aligned (one that could shift left is not
//! made), so the truth VCF is already in `bcftools norm` form and
//! callers' normalised indels compare equal. The sample is diploid on
//! every contig (sex-chromosome ploidy is not modelled); chrM variants
//! are homozygous (homoplasmic).

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::genome::Genome;
use super::rng::{exponential, geometric};

/// Mean distance between variant sites.
pub const MEAN_GAP: f64 = 800.0;
pub const INDEL_FRACTION: f64 = 0.12;
/// Fraction of heterozygous sites: het/hom = 0.62/0.38 = 1.63.
pub const HET_FRACTION: f64 = 0.62;
pub const MAX_INDEL: u32 = 10;
/// Fraction of true sites in the known-sites set, and decoys (sites that
/// are not variant in this sample) as a fraction of the true sites.
pub const KNOWN_FRACTION: f64 = 0.7;
pub const DECOY_FRACTION: f64 = 0.2;

/// A variant in VCF form: `pos` is the 0-based position of `reference`'s
/// first base (for indels the anchor base), `gt` whether haplotype 1 and
/// 2 carry `alt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    pub contig: usize,
    pub pos: usize,
    pub reference: Vec<u8>,
    pub alt: Vec<u8>,
    pub gt: [bool; 2],
}

impl Variant {
    pub fn is_snp(&self) -> bool {
        self.reference.len() == 1 && self.alt.len() == 1
    }

    pub fn is_het(&self) -> bool {
        self.gt[0] != self.gt[1]
    }

    /// Bases the variant removes (positive) or adds (negative).
    fn shift(&self) -> isize {
        self.alt.len() as isize - self.reference.len() as isize
    }
}

/// Variants of `genome`, sorted by contig and position, never overlapping.
pub fn make(genome: &Genome, rng: &mut ChaCha8Rng) -> Vec<Variant> {
    let mut out = Vec::new();
    for (ci, c) in genome.contigs.iter().enumerate() {
        let seq = &c.seq;
        let mut pos = 50 + exponential(rng, MEAN_GAP) as usize;
        while pos + MAX_INDEL as usize + 50 < seq.len() {
            let v = variant_at(ci, seq, pos, rng);
            let gt = if c.name == "chrM" || !rng.random_bool(HET_FRACTION) {
                [true, true]
            } else if rng.random_bool(0.5) {
                [true, false]
            } else {
                [false, true]
            };
            let next = pos + v.reference.len() + 10;
            out.push(Variant { gt, ..v });
            pos = next + exponential(rng, MEAN_GAP) as usize;
        }
    }
    out
}

fn variant_at(contig: usize, seq: &[u8], pos: usize, rng: &mut ChaCha8Rng) -> Variant {
    let anchor = seq[pos];
    let snp = |rng: &mut ChaCha8Rng| Variant {
        contig,
        pos,
        reference: vec![anchor],
        alt: vec![snp_alt(anchor, rng)],
        gt: [true, true],
    };
    if !rng.random_bool(INDEL_FRACTION) {
        return snp(rng);
    }
    let len = geometric(rng, 0.55).min(MAX_INDEL) as usize;
    if rng.random_bool(0.5) {
        // Deletion of seq[pos+1..=pos+len]; left-shiftable when its last
        // base equals the anchor.
        if seq[pos + len] == anchor {
            return snp(rng);
        }
        Variant {
            contig,
            pos,
            reference: seq[pos..=pos + len].to_vec(),
            alt: vec![anchor],
            gt: [true, true],
        }
    } else {
        let inserted: Vec<u8> = (0..len).map(|_| b"ACGT"[rng.random_range(0..4)]).collect();
        if inserted.last() == Some(&anchor) {
            return snp(rng);
        }
        let mut alt = vec![anchor];
        alt.extend(inserted);
        Variant {
            contig,
            pos,
            reference: vec![anchor],
            alt,
            gt: [true, true],
        }
    }
}

/// A transition with probability 2/3 (so Ti/Tv is 2), else one of the two
/// transversions.
fn snp_alt(b: u8, rng: &mut ChaCha8Rng) -> u8 {
    let transition = match b {
        b'A' => b'G',
        b'G' => b'A',
        b'C' => b'T',
        _ => b'C',
    };
    if rng.random_bool(2.0 / 3.0) {
        return transition;
    }
    let tv: Vec<u8> = b"ACGT"
        .iter()
        .copied()
        .filter(|&x| x != b && x != transition)
        .collect();
    tv[rng.random_range(0..tv.len())]
}

/// One haplotype: each contig's sequence with the haplotype's alleles, and
/// where reference positions moved to.
#[derive(Debug, Clone)]
pub struct Haplotype {
    pub contigs: Vec<Vec<u8>>,
    /// Per contig: (first reference position after a variant, haplotype
    /// minus reference offset from there on), increasing.
    shifts: Vec<Vec<(usize, isize)>>,
}

impl Haplotype {
    /// The haplotype position of reference position `pos` (the position
    /// itself inside a variant's span).
    pub fn from_reference(&self, contig: usize, pos: usize) -> usize {
        let s = &self.shifts[contig];
        let i = s.partition_point(|&(p, _)| p <= pos);
        let delta = if i == 0 { 0 } else { s[i - 1].1 };
        (pos as isize + delta).max(0) as usize
    }
}

/// The two haplotypes of `variants` (sorted, non-overlapping) on `genome`.
pub fn haplotypes(genome: &Genome, variants: &[Variant]) -> [Haplotype; 2] {
    [0, 1].map(|h| {
        let mut contigs = Vec::with_capacity(genome.contigs.len());
        let mut shifts = Vec::with_capacity(genome.contigs.len());
        let mut v = variants.iter().peekable();
        for (ci, c) in genome.contigs.iter().enumerate() {
            let mut seq = Vec::with_capacity(c.seq.len() + 64);
            let mut shift = Vec::new();
            let mut delta = 0isize;
            let mut last = 0;
            while let Some(x) = v.next_if(|x| x.contig == ci) {
                if !x.gt[h] {
                    continue;
                }
                seq.extend_from_slice(&c.seq[last..x.pos]);
                seq.extend_from_slice(&x.alt);
                last = x.pos + x.reference.len();
                delta += x.shift();
                shift.push((last, delta));
            }
            seq.extend_from_slice(&c.seq[last..]);
            contigs.push(seq);
            shifts.push(shift);
        }
        Haplotype { contigs, shifts }
    })
}

/// A known site (dbSNP-like): no genotype.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Site {
    pub contig: usize,
    pub pos: usize,
    pub reference: Vec<u8>,
    pub alt: Vec<u8>,
}

/// [`KNOWN_FRACTION`] of the true variants plus [`DECOY_FRACTION`] as many
/// SNP sites where the sample matches the reference (a dbSNP entry the
/// sample does not carry), sorted.
pub fn known_sites(genome: &Genome, truth: &[Variant], rng: &mut ChaCha8Rng) -> Vec<Site> {
    let mut out: Vec<Site> = truth
        .iter()
        .filter(|_| rng.random_bool(KNOWN_FRACTION))
        .map(|v| Site {
            contig: v.contig,
            pos: v.pos,
            reference: v.reference.clone(),
            alt: v.alt.clone(),
        })
        .collect();
    let weights: Vec<usize> = genome.contigs.iter().map(|c| c.seq.len()).collect();
    let decoys = (truth.len() as f64 * DECOY_FRACTION).round() as usize;
    let mut taken = std::collections::BTreeSet::new();
    let mut made = 0;
    let mut tries = 0;
    while made < decoys && tries < 100 * decoys {
        tries += 1;
        let contig = super::genome::pick_weighted(&weights, rng);
        let seq = &genome.contigs[contig].seq;
        if seq.len() < 200 {
            continue;
        }
        let pos = rng.random_range(50..seq.len() - 50);
        // Not within 20 bp of a true variant or another decoy (truth is
        // sorted: look at the neighbours only).
        let margin = 20 + MAX_INDEL as usize;
        let i = truth.partition_point(|v| (v.contig, v.pos) < (contig, pos));
        let near_truth = [i.checked_sub(1), Some(i)]
            .into_iter()
            .flatten()
            .filter_map(|j| truth.get(j))
            .any(|v| v.contig == contig && v.pos.abs_diff(pos) < margin);
        let near_decoy = taken
            .range((contig, pos.saturating_sub(margin))..(contig, pos + margin))
            .next()
            .is_some();
        if near_truth || near_decoy {
            continue;
        }
        taken.insert((contig, pos));
        out.push(Site {
            contig,
            pos,
            reference: vec![seq[pos]],
            alt: vec![snp_alt(seq[pos], rng)],
        });
        made += 1;
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::super::genome::{build, contig_lengths};
    use super::super::rng::{Stream, stream};
    use super::*;

    fn genome() -> Genome {
        build(
            &contig_lengths(1.0 / 4000.0, 25),
            &mut stream(4, Stream::Genome, 0),
        )
    }

    #[test]
    fn counts_ratios_and_haplotype_alleles_are_as_documented() {
        let g = genome();
        let v = make(&g, &mut stream(4, Stream::Variants, 0));
        let expected = g.len() as f64 / (MEAN_GAP + 15.0);
        assert!(
            (v.len() as f64 - expected).abs() < 0.15 * expected,
            "{} variants, expected ~{expected}",
            v.len()
        );
        let het = v.iter().filter(|x| x.is_het()).count() as f64;
        let ratio = het / (v.len() as f64 - het);
        assert!((1.3..2.0).contains(&ratio), "het/hom {ratio}");
        let indels = v.iter().filter(|x| !x.is_snp()).count() as f64 / v.len() as f64;
        assert!((0.06..0.14).contains(&indels), "indel fraction {indels}");
        let hs = haplotypes(&g, &v);
        for x in &v {
            assert_eq!(
                &g.contigs[x.contig].seq[x.pos..x.pos + x.reference.len()],
                &x.reference[..]
            );
            for (h, hap) in hs.iter().enumerate() {
                let at = hap.from_reference(x.contig, x.pos);
                let allele = if x.gt[h] { &x.alt } else { &x.reference };
                let seq = &hap.contigs[x.contig];
                assert_eq!(&seq[at..at + allele.len()], &allele[..], "{x:?} hap {h}");
                // And the base after the allele is the reference's next one.
                let after = x.pos + x.reference.len();
                assert_eq!(seq[at + allele.len()], g.contigs[x.contig].seq[after]);
            }
        }
    }

    #[test]
    fn known_sites_hold_most_true_sites_and_some_decoys() {
        let g = genome();
        let v = make(&g, &mut stream(4, Stream::Variants, 0));
        let k = known_sites(&g, &v, &mut stream(4, Stream::KnownSites, 0));
        let truth: std::collections::HashSet<(usize, usize)> =
            v.iter().map(|x| (x.contig, x.pos)).collect();
        let true_sites = k
            .iter()
            .filter(|s| truth.contains(&(s.contig, s.pos)))
            .count();
        let decoys = k.len() - true_sites;
        assert!((true_sites as f64 / v.len() as f64 - KNOWN_FRACTION).abs() < 0.05);
        assert!((decoys as f64 / v.len() as f64 - DECOY_FRACTION).abs() < 0.03);
        assert!(k.windows(2).all(|w| w[0] < w[1]));
    }
}
