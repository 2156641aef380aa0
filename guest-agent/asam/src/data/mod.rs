//! The seeded, realistic data generator behind `prepare`: a human-like
//! reference ([`genome`]), the sample's two haplotypes and their truth VCF
//! ([`variants`], [`vcf`]), exon targets in WES mode ([`targets`]), read
//! pairs with a quality and error model ([`quality`]) in several read
//! groups with PCR and optical duplicates ([`reads`]), size presets
//! ([`sizes`]), bwa ([`align`]) and the checks of a user's files
//! ([`input`]). `crate::prepare` caches the result.
//!
//! Everything is a function of the [`DataSpec`] (seed included) and
//! [`GENERATOR_VERSION`]: each part draws from its own random stream
//! ([`rng`]), so the files are byte-identical run to run.

pub mod align;
pub mod fastx;
pub mod genome;
pub mod input;
pub mod quality;
pub mod reads;
pub mod rng;
pub mod sizes;
pub mod targets;
pub mod variants;
pub mod vcf;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{AsamError, Result};
use genome::Genome;
use rng::{Stream, stream};
use targets::Interval;
use variants::{Haplotype, Site, Variant};

/// Bumped whenever the generator's output for a given spec changes; part
/// of the cache key.
pub const GENERATOR_VERSION: u32 = 3;

/// Whole genome, or exome (the vocabulary's: `prepare`'s `--mode`).
pub use testbed_vocab::request::asam::Mode;

/// Everything a generated data set depends on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSpec {
    /// A label ("tiny", ...); part of the cache directory name.
    pub name: String,
    /// Contig lengths as a fraction of hg19's (chrM excepted, see genome).
    pub scale: f64,
    /// How many of chr1..22, X, Y, M (in that order) to make.
    pub contigs: u32,
    /// Mean read coverage (duplicates included) of the genome, or in WES
    /// mode of the targets.
    pub coverage: f64,
    /// 100 or 150 (any of 50..=250 is accepted).
    pub read_length: u32,
    pub fragment_mean: f64,
    pub fragment_sd: f64,
    /// Fraction of all pairs that are duplicates of another pair (what
    /// Picard reports as PERCENT_DUPLICATION).
    pub dup_rate: f64,
    /// Fraction of the duplicates that are optical.
    pub optical_fraction: f64,
    pub libraries: u32,
    pub lanes: u32,
    pub mode: Mode,
    /// WES: fraction of fragments not captured from a target.
    pub off_target: f64,
    /// Fraction of fragments that are chimeras (read 2 from elsewhere).
    pub chimera_rate: f64,
    /// Fraction of fragments from no contig of the reference (unmapped).
    pub contaminant_rate: f64,
    /// Fraction of fragments shorter than a read (adapter read-through).
    pub short_fragment_rate: f64,
    /// SM of every read group and the truth VCF's sample column.
    pub sample: String,
    pub seed: u64,
}

impl DataSpec {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(AsamError::Invalid(format!("data set {}: {m}", self.name)));
        let label_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        };
        if !label_ok(&self.name) {
            return bad("name: use 1-64 letters, digits, - _ .");
        }
        if !label_ok(&self.sample) {
            return bad("sample: use 1-64 letters, digits, - _ .");
        }
        if !(self.scale > 0.0 && self.scale <= 1.0) {
            return bad("scale: > 0 and <= 1");
        }
        if !(1..=25).contains(&self.contigs) {
            return bad("contigs: 1..=25 (chr1..22, X, Y, M)");
        }
        if !(self.coverage > 0.0 && self.coverage <= 1000.0) {
            return bad("coverage: > 0 and <= 1000");
        }
        if !(50..=250).contains(&self.read_length) {
            return bad("read length: 50..=250");
        }
        let mean_ok = (f64::from(self.read_length)..=1000.0).contains(&self.fragment_mean);
        if !mean_ok || !(0.0..=200.0).contains(&self.fragment_sd) {
            return bad("fragment length: mean from the read length to 1000, sd 0..=200");
        }
        if !(0.0..0.9).contains(&self.dup_rate) {
            return bad("dup rate: 0 <= r < 0.9");
        }
        if !(0.0..=1.0).contains(&self.optical_fraction) || !(0.0..1.0).contains(&self.off_target) {
            return bad("optical fraction: 0..=1; off-target: 0 <= f < 1");
        }
        if [
            self.chimera_rate,
            self.contaminant_rate,
            self.short_fragment_rate,
        ]
        .iter()
        .any(|r| !(0.0..=0.2).contains(r))
        {
            return bad("chimera, contaminant and short-fragment rates: 0..=0.2");
        }
        if !(1..=8).contains(&self.libraries) || !(1..=8).contains(&self.lanes) {
            return bad("libraries and lanes: 1..=8 each");
        }
        Ok(())
    }

    /// `chromosome_length` as the length of chr1 (the old `prepare` flag).
    pub fn set_chr1_length(&mut self, len: u64) {
        self.scale = len as f64 / genome::HG19[0].1 as f64;
    }
}

/// The sample's truth, all in memory.
#[derive(Debug, Clone)]
pub struct Truth {
    pub genome: Genome,
    pub targets: Vec<Interval>,
    pub variants: Vec<Variant>,
    pub haplotypes: [Haplotype; 2],
    pub known_sites: Vec<Site>,
}

/// Builds the reference, targets, variants and haplotypes of `spec`.
pub fn truth(spec: &DataSpec) -> Truth {
    let lengths = genome::contig_lengths(spec.scale, spec.contigs as usize);
    let genome = genome::build(&lengths, &mut stream(spec.seed, Stream::Genome, 0));
    let targets = match spec.mode {
        Mode::Wgs => Vec::new(),
        Mode::Wes => targets::make(&genome, &mut stream(spec.seed, Stream::Targets, 0)),
    };
    let variants = variants::make(&genome, &mut stream(spec.seed, Stream::Variants, 0));
    let haplotypes = variants::haplotypes(&genome, &variants);
    let known_sites = variants::known_sites(
        &genome,
        &variants,
        &mut stream(spec.seed, Stream::KnownSites, 0),
    );
    Truth {
        genome,
        targets,
        variants,
        haplotypes,
        known_sites,
    }
}

/// Variant counts of the truth set.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct VariantStats {
    pub snps: u64,
    pub indels: u64,
    pub het: u64,
    pub hom: u64,
    pub known_sites: u64,
}

impl Truth {
    pub fn stats(&self) -> VariantStats {
        let mut s = VariantStats {
            known_sites: self.known_sites.len() as u64,
            ..Default::default()
        };
        for v in &self.variants {
            if v.is_snp() {
                s.snps += 1
            } else {
                s.indels += 1
            }
            if v.is_het() { s.het += 1 } else { s.hom += 1 }
        }
        s
    }
}

/// File names inside a data set directory.
pub const REFERENCE: &str = "ref.fa";
pub const TRUTH_VCF: &str = "truth.vcf";
pub const KNOWN_SITES: &str = "known_sites.vcf";
pub const TARGETS_BED: &str = "targets.bed";
pub const DUPLICATES_TSV: &str = "duplicates.tsv";
pub const ALIGNED_SAM: &str = "aligned.sam";

/// What [`generate`] wrote.
#[derive(Debug, Clone)]
pub struct Generated {
    pub reference: PathBuf,
    pub truth_vcf: PathBuf,
    pub known_sites: PathBuf,
    pub targets_bed: Option<PathBuf>,
    pub duplicates_tsv: PathBuf,
    pub read_groups: Vec<reads::ReadGroupFiles>,
    pub reads: reads::ReadCounts,
    pub variants: VariantStats,
}

/// Writes the data set of `spec` (everything but the alignment) to `dir`.
pub fn generate(spec: &DataSpec, dir: &Path) -> Result<Generated> {
    spec.validate()?;
    std::fs::create_dir_all(dir).map_err(|e| AsamError::io(dir, e))?;
    let t = truth(spec);
    let reference = dir.join(REFERENCE);
    fastx::write_fasta(&reference, &t.genome)?;
    let truth_vcf = dir.join(TRUTH_VCF);
    vcf::write_truth(&truth_vcf, &t.genome, &t.variants, REFERENCE, &spec.sample)?;
    let known_sites = dir.join(KNOWN_SITES);
    vcf::write_known_sites(&known_sites, &t.genome, &t.known_sites, REFERENCE)?;
    let targets_bed = if spec.mode == Mode::Wes {
        let p = dir.join(TARGETS_BED);
        targets::write_bed(&p, &t.genome, &t.targets)?;
        Some(p)
    } else {
        None
    };
    let (read_groups, counts) = reads::simulate(spec, &t, dir)?;
    Ok(Generated {
        reference,
        truth_vcf,
        known_sites,
        targets_bed,
        duplicates_tsv: dir.join(DUPLICATES_TSV),
        read_groups,
        reads: counts,
        variants: t.stats(),
    })
}
