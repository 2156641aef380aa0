//! One command line: `testbed flight ...` and `testbed asam ...` are the
//! helper binaries' commands (the same clap definitions, the same code),
//! run here without a VM.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn testbed() -> Command {
    Command::new(env!("CARGO_BIN_EXE_testbed"))
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

#[test]
fn help_lists_the_helpers_and_their_subcommands() {
    let top = stdout_of(&["--help"]);
    for cmd in ["flight", "asam"] {
        assert!(
            top.lines().any(|l| l.trim_start().starts_with(cmd)),
            "no {cmd} in:\n{top}"
        );
    }
    let flight = stdout_of(&["flight", "--help"]);
    assert!(flight.contains("Usage: testbed flight"), "{flight}");
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
    assert!(asam.contains("Usage: testbed asam"), "{asam}");
    for sub in ["prepare", "bench-preproc"] {
        assert!(
            asam.lines().any(|l| l.trim_start().starts_with(sub)),
            "no {sub} in:\n{asam}"
        );
    }
}

#[test]
fn flight_serve_help_has_the_options_of_the_library_definition() {
    use clap::Subcommand;
    let ours = options(&stdout_of(&["flight", "serve", "--help"]));
    for o in ["--addr", "--tls-dir", "--runtime-threads", "--help"] {
        assert!(ours.iter().any(|x| x == o), "no {o} in {ours:?}");
    }
    let mut lib = testbed_flight::FlightCommand::augment_subcommands(clap::Command::new(env!(
        "CARGO_PKG_NAME"
    )));
    let serve = lib
        .find_subcommand_mut("serve")
        .expect("serve subcommand")
        .render_help()
        .to_string();
    assert_eq!(ours, options(&serve));
}

/// `testbed-flight serve --help` when that binary sits beside `testbed`
/// and is newer than the sources of its options (`cargo test --workspace`
/// builds it; `cargo test -p testbed` does not).
#[test]
fn flight_serve_help_has_the_options_of_the_helper_binary() {
    let testbed = PathBuf::from(env!("CARGO_BIN_EXE_testbed"));
    let helper = testbed.with_file_name("testbed-flight");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-agent/flight/src");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built) = modified(&helper) else {
        eprintln!("skipped: {} not built", helper.display());
        return;
    };
    if ["cli.rs", "settings.rs", "main.rs"]
        .iter()
        .any(|f| modified(&src.join(f)).is_none_or(|t| t > built))
    {
        eprintln!("skipped: {} is older than its sources", helper.display());
        return;
    }
    let out = Command::new(&helper)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let theirs = options(&String::from_utf8(out.stdout).unwrap());
    let ours = options(&stdout_of(&["flight", "serve", "--help"]));
    assert!(ours.len() > 3, "{ours:?}");
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
#[ignore = "runs samtools sort and Picard MarkDuplicates as the gates' references (~6 s); ./x test runs it"]
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
