//! The `prepare` subcommand's flags: a size preset, overrides of any of
//! its parameters, or the user's files (the `paper` size).

use std::path::PathBuf;

use super::{DataSpec, Mode, sizes};
use crate::prepare::{Prepared, UserInput, prepare_generated, prepare_user};
use crate::{AsamError, Result};

#[derive(Debug, Clone, clap::Args)]
pub struct PrepareArgs {
    /// The cache root; data sets go in <dir>/<name>-<key>.
    #[arg(long)]
    pub dir: PathBuf,
    /// Size preset: tiny, small, medium, paper (default: --name when it
    /// names one, else tiny).
    #[arg(long)]
    pub size: Option<String>,
    /// Label of the data set (the cache directory's prefix); default the
    /// size.
    #[arg(long)]
    pub name: Option<String>,
    /// Contig lengths as a fraction of hg19's.
    #[arg(long)]
    pub scale: Option<f64>,
    /// How many of chr1..22, X, Y, M to make.
    #[arg(long, alias = "chromosomes")]
    pub contigs: Option<u32>,
    /// Length of chr1 (sets --scale; the others follow hg19).
    #[arg(long)]
    pub chromosome_length: Option<u64>,
    #[arg(long)]
    pub coverage: Option<f64>,
    /// 100 or 150.
    #[arg(long)]
    pub read_length: Option<u32>,
    /// Fraction of all pairs that are duplicates.
    #[arg(long, alias = "dup-rate")]
    pub dup_fraction: Option<f64>,
    /// Fraction of duplicates that are optical.
    #[arg(long)]
    pub optical_fraction: Option<f64>,
    #[arg(long)]
    pub libraries: Option<u32>,
    #[arg(long)]
    pub lanes: Option<u32>,
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// WES: fraction of fragments from outside the targets.
    #[arg(long)]
    pub off_target: Option<f64>,
    /// Fraction of chimeric fragments (read 2 from elsewhere).
    #[arg(long)]
    pub chimera_rate: Option<f64>,
    /// Fraction of fragments from outside the reference (unmapped pairs).
    #[arg(long)]
    pub contaminant_rate: Option<f64>,
    /// Fraction of fragments shorter than a read (adapter in the read).
    #[arg(long)]
    pub short_fragment_rate: Option<f64>,
    #[arg(long)]
    pub sample: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// bwa mem -t (the SAM does not depend on it).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// paper: the reference FASTA.
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// paper: read 1 FASTQ (may be .gz).
    #[arg(long)]
    pub reads1: Option<PathBuf>,
    /// paper: read 2 FASTQ (may be .gz).
    #[arg(long)]
    pub reads2: Option<PathBuf>,
    /// paper: the truth VCF, if any.
    #[arg(long)]
    pub truth_vcf: Option<PathBuf>,
    /// paper: known sites VCF for BQSR, if any.
    #[arg(long)]
    pub known_sites: Option<PathBuf>,
    /// paper: capture targets BED (WES), if any.
    #[arg(long)]
    pub targets_bed: Option<PathBuf>,
    /// paper: LB of the read group.
    #[arg(long, default_value = "lib1")]
    pub library: String,
}

impl PrepareArgs {
    fn size(&self) -> &str {
        match &self.size {
            Some(s) => s,
            None => match &self.name {
                Some(n) if sizes::NAMES.contains(&n.as_str()) => n,
                _ => "tiny",
            },
        }
    }

    fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.size().to_string())
    }

    /// The generator's spec: the preset with every given flag applied.
    pub fn spec(&self) -> Result<DataSpec> {
        let mut s = sizes::preset(self.size()).ok_or_else(|| {
            AsamError::Invalid(format!(
                "unknown size {:?}; known: {}",
                self.size(),
                sizes::NAMES.join(", ")
            ))
        })?;
        s.name = self.label();
        s.seed = self.seed;
        if let Some(x) = self.scale {
            s.scale = x;
        }
        if let Some(x) = self.chromosome_length {
            s.set_chr1_length(x);
        }
        macro_rules! set {
            ($($f:ident => $g:ident),*) => {$(if let Some(x) = self.$f.clone() { s.$g = x; })*};
        }
        set!(contigs => contigs, coverage => coverage, read_length => read_length,
            dup_fraction => dup_rate, optical_fraction => optical_fraction,
            libraries => libraries, lanes => lanes, mode => mode,
            off_target => off_target, chimera_rate => chimera_rate,
            contaminant_rate => contaminant_rate,
            short_fragment_rate => short_fragment_rate, sample => sample);
        s.validate()?;
        Ok(s)
    }

    /// The user's files, when given (or the size is `paper`).
    pub fn user_input(&self) -> Result<Option<UserInput>> {
        if self.size() != "paper" && self.reads1.is_none() && self.reference.is_none() {
            return Ok(None);
        }
        let need = |p: &Option<PathBuf>, flag: &str| {
            p.clone().ok_or_else(|| {
                AsamError::Invalid(format!(
                    "paper size: --{flag} is required (the user's files)"
                ))
            })
        };
        Ok(Some(UserInput {
            name: self.label(),
            reference: need(&self.reference, "reference")?,
            reads1: need(&self.reads1, "reads1")?,
            reads2: need(&self.reads2, "reads2")?,
            truth_vcf: self.truth_vcf.clone(),
            known_sites: self.known_sites.clone(),
            targets_bed: self.targets_bed.clone(),
            sample: self.sample.clone().unwrap_or_else(|| "sample".into()),
            library: self.library.clone(),
        }))
    }
}

/// Runs `prepare`: the user's files if given, else the generator.
pub fn run(a: &PrepareArgs) -> Result<Prepared> {
    match a.user_input()? {
        Some(u) => prepare_user(&u, &a.dir, a.threads),
        None => prepare_generated(&a.spec()?, &a.dir, a.threads),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: PrepareArgs,
    }

    fn parse(args: &[&str]) -> PrepareArgs {
        Cli::parse_from(std::iter::once("prepare").chain(args.iter().copied())).a
    }

    #[test]
    fn the_old_flags_still_work_and_a_size_names_the_set() {
        // What the agent's asam-preproc workload passes.
        let a = parse(&[
            "--dir",
            "/d",
            "--name",
            "large",
            "--chromosomes",
            "2",
            "--chromosome-length",
            "20000",
            "--coverage",
            "3",
            "--dup-fraction",
            "0.2",
            "--seed",
            "7",
            "--threads",
            "2",
        ]);
        let s = a.spec().unwrap();
        assert_eq!((s.name.as_str(), s.contigs, s.seed), ("large", 2, 7));
        assert_eq!((s.coverage, s.dup_rate), (3.0, 0.2));
        let chr1 = super::super::genome::contig_lengths(s.scale, 1)[0].1;
        assert_eq!(chr1, 20_000);
        assert!(a.user_input().unwrap().is_none());

        let s = parse(&["--dir", "/d", "--size", "small", "--mode", "wes"])
            .spec()
            .unwrap();
        assert_eq!(s.name, "small");
        assert_eq!(s.mode, Mode::Wes);
        assert_eq!(s.scale, sizes::preset("small").unwrap().scale);

        let e = parse(&["--dir", "/d", "--size", "paper", "--reads1", "a.fq"])
            .user_input()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--reference"), "{e}");
        let e = parse(&["--dir", "/d", "--size", "huge"])
            .spec()
            .unwrap_err();
        assert!(e.to_string().contains("unknown size"), "{e}");
    }
}
