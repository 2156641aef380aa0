//! The query comparison in the VM: `testbed run
//! experiments/flight/flight-query-vm-quick.toml` boots the debian-cloud
//! kernel with the `bookworm-asam` guest image, whose PostgreSQL 15 the
//! workload starts inside the guest, and runs tokio-postgres and the
//! three Flight SQL paths against it. Every point must succeed with every
//! client's rows equal to the generated table's.
//!
//! Ignored (builds the image once, boots a VM, ~1.5 min under TCG); `./x
//! test` runs it.

use std::path::Path;
use std::process::Command;

#[test]
#[ignore = "builds the bookworm-asam guest image (mmdebstrap, minutes cold) and boots a QEMU VM"]
fn the_query_comparison_runs_against_postgresql_inside_the_guest() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_testbed"))
        .arg("run")
        .arg(repo.join("experiments/flight/flight-query-vm-quick.toml"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["executor"], "qemu");
    let points = m["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{points:?}");
    for p in points {
        assert_eq!(p["ok"], true, "{p}");
        let s = &p["summary"];
        assert_eq!(s["checksums_match"], true, "{s}");
        for client in [
            "tokio-postgres",
            "flight-sql",
            "flight-sql-rows",
            "flight-sql-parquet",
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
