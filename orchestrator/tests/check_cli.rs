//! `testbed check RUN --baseline BASE` as a CI job calls it, into each of
//! its four exit codes, on run directories written with the run's own
//! writers (per-point samples merged into samples.parquet, a manifest), no
//! VM: 0 pass, 1 regression (a claim that held is lost, on a busy host
//! too), 2 inconclusive (a claim now undecided; noisy points not run
//! again; a loss on points still noisy after `--rerun-noisy`), 3 error.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::synthetic::{depth_point, finish_run, latency_point};

/// One panel, one claim: the mean latency stays at or below 2 µs.
const FIGURE: &str = r#"
id = "c-latency"
title = "latency"
family = "test"
experiments = ["gate"]
[[panels]]
name = "latency"
x = { column = "param_depth", label = "depth" }
y = { metric = "read_latency", kind = "raw", stat = "mean", label = "latency", unit = "ns", better = "lower" }
[[claims]]
id = "fast"
text = "latency stays at or below 2000 ns"
panel = "latency"
kind = "max_le"
value = 2000
"#;

const REPS: u32 = 10;

fn noise(noisy: bool) -> serde_json::Value {
    serde_json::json!({
        "others_pct": if noisy { 45.0 } else { 1.0 }, "steal_pct": 0.0, "own_pct": 50.0,
        "interval_s": 1.0, "noisy_above_pct": 10.0, "noisy": noisy,
    })
}

/// How the host was while a run's points ran.
#[derive(Clone, Copy)]
enum Host {
    Quiet,
    /// The first point noisy, never run again.
    NoisyNotRerun,
    /// The first point noisy after being run again as often as
    /// `--rerun-noisy` allows (so a rerun boots nothing).
    NoisyAfterReruns,
}

/// A run of depth 1 and 2, `REPS` repetitions; the mean latency of
/// repetition `rep` is `latency(rep)` × (1 + depth/100).
fn write_run(dir: &Path, latency: impl Fn(u32) -> f64, host: Host) -> PathBuf {
    let run_id = dir.file_name().unwrap().to_string_lossy().to_string();
    std::fs::create_dir_all(dir.join("points")).unwrap();
    let mut files = Vec::new();
    let mut records = Vec::new();
    for depth in 1..=2i64 {
        for rep in 0..REPS {
            let p = depth_point(depth, rep);
            let v = latency(rep) * (1.0 + depth as f64 / 100.0);
            files.push(latency_point(dir, &run_id, &p, v));
            let first = depth == 1 && rep == 0;
            let (noisy, earlier) = match host {
                Host::NoisyNotRerun if first => (true, 0),
                Host::NoisyAfterReruns if first => {
                    (true, testbed::execution::run::MAX_NOISY_RERUNS)
                }
                _ => (false, 0),
            };
            let earlier: Vec<serde_json::Value> = (0..earlier)
                .map(|b| serde_json::json!({"boot": b, "samples": 4, "summary": {}, "noise": noise(true)}))
                .collect();
            records.push(serde_json::json!({
                "id": p.id(), "point": p.point, "rep": rep,
                "params": {"depth": depth}, "seed": 7, "ok": true, "boot": earlier.len(),
                "noise": noise(noisy), "earlier": earlier,
            }));
        }
    }
    let read = finish_run(dir, "gate", &run_id, &files, records, 1_767_225_600);
    let noisy = read.noisy();
    match host {
        Host::Quiet => assert_eq!(noisy.noisy, 0),
        Host::NoisyNotRerun => assert_eq!((noisy.noisy, noisy.rerun), (1, 0)),
        Host::NoisyAfterReruns => assert_eq!((noisy.noisy, noisy.rerun), (1, 1)),
    }
    dir.to_path_buf()
}

/// About 1000 ns, 0.5 % apart repetition to repetition.
fn fast(rep: u32) -> f64 {
    1000.0 * (1.0 + 0.005 * f64::from(rep))
}

/// Three times slower: far above the claim's 2000 ns.
fn slow(rep: u32) -> f64 {
    3.0 * fast(rep)
}

/// Half the repetitions far below 2000 ns, half far above: no interval
/// of the largest value can sit on one side of the bound.
fn split(rep: u32) -> f64 {
    if rep.is_multiple_of(2) { 500.0 } else { 4000.0 }
}

struct Checked {
    code: Option<i32>,
    out: String,
}

fn check(figures: &Path, args: &[&Path], extra: &[&str]) -> Checked {
    let o: Output = Command::new(env!("CARGO_BIN_EXE_testbed"))
        .arg("check")
        .args(args)
        .arg("--figures")
        .arg(figures)
        .args(extra)
        .output()
        .unwrap();
    Checked {
        code: o.status.code(),
        out: format!(
            "{}\n--- stderr\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    }
}

#[test]
fn check_baseline_exits_0_pass_1_regression_2_inconclusive_3_error() {
    let t = tempfile::tempdir().unwrap();
    let figures = t.path().join("figures");
    std::fs::create_dir_all(&figures).unwrap();
    std::fs::write(figures.join("c-latency.toml"), FIGURE).unwrap();
    let run = |name: &str, latency: fn(u32) -> f64, host: Host| {
        write_run(&t.path().join(name), latency, host)
    };
    let base = run("base", fast, Host::Quiet);
    let gate = |r: &Path, extra: &[&str]| -> Checked {
        let mut c = Command::new(env!("CARGO_BIN_EXE_testbed"));
        c.arg("check")
            .arg(r)
            .arg("--baseline")
            .arg(&base)
            .arg("--figures")
            .arg(&figures)
            .args(extra);
        let o = c.output().unwrap();
        Checked {
            code: o.status.code(),
            out: format!(
                "{}\n--- stderr\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        }
    };
    let last = |c: &Checked| -> String {
        c.out
            .lines()
            .find(|l| l.starts_with("baseline gate: "))
            .unwrap_or_default()
            .to_string()
    };

    // The claim holds in the baseline, on its own data.
    let own = gate(&base, &[]);
    assert_eq!(own.code, Some(0), "{}", own.out);
    assert!(
        last(&own).ends_with("1 held and still hold, 0 no longer hold, 0 lost on a busy host, 0 not decided here: pass (exit 0)"),
        "{}",
        own.out
    );

    // 0: another quiet run where it still holds.
    let same = gate(&run("same", fast, Host::Quiet), &[]);
    assert_eq!(same.code, Some(0), "{}", same.out);
    assert!(last(&same).ends_with("pass (exit 0)"), "{}", same.out);

    // 1: three times slower, the claim lost.
    let slower = run("slower", slow, Host::Quiet);
    let lost = gate(&slower, &[]);
    assert_eq!(lost.code, Some(1), "{}", lost.out);
    assert!(
        lost.out.contains(
            "c-latency/fast (latency stays at or below 2000 ns): held, now does not hold"
        ),
        "{}",
        lost.out
    );
    assert!(
        last(&lost).ends_with("0 held and still hold, 1 no longer hold, 0 lost on a busy host, 0 not decided here: REGRESSION (exit 1)"),
        "{}",
        lost.out
    );
    // Without a baseline the same verdict is a finding, not a gate.
    let plain = check(&figures, &[&slower], &[]);
    assert_eq!(plain.code, Some(0), "{}", plain.out);

    // 1: lost on a busy host whose noisy point was not run again: a noisy
    // point excuses nothing.
    let busy = gate(&run("slower-busy", slow, Host::NoisyNotRerun), &[]);
    assert_eq!(busy.code, Some(1), "{}", busy.out);
    assert!(
        busy.out.contains("a noisy point excuses no lost claim"),
        "{}",
        busy.out
    );

    // Lost on a point still noisy after its reruns: without --rerun-noisy
    // still a regression; with it inconclusive, the reason printed (and
    // no point may run again, so nothing boots).
    let still = run("slower-still-noisy", slow, Host::NoisyAfterReruns);
    let without = gate(&still, &[]);
    assert_eq!(without.code, Some(1), "{}", without.out);
    let with = gate(&still, &["--rerun-noisy"]);
    assert_eq!(with.code, Some(2), "{}", with.out);
    assert!(with.out.contains("none may run again"), "{}", with.out);
    assert!(
        with.out.contains(
            "lost on a busy host (INCONCLUSIVE: 1 of 20 points measured on a busy host (other processes above 10 % of its CPU), each run again and still noisy"
        ),
        "{}",
        with.out
    );
    assert!(
        last(&with).ends_with(
            "0 no longer hold, 1 lost on a busy host, 0 not decided here: INCONCLUSIVE (exit 2)"
        ),
        "{}",
        with.out
    );

    // 2: the claim now undecided.
    let undecided = gate(&run("split", split, Host::Quiet), &[]);
    assert_eq!(undecided.code, Some(2), "{}", undecided.out);
    assert!(
        undecided.out.contains("held, now undecided at this noise"),
        "{}",
        undecided.out
    );
    assert!(
        last(&undecided).ends_with("1 not decided here: INCONCLUSIVE (exit 2)"),
        "{}",
        undecided.out
    );

    // 2: the claim kept, but a noisy point was not run again.
    let kept_busy = run("same-busy", fast, Host::NoisyNotRerun);
    let noisy = gate(&kept_busy, &[]);
    assert_eq!(noisy.code, Some(2), "{}", noisy.out);
    assert!(
        noisy
            .out
            .contains("noisy points not run again (INCONCLUSIVE)")
            && noisy.out.contains("run them again with --rerun-noisy"),
        "{}",
        noisy.out
    );

    // 3: errors of the check itself.
    let missing = gate(&t.path().join("no-such-run"), &[]);
    assert_eq!(missing.code, Some(3), "{}", missing.out);
    assert!(missing.out.contains("error: "), "{}", missing.out);
    let no_base = check(
        &figures,
        &[
            &slower,
            Path::new("--baseline"),
            &t.path().join("no-such-base"),
        ],
        &[],
    );
    assert_eq!(no_base.code, Some(3), "{}", no_base.out);
    assert!(no_base.out.contains("the baseline"), "{}", no_base.out);
    // claims.json cannot be written.
    let blocked = run("blocked", fast, Host::Quiet);
    std::fs::create_dir_all(blocked.join("claims.json").join("x")).unwrap();
    let unwritable = gate(&blocked, &[]);
    assert_eq!(unwritable.code, Some(3), "{}", unwritable.out);
    // The rerun --rerun-noisy asks for cannot start (the run's spec is
    // gone): an error, not a verdict.
    let rerun_fails = gate(&kept_busy, &["--rerun-noisy"]);
    assert_eq!(rerun_fails.code, Some(3), "{}", rerun_fails.out);
    assert!(
        rerun_fails.out.contains("--rerun-noisy"),
        "{}",
        rerun_fails.out
    );
    // A usage error is not clap's 2 (inconclusive) but 3.
    let usage = check(&figures, &[], &["--no-such-flag"]);
    assert_eq!(usage.code, Some(3), "{}", usage.out);

    // The help names the four codes.
    let help = Command::new(env!("CARGO_BIN_EXE_testbed"))
        .args(["check", "--help"])
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
    let help = String::from_utf8_lossy(&help.stdout);
    for code in ["0  pass", "1  REGRESSION", "2  INCONCLUSIVE", "3  error"] {
        assert!(help.contains(code), "{help}");
    }
}
