//! Tests on synthetic run directories, written with the same writer a real
//! run uses (per-point parquet files merged into samples.parquet).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use testbed_agent::protocol::SampleChunk;
use testbed_agent::workload::Summary;

use super::claims::Verdict;
use super::def::{self, FigureDef};
use super::extract::XKey;
use super::{compute, draw, render_png, render_svg};
use crate::planning::plan::Point;
use crate::recording::results::manifest::{self, Manifest, PointRecord, RunStatus};
use crate::recording::results::samples;

/// A run directory under construction.
pub struct Synth {
    pub dir: PathBuf,
    records: Vec<PointRecord>,
    files: Vec<PathBuf>,
    workload: serde_json::Value,
}

fn point(p: u32, rep: u32, params: &[(&str, toml::Value)]) -> Point {
    Point {
        point: p,
        rep,
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        workload: testbed_agent::workload::Workload::Fault(
            testbed_agent::workload::fault::FaultParams {
                mode: testbed_agent::workload::fault::FaultMode::Error,
                after_s: 0.0,
                size: 1000,
            },
        ),
        seed: 7,
        vm_vcpus: None,
        boot_group: 0,
    }
}

pub fn chunk(metric: &str, tags: &[(&str, &str)], values: Vec<f64>) -> SampleChunk {
    SampleChunk {
        job_id: 1,
        metric: metric.into(),
        unit: "ns".into(),
        thread: 0,
        first_seq: 0,
        tags: tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        values,
    }
}

pub fn summary(kv: &[(&str, f64)]) -> Summary {
    kv.iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
        .collect()
}

fn record(p: &Point, ok: bool, error: Option<&str>) -> PointRecord {
    PointRecord {
        id: p.id(),
        point: p.point,
        rep: p.rep,
        params: p.params.clone(),
        workload: None,
        seed: p.seed,
        ok,
        error: error.map(String::from),
        wall_s: Some(1.0),
        samples: 0,
        summary: BTreeMap::new(),
        boot: 0,
        noise: None,
        host_cost: None,
        earlier: Vec::new(),
    }
}

impl Synth {
    pub fn new(dir: &Path) -> Synth {
        std::fs::create_dir_all(dir.join("points")).unwrap();
        Synth {
            dir: dir.to_path_buf(),
            records: Vec::new(),
            files: Vec::new(),
            workload: serde_json::json!({"kind": "btree"}),
        }
    }

    pub fn workload(mut self, w: serde_json::Value) -> Synth {
        self.workload = w;
        self
    }

    pub fn ok(
        &mut self,
        p: u32,
        rep: u32,
        params: &[(&str, toml::Value)],
        chunks: &[SampleChunk],
        s: Summary,
    ) {
        let pt = point(p, rep, params);
        let b = samples::point_batch("20260101T000000-abcd", &pt, 0, chunks).unwrap();
        let f = self.dir.join("points").join(format!("{}.parquet", pt.id()));
        samples::write_parquet(&f, b.schema(), &[b]).unwrap();
        self.files.push(f);
        let mut rec = record(&pt, true, None);
        // The workload as a run records it: the engines its summary keys
        // name (`read.lookups_per_s`), so the summary table splits them.
        let mut w = self.workload.clone();
        let engines: std::collections::BTreeSet<&str> = s
            .keys()
            .filter_map(|k| Some(k.split_once('.')?.0))
            .collect();
        if let Some(o) = w.as_object_mut() {
            o.entry("device")
                .or_insert_with(|| serde_json::json!("data"));
            if !engines.is_empty() {
                o.insert("engines".into(), serde_json::json!(engines));
            }
        }
        rec.summary = s;
        rec.workload = Some(w);
        self.records.push(rec);
    }

    pub fn failed(&mut self, p: u32, rep: u32, params: &[(&str, toml::Value)], error: &str) {
        let pt = point(p, rep, params);
        self.records.push(record(&pt, false, Some(error)));
    }

    pub fn finish(mut self, experiment: &str, figures: &[&str]) -> PathBuf {
        self.files.sort();
        if !self.files.is_empty() {
            samples::merge(&self.files, &self.dir.join("samples.parquet")).unwrap();
            let done: Vec<&PointRecord> = self.records.iter().filter(|r| r.ok).collect();
            let t = crate::recording::results::summary_table::batch("20260101T000000-abcd", &done)
                .unwrap();
            samples::write_parquet(&self.dir.join("summary.parquet"), t.schema(), &[t]).unwrap();
        }
        let m = Manifest {
            testbed_version: "0.1.0".into(),
            status: if self.records.iter().all(|r| r.ok) {
                RunStatus::Complete
            } else {
                RunStatus::Partial
            },
            experiment: experiment.into(),
            run_id: "20260101T000000-abcd".into(),
            figures: figures.iter().map(|f| f.to_string()).collect(),
            spec_file: "experiments/synthetic.toml".into(),
            spec_sha256: "00".into(),
            spec: serde_json::json!({
                "workload": self.workload,
                "vm": {"vcpus": 2, "memory": "1G"},
            }),
            executor: "qemu".into(),
        containment: "cgroup v2 (/sys/fs/cgroup/testbed/1-1)".into(),
            inputs: serde_json::from_value(serde_json::json!({
                "kernel": {"description": "Debian linux-image-6.1 6.1.1-1", "release": "6.1.0"},
            }))
            .unwrap(),
            accel: Some(
                serde_json::from_value(
                    serde_json::json!({"used": "tcg", "requested": "auto", "reasons": ["no vmx"]}),
                )
                .unwrap(),
            ),
            timing_note: "TCG: timings are shape-only".into(),
            qemu_argv: vec!["qemu-system-x86_64".into()],
            host: serde_json::from_value(serde_json::json!({"cpu_model": "test cpu", "cpus": 2}))
                .unwrap(),
            guest: None,
            boots: Vec::new(),
            boot_to_agent_ms: Vec::new(),
            variance: Vec::new(),
            devices: vec![
                serde_json::from_value(serde_json::json!({"spec": {"name": "data", "kind": "nvme", "size": "32M", "logical_block_size": 512, "backend": "file"}}))
                    .unwrap(),
            ],
            seed: 42,
            points: self.records,
            started_at: "2026-01-01T00:00:00Z".into(),
            finished_at: Some("2026-01-01T00:01:00Z".into()),
            wall_s: Some(60.0),
            outputs: Vec::new(),
        };
        manifest::write(&self.dir.join("manifest.json"), &m).unwrap();
        self.dir
    }
}

fn int(v: i64) -> toml::Value {
    toml::Value::Integer(v)
}

/// Definitions used by these tests, in a directory of their own.
const LOOKUPS: &str = r#"
id = "t-lookups"
title = "lookups"
family = "test"
[source]
paper = "P"
where = "Fig. 1"
hardware = "paper box"
[[panels]]
name = "tput"
x = { column = "param_depth", label = "depth" }
y = { metric = "lookups_per_s", kind = "summary", label = "throughput", unit = "ops/s", better = "higher" }
series = { columns = ["tag_engine"], expected = ["read", "io-uring", "nvme-hook"] }
summary_tag = "engine"
[[panels.reference]]
label = "paper read"
series = "read"
x = [1, 2]
y = [90.0, 60.0]
[[panels]]
name = "speedup"
x = { column = "param_depth", label = "depth" }
y = { metric = "lookups_per_s", kind = "summary", label = "speedup", unit = "×" }
ratio = { column = "tag_engine", numerator = ["nvme-hook", "io-uring"], denominator = "read" }
summary_tag = "engine"
[[panels]]
name = "lat"
x = { column = "param_depth", label = "depth" }
y = { metric = "lookup_latency", kind = "raw", stat = "mean", scale = 0.001, label = "latency", unit = "µs" }
series = { columns = ["tag_engine"] }

[[claims]]
id = "falls"
text = "read falls with depth"
panel = "tput"
kind = "monotonic"
direction = "decreasing"
series = ["read"]
[[claims]]
id = "rises"
text = "read rises with depth"
panel = "tput"
kind = "monotonic"
direction = "increasing"
series = ["read"]
[[claims]]
id = "hook-rises"
text = "nvme-hook rises"
panel = "tput"
kind = "monotonic"
direction = "increasing"
series = ["nvme-hook"]
[[claims]]
id = "max-ok"
text = "max ≤ 200"
panel = "tput"
kind = "max_le"
value = 200
[[claims]]
id = "max-bad"
text = "max ≤ 50"
panel = "tput"
kind = "max_le"
value = 50
[[claims]]
id = "min-ok"
text = "min ≥ 10"
panel = "tput"
kind = "min_ge"
value = 10
[[claims]]
id = "value-at"
text = "read at depth 2 is 45..70"
panel = "tput"
kind = "value_at"
series = ["read"]
x = 2
min = 45
max = 70
[[claims]]
id = "value-at-edge"
text = "read at depth 2 is at least 50"
panel = "tput"
kind = "value_at"
series = ["read"]
x = 2
min = 50
[[claims]]
id = "value-at-bad"
text = "read at the deepest is > 100"
panel = "tput"
kind = "value_at"
series = ["read"]
at = "largest"
min = 100
[[claims]]
id = "ratio-ok"
text = "io-uring ≈ read at depth 1"
panel = "tput"
kind = "ratio_at"
numerator = "io-uring"
denominator = "read"
at = "smallest"
min = 0.9
max = 1.1
[[claims]]
id = "ratio-bad"
text = "io-uring twice read"
panel = "tput"
kind = "ratio_at"
numerator = "io-uring"
denominator = "read"
x = 1
min = 2.0
[[claims]]
id = "ratio-absent"
text = "nvme-hook beats read"
panel = "tput"
kind = "ratio_at"
numerator = "nvme-hook"
denominator = "read"
at = "largest"
min = 1.0
[[claims]]
id = "linear"
text = "latency linear in depth"
panel = "lat"
kind = "linear_in_x"
series = ["read"]
r2_min = 0.99
[[claims]]
id = "not-linear"
text = "throughput linear in depth"
panel = "tput"
kind = "linear_in_x"
series = ["read"]
r2_min = 0.999
[[claims]]
id = "linear-few"
text = "linear with 5 points"
panel = "tput"
kind = "linear_in_x"
series = ["read"]
r2_min = 0.9
min_points = 5
[[claims]]
id = "speedup-absent"
text = "nvme-hook speedup ≤ 1.3"
panel = "speedup"
kind = "max_le"
series = ["nvme-hook"]
value = 1.3
[[claims]]
id = "ratio-beyond-reach"
text = "io-uring ≈ read at depth 9"
panel = "tput"
kind = "ratio_at"
numerator = "io-uring"
denominator = "read"
x = 9
min = 0.9
[[claims]]
id = "min-ok-given-max-ok"
text = "min ≥ 10, read only if max ≤ 200"
panel = "tput"
kind = "min_ge"
value = 10
requires = ["max-ok"]
[[claims]]
id = "min-ok-given-max-bad"
text = "min ≥ 10, read only if max ≤ 50"
panel = "tput"
kind = "min_ge"
value = 10
requires = ["max-ok", "max-bad"]
"#;

fn defs_dir(t: &Path) -> PathBuf {
    let d = t.join("defs");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("t-lookups.toml"), LOOKUPS).unwrap();
    d
}

fn defs(t: &Path) -> BTreeMap<String, FigureDef> {
    def::load_all(&defs_dir(t)).unwrap()
}

/// read and io-uring interleaved, depth 1..4, 3 repetitions; read
/// throughput 100/d (a curve, not a line), latency linear in depth.
fn lookups_run(t: &Path) -> PathBuf {
    lookups_run_with(t, "run", |d| 100.0 / d)
}

/// As `lookups_run`, in `t/<name>`, read throughput `read(depth)`.
fn lookups_run_with(t: &Path, name: &str, read: fn(f64) -> f64) -> PathBuf {
    let mut s = Synth::new(&t.join(name));
    for d in 1..=4i64 {
        // Five repetitions: a single point's t interval needs four.
        for rep in 0..5u32 {
            // Each depth's repetitions spread by its own amount, so a
            // step or ratio between depths has a spread of its own too.
            let jitter = (f64::from(rep) - 2.0) * (1.0 + 0.25 * (d - 1) as f64);
            let read = read(d as f64) + jitter;
            // Each repetition's reads a little slower or faster.
            let shift = 5.0 * f64::from((rep * 3 + d as u32) % 5);
            let lat: Vec<f64> = (0..20)
                .map(|i| 10_000.0 * d as f64 + f64::from(i) + shift)
                .collect();
            s.ok(
                (d - 1) as u32,
                rep,
                &[("depth", int(d))],
                &[
                    chunk("lookup_latency", &[("engine", "read")], lat.clone()),
                    chunk("lookup_latency", &[("engine", "io-uring")], lat),
                ],
                summary(&[
                    ("read.lookups_per_s", read),
                    (
                        "io-uring.lookups_per_s",
                        read * (1.02 + 0.002 * (f64::from(rep) - 2.0)),
                    ),
                    ("depth", d as f64),
                ]),
            );
        }
    }
    s.finish("lookups", &["t-lookups", "no-such-figure"])
}

#[test]
fn each_claim_kind_holds_fails_or_is_not_measurable() {
    let t = tempfile::tempdir().unwrap();
    let run = lookups_run(t.path());
    let rf = compute(&run, &defs(t.path())).unwrap();
    assert_eq!(
        rf.unknown,
        ["no-such-figure"],
        "unknown ids are reported, not fatal"
    );
    let claims = &rf.figures[0].claims;
    let verdict = |id: &str| {
        let c = claims.iter().find(|c| c.id == id).unwrap();
        (c.verdict, c.numbers.clone())
    };
    let expect = [
        ("falls", Verdict::Holds),
        ("rises", Verdict::DoesNotHold),
        ("hook-rises", Verdict::NotMeasurable),
        ("max-ok", Verdict::Holds),
        ("max-bad", Verdict::DoesNotHold),
        ("min-ok", Verdict::Holds),
        ("value-at", Verdict::Holds),
        ("value-at-edge", Verdict::Undecided),
        ("value-at-bad", Verdict::DoesNotHold),
        ("ratio-ok", Verdict::Holds),
        ("ratio-bad", Verdict::DoesNotHold),
        ("ratio-absent", Verdict::NotMeasurable),
        ("linear", Verdict::Holds),
        ("not-linear", Verdict::DoesNotHold),
        ("linear-few", Verdict::NotMeasurable),
        ("speedup-absent", Verdict::NotMeasurable),
        ("ratio-beyond-reach", Verdict::NotMeasurable),
        ("min-ok-given-max-ok", Verdict::Holds),
        ("min-ok-given-max-bad", Verdict::NotMeasurable),
    ];
    for (id, want) in expect {
        let (got, numbers) = verdict(id);
        assert_eq!(got, want, "{id}: {numbers}");
        assert!(!numbers.is_empty(), "{id} shows its numbers");
    }
    // The numbers behind a verdict are the medians drawn.
    let (_, falls) = verdict("falls");
    assert!(falls.contains("1→100") && falls.contains("4→25"), "{falls}");
    let (_, ratio) = verdict("ratio-ok");
    assert!(ratio.contains("= 1.02"), "{ratio}");
    let (_, absent) = verdict("ratio-absent");
    assert!(absent.contains("nvme-hook has no data"), "{absent}");
    // Repetitions 49, 50, 51 against "≥ 50": the interval straddles the
    // bound, and its median sits on it.
    let (_, edge) = verdict("value-at-edge");
    assert!(
        edge.ends_with(
            "; undecided: the estimate sits on the bound 50: more repetitions alone will not decide it"
        ),
        "{edge}"
    );
    let c = claims.iter().find(|c| c.id == "value-at-edge").unwrap();
    assert_eq!(
        c.interval_text().as_deref(),
        Some(
            "value of read at x=2: 50 [47.574–52.485] (95 %, Student t on logarithms, one point, 5 units) against ≥ 50"
        )
    );
    assert_eq!((c.repetitions, c.repetitions_needed), (Some(5), None));
    // A claim tied to an x the run did not reach is not decided elsewhere.
    let (_, beyond) = verdict("ratio-beyond-reach");
    assert_eq!(
        beyond,
        "io-uring and read: the claim is about x=9, which this run did not reach (it has x=1, 2, 3, 4)"
    );
    // A claim resting on one that failed says so, and keeps its numbers.
    let (_, rests) = verdict("min-ok-given-max-bad");
    assert!(
        rests.starts_with("rests on max-bad does not hold; measured anyway:")
            && rests.contains("claim: ≥ 10"),
        "{rests}"
    );
}

#[test]
fn medians_and_intervals_are_over_repetitions() {
    let t = tempfile::tempdir().unwrap();
    let run = lookups_run(t.path());
    let rf = compute(&run, &defs(t.path())).unwrap();
    let (_, tput) = &rf.figures[0].panels[0];
    let read = tput.series("read").unwrap();
    let p1 = &read.points[0];
    assert_eq!(p1.x, XKey::Num(1.0));
    // Repetitions 98 to 102: median 100; five values give a t interval
    // (on logarithms): about ±2.78·1.58/√5.
    assert_eq!((p1.est.value, p1.est.n), (100.0, 5));
    let (lo, hi) = (p1.est.lo.unwrap(), p1.est.hi.unwrap());
    assert!(
        (97.8..98.3).contains(&lo) && (101.7..102.2).contains(&hi),
        "{lo} {hi}"
    );
    assert_eq!(
        tput.absent,
        ["nvme-hook"],
        "expected series without data are listed"
    );
    // The ratio panel pairs engines per repetition: exactly 1.02.
    let (_, speedup) = &rf.figures[0].panels[1];
    let io = speedup.series("io-uring").unwrap();
    assert!(
        io.points.iter().all(|p| (p.est.value - 1.02).abs() < 1e-9),
        "{:?}",
        io.points
    );
    assert!(
        speedup.series("nvme-hook").is_none(),
        "an absent engine is no series, not zeros"
    );
    assert!(speedup.absent.contains(&"nvme-hook".to_string()));
    // Raw samples: the mean of each repetition (20 009.5 ns, each shifted
    // by 0–20 ns), their median, scaled ns → µs.
    let (_, lat) = &rf.figures[0].panels[2];
    let l = &lat.series("read").unwrap().points[1];
    assert!((l.est.value - 20.0195).abs() < 1e-9, "{}", l.est.value);
}

#[test]
fn redrawing_gives_identical_bytes_even_from_a_copied_run_directory() {
    let t = tempfile::tempdir().unwrap();
    let run = lookups_run(t.path());
    let defs = defs(t.path());
    let a = compute(&run, &defs).unwrap();
    let svg1 = render_svg(&a.figures[0]).unwrap();
    let png1 = render_png(&a.figures[0]).unwrap();
    assert_eq!(svg1, render_svg(&a.figures[0]).unwrap());
    assert_eq!(png1, render_png(&a.figures[0]).unwrap());
    assert!(png1.starts_with(b"\x89PNG"));
    assert!(svg1.contains("aria-label=\"depth\""), "axis label present");
    assert!(
        svg1.contains("paper read"),
        "paper values are in the legend"
    );

    let copy = t.path().join("elsewhere/run-copy");
    std::fs::create_dir_all(copy.join("points")).unwrap();
    for f in ["manifest.json", "samples.parquet", "summary.parquet"] {
        std::fs::copy(run.join(f), copy.join(f)).unwrap();
    }
    let b = compute(&copy, &defs).unwrap();
    assert_eq!(svg1, render_svg(&b.figures[0]).unwrap());
    assert_eq!(png1, render_png(&b.figures[0]).unwrap());
}

#[test]
fn a_failed_point_is_a_gap_listed_under_the_figure_not_a_zero() {
    let t = tempfile::tempdir().unwrap();
    let mut s = Synth::new(&t.path().join("run"));
    for d in [1i64, 2, 4] {
        s.ok(
            (d - 1) as u32,
            0,
            &[("depth", int(d))],
            &[chunk(
                "lookup_latency",
                &[("engine", "read")],
                vec![1.0, 2.0],
            )],
            summary(&[("lookups_per_s", 100.0 / d as f64)]),
        );
    }
    s.failed(2, 0, &[("depth", int(3))], "guest panic: boom\nmore lines");
    let run = s.finish("lookups", &["t-lookups"]);
    let rf = compute(&run, &defs(t.path())).unwrap();
    let fig = &rf.figures[0];
    let (_, tput) = &fig.panels[0];
    // A single engine's bare summary key belongs to the engine of its samples.
    let read = tput.series("read").unwrap();
    let xs: Vec<f64> = read.points.iter().map(|p| p.x.pos()).collect();
    assert_eq!(xs, [1.0, 2.0, 4.0]);
    assert!(read.points.iter().all(|p| p.est.value > 0.0));
    assert_eq!(tput.gaps.len(), 1);
    assert_eq!(tput.gaps[0].x, XKey::Num(3.0));
    let segs = draw::segments(read, tput);
    assert_eq!(segs.len(), 1, "the line breaks at depth 3: {segs:?}");
    assert_eq!(segs[0].len(), 2);
    assert!(
        fig.notes.iter().any(|n| n.contains("p0002-r00")
            && n.contains("depth=3")
            && n.contains("guest panic: boom")
            && !n.contains("more lines")),
        "{:?}",
        fig.notes
    );
    let svg = render_svg(fig).unwrap();
    assert!(svg.contains("failed point (gap)"));
}

#[test]
fn damaged_run_files_give_errors_naming_the_file() {
    let t = tempfile::tempdir().unwrap();
    let run = lookups_run(t.path());
    let defs = defs(t.path());
    let samples = run.join("samples.parquet");
    let bytes = std::fs::read(&samples).unwrap();

    std::fs::write(&samples, &bytes[..bytes.len() / 2]).unwrap();
    let e = compute(&run, &defs).err().unwrap().to_string();
    assert!(e.contains("samples.parquet"), "truncated: {e}");

    std::fs::write(&samples, b"PAR1 garbage garbage PAR1").unwrap();
    let e = compute(&run, &defs).err().unwrap().to_string();
    assert!(e.contains("samples.parquet"), "corrupt: {e}");

    std::fs::remove_file(&samples).unwrap();
    let e = compute(&run, &defs).err().unwrap().to_string();
    assert!(
        e.contains("samples.parquet") && e.contains("missing"),
        "missing: {e}"
    );

    std::fs::write(run.join("manifest.json"), b"{ not json").unwrap();
    let e = compute(&run, &defs).err().unwrap().to_string();
    assert!(e.contains("manifest.json"), "manifest: {e}");
}

#[test]
fn plot_check_and_report_write_their_files() {
    let t = tempfile::tempdir().unwrap();
    let run = lookups_run(t.path());
    let d = defs_dir(t.path());
    let plotted = super::plot_run(&run, &d).unwrap();
    for ext in ["svg", "png", "json"] {
        assert!(run.join(format!("figures/t-lookups.{ext}")).is_file());
    }
    assert_eq!(plotted.unknown, ["no-such-figure"]);
    let (claims, _) = super::check_run(&run, &d).unwrap();
    assert_eq!(claims.len(), 19);
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("claims.json")).unwrap()).unwrap();
    assert_eq!(doc["claims"][0]["verdict"], "holds");
    assert!(
        doc["claims"][0]["values"]
            .as_array()
            .is_some_and(|v| !v.is_empty())
    );
    let html_path = super::report_run(&run, &d).unwrap();
    let html = std::fs::read_to_string(html_path).unwrap();
    assert!(html.contains("<figure id=\"fig-t-lookups\""));
    assert!(html.contains("data:image/svg+xml;base64,"));
    assert!(html.contains("not measurable here") && html.contains("does not hold"));
    assert!(html.contains("accelerator") && html.contains("TCG"));
    assert!(html.contains("href=\"samples.parquet\""));
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "no external resources"
    );
}

#[test]
fn filters_use_workload_fields_when_the_axis_was_not_swept() {
    let t = tempfile::tempdir().unwrap();
    let mut s = Synth::new(&t.path().join("run"))
        .workload(serde_json::json!({"kind": "btree", "batch": 1}));
    for d in [1i64, 2] {
        s.ok(
            (d - 1) as u32,
            0,
            &[("depth", int(d))],
            &[chunk("lookup_latency", &[("engine", "read")], vec![1.0])],
            summary(&[("lookups_per_s", 10.0)]),
        );
    }
    let run = s.finish("lookups", &["t-batch"]);
    let d = t.path().join("defs");
    std::fs::create_dir_all(&d).unwrap();
    let def = |want: i64, col: &str| {
        format!(
            "id = \"t-batch\"\ntitle = \"t\"\nfamily = \"test\"\n[[panels]]\nname = \"p\"\n\
             x = {{ column = \"param_depth\", label = \"depth\" }}\n\
             y = {{ metric = \"lookups_per_s\", kind = \"summary\", label = \"t\" }}\n\
             filter = {{ \"{col}\" = {want} }}\n"
        )
    };
    let points = |text: String| {
        std::fs::write(d.join("t-batch.toml"), text).unwrap();
        let rf = compute(&run, &def::load_all(&d).unwrap()).unwrap();
        let (_, p) = &rf.figures[0].panels[0];
        (
            p.series.iter().map(|s| s.points.len()).sum::<usize>(),
            p.notes.clone(),
        )
    };
    assert_eq!(points(def(1, "param_batch")).0, 2);
    assert_eq!(points(def(2, "param_batch")).0, 0);
    let (n, notes) = points(def(2, "param_nope"));
    assert_eq!(n, 2, "a filter on a column the run lacks does not apply");
    assert!(notes[0].contains("param_nope"), "{notes:?}");
}

#[test]
fn declared_categories_the_run_lacks_are_named_not_drawn_empty() {
    let t = tempfile::tempdir().unwrap();
    let mut s = Synth::new(&t.path().join("run"));
    for (i, size) in ["small", "tiny"].iter().enumerate() {
        s.ok(
            i as u32,
            0,
            &[("dataset", toml::Value::String(size.to_string()))],
            &[],
            summary(&[("lookups_per_s", 10.0)]),
        );
    }
    let run = s.finish("sizes", &["t-sizes"]);
    let d = t.path().join("defs");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("t-sizes.toml"),
        "id = \"t-sizes\"\ntitle = \"t\"\nfamily = \"test\"\n[[panels]]\nname = \"p\"\n\
         x = { column = \"param_dataset\", label = \"data set\", categories = [\"tiny\", \"small\", \"medium\", \"large\"] }\n\
         y = { metric = \"lookups_per_s\", kind = \"summary\", label = \"t\" }\n",
    )
    .unwrap();
    let rf = compute(&run, &def::load_all(&d).unwrap()).unwrap();
    let (_, p) = &rf.figures[0].panels[0];
    // The declared order holds for what was measured; the rest is a note.
    assert_eq!(
        p.categories.as_deref(),
        Some(&["tiny".to_string(), "small".to_string()][..])
    );
    assert!(
        p.notes
            .iter()
            .any(|n| n == "data set not in this run: medium, large"),
        "{:?}",
        p.notes
    );
}

#[test]
fn a_metric_the_points_could_not_measure_is_not_measurable_with_their_reason() {
    let t = tempfile::tempdir().unwrap();
    let mut s = Synth::new(&t.path().join("run"));
    let mut sum = summary(&[("workflow_seconds", 10.0)]);
    sum.insert(
        "cache_misses_unavailable".into(),
        serde_json::json!("no hardware PMU (TCG)"),
    );
    s.ok(0, 0, &[], &[], sum);
    let run = s.finish("counters", &["t-misses"]);
    let d = t.path().join("defs");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("t-misses.toml"),
        "id = \"t-misses\"\ntitle = \"t\"\nfamily = \"test\"\n[[panels]]\nname = \"p\"\n\
         x = { column = \"tag_stage\", label = \"stage\" }\n\
         y = { metric = \"cache_misses\", kind = \"raw\", stat = \"sum\", label = \"misses\" }\n\
         series = { columns = [\"tag_placement\"], expected = [\"disk\", \"arrowsam\"] }\n\
         [[claims]]\nid = \"fewer\"\ntext = \"fewer misses\"\nkind = \"ratio_at\"\n\
         numerator = \"arrowsam\"\ndenominator = \"disk\"\nx = \"sort\"\nmax = 1.0\n",
    )
    .unwrap();
    let rf = compute(&run, &def::load_all(&d).unwrap()).unwrap();
    let (_, p) = &rf.figures[0].panels[0];
    assert_eq!(p.unavailable.as_deref(), Some("no hardware PMU (TCG)"));
    let c = &rf.figures[0].claims[0];
    assert_eq!(c.verdict, Verdict::NotMeasurable);
    assert!(c.numbers.contains("no hardware PMU (TCG)"), "{}", c.numbers);
}

/// nvme-hook alone, depth 1..4, `reps` repetitions: a run that feeds the
/// same figure but lacks the series most of its claims are about.
fn hook_only_run(t: &Path, reps: u32) -> PathBuf {
    let mut s = Synth::new(&t.join("hook-run"));
    for d in 1..=4i64 {
        for rep in 0..reps {
            s.ok(
                (d - 1) as u32,
                rep,
                &[("depth", int(d))],
                &[chunk(
                    "lookup_latency",
                    &[("engine", "nvme-hook")],
                    vec![5000.0; 4],
                )],
                summary(&[
                    ("nvme-hook.lookups_per_s", 150.0 + f64::from(rep)),
                    ("depth", d as f64),
                ]),
            );
        }
    }
    s.finish("hook", &["t-lookups"])
}

#[test]
fn a_reproduction_reports_each_claim_once_decided_on_the_run_that_measured_it() {
    use super::report::{RunLink, SpecOutcome, join_claims};
    let t = tempfile::tempdir().unwrap();
    let defs = defs(t.path());
    let outcome = |dir: PathBuf, href: &str| SpecOutcome {
        spec: href.into(),
        run: Some(RunLink {
            href: href.into(),
            figures: compute(&dir, &defs).unwrap(),
        }),
        error: None,
    };
    // The hook-only run comes first, and has more repetitions.
    let outcomes = vec![
        outcome(hook_only_run(t.path(), 5), "../hook/"),
        SpecOutcome {
            spec: "broken.toml".into(),
            run: None,
            error: Some("not run".into()),
        },
        outcome(lookups_run(t.path()), "../lookups/"),
    ];
    let joined = join_claims(&outcomes);
    let per_run = outcomes[0].run.as_ref().unwrap().figures.figures[0]
        .claims
        .len();
    assert_eq!(joined.len(), per_run, "each claim once, not once per run");
    let get = |id: &str| joined.iter().find(|j| j.claim.id == id).unwrap();
    // Only the lookups run has read: its claims are decided there.
    let falls = get("falls");
    assert_eq!(
        (falls.experiment.as_str(), falls.run.as_str(), falls.outcome),
        ("lookups", "../lookups/", 2)
    );
    assert_eq!(falls.claim.verdict, Verdict::Holds);
    assert_eq!(falls.checked_in, ["hook", "lookups"]);
    // Both runs measure "max ≤ 200" (nvme-hook only in one, read and
    // io-uring in the other): the one on more repetitions decides it.
    let max = get("max-ok");
    assert_eq!(
        (max.experiment.as_str(), max.claim.repetitions),
        ("hook", Some(5))
    );
    // Only the hook run has nvme-hook: "nvme-hook rises" is decided there,
    // not left "not measurable" because the other run lacks it.
    let rises = get("hook-rises");
    assert_eq!(rises.experiment, "hook");
    assert_ne!(
        rises.claim.verdict,
        Verdict::NotMeasurable,
        "{}",
        rises.claim.numbers
    );
    // `requires` are read across the joined claims.
    let given = get("min-ok-given-max-bad");
    assert!(
        given
            .claim
            .numbers
            .starts_with("rests on max-bad does not hold"),
        "{}",
        given.claim.numbers
    );
    assert_eq!(get("min-ok-given-max-ok").claim.verdict, Verdict::Holds);
    // The joined page lists each claim once too.
    let page = super::report::joined_page(&outcomes, "test").unwrap();
    let table = page
        .split("<h2>Claims</h2>")
        .nth(1)
        .and_then(|s| s.split("<h2>Runs</h2>").next())
        .unwrap();
    assert_eq!(table.matches("<td>read falls with depth<br>").count(), 1);
    assert_eq!(table.matches("<tr class=\"v-").count(), per_run);
}

#[test]
fn the_baseline_gate_fails_only_on_a_claim_that_held_and_now_does_not() {
    use super::gate::{Outcome, against_baseline};
    use crate::recording::results::manifest::NoisyPoints;
    let quiet = NoisyPoints::default();
    let t = tempfile::tempdir().unwrap();
    let defs = defs(t.path());
    let claims = |dir: PathBuf| -> Vec<super::ClaimResult> {
        compute(&dir, &defs)
            .unwrap()
            .figures
            .into_iter()
            .flat_map(|f| f.claims)
            .collect()
    };
    let base = claims(lookups_run(t.path()));
    let held = base.iter().filter(|c| c.verdict == Verdict::Holds).count();
    assert!(held >= 5, "{held}");

    // The same data: every claim that held still holds.
    let same = against_baseline(&base, &base, &quiet, false);
    assert_eq!(same.outcome(), Outcome::Pass);
    assert_eq!(
        (same.kept, same.lost.len(), same.weakened.len()),
        (held, 0, 0)
    );

    // Read throughput now rises with depth: "read falls" no longer holds.
    let rising = claims(lookups_run_with(t.path(), "rising", |d| 25.0 * d));
    // Measured on a busy host, the same loss is still lost; only after
    // --rerun-noisy measured each noisy point again, still noisy, is it
    // inconclusive, with the reason.
    let busy = |rerun| NoisyPoints {
        noisy: 2,
        rerun,
        measured: 12,
        limit_pct: 10.0,
    };
    let not_rerun = against_baseline(&base, &rising, &busy(0), true);
    assert_eq!(not_rerun.outcome(), Outcome::Regression);
    let still_noisy = against_baseline(&base, &rising, &busy(2), true);
    assert_eq!(still_noisy.outcome(), Outcome::Inconclusive);
    let weak = still_noisy
        .lost_on_noise
        .iter()
        .find(|c| c.id == "falls")
        .unwrap();
    assert_eq!(weak.now, Some(Verdict::DoesNotHold));
    assert!(
        still_noisy
            .text()
            .contains("lost on a busy host (INCONCLUSIVE: 2 of 12 points measured on a busy host"),
        "{}",
        still_noisy.text()
    );
    let gate = against_baseline(&base, &rising, &quiet, false);
    assert_eq!(gate.outcome(), Outcome::Regression);
    let lost: Vec<&str> = gate.lost.iter().map(|c| c.id.as_str()).collect();
    assert!(lost.contains(&"falls"), "{lost:?}");
    assert!(
        gate.lost
            .iter()
            .all(|c| c.now == Some(Verdict::DoesNotHold)),
        "{:?}",
        gate.lost
    );
    let text = gate.text();
    assert!(
        text.contains("t-lookups/falls") && text.ends_with("REGRESSION (exit 1)\n"),
        "{text}"
    );

    // A run without read cannot decide "read falls": inconclusive, not lost.
    let hook = claims(hook_only_run(t.path(), 3));
    let gate = against_baseline(&base, &hook, &quiet, false);
    let weak = gate.weakened.iter().find(|c| c.id == "falls").unwrap();
    assert_eq!(weak.now, Some(Verdict::NotMeasurable));
    assert!(
        !gate.lost.iter().any(|c| c.id == "falls"),
        "{:?}",
        gate.lost
    );
}

/// One run of a history: read and io-uring at depth 1 and 2, 3
/// repetitions; read throughput `read_level` × a run-to-run wobble of
/// 2 % (fixed seed per run), started `i` minutes after the first.
fn history_run(t: &Path, name: &str, i: u64, read_level: f64, experiment: &str) -> PathBuf {
    let mut rng = super::stats::Rng::new(1000 + i);
    let wobble = 1.0 + 0.02 * rng.normal();
    let mut s = Synth::new(&t.join(name));
    for d in 1..=2i64 {
        for rep in 0..3u32 {
            let jitter = 1.0 + 0.002 * (f64::from(rep) - 1.0);
            let read = read_level * wobble * jitter * 100.0 / d as f64;
            s.ok(
                (d - 1) as u32,
                rep,
                &[("depth", int(d))],
                &[chunk(
                    "lookup_latency",
                    &[("engine", "read")],
                    vec![10_000.0 * d as f64; 4],
                )],
                summary(&[
                    ("read.lookups_per_s", read),
                    ("io-uring.lookups_per_s", 100.0 * wobble * jitter / d as f64),
                    ("depth", d as f64),
                ]),
            );
        }
    }
    let dir = s.finish(experiment, &["t-lookups"]);
    let path = dir.join("manifest.json");
    let mut m = manifest::read(&path).unwrap();
    m.run_id = format!("2026010{i}T000000-{name}");
    m.started_at = manifest::format_utc(1_767_225_600 + 60 * i);
    manifest::write(&path, &m).unwrap();
    dir
}

#[test]
fn history_finds_a_ten_percent_step_at_its_run_and_none_in_a_flat_history() {
    use super::changepoint::Config;
    use super::compare::Flag;
    use super::gate::Outcome;
    use super::history::{history, run_dirs};
    use crate::recording::results::manifest::NoisyPoints;
    let t = tempfile::tempdir().unwrap();
    let defs = defs(t.path());
    let cfg = Config::default();
    let make = |sub: &str, levels: &[f64]| -> Vec<PathBuf> {
        levels
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                history_run(
                    &t.path().join(sub),
                    &format!("r{i}"),
                    i as u64,
                    l,
                    "lookups",
                )
            })
            .collect()
    };

    // Flat: eight runs of the same throughput, 2 % apart run to run.
    let flat = history(&make("flat", &[1.0; 8]), &defs, &cfg).unwrap();
    assert_eq!(flat.runs.len(), 8);
    assert!(flat.changed.is_empty(), "{}", super::history::render(&flat));
    assert!(flat.unchanged >= 6, "{}", flat.unchanged);
    assert!(flat.newest_regressions().is_empty());

    // Read throughput 10 % lower from run 6 of 9 on: a regression (higher
    // is better) starting at r6, with r5 before it; io-uring unchanged.
    let mut levels = vec![1.0; 6];
    levels.extend([0.9; 3]);
    let stepped = history(&make("step", &levels), &defs, &cfg).unwrap();
    let text = super::history::render(&stepped);
    let tput: Vec<_> = stepped
        .changed
        .iter()
        .filter(|v| v.panel == "tput")
        .collect();
    assert_eq!(tput.len(), 2, "{text}");
    for v in &tput {
        assert_eq!(v.series, "read", "{text}");
        assert_eq!(v.runs.len(), 9);
        assert_eq!(v.runs[0].reps.len(), 3);
        let [s] = v.steps.as_slice() else {
            panic!("{text}")
        };
        assert_eq!((s.before_run.as_str(), s.after_run.as_str()), ("r5", "r6"));
        assert_eq!(s.flag, Flag::Regression);
        assert!((s.change_pct + 10.0).abs() < 3.0, "{text}");
        assert!(s.p <= cfg.max_p, "{text}");
    }
    assert!(text.contains("r5 → r6"), "{text}");
    // The step began before the newest run: the CI gate has nothing new.
    assert!(stepped.newest_regressions().is_empty(), "{text}");

    // The newest run alone 10 % lower: it starts a regression, the gate's case.
    let mut levels = vec![1.0; 8];
    levels.push(0.9);
    let newest = history(&make("newest", &levels), &defs, &cfg).unwrap();
    let text = super::history::render(&newest);
    let regs = newest.newest_regressions();
    assert!(regs.iter().all(|(_, s)| s.after_run == "r8"), "{text}");
    let worse: Vec<_> = regs
        .iter()
        .filter(|(_, s)| s.flag == Flag::Regression)
        .map(|(v, _)| (v.panel.as_str(), v.series.as_str()))
        .collect();
    assert_eq!(worse, [("tput", "read"); 2], "{text}");
    // The speedup panel has no better direction: any change there counts.
    assert_eq!(regs.len(), 4, "{text}");
    assert!(text.contains("newest run: REGRESSION, r8"), "{text}");
    assert_eq!(newest.outcome(), Outcome::Regression);
    // The same step in a run measured on a busy host: a noisy point
    // excuses nothing, the step is still a regression...
    let mut busy = newest.clone();
    let noisy = |rerun| NoisyPoints {
        noisy: 3,
        rerun,
        measured: 4,
        limit_pct: 10.0,
    };
    busy.runs[8].noisy = Some(noisy(0));
    let busy_text = super::history::render(&busy);
    assert_eq!(busy.outcome(), Outcome::Regression, "{busy_text}");
    assert!(
        busy_text.contains("newest run: REGRESSION, r8"),
        "{busy_text}"
    );
    assert!(
        busy_text.contains("a noisy point excuses no change unless it was run again"),
        "{busy_text}"
    );
    // ...unless every noisy point was run again and is still noisy:
    // inconclusive, with the reason.
    busy.runs[8].noisy = Some(noisy(3));
    let busy_text = super::history::render(&busy);
    assert_eq!(busy.outcome(), Outcome::Inconclusive, "{busy_text}");
    assert!(
        busy_text.contains("newest run: INCONCLUSIVE, r8 starts a new segment at 4 values, but 3 of 4 points measured on a busy host"),
        "{busy_text}"
    );
    assert!(!busy_text.contains("REGRESSION, r8"), "{busy_text}");
    // Noisy points not run again make even a flat newest run inconclusive.
    let mut flat_busy = flat.clone();
    flat_busy.runs[7].noisy = Some(noisy(1));
    assert_eq!(flat.outcome(), Outcome::Pass);
    assert_eq!(flat_busy.outcome(), Outcome::Inconclusive);
    // As JSON too.
    let json = serde_json::to_value(&newest).unwrap();
    assert_eq!(json["changed"][2]["panel"], "tput", "{json}");
    assert_eq!(json["changed"][2]["steps"][0]["after_run"], "r8", "{json}");
    assert_eq!(
        json["changed"][2]["runs"][8]["reps"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // A directory of runs stands for them, oldest first by start time,
    // whatever their names.
    let cache = t.path().join("cache");
    for (i, name) in ["zz", "aa", "mm"].iter().enumerate() {
        history_run(&cache, name, i as u64, 1.0, "lookups");
    }
    let dirs = run_dirs(std::slice::from_ref(&cache)).unwrap();
    let names: Vec<_> = dirs
        .iter()
        .map(|d| d.file_name().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["zz", "aa", "mm"]);

    // Another experiment's run is an error naming it.
    let other = history_run(t.path(), "other", 9, 1.0, "hook");
    let mut mixed = dirs.clone();
    mixed.push(other.clone());
    let err = history(&mixed, &defs, &cfg).unwrap_err().to_string();
    assert!(
        err.contains(&other.display().to_string()) && err.contains("hook"),
        "{err}"
    );
}

#[test]
fn a_repetition_too_large_to_keep_is_drawn_from_its_sketch_with_a_note() {
    // Two repetitions of one point, each past what a unit keeps exactly:
    // the panel's p99 comes from the sketches, within their stated
    // accuracy, the mean stays exact, and the figure says so.
    let t = tempfile::tempdir().unwrap();
    // Limits of 20 000 values a unit: a test-sized stand-in for 2^20.
    let limits = super::unit::Limits {
        per_unit: 20_000,
        per_panel: 1 << 24,
    };
    let n = 25_000;
    let mut s = Synth::new(&t.path().join("run"));
    let mut p99s = Vec::new();
    let mut means = Vec::new();
    for rep in 0..2u32 {
        // A sawtooth with a long tail: 2 % of samples 10× the rest (p99
        // inside the tail, not on its edge).
        let lat: Vec<f64> = (0..n)
            .map(|i| {
                let base = 1_000.0 + (i % 1000) as f64 + f64::from(rep);
                if i % 50 == 49 { base * 10.0 } else { base }
            })
            .collect();
        p99s.push(super::stats::stat(&lat, def::Stat::Percentile(99.0)).unwrap());
        means.push(super::stats::stat(&lat, def::Stat::Mean).unwrap());
        s.ok(
            0,
            rep,
            &[("depth", int(1))],
            &[chunk("lookup_latency", &[("engine", "read")], lat)],
            summary(&[("lookups_per_s", 1.0)]),
        );
    }
    let run = s.finish("lookups", &["t-big"]);
    let d = t.path().join("defs");
    std::fs::create_dir_all(&d).unwrap();
    let panel = |stat: &str| {
        format!(
            "[[panels]]\nname = \"{stat}\"\nx = {{ column = \"param_depth\", label = \"depth\" }}\n\
             y = {{ metric = \"lookup_latency\", kind = \"raw\", stat = \"{stat}\", label = \"l\" }}\n\
             series = {{ columns = [\"tag_engine\"] }}\n"
        )
    };
    std::fs::write(
        d.join("t-big.toml"),
        format!(
            "id = \"t-big\"\ntitle = \"t\"\nfamily = \"test\"\n{}{}",
            panel("p99"),
            panel("mean")
        ),
    )
    .unwrap();
    let mut data = super::data::load(&run).unwrap();
    data.limits = limits;
    let defs = def::load_all(&d).unwrap();
    let fig = super::figure(&data, &defs["t-big"]).unwrap();
    let value = |i: usize| {
        let (_, p) = &fig.panels[i];
        let pt = &p.series("read").unwrap().points[0];
        assert_eq!(pt.reps.len(), 2);
        (pt.est.value, p.notes.clone())
    };
    let (p99, notes) = value(0);
    let exact = (p99s[0] + p99s[1]) / 2.0;
    assert!(
        (p99 - exact).abs() <= 2.0 * super::unit::SKETCH_ALPHA * exact,
        "sketched p99 {p99}, exact {exact}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("2 repetition(s)") && n.contains("DDSketch")),
        "{notes:?}"
    );
    let (mean, notes) = value(1);
    let exact = (means[0] + means[1]) / 2.0;
    assert!((mean - exact).abs() <= 1e-9 * exact, "{mean} vs {exact}");
    assert!(notes.iter().any(|n| n.contains("exact")), "{notes:?}");
}
