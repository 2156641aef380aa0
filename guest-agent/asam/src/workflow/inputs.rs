//! The workflow's inputs from a prepared data set (`prepared.json`): the
//! reference, the truth and known-sites VCFs, the targets, and the one
//! aligner command every placement runs.
//!
//! The data set keeps one FASTQ pair per read group. For the timed align
//! stage to be one SAM stream (pipes and the ArrowSAM writer read bwa's
//! stdout), the read groups are joined once, untimed, into one pair whose
//! read comments carry `RG:Z:<id>`: `bwa mem -C` copies the comment into
//! each record and `-H` adds every `@RG` line, which is what `-R` does for
//! one group.

use std::ffi::OsString;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use testbed_vocab::asam::Prepared;

use super::chain::Step;
use crate::{AsamError, Result};

pub struct Inputs {
    pub align: Step,
    pub reference: PathBuf,
    pub known_sites: Option<PathBuf>,
    pub truth: Option<PathBuf>,
    pub targets: Option<PathBuf>,
}

/// File names of the joined read groups, in the data set's directory.
const JOINED: [&str; 2] = ["workflow.R1.fq", "workflow.R2.fq"];
const RG_HEADER: &str = "workflow.rg.txt";

impl Inputs {
    pub fn read(prepared_json: &Path, threads: usize) -> Result<Inputs> {
        let text =
            std::fs::read_to_string(prepared_json).map_err(|e| AsamError::io(prepared_json, e))?;
        let p: Prepared = serde_json::from_str(&text).map_err(|e| {
            AsamError::Invalid(format!(
                "{}: not a prepared.json: {e}",
                prepared_json.display()
            ))
        })?;
        if p.read_groups.is_empty() {
            return Err(AsamError::Invalid(format!(
                "{}: no read groups (made by an older testbed-asam prepare? run it again)",
                prepared_json.display()
            )));
        }
        let dir = p
            .dir
            .clone()
            .or_else(|| prepared_json.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let (r1, r2, header) = joined(&p, &dir)?;
        let align = Step::new("bwa", align_argv(&p.reference, &r1, &r2, &header, threads));
        Ok(Inputs {
            align,
            reference: p.reference,
            known_sites: p.known_sites,
            truth: p.truth_vcf,
            targets: p.targets_bed,
        })
    }
}

/// `bwa mem` over the joined pair: `-K` fixed so the output does not
/// depend on the thread count (as the data set's own alignment).
pub fn align_argv(
    reference: &Path,
    r1: &Path,
    r2: &Path,
    rg_header: &Path,
    threads: usize,
) -> Vec<OsString> {
    let mut argv: Vec<OsString> = [
        "bwa",
        "mem",
        "-K",
        &crate::data::align::BATCH_BASES.to_string(),
        "-v",
        "1",
        "-C",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    argv.extend([
        "-t".into(),
        threads.max(1).to_string().into(),
        "-H".into(),
        rg_header.as_os_str().to_owned(),
        reference.as_os_str().to_owned(),
        r1.as_os_str().to_owned(),
        r2.as_os_str().to_owned(),
    ]);
    argv
}

/// The joined FASTQ pair and the `@RG` header file, made once per data set
/// (into temporary names, renamed when complete).
fn joined(p: &Prepared, dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf)> {
    let r1 = dir.join(JOINED[0]);
    let r2 = dir.join(JOINED[1]);
    let header = dir.join(RG_HEADER);
    if r1.is_file() && r2.is_file() && header.is_file() {
        return Ok((r1, r2, header));
    }
    let lines: Vec<String> = p.read_groups.iter().map(|g| g.header_line()).collect();
    write_atomically(&header, |w| {
        for l in &lines {
            writeln!(w, "{l}")?;
        }
        Ok(())
    })?;
    for (out, mate) in [(&r1, 1), (&r2, 2)] {
        write_atomically(out, |w| {
            for g in &p.read_groups {
                let input = if mate == 1 { &g.reads1 } else { &g.reads2 };
                tag_reads(input, &g.id, w)?;
            }
            Ok(())
        })?;
    }
    Ok((r1, r2, header))
}

/// Copies a FASTQ with each header's comment replaced by `RG:Z:<id>`.
fn tag_reads(input: &Path, rg: &str, w: &mut dyn Write) -> std::io::Result<()> {
    let r = crate::data::fastx::open(input).map_err(|e| std::io::Error::other(e.to_string()))?;
    for (i, line) in r.lines().enumerate() {
        let line = line?;
        if i % 4 == 0 {
            let name = line.split_ascii_whitespace().next().unwrap_or(&line);
            writeln!(w, "{name}\tRG:Z:{rg}")?;
        } else {
            writeln!(w, "{line}")?;
        }
    }
    Ok(())
}

fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| AsamError::io(dir, e))?;
    let mut w = BufWriter::new(tmp.as_file());
    fill(&mut w)
        .and_then(|_| w.flush())
        .map_err(|e| AsamError::io(path, e))?;
    drop(w);
    tmp.persist(path)
        .map_err(|e| AsamError::io(path, e.error))?;
    Ok(())
}
