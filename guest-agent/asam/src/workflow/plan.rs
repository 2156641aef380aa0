//! What each placement runs: the programs of every stage, as chains of
//! [`Step`]s, and where their files go. Kept apart from running them so the
//! command lines can be read (and tested) on their own.
//!
//! The baselines keep the tools fixed and move only the data: with the
//! default `samtools` baseline, disk, ramdisk and pipes run the same
//! programs (`fixmate -m` + `sort`, `markdup`), so the placement is the
//! only difference between their series. Picard and sambamba read their
//! input twice in duplicate marking, so they cannot be fed by a pipe:
//! pipes is samtools only.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::chain::Step;
use crate::{AsamError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Intermediate files on ext4 (the emulated NVMe in the VM).
    Disk,
    /// Intermediate files on tmpfs.
    Ramdisk,
    /// Stages joined by Unix pipes; only the final BAM is a file (tmpfs).
    Pipes,
    /// Arrow IPC on tmpfs, mapped by the next stage's process.
    Arrowsam,
}

impl Placement {
    pub fn parse(s: &str) -> Result<Placement> {
        Ok(match s {
            "disk" => Placement::Disk,
            "ramdisk" => Placement::Ramdisk,
            "pipes" => Placement::Pipes,
            "arrowsam" => Placement::Arrowsam,
            _ => {
                return Err(AsamError::Invalid(format!(
                    "placement {s:?}: known are disk, ramdisk, pipes, arrowsam"
                )));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Placement::Disk => "disk",
            Placement::Ramdisk => "ramdisk",
            Placement::Pipes => "pipes",
            Placement::Arrowsam => "arrowsam",
        }
    }
}

/// The tools of the sort and markdup stages outside ArrowSAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Baseline {
    Samtools,
    Picard,
    Sambamba,
}

impl Baseline {
    pub fn parse(s: &str) -> Result<Baseline> {
        Ok(match s {
            "samtools" => Baseline::Samtools,
            "picard" => Baseline::Picard,
            "sambamba" => Baseline::Sambamba,
            _ => {
                return Err(AsamError::Invalid(format!(
                    "baseline {s:?}: known are samtools, picard, sambamba"
                )));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Baseline::Samtools => "samtools",
            Baseline::Picard => "picard",
            Baseline::Sambamba => "sambamba",
        }
    }
}

/// The variant callers run on the final BAM.
pub use crate::call::Caller;

fn p(path: &Path) -> OsString {
    path.as_os_str().to_owned()
}

fn kv(key: &str, path: &Path) -> OsString {
    let mut s = OsString::from(format!("{key}="));
    s.push(path);
    s
}

pub fn samtools(args: Vec<OsString>) -> Step {
    let mut argv: Vec<OsString> = vec!["samtools".into()];
    argv.extend(args);
    Step {
        argv,
        package: "samtools",
    }
}

pub fn picard(args: Vec<OsString>) -> Step {
    let mut argv = crate::tools::picard_argv();
    argv.extend(args);
    Step {
        argv,
        package: "picard-tools",
    }
}

fn sambamba(args: Vec<OsString>) -> Step {
    let mut argv: Vec<OsString> = vec!["sambamba".into()];
    argv.extend(args);
    Step {
        argv,
        package: "sambamba",
    }
}

/// One stage as programs run one after another, each a chain of pipes
/// whose last stdout goes to the file named (if any).
#[derive(Debug, Clone)]
pub struct StagePlan {
    pub stage: &'static str,
    pub tool: String,
    pub runs: Vec<(Vec<Step>, Option<PathBuf>)>,
}

/// Sort (from bwa's SAM, name-grouped) to a coordinate-sorted BAM, in `dir`.
pub fn sort_files(b: Baseline, sam: &Path, dir: &Path, threads: usize) -> StagePlan {
    let t = threads.to_string();
    let tmp = dir.join("tmp");
    let sorted = dir.join("sorted.bam");
    let runs = match b {
        Baseline::Samtools => {
            // markdup needs the mate tags fixmate -m adds, on name-grouped
            // input: bwa's output is, so fixmate runs before the sort.
            let fixed = dir.join("fixmate.bam");
            vec![
                (
                    vec![samtools(vec![
                        "fixmate".into(),
                        "-m".into(),
                        "-@".into(),
                        t.clone().into(),
                        p(sam),
                        p(&fixed),
                    ])],
                    None,
                ),
                (
                    vec![samtools(vec![
                        "sort".into(),
                        "-@".into(),
                        t.into(),
                        "-T".into(),
                        p(&tmp.join("sort")),
                        "-o".into(),
                        p(&sorted),
                        p(&fixed),
                    ])],
                    None,
                ),
            ]
        }
        Baseline::Picard => vec![(
            vec![picard(vec![
                "SortSam".into(),
                kv("I", sam),
                kv("O", &sorted),
                "SO=coordinate".into(),
                kv("TMP_DIR", &tmp),
                "VERBOSITY=WARNING".into(),
                "QUIET=true".into(),
            ])],
            None,
        )],
        Baseline::Sambamba => {
            // sambamba reads BAM only: the SAM→BAM conversion is its cost.
            let bam = dir.join("aligned.bam");
            vec![
                (
                    vec![sambamba(vec![
                        "view".into(),
                        "-S".into(),
                        "-f".into(),
                        "bam".into(),
                        "-t".into(),
                        t.clone().into(),
                        "-o".into(),
                        p(&bam),
                        p(sam),
                    ])],
                    None,
                ),
                (
                    vec![sambamba(vec![
                        "sort".into(),
                        "-t".into(),
                        t.into(),
                        "--tmpdir".into(),
                        p(&tmp),
                        "-o".into(),
                        p(&sorted),
                        p(&bam),
                    ])],
                    None,
                ),
            ]
        }
    };
    StagePlan {
        stage: "sort",
        tool: b.name().into(),
        runs,
    }
}

/// Mark duplicates of `dir/sorted.bam` into `dir/markdup.bam`.
pub fn markdup_files(b: Baseline, dir: &Path, threads: usize) -> StagePlan {
    let t = threads.to_string();
    let sorted = dir.join("sorted.bam");
    let out = dir.join("markdup.bam");
    let step = match b {
        Baseline::Samtools => samtools(vec![
            "markdup".into(),
            "-@".into(),
            t.into(),
            "-T".into(),
            p(&dir.join("tmp").join("markdup")),
            p(&sorted),
            p(&out),
        ]),
        Baseline::Picard => picard(vec![
            "MarkDuplicates".into(),
            kv("I", &sorted),
            kv("O", &out),
            kv("M", &dir.join("markdup.metrics")),
            kv("TMP_DIR", &dir.join("tmp")),
            "VERBOSITY=WARNING".into(),
            "QUIET=true".into(),
        ]),
        Baseline::Sambamba => sambamba(vec![
            "markdup".into(),
            "-t".into(),
            t.into(),
            "--tmpdir".into(),
            p(&dir.join("tmp")),
            p(&sorted),
            p(&out),
        ]),
    };
    StagePlan {
        stage: "markdup",
        tool: b.name().into(),
        runs: vec![(vec![step], None)],
    }
}

/// bwa | fixmate | sort | markdup, the final BAM at `out`. Uncompressed
/// BAM between the programs: compressing data only to decompress it in the
/// next process would be counted against pipes.
pub fn pipes_chain(align: &Step, out: &Path, tmp: &Path, threads: usize) -> Vec<Step> {
    let t = threads.to_string();
    vec![
        align.clone(),
        samtools(vec![
            "fixmate".into(),
            "-m".into(),
            "-u".into(),
            "-@".into(),
            t.clone().into(),
            "-".into(),
            "-".into(),
        ]),
        samtools(vec![
            "sort".into(),
            "-u".into(),
            "-@".into(),
            t.clone().into(),
            "-T".into(),
            p(&tmp.join("sort")),
            "-".into(),
        ]),
        samtools(vec![
            "markdup".into(),
            "-@".into(),
            t.into(),
            "-T".into(),
            p(&tmp.join("markdup")),
            "-".into(),
            p(out),
        ]),
    ]
}

/// Index the BAM, then each caller; VCFs next to the BAM, named
/// `calls.<caller>.vcf` (bcftools: bgzipped `.vcf.gz`).
pub fn call_runs(
    bam: &Path,
    reference: &Path,
    callers: &[Caller],
    threads: usize,
) -> Vec<(Vec<Step>, Option<PathBuf>)> {
    let dir = bam.parent().unwrap_or(Path::new("."));
    let mut runs = vec![(
        vec![samtools(vec![
            "index".into(),
            "-@".into(),
            threads.to_string().into(),
            p(bam),
        ])],
        None,
    )];
    for c in callers {
        runs.push(match c {
            Caller::Bcftools => (
                vec![
                    Step::new(
                        "bcftools",
                        [
                            "bcftools".into(),
                            "mpileup".into(),
                            "-f".into(),
                            p(reference),
                            "-Ou".into(),
                            p(bam),
                        ],
                    ),
                    Step::new(
                        "bcftools",
                        [
                            OsString::from("bcftools"),
                            "call".into(),
                            "-mv".into(),
                            "-Oz".into(),
                            "-o".into(),
                            p(&calls_path(dir, *c)),
                        ],
                    ),
                ],
                None,
            ),
            Caller::Freebayes => (
                vec![Step::new(
                    "freebayes",
                    ["freebayes".into(), "-f".into(), p(reference), p(bam)],
                )],
                Some(calls_path(dir, *c)),
            ),
        });
    }
    runs
}

/// Where [`call_runs`] leaves a caller's VCF.
pub fn calls_path(dir: &Path, c: Caller) -> PathBuf {
    match c {
        Caller::Bcftools => dir.join("calls.bcftools.vcf.gz"),
        Caller::Freebayes => dir.join("calls.freebayes.vcf"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &Step) -> String {
        s.argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn baselines_read_the_same_sam_and_write_the_same_bams() {
        for b in [Baseline::Samtools, Baseline::Picard, Baseline::Sambamba] {
            let s = sort_files(b, Path::new("/w/aligned.sam"), Path::new("/w"), 2);
            let all: Vec<String> = s.runs.iter().flat_map(|r| r.0.iter().map(line)).collect();
            assert!(all[0].contains("/w/aligned.sam"), "{all:?}");
            assert!(all.last().unwrap().contains("/w/sorted.bam"), "{all:?}");
            let m = markdup_files(b, Path::new("/w"), 2);
            let l = line(&m.runs[0].0[0]);
            assert!(
                l.contains("/w/sorted.bam") && l.contains("/w/markdup.bam"),
                "{l}"
            );
        }
    }

    #[test]
    fn the_pipe_runs_samtools_after_bwa_and_writes_only_the_end() {
        let bwa = Step::new("bwa", ["bwa", "mem", "ref.fa", "r1.fq", "r2.fq"]);
        let c = pipes_chain(&bwa, Path::new("/r/markdup.bam"), Path::new("/r/tmp"), 2);
        let lines: Vec<String> = c.iter().map(line).collect();
        assert_eq!(lines[0], "bwa mem ref.fa r1.fq r2.fq");
        assert_eq!(lines[1], "samtools fixmate -m -u -@ 2 - -");
        assert!(lines[2].starts_with("samtools sort -u") && lines[2].ends_with(" -"));
        assert!(lines[3].ends_with("- /r/markdup.bam"), "{}", lines[3]);
    }

    #[test]
    fn unknown_names_are_refused_with_the_known_ones() {
        let e = Placement::parse("nvram").unwrap_err().to_string();
        assert!(e.contains("disk, ramdisk, pipes, arrowsam"), "{e}");
        assert!(Baseline::parse("gatk").is_err());
        assert!("deepvariant".parse::<Caller>().is_err());
    }
}
