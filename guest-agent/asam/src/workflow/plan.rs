//! What each placement runs: the programs of every stage, as chains of
//! [`Step`]s, and where their files go. Kept apart from running them so the
//! command lines can be read (and tested) on their own.
//!
//! The baselines keep the tools fixed and move only the data: with the
//! default `samtools` baseline, disk, ramdisk and pipes run the same
//! programs (`fixmate -m` + `sort`, `markdup`), so the placement is the
//! only difference between their series. Picard and sambamba read their
//! input twice in duplicate marking, so they cannot be fed by a pipe:
//! pipes runs samtools, samblaster or bamsormadup, which read it once.
//! samblaster marks duplicates on the aligner's name-grouped stream, before
//! the sort (`bwa | samblaster | samtools sort`); bamsormadup (biobambam2)
//! sorts and marks in one process (`bwa | bamsormadup`), one stage,
//! `sort-markdup`.

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
    /// As Arrowsam, with sort, markdup and BQSR's counting fused into one
    /// process over its memory (`stage fused`): the upper bound of "in
    /// memory" this code reaches.
    ArrowsamFused,
}

impl Placement {
    pub fn parse(s: &str) -> Result<Placement> {
        Ok(match s {
            "disk" => Placement::Disk,
            "ramdisk" => Placement::Ramdisk,
            "pipes" => Placement::Pipes,
            "arrowsam" => Placement::Arrowsam,
            "arrowsam-fused" => Placement::ArrowsamFused,
            _ => {
                return Err(AsamError::Invalid(format!(
                    "placement {s:?}: known are disk, ramdisk, pipes, arrowsam, arrowsam-fused"
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
            Placement::ArrowsamFused => "arrowsam-fused",
        }
    }

    /// ArrowSAM's own stages (a store on tmpfs), staged or fused.
    pub fn is_arrowsam(self) -> bool {
        matches!(self, Placement::Arrowsam | Placement::ArrowsamFused)
    }
}

/// The tools of the sort and markdup stages outside ArrowSAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Baseline {
    Samtools,
    Picard,
    Sambamba,
    Samblaster,
    Bamsormadup,
}

impl Baseline {
    pub fn parse(s: &str) -> Result<Baseline> {
        Ok(match s {
            "samtools" => Baseline::Samtools,
            "picard" => Baseline::Picard,
            "sambamba" => Baseline::Sambamba,
            "samblaster" => Baseline::Samblaster,
            "bamsormadup" => Baseline::Bamsormadup,
            _ => {
                return Err(AsamError::Invalid(format!(
                    "baseline {s:?}: known are samtools, picard, sambamba, samblaster, bamsormadup"
                )));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Baseline::Samtools => "samtools",
            Baseline::Picard => "picard",
            Baseline::Sambamba => "sambamba",
            Baseline::Samblaster => "samblaster",
            Baseline::Bamsormadup => "bamsormadup",
        }
    }

    /// Whether `--check` gates its duplicate sets against Picard's
    /// (samblaster and bamsormadup; Picard is the reference, and samtools
    /// and sambamba are gated in `bench-preproc`, where Picard's reference
    /// is made anyway, not in every workflow point).
    pub fn gated(self) -> bool {
        matches!(self, Baseline::Samblaster | Baseline::Bamsormadup)
    }

    /// Whether it reads its input once, so a pipe can feed it.
    pub fn reads_once(self) -> bool {
        testbed_vocab::asam_workflow::PIPE_BASELINES.contains(&self.name())
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
        stdin: None,
    }
}

pub fn picard(args: Vec<OsString>) -> Step {
    let mut argv = crate::tools::picard_argv();
    argv.extend(args);
    Step {
        argv,
        package: "picard-tools",
        stdin: None,
    }
}

fn sambamba(args: Vec<OsString>) -> Step {
    let mut argv: Vec<OsString> = vec!["sambamba".into()];
    argv.extend(args);
    Step {
        argv,
        package: "sambamba",
        stdin: None,
    }
}

fn samblaster(args: Vec<OsString>) -> Step {
    let mut argv: Vec<OsString> = vec!["samblaster".into()];
    argv.extend(args);
    Step {
        argv,
        package: "samblaster",
        stdin: None,
    }
}

/// bamsormadup reads SAM on standard input (it has no input file option)
/// and writes the sorted, marked BAM to standard output.
fn bamsormadup(dir: &Path, threads: usize, stdin: Option<&Path>) -> Step {
    Step {
        argv: vec![
            "bamsormadup".into(),
            "inputformat=sam".into(),
            format!("threads={threads}").into(),
            kv("tmpfile", &dir.join("tmp").join("bamsormadup")),
            kv("M", &dir.join("markdup.metrics")),
        ],
        package: "biobambam2",
        stdin: stdin.map(Path::to_path_buf),
    }
}

/// `samtools sort` of `input` (a file, or `-`: standard input) into `out`.
fn samtools_sort(input: OsString, out: &Path, tmp: &Path, threads: usize) -> Step {
    samtools(vec![
        "sort".into(),
        "-@".into(),
        threads.to_string().into(),
        "-T".into(),
        p(&tmp.join("sort")),
        "-o".into(),
        p(out),
        input,
    ])
}

/// The stages from bwa's SAM (`sam`) to `dir/markdup.bam` with files in
/// `dir` between them, in the order the baseline runs them.
pub fn baseline_files(b: Baseline, sam: &Path, dir: &Path, threads: usize) -> Vec<StagePlan> {
    let out = dir.join("markdup.bam");
    let sort_then_mark = |two: SortThenMark| {
        vec![
            sort_files(two, sam, dir, threads),
            markdup_files(two, dir, threads),
        ]
    };
    match b {
        Baseline::Samtools => sort_then_mark(SortThenMark::Samtools),
        Baseline::Picard => sort_then_mark(SortThenMark::Picard),
        Baseline::Sambamba => sort_then_mark(SortThenMark::Sambamba),
        Baseline::Samblaster => {
            let marked = dir.join("marked.sam");
            vec![
                StagePlan {
                    stage: "markdup",
                    tool: b.name().into(),
                    runs: vec![(
                        vec![samblaster(vec![
                            "-i".into(),
                            p(sam),
                            "-o".into(),
                            p(&marked),
                        ])],
                        None,
                    )],
                },
                StagePlan {
                    stage: "sort",
                    tool: "samtools".into(),
                    runs: vec![(
                        vec![samtools_sort(p(&marked), &out, &dir.join("tmp"), threads)],
                        None,
                    )],
                },
            ]
        }
        Baseline::Bamsormadup => vec![StagePlan {
            stage: "sort-markdup",
            tool: b.name().into(),
            runs: vec![(vec![bamsormadup(dir, threads, Some(sam))], Some(out))],
        }],
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
/// The baselines that sort, then mark duplicates of the sorted BAM.
#[derive(Debug, Clone, Copy)]
enum SortThenMark {
    Samtools,
    Picard,
    Sambamba,
}

impl SortThenMark {
    fn name(self) -> &'static str {
        match self {
            SortThenMark::Samtools => "samtools",
            SortThenMark::Picard => "picard",
            SortThenMark::Sambamba => "sambamba",
        }
    }
}

fn sort_files(b: SortThenMark, sam: &Path, dir: &Path, threads: usize) -> StagePlan {
    let t = threads.to_string();
    let tmp = dir.join("tmp");
    let sorted = dir.join("sorted.bam");
    let runs = match b {
        SortThenMark::Samtools => {
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
        SortThenMark::Picard => vec![(
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
        SortThenMark::Sambamba => {
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
fn markdup_files(b: SortThenMark, dir: &Path, threads: usize) -> StagePlan {
    let t = threads.to_string();
    let sorted = dir.join("sorted.bam");
    let out = dir.join("markdup.bam");
    let step = match b {
        SortThenMark::Samtools => samtools(vec![
            "markdup".into(),
            "-@".into(),
            t.into(),
            "-T".into(),
            p(&dir.join("tmp").join("markdup")),
            p(&sorted),
            p(&out),
        ]),
        SortThenMark::Picard => picard(vec![
            "MarkDuplicates".into(),
            kv("I", &sorted),
            kv("O", &out),
            kv("M", &dir.join("markdup.metrics")),
            kv("TMP_DIR", &dir.join("tmp")),
            "VERBOSITY=WARNING".into(),
            "QUIET=true".into(),
        ]),
        SortThenMark::Sambamba => sambamba(vec![
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

/// The pipes placement's one chain, where its last stdout goes, and which
/// steps make each stage: (stage, tool, first step, last step).
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub steps: Vec<Step>,
    pub stdout: Option<PathBuf>,
    pub parts: Vec<(&'static str, String, usize, usize)>,
}

/// bwa piped into the baseline's programs, the final BAM at
/// `dir/markdup.bam` (temporary files in `dir/tmp`); a baseline that
/// reads its input twice is refused.
pub fn pipes_plan(b: Baseline, align: &Step, dir: &Path, threads: usize) -> Result<Pipeline> {
    let out = dir.join("markdup.bam");
    let tmp = dir.join("tmp");
    let aligner = ("align", align.program(), 0, 0);
    Ok(match b {
        Baseline::Samtools => Pipeline {
            steps: pipes_chain(align, &out, &tmp, threads),
            stdout: None,
            // fixmate belongs to sort.
            parts: vec![
                aligner,
                ("sort", "samtools".into(), 1, 2),
                ("markdup", "samtools".into(), 3, 3),
            ],
        },
        // samblaster's SAM straight into the sort, which writes the BAM.
        Baseline::Samblaster => Pipeline {
            steps: vec![
                align.clone(),
                samblaster(Vec::new()),
                samtools_sort("-".into(), &out, &tmp, threads),
            ],
            stdout: None,
            parts: vec![
                aligner,
                ("markdup", "samblaster".into(), 1, 1),
                ("sort", "samtools".into(), 2, 2),
            ],
        },
        Baseline::Bamsormadup => Pipeline {
            steps: vec![align.clone(), bamsormadup(dir, threads, None)],
            stdout: Some(out),
            parts: vec![aligner, ("sort-markdup", "bamsormadup".into(), 1, 1)],
        },
        Baseline::Picard | Baseline::Sambamba => {
            return Err(AsamError::Invalid(format!(
                "placement pipes runs samtools, samblaster or bamsormadup only ({} reads its input twice when marking duplicates, so a pipe cannot feed it)",
                b.name()
            )));
        }
    })
}

/// bwa | fixmate | sort | markdup, the final BAM at `out`. Uncompressed
/// BAM between the programs: compressing data only to decompress it in the
/// next process would be counted against pipes.
fn pipes_chain(align: &Step, out: &Path, tmp: &Path, threads: usize) -> Vec<Step> {
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
        for b in [
            SortThenMark::Samtools,
            SortThenMark::Picard,
            SortThenMark::Sambamba,
        ] {
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
        // samblaster marks bwa's SAM first, then samtools sorts it into the
        // same final BAM; bamsormadup reads the SAM on stdin and writes it.
        let sam = Path::new("/w/aligned.sam");
        let sb = baseline_files(Baseline::Samblaster, sam, Path::new("/w"), 2);
        let stages: Vec<&str> = sb.iter().map(|s| s.stage).collect();
        assert_eq!(stages, ["markdup", "sort"]);
        assert_eq!(
            line(&sb[0].runs[0].0[0]),
            "samblaster -i /w/aligned.sam -o /w/marked.sam"
        );
        assert!(line(&sb[1].runs[0].0[0]).ends_with("-o /w/markdup.bam /w/marked.sam"));
        let bs = baseline_files(Baseline::Bamsormadup, sam, Path::new("/w"), 2);
        assert_eq!(bs.len(), 1);
        assert_eq!(bs[0].stage, "sort-markdup");
        let (steps, out) = &bs[0].runs[0];
        assert_eq!(steps[0].stdin.as_deref(), Some(sam));
        assert_eq!(out.as_deref(), Some(Path::new("/w/markdup.bam")));
        assert!(line(&steps[0]).starts_with("bamsormadup inputformat=sam threads=2"));
    }

    #[test]
    fn the_pipe_runs_samtools_after_bwa_and_writes_only_the_end() {
        let bwa = Step::new("bwa", ["bwa", "mem", "ref.fa", "r1.fq", "r2.fq"]);
        let c = pipes_plan(Baseline::Samtools, &bwa, Path::new("/r"), 2).unwrap();
        let lines: Vec<String> = c.steps.iter().map(line).collect();
        assert_eq!(lines[0], "bwa mem ref.fa r1.fq r2.fq");
        assert_eq!(lines[1], "samtools fixmate -m -u -@ 2 - -");
        assert!(lines[2].starts_with("samtools sort -u") && lines[2].ends_with(" -"));
        assert!(lines[3].ends_with("- /r/markdup.bam"), "{}", lines[3]);
        assert!(c.stdout.is_none());

        // bwa | samblaster | samtools sort; bwa | bamsormadup > the BAM.
        let sb = pipes_plan(Baseline::Samblaster, &bwa, Path::new("/r"), 2).unwrap();
        let lines: Vec<String> = sb.steps.iter().map(line).collect();
        assert_eq!(lines[1], "samblaster");
        assert!(lines[2].starts_with("samtools sort") && lines[2].ends_with("-o /r/markdup.bam -"));
        let stages: Vec<&str> = sb.parts.iter().map(|p| p.0).collect();
        assert_eq!(stages, ["align", "markdup", "sort"]);
        let bs = pipes_plan(Baseline::Bamsormadup, &bwa, Path::new("/r"), 2).unwrap();
        assert_eq!(bs.steps.len(), 2);
        assert!(bs.steps[1].stdin.is_none());
        assert_eq!(bs.stdout.as_deref(), Some(Path::new("/r/markdup.bam")));
        for b in [Baseline::Picard, Baseline::Sambamba] {
            let e = pipes_plan(b, &bwa, Path::new("/r"), 2)
                .unwrap_err()
                .to_string();
            assert!(e.contains("reads its input twice"), "{e}");
        }
    }

    #[test]
    fn unknown_names_are_refused_with_the_known_ones() {
        let e = Placement::parse("nvram").unwrap_err().to_string();
        assert!(
            e.contains("disk, ramdisk, pipes, arrowsam, arrowsam-fused"),
            "{e}"
        );
        assert!(Baseline::parse("gatk").is_err());
        assert!("deepvariant".parse::<Caller>().is_err());
    }
}
