//! `testbed history` as a CI job calls it, on run directories written with
//! the run's own writers (per-point samples merged into samples.parquet, a
//! manifest), no VM: a flat history passes `--fail-on-change`, a newest run
//! 10 % slower fails it with exit 1 and is named in the JSON, a newest run
//! with a noisy point that was not run again is inconclusive (exit 2), an
//! error exits 3, and a directory of runs stands for them in start-time
//! order.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::synthetic::{depth_point, finish_run, latency_point};

const FIGURE: &str = r#"
id = "h-latency"
title = "latency"
family = "test"
experiments = ["hist"]
[[panels]]
name = "latency"
x = { column = "param_depth", label = "depth" }
y = { metric = "read_latency", kind = "raw", stat = "mean", label = "latency", unit = "ns", better = "lower" }
"#;

/// Run `i` of a history: depth 1 and 2, 3 repetitions, mean latency
/// `level` × depth × a run-to-run wobble of up to ±2 % (fixed per run).
fn write_run(dir: &Path, i: u32, level: f64) -> PathBuf {
    let run_id = format!("20260101T{:06}-h{i}", i);
    std::fs::create_dir_all(dir.join("points")).unwrap();
    let wobble = 1.0 + 0.02 * ((f64::from(i) * 2.3).sin());
    let mut files = Vec::new();
    let mut records = Vec::new();
    for depth in 1..=2i64 {
        for rep in 0..3u32 {
            let p = depth_point(depth, rep);
            let v = level * depth as f64 * wobble * (1.0 + 0.002 * f64::from(rep));
            files.push(latency_point(dir, &run_id, &p, v));
            records.push(serde_json::json!({
                "id": p.id(), "point": p.point, "rep": rep,
                "params": {"depth": depth}, "seed": 7, "ok": true, "boot": 0,
            }));
        }
    }
    finish_run(
        dir,
        "hist",
        &run_id,
        &files,
        records,
        1_767_225_600 + 60 * u64::from(i),
    );
    dir.to_path_buf()
}

/// Gives every point of a run a noise record, the first one noisy and
/// measured again `reruns` times (each time noisy).
fn make_noisy(run: &Path, reruns: usize) {
    let noise = serde_json::json!({
        "others_pct": 45.0, "steal_pct": 0.0, "own_pct": 50.0,
        "interval_s": 1.0, "noisy_above_pct": 10.0, "noisy": true,
    });
    let path = run.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut quiet = noise.clone();
    quiet["others_pct"] = 1.0.into();
    quiet["noisy"] = false.into();
    for p in m["points"].as_array_mut().unwrap() {
        p["noise"] = quiet.clone();
    }
    let p = &mut m["points"][0];
    p["noise"] = noise.clone();
    p["earlier"] = (0..reruns)
        .map(|b| serde_json::json!({"boot": b, "samples": 4, "summary": {}, "noise": noise}))
        .collect();
    std::fs::write(&path, m.to_string()).unwrap();
}

fn history(args: &[&Path], extra: &[&str], figures: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_testbed"))
        .arg("history")
        .args(args)
        .arg("--figures")
        .arg(figures)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn history_fails_on_a_regression_the_newest_run_starts_and_passes_a_flat_one() {
    let t = tempfile::tempdir().unwrap();
    let figures = t.path().join("figures");
    std::fs::create_dir_all(&figures).unwrap();
    std::fs::write(figures.join("h-latency.toml"), FIGURE).unwrap();

    // Eight flat runs in a cache directory, named against their time order.
    let cache = t.path().join("cache");
    for i in 0..8u32 {
        write_run(&cache.join(format!("run-{}", 8 - i)), i, 1000.0);
    }
    let flat = history(&[&cache], &["--fail-on-change"], &figures);
    let text = String::from_utf8_lossy(&flat.stdout);
    assert_eq!(
        flat.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&flat.stderr)
    );
    assert!(
        text.starts_with("8 runs of hist, oldest first: run-8 … run-1"),
        "{text}"
    );
    assert!(
        text.contains("0 values with a change point, 2 without"),
        "{text}"
    );

    // The newest run 10 % slower: it starts a regression at both depths.
    let slow = write_run(&t.path().join("new"), 8, 1100.0);
    let out = history(&[&cache, &slow], &["--fail-on-change"], &figures);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("run-1 → new: "), "{text}");
    assert!(text.contains("newest run: REGRESSION, new"), "{text}");
    assert!(
        text.ends_with("history gate: REGRESSION (exit 1)\n"),
        "{text}"
    );
    // Without --fail-on-change the same finding exits 0.
    assert_eq!(
        history(&[&cache, &slow], &[], &figures).status.code(),
        Some(0)
    );

    let out = history(&[&cache, &slow], &["--json"], &figures);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let changed = json["changed"].as_array().unwrap();
    assert_eq!(changed.len(), 2, "{json}");
    for v in changed {
        let step = &v["steps"][0];
        assert_eq!(step["after_run"], "new", "{v}");
        assert_eq!(step["before_run"], "run-1", "{v}");
        assert_eq!(step["flag"], "regression", "{v}");
        let pct = step["change_pct"].as_f64().unwrap();
        assert!((pct - 10.0).abs() < 3.0, "{v}");
        assert_eq!(v["runs"].as_array().unwrap().len(), 9);
    }

    // The slower run with a noisy point not run again: still a regression;
    // once that point was run again and still is noisy: inconclusive.
    let slow_busy = write_run(&t.path().join("new-busy"), 8, 1100.0);
    make_noisy(&slow_busy, 0);
    let out = history(&[&cache, &slow_busy], &["--fail-on-change"], &figures);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("a noisy point excuses no change"), "{text}");
    make_noisy(&slow_busy, 2);
    let out = history(&[&cache, &slow_busy], &["--fail-on-change"], &figures);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("newest run: INCONCLUSIVE, new-busy starts a new segment at 2 values, but 1 of 6 points measured on a busy host"),
        "{text}"
    );
    assert!(
        text.ends_with("history gate: INCONCLUSIVE (exit 2)\n"),
        "{text}"
    );

    // A flat newest run with a noisy point not run again: inconclusive.
    let flat_busy = write_run(&t.path().join("flat-busy"), 8, 1000.0);
    make_noisy(&flat_busy, 0);
    let out = history(&[&cache, &flat_busy], &["--fail-on-change"], &figures);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("newest run: no regression starts there"),
        "{text}"
    );
    // Without --fail-on-change, no gate: exit 0.
    let out = history(&[&cache, &flat_busy], &[], &figures);
    assert_eq!(out.status.code(), Some(0));

    // A run of another experiment: an error naming it, exit 3.
    let other = write_run(&t.path().join("other"), 9, 1000.0);
    let m = other.join("manifest.json");
    let text = std::fs::read_to_string(&m).unwrap();
    std::fs::write(&m, text.replace("\"hist\"", "\"elsewhere\"")).unwrap();
    let out = history(&[&cache, &other], &[], &figures);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&other.display().to_string()) && err.contains("elsewhere"),
        "{err}"
    );
}
