//! The workflow through every placement on this host, with the real tools
//! (bwa, samtools, Picard, bcftools) and the real binary: the tiny data set
//! once, then `testbed-asam workflow` per placement. Every placement must
//! produce the same final records and, so, the same calls; ArrowSAM's
//! records pass the gates against samtools and Picard, samblaster's and
//! bamsormadup's duplicate sets the gate against Picard's (and a
//! samblaster that marks one read too many fails it); the stages are the
//! figure's stages; CPU samples arrive.

use std::path::Path;
use std::process::Command;

use testbed_vocab::asam::Prepared;
use testbed_vocab::asam_workflow::{CallsLine, DoneLine, WorkflowLine};

const BIN: &str = env!("CARGO_BIN_EXE_testbed-asam");

fn prepare(root: &Path) -> Prepared {
    let out = Command::new(BIN)
        .args(["prepare", "--name", "tiny", "--threads", "2", "--dir"])
        .arg(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn workflow(p: &Prepared, placement: &str, disk: &Path, extra: &[&str]) -> Vec<WorkflowLine> {
    let out = workflow_command(p, placement, disk, extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{placement}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn workflow_command(p: &Prepared, placement: &str, disk: &Path, extra: &[&str]) -> Command {
    let info = p.dir.as_ref().unwrap().join("prepared.json");
    let mut c = Command::new(BIN);
    c.args(["workflow", "--json", "--threads", "2", "--cpu-hz", "20"])
        .args(["--placement", placement, "--callers", "bcftools"])
        .arg("--prepared")
        .arg(&info)
        .arg("--disk-dir")
        .arg(disk)
        .args(extra);
    c
}

fn done(lines: &[WorkflowLine]) -> &DoneLine {
    lines
        .iter()
        .find_map(|l| match l {
            WorkflowLine::Done(d) => Some(d),
            _ => None,
        })
        .unwrap()
}

fn calls(lines: &[WorkflowLine], bqsr: bool) -> Vec<&CallsLine> {
    lines
        .iter()
        .filter_map(|l| match l {
            WorkflowLine::Calls(c) if c.bqsr == bqsr => Some(c),
            _ => None,
        })
        .collect()
}

fn stages(lines: &[WorkflowLine]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| match l {
            WorkflowLine::Stage(s) => Some(s.stage.clone()),
            _ => None,
        })
        .collect()
}

#[test]
#[ignore = "runs the whole workflow with bwa, Picard, samtools and bcftools in every placement (~27 s); ./x test runs it"]
fn every_placement_does_the_same_work_and_arrowsam_passes_its_gates() {
    let root = tempfile::tempdir().unwrap();
    let disk = root.path().join("disk");
    let p = prepare(&root.path().join("data"));

    let mut finals = Vec::new();
    let mut plain_calls = Vec::new();
    for placement in ["disk", "ramdisk", "pipes"] {
        let lines = workflow(&p, placement, &disk, &[]);
        assert_eq!(
            stages(&lines),
            ["align", "sort", "markdup", "call"],
            "{placement}"
        );
        // Stages follow one another, each ending after it started, and
        // each has its processes' peak memory (bwa's index alone is MBs).
        for l in &lines {
            if let WorkflowLine::Stage(s) = l {
                assert!(s.end >= s.start && s.seconds >= 0.0, "{s:?}");
                assert!(s.peak_rss_bytes.is_some_and(|b| b > 1 << 20), "{s:?}");
                assert!(s.store_bytes.is_none(), "{s:?}");
            }
        }
        let d = done(&lines);
        finals.push((d.records, d.duplicates));
        let c = calls(&lines, false);
        assert_eq!(c.len(), 3, "snp, indel, all: {c:?}");
        plain_calls.push(
            c.iter()
                .map(|c| (c.class.clone(), c.true_positives, c.false_positives))
                .collect::<Vec<_>>(),
        );
        let cpu = lines
            .iter()
            .filter(|l| matches!(l, WorkflowLine::Cpu(c) if c.cpu == "all"))
            .count();
        assert!(cpu >= 5, "{placement}: {cpu} CPU samples");
    }

    let lines = workflow(&p, "arrowsam", &disk, &["--bqsr", "--check"]);
    assert_eq!(
        stages(&lines),
        ["align", "sort", "markdup", "bqsr", "apply-bqsr", "call"]
    );
    // ArrowSAM's stages report what their store holds beside their peak.
    for l in &lines {
        if let WorkflowLine::Stage(s) = l {
            assert!(s.peak_rss_bytes.is_some_and(|b| b > 1 << 20), "{s:?}");
            assert!(s.store_bytes.is_some_and(|b| b > 0), "{s:?}");
        }
    }
    let d = done(&lines);
    finals.push((d.records, d.duplicates));
    assert!(
        d.checks.iter().any(|c| c.starts_with("order:"))
            && d.checks.iter().any(|c| c.starts_with("duplicates:")),
        "{:?}",
        d.checks
    );
    // The same records, and as many duplicates, in every placement (the
    // baselines' samtools markdup and ArrowSAM's Picard-equal marking agree
    // on this data: both mark by 5' ends, orientation and library).
    assert!(finals.iter().all(|f| f.0 == finals[0].0), "{finals:?}");
    assert!(finals[0].0 > 20_000 && finals[0].1 > 0, "{finals:?}");
    // ArrowSAM without BQSR calls exactly what the baselines call.
    let arrow_plain: Vec<_> = calls(&lines, false)
        .iter()
        .map(|c| (c.class.clone(), c.true_positives, c.false_positives))
        .collect();
    for pc in &plain_calls {
        assert_eq!(pc, &arrow_plain);
    }
    // With BQSR it still calls most of it.
    let with = calls(&lines, true);
    let all = with.iter().find(|c| c.class == "all").unwrap();
    assert!(all.recall > 0.5 && all.precision > 0.9, "{all:?}");

    // Fused: sort, markdup and the BQSR table as one stage; its files
    // equal the staged stages' (checked by the run), so its final BAM and
    // its calls are the staged pipeline's.
    let fused = workflow(&p, "arrowsam-fused", &disk, &["--bqsr", "--check"]);
    assert_eq!(stages(&fused), ["align", "fused", "apply-bqsr", "call"]);
    let f = done(&fused);
    assert_eq!((f.records, f.duplicates), (d.records, d.duplicates));
    assert!(
        f.checks.iter().any(|c| c
            == "fused: sorted.arrow, flags.arrow, recal.txt equal the staged sort, markdup and bqsr's, batch for batch")
            && f.checks.iter().any(|c| c.starts_with("duplicates:")),
        "{:?}",
        f.checks
    );
    let key = |c: &&CallsLine| (c.class.clone(), c.bqsr, c.true_positives, c.false_positives);
    let staged_calls: Vec<_> = calls(&lines, true).iter().map(key).collect();
    let fused_calls: Vec<_> = calls(&fused, true).iter().map(key).collect();
    assert_eq!(staged_calls, fused_calls);
}

#[test]
#[ignore = "prepares the tiny data set with bwa and runs the workflow (~7 s); ./x test runs it"]
fn pipes_refuse_a_baseline_that_reads_twice_and_bqsr_is_arrowsam_only() {
    let root = tempfile::tempdir().unwrap();
    let p = prepare(&root.path().join("data"));
    let info = p.dir.as_ref().unwrap().join("prepared.json");
    for (placement, extra, says) in [
        ("pipes", ["--baseline", "picard"], "reads its input twice"),
        ("disk", ["--bqsr", "--check"], "only the arrowsam placement"),
    ] {
        let out = Command::new(BIN)
            .args(["workflow", "--json", "--placement", placement])
            .arg("--prepared")
            .arg(&info)
            .arg("--disk-dir")
            .arg(root.path())
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
    }
}

#[test]
#[ignore = "prepares the tiny data set with bwa and runs samblaster and bamsormadup on disk and through pipes, each checked against Picard (~60 s); ./x test runs it"]
fn samblaster_and_bamsormadup_run_on_disk_and_fed_by_bwas_pipe() {
    let root = tempfile::tempdir().unwrap();
    let disk = root.path().join("disk");
    let p = prepare(&root.path().join("data"));
    let reference = workflow(&p, "disk", &disk, &[]);
    let want = done(&reference).records;
    for (baseline, stage_list) in [
        ("samblaster", vec!["align", "markdup", "sort", "call"]),
        ("bamsormadup", vec!["align", "sort-markdup", "call"]),
    ] {
        for placement in ["disk", "pipes"] {
            let lines = workflow(&p, placement, &disk, &["--baseline", baseline, "--check"]);
            assert_eq!(stages(&lines), stage_list, "{baseline} {placement}");
            // The tool is named on its stages.
            assert!(
                lines
                    .iter()
                    .any(|l| matches!(l, WorkflowLine::Stage(s) if s.tool == baseline)),
                "{baseline} {placement}"
            );
            // Every record reaches the final BAM (bamsormadup reads the
            // SAM on its standard input: an empty one would give none),
            // and duplicates are marked.
            let d = done(&lines);
            assert_eq!(d.records, want, "{baseline} {placement}");
            assert!(d.duplicates > 0, "{baseline} {placement}");
            assert_eq!(calls(&lines, false).len(), 3, "{baseline} {placement}");
            // Its duplicate sets passed the gate against Picard's.
            let want = format!(
                "duplicate sets: {baseline} marks as many records as Picard MarkDuplicates in each of its duplicate sets, and no other ({} duplicates, {} records; ",
                d.duplicates, d.records
            );
            assert!(
                d.checks.iter().any(|c| c.starts_with(&want)),
                "{baseline} {placement}: {:?}",
                d.checks
            );
        }
    }
}

#[test]
#[ignore = "prepares the tiny data set with bwa, runs samblaster through pipes and Picard (~20 s); ./x test runs it"]
fn a_samblaster_that_marks_one_read_too_many_fails_the_point_naming_the_read() {
    let root = tempfile::tempdir().unwrap();
    let disk = root.path().join("disk");
    let p = prepare(&root.path().join("data"));
    // The real samblaster, then one more read marked duplicate: the first
    // primary, mapped record of a pair it left unmarked, named in a file.
    let real = std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("samblaster"))
                .find(|c| c.is_file())
        })
        .expect("samblaster on PATH")
        .display()
        .to_string();
    let bin = root.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let flipped = root.path().join("flipped");
    let script = format!(
        r#"#!/bin/sh
"{real}" "$@" | perl -ne 'if (!$done && !/^@/) {{ my @f = split /\t/; if (($f[1] & 1) && !($f[1] & 0x904) && !($f[1] & 0x400)) {{ $f[1] |= 0x400; $done = 1; open(my $o, ">", "{}") or die; print $o $f[0]; close $o; $_ = join("\t", @f); }} }} print'
"#,
        flipped.display()
    );
    let wrapper = bin.join("samblaster");
    std::fs::write(&wrapper, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let args = ["--baseline", "samblaster", "--check"];
    let out = workflow_command(&p, "pipes", &disk, &args)
        .env("PATH", &path)
        .output()
        .unwrap();
    let name = std::fs::read_to_string(&flipped).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("correctness gate failed: samblaster: duplicate sets differ")
            && err.contains(&format!("first: {name} ("))
            && err.contains("is marked duplicate by samblaster, not by Picard"),
        "{name}: {err}"
    );
    // Without --check the same broken run passes: the check is what fails it.
    let out = workflow_command(&p, "pipes", &disk, &args[..2])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
