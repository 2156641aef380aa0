//! docs/ci/testbed-ci.sh passes on the gates' exit codes: 0 pass, 1
//! regression, 2 inconclusive, 3 infrastructure error. The script runs
//! here with a stand-in `testbed` (a shell script at the path the script
//! looks for the real one) whose `history --fail-on-change` and `check
//! --baseline` exit as each case says, so no kernel is built and no VM
//! boots; `user_ci.rs` runs the script with the real testbed.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// The stand-in: every command the script calls, answered from the
/// FAKE_* variables.
const FAKE: &str = r#"#!/usr/bin/env bash
set -u
cmd=$1
shift
case "$cmd" in
  kernel) printf 'ci-kernel 6.1 local tree\n  key k123\n' ;;
  validate | plot) ;;
  run)
    out=""
    while [ $# -gt 0 ]; do
      [ "$1" = --out ] && out=$2
      shift
    done
    [ "${FAKE_RUN_RC:-0}" = 0 ] || exit "$FAKE_RUN_RC"
    mkdir -p "$out"
    echo '{}' >"$out/manifest.json"
    ;;
  show) echo "host noise: median 1.0 % of CPU; ${FAKE_NOISY:-0} of 4 points noisy (above 10 %)" ;;
  history)
    case " $* " in
      *" --json "*) echo '{}' ;;
      *)
        echo "newest run: fake history"
        exit "${FAKE_HISTORY_RC:-0}"
        ;;
    esac
    ;;
  check)
    echo "baseline gate: fake"
    exit "${FAKE_CHECK_RC:-0}"
    ;;
  *) exit 99 ;;
esac
"#;

struct Job {
    code: Option<i32>,
    log: String,
    /// Runs in the history after the job.
    kept: usize,
}

/// The script with a history of one kept run and the stand-in answering
/// as `fake` says.
fn job(t: &Path, name: &str, fake: &[(&str, &str)]) -> Job {
    let target = t.join("target");
    let triple = std::fs::read_to_string(repo().join("orchestrator/guest-build.txt"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("target").map(|v| v.trim().to_string()))
        .unwrap();
    let bin = target.join(&triple).join("release/testbed");
    if !bin.exists() {
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        std::fs::write(&bin, FAKE).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let kernel = t.join("ci-kernel.toml");
    std::fs::write(&kernel, "kind = \"local-tree\"\n").unwrap();
    // One kept run, so the gates run.
    let history = t.join(name).join("history");
    std::fs::create_dir_all(history.join("run-20260101T000000Z")).unwrap();
    std::fs::write(history.join("run-20260101T000000Z/manifest.json"), "{}").unwrap();
    let out = Command::new("bash")
        .arg(repo().join("docs/ci/testbed-ci.sh"))
        .env("CARGO_TARGET_DIR", &target)
        .env("TESTBED_CI_INSTALL", "none")
        .env("TESTBED_CI_BUILD", "0")
        .env("TESTBED_CI_KERNEL", &kernel)
        .env("TESTBED_CACHE", t.join("cache"))
        .env("TESTBED_CI_HISTORY", &history)
        .env("TESTBED_CI_OUT", t.join(name).join("out"))
        .env("TESTBED_CI_UPDATE_HISTORY", "1")
        .env_remove("TESTBED_CI_SPEC")
        .env_remove("TESTBED_CI_TREE")
        .envs(fake.iter().copied())
        .output()
        .unwrap();
    let kept = std::fs::read_dir(&history).unwrap().count();
    Job {
        code: out.status.code(),
        log: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        kept,
    }
}

#[test]
fn the_ci_job_exits_with_the_gates_codes() {
    let t = tempfile::tempdir().unwrap();
    // (history, check) → the job.
    let cases: [(&str, &str, i32, &str); 9] = [
        ("0", "0", 0, "no regression; this run joins the history"),
        ("1", "0", 1, "REGRESSION (exit 1): the job fails"),
        ("0", "1", 1, "REGRESSION (exit 1): the job fails"),
        ("2", "1", 1, "REGRESSION (exit 1): the job fails"),
        ("2", "0", 2, "INCONCLUSIVE (exit 2)"),
        ("0", "2", 2, "INCONCLUSIVE (exit 2)"),
        (
            "3",
            "0",
            3,
            "infrastructure error (exit 3): testbed history failed (exit 3)",
        ),
        (
            "0",
            "3",
            3,
            "infrastructure error (exit 3): testbed check failed (exit 3)",
        ),
        (
            "1",
            "3",
            3,
            "infrastructure error (exit 3): testbed check failed (exit 3)",
        ),
    ];
    for (i, (history, check, code, says)) in cases.into_iter().enumerate() {
        let j = job(
            t.path(),
            &format!("case{i}"),
            &[("FAKE_HISTORY_RC", history), ("FAKE_CHECK_RC", check)],
        );
        assert_eq!(
            j.code,
            Some(code),
            "history {history}, check {check}:\n{}",
            j.log
        );
        assert!(
            j.log.contains(says),
            "history {history}, check {check}:\n{}",
            j.log
        );
        // Only a pass joins the history.
        assert_eq!(j.kept, if code == 0 { 2 } else { 1 }, "{}", j.log);
    }

    // The run itself failed (a point failed: testbed run exits 3; or any
    // other error): an infrastructure error.
    for rc in ["1", "3"] {
        let j = job(t.path(), &format!("run{rc}"), &[("FAKE_RUN_RC", rc)]);
        assert_eq!(j.code, Some(3), "{}", j.log);
        assert!(
            j.log
                .contains(&format!("the run failed (testbed run exit {rc})")),
            "{}",
            j.log
        );
    }

    // A pass on a busy host (each noisy point run again): not stored.
    let j = job(t.path(), "busy", &[("FAKE_NOISY", "2")]);
    assert_eq!(j.code, Some(0), "{}", j.log);
    assert!(
        j.log
            .contains("this run was measured on a busy host (2 of 4 points noisy"),
        "{}",
        j.log
    );
    assert_eq!(j.kept, 1, "{}", j.log);
}
