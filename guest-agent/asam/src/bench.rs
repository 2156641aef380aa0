//! `bench-preproc`: coordinate sort and duplicate marking of one aligned
//! SAM file (bwa's output) by each tool, every stage timed on its own, then
//! ArrowSAM's result gated against samtools' order and Picard's duplicates
//! and metrics, and every other tool's duplicate sets against Picard's.
//!
//! Equal accounting. Every tool starts from the same SAM file and ends with
//! a coordinate-sorted, duplicate-marked BAM file in the same directory
//! (`out_dir`), and every stage it needs on the way is timed:
//!
//! | tool     | stages                                                          |
//! |----------|-----------------------------------------------------------------|
//! | picard   | `sort` (SortSam, SAM → BAM), `markdup` (MarkDuplicates + metrics) |
//! | sambamba | `convert` (view -S, SAM → BAM: it sorts BAM only), `sort`, `markdup` |
//! | samtools | `fixmate` (SAM → BAM with mate tags markdup needs), `sort`, `markdup` |
//! | samblaster | `markdup` (on bwa's name-grouped SAM, SAM → SAM), `sort` (samtools sort → BAM) |
//! | bamsormadup | `sort-markdup` (biobambam2: SAM → sorted, marked BAM in one pass) |
//! | arrowsam | `load` (SAM → Arrow store), `sort`, `markdup`, `write` (BAM + metrics) |
//!
//! Every stage also reports its peak resident memory: an external tool's
//! `wait4` ru_maxrss, ArrowSAM's own high-water mark over the stage (see
//! [`crate::peak`]), with the bytes its tmpfs store holds beside it.
//!
//! We chose the common SAM input over a common BAM input because SAM is
//! what the aligner writes: a BAM start would hide ArrowSAM's parsing
//! (`load`) and sambamba's conversion, both real costs of the pipeline.
//! Each Picard stage is a JVM of its own; `picard jvm-startup` (a
//! `PicardCommandLine SortSam --version` call: the JVM starts, Picard
//! loads its tools, parses the command line and exits) is timed apart, so
//! a reader sees how much of each Picard stage is start-up. Intermediate
//! files go to `out_dir` for the file-based tools; ArrowSAM's
//! intermediates are its shared-memory store (`store_dir`), which is the
//! point of the format.
//!
//! Gates (untimed, after all tools ran; see [`crate::gates`]): ArrowSAM's
//! BAM must hold the records of `samtools sort` of the same SAM in the same
//! coordinate order, whole records compared; its duplicate set must be
//! Picard's, record for record, and its metrics' counts Picard's, library
//! for library. Every other tool's duplicate set goes through the same
//! comparison with Picard's under its rule ([`gates::Rule::of`]):
//! samblaster, for one, keeps the first pair of a duplicate set it sees
//! where Picard keeps the one with the best base qualities, by design, so
//! the records that differ are reported ([`Agreement`]) while each of
//! Picard's duplicate sets must have as many records marked, and nothing
//! outside them (samblaster's orphans, duplicates by its own definition,
//! reported only).
//! Picard's reference is its timed run when `picard` is a tool and only
//! ArrowSAM is gated; the other tools' gate needs Picard's duplicate-set
//! tags (`TAG_DUPLICATE_SET_MEMBERS`), which the timed run, left as users
//! run it, does not write: then an untimed MarkDuplicates of Picard's
//! sorted BAM (or, without `picard`, an untimed sort and MarkDuplicates)
//! is the reference. Every gate runs; any failure fails the whole run,
//! each naming its tool, the first differing read (or library) and the
//! differing reads: no number of a wrong result is printed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use serde::Serialize;

use crate::bam_out::write_bam;
use crate::gates::{self, GateError};
use crate::load::read_sam_into;
use crate::markdup::mark_duplicates;
use crate::metrics::{DuplicationMetrics, duplication_metrics, write_metrics};
use crate::peak;
use crate::schema::{BatchLimits, flag, schema, with_flags};
use crate::sort::sort_batches_with;
use crate::store;
use crate::tools::{BAMSORMADUP, PICARD, SAMBAMBA, SAMBLASTER, SAMTOOLS, Streams, Usage};
use crate::{AsamError, Result};

/// The lines `bench-preproc` prints (types shared with the agent).
pub use testbed_vocab::asam::{
    Agreement, BenchLine, GatePassed, STAGES, StageResult, SummaryLine, TOOLS, Verification,
};

pub struct BenchOptions {
    pub sam: PathBuf,
    pub tools: Vec<String>,
    /// Every tool's result (`<tool>.md.bam`), intermediate BAMs, temporary
    /// files and the gates' reference BAMs.
    pub out_dir: PathBuf,
    /// Where the ArrowSAM store's private directory is made (tmpfs).
    pub store_dir: PathBuf,
    pub threads: usize,
    /// Where ArrowSAM cuts batches.
    pub limits: BatchLimits,
    /// The command line recorded in ArrowSAM's `@PG` and metrics header.
    pub command_line: String,
}

impl BenchOptions {
    /// ArrowSAM's duplicate-marked BAM.
    pub fn arrowsam_bam(&self) -> PathBuf {
        self.out_dir.join("arrowsam.md.bam")
    }

    /// ArrowSAM's duplicate metrics (Picard's format).
    pub fn arrowsam_metrics(&self) -> PathBuf {
        self.out_dir.join("arrowsam.metrics.txt")
    }

    fn runs(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == tool)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub stages: Vec<StageResult>,
    pub verification: Verification,
}

impl BenchReport {
    /// What `bench-preproc` prints: a line per stage, then the summary.
    pub fn lines(&self) -> Vec<BenchLine> {
        self.stages
            .iter()
            .cloned()
            .map(BenchLine::Stage)
            .chain([BenchLine::Summary(SummaryLine::new(
                self.verification.clone(),
            ))])
            .collect()
    }
}

/// Runs every tool, then the gates; a failed gate is an error.
pub fn bench(o: &BenchOptions) -> Result<BenchReport> {
    bench_tampered(o, Tamper::default())
}

/// As [`bench`], with `tamper` called on ArrowSAM's final batches before
/// they are written: how a test breaks the result on purpose to see the
/// gate catch it.
pub fn bench_with<'a>(
    o: &BenchOptions,
    tamper: impl FnOnce(&mut Vec<RecordBatch>) -> Result<()> + 'a,
) -> Result<BenchReport> {
    bench_tampered(
        o,
        Tamper {
            batches: Some(Box::new(tamper)),
            ..Tamper::default()
        },
    )
}

/// Ways a test breaks a result on purpose, to see the gates catch it.
#[derive(Default)]
#[allow(clippy::type_complexity)]
pub struct Tamper<'a> {
    /// ArrowSAM's final batches, before its BAM and metrics are written.
    pub batches: Option<Box<dyn FnOnce(&mut Vec<RecordBatch>) -> Result<()> + 'a>>,
    /// ArrowSAM's duplicate metrics, before they are written.
    pub metrics: Option<Box<dyn FnOnce(&mut Vec<DuplicationMetrics>) -> Result<()> + 'a>>,
    /// The output directory once every tool ran, before the gates: where
    /// `<tool>.md.bam` is.
    pub outputs: Option<Box<dyn FnOnce(&Path) -> Result<()> + 'a>>,
}

/// As [`bench`], with the results broken as `tamper` says.
pub fn bench_tampered(o: &BenchOptions, tamper: Tamper<'_>) -> Result<BenchReport> {
    if let Some(t) = o.tools.iter().find(|t| !TOOLS.contains(&t.as_str())) {
        return Err(AsamError::Invalid(format!(
            "unknown tool {t:?}; known: {}",
            TOOLS.join(", ")
        )));
    }
    std::fs::create_dir_all(&o.out_dir).map_err(|e| AsamError::io(&o.out_dir, e))?;
    let mut stages = Vec::new();
    let Tamper {
        batches,
        metrics,
        outputs,
    } = tamper;
    let mut arrowsam_tamper = Some((batches, metrics));
    for tool in &o.tools {
        match tool.as_str() {
            "picard" => stages.extend(picard(o)?),
            "sambamba" => stages.extend(sambamba(o)?),
            "samtools" => stages.extend(samtools(o)?),
            "samblaster" => stages.extend(samblaster(o)?),
            "bamsormadup" => stages.extend(bamsormadup(o)?),
            _ => {
                let (b, m) = arrowsam_tamper
                    .take()
                    .ok_or_else(|| AsamError::Invalid("arrowsam named twice in --tools".into()))?;
                stages.extend(run_arrowsam(o, b, m)?);
            }
        }
    }
    if let Some(f) = outputs {
        f(&o.out_dir)?;
    }
    let verification = verify(o)?;
    Ok(BenchReport {
        stages,
        verification,
    })
}

/// The tools whose duplicate sets are gated by [`gates::check_marker`]:
/// all but Picard (the reference) and ArrowSAM (gated exactly).
fn markers(o: &BenchOptions) -> Vec<&String> {
    o.tools
        .iter()
        .filter(|t| !matches!(t.as_str(), "picard" | "arrowsam"))
        .collect()
}

/// Every gate, each reference made untimed if the timed tools did not
/// already make it; all run before a failure fails the run.
fn verify(o: &BenchOptions) -> Result<Verification> {
    let others = markers(o);
    let mut v = Verification {
        duplicates_vs_picard: None,
        order_vs_samtools: None,
        metrics_vs_picard: None,
        agreement: Vec::new(),
    };
    if others.is_empty() && !o.runs("arrowsam") {
        return Ok(v);
    }
    let reference = picard_reference(o, !others.is_empty())?;
    let mut failed = Vec::new();
    for tool in others {
        let theirs = o.out_dir.join(format!("{tool}.md.bam"));
        if let Some(a) = passed(
            gates::check_marker(tool, &theirs, &reference.bam),
            &mut failed,
        )? {
            v.agreement.push(a);
        }
    }
    if o.runs("arrowsam") {
        gate_arrowsam(o, &reference, &mut v, &mut failed)?;
    }
    if failed.is_empty() {
        Ok(v)
    } else {
        Err(AsamError::Invalid(failed.join("\n")))
    }
}

/// A gate's outcome: passed, or its failure kept in `failed` (None); an
/// error reading the files is the run's error.
fn passed<T>(r: std::result::Result<T, GateError>, failed: &mut Vec<String>) -> Result<Option<T>> {
    match r {
        Ok(p) => Ok(Some(p)),
        Err(GateError::Failed(m)) => {
            failed.push(format!("correctness gate failed: {m}"));
            Ok(None)
        }
        Err(GateError::Read(e)) => Err(e),
    }
}

/// Picard's duplicate-marked BAM of the input and its metrics.
struct Reference {
    bam: PathBuf,
    metrics: PathBuf,
}

/// Picard's reference: the timed run's when there is one and `sets` (its
/// duplicate-set tags) is not needed; else an untimed MarkDuplicates with
/// the tags, of the timed run's sorted BAM or of an untimed SortSam's.
fn picard_reference(o: &BenchOptions, sets: bool) -> Result<Reference> {
    if o.runs("picard") && !sets {
        return Ok(Reference {
            bam: o.out_dir.join("picard.md.bam"),
            metrics: o.out_dir.join("picard.metrics.txt"),
        });
    }
    let sorted = if o.runs("picard") {
        o.out_dir.join("picard.sorted.bam")
    } else {
        let sorted = o.out_dir.join("gate.picard.sorted.bam");
        picard_sort(o, &sorted)?;
        sorted
    };
    let r = Reference {
        bam: o.out_dir.join("gate.picard.md.bam"),
        metrics: o.out_dir.join("gate.picard.metrics.txt"),
    };
    picard_markdup(
        o,
        &sorted,
        &r.bam,
        &r.metrics,
        &["TAG_DUPLICATE_SET_MEMBERS=true"],
    )?;
    Ok(r)
}

/// ArrowSAM's gates: order (against samtools sort of the input),
/// duplicates and metrics (against `reference`), each kept in `v` when it
/// passed, in `failed` when not.
fn gate_arrowsam(
    o: &BenchOptions,
    reference: &Reference,
    v: &mut Verification,
    failed: &mut Vec<String>,
) -> Result<()> {
    let ours = o.arrowsam_bam();
    // samtools sort of the input itself: its sort stage reads fixmate's
    // output, whose records carry extra tags.
    let order_ref = o.out_dir.join("gate.samtools-sorted.bam");
    samtools_sort(o, &o.sam, &order_ref)?;
    let as_line = |p: gates::Passed| GatePassed {
        records: p.records,
        duplicates: p.duplicates,
    };
    let order = gates::check_order(&ours, &order_ref, flag::DUPLICATE as u16);
    v.order_vs_samtools = passed(order, failed)?.map(as_line);
    let dups = gates::check_duplicates(&ours, &reference.bam);
    v.duplicates_vs_picard = passed(dups, failed)?.map(as_line);
    let metrics = gates::check_metrics(&o.arrowsam_metrics(), &reference.metrics);
    v.metrics_vs_picard = passed(metrics, failed)?.map(as_line);
    Ok(())
}

/// What one stage took: its wall time, its peak resident memory and, for
/// ArrowSAM, what its store held at the end.
#[derive(Debug, Clone, Copy)]
struct Measured {
    seconds: f64,
    peak_rss_bytes: u64,
    store_bytes: Option<u64>,
}

/// An external tool's stage: wall time around the run, its peak memory
/// from the run's usage.
fn tool_stage(f: impl FnOnce() -> Result<Usage>) -> Result<Measured> {
    let t = Instant::now();
    let usage = f()?;
    Ok(Measured {
        seconds: t.elapsed().as_secs_f64(),
        peak_rss_bytes: usage.max_rss_bytes,
        store_bytes: None,
    })
}

/// An ArrowSAM stage, in this process: wall time, this process's
/// high-water mark over the stage (reset before the clock starts, read
/// after it stops) and what the store directory holds at the end.
fn own_stage<T>(store: &Path, f: impl FnOnce() -> Result<T>) -> Result<(Measured, T)> {
    peak::reset()?;
    let t = Instant::now();
    let v = f()?;
    let seconds = t.elapsed().as_secs_f64();
    let m = Measured {
        seconds,
        peak_rss_bytes: peak::high_water_bytes()?,
        store_bytes: Some(peak::dir_bytes(store)?),
    };
    Ok((m, v))
}

fn stage(
    tool: &str,
    stage: &str,
    m: Measured,
    records: u64,
    duplicates: Option<u64>,
) -> StageResult {
    StageResult {
        tool: tool.into(),
        stage: stage.into(),
        seconds: m.seconds,
        records,
        duplicates,
        peak_rss_bytes: Some(m.peak_rss_bytes),
        store_bytes: m.store_bytes,
    }
}

fn path_arg(key: &str, p: &Path) -> String {
    format!("{key}={}", p.display())
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

const PICARD_COMMON: [&str; 3] = [
    "VALIDATION_STRINGENCY=SILENT",
    "VERBOSITY=ERROR",
    "QUIET=true",
];

fn picard_sort(o: &BenchOptions, out: &Path) -> Result<Usage> {
    let mut a = vec![
        "SortSam".to_string(),
        path_arg("I", &o.sam),
        path_arg("O", out),
        "SORT_ORDER=coordinate".into(),
        path_arg("TMP_DIR", &o.out_dir),
    ];
    a.extend(PICARD_COMMON.iter().map(|s| s.to_string()));
    PICARD.run_usage(&a)
}

fn picard_markdup(
    o: &BenchOptions,
    input: &Path,
    out: &Path,
    metrics: &Path,
    extra: &[&str],
) -> Result<Usage> {
    let mut a = vec![
        "MarkDuplicates".to_string(),
        path_arg("I", input),
        path_arg("O", out),
        path_arg("M", metrics),
        path_arg("TMP_DIR", &o.out_dir),
    ];
    a.extend(PICARD_COMMON.iter().map(|s| s.to_string()));
    a.extend(extra.iter().map(|s| s.to_string()));
    PICARD.run_usage(&a)
}

/// Starts the JVM and Picard's command line, which print the version and
/// exit (with status 1: Picard's parser treats `--version` as an early
/// exit). Only that exit counts as success; its peak memory is not known
/// then and is left out (None).
pub fn picard_jvm_startup() -> Result<Option<Usage>> {
    match PICARD.run_usage(&["SortSam", "--version"]) {
        Ok(u) => Ok(Some(u)),
        Err(AsamError::Tool { stderr, .. }) if stderr.contains("Version:") => Ok(None),
        Err(e) => Err(e),
    }
}

fn picard(o: &BenchOptions) -> Result<Vec<StageResult>> {
    let sorted = o.out_dir.join("picard.sorted.bam");
    let marked = o.out_dir.join("picard.md.bam");
    let t = Instant::now();
    let jvm = picard_jvm_startup()?;
    let jvm_s = t.elapsed().as_secs_f64();
    let sort = tool_stage(|| picard_sort(o, &sorted))?;
    let metrics = o.out_dir.join("picard.metrics.txt");
    let md = tool_stage(|| picard_markdup(o, &sorted, &marked, &metrics, &[]))?;
    let (records, dups) = gates::count_records(&marked)?;
    let mut startup = stage(
        "picard",
        "jvm-startup",
        Measured {
            seconds: jvm_s,
            peak_rss_bytes: 0,
            store_bytes: None,
        },
        0,
        None,
    );
    startup.peak_rss_bytes = jvm.map(|u| u.max_rss_bytes);
    Ok(vec![
        startup,
        stage("picard", "sort", sort, records, None),
        stage("picard", "markdup", md, records, Some(dups)),
    ])
}

fn sambamba(o: &BenchOptions) -> Result<Vec<StageResult>> {
    let input = o.out_dir.join("sambamba.input.bam");
    let sorted = o.out_dir.join("sambamba.sorted.bam");
    let marked = o.out_dir.join("sambamba.md.bam");
    let t = o.threads.max(1).to_string();
    let tmp = format!("--tmpdir={}", o.out_dir.display());
    let conv = tool_stage(|| {
        SAMBAMBA.run_usage(&[
            "view".into(),
            "-S".into(),
            "-f".into(),
            "bam".into(),
            "-t".into(),
            t.clone(),
            "-o".into(),
            s(&input),
            s(&o.sam),
        ])
    })?;
    let sort = tool_stage(|| {
        SAMBAMBA.run_usage(&[
            "sort".into(),
            "-t".into(),
            t.clone(),
            tmp.clone(),
            "-o".into(),
            s(&sorted),
            s(&input),
        ])
    })?;
    let md = tool_stage(|| {
        SAMBAMBA.run_usage(&[
            "markdup".into(),
            "-t".into(),
            t.clone(),
            tmp.clone(),
            s(&sorted),
            s(&marked),
        ])
    })?;
    let (records, dups) = gates::count_records(&marked)?;
    Ok(vec![
        stage("sambamba", "convert", conv, records, None),
        stage("sambamba", "sort", sort, records, None),
        stage("sambamba", "markdup", md, records, Some(dups)),
    ])
}

fn samtools_sort(o: &BenchOptions, input: &Path, out: &Path) -> Result<Usage> {
    let prefix = s(&o.out_dir.join("samtools.tmp"));
    SAMTOOLS.run_usage(&[
        "sort".into(),
        "-@".into(),
        o.threads.max(1).to_string(),
        "-T".into(),
        prefix,
        "-o".into(),
        s(out),
        s(input),
    ])
}

/// samtools needs mate tags (fixmate -m, on name-grouped input such as
/// bwa's) before a coordinate sort, then markdup: three stages.
fn samtools(o: &BenchOptions) -> Result<Vec<StageResult>> {
    let fixed = o.out_dir.join("samtools.fixmate.bam");
    let sorted = o.out_dir.join("samtools.sorted.bam");
    let marked = o.out_dir.join("samtools.md.bam");
    let t = o.threads.max(1).to_string();
    let prefix = s(&o.out_dir.join("samtools.tmp"));
    let fix = tool_stage(|| {
        SAMTOOLS.run_usage(&[
            "fixmate".into(),
            "-m".into(),
            "-@".into(),
            t.clone(),
            s(&o.sam),
            s(&fixed),
        ])
    })?;
    let sort = tool_stage(|| samtools_sort(o, &fixed, &sorted))?;
    let md = tool_stage(|| {
        SAMTOOLS.run_usage(&[
            "markdup".into(),
            "-@".into(),
            t.clone(),
            "-T".into(),
            prefix.clone(),
            s(&sorted),
            s(&marked),
        ])
    })?;
    let (records, dups) = gates::count_records(&marked)?;
    Ok(vec![
        stage("samtools", "fixmate", fix, records, None),
        stage("samtools", "sort", sort, records, None),
        stage("samtools", "markdup", md, records, Some(dups)),
    ])
}

/// samblaster marks duplicates on the aligner's name-grouped stream, before
/// any sort (what it is built for: `bwa mem | samblaster`), here reading
/// the same SAM file; then samtools sorts its SAM into the marked BAM.
fn samblaster(o: &BenchOptions) -> Result<Vec<StageResult>> {
    let marked_sam = o.out_dir.join("samblaster.marked.sam");
    let marked = o.out_dir.join("samblaster.md.bam");
    let md = tool_stage(|| {
        SAMBLASTER.run_usage(&["-i".into(), s(&o.sam), "-o".into(), s(&marked_sam)])
    })?;
    let sort = tool_stage(|| samtools_sort(o, &marked_sam, &marked))?;
    let (records, dups) = gates::count_records(&marked)?;
    Ok(vec![
        stage("samblaster", "markdup", md, records, Some(dups)),
        stage("samblaster", "sort", sort, records, None),
    ])
}

/// biobambam2's bamsormadup: the name-grouped SAM on standard input, a
/// coordinate-sorted, duplicate-marked BAM (and Picard-style metrics) out,
/// in one process and one pass: its one stage is both.
fn bamsormadup(o: &BenchOptions) -> Result<Vec<StageResult>> {
    let marked = o.out_dir.join("bamsormadup.md.bam");
    let both = tool_stage(|| {
        BAMSORMADUP.run_measured(
            &[
                "inputformat=sam".to_string(),
                format!("threads={}", o.threads.max(1)),
                format!("tmpfile={}", o.out_dir.join("bamsormadup.tmp").display()),
                format!("M={}", o.out_dir.join("bamsormadup.metrics.txt").display()),
            ],
            Streams {
                stdin: Some(&o.sam),
                stdout: Some(&marked),
            },
        )
    })?;
    let (records, dups) = gates::count_records(&marked)?;
    Ok(vec![stage(
        "bamsormadup",
        "sort-markdup",
        both,
        records,
        Some(dups),
    )])
}

/// load (SAM -> store), sort (store -> store), markdup (store -> a store
/// holding only the new flags column), write (store -> BAM and metrics);
/// each stage reads the previous one's store by memory-mapping it.
#[allow(clippy::type_complexity)]
fn run_arrowsam(
    o: &BenchOptions,
    tamper: Option<Box<dyn FnOnce(&mut Vec<RecordBatch>) -> Result<()> + '_>>,
    tamper_metrics: Option<Box<dyn FnOnce(&mut Vec<DuplicationMetrics>) -> Result<()> + '_>>,
) -> Result<Vec<StageResult>> {
    // Removed, with the files in it, when this returns.
    let store = store::Store::create_in(&o.store_dir)?;
    // The SAM is streamed into the store: a full batch goes to the IPC file
    // at once, so memory holds one batch per reference, not the file.
    let sd = store.dir().to_path_buf();
    let (load, (aligned, header, records, names)) = own_stage(&sd, || {
        let (aligned, head) = store.put_with("aligned.arrow", &schema(), |write| {
            let file = std::fs::File::open(&o.sam).map_err(|e| AsamError::io(&o.sam, e))?;
            read_sam_into(
                std::io::BufReader::with_capacity(1 << 20, file),
                &o.sam,
                &o.limits,
                |_, b| write(b),
            )
        })?;
        let header = store.put_text("header.sam", &head.header_text)?;
        Ok((aligned, header, head.records, head.reference_names))
    })?;
    let (sort, sorted_store) = own_stage(&sd, || {
        let sorted = sort_batches_with(&store::get(&aligned)?, o.threads, &o.limits)?;
        store.put("sorted.arrow", &schema(), &sorted)
    })?;
    let flags_schema = Arc::new(Schema::new(vec![Field::new(
        "flags",
        DataType::Int32,
        false,
    )]));
    let (md, (flags_store, dups)) = own_stage(&sd, || {
        let sorted = store::get(&sorted_store)?;
        let marked = mark_duplicates(&sorted, &store::get_text(&header)?, o.threads)?;
        let columns = marked
            .flags
            .into_iter()
            .map(|f| {
                RecordBatch::try_new(flags_schema.clone(), vec![Arc::new(f) as ArrayRef])
                    .map_err(|e| AsamError::arrow("flags batch", e))
            })
            .collect::<Result<Vec<_>>>()?;
        let flags = store.put("flags.arrow", &flags_schema, &columns)?;
        Ok((
            flags,
            (
                marked.duplicates as u64,
                marked.optical_pairs,
                marked.pair_sets,
            ),
        ))
    })?;
    let (dups, optical_pairs, pair_sets) = dups;
    let (write, written) = own_stage(&sd, || {
        let header_text = store::get_text(&header)?;
        let mut batches = final_batches(&store::get(&sorted_store)?, &store::get(&flags_store)?)?;
        if let Some(t) = tamper {
            t(&mut batches)?;
        }
        let n = write_bam(
            &o.arrowsam_bam(),
            &header_text,
            &names,
            &batches,
            o.threads,
            &o.command_line,
        )?;
        let mut metrics = duplication_metrics(&batches, &header_text, &optical_pairs)?;
        if let Some(t) = tamper_metrics {
            t(&mut metrics)?;
        }
        write_metrics(
            &o.arrowsam_metrics(),
            &metrics,
            Some(&pair_sets),
            &o.command_line,
        )?;
        Ok(n)
    })?;
    if written != records {
        return Err(AsamError::Invalid(format!(
            "arrowsam wrote {written} of {records} records"
        )));
    }
    Ok(vec![
        stage("arrowsam", "load", load, records, None),
        stage("arrowsam", "sort", sort, records, None),
        stage("arrowsam", "markdup", md, records, Some(dups)),
        stage("arrowsam", "write", write, records, Some(dups)),
    ])
}

/// The sorted records with markdup's flags column in place of theirs.
fn final_batches(sorted: &[RecordBatch], flags: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    if sorted.len() != flags.len() {
        return Err(AsamError::Invalid(format!(
            "{} sorted batches but {} flags batches",
            sorted.len(),
            flags.len()
        )));
    }
    sorted
        .iter()
        .zip(flags)
        .map(|(b, f)| {
            let col = f
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int32Array>()
                .ok_or_else(|| AsamError::Invalid("flags store: not int32".into()))?;
            with_flags(b, col.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_the_untyped_json_and_read_back() {
        let stage = |tool: &str, duplicates| StageResult {
            tool: tool.into(),
            stage: "markdup".into(),
            seconds: 0.5,
            records: 8,
            duplicates,
            peak_rss_bytes: Some(1 << 20),
            store_bytes: None,
        };
        let report = BenchReport {
            stages: vec![stage("picard", Some(2)), stage("samtools", None)],
            verification: Verification {
                duplicates_vs_picard: Some(GatePassed {
                    records: 8,
                    duplicates: 2,
                }),
                order_vs_samtools: None,
                metrics_vs_picard: None,
                agreement: Vec::new(),
            },
        };
        let lines = report.lines();
        let values: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::to_value(l).unwrap())
            .collect();
        let mut want: Vec<serde_json::Value> = report
            .stages
            .iter()
            .map(|s| serde_json::to_value(s).unwrap())
            .collect();
        want.push(serde_json::json!({"summary": true, "verification": report.verification}));
        assert_eq!(values, want);
        assert!(values[1]["duplicates"].is_null());
        for (l, v) in lines.iter().zip(&values) {
            let back: BenchLine = serde_json::from_str(&v.to_string()).unwrap();
            assert_eq!(&back, l);
        }
    }
}
