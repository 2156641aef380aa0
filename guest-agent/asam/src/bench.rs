//! `bench-preproc`: sort and duplicate marking of one aligned SAM file by
//! each tool, every stage timed on its own, then arrowsam checked against
//! samtools' coordinate order and Picard's duplicate flags.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use serde::Serialize;

use crate::load::load_sam;
use crate::markdup::mark_duplicates;
use crate::schema::{Columns, flag, schema, with_flags};
use crate::sort::sort_batches;
use crate::store;
use crate::tools::{PICARD, SAMBAMBA, SAMTOOLS};
use crate::{AsamError, Result};

/// The lines `bench-preproc` prints (types shared with the agent).
pub use testbed_lines::asam::{BenchLine, StageResult, SummaryLine, TOOLS, Verification};

pub struct BenchOptions {
    pub sam: PathBuf,
    pub tools: Vec<String>,
    /// BAM files and temporary files of the other tools.
    pub workdir: PathBuf,
    /// Where the ArrowSAM store's private directory is made (tmpfs).
    pub store_dir: PathBuf,
    pub threads: usize,
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

pub fn bench(o: &BenchOptions) -> Result<BenchReport> {
    if let Some(t) = o.tools.iter().find(|t| !TOOLS.contains(&t.as_str())) {
        return Err(AsamError::Invalid(format!(
            "unknown tool {t:?}; known: {}",
            TOOLS.join(", ")
        )));
    }
    std::fs::create_dir_all(&o.workdir).map_err(|e| AsamError::io(&o.workdir, e))?;
    let mut stages = Vec::new();
    let mut arrowsam = None;
    for tool in &o.tools {
        match tool.as_str() {
            "picard" => stages.extend(picard(o)?),
            "sambamba" => stages.extend(sambamba(o)?),
            "samtools" => stages.extend(samtools(o)?),
            _ => {
                let (s, table) = run_arrowsam(o)?;
                stages.extend(s);
                arrowsam = Some(table);
            }
        }
    }
    let mut verification = Verification {
        dup_mismatches_vs_picard: None,
        order_matches_samtools: None,
        order_first_difference: None,
    };
    if let Some(a) = &arrowsam {
        if o.tools.iter().any(|t| t == "picard") {
            verification.dup_mismatches_vs_picard =
                Some(dup_mismatches(a, &o.workdir.join("picard.md.bam"))?);
        }
        if o.tools.iter().any(|t| t == "samtools") {
            let diff = order_difference(a, &o.workdir.join("samtools.sorted.bam"))?;
            verification.order_matches_samtools = Some(diff.is_none());
            verification.order_first_difference = diff;
        }
    }
    Ok(BenchReport {
        stages,
        verification,
    })
}

fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(f64, T)> {
    let t = Instant::now();
    let v = f()?;
    Ok((t.elapsed().as_secs_f64(), v))
}

fn stage(
    tool: &str,
    stage: &str,
    seconds: f64,
    records: u64,
    duplicates: Option<u64>,
) -> StageResult {
    StageResult {
        tool: tool.into(),
        stage: stage.into(),
        seconds,
        records,
        duplicates,
    }
}

/// Records in a BAM, and those flagged duplicate (samtools, untimed).
fn bam_counts(bam: &Path) -> Result<(u64, u64)> {
    let count = |extra: &[&str]| -> Result<u64> {
        let mut args = vec!["view", "-c"];
        args.extend_from_slice(extra);
        let p = bam.to_string_lossy();
        args.push(&p);
        let out = SAMTOOLS.run(&args)?;
        String::from_utf8_lossy(&out)
            .trim()
            .parse()
            .map_err(|e| AsamError::Invalid(format!("samtools view -c {}: {e}", bam.display())))
    };
    Ok((count(&[])?, count(&["-f", "1024"])?))
}

fn path_arg(key: &str, p: &Path) -> String {
    format!("{key}={}", p.display())
}

fn picard(o: &BenchOptions) -> Result<Vec<StageResult>> {
    let sorted = o.workdir.join("picard.sorted.bam");
    let marked = o.workdir.join("picard.md.bam");
    let common = [
        "VALIDATION_STRINGENCY=SILENT",
        "VERBOSITY=ERROR",
        "QUIET=true",
    ];
    let tmp = path_arg("TMP_DIR", &o.workdir);
    let (sort_s, _) = timed(|| {
        let mut a = vec![
            "SortSam".to_string(),
            path_arg("I", &o.sam),
            path_arg("O", &sorted),
        ];
        a.extend(["SORT_ORDER=coordinate".to_string(), tmp.clone()]);
        a.extend(common.iter().map(|s| s.to_string()));
        PICARD.run(&a)
    })?;
    let (md_s, _) = timed(|| {
        let mut a = vec![
            "MarkDuplicates".to_string(),
            path_arg("I", &sorted),
            path_arg("O", &marked),
            path_arg("M", &o.workdir.join("picard.metrics.txt")),
            tmp.clone(),
        ];
        a.extend(common.iter().map(|s| s.to_string()));
        PICARD.run(&a)
    })?;
    let (records, dups) = bam_counts(&marked)?;
    Ok(vec![
        stage("picard", "sort", sort_s, records, None),
        stage("picard", "markdup", md_s, records, Some(dups)),
    ])
}

fn sambamba(o: &BenchOptions) -> Result<Vec<StageResult>> {
    let input = o.workdir.join("sambamba.input.bam");
    let sorted = o.workdir.join("sambamba.sorted.bam");
    let marked = o.workdir.join("sambamba.md.bam");
    let t = o.threads.max(1).to_string();
    let tmp = format!("--tmpdir={}", o.workdir.display());
    let s = |p: &Path| p.to_string_lossy().into_owned();
    // sambamba sorts BAM only: the SAM -> BAM conversion is its own stage.
    let (conv_s, _) = timed(|| {
        SAMBAMBA.run(&[
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
    let (sort_s, _) = timed(|| {
        SAMBAMBA.run(&[
            "sort".into(),
            "-t".into(),
            t.clone(),
            tmp.clone(),
            "-o".into(),
            s(&sorted),
            s(&input),
        ])
    })?;
    let (md_s, _) = timed(|| {
        SAMBAMBA.run(&[
            "markdup".into(),
            "-t".into(),
            t.clone(),
            tmp.clone(),
            s(&sorted),
            s(&marked),
        ])
    })?;
    let (records, dups) = bam_counts(&marked)?;
    Ok(vec![
        stage("sambamba", "convert", conv_s, records, None),
        stage("sambamba", "sort", sort_s, records, None),
        stage("sambamba", "markdup", md_s, records, Some(dups)),
    ])
}

/// samtools needs mate tags (fixmate -m, on name-grouped input such as
/// bwa's) before a coordinate sort, then markdup: three stages.
fn samtools(o: &BenchOptions) -> Result<Vec<StageResult>> {
    let fixed = o.workdir.join("samtools.fixmate.bam");
    let sorted = o.workdir.join("samtools.sorted.bam");
    let marked = o.workdir.join("samtools.md.bam");
    let t = o.threads.max(1).to_string();
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let prefix = s(&o.workdir.join("samtools.tmp"));
    let (fix_s, _) = timed(|| {
        SAMTOOLS.run(&[
            "fixmate".into(),
            "-m".into(),
            "-@".into(),
            t.clone(),
            s(&o.sam),
            s(&fixed),
        ])
    })?;
    let (sort_s, _) = timed(|| {
        SAMTOOLS.run(&[
            "sort".into(),
            "-@".into(),
            t.clone(),
            "-T".into(),
            prefix.clone(),
            "-o".into(),
            s(&sorted),
            s(&fixed),
        ])
    })?;
    let (md_s, _) = timed(|| {
        SAMTOOLS.run(&[
            "markdup".into(),
            "-@".into(),
            t.clone(),
            "-T".into(),
            prefix.clone(),
            s(&sorted),
            s(&marked),
        ])
    })?;
    let (records, dups) = bam_counts(&marked)?;
    Ok(vec![
        stage("samtools", "fixmate", fix_s, records, None),
        stage("samtools", "sort", sort_s, records, None),
        stage("samtools", "markdup", md_s, records, Some(dups)),
    ])
}

/// The sorted, duplicate-marked table arrowsam ends with.
pub struct ArrowsamResult {
    pub reference_names: Vec<String>,
    pub batches: Vec<RecordBatch>,
}

/// load (SAM -> store), sort (store -> store), markdup (store -> a store
/// holding only the new flags column); each stage reads the previous one's
/// store by memory-mapping it.
fn run_arrowsam(o: &BenchOptions) -> Result<(Vec<StageResult>, ArrowsamResult)> {
    // Removed, with the files in it, when this returns.
    let store = store::Store::create_in(&o.store_dir)?;
    let (load_s, (aligned, header, records, names)) = timed(|| {
        let t = load_sam(&o.sam)?;
        let aligned = store.put("aligned.arrow", &schema(), &t.batches)?;
        let header = store.put_text("header.sam", &t.header_text)?;
        Ok((aligned, header, t.records() as u64, t.reference_names))
    })?;
    let (sort_s, sorted_store) = timed(|| {
        let sorted = sort_batches(&store::get(&aligned)?, o.threads)?;
        store.put("sorted.arrow", &schema(), &sorted)
    })?;
    let (md_s, (flags_store, dups)) = timed(|| {
        let sorted = store::get(&sorted_store)?;
        let marked = mark_duplicates(&sorted, &store::get_text(&header)?, o.threads)?;
        let flags_schema = std::sync::Arc::new(Schema::new(vec![Field::new(
            "flags",
            DataType::Int32,
            false,
        )]));
        let columns = marked
            .flags
            .into_iter()
            .map(|f| {
                RecordBatch::try_new(
                    flags_schema.clone(),
                    vec![std::sync::Arc::new(f) as ArrayRef],
                )
                .map_err(|e| AsamError::arrow("flags batch", e))
            })
            .collect::<Result<Vec<_>>>()?;
        let flags = store.put("flags.arrow", &flags_schema, &columns)?;
        Ok((flags, marked.duplicates as u64))
    })?;
    // The final table: the sorted records with the new flags column.
    let sorted = store::get(&sorted_store)?;
    let flags = store::get(&flags_store)?;
    let batches = sorted
        .iter()
        .zip(&flags)
        .map(|(b, f)| {
            let col = f
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int32Array>()
                .ok_or_else(|| AsamError::Invalid("flags store: not int32".into()))?;
            with_flags(b, col.clone())
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((
        vec![
            stage("arrowsam", "load", load_s, records, None),
            stage("arrowsam", "sort", sort_s, records, None),
            stage("arrowsam", "markdup", md_s, records, Some(dups)),
        ],
        ArrowsamResult {
            reference_names: names,
            batches,
        },
    ))
}

/// (QNAME, FLAG bits that tell a record of a read apart, RNAME, POS) of
/// each line of `samtools view BAM`, with its duplicate bit.
fn bam_duplicate_bits(bam: &Path) -> Result<HashMap<(String, i32, String, i32), bool>> {
    let text = SAMTOOLS.run(&["view".as_ref(), bam.as_os_str()])?;
    let text = String::from_utf8_lossy(&text);
    let mut out = HashMap::new();
    for line in text.lines() {
        let (key, f) = key_of_line(line).ok_or_else(|| {
            AsamError::Invalid(format!(
                "samtools view {}: bad line {line:?}",
                bam.display()
            ))
        })?;
        out.insert(key, f & flag::DUPLICATE != 0);
    }
    Ok(out)
}

const IDENTITY_BITS: i32 = 0x40 | 0x80 | flag::SECONDARY | flag::SUPPLEMENTARY;

fn key_of_line(line: &str) -> Option<((String, i32, String, i32), i32)> {
    let mut f = line.split('\t');
    let qname = f.next()?.to_string();
    let flags: i32 = f.next()?.parse().ok()?;
    let rname = f.next()?.to_string();
    let pos: i32 = f.next()?.parse().ok()?;
    Some(((qname, flags & IDENTITY_BITS, rname, pos), flags))
}

/// Records whose duplicate bit differs between arrowsam and Picard, plus
/// records only one of them has.
pub fn dup_mismatches(a: &ArrowsamResult, picard_bam: &Path) -> Result<u64> {
    let mut picard = bam_duplicate_bits(picard_bam)?;
    let mut mismatches = 0;
    for b in &a.batches {
        let c = Columns::of(b)?;
        for i in 0..b.num_rows() {
            let r = c.row(i);
            let rname = name_of(&a.reference_names, r.rid);
            let key = (
                r.qname.to_string(),
                r.flags & IDENTITY_BITS,
                rname.to_string(),
                r.pos,
            );
            match picard.remove(&key) {
                Some(d) if d == (r.flags & flag::DUPLICATE != 0) => {}
                _ => mismatches += 1,
            }
        }
    }
    Ok(mismatches + picard.len() as u64)
}

fn name_of(names: &[String], id: i32) -> &str {
    usize::try_from(id)
        .ok()
        .and_then(|i| names.get(i))
        .map_or("*", String::as_str)
}

/// Index of the first record whose (reference, position) differs from the
/// samtools-sorted BAM's, or None when the sequences are equal.
pub fn order_difference(a: &ArrowsamResult, samtools_bam: &Path) -> Result<Option<u64>> {
    let text = SAMTOOLS.run(&["view".as_ref(), samtools_bam.as_os_str()])?;
    let text = String::from_utf8_lossy(&text);
    let mut theirs = text.lines().map(|l| {
        let mut f = l.split('\t').skip(2);
        (
            f.next().unwrap_or("").to_string(),
            f.next().unwrap_or("").parse::<i32>().unwrap_or(-1),
        )
    });
    let mut i = 0u64;
    for b in &a.batches {
        let c = Columns::of(b)?;
        for row in 0..b.num_rows() {
            let ours = (
                name_of(&a.reference_names, c.rids.value(row)),
                c.poss.value(row),
            );
            match theirs.next() {
                Some((n, p)) if n == ours.0 && p == ours.1 => {}
                _ => return Ok(Some(i)),
            }
            i += 1;
        }
    }
    Ok(theirs.next().map(|_| i))
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
        };
        let report = BenchReport {
            stages: vec![stage("picard", Some(2)), stage("samtools", None)],
            verification: Verification {
                dup_mismatches_vs_picard: Some(0),
                order_matches_samtools: None,
                order_first_difference: None,
            },
        };
        let lines = report.lines();
        let values: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::to_value(l).unwrap())
            .collect();
        // As cli.rs printed them before the line types existed.
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
