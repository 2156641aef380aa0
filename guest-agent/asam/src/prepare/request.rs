//! The `prepare` subcommand's request (its flags, or the agent's JSON): a
//! size preset, overrides of any of its parameters, or the user's files
//! (the `paper` size).

use std::path::PathBuf;

pub use testbed_vocab::request::asam::PrepareRequest;

use super::{Prepared, UserInput, prepare_generated, prepare_user};
use crate::data::{DataSpec, sizes};
use crate::{AsamError, Result};

fn size(a: &PrepareRequest) -> &str {
    match &a.size {
        Some(s) => s,
        None => match &a.name {
            Some(n) if sizes::NAMES.contains(&n.as_str()) => n,
            _ => "tiny",
        },
    }
}

fn label(a: &PrepareRequest) -> String {
    a.name.clone().unwrap_or_else(|| size(a).to_string())
}

/// The generator's spec: the preset with every given field applied.
pub fn spec(a: &PrepareRequest) -> Result<DataSpec> {
    let mut s = sizes::preset(size(a)).ok_or_else(|| {
        AsamError::Invalid(format!(
            "unknown size {:?}; known: {}",
            size(a),
            sizes::NAMES.join(", ")
        ))
    })?;
    s.name = label(a);
    s.seed = a.seed;
    if let Some(x) = a.scale {
        s.scale = x;
    }
    if let Some(x) = a.chromosome_length {
        s.set_chr1_length(x);
    }
    macro_rules! set {
            ($($f:ident => $g:ident),*) => {$(if let Some(x) = a.$f.clone() { s.$g = x; })*};
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
pub fn user_input(a: &PrepareRequest) -> Result<Option<UserInput>> {
    if size(a) != "paper" && a.reads1.is_none() && a.reference.is_none() {
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
        name: label(a),
        reference: need(&a.reference, "reference")?,
        reads1: need(&a.reads1, "reads1")?,
        reads2: need(&a.reads2, "reads2")?,
        truth_vcf: a.truth_vcf.clone(),
        known_sites: a.known_sites.clone(),
        targets_bed: a.targets_bed.clone(),
        sample: a.sample.clone().unwrap_or_else(|| "sample".into()),
        library: a.library.clone(),
    }))
}

/// Runs `prepare`: the user's files if given, else the generator.
pub fn run(a: &PrepareRequest) -> Result<Prepared> {
    match user_input(a)? {
        Some(u) => prepare_user(&u, &a.dir, a.threads),
        None => prepare_generated(&spec(a)?, &a.dir, a.threads),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::data::Mode;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: PrepareRequest,
    }

    fn parse(args: &[&str]) -> PrepareRequest {
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
        let s = spec(&a).unwrap();
        assert_eq!((s.name.as_str(), s.contigs, s.seed), ("large", 2, 7));
        assert_eq!((s.coverage, s.dup_rate), (3.0, 0.2));
        let chr1 = crate::data::genome::contig_lengths(s.scale, 1)[0].1;
        assert_eq!(chr1, 20_000);
        assert!(user_input(&a).unwrap().is_none());

        let s = spec(&parse(&["--dir", "/d", "--size", "small", "--mode", "wes"])).unwrap();
        assert_eq!(s.name, "small");
        assert_eq!(s.mode, Mode::Wes);
        assert_eq!(s.scale, sizes::preset("small").unwrap().scale);

        let e = user_input(&parse(&[
            "--dir", "/d", "--size", "paper", "--reads1", "a.fq",
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("--reference"), "{e}");
        let e = spec(&parse(&["--dir", "/d", "--size", "huge"])).unwrap_err();
        assert!(e.to_string().contains("unknown size"), "{e}");
    }
}
