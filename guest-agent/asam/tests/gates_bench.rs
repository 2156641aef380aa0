//! bench-preproc end to end on a synthetic SAM with the real tools: every
//! tool's stages, ArrowSAM's gates, its BAM (samtools quickcheck, Picard
//! ValidateSamFile) and metrics (Picard's counts), the other tools'
//! duplicate-set gates; and the gates failing, naming the read (or the
//! library), when ArrowSAM's result, its metrics or another tool's output
//! is broken on purpose.

mod preproc_data;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use arrow::array::{Int32Array, RecordBatch, StringArray};
use testbed_asam::bench::{BenchOptions, TOOLS, Tamper, bench, bench_tampered, bench_with};
use testbed_asam::metrics::read_metrics;
use testbed_asam::schema::{BatchLimits, Columns, TAGSS, flag, with_flags};

fn private_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .unwrap()
}

/// A synthetic SAM in `dir` and options for a run on it whose batches hold
/// at most 300 rows (each chromosome spans several).
fn setup(dir: &Path, tools: &[&str], pairs: usize) -> BenchOptions {
    let sam = dir.join("in.sam");
    std::fs::write(&sam, preproc_data::synthetic_sam(pairs, 11)).unwrap();
    BenchOptions {
        sam,
        tools: tools.iter().map(|t| t.to_string()).collect(),
        out_dir: dir.join("out"),
        store_dir: dir.join("store"),
        threads: 2,
        limits: BatchLimits {
            max_rows: 300,
            max_string_bytes: 1 << 20,
        },
        command_line: "testbed-asam bench-preproc --test".into(),
    }
}

fn tool(program: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(program).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
#[ignore = "runs every peer tool, Picard included (~6 s); ./x test runs it"]
fn every_tool_runs_its_stages_and_arrowsam_passes_its_gates_with_an_output_picard_accepts() {
    let dir = private_dir();
    // Every tool bench-preproc knows, in its order.
    let o = setup(dir.path(), &TOOLS, 1500);
    let report = bench(&o).unwrap();
    let stages: Vec<(&str, &str)> = report
        .stages
        .iter()
        .map(|s| (s.tool.as_str(), s.stage.as_str()))
        .collect();
    assert_eq!(
        stages,
        [
            ("picard", "jvm-startup"),
            ("picard", "sort"),
            ("picard", "markdup"),
            ("sambamba", "convert"),
            ("sambamba", "sort"),
            ("sambamba", "markdup"),
            ("samtools", "fixmate"),
            ("samtools", "sort"),
            ("samtools", "markdup"),
            ("samblaster", "markdup"),
            ("samblaster", "sort"),
            ("bamsormadup", "sort-markdup"),
            ("arrowsam", "load"),
            ("arrowsam", "sort"),
            ("arrowsam", "markdup"),
            ("arrowsam", "write"),
        ]
    );
    assert!(report.stages.iter().all(|s| s.seconds > 0.0));
    // Every stage's peak memory, but Picard's start-up (it exits with an
    // error status, its usage unread): a real process's, not a default.
    for s in &report.stages {
        match (s.stage.as_str(), s.peak_rss_bytes) {
            ("jvm-startup", None) => {}
            (_, Some(b)) => assert!((1 << 20..64 << 30).contains(&b), "{s:?}"),
            _ => panic!("no peak memory: {s:?}"),
        }
        assert_eq!(s.store_bytes.is_some(), s.tool == "arrowsam", "{s:?}");
    }
    // Picard's MarkDuplicates is a JVM: its peak is far above samtools'.
    let peak = |t: &str, st: &str| {
        report
            .stages
            .iter()
            .find(|s| s.tool == t && s.stage == st)
            .and_then(|s| s.peak_rss_bytes)
            .unwrap()
    };
    assert!(
        peak("picard", "markdup") > 4 * peak("samtools", "markdup"),
        "{:?}",
        report.stages
    );
    // ArrowSAM's store grows from load to sort (a sorted copy) and is
    // what it is after writing.
    let store = |st: &str| {
        report
            .stages
            .iter()
            .find(|s| s.tool == "arrowsam" && s.stage == st)
            .and_then(|s| s.store_bytes)
            .unwrap()
    };
    assert!(store("load") > 0 && store("sort") > store("load"));
    let markdup = |t: &str| {
        report
            .stages
            .iter()
            .find(|s| s.tool == t && matches!(s.stage.as_str(), "markdup" | "sort-markdup"))
            .unwrap()
            .clone()
    };
    let (ours, picard) = (markdup("arrowsam"), markdup("picard"));
    assert_eq!(ours.records, picard.records);
    assert_eq!(ours.duplicates, picard.duplicates);
    assert!(ours.duplicates.unwrap() > 100, "{ours:?}");
    let v = &report.verification;
    assert_eq!(v.duplicates_vs_picard.unwrap().records, ours.records);
    assert_eq!(
        v.duplicates_vs_picard.unwrap().duplicates,
        ours.duplicates.unwrap()
    );
    assert_eq!(v.order_vs_samtools.unwrap().records, ours.records);
    // The metrics gate ran through bench: both libraries, every duplicate.
    let m = v.metrics_vs_picard.unwrap();
    assert_eq!((m.records, m.duplicates), (2, ours.duplicates.unwrap()));
    // Every other tool's duplicate set against Picard's: the records that
    // differ reported, a difference named, and its duplicate-set gate
    // passed.
    let tools: Vec<&str> = v.agreement.iter().map(|a| a.tool.as_str()).collect();
    assert_eq!(tools, ["sambamba", "samtools", "samblaster", "bamsormadup"]);
    for a in &v.agreement {
        assert_eq!(a.records, ours.records, "{a:?}");
        assert_eq!(Some(a.duplicates), markdup(&a.tool).duplicates, "{a:?}");
        assert!(a.differing_reads <= a.differing_records, "{a:?}");
        assert_eq!(a.reads.len() as u64, a.differing_reads.min(20), "{a:?}");
        let g = a.duplicate_sets.unwrap();
        assert_eq!(
            (g.records, g.duplicates),
            (a.records, a.duplicates),
            "{a:?}"
        );
    }
    // samblaster keeps the first pair of a set where Picard keeps the one
    // with the best base qualities: on this data they differ, and the run
    // still passed: its sets are Picard's.
    let sb = &v.agreement[2];
    assert!(sb.differing_records > 0, "{sb:?}");
    // One output directory for every tool's result.
    for t in TOOLS {
        assert!(o.out_dir.join(format!("{t}.md.bam")).is_file(), "{t}");
    }

    let bam = o.arrowsam_bam();
    let bam_s = bam.display().to_string();
    let (ok, text) = tool("samtools", &["quickcheck", "-v", &bam_s]);
    assert!(ok, "quickcheck: {text}");
    let (ok, text) = tool(
        "PicardCommandLine",
        &["ValidateSamFile", &format!("I={bam_s}"), "MODE=VERBOSE"],
    );
    let complaints: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("ERROR::") || l.starts_with("WARNING::"))
        .collect();
    assert!(
        ok && text.contains("No errors found") && complaints.is_empty(),
        "ValidateSamFile: {complaints:?} {text}"
    );
    let (_, header) = tool("samtools", &["view", "-H", &bam_s]);
    let lines: Vec<&str> = header.lines().collect();
    assert_eq!(lines[0], "@HD\tVN:1.6\tSO:coordinate");
    for want in [
        "@SQ\tSN:chr1\tLN:20000",
        "@SQ\tSN:chr2\tLN:20000",
        "@RG\tID:rgA\tSM:s1\tLB:libA\tPL:ILLUMINA",
        "@RG\tID:rgB\tSM:s1\tLB:libB\tPL:ILLUMINA",
        "@PG\tID:bwa\tPN:bwa\tVN:0.7.17",
    ] {
        assert!(lines.contains(&want), "{want:?} not in {header}");
    }
    assert!(
        lines.iter().any(
            |l| l.starts_with("@PG\tID:testbed-asam\tPN:testbed-asam\tVN:")
                && l.ends_with("\tPP:bwa\tCL:testbed-asam bench-preproc --test")
        ),
        "{header}"
    );

    // The metrics: Picard's counts per library, and its library size.
    let mine = read_metrics(&o.arrowsam_metrics()).unwrap();
    let theirs = read_metrics(&o.out_dir.join("picard.metrics.txt")).unwrap();
    let mut theirs_sorted = theirs.clone();
    theirs_sorted.sort_by(|a, b| a.library.cmp(&b.library));
    assert_eq!(mine.len(), 2, "{mine:?}");
    for (m, p) in mine.iter().zip(&theirs_sorted) {
        assert_eq!(m.library, p.library);
        assert_eq!(m.counts(), p.counts(), "{m:?} vs {p:?}");
        assert!(
            m.read_pair_duplicates > 0
                && m.unmapped_reads > 0
                && m.read_pair_optical_duplicates > 0,
            "{m:?}"
        );
        assert_eq!(m.estimated_library_size, p.estimated_library_size);
        assert!((m.percent_duplication - p.percent_duplication).abs() < 1e-6);
    }
    // The histogram section (duplicate-set sizes; two libraries: no ROI)
    // as Picard prints it, character for character.
    let histogram = |p: &Path| {
        let text = std::fs::read_to_string(p).unwrap();
        text[text.find("## HISTOGRAM").expect("a histogram")..].to_string()
    };
    assert_eq!(
        histogram(&o.arrowsam_metrics()),
        histogram(&o.out_dir.join("picard.metrics.txt"))
    );
}

/// Runs ArrowSAM alone (its gates' references made untimed) with
/// `tamper` applied to its result; the error.
fn tampered(
    pairs: usize,
    tamper: impl FnOnce(&mut Vec<RecordBatch>) -> testbed_asam::Result<()>,
) -> String {
    let dir = private_dir();
    let o = setup(dir.path(), &["arrowsam"], pairs);
    bench_with(&o, tamper).unwrap_err().to_string()
}

/// Replaces row `row` of `b` through `change(qname, flags, tags)`.
fn edit_row(b: &RecordBatch, row: usize, flags: Option<i32>, tags: Option<&str>) -> RecordBatch {
    let c = Columns::of(b).unwrap();
    let mut f: Vec<i32> = c.flags.values().to_vec();
    if let Some(x) = flags {
        f[row] = x;
    }
    let b = with_flags(b, Int32Array::from(f)).unwrap();
    let Some(t) = tags else { return b };
    let c = Columns::of(&b).unwrap();
    let new: StringArray = (0..b.num_rows())
        .map(|i| Some(if i == row { t } else { c.tagss.value(i) }))
        .collect();
    let mut columns = b.columns().to_vec();
    columns[TAGSS] = Arc::new(new);
    RecordBatch::try_new(b.schema(), columns).unwrap()
}

/// The first row passing `pick`: (batch, row, qname, flags).
fn find(batches: &[RecordBatch], pick: impl Fn(i32) -> bool) -> (usize, usize, String, i32) {
    for (bi, b) in batches.iter().enumerate() {
        let c = Columns::of(b).unwrap();
        for i in 0..b.num_rows() {
            if pick(c.flags.value(i)) {
                return (bi, i, c.qnames.value(i).to_string(), c.flags.value(i));
            }
        }
    }
    panic!("no such row");
}

#[test]
#[ignore = "runs samtools sort and Picard MarkDuplicates as the gates' references (~3 s); ./x test runs it"]
fn one_flipped_duplicate_flag_fails_the_gate_naming_the_read() {
    let name = std::sync::Mutex::new(String::new());
    let e = tampered(300, |batches| {
        let (b, row, qname, flags) = find(batches, |f| f & flag::DUPLICATE != 0);
        batches[b] = edit_row(&batches[b], row, Some(flags & !flag::DUPLICATE), None);
        *name.lock().unwrap() = qname;
        Ok(())
    });
    let name = name.into_inner().unwrap();
    // The order gate (which ignores 0x400) passed; the duplicate gate,
    // against an untimed Picard run, did not, naming the read and which
    // side marked it; the metrics, counted from the same flags, fail too.
    assert!(
        e.contains("arrowsam: duplicate set differs from Picard")
            && e.contains("1 records of 1 reads differ")
            && e.contains(&format!("first: {name} ("))
            && e.contains("is marked duplicate by Picard, not by arrowsam")
            && e.contains(&format!("reads: {name}")),
        "{name}: {e}"
    );
    assert!(
        e.contains("arrowsam: duplicate metrics' counts differ from Picard's")
            && !e.contains("order differs"),
        "{e}"
    );
}

#[test]
#[ignore = "runs samtools sort and Picard MarkDuplicates as the gates' references (~3 s); ./x test runs it"]
fn a_miscounted_metric_fails_the_metrics_gate_naming_the_library() {
    let dir = private_dir();
    let o = setup(dir.path(), &["arrowsam"], 300);
    let tamper = Tamper {
        metrics: Some(Box::new(|m: &mut Vec<_>| {
            let lib: &mut testbed_asam::metrics::DuplicationMetrics = &mut m[0];
            lib.read_pair_optical_duplicates += 1;
            Ok(())
        })),
        ..Tamper::default()
    };
    let e = bench_tampered(&o, tamper).unwrap_err().to_string();
    // The BAM is right (its gates passed); the metrics file is not.
    assert!(
        e.contains("arrowsam: duplicate metrics' counts differ from Picard's")
            && e.contains("first: library libA: READ_PAIR_OPTICAL_DUPLICATES ")
            && e.contains("reads: libA")
            && !e.contains("duplicate set differs")
            && !e.contains("order differs"),
        "{e}"
    );
    // Untampered, the same run passes its metrics gate.
    let dir = private_dir();
    let o = setup(dir.path(), &["arrowsam"], 300);
    let v = bench(&o).unwrap().verification;
    assert_eq!(v.metrics_vs_picard.map(|m| m.records), Some(2));
}

/// Flips the duplicate bit (0x400) of the first record of `bam` whose FLAG
/// `pick` accepts, rewriting the file with samtools; the read's name.
fn flip_duplicate(bam: &Path, pick: impl Fn(u16) -> bool) -> String {
    let out = Command::new("samtools")
        .args(["view", "-h"])
        .arg(bam)
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut name = None;
    let mut text = String::new();
    for l in String::from_utf8(out.stdout).unwrap().lines() {
        let mut fields: Vec<String> = l.split('\t').map(String::from).collect();
        if name.is_none() && !l.starts_with('@') {
            let flag: u16 = fields[1].parse().unwrap();
            if pick(flag) {
                fields[1] = (flag ^ 0x400).to_string();
                name = Some(fields[0].clone());
            }
        }
        text.push_str(&fields.join("\t"));
        text.push('\n');
    }
    let mut child = Command::new("samtools")
        .args(["view", "-b", "-o"])
        .arg(bam)
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    name.expect("no record to flip")
}

#[test]
#[ignore = "runs samblaster, bamsormadup and Picard (its reference) (~6 s); ./x test runs it"]
fn a_flipped_flag_in_samblasters_and_bamsormadups_output_fails_their_gates_naming_the_reads() {
    let dir = private_dir();
    let o = setup(dir.path(), &["samblaster", "bamsormadup"], 1500);
    // Untouched, both pass their duplicate-set gates.
    let v = bench(&o).unwrap().verification;
    assert!(
        v.agreement.iter().all(|a| a.duplicate_sets.is_some()),
        "{v:?}"
    );
    let flipped = std::sync::Mutex::new(Vec::new());
    let tamper = Tamper {
        outputs: Some(Box::new(|out: &Path| {
            // samblaster marks one more read: the first primary, mapped
            // record of a pair it left unmarked.
            let extra = flip_duplicate(&out.join("samblaster.md.bam"), |f| {
                f & 0x1 != 0 && f & (0x4 | 0x100 | 0x800 | 0x400) == 0
            });
            // bamsormadup leaves its first duplicate of a pair unmarked.
            let missing = flip_duplicate(&out.join("bamsormadup.md.bam"), |f| {
                f & 0x400 != 0 && f & 0x1 != 0 && f & (0x4 | 0x8 | 0x100 | 0x800) == 0
            });
            flipped.lock().unwrap().extend([extra, missing]);
            Ok(())
        })),
        ..Tamper::default()
    };
    let e = bench_tampered(&o, tamper).unwrap_err().to_string();
    let flipped = flipped.into_inner().unwrap();
    let (extra, missing) = (&flipped[0], &flipped[1]);
    // One failure per tool, each naming its read first and which side
    // marked it.
    let line = |tool: &str| {
        e.lines()
            .find(|l| {
                l.contains(&format!(
                    "correctness gate failed: {tool}: duplicate sets differ"
                ))
            })
            .unwrap_or_else(|| panic!("no {tool} failure in {e}"))
            .to_string()
    };
    let sb = line("samblaster");
    assert!(
        sb.contains(&format!("first: {extra} ("))
            && sb.contains("is marked duplicate by samblaster, not by Picard"),
        "{extra}: {sb}"
    );
    let bs = line("bamsormadup");
    assert!(
        bs.contains(&format!("first: {missing} ("))
            && bs.contains("is marked duplicate by Picard, not by bamsormadup")
            && bs.contains("(Picard's duplicate set DI:")
            && bs.contains("bamsormadup marks 1 record(s) fewer of it than Picard"),
        "{missing}: {bs}"
    );
}

#[test]
#[ignore = "runs samtools sort and Picard MarkDuplicates as the gates' references (~3 s); ./x test runs it"]
fn a_changed_tag_fails_the_order_gate_naming_the_read() {
    let name = std::sync::Mutex::new(String::new());
    let e = tampered(300, |batches| {
        let (b, row, qname, _) = find(batches, |f| f & flag::UNMAPPED == 0);
        batches[b] = edit_row(&batches[b], row, None, Some("RG:Z:rgA\tNM:i:7"));
        *name.lock().unwrap() = qname;
        Ok(())
    });
    let name = name.into_inner().unwrap();
    // The record is on both sides once: ours with the new tag, samtools'
    // with the old one.
    assert!(
        e.contains("order differs from samtools")
            && e.contains("2 records of 1 reads differ")
            && e.contains(&format!("reads: {name}")),
        "{name}: {e}"
    );
}

#[test]
#[ignore = "runs samtools sort and Picard MarkDuplicates as the gates' references (~3 s); ./x test runs it"]
fn two_swapped_records_fail_the_order_gate() {
    let names = std::sync::Mutex::new(Vec::new());
    let e = tampered(300, |batches| {
        // The first two rows of the first batch, at different positions.
        let b = &batches[0];
        let c = Columns::of(b).unwrap();
        let i = (1..b.num_rows())
            .find(|&i| c.poss.value(i) != c.poss.value(i - 1))
            .unwrap();
        names.lock().unwrap().extend([
            c.qnames.value(i - 1).to_string(),
            c.qnames.value(i).to_string(),
        ]);
        let mut idx: Vec<u32> = (0..b.num_rows() as u32).collect();
        idx.swap(i - 1, i);
        batches[0] =
            arrow::compute::take_record_batch(b, &arrow::array::UInt32Array::from(idx)).unwrap();
        Ok(())
    });
    for n in names.into_inner().unwrap() {
        assert!(
            e.contains("order differs from samtools") && e.contains(&n),
            "{n}: {e}"
        );
    }
}
