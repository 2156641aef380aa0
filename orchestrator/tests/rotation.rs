//! `.config/rotation.py select`, which picks the long tests `./x test`
//! runs: the budget is a cap, and a test's time is the one this machine
//! last measured. Runs the script on small costs and state files.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.config/rotation.py")
}

/// A costs file of long tests (binary `b`, name, seconds) and a state file.
fn files(dir: &Path, costs: &[(&str, f64)], state: &str) -> (PathBuf, PathBuf) {
    let tsv = dir.join("costs.tsv");
    let mut text = String::from("# binary\ttest\tseconds\tsource file\n");
    for (name, secs) in costs {
        text.push_str(&format!("b\t{name}\t{secs}\ttests/b.rs\n"));
    }
    fs::write(&tsv, text).expect("write costs");
    let json = dir.join("state.json");
    fs::write(&json, state).expect("write state");
    (tsv, json)
}

/// The filterset `select` prints (the tests left out) and its log.
fn select(tsv: &Path, state: &Path, budget: &str) -> (String, String) {
    select_with(tsv, state, budget, &[])
}

fn select_with(tsv: &Path, state: &Path, budget: &str, more: &[&str]) -> (String, String) {
    let out = Command::new("python3")
        .arg(script())
        .args(["select", "--budget", budget, "--costs"])
        .arg(tsv)
        .arg("--state")
        .arg(state)
        .args(more)
        .output()
        .expect("spawn python3");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "rotation.py select failed:\n{log}");
    (String::from_utf8_lossy(&out.stdout).trim().to_string(), log)
}

#[test]
fn a_test_longer_than_the_budget_waits_even_when_it_failed_last() {
    let dir = tempfile::tempdir().expect("tempdir");
    // `slow` failed last time here, so it comes first in the order.
    let state = r#"{"b slow": {"ran": "2026-12-01T00:00:00Z", "commit": "", "passed": false, "seconds": 300}}"#;
    let (tsv, json) = files(dir.path(), &[("slow", 300.0), ("fits", 100.0)], state);
    let (left_out, log) = select(&tsv, &json, "180");
    assert_eq!(left_out, "not ((binary_id(b) & test(=slow)))", "{log}");
    assert!(
        log.contains("FAILED; longer than the whole budget"),
        "the log says why it waits:\n{log}"
    );
    // A budget that holds it takes it first.
    let (left_out, log) = select(&tsv, &json, "320");
    assert_eq!(left_out, "not ((binary_id(b) & test(=fits)))", "{log}");
    assert_eq!(select(&tsv, &json, "all").0, "");
}

#[test]
fn this_machines_last_time_outweighs_the_kept_cost() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Kept at 100 s, but it took 400 s the last time it ran here.
    let state = r#"{"b grew": {"ran": "2026-12-01T00:00:00Z", "commit": "", "passed": true, "seconds": 400}}"#;
    let (tsv, json) = files(dir.path(), &[("grew", 100.0), ("other", 90.0)], state);
    let (left_out, log) = select(&tsv, &json, "180");
    assert_eq!(left_out, "not ((binary_id(b) & test(=grew)))", "{log}");
    assert!(log.contains("  400 s  b grew"), "planned at 400 s:\n{log}");
    // Without that record the kept 100 s fits beside the other test.
    let (tsv, json) = files(dir.path(), &[("grew", 100.0), ("other", 60.0)], "{}");
    assert_eq!(select(&tsv, &json, "180").0, "");
}

#[test]
fn a_deadline_leaves_the_long_tests_what_the_short_ones_do_not_need() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Two long tests (200 s, 100 s) and short ones adding up to 500 s.
    let (tsv, json) = files(
        dir.path(),
        &[("long", 200.0), ("longer", 100.0), ("short", 50.0)],
        "{}",
    );
    let mut text = fs::read_to_string(&tsv).expect("read costs");
    for n in 0..9 {
        text.push_str(&format!("b\tshort{n}\t50\ttests/b.rs\n"));
    }
    fs::write(&tsv, text).expect("write costs");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    // 500 s of short tests and 300 s after them leave 150 s of 950 s:
    // the 100-s test fits, the 200-s one waits, whatever the budget.
    let deadline = (now + 950).to_string();
    for budget in ["480", "all"] {
        let (left_out, log) = select_with(&tsv, &json, budget, &["--deadline", deadline.as_str()]);
        assert_eq!(left_out, "not ((binary_id(b) & test(=long)))", "{log}");
        assert!(log.contains("budget is cut to"), "the log says why:\n{log}");
    }
    // A deadline far off leaves the budget as it was.
    let far = (now + 100_000).to_string();
    let (left_out, log) = select_with(&tsv, &json, "480", &["--deadline", far.as_str()]);
    assert_eq!(left_out, "", "{log}");
    assert!(!log.contains("budget is cut"), "{log}");
    // A deadline already past runs no long test (in the order the
    // rotation's tie-break gives them: it turns with the commit count).
    let (left_out, log) = select_with(
        &tsv,
        &json,
        "480",
        &["--deadline", now.to_string().as_str()],
    );
    assert!(
        left_out.contains("test(=long))") && left_out.contains("test(=longer))"),
        "{left_out}\n{log}"
    );
    assert!(log.contains("budget is cut to 0 s"), "{log}");
}
