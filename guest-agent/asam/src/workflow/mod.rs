//! `testbed-asam workflow`: the variant-calling workflow (align, sort, mark
//! duplicates, BQSR, apply BQSR, call) with its intermediate data in one
//! placement — on disk, on a ramdisk, through pipes, or as ArrowSAM batches
//! on tmpfs mapped by the next stage's process — every stage timed, CPU
//! utilisation sampled, the calls scored against the truth, and ArrowSAM's
//! records checked against samtools and Picard before any time counts (as
//! are samblaster's and bamsormadup's duplicate sets against Picard's).
//!
//! [`plan`] holds the command lines, [`chain`] runs them, [`stages`] is the
//! ArrowSAM stage processes (`testbed-asam stage ...`), [`shared`] their
//! store, [`counters`] the hardware counters.

pub mod bqsr_stage;
pub mod chain;
pub mod cli;
pub mod counters;
pub mod inputs;
pub mod plan;
pub mod shared;
pub mod stages;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use testbed_vocab::asam_workflow::{
    CallsLine, CountersLine, CpuLine, DoneLine, StageLine, WorkflowLine,
};

use self::chain::Step;
use self::plan::{Baseline, Caller, Placement, StagePlan};
use crate::{AsamError, Result};

pub struct Options {
    pub placement: Placement,
    pub baseline: Baseline,
    /// The aligner's command: SAM on stdout (fixed `-K`, read groups set).
    pub align: Step,
    pub reference: PathBuf,
    pub known_sites: Option<PathBuf>,
    pub truth: Option<PathBuf>,
    pub targets: Option<PathBuf>,
    /// Parent of the disk placement's files (ext4 in the VM).
    pub disk_dir: PathBuf,
    /// Parent of the ramdisk's, pipes' final and ArrowSAM's files (tmpfs).
    pub ram_dir: PathBuf,
    pub threads: usize,
    pub callers: Vec<Caller>,
    /// Run BQSR and apply it before calling (ArrowSAM only: no packaged
    /// baseline exists).
    pub bqsr: bool,
    pub cpu_interval: Option<Duration>,
    pub counters: bool,
    /// This program, for the ArrowSAM stage processes.
    pub self_exe: PathBuf,
    pub timeout: Duration,
    /// Check ArrowSAM's sort order and duplicates against samtools sort
    /// and Picard on the same records, and samblaster's or bamsormadup's
    /// duplicate sets against Picard's (untimed, after the workflow).
    pub check: bool,
}

/// The timed part's outcome, before scoring.
struct Timed {
    stages: Vec<StageLine>,
    counters: Vec<CountersLine>,
    /// The BAM the callers read, and whether it was recalibrated.
    calls_dir: PathBuf,
    final_bam: PathBuf,
    /// ArrowSAM only: the store, kept for the checks.
    store: Option<tempfile::TempDir>,
}

/// Runs the workflow; every line it would print.
pub fn run(o: &Options) -> Result<Vec<WorkflowLine>> {
    if o.placement == Placement::Pipes && !o.baseline.reads_once() {
        return Err(AsamError::Invalid(format!(
            "placement pipes runs samtools, samblaster or bamsormadup only ({} reads its input twice when marking duplicates, so a pipe cannot feed it)",
            o.baseline.name()
        )));
    }
    if o.bqsr && !o.placement.is_arrowsam() {
        return Err(AsamError::Invalid(
            "bqsr: only the arrowsam placement has a BQSR (GATK, the baseline, is not packaged)"
                .into(),
        ));
    }
    let parent = match o.placement {
        Placement::Disk => &o.disk_dir,
        _ => &o.ram_dir,
    };
    let work = crate::store::private_dir(parent, "testbed-asam-work-")?;
    std::fs::create_dir(work.path().join("tmp")).map_err(|e| AsamError::io(work.path(), e))?;
    let counters = if o.counters {
        counters::unavailable(Path::new("/sys"))
    } else {
        Some("not asked for".into())
    };
    let runner = Runner {
        o,
        origin: Instant::now(),
        counters_why_not: counters,
        counter_dir: work.path().join("perf"),
    };
    std::fs::create_dir(&runner.counter_dir).map_err(|e| AsamError::io(work.path(), e))?;
    let sampler = o
        .cpu_interval
        .map(|i| crate::cpu::Sampler::start("/proc/stat", i, runner.origin));
    let timed = match o.placement {
        Placement::Disk | Placement::Ramdisk => runner.files(work.path()),
        Placement::Pipes => runner.pipes(work.path()),
        Placement::Arrowsam => runner.arrowsam(work.path(), false),
        Placement::ArrowsamFused => runner.arrowsam(work.path(), true),
    };
    let cpu = sampler.map(|s| s.stop()).unwrap_or_default();
    let timed = timed?;
    let seconds = timed.stages.last().map(|s| s.end).unwrap_or(0.0);

    let mut lines: Vec<WorkflowLine> = timed
        .stages
        .iter()
        .cloned()
        .map(WorkflowLine::Stage)
        .collect();
    lines.extend(cpu.into_iter().map(|s| {
        WorkflowLine::Cpu(CpuLine {
            placement: o.placement.name().into(),
            second: s.second,
            cpu: s.cpu,
            utilisation: s.utilisation,
        })
    }));
    lines.extend(timed.counters.iter().cloned().map(WorkflowLine::Counters));
    let final_bqsr = o.bqsr && o.placement.is_arrowsam();
    for c in &o.callers {
        lines.extend(score(
            o,
            *c,
            &plan::calls_path(&timed.calls_dir, *c),
            final_bqsr,
        )?);
    }
    let (records, duplicates) = bam_counts(&timed.final_bam)?;
    let mut checks = vec![format!(
        "final BAM: {records} records, {duplicates} marked duplicate"
    )];
    if records == 0 {
        return Err(AsamError::Invalid(format!(
            "{}: the workflow's final BAM holds no records",
            timed.final_bam.display()
        )));
    }
    if o.check && o.baseline.gated() && !o.placement.is_arrowsam() {
        let check_dir = work.path().join("check");
        runner.check_baseline(&timed.final_bam, work.path(), &check_dir, &mut checks)?;
    }
    if let Some(store) = &timed.store {
        let check_dir = work.path().join("check");
        std::fs::create_dir(&check_dir).map_err(|e| AsamError::io(&check_dir, e))?;
        if o.placement == Placement::ArrowsamFused {
            runner.check_fused(store.path(), &check_dir, &mut checks)?;
        }
        let plain = runner.check_arrowsam(store.path(), &check_dir, &mut checks)?;
        if final_bqsr {
            // The same calls without BQSR, for what recalibration changes.
            let runs = plan::call_runs(&plain, &o.reference, &o.callers, o.threads);
            for (steps, out) in &runs {
                chain::run(steps, out.as_deref(), runner.origin, o.timeout)?;
            }
            for c in &o.callers {
                lines.extend(score(o, *c, &plan::calls_path(&check_dir, *c), false)?);
            }
        }
    }
    drop(timed.store);
    lines.push(WorkflowLine::Done(DoneLine {
        placement: o.placement.name().into(),
        records,
        duplicates,
        seconds,
        checks,
    }));
    Ok(lines)
}

/// The calls of `caller` scored against the truth (none without a truth
/// VCF): one line per class.
fn score(o: &Options, caller: Caller, calls: &Path, bqsr: bool) -> Result<Vec<WorkflowLine>> {
    let Some(truth) = &o.truth else {
        return Ok(Vec::new());
    };
    let s = crate::vcfscore::score_files(
        calls,
        truth,
        Some(&o.reference),
        o.targets.as_deref(),
        &crate::vcfscore::ScoreOptions::default(),
    )?;
    Ok([("snp", s.snp), ("indel", s.indel), ("all", s.all)]
        .into_iter()
        .map(|(class, c)| {
            WorkflowLine::Calls(CallsLine {
                placement: o.placement.name().into(),
                caller: caller.name().into(),
                bqsr,
                class: class.into(),
                true_positives: c.counts.tp,
                false_positives: c.counts.fp,
                false_negatives: c.counts.fn_,
                precision: c.precision.unwrap_or(0.0),
                recall: c.recall.unwrap_or(0.0),
                f1: c.f1.unwrap_or(0.0),
            })
        })
        .collect())
}

/// Records and duplicate-flagged records of a BAM.
fn bam_counts(bam: &Path) -> Result<(u64, u64)> {
    let count = |extra: &[&str]| -> Result<u64> {
        let mut args: Vec<OsString> = vec!["view".into(), "-c".into()];
        args.extend(extra.iter().map(OsString::from));
        args.push(bam.as_os_str().to_owned());
        let out = crate::tools::SAMTOOLS.run(&args)?;
        String::from_utf8_lossy(&out)
            .trim()
            .parse()
            .map_err(|e| AsamError::Invalid(format!("samtools view -c {}: {e}", bam.display())))
    };
    Ok((count(&[])?, count(&["-f", "1024"])?))
}

struct Runner<'o> {
    o: &'o Options,
    origin: Instant,
    counters_why_not: Option<String>,
    counter_dir: PathBuf,
}

impl Runner<'_> {
    fn placement(&self) -> String {
        self.o.placement.name().into()
    }

    fn now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    /// Runs one stage (its chains one after another), perf-wrapped where
    /// counters are available; its stage and counters lines.
    fn stage(&self, plan: &StagePlan) -> Result<(StageLine, CountersLine)> {
        self.stage_in(plan, None)
    }

    /// As [`Runner::stage`]; with ArrowSAM's `store`, what it holds at
    /// the stage's end is reported beside the processes' peak.
    fn stage_in(
        &self,
        plan: &StagePlan,
        store: Option<&Path>,
    ) -> Result<(StageLine, CountersLine)> {
        let start = self.now();
        let mut values = BTreeMap::new();
        let mut peak = 0;
        for (i, (steps, out)) in plan.runs.iter().enumerate() {
            let (steps, files) = self.wrapped(plan.stage, i, steps);
            let t = chain::run(&steps, out.as_deref(), self.origin, self.o.timeout)?;
            peak = t.peaks.iter().copied().fold(peak, u64::max);
            for f in files {
                let text = std::fs::read_to_string(&f).map_err(|e| AsamError::io(&f, e))?;
                counters::add(&mut values, counters::parse(&text));
            }
        }
        let end = self.now();
        let store_bytes = store.map(crate::peak::dir_bytes).transpose()?;
        Ok((
            StageLine {
                stage: plan.stage.into(),
                placement: self.placement(),
                tool: plan.tool.clone(),
                seconds: end - start,
                start,
                end,
                peak_rss_bytes: Some(peak),
                store_bytes,
            },
            self.counters_line(plan.stage, values),
        ))
    }

    fn counters_line(&self, stage: &str, values: BTreeMap<String, f64>) -> CountersLine {
        CountersLine {
            placement: self.placement(),
            stage: stage.into(),
            values,
            unavailable: self.counters_why_not.clone(),
        }
    }

    /// `steps` under perf stat when counters are available, with the CSV
    /// files they write.
    fn wrapped(&self, stage: &str, run: usize, steps: &[Step]) -> (Vec<Step>, Vec<PathBuf>) {
        if self.counters_why_not.is_some() {
            return (steps.to_vec(), Vec::new());
        }
        steps
            .iter()
            .enumerate()
            .map(|(j, s)| {
                let f = self.counter_dir.join(format!("{stage}-{run}-{j}.csv"));
                (counters::wrap(s, &f), f)
            })
            .unzip()
    }

    /// The `stage` subcommand of this program on `store`, as a step.
    fn own_step(&self, store: &Path, args: Vec<OsString>) -> Step {
        let mut argv: Vec<OsString> = vec![self.o.self_exe.as_os_str().to_owned(), "stage".into()];
        argv.extend(args);
        argv.push("--store".into());
        argv.push(store.as_os_str().to_owned());
        Step {
            argv,
            package: "testbed-asam (this testbed)",
            stdin: None,
        }
    }

    /// The bqsr stage's arguments (and the fused stage's BQSR part).
    fn bqsr_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["--reference".into()];
        args.push(self.o.reference.as_os_str().to_owned());
        if let Some(k) = &self.o.known_sites {
            args.push("--known-sites".into());
            args.push(k.as_os_str().to_owned());
        }
        args
    }

    /// Untimed: the staged stages (sort, markdup, and bqsr when asked) run
    /// on a copy of what the fused run loaded, in a store of their own;
    /// the fused stage's sorted records, flags and BQSR table must equal
    /// theirs, batch for batch.
    fn check_fused(&self, store: &Path, dir: &Path, checks: &mut Vec<String>) -> Result<()> {
        let o = self.o;
        let staged = shared::create(dir)?;
        for name in [stages::ALIGNED, stages::HEADER, stages::REFERENCES] {
            let (from, to) = (store.join(name), staged.path().join(name));
            std::fs::copy(&from, &to).map_err(|e| AsamError::io(&to, e))?;
        }
        let t = || -> Vec<OsString> { vec!["--threads".into(), o.threads.to_string().into()] };
        let mut runs = vec![
            [vec!["sort".into()], t()].concat(),
            [vec!["markdup".into()], t()].concat(),
        ];
        if o.bqsr {
            runs.push([vec!["bqsr".into()], self.bqsr_args(), t()].concat());
        }
        for args in runs {
            chain::run(
                &[self.own_step(staged.path(), args)],
                None,
                self.origin,
                o.timeout,
            )?;
        }
        let (fused, staged_dir) = (
            shared::SharedDir::open(store)?,
            shared::SharedDir::open(staged.path())?,
        );
        let mut names = vec![stages::SORTED, stages::FLAGS];
        if o.bqsr {
            names.push(bqsr_stage::TABLE);
        }
        shared::same_files(&fused, &staged_dir, &names).map_err(|e| {
            AsamError::Invalid(format!(
                "correctness gate failed: the fused stage against the staged pipeline: {e}"
            ))
        })?;
        checks.push(format!(
            "fused: {} equal the staged sort, markdup{}'s, batch for batch",
            names.join(", "),
            if o.bqsr { " and bqsr" } else { "" }
        ));
        Ok(())
    }

    /// Untimed: samtools sort of `sam` into `dir`, then Picard
    /// MarkDuplicates of the sorted BAM with `extra` arguments; the sorted
    /// and the marked BAM. (Picard SortSam first cost ~20 s of JVM under
    /// TCG and decided nothing the samtools order check does not.)
    fn references(&self, sam: &Path, dir: &Path, extra: &[&str]) -> Result<(PathBuf, PathBuf)> {
        let o = self.o;
        let samtools_sorted = dir.join("samtools.sorted.bam");
        let picard_marked = dir.join("picard.markdup.bam");
        let kv = |k: &str, p: &Path| {
            let mut s = OsString::from(format!("{k}="));
            s.push(p);
            s
        };
        let mut picard: Vec<OsString> = vec![
            "MarkDuplicates".into(),
            kv("I", &samtools_sorted),
            kv("O", &picard_marked),
            kv("M", &dir.join("picard.metrics")),
            "VERBOSITY=WARNING".into(),
            "QUIET=true".into(),
            kv("TMP_DIR", dir),
        ];
        picard.extend(extra.iter().map(OsString::from));
        let runs: Vec<Step> = vec![
            plan::samtools(vec![
                "sort".into(),
                "-@".into(),
                o.threads.to_string().into(),
                "-o".into(),
                samtools_sorted.as_os_str().to_owned(),
                sam.as_os_str().to_owned(),
            ]),
            plan::picard(picard),
        ];
        for step in runs {
            chain::run(&[step], None, self.origin, o.timeout)?;
        }
        Ok((samtools_sorted, picard_marked))
    }

    /// Untimed: the records ArrowSAM loaded go through samtools sort, and
    /// its output through Picard MarkDuplicates; ArrowSAM's sorted, marked
    /// records (before BQSR) must equal samtools' whole, and mark the same
    /// duplicates as Picard. Returns ArrowSAM's BAM before BQSR.
    fn check_arrowsam(
        &self,
        store: &Path,
        dir: &Path,
        checks: &mut Vec<String>,
    ) -> Result<PathBuf> {
        let o = self.o;
        let me = |args: &[&str], out: &Path| {
            let mut argv: Vec<OsString> = args.iter().map(OsString::from).collect();
            argv.extend(["--out".into(), out.as_os_str().to_owned()]);
            self.own_step(store, argv)
        };
        let sam = dir.join("aligned.sam");
        let ours = dir.join("arrowsam.markdup.bam");
        let runs: Vec<Step> = vec![
            me(&["write-sam"], &sam),
            me(&["write-bam", "--threads", &o.threads.to_string()], &ours),
        ];
        for step in runs {
            chain::run(&[step], None, self.origin, o.timeout)?;
        }
        let (samtools_sorted, picard_marked) = self.references(&sam, dir, &[])?;
        let gate = |r: std::result::Result<crate::gates::Passed, crate::gates::GateError>| {
            r.map_err(|e| AsamError::Invalid(e.to_string()))
        };
        let order = gate(crate::gates::check_order(
            &ours,
            &samtools_sorted,
            crate::schema::flag::DUPLICATE as u16,
        ))?;
        checks.push(format!(
            "order: ArrowSAM's {} records equal samtools sort's, whole and in order",
            order.records
        ));
        let dups = gate(crate::gates::check_duplicates(&ours, &picard_marked))?;
        checks.push(format!(
            "duplicates: ArrowSAM marks the {} duplicates Picard MarkDuplicates marks ({} records)",
            dups.duplicates, dups.records
        ));
        Ok(ours)
    }

    /// Untimed: bwa's records (the disk and ramdisk placements' SAM;
    /// through pipes none was kept, so the aligner runs again into a file:
    /// with `-K` fixed its output is the same) go through samtools sort and
    /// Picard MarkDuplicates, with its duplicate-set tags; the baseline's
    /// final BAM must pass the duplicate-set gate against Picard's
    /// ([`crate::gates::check_marker`]: as many records marked in each of
    /// Picard's sets, whichever it keeps, and nothing else).
    fn check_baseline(
        &self,
        final_bam: &Path,
        work: &Path,
        dir: &Path,
        checks: &mut Vec<String>,
    ) -> Result<()> {
        let o = self.o;
        std::fs::create_dir(dir).map_err(|e| AsamError::io(dir, e))?;
        let kept = work.join("aligned.sam");
        let sam = if o.placement != Placement::Pipes && kept.is_file() {
            kept
        } else {
            let sam = dir.join("aligned.sam");
            chain::run(
                std::slice::from_ref(&o.align),
                Some(&sam),
                self.origin,
                o.timeout,
            )?;
            sam
        };
        let (_, picard_marked) = self.references(&sam, dir, &["TAG_DUPLICATE_SET_MEMBERS=true"])?;
        let tool = o.baseline.name();
        let a = crate::gates::check_marker(tool, final_bam, &picard_marked)
            .map_err(|e| AsamError::Invalid(e.to_string()))?;
        checks.push(format!(
            "duplicate sets: {tool} marks as many records as Picard MarkDuplicates in each of its duplicate sets, and no other ({} duplicates, {} records; {} records differ from Picard's in which member of a set is kept)",
            a.duplicates, a.records, a.differing_records
        ));
        Ok(())
    }

    fn collect(
        &self,
        parts: Vec<(StageLine, CountersLine)>,
    ) -> (Vec<StageLine>, Vec<CountersLine>) {
        parts.into_iter().unzip()
    }

    /// Disk and ramdisk: every stage reads and writes files in `dir`.
    fn files(&self, dir: &Path) -> Result<Timed> {
        let o = self.o;
        let sam = dir.join("aligned.sam");
        let mut parts = vec![self.stage(&StagePlan {
            stage: "align",
            tool: o.align.program(),
            runs: vec![(vec![o.align.clone()], Some(sam.clone()))],
        })?];
        for stage in plan::baseline_files(o.baseline, &sam, dir, o.threads) {
            parts.push(self.stage(&stage)?);
        }
        let bam = dir.join("markdup.bam");
        parts.push(self.stage(&StagePlan {
            stage: "call",
            tool: callers_tool(&o.callers),
            runs: plan::call_runs(&bam, &o.reference, &o.callers, o.threads),
        })?);
        let (stages, counters) = self.collect(parts);
        Ok(Timed {
            stages,
            counters,
            calls_dir: dir.to_path_buf(),
            final_bam: bam,
            store: None,
        })
    }

    /// Pipes: bwa | the baseline's programs, each stage ending when its
    /// process exits; the final BAM on tmpfs, then the callers.
    fn pipes(&self, dir: &Path) -> Result<Timed> {
        let o = self.o;
        let bam = dir.join("markdup.bam");
        let pipeline = plan::pipes_plan(o.baseline, &o.align, dir, o.threads)?;
        let (steps, files) = self.wrapped("pipes", 0, &pipeline.steps);
        let t = chain::run(&steps, pipeline.stdout.as_deref(), self.origin, o.timeout)?;
        let mut counted: Vec<BTreeMap<String, f64>> = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).map_err(|e| AsamError::io(f, e))?;
            counted.push(counters::parse(&text));
        }
        let parts_of = pipeline.parts;
        let mut stages = Vec::new();
        let mut counters_lines = Vec::new();
        let mut start = t.start;
        for (stage, tool, first, last) in parts_of {
            let end = t.ends[first..=last].iter().copied().fold(start, f64::max);
            // The stage's processes ran beside the others of the pipe:
            // its peak is the largest of its own.
            let peak = t.peaks[first..=last].iter().copied().max();
            stages.push(StageLine {
                stage: stage.into(),
                placement: self.placement(),
                tool,
                seconds: end - start,
                start,
                end,
                peak_rss_bytes: peak,
                store_bytes: None,
            });
            let mut values = BTreeMap::new();
            for c in counted.iter().skip(first).take(last - first + 1) {
                counters::add(&mut values, c.clone());
            }
            counters_lines.push(self.counters_line(stage, values));
            start = end;
        }
        let (call, c) = self.stage(&StagePlan {
            stage: "call",
            tool: callers_tool(&o.callers),
            runs: plan::call_runs(&bam, &o.reference, &o.callers, o.threads),
        })?;
        stages.push(call);
        counters_lines.push(c);
        Ok(Timed {
            stages,
            counters: counters_lines,
            calls_dir: dir.to_path_buf(),
            final_bam: bam,
            store: None,
        })
    }

    /// ArrowSAM: bwa's SAM converted by a writer process into Arrow IPC on
    /// tmpfs; sort, markdup (and BQSR) each a process mapping the previous
    /// stage's output; the calling stage writes the BAM the callers read.
    fn arrowsam(&self, dir: &Path, fused: bool) -> Result<Timed> {
        let o = self.o;
        let store = shared::create(&o.ram_dir)?;
        let me = |args: Vec<OsString>| self.own_step(store.path(), args);
        let t = || -> Vec<OsString> { vec!["--threads".into(), o.threads.to_string().into()] };
        let arrow = |stage: &'static str, args: Vec<OsString>| StagePlan {
            stage,
            tool: "arrowsam".into(),
            runs: vec![(vec![me(args)], None)],
        };
        let mut parts = vec![self.stage_in(
            &StagePlan {
                stage: "align",
                tool: o.align.program(),
                runs: vec![(vec![o.align.clone(), me(vec!["load".into()])], None)],
            },
            Some(store.path()),
        )?];
        if fused {
            let bqsr = if o.bqsr { self.bqsr_args() } else { Vec::new() };
            parts.push(self.stage_in(
                &arrow("fused", [vec!["fused".into()], bqsr, t()].concat()),
                Some(store.path()),
            )?);
        } else {
            parts.push(self.stage_in(
                &arrow("sort", [vec!["sort".into()], t()].concat()),
                Some(store.path()),
            )?);
            parts.push(self.stage_in(
                &arrow("markdup", [vec!["markdup".into()], t()].concat()),
                Some(store.path()),
            )?);
            if o.bqsr {
                let args = [vec!["bqsr".into()], self.bqsr_args(), t()].concat();
                parts.push(self.stage_in(&arrow("bqsr", args), Some(store.path()))?);
            }
        }
        if o.bqsr {
            parts.push(self.stage_in(
                &arrow("apply-bqsr", [vec!["apply-bqsr".into()], t()].concat()),
                Some(store.path()),
            )?);
        }
        let bam = dir.join("final.bam");
        let mut write: Vec<OsString> = vec!["write-bam".into(), "--out".into()];
        write.push(bam.as_os_str().to_owned());
        if o.bqsr {
            write.push("--recalibrated".into());
        }
        let mut runs = vec![(vec![me(write)], None)];
        runs.extend(plan::call_runs(&bam, &o.reference, &o.callers, o.threads));
        parts.push(self.stage_in(
            &StagePlan {
                stage: "call",
                tool: format!("arrowsam+{}", callers_tool(&o.callers)),
                runs,
            },
            Some(store.path()),
        )?);
        let (stages, counters) = self.collect(parts);
        Ok(Timed {
            stages,
            counters,
            calls_dir: dir.to_path_buf(),
            final_bam: bam,
            store: Some(store),
        })
    }
}

fn callers_tool(callers: &[Caller]) -> String {
    if callers.is_empty() {
        return "samtools".into();
    }
    callers
        .iter()
        .map(|c| c.name())
        .collect::<Vec<_>>()
        .join("+")
}
