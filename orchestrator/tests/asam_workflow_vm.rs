//! The ArrowSAM workflow in the VM, as CI runs it: `testbed run
//! experiments/arrowsam/asam-workflow-quick.toml` boots the debian-cloud
//! kernel with the `bookworm-asam` guest image (built by mmdebstrap when
//! not cached), formats the scratch NVMe device as ext4, and runs the tiny
//! data set through all four placements with the Debian tools inside the
//! guest. Every point must succeed, ArrowSAM's correctness gates against
//! samtools sort and Picard MarkDuplicates must have passed, and every
//! placement must end with the same records.
//!
//! Ignored (builds the image once, boots a VM, ~minutes under TCG); `./x
//! test` runs it.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

#[test]
#[ignore = "builds the bookworm-asam guest image (mmdebstrap, minutes cold) and boots a QEMU VM (minutes under TCG)"]
fn the_quick_workflow_runs_every_placement_in_the_vm_and_passes_its_gates() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let spec = repo().join("experiments/arrowsam/asam-workflow-quick.toml");
    let started = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_testbed"))
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!(
        "testbed run took {:.1} s:\n{text}",
        started.elapsed().as_secs_f64()
    );
    assert!(o.status.success(), "{text}");
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    let points = m["points"].as_array().unwrap();
    assert_eq!(points.len(), 4, "{points:?}");
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
        if placement == "arrowsam" {
            assert!(
                checks.iter().any(|c| c.starts_with("order:"))
                    && checks.iter().any(|c| c.starts_with("duplicates:")),
                "{checks:?}"
            );
        }
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
