//! The reference: contigs chr1..22, X, Y, M with hg19-proportional lengths,
//! GC near 41 %, interspersed repeats and segmental duplications.
//!
//! Why repeats: reads from a uniformly random genome all map uniquely with
//! MAPQ 60, so duplicate marking, BQSR and calling never meet the ambiguous
//! placements real data has. Copies of a few repeat families (a few % to
//! 30 % diverged) make bwa's MAPQ vary; segmental duplications (kilobases,
//! 98.5-99.9 % identical, some on another chromosome) make reads with
//! MAPQ 0, as in real human data (a few % of reads).
//!
//! chrM keeps its real length (16 569 bp, rCRS): it is one molecule whose
//! size does not follow the nuclear genome's. Other contigs are scaled,
//! with a floor of [`MIN_CONTIG`] so read pairs and duplications fit. No
//! N-gaps are written.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::rng::{exponential, lognormal, normal};

/// hg19 (GRCh37) lengths; chrM is the rCRS length.
pub const HG19: [(&str, u64); 25] = [
    ("chr1", 249_250_621),
    ("chr2", 243_199_373),
    ("chr3", 198_022_430),
    ("chr4", 191_154_276),
    ("chr5", 180_915_260),
    ("chr6", 171_115_067),
    ("chr7", 159_138_663),
    ("chr8", 146_364_022),
    ("chr9", 141_213_431),
    ("chr10", 135_534_747),
    ("chr11", 135_006_516),
    ("chr12", 133_851_895),
    ("chr13", 115_169_878),
    ("chr14", 107_349_540),
    ("chr15", 102_531_392),
    ("chr16", 90_354_753),
    ("chr17", 81_195_210),
    ("chr18", 78_077_248),
    ("chr19", 59_128_983),
    ("chr20", 63_025_520),
    ("chr21", 48_129_895),
    ("chr22", 51_304_566),
    ("chrX", 155_270_560),
    ("chrY", 59_373_566),
    ("chrM", 16_569),
];

/// The shortest scaled contig: a 300 bp fragment, a few kilobases of
/// duplication and room around them.
pub const MIN_CONTIG: u64 = 2_000;

/// Mean GC of the human genome.
pub const GC: f64 = 0.41;

#[derive(Debug, Clone)]
pub struct Contig {
    pub name: String,
    pub seq: Vec<u8>,
}

/// A segmental duplication: `src_len` bases of `src` copied (maybe
/// reverse complemented and slightly mutated, so `len` long) over `dst`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SegDup {
    pub src: (usize, usize),
    pub src_len: usize,
    pub dst: (usize, usize),
    pub len: usize,
    pub reverse: bool,
    pub divergence: f64,
}

#[derive(Debug, Clone)]
pub struct Genome {
    pub contigs: Vec<Contig>,
    pub segdups: Vec<SegDup>,
}

impl Genome {
    pub fn len(&self) -> u64 {
        self.contigs.iter().map(|c| c.seq.len() as u64).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fraction of G and C among the A, C, G, T bases.
    pub fn gc(&self) -> f64 {
        let (mut gc, mut all) = (0u64, 0u64);
        for c in &self.contigs {
            for b in &c.seq {
                match b {
                    b'G' | b'C' => {
                        gc += 1;
                        all += 1
                    }
                    b'A' | b'T' => all += 1,
                    _ => {}
                }
            }
        }
        gc as f64 / all.max(1) as f64
    }
}

/// The first `contigs` names of [`HG19`] with their lengths at `scale`.
pub fn contig_lengths(scale: f64, contigs: usize) -> Vec<(&'static str, usize)> {
    HG19.iter()
        .take(contigs)
        .map(|&(name, len)| {
            let len = if name == "chrM" {
                len
            } else {
                ((len as f64 * scale).round() as u64).max(MIN_CONTIG)
            };
            (name, len as usize)
        })
        .collect()
}

/// A repeat family: a random consensus, copies at `per_mb` per megabase,
/// each `divergence` (a range) away from it.
struct Family {
    len: usize,
    per_mb: f64,
    divergence: (f64, f64),
    /// Copies keep only a random 3' part (as most LINE-1 copies are
    /// 5'-truncated).
    truncated: bool,
    /// Fraction of copies that are young: 0.5-2 % diverged, so reads in
    /// them map ambiguously.
    young: f64,
}

/// Alu-like, L1-like, MIR-like and ERV-like families: together about 15 %
/// of the genome (real: ~45 %, most of it too old to confuse a mapper).
const FAMILIES: [Family; 4] = [
    Family {
        len: 300,
        per_mb: 200.0,
        divergence: (0.03, 0.15),
        truncated: false,
        young: 0.05,
    },
    Family {
        len: 6000,
        per_mb: 40.0,
        divergence: (0.05, 0.20),
        truncated: true,
        young: 0.03,
    },
    Family {
        len: 260,
        per_mb: 100.0,
        divergence: (0.15, 0.30),
        truncated: false,
        young: 0.0,
    },
    Family {
        len: 1000,
        per_mb: 10.0,
        divergence: (0.04, 0.15),
        truncated: false,
        young: 0.05,
    },
];

/// Fraction of the nuclear genome covered by segmental duplications
/// (human: ~5 %).
pub const SEGDUP_FRACTION: f64 = 0.05;

/// Builds the genome of `lengths` from `rng`.
pub fn build(lengths: &[(&str, usize)], rng: &mut ChaCha8Rng) -> Genome {
    let mut contigs: Vec<Contig> = lengths
        .iter()
        .map(|&(name, len)| Contig {
            name: name.to_string(),
            seq: background(len, rng),
        })
        .collect();
    // chrM has no nuclear repeats: only the nuclear contigs get them.
    let nuclear = contigs
        .iter()
        .position(|c| c.name == "chrM")
        .unwrap_or(contigs.len());
    for c in contigs[..nuclear].iter_mut() {
        add_microsatellites(&mut c.seq, rng);
    }
    for f in &FAMILIES {
        add_family(&mut contigs[..nuclear], f, rng);
    }
    let segdups = add_segdups(&mut contigs, rng);
    Genome { contigs, segdups }
}

/// Random sequence whose GC varies around [`GC`] in 5 kb blocks (as
/// isochores do), with CpG depleted (methylated C in CpG mutates away).
fn background(len: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut seq = Vec::with_capacity(len);
    let mut gc = GC;
    while seq.len() < len {
        if seq.len() % 5000 == 0 {
            // + 0.006: CpG depletion removes about that much G.
            gc = (GC + 0.006 + 0.03 * normal(rng)).clamp(0.30, 0.55);
        }
        let mut b = random_base(gc, rng);
        if b == b'G' && seq.last() == Some(&b'C') && rng.random_bool(0.7) {
            b = random_base(gc, rng);
        }
        seq.push(b);
    }
    seq
}

fn random_base(gc: f64, rng: &mut ChaCha8Rng) -> u8 {
    let u: f64 = rng.random();
    if u < gc / 2.0 {
        b'G'
    } else if u < gc {
        b'C'
    } else if u < gc + (1.0 - gc) / 2.0 {
        b'A'
    } else {
        b'T'
    }
}

/// Short tandem repeats ((CA)n, (A)n, ...) every ~20 kb: they are where
/// real indel errors and calls cluster.
fn add_microsatellites(seq: &mut [u8], rng: &mut ChaCha8Rng) {
    let mut pos = exponential(rng, 20_000.0) as usize;
    while pos + 100 < seq.len() {
        let unit: Vec<u8> = (0..rng.random_range(1..=4))
            .map(|_| random_base(GC, rng))
            .collect();
        let len = rng.random_range(15..=60);
        for i in 0..len {
            seq[pos + i] = unit[i % unit.len()];
        }
        pos += len + exponential(rng, 20_000.0) as usize;
    }
}

fn add_family(contigs: &mut [Contig], f: &Family, rng: &mut ChaCha8Rng) {
    let consensus: Vec<u8> = (0..f.len).map(|_| random_base(GC, rng)).collect();
    for c in contigs.iter_mut() {
        let n = (c.seq.len() as f64 / 1e6 * f.per_mb).round() as usize;
        for _ in 0..n {
            let part = if f.truncated {
                let keep = (lognormal(rng, 900.0, 0.8) as usize).clamp(100, f.len);
                &consensus[f.len - keep..]
            } else {
                &consensus[..]
            };
            let div = if rng.random_bool(f.young) {
                rng.random_range(0.005..0.02)
            } else {
                rng.random_range(f.divergence.0..f.divergence.1)
            };
            let copy = oriented(mutate(part, div, rng), rng.random_bool(0.5));
            if copy.len() + 10 < c.seq.len() {
                let at = rng.random_range(0..c.seq.len() - copy.len());
                c.seq[at..at + copy.len()].copy_from_slice(&copy);
            }
        }
    }
}

fn add_segdups(contigs: &mut [Contig], rng: &mut ChaCha8Rng) -> Vec<SegDup> {
    // chrM takes no part: its duplications (NUMTs) are a story of their own.
    let nuclear: Vec<usize> = (0..contigs.len())
        .filter(|&i| contigs[i].name != "chrM")
        .collect();
    if nuclear.is_empty() {
        return Vec::new();
    }
    let total: usize = nuclear.iter().map(|&i| contigs[i].seq.len()).sum();
    let weights: Vec<usize> = nuclear.iter().map(|&i| contigs[i].seq.len()).collect();
    let mut covered = 0.0;
    let mut out = Vec::new();
    let mut tries = 0;
    while covered < SEGDUP_FRACTION * total as f64 && tries < 10_000 {
        tries += 1;
        let dst = nuclear[pick_weighted(&weights, rng)];
        // 40 % of human segmental duplications are interchromosomal.
        let src = if nuclear.len() > 1 && rng.random_bool(0.4) {
            nuclear[pick_weighted(&weights, rng)]
        } else {
            dst
        };
        let room = contigs[src].seq.len().min(contigs[dst].seq.len()) / 8;
        if room < 500 {
            continue;
        }
        let len = rng.random_range(500..=room.min(10_000));
        let s = rng.random_range(0..contigs[src].seq.len() - len);
        let d = rng.random_range(0..contigs[dst].seq.len() - len);
        if src == dst && s.abs_diff(d) < len {
            continue;
        }
        let divergence = rng.random_range(0.001..0.015);
        let reverse = rng.random_bool(0.5);
        let copy = oriented(
            mutate(&contigs[src].seq[s..s + len], divergence, rng),
            reverse,
        );
        let n = copy.len().min(contigs[dst].seq.len() - d);
        contigs[dst].seq[d..d + n].copy_from_slice(&copy[..n]);
        covered += n as f64;
        out.push(SegDup {
            src: (src, s),
            src_len: len,
            dst: (dst, d),
            len: n,
            reverse,
            divergence,
        });
    }
    out
}

/// An index drawn with probability proportional to `weights`.
pub fn pick_weighted(weights: &[usize], rng: &mut ChaCha8Rng) -> usize {
    let total: usize = weights.iter().sum();
    if total == 0 {
        return 0;
    }
    let mut x = rng.random_range(0..total);
    for (i, &w) in weights.iter().enumerate() {
        if x < w {
            return i;
        }
        x -= w;
    }
    weights.len() - 1
}

/// `seq` with a fraction `div` of its bases changed: mostly substitutions,
/// a tenth single-base insertions and deletions.
fn mutate(seq: &[u8], div: f64, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(seq.len() + 8);
    for &b in seq {
        if !rng.random_bool(div) {
            out.push(b);
            continue;
        }
        match rng.random_range(0..20) {
            0 => {} // deletion
            1 => {
                out.push(b);
                out.push(random_base(GC, rng));
            }
            _ => out.push(other_base(b, rng)),
        }
    }
    out
}

/// A base other than `b`, uniformly.
pub fn other_base(b: u8, rng: &mut ChaCha8Rng) -> u8 {
    let others: Vec<u8> = b"ACGT".iter().copied().filter(|&x| x != b).collect();
    others[rng.random_range(0..others.len())]
}

fn oriented(seq: Vec<u8>, reverse: bool) -> Vec<u8> {
    if reverse { revcomp(&seq) } else { seq }
}

pub fn complement(b: u8) -> u8 {
    match b {
        b'A' => b'T',
        b'C' => b'G',
        b'G' => b'C',
        b'T' => b'A',
        other => other,
    }
}

pub fn revcomp(seq: &[u8]) -> Vec<u8> {
    seq.iter().rev().map(|&b| complement(b)).collect()
}

#[cfg(test)]
mod tests {
    use super::super::rng::{Stream, stream};
    use super::*;

    #[test]
    fn lengths_follow_hg19_with_chrm_unscaled_and_a_floor() {
        let l = contig_lengths(1.0 / 1000.0, 25);
        assert_eq!(l.len(), 25);
        assert_eq!(l[0], ("chr1", 249_251));
        assert_eq!(l[24], ("chrM", 16_569));
        let tiny = contig_lengths(1e-6, 25);
        assert!(tiny.iter().all(|&(_, n)| n >= MIN_CONTIG as usize));
        assert_eq!(contig_lengths(1e-3, 2).len(), 2);
    }

    #[test]
    fn gc_is_near_41_percent_and_segdups_are_near_identical_copies() {
        let g = build(
            &contig_lengths(1.0 / 4000.0, 25),
            &mut stream(5, Stream::Genome, 0),
        );
        let gc = g.gc();
        assert!((gc - GC).abs() < 0.02, "GC {gc}");
        assert!(!g.segdups.is_empty());
        assert!(g.segdups.iter().any(|s| s.src.0 != s.dst.0), "none across");
        // The last one written cannot have been overwritten since.
        let s = g.segdups.last().unwrap();
        let src = &g.contigs[s.src.0].seq[s.src.1..s.src.1 + s.src_len];
        let src = if s.reverse {
            revcomp(src)
        } else {
            src.to_vec()
        };
        let dst = &g.contigs[s.dst.0].seq[s.dst.1..s.dst.1 + s.len];
        // Indels shift the tail, so compare the first 60 bases (random
        // sequence would match at ~15).
        let same = src.iter().zip(dst).take(60).filter(|(a, b)| a == b).count();
        assert!(same >= 50, "{same}/60 equal");
    }
}
