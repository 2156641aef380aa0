//! The CI-size specs that run on the `bookworm-asam` guest image: `testbed
//! run` boots the debian-cloud kernel with the image (built by mmdebstrap
//! when not cached) and the Debian tools run inside the guest. ArrowSAM's
//! format the scratch NVMe device as ext4 and run the tiny data set (the
//! `*-tiny-vm` specs: `reproduce --quick` runs ArrowSAM's quick specs on
//! the host); the Flight ones are the quick specs `reproduce --quick` runs.
//!
//! - asam-workflow-tiny-vm: all five placements; ArrowSAM's correctness
//!   gates against samtools sort and Picard MarkDuplicates must pass (and
//!   the fused stage's against the staged stages'), and every placement
//!   must end with the same records.
//! - asam-preproc-tiny-vm: Picard, Sambamba, samtools, samblaster,
//!   bamsormadup and ArrowSAM on the same SAM; the gates ran over every
//!   record, the other tools' agreement with Picard is recorded, every
//!   stage has its peak memory, and `testbed check` leaves a Picard claim
//!   undecided unless one JVM start-up was small beside the work
//!   (`requires`).
//! - flight-query-vm-quick: the image's PostgreSQL 15, started inside the
//!   guest, and DataFusion, read by every client, psqlODBC (the
//!   dynamically linked testbed-odbc on the image's unixodbc) included;
//!   every client's rows equal the generated table's.
//! - flight-genomics-quick: two VMs; ArrowSAM regions by DoPut (both
//!   transport profiles) and as BAM, each point's outputs equal, the link
//!   measured in the same boot.
//!
//! Ignored (builds the image once, boots VMs, minutes under TCG); `./x
//! test` runs them.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn testbed(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_testbed"))
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

/// `testbed run experiments/SPEC --out OUT`, which must succeed; its
/// manifest.
fn run_quick_spec(spec: &str, out: &Path) -> serde_json::Value {
    run_quick_spec_with(spec, out, &[])
}

/// `run_quick_spec` on a copy of the spec with each `(from, to)` replaced
/// once: the tests that check behaviour (every tool runs, the gates pass)
/// need one measurement, not the repetitions a figure's interval needs.
fn run_quick_spec_with(spec: &str, out: &Path, edits: &[(&str, &str)]) -> serde_json::Value {
    let mut spec = repo().join("experiments").join(spec);
    if !edits.is_empty() {
        let mut text = std::fs::read_to_string(&spec).unwrap();
        for (from, to) in edits {
            assert!(text.contains(from), "{} has no {from:?}", spec.display());
            text = text.replacen(from, to, 1);
        }
        let copy = out.with_extension("toml");
        std::fs::write(&copy, text).unwrap();
        spec = copy;
    }
    let started = Instant::now();
    let (ok, text) = testbed(&[
        "run".as_ref(),
        spec.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    eprintln!(
        "testbed run took {:.1} s:\n{text}",
        started.elapsed().as_secs_f64()
    );
    assert!(ok, "{text}");
    serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap()
}

#[test]
#[ignore = "builds the bookworm-asam guest image (mmdebstrap, minutes cold) and boots a QEMU VM (minutes under TCG)"]
fn the_quick_workflow_runs_every_placement_in_the_vm_and_passes_its_gates() {
    let dir = tempfile::tempdir().unwrap();
    let m = run_quick_spec(
        "arrowsam/asam-workflow-tiny-vm.toml",
        &dir.path().join("run"),
    );
    let points = m["points"].as_array().unwrap();
    assert_eq!(points.len(), 5, "{points:?}");
    let mut records = Vec::new();
    for p in points {
        assert_eq!(p["ok"], true, "{p}");
        let placement = p["params"]["placement"].as_str().unwrap_or_default();
        let summary = &p["summary"];
        let checks: Vec<&str> = summary["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c.as_str())
            .collect();
        if placement.starts_with("arrowsam") {
            assert!(
                checks.iter().any(|c| c.starts_with("order:"))
                    && checks.iter().any(|c| c.starts_with("duplicates:")),
                "{checks:?}"
            );
        }
        // The fused stage's files equal the staged stages' (its gate).
        assert_eq!(
            placement == "arrowsam-fused",
            checks.iter().any(|c| c.starts_with("fused:")),
            "{placement}: {checks:?}"
        );
        records.push(summary["records"].as_u64().unwrap());
        // Under TCG the guest has no PMU: said, not drawn as zeros.
        if m["accel"]["used"] == "tcg" {
            let why = summary["cache_misses_unavailable"]
                .as_str()
                .unwrap_or_default();
            assert!(why.contains("no hardware PMU"), "{summary}");
        }
    }
    assert!(
        records.iter().all(|r| *r == records[0] && *r > 0),
        "{records:?}"
    );
}

#[test]
#[ignore = "builds the bookworm-asam guest image (mmdebstrap, minutes cold) and boots a QEMU VM (minutes under TCG)"]
fn the_quick_preproc_runs_every_tool_in_the_vm_and_gates_its_claims() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // One repetition in one boot: this test checks that every tool runs
    // and agrees, and that the claims are checked.
    let m = run_quick_spec_with(
        "arrowsam/asam-preproc-tiny-vm.toml",
        &out,
        &[
            ("repetitions = 2\n", "repetitions = 1\n"),
            ("boots = 2 ", "# "),
        ],
    );
    assert_eq!(m["executor"], "qemu");
    assert!(
        m["inputs"]["rootfs"]["key"]
            .as_str()
            .is_some_and(|k| !k.is_empty()),
        "the guest image is recorded: {}",
        m["inputs"]
    );
    let points = m["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{points:?}");
    for p in points {
        assert_eq!(p["ok"], true, "{p}");
        let s = &p["summary"];
        let records = s["records"].as_u64().unwrap();
        assert!(records > 1000, "{s}");
        // The gates ran over every record, and every tool agrees.
        assert_eq!(
            s["arrowsam.gate_order_records"].as_u64(),
            Some(records),
            "{s}"
        );
        assert_eq!(
            s["arrowsam.gate_duplicates_records"].as_u64(),
            Some(records),
            "{s}"
        );
        let dups = s["picard.duplicates"].as_u64().unwrap();
        assert!(dups > 0, "{s}");
        for tool in ["sambamba", "samtools", "arrowsam"] {
            assert_eq!(
                s[format!("{tool}.duplicates")].as_u64(),
                Some(dups),
                "{tool}: {s}"
            );
        }
        for key in [
            "picard.jvm-startup_seconds",
            "sambamba.convert_seconds",
            "samtools.fixmate_seconds",
            "samblaster.markdup_seconds",
            "bamsormadup.sort-markdup_seconds",
            "arrowsam.load_seconds",
            "arrowsam.write_seconds",
            // Peak memory, the guest's processes' own.
            "picard.markdup_peak_memory_bytes",
            "samblaster.markdup_peak_memory_bytes",
            "bamsormadup.sort-markdup_peak_memory_bytes",
            "arrowsam.sort_peak_memory_bytes",
        ] {
            assert!(s[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {s}");
        }
        // The other tools' duplicate sets against Picard's: reported (the
        // count of differing records), whatever it is.
        for tool in ["sambamba", "samtools", "samblaster", "bamsormadup"] {
            let n = s[format!("{tool}.differing_from_picard")].as_u64();
            assert!(n.is_some_and(|n| n <= 2 * records), "{tool}: {s}");
        }
    }

    let (ok, text) = testbed(&["check".as_ref(), out.as_os_str()]);
    assert!(ok, "{text}");
    let claims: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("claims.json")).unwrap()).unwrap();
    let claims = claims["claims"].as_array().unwrap();
    let verdict = |id: &str| -> (String, String) {
        let c = claims.iter().find(|c| c["id"] == id).unwrap();
        (
            c["verdict"].as_str().unwrap().to_string(),
            c["numbers"].as_str().unwrap().to_string(),
        )
    };
    let (startup, _) = verdict("startup-small");
    for id in ["faster-than-picard", "faster-than-picard-end-to-end"] {
        let (v, numbers) = verdict(id);
        if startup == "holds" {
            assert_ne!(v, "not-measurable", "{id}: {numbers}");
        } else {
            assert_eq!(v, "not-measurable", "{id}: {numbers}");
            assert!(numbers.starts_with("rests on startup-small"), "{numbers}");
        }
    }
}

#[test]
#[ignore = "builds the bookworm-asam guest image (mmdebstrap, minutes cold) and boots a QEMU VM"]
fn the_query_comparison_runs_against_postgresql_and_datafusion_inside_the_guest() {
    let dir = tempfile::tempdir().unwrap();
    // Each client's query once per point: this test checks that every
    // client runs and fetches the same rows, not their times.
    let m = run_quick_spec_with(
        "flight/flight-query-vm-quick.toml",
        &dir.path().join("run"),
        &[("\nrepetitions = 2\n", "\nrepetitions = 1\n")],
    );
    assert_eq!(m["executor"], "qemu");
    let points = m["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{points:?}");
    for p in points {
        assert_eq!(p["ok"], true, "{p}");
        let s = &p["summary"];
        assert_eq!(s["checksums_match"], true, "{s}");
        for client in [
            "odbc-row",
            "odbc-block",
            "tokio-postgres",
            "flight-sql",
            "flight-sql-rows",
            "flight-sql-parquet",
            "datafusion-flight-sql",
            "datafusion-pgwire-tokio-postgres",
            "datafusion-pgwire-odbc-row",
            "datafusion-pgwire-odbc-block",
        ] {
            assert!(
                s[format!("{client}_seconds")]
                    .as_f64()
                    .is_some_and(|t| t > 0.0),
                "{client}: {s}"
            );
            assert_eq!(
                s[format!("{client}_checksum")],
                s["tokio-postgres_checksum"]
            );
        }
    }
}

#[test]
#[ignore = "builds the bookworm-asam guest image (mmdebstrap, minutes cold) and boots two QEMU VMs"]
fn genomics_regions_move_between_two_vms_and_every_pipeline_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // Each pipeline once per region count (as the spec has it): the test
    // checks that they agree and that the claim is decided, not how
    // steady the times are.
    let m = run_quick_spec_with("flight/flight-genomics-quick.toml", &out, &[]);
    assert_eq!(m["executor"], "qemu");
    let points = m["points"].as_array().unwrap();
    // regions = [8]
    assert_eq!(points.len(), 1, "{points:?}");
    let mut records = Vec::new();
    for p in points {
        assert_eq!(p["ok"], true, "{p}");
        let s = &p["summary"];
        assert_eq!(s["checksums_match"], true, "{s}");
        records.push(s["records"].as_u64().unwrap());
        // iperf3 measured the link in this boot; each pipeline's wire
        // rate is a share of it.
        assert!(s["link_mb_per_s"].as_f64().is_some_and(|l| l > 0.0), "{s}");
        for pl in ["flight", "flight-tuned", "bam"] {
            assert_eq!(s[format!("{pl}.checksum")], s["flight.checksum"], "{s}");
            let share = s[format!("{pl}.communication_share")].as_f64().unwrap();
            assert!(share > 0.0 && share < 1.0, "{pl}: {s}");
            assert!(
                s[format!("{pl}.link_share")]
                    .as_f64()
                    .is_some_and(|l| l > 0.0),
                "{pl}: {s}"
            );
            // Both sides' CPU, the receiver's read across the link.
            for side in ["sender", "receiver"] {
                let cpu = s[format!("{pl}.{side}_cpu_s_per_gb")].as_f64();
                assert!(cpu.is_some_and(|c| c > 0.0), "{pl} {side}: {s}");
            }
        }
    }
    // Every region count moved the whole data set.
    assert!(
        records.iter().all(|&r| r == records[0] && r > 1000),
        "{records:?}"
    );
    let (ok, text) = testbed(&["check".as_ref(), out.as_os_str()]);
    assert!(ok, "{text}");
    let claims: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("claims.json")).unwrap()).unwrap();
    let c = claims["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "less-communication")
        .unwrap();
    // Decided on this run's data, whichever way.
    assert_ne!(c["verdict"], "not-measurable", "{c}");
}
