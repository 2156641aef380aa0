//! Synthetic run directories for the gates' CLI tests (check_cli,
//! history_cli): a sweep over `depth` whose points carry `read_latency`
//! samples, written the way a run writes them, with a manifest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use testbed::planning::plan::Point;
use testbed::recording::results::{manifest, samples};
use testbed_agent::protocol::SampleChunk;
use testbed_agent::workload::Workload;
use testbed_agent::workload::fault::{FaultMode, FaultParams};

/// Point `depth − 1`, repetition `rep`, of a sweep over `depth`.
pub fn depth_point(depth: i64, rep: u32) -> Point {
    Point {
        point: (depth - 1) as u32,
        rep,
        params: [("depth".to_string(), toml::Value::Integer(depth))].into(),
        workload: Workload::Fault(FaultParams {
            mode: FaultMode::Error,
            after_s: 0.0,
            size: 1000,
        }),
        seed: 7,
        vm_vcpus: None,
        boot_group: 0,
    }
}

/// Writes `p`'s point file under `dir/points`: four `read_latency`
/// samples of `value` ns. Returns the file.
pub fn latency_point(dir: &Path, run_id: &str, p: &Point, value: f64) -> PathBuf {
    let chunk = SampleChunk {
        job_id: 1,
        metric: "read_latency".into(),
        unit: "ns".into(),
        thread: 0,
        first_seq: 0,
        tags: BTreeMap::new(),
        values: vec![value; 4],
    };
    let b = samples::point_batch(run_id, p, 0, &[chunk]).unwrap();
    let f = dir.join("points").join(format!("{}.parquet", p.id()));
    samples::write_parquet(&f, b.schema(), &[b]).unwrap();
    f
}

/// Merges the point files into `dir/samples.parquet` and writes a
/// complete host run's manifest with `records` as its points; returns
/// the manifest as read back.
pub fn finish_run(
    dir: &Path,
    experiment: &str,
    run_id: &str,
    files: &[PathBuf],
    records: Vec<serde_json::Value>,
    started_s: u64,
) -> manifest::Manifest {
    samples::merge(files, &dir.join("samples.parquet")).unwrap();
    let m = serde_json::json!({
        "testbed_version": "0.1.0", "status": "complete", "experiment": experiment,
        "run_id": run_id, "figures": [], "spec_file": format!("{experiment}.toml"), "spec_sha256": "00",
        "spec": {}, "executor": "host", "accel": null, "timing_note": "",
        "qemu_argv": [], "guest": null, "boots": [], "boot_to_agent_ms": [],
        "devices": [], "seed": 42, "points": records,
        "started_at": manifest::format_utc(started_s),
        "finished_at": null, "wall_s": null,
    });
    std::fs::write(dir.join("manifest.json"), m.to_string()).unwrap();
    manifest::read(&dir.join("manifest.json")).expect("a valid manifest")
}
