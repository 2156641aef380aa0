//! WES mode: exon-like capture targets, written as a BED file.
//!
//! Exons come in genes of 3-20, 50-2000 bp long (log-normal, median
//! 130 bp) with introns of ~0.3-10 kb between them, on the autosomes and
//! chrX. Their number scales with the genome (hg19: ~180 000 targeted
//! exons, 1-2 % of the genome), with a floor so a tiny genome has some.

use std::io::Write;
use std::path::Path;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::genome::{Genome, pick_weighted};
use super::rng::lognormal;
use crate::{AsamError, Result};

/// A half-open interval on contig `contig` (an index into the genome).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Interval {
    pub contig: usize,
    pub start: usize,
    pub end: usize,
}

impl Interval {
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// Exons per base of genome: ~180 000 in 3.1 Gb.
const EXONS_PER_BASE: f64 = 180_000.0 / 3.1e9;

/// Sorted, non-overlapping exon targets on `genome`.
pub fn make(genome: &Genome, rng: &mut ChaCha8Rng) -> Vec<Interval> {
    let eligible: Vec<usize> = (0..genome.contigs.len())
        .filter(|&i| !matches!(genome.contigs[i].name.as_str(), "chrY" | "chrM"))
        .collect();
    if eligible.is_empty() {
        return Vec::new();
    }
    let weights: Vec<usize> = eligible
        .iter()
        .map(|&i| genome.contigs[i].seq.len())
        .collect();
    let wanted = ((genome.len() as f64 * EXONS_PER_BASE).round() as usize).max(40);
    let mut out: Vec<Interval> = Vec::new();
    let mut tries = 0;
    while out.len() < wanted && tries < 100 * wanted {
        tries += 1;
        let contig = eligible[pick_weighted(&weights, rng)];
        let len = genome.contigs[contig].seq.len();
        let mut pos = rng.random_range(0..len);
        let gene: Vec<Interval> = (0..rng.random_range(3..=20))
            .map(|_| {
                let exon = (lognormal(rng, 130.0, 0.6) as usize).clamp(50, 2000);
                let iv = Interval {
                    contig,
                    start: pos,
                    end: pos + exon,
                };
                pos = iv.end + (lognormal(rng, 1500.0, 1.0) as usize).clamp(300, 10_000);
                iv
            })
            .take_while(|iv| iv.end + 400 < len && iv.start > 400)
            .collect();
        // Genes do not overlap each other (nor come within a fragment).
        let clash = gene.iter().any(|g| {
            out.iter()
                .any(|o| o.contig == g.contig && o.start < g.end + 500 && g.start < o.end + 500)
        });
        if !clash {
            out.extend(gene);
        }
    }
    out.sort();
    out
}

/// `targets` as BED (0-based, half-open).
pub fn write_bed(path: &Path, genome: &Genome, targets: &[Interval]) -> Result<()> {
    let io = |e| AsamError::io(path, e);
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    for t in targets {
        writeln!(
            w,
            "{}\t{}\t{}",
            genome.contigs[t.contig].name, t.start, t.end
        )
        .map_err(io)?;
    }
    w.flush().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::super::genome::{build, contig_lengths};
    use super::super::rng::{Stream, stream};
    use super::*;

    #[test]
    fn targets_are_sorted_disjoint_and_exon_sized() {
        let g = build(
            &contig_lengths(1.0 / 4000.0, 25),
            &mut stream(2, Stream::Genome, 0),
        );
        let t = make(&g, &mut stream(2, Stream::Targets, 0));
        assert!(t.len() >= 40, "{}", t.len());
        assert!(
            t.windows(2).all(|w| w[0].contig < w[1].contig
                || (w[0].contig == w[1].contig && w[0].end < w[1].start))
        );
        assert!(t.iter().all(|i| (50..=2000).contains(&i.len())));
        let names: Vec<&str> = t
            .iter()
            .map(|i| g.contigs[i.contig].name.as_str())
            .collect();
        assert!(!names.contains(&"chrY") && !names.contains(&"chrM"));
    }
}
