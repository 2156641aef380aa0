//! One command line: `testbed flight ...` and `testbed asam ...` run the
//! helper binaries (testbed-flight, testbed-asam) with the arguments as
//! given: their stdio, exit code and signals are the command's own. The
//! `testbed` crate links none of their code.
//!
//! Stand-in helpers (shell scripts named by `$TESTBED_FLIGHT_BIN` /
//! `$TESTBED_ASAM_BIN`) check the passing on; the tests that run the real
//! helpers are ignored in a plain `cargo test -p testbed`, which does not
//! build them: `./x test` builds them (its workspace test build) and runs
//! the ignored tests too.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn testbed() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_testbed"));
    // The lookup starts from $TESTBED_*_BIN: a caller's must not leak in.
    c.env_remove("TESTBED_FLIGHT_BIN")
        .env_remove("TESTBED_ASAM_BIN");
    c
}

fn run(args: &[&str]) -> Output {
    testbed()
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("testbed {args:?}: {e}"))
}

fn stdout_of(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "testbed {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The `--long` options a clap help text lists, in order: option lines are
/// indented less than their descriptions.
fn options(help: &str) -> Vec<String> {
    help.lines()
        .filter(|l| l.len() - l.trim_start().len() < 8)
        .filter_map(|l| {
            let l = l.trim_start();
            let l = match l.strip_prefix('-') {
                Some(r) if !r.starts_with('-') => r.split_once(", ")?.1,
                _ => l,
            };
            l.starts_with("--").then(|| {
                l.split([' ', '=', '<', '['])
                    .next()
                    .unwrap_or(l)
                    .to_string()
            })
        })
        .collect()
}

/// An executable shell script `name` in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A stand-in helper: prints its pid, then its arguments one a line, then
/// copies stdin to stdout, writes `marker` to stderr and exits with `code`.
fn stand_in(dir: &Path, marker: &str, code: u8) -> PathBuf {
    script(
        dir,
        marker,
        &format!("echo $$\nprintf '%s\\n' \"$@\"\ncat\necho {marker} >&2\nexit {code}\n"),
    )
}

#[test]
fn help_lists_the_helper_commands() {
    let top = stdout_of(&["--help"]);
    for cmd in ["flight", "asam"] {
        assert!(
            top.lines().any(|l| l.trim_start().starts_with(cmd)),
            "no {cmd} in:\n{top}"
        );
    }
}

#[test]
fn flight_and_asam_exec_their_helper_with_args_stdio_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let flight = stand_in(dir.path(), "stand-in-flight", 7);
    let asam = stand_in(dir.path(), "stand-in-asam", 0);
    for (cmd, marker, code) in [
        ("flight", "stand-in-flight", 7),
        ("asam", "stand-in-asam", 0),
    ] {
        // --help and options the testbed CLI does not know pass on too.
        let args = [cmd, "serve", "--help", "--addr", "a b", "-x", "--", "last"];
        let mut child = testbed()
            .args(args)
            .env("TESTBED_FLIGHT_BIN", &flight)
            .env("TESTBED_ASAM_BIN", &asam)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"from stdin\n").unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stdout.lines().collect();
        // The helper replaced testbed: the same process, so signals sent
        // to `testbed` reach it.
        assert_eq!(lines.first(), Some(&pid.to_string().as_str()), "{stdout}");
        assert_eq!(
            lines[1..],
            [&args[1..], &["from stdin"]].concat(),
            "{stderr}"
        );
        assert_eq!(stderr.trim(), marker, "{cmd}");
        assert_eq!(out.status.code(), Some(code), "{cmd}: {stderr}");
    }
}

/// `testbed` hard-linked (else copied) into `<dir>/<profile>/`, with
/// nothing beside it: where the lookup looks is then known.
fn lone_testbed(dir: &Path, profile: &str) -> PathBuf {
    let d = dir.join(profile);
    std::fs::create_dir_all(&d).unwrap();
    let exe = d.join("testbed");
    let built = env!("CARGO_BIN_EXE_testbed");
    if std::fs::hard_link(built, &exe).is_err() {
        std::fs::copy(built, &exe).unwrap();
    }
    exe
}

#[test]
fn a_missing_helper_names_the_binary_where_it_was_looked_for_and_its_build() {
    // In the target dir, so that a hard link to the binary works.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let exe = lone_testbed(dir.path(), "debug");
    let empty_path = dir.path().join("empty");
    std::fs::create_dir(&empty_path).unwrap();
    for (cmd, binary, env) in [
        ("flight", "testbed-flight", "TESTBED_FLIGHT_BIN"),
        ("asam", "testbed-asam", "TESTBED_ASAM_BIN"),
    ] {
        let out = Command::new(&exe)
            .args([cmd, "--help"])
            .env_remove("TESTBED_FLIGHT_BIN")
            .env_remove("TESTBED_ASAM_BIN")
            .env("PATH", &empty_path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(out.stdout.is_empty());
        for part in [
            format!("{binary} not found"),
            format!("${env} is not set"),
            format!("{}", exe.with_file_name(binary).display()),
            "not on PATH".to_string(),
            format!("`cargo build -p {binary}`"),
        ] {
            assert!(err.contains(&part), "no {part:?} in: {err}");
        }
    }
    // Beside a static release `testbed`: the build that puts it there.
    let exe = lone_testbed(&dir.path().join("x86_64-unknown-linux-gnu"), "release");
    let out = Command::new(&exe)
        .args(["flight", "serve"])
        .env_remove("TESTBED_FLIGHT_BIN")
        .env("PATH", &empty_path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("`./x build`"), "{err}");
    assert!(
        err.contains("--target x86_64-unknown-linux-gnu -p testbed-flight"),
        "{err}"
    );
}

#[test]
fn a_helper_variable_naming_no_file_is_an_error_not_a_fallback() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // Nothing beside this testbed; a helper on PATH that must not be run
    // instead.
    let exe = lone_testbed(dir.path(), "debug");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    stand_in(&bin, "testbed-asam", 0);
    let missing = dir.path().join("no-such-asam");
    let asam = || {
        let mut c = Command::new(&exe);
        c.args(["asam", "prepare"])
            .env_remove("TESTBED_ASAM_BIN")
            .env("PATH", &bin);
        c
    };
    let out = asam().env("TESTBED_ASAM_BIN", &missing).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty(), "the helper on PATH ran");
    assert!(
        err.contains(&format!(
            "testbed-asam: $TESTBED_ASAM_BIN names {}, which is not a file",
            missing.display()
        )),
        "{err}"
    );
    // Unset, the one on PATH runs.
    let out = asam().output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().nth(1), Some("prepare"), "{stdout}");
}

#[test]
#[ignore = "needs the real helper binaries; ./x test runs them"]
fn help_lists_the_helpers_subcommands() {
    let flight = stdout_of(&["flight", "--help"]);
    assert!(flight.contains("Usage: testbed-flight"), "{flight}");
    for sub in [
        "serve",
        "bench",
        "gen-cert",
        "py-serve",
        "py-bench",
        "query",
        "sql-serve",
    ] {
        assert!(
            flight.lines().any(|l| l.trim_start().starts_with(sub)),
            "no {sub} in:\n{flight}"
        );
    }
    let asam = stdout_of(&["asam", "--help"]);
    assert!(asam.contains("Usage: testbed-asam"), "{asam}");
    for sub in ["prepare", "bench-preproc"] {
        assert!(
            asam.lines().any(|l| l.trim_start().starts_with(sub)),
            "no {sub} in:\n{asam}"
        );
    }
}

/// `testbed flight serve --help` is the helper's own (the helper's help
/// against its library's clap definition: guest-agent/flight/tests/bulk.rs).
#[test]
#[ignore = "needs the real helper binaries; ./x test runs them"]
fn flight_serve_help_is_the_helper_binarys() {
    let helper = PathBuf::from(env!("CARGO_BIN_EXE_testbed")).with_file_name("testbed-flight");
    let out = Command::new(&helper)
        .args(["serve", "--help"])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", helper.display()));
    assert!(out.status.success());
    let theirs = options(&String::from_utf8(out.stdout).unwrap());
    let ours = options(&stdout_of(&["flight", "serve", "--help"]));
    for o in ["--addr", "--tls-dir", "--runtime-threads", "--help"] {
        assert!(ours.iter().any(|x| x == o), "no {o} in {ours:?}");
    }
    assert_eq!(ours, theirs);
}

/// A child killed (and reaped) on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs the real helper binaries; ./x test runs them"]
fn flight_serve_and_bench_run_and_serve_stops_on_sigint() {
    let mut server = Killed(
        testbed()
            .args(["flight", "serve", "--addr", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = server.0.stdout.take().unwrap();
    let mut stderr = server.0.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut line = String::new();
        let _ = r.read_line(&mut line);
        let _ = tx.send(line);
        let _ = std::io::copy(&mut r, &mut std::io::sink());
    });
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
    let first: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("serve's first line {line:?}: {e}"));
    let addr = first["listening"].as_str().expect("listening").to_string();
    assert_eq!(first["tls"], false);

    let out = testbed()
        .args(["flight", "bench", "--server", &addr, "--streams", "2"])
        .args(["--records-per-stream", "5000", "--batch", "1000"])
        .args(["--json", "--verify"])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", out.status);
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0]["type"], "stream");
    assert_eq!(lines[0]["latencies_ns"].as_array().unwrap().len(), 5);
    assert_eq!(lines[2]["type"], "summary");
    assert_eq!(lines[2]["records"], 10_000);
    assert!(lines[2]["mb_per_s"].as_f64().unwrap() > 0.0);

    // SIGINT stops the server cleanly, without the VM runner's interrupt
    // handler (which would report stopping QEMU).
    let pid = nix::unistd::Pid::from_raw(server.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = server.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "serve outlived SIGINT by 20 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = errors.join().unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(!err.contains("QEMU"), "{err}");
}

#[test]
#[ignore = "needs the real helper binaries; ./x test runs them"]
fn flight_bench_errors_reach_the_testbed_cli() {
    let out = run(&[
        "flight",
        "bench",
        "--server",
        "127.0.0.1:1",
        "--connect-timeout-secs",
        "2",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect to Flight server at 127.0.0.1:1"),
        "{err}"
    );
}

/// One SAM line of a 10 bp read (as guest-agent/asam/src/testdata.rs).
fn rec(name: &str, flags: u16, pos: u32, pnext: u32, q: char) -> String {
    let qual = q.to_string().repeat(10);
    format!("{name}\t{flags}\tchr1\t{pos}\t60\t10M\t=\t{pnext}\t0\tACGTACGTAC\t{qual}\tRG:Z:rg1")
}

fn pair(name: &str, p1: u32, p2: u32, q: char) -> [String; 2] {
    [rec(name, 99, p1, p2, q), rec(name, 147, p2, p1, q)]
}

#[test]
#[ignore = "needs the real helper binaries, and runs samtools sort and Picard MarkDuplicates as the gates' references (~6 s); ./x test runs it"]
fn asam_bench_preproc_sorts_and_marks_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let sam = dir.path().join("aligned.sam");
    let mut text = String::from(
        "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:10000\n@SQ\tSN:chr2\tLN:10000\n@RG\tID:rg1\tSM:s\tLB:lib1\n",
    );
    // 'I' = 40, '5' = 20: a_low is the duplicate of b_high.
    for l in pair("other", 101, 300, '5')
        .iter()
        .chain(&pair("b_high", 100, 300, 'I'))
        .chain(&pair("a_low", 100, 300, '5'))
    {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(&sam, text).unwrap();
    let store = dir.path().join("store");
    let out = stdout_of(&[
        "asam",
        "bench-preproc",
        "--sam",
        sam.to_str().unwrap(),
        "--tools",
        "arrowsam",
        "--out-dir",
        dir.path().join("work").to_str().unwrap(),
        "--store-dir",
        store.to_str().unwrap(),
        "--threads",
        "1",
        "--json",
    ]);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stages: Vec<&str> = lines.iter().filter_map(|l| l["stage"].as_str()).collect();
    // Equal accounting: ArrowSAM's BAM write is a stage of its own.
    assert_eq!(stages, ["load", "sort", "markdup", "write"], "{out}");
    for l in &lines[..4] {
        assert_eq!(l["tool"], "arrowsam");
        assert_eq!(l["records"], 6);
    }
    assert_eq!(lines[2]["duplicates"], 2, "{out}");
    assert_eq!(lines[4]["summary"], true, "{out}");
    // The store is a private directory made under --store-dir for the run.
    let left: Vec<_> = std::fs::read_dir(&store)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "the store is removed after the run: {left:?}"
    );

    let out = run(&[
        "asam",
        "bench-preproc",
        "--sam",
        sam.to_str().unwrap(),
        "--tools",
        "nosuch",
        "--workdir",
        dir.path().join("work").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown tool \"nosuch\""), "{err}");
}
