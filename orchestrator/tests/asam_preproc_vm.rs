//! asam-preproc in the VM, as `reproduce --quick` runs it: `testbed run
//! experiments/arrowsam/asam-preproc-quick.toml` boots the debian-cloud
//! kernel with the `bookworm-asam` guest image, formats the scratch NVMe
//! device as ext4 for every tool's output, prepares the tiny data set in
//! the guest (bwa mem) and times Picard, Sambamba, samtools and ArrowSAM
//! with the Debian tools inside the guest. Every point must succeed with
//! ArrowSAM's correctness gates passed and every tool finding the same
//! duplicates; `testbed check` must then leave a Picard claim undecided
//! unless one JVM start-up was small beside the work (`requires`).
//!
//! Ignored (builds the image once, boots a VM, ~3 min under TCG); `./x
//! test` runs it.

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

#[test]
#[ignore = "builds the bookworm-asam guest image (mmdebstrap, minutes cold) and boots a QEMU VM (minutes under TCG)"]
fn the_quick_preproc_runs_every_tool_in_the_vm_and_gates_its_claims() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let spec = repo().join("experiments/arrowsam/asam-preproc-quick.toml");
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
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["executor"], "qemu");
    assert!(
        m["inputs"]["rootfs"]["key"]
            .as_str()
            .is_some_and(|k| !k.is_empty()),
        "the guest image is recorded: {}",
        m["inputs"]
    );
    let points = m["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{points:?}");
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
            "arrowsam.load_seconds",
            "arrowsam.write_seconds",
        ] {
            assert!(s[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {s}");
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
