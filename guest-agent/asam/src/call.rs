//! Variant calling on the workflow's final BAM with bcftools
//! (`mpileup | call -mv`) and freebayes, to a bgzipped, tabix-indexed VCF.
//!
//! Neither caller parallelises one region over threads (bcftools'
//! `--threads` only compresses), so `threads` workers each call whole
//! contigs (those with mapped reads, from `samtools idxstats`) and the
//! per-contig results are concatenated in header order with `bcftools
//! concat`, as freebayes-parallel does. The output is the same for any
//! thread count: each contig is called alone either way. bcftools runs
//! with `--no-version`, so its header holds no command line naming the
//! scratch directory.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::tools::{Program, SAMTOOLS};
use crate::{AsamError, Result};

pub const BCFTOOLS: Program = Program {
    name: "bcftools",
    package: "bcftools",
};
pub const FREEBAYES: Program = Program {
    name: "freebayes",
    package: "freebayes",
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Bcftools,
    Freebayes,
}

impl Caller {
    pub fn name(&self) -> &'static str {
        match self {
            Caller::Bcftools => "bcftools",
            Caller::Freebayes => "freebayes",
        }
    }
}

impl std::str::FromStr for Caller {
    type Err = AsamError;
    fn from_str(s: &str) -> Result<Caller> {
        match s {
            "bcftools" => Ok(Caller::Bcftools),
            "freebayes" => Ok(Caller::Freebayes),
            other => Err(AsamError::Invalid(format!(
                "unknown caller {other:?} (bcftools, freebayes)"
            ))),
        }
    }
}

/// Calls variants in a coordinate-sorted `bam` against `reference` and
/// writes `out` (bgzipped VCF, with a `.tbi` beside it). The reference gets
/// a `.fai` and the BAM a `.bai` if they have none.
pub fn call_variants(
    caller: Caller,
    reference: &Path,
    bam: &Path,
    out: &Path,
    threads: usize,
) -> Result<PathBuf> {
    ensure_fai(reference)?;
    ensure_bai(bam)?;
    let mut regions: Vec<Option<String>> = contigs_with_reads(bam)?.into_iter().map(Some).collect();
    if regions.is_empty() {
        // No mapped read: one run over the whole file writes the header.
        regions.push(None);
    }
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let work = private_dir(&parent)?;
    let parts = per_contig(&regions, threads, |i, contig| {
        let part = work.path().join(format!("part{i}.bcf"));
        match caller {
            Caller::Bcftools => bcftools_region(reference, bam, contig, &part)?,
            Caller::Freebayes => freebayes_region(reference, bam, contig, &part, work.path(), i)?,
        }
        Ok(part)
    })?;
    let mut args: Vec<String> = vec![
        "concat".into(),
        "--no-version".into(),
        "--threads".into(),
        threads.max(1).to_string(),
        "-Oz".into(),
        "-o".into(),
        path_str(out)?.into(),
    ];
    for p in &parts {
        args.push(path_str(p)?.into());
    }
    BCFTOOLS.run(&args)?;
    BCFTOOLS.run(&["index", "-f", "-t", path_str(out)?])?;
    Ok(out.to_path_buf())
}

/// `bcftools mpileup -r CONTIG | bcftools call -mv`, through a file (the
/// tools' Program runner has no pipes; BCF is uncompressed, -Ou).
fn bcftools_region(reference: &Path, bam: &Path, contig: Option<&str>, out: &Path) -> Result<()> {
    let pileup = out.with_extension("pileup.bcf");
    let mut args = vec!["mpileup", "--no-version", "-Ou", "-f", path_str(reference)?];
    if let Some(c) = contig {
        args.extend(["-r", c]);
    }
    args.extend(["-o", path_str(&pileup)?, path_str(bam)?]);
    BCFTOOLS.run(&args)?;
    BCFTOOLS.run(&[
        "call",
        "--no-version",
        "-mv",
        "-Ob",
        "-o",
        path_str(out)?,
        path_str(&pileup)?,
    ])?;
    std::fs::remove_file(&pileup).map_err(|e| AsamError::io(&pileup, e))
}

fn freebayes_region(
    reference: &Path,
    bam: &Path,
    contig: Option<&str>,
    out: &Path,
    work: &Path,
    i: usize,
) -> Result<()> {
    let vcf = work.join(format!("part{i}.vcf"));
    let mut args = vec!["-f", path_str(reference)?];
    if let Some(c) = contig {
        args.extend(["-r", c]);
    }
    args.push(path_str(bam)?);
    FREEBAYES.run_to_file(&args, &vcf)?;
    BCFTOOLS.run(&[
        "view",
        "--no-version",
        "-Ob",
        "-o",
        path_str(out)?,
        path_str(&vcf)?,
    ])?;
    std::fs::remove_file(&vcf).map_err(|e| AsamError::io(&vcf, e))
}

/// Runs `job(index, contig)` on `threads` workers; results in contig order.
fn per_contig<T: Send>(
    contigs: &[Option<String>],
    threads: usize,
    job: impl Fn(usize, Option<&str>) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Result<T>)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, contigs.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(c) = contigs.get(i) else { break };
                    let r = job(i, c.as_deref());
                    let failed = r.is_err();
                    if let Ok(mut v) = results.lock() {
                        v.push((i, r));
                    }
                    if failed {
                        // Stop handing out contigs; others finish theirs.
                        next.store(contigs.len(), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let mut results = results
        .into_inner()
        .map_err(|_| AsamError::Invalid("a calling worker panicked".into()))?;
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

/// Contigs with at least one mapped read, in BAM header order.
pub fn contigs_with_reads(bam: &Path) -> Result<Vec<String>> {
    let out = SAMTOOLS.run(&["idxstats", path_str(bam)?])?;
    let text = String::from_utf8_lossy(&out);
    Ok(text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let mapped: u64 = f.get(2)?.parse().ok()?;
            (f[0] != "*" && mapped > 0).then(|| f[0].to_string())
        })
        .collect())
}

fn fai_path(reference: &Path) -> PathBuf {
    let mut s = reference.as_os_str().to_owned();
    s.push(".fai");
    PathBuf::from(s)
}

/// `samtools faidx` unless an index newer than the FASTA exists.
pub fn ensure_fai(reference: &Path) -> Result<()> {
    if !is_fresh(&fai_path(reference), reference) {
        SAMTOOLS.run(&["faidx", path_str(reference)?])?;
    }
    Ok(())
}

/// `samtools index` unless a `.bai` newer than the BAM exists.
pub fn ensure_bai(bam: &Path) -> Result<()> {
    let mut s = bam.as_os_str().to_owned();
    s.push(".bai");
    if !is_fresh(Path::new(&s), bam) {
        SAMTOOLS.run(&["index", path_str(bam)?])?;
    }
    Ok(())
}

fn is_fresh(index: &Path, of: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(index), modified(of)), (Some(i), Some(o)) if i >= o)
}

/// A private (mode 0700) scratch directory under `parent`, removed on drop.
fn private_dir(parent: &Path) -> Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(parent).map_err(|e| AsamError::io(parent, e))?;
    tempfile::Builder::new()
        .prefix("testbed-call-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(parent)
        .map_err(|e| AsamError::io(parent, e))
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .ok_or_else(|| AsamError::Invalid(format!("path {} is not UTF-8", p.display())))
}
