//! Peak memory and time of `testbed plot` and `testbed check` on a run of
//! 100 M raw samples (issue 30's target: ≤ 512 MiB). The run is written
//! with the testbed's own writers (per-point batches of 65 536 rows into
//! samples.parquet): 10 depths × 5 repetitions × 2 engines, one lookup
//! latency per sample, lognormal around a depth-proportional mean. Its
//! figure has a mean panel and a p99 panel, with a monotonic and a ratio
//! claim. Each command runs as a child; its peak RSS is wait4's ru_maxrss.
//!
//! `./x bench figures_memory`; TESTBED_FIGURES_SAMPLES sets the size
//! (100 000 000), TESTBED_BIN measures another testbed binary (an older
//! build, for a before/after), TESTBED_FIGURES_RUN keeps the generated run
//! in that directory and reuses it when it is there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use testbed::drawing::figures::stats::Rng;
use testbed::planning::plan::Point;
use testbed::recording::results::manifest::{self, Manifest, PointRecord, RunStatus};
use testbed::recording::results::samples::{self, ParquetOut};
use testbed_agent::protocol::SampleChunk;

const RUN_ID: &str = "20261204T000000-bench";
const DEPTHS: [u32; 10] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
const REPS: u32 = 5;
const ENGINES: [(&str, f64); 2] = [("read", 1.0), ("nvme-hook", 0.6)];
const TARGET_MIB: f64 = 512.0;

const FIGURE: &str = r#"
id = "bench-latency"
title = "Lookup latency vs depth (figures_memory benchmark)"
family = "testbed"
description = "Synthetic lookups: the figures_memory benchmark's run."

[[panels]]
name = "mean"
x = { column = "param_depth", label = "tree depth" }
y = { metric = "lookup_latency", kind = "raw", stat = "mean", scale = 0.001, label = "mean lookup latency", unit = "µs", better = "lower" }
series = { columns = ["tag_engine"], expected = ["read", "nvme-hook"] }

[[panels]]
name = "p99"
x = { column = "param_depth", label = "tree depth" }
y = { metric = "lookup_latency", kind = "raw", stat = "p99", scale = 0.001, label = "p99 lookup latency", unit = "µs", better = "lower" }
series = { columns = ["tag_engine"], expected = ["read", "nvme-hook"] }

[[claims]]
id = "read-grows-with-depth"
text = "read() latency grows with depth"
panel = "mean"
kind = "monotonic"
direction = "increasing"
series = ["read"]
tolerance = 0.05

[[claims]]
id = "hook-lower-p99"
text = "the hook's p99 is below read()'s at the largest depth"
panel = "p99"
kind = "ratio_at"
numerator = "nvme-hook"
denominator = "read"
at = "largest"
max = 1.0
"#;

fn point(p: u32, rep: u32, depth: u32) -> Point {
    Point {
        point: p,
        rep,
        params: [("depth".to_string(), toml::Value::Integer(depth.into()))]
            .into_iter()
            .collect(),
        workload: testbed_agent::workload::Workload::Fault(
            testbed_agent::workload::fault::FaultParams {
                mode: testbed_agent::workload::fault::FaultMode::Error,
                after_s: 0.0,
                size: 1,
            },
        ),
        seed: 7,
        vm_vcpus: None,
        boot_group: 0,
    }
}

/// Writes the run: samples.parquet, summary.parquet and manifest.json.
fn write_run(dir: &Path, total: u64) {
    std::fs::create_dir_all(dir).expect("run directory");
    let units = DEPTHS.len() as u64 * u64::from(REPS) * ENGINES.len() as u64;
    let per_unit = (total / units).max(1) as usize;
    let mut out: Option<ParquetOut> = None;
    let mut records = Vec::new();
    // The figures' own fixed generator: the same samples on every machine.
    let mut rng = Rng::new(42);
    let chunk_len = 65_536;
    for (p, &depth) in DEPTHS.iter().enumerate() {
        for rep in 0..REPS {
            let pt = point(p as u32, rep, depth);
            for (engine, factor) in ENGINES {
                let mean_ns = 10_000.0 * f64::from(depth) * factor;
                let mut left = per_unit;
                let mut seq = 0u64;
                while left > 0 {
                    let n = left.min(chunk_len);
                    let values: Vec<f64> = (0..n)
                        .map(|_| mean_ns * (0.3 * rng.normal() - 0.045).exp())
                        .collect();
                    let chunk = SampleChunk {
                        job_id: 1,
                        metric: "lookup_latency".into(),
                        unit: "ns".into(),
                        thread: 0,
                        first_seq: seq,
                        tags: [("engine".to_string(), engine.to_string())]
                            .into_iter()
                            .collect(),
                        values,
                    };
                    let batch = samples::point_batch(RUN_ID, &pt, 0, &[chunk]).expect("batch");
                    let w = out.get_or_insert_with(|| {
                        ParquetOut::create(&dir.join("samples.parquet"), batch.schema())
                            .expect("samples.parquet")
                    });
                    w.write(&batch).expect("write");
                    seq += n as u64;
                    left -= n;
                }
            }
            records.push(PointRecord {
                id: pt.id(),
                point: pt.point,
                rep,
                params: pt.params.clone(),
                workload: Some(
                    serde_json::json!({"kind": "btree", "engines": ["read", "nvme-hook"]}),
                ),
                seed: pt.seed,
                ok: true,
                error: None,
                wall_s: Some(1.0),
                samples: per_unit * ENGINES.len(),
                summary: BTreeMap::new(),
                boot: 0,
                noise: None,
                host_cost: None,
                earlier: Vec::new(),
            });
        }
    }
    out.expect("rows").finish().expect("samples.parquet");
    let done: Vec<&PointRecord> = records.iter().collect();
    let t = testbed::recording::results::summary_table::batch(RUN_ID, &done).expect("summary");
    samples::write_parquet(&dir.join("summary.parquet"), t.schema(), &[t]).expect("summary");
    let m: Manifest = serde_json::from_value(serde_json::json!({
        "testbed_version": env!("CARGO_PKG_VERSION"),
        "status": "complete",
        "experiment": "figures-memory",
        "run_id": RUN_ID,
        "figures": ["bench-latency"],
        "spec_file": "benches/figures_memory.rs",
        "spec_sha256": "00",
        "spec": {"workload": {"kind": "btree"}},
        "executor": "host",
        "timing_note": "synthetic samples (benchmark)",
        "qemu_argv": [],
        "boots": [],
        "boot_to_agent_ms": [],
        "devices": [],
        "seed": 42,
        "points": [],
        "started_at": "2026-12-04T00:00:00Z",
        "finished_at": "2026-12-04T00:00:01Z",
        "wall_s": 1.0,
        "accel": null,
        "guest": null,
    }))
    .expect("manifest");
    let m = Manifest {
        status: RunStatus::Complete,
        points: records,
        ..m
    };
    manifest::write(&dir.join("manifest.json"), &m).expect("manifest.json");
}

/// Runs `testbed ARGS` and returns (wall s, peak RSS MiB).
// Waited for by wait4, which std's Child cannot do (it has no rusage).
#[allow(clippy::zombie_processes)]
fn measure(bin: &Path, args: &[&str]) -> (f64, f64) {
    let started = Instant::now();
    let child = Command::new(bin)
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn testbed");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, filling the two out-parameters.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    let wall = started.elapsed().as_secs_f64();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "testbed {args:?} failed: status {status}"
    );
    (wall, usage.ru_maxrss as f64 / 1024.0)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("figures_memory: run by `./x bench figures_memory` (writes GBs; takes minutes)");
        return;
    }
    let total: u64 = std::env::var("TESTBED_FIGURES_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000_000);
    let bin = std::env::var_os("TESTBED_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_testbed")));
    let tmp = tempfile::tempdir().expect("temp dir");
    let run = match std::env::var_os("TESTBED_FIGURES_RUN") {
        Some(d) => PathBuf::from(d),
        None => tmp.path().join("run"),
    };
    if !run.join("manifest.json").is_file() {
        let started = Instant::now();
        write_run(&run, total);
        println!(
            "figures_memory: wrote {total} samples in {:.0} s ({:.0} MiB of samples.parquet)",
            started.elapsed().as_secs_f64(),
            std::fs::metadata(run.join("samples.parquet")).map_or(0, |m| m.len()) as f64
                / (1 << 20) as f64
        );
    }
    let figures = tmp.path().join("figures");
    std::fs::create_dir_all(&figures).expect("figures dir");
    std::fs::write(figures.join("bench-latency.toml"), FIGURE).expect("figure");
    let (run_s, fig_s) = (run.to_string_lossy(), figures.to_string_lossy());
    println!("figures_memory: {} on {}", bin.display(), run.display());
    for cmd in ["plot", "check"] {
        let (wall, peak) = measure(&bin, &[cmd, &run_s, "--figures", &fig_s]);
        println!(
            "figures_memory: testbed {cmd:<5} {total} samples: {wall:6.1} s, peak RSS {peak:6.0} MiB ({} the {TARGET_MIB:.0} MiB target)",
            if peak <= TARGET_MIB { "within" } else { "OVER" }
        );
    }
    let claims = std::fs::read_to_string(run.join("claims.json")).unwrap_or_default();
    let claims: serde_json::Value = serde_json::from_str(&claims).unwrap_or_default();
    for c in claims["claims"].as_array().into_iter().flatten() {
        println!(
            "figures_memory: claim {} → {}",
            c["id"].as_str().unwrap_or("?"),
            c["verdict"].as_str().unwrap_or("?")
        );
    }
}
