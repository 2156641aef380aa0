//! report.html in a real browser: headless Chromium (Debian `chromium`)
//! loads the page of a synthetic run and a joined reproduce page, with no
//! console message, and every figure image renders (the page's own check
//! writes `data-rendered` / `data-total`). Fails when chromium is missing.
//!
//! `TESTBED_REPORT=path/to/report.html` checks that page too (CI points it
//! at results/reproduce/report.html after `testbed reproduce --quick`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use testbed::drawing::figures::{self, report};
use testbed::planning::plan::Point;
use testbed::recording::results::manifest::{self, Manifest, PointRecord, RunStatus};
use testbed::recording::results::samples;
use testbed_agent::protocol::SampleChunk;
use testbed_agent::workload::Summary;

fn chromium() -> PathBuf {
    for c in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::var("PATH").unwrap_or_default().split(':') {
            let p = Path::new(dir).join(c);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "chromium is not installed: this test checks report.html in a headless browser. \
         Install it with `apt-get install -y chromium` (./x setup does)"
    );
}

fn point(p: u32, params: &[(&str, i64)]) -> Point {
    Point {
        point: p,
        rep: 0,
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), toml::Value::Integer(*v)))
            .collect(),
        workload: testbed_agent::workload::Workload::Fault(
            testbed_agent::workload::fault::FaultParams {
                mode: testbed_agent::workload::fault::FaultMode::Error,
                after_s: 0.0,
                size: 1000,
            },
        ),
        seed: 1,
        vm_vcpus: None,
        boot_group: 0,
    }
}

fn chunk(metric: &str, engine: Option<&str>, values: Vec<f64>) -> SampleChunk {
    SampleChunk {
        job_id: 1,
        metric: metric.into(),
        unit: "ns".into(),
        thread: 0,
        first_seq: 0,
        tags: engine
            .map(|e| BTreeMap::from([("engine".to_string(), e.to_string())]))
            .unwrap_or_default(),
        values,
    }
}

struct Pt<'a> {
    params: &'a [(&'a str, i64)],
    chunks: Vec<SampleChunk>,
    summary: Summary,
    error: Option<&'a str>,
}

/// A run directory as `testbed run` leaves it.
fn write_run(dir: &Path, experiment: &str, figures: &[&str], pts: Vec<Pt<'_>>) {
    std::fs::create_dir_all(dir.join("points")).unwrap();
    let mut files = Vec::new();
    let mut records = Vec::new();
    for (i, p) in pts.into_iter().enumerate() {
        let pt = point(i as u32, p.params);
        if p.error.is_none() {
            let b = samples::point_batch("20260101T000000-beef", &pt, 0, &p.chunks).unwrap();
            let f = dir.join(format!("points/{}.parquet", pt.id()));
            samples::write_parquet(&f, b.schema(), &[b]).unwrap();
            files.push(f);
        }
        records.push(PointRecord {
            id: pt.id(),
            point: pt.point,
            rep: 0,
            params: pt.params.clone(),
            workload: None,
            seed: 1,
            ok: p.error.is_none(),
            error: p.error.map(String::from),
            wall_s: Some(1.0),
            samples: 1,
            summary: p.summary,
            boot: 0,
            noise: None,
            host_cost: None,
            earlier: Vec::new(),
        });
    }
    samples::merge(&files, &dir.join("samples.parquet")).unwrap();
    let done: Vec<&PointRecord> = records.iter().filter(|r| r.ok).collect();
    let t =
        testbed::recording::results::summary_table::batch("20260101T000000-beef", &done).unwrap();
    samples::write_parquet(&dir.join("summary.parquet"), t.schema(), &[t]).unwrap();
    let m = Manifest {
        testbed_version: "0.1.0".into(),
        status: RunStatus::Partial,
        experiment: experiment.into(),
        run_id: "20260101T000000-beef".into(),
        figures: figures.iter().map(|s| s.to_string()).collect(),
        spec_file: format!("experiments/{experiment}.toml"),
        spec_sha256: "ab".into(),
        spec: serde_json::json!({"workload": {"kind": "btree", "batch": 1}, "vm": {"vcpus": 2, "memory": "1G"}}),
        executor: "qemu".into(),
        containment: "cgroup v2 (/sys/fs/cgroup/testbed/1-1)".into(),
        inputs: Default::default(),
        accel: Some(
            serde_json::from_value(
                serde_json::json!({"requested": "auto", "used": "tcg", "reasons": ["no vmx flag"], "probe": null}),
            )
            .unwrap(),
        ),
        timing_note: "TCG (software emulation): timings are shape-only".into(),
        qemu_argv: vec!["qemu-system-x86_64".into(), "-nographic".into()],
        host: serde_json::from_value(serde_json::json!({"cpu_model": "cpu", "cpus": 2})).unwrap(),
        guest: Some(
            serde_json::from_value(serde_json::json!({"uname": "Linux 6.1", "cmdline": "console=ttyS0"}))
                .unwrap(),
        ),
        boots: Vec::new(),
        boot_to_agent_ms: vec![900],
        variance: Vec::new(),
        devices: vec![
            serde_json::from_value(
                serde_json::json!({"spec": {"name": "data", "kind": "nvme", "size": "32M"}}),
            )
            .unwrap(),
        ],
        seed: 42,
        points: records,
        started_at: "2026-01-01T00:00:00Z".into(),
        finished_at: Some("2026-01-01T00:01:00Z".into()),
        wall_s: Some(60.0),
        outputs: Vec::new(),
    };
    manifest::write(&dir.join("manifest.json"), &m).unwrap();
}

fn summary(kv: &[(&str, f64)]) -> Summary {
    kv.iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
        .collect()
}

fn smoke_run(dir: &Path) {
    let pts = [1i64, 2]
        .iter()
        .map(|&t| Pt {
            params: if t == 1 {
                &[("threads", 1)]
            } else {
                &[("threads", 2)]
            },
            chunks: vec![chunk(
                "read_latency",
                None,
                (0..50)
                    .map(|i| 80_000.0 * t as f64 + f64::from(i) * 100.0)
                    .collect(),
            )],
            summary: summary(&[("iops", 10_000.0 + t as f64 * 100.0)]),
            error: None,
        })
        .collect();
    write_run(dir, "smoke", &[], pts);
}

const DEPTHS: [[(&str, i64); 2]; 4] = [
    [("depth", 1), ("threads", 1)],
    [("depth", 2), ("threads", 1)],
    [("depth", 3), ("threads", 1)],
    [("depth", 4), ("threads", 1)],
];

fn btree_run(dir: &Path) {
    let pts = DEPTHS
        .iter()
        .map(|params| {
            let d = params[0].1 as f64;
            Pt {
                params,
                chunks: vec![
                    chunk(
                        "lookup_latency",
                        Some("read"),
                        vec![14_000.0 * d, 14_500.0 * d, 13_800.0 * d],
                    ),
                    chunk(
                        "lookup_latency",
                        Some("io-uring"),
                        vec![14_200.0 * d, 14_600.0 * d],
                    ),
                ],
                summary: summary(&[
                    ("read.lookups_per_s", 70_000.0 / d),
                    ("io-uring.lookups_per_s", 69_000.0 / d),
                    ("read.ios_per_s", 70_000.0),
                    ("io-uring.ios_per_s", 69_000.0),
                ]),
                error: (d == 3.0).then_some("boot 0 failed: guest hung (heartbeat)"),
            }
        })
        .collect();
    write_run(
        dir,
        "fig3-synthetic",
        &[
            "bpf-fig3a",
            "bpf-fig3c",
            "bpf-fig3d",
            "xrp-table3",
            "xrp-fig6a",
            "not-a-figure",
        ],
        pts,
    );
}

/// Loads `page` headless; returns (DOM, stderr).
fn load(page: &Path) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.canonicalize().unwrap().display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// No console output, every figure element present and rendered.
fn check_page(page: &Path, expect_figures: &[&str]) {
    let (dom, stderr) = load(page);
    let console: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .collect();
    assert!(
        console.is_empty(),
        "{}: console messages: {console:#?}",
        page.display()
    );
    for id in expect_figures {
        assert!(
            dom.contains(&format!("data-figure=\"{id}\"")),
            "{}: figure {id} is not in the DOM",
            page.display()
        );
    }
    let figures = dom.matches("class=\"testbed-figure\"").count();
    let imgs = dom.matches("<img class=\"figure\"").count();
    assert_eq!(figures, imgs, "every figure element holds its image");
    assert!(figures >= expect_figures.len());
    let want = format!("data-rendered=\"{figures}\" data-total=\"{figures}\"");
    assert!(
        dom.contains(&want),
        "{}: not every figure rendered (want {want}); check line: {:?}",
        page.display(),
        dom.lines().find(|l| l.contains("figure-check"))
    );
}

fn definitions() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/figures")
}

#[test]
#[ignore = "launches headless Chromium"]
fn run_report_loads_in_chromium_with_every_figure() {
    let t = tempfile::tempdir().unwrap();
    let run = t.path().join("fig3-synthetic/run");
    btree_run(&run);
    let page = figures::report_run(&run, &definitions()).unwrap();
    check_page(
        &page,
        &[
            "bpf-fig3a",
            "bpf-fig3c",
            "bpf-fig3d",
            "xrp-table3",
            "xrp-fig6a",
        ],
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("not-a-figure"),
        "unknown figure ids are listed"
    );
    assert!(
        html.contains("p0002-r00") && html.contains("guest hung"),
        "failed point listed"
    );
    assert!(html.contains("not measurable here"));
}

#[test]
#[ignore = "launches headless Chromium"]
fn joined_reproduce_report_loads_in_chromium() {
    let t = tempfile::tempdir().unwrap();
    let results = t.path().join("results");
    let smoke = results.join("smoke/r1");
    let btree = results.join("fig3-synthetic/r1");
    smoke_run(&smoke);
    btree_run(&btree);
    let defs = figures::def::load_all(&definitions()).unwrap();
    let mut outcomes = Vec::new();
    for (spec, dir) in [
        ("experiments/smoke.toml", &smoke),
        ("experiments/x-quick.toml", &btree),
    ] {
        let rf = figures::compute(dir, &defs).unwrap();
        figures::write_figures(&rf).unwrap();
        outcomes.push(report::SpecOutcome {
            spec: spec.into(),
            run: Some(report::RunLink {
                href: format!("../{}/", dir.strip_prefix(&results).unwrap().display()),
                figures: rf,
            }),
            error: None,
        });
    }
    outcomes.push(report::SpecOutcome {
        spec: "experiments/broken-quick.toml".into(),
        run: None,
        error: Some("qemu-system-x86_64 is not installed".into()),
    });
    let page = results.join("reproduce/report.html");
    std::fs::create_dir_all(page.parent().unwrap()).unwrap();
    std::fs::write(
        &page,
        report::joined_page(&outcomes, "all --quick").unwrap(),
    )
    .unwrap();
    check_page(&page, &["smoke-latency", "bpf-fig3a", "xrp-table3"]);
}

#[test]
#[ignore = "launches headless Chromium on $TESTBED_REPORT (./x test sets it after reproduce --quick)"]
fn the_report_named_by_testbed_report_loads_in_chromium() {
    let Ok(p) = std::env::var("TESTBED_REPORT") else {
        eprintln!("TESTBED_REPORT not set: only the synthetic pages are checked");
        return;
    };
    check_page(Path::new(&p), &[]);
}
