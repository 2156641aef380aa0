//! A failure is paid for once: a kernel that fails to build is not built
//! again for the next spec that needs it, and a retry resumes the tree an
//! interrupted build left instead of unpacking the source again. Both use
//! the real pinned source (ignored: they unpack ~1.4 GB, ~1 min each).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, to).unwrap();
}

/// A testbed root with vm-base's fragment, a kernel `vm-broken` (vm-base
/// plus a patch whose context is from another kernel version) and the
/// figure definitions.
fn root_with_broken_kernel() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let real = repo();
    copy(
        &real.join("kernel-configs/fragments/vm-base.config"),
        &r.join("kernel-configs/fragments/vm-base.config"),
    );
    let base = std::fs::read_to_string(real.join("kernel-configs/vm-base.toml")).unwrap();
    std::fs::write(
        r.join("kernel-configs/vm-broken.toml"),
        format!("{base}\n[patches]\nseries = \"stale\"\n"),
    )
    .unwrap();
    let series = r.join("kernel-configs/patches/stale");
    std::fs::create_dir_all(&series).unwrap();
    std::fs::write(series.join("series"), "0001-stale.patch\n").unwrap();
    std::fs::write(
        series.join("0001-stale.patch"),
        "--- a/Makefile\n+++ b/Makefile\n@@ -2,5 +2,5 @@\n VERSION = 6\n PATCHLEVEL = 1\n-SUBLEVEL = 150\n+SUBLEVEL = 151\n EXTRAVERSION =\n NAME = Curry Ramen\n",
    )
    .unwrap();
    for entry in std::fs::read_dir(real.join("experiments/figures")).unwrap() {
        let p = entry.unwrap().path();
        copy(
            &p,
            &r.join("experiments/figures").join(p.file_name().unwrap()),
        );
    }
    t
}

/// The agent for host-executor runs: the static release build (./x build)
/// or the debug one cargo test built.
fn agent() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"));
    [
        target.join("x86_64-unknown-linux-gnu/release/testbed-agent"),
        target.join("debug/testbed-agent"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("testbed-agent is built (./x build or cargo build -p testbed-agent)")
}

const SPEC_TAIL: &str = "\
[[devices]]\nname = \"data\"\nkind = \"nvme\"\nsize = \"16M\"\nlogical_block_size = 512\n\n\
[workload]\nkind = \"randread\"\ndevice = \"data\"\nblock_size = 512\nreads_per_thread = 200\nwarmup_reads = 10\n";

#[test]
#[ignore = "unpacks the real kernel source (~1 min)"]
fn reproduce_skips_every_spec_of_a_failed_kernel_after_one_attempt() {
    let root = root_with_broken_kernel();
    let cache = tempfile::tempdir().unwrap();
    let exp = root.path().join("experiments");
    // Two specs need the broken kernel; one runs on the host and needs none.
    for name in ["broken-a", "broken-b"] {
        std::fs::write(
            exp.join(format!("{name}-quick.toml")),
            format!(
                "[experiment]\nname = \"smoke\"\nseed = 1\n\n[kernel]\nname = \"vm-broken\"\n\n{SPEC_TAIL}"
            ),
        )
        .unwrap();
    }
    std::fs::write(
        exp.join("host-quick.toml"),
        format!("[experiment]\nname = \"smoke\"\nexecutor = \"host\"\nseed = 1\n\n{SPEC_TAIL}"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_testbed"))
        .args(["reproduce", "smoke-latency", "--quick"])
        .env("TESTBED_ROOT", root.path())
        .env("TESTBED_CACHE", cache.path())
        .env("TESTBED_AGENT_BIN", agent())
        .env_remove("TESTBED_PHASES")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("{stdout}\n{stderr}");
    eprintln!("{all}");
    assert_eq!(out.status.code(), Some(3), "some specs fail");
    // Built once: one unpack, one patch attempt.
    assert_eq!(stderr.matches("unpacking").count(), 1, "{all}");
    assert_eq!(stderr.matches("applying").count(), 1, "{all}");
    let line = |spec: &str| {
        stdout
            .lines()
            .find(|l| l.contains(spec))
            .unwrap_or_else(|| panic!("no line for {spec}: {all}"))
            .to_string()
    };
    // The first names the patch; the second is skipped with the reason.
    assert!(line("broken-a-quick.toml").contains("NOT RUN"), "{all}");
    assert!(all.contains("0001-stale.patch"), "{all}");
    let b = line("broken-b-quick.toml");
    assert!(
        b.contains("NOT RUN: skipped: kernel `vm-broken` failed to build earlier in this run"),
        "{b}"
    );
    // The unaffected spec finished and was drawn.
    let host = line("host-quick.toml");
    assert!(host.contains("Complete"), "{host}");
    // Neither broken spec left a run directory behind.
    let runs = std::fs::read_dir(root.path().join("results/smoke"))
        .unwrap()
        .count();
    assert_eq!(runs, 1, "only host-quick's run directory");
}

/// Reads `child`'s stderr until a line contains one of `stops`.
fn wait_for(child: &mut Child, stops: &[&str], seen: &mut Vec<String>) -> Option<String> {
    let stderr = child.stderr.as_mut().unwrap();
    let mut reader = BufReader::new(stderr);
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        seen.push(line.trim_end().to_string());
        if let Some(s) = stops.iter().find(|s| line.contains(**s)) {
            return Some(s.to_string());
        }
        line.clear();
    }
    None
}

fn build_in_own_group(cache: &Path) -> Child {
    use std::os::unix::process::CommandExt;
    Command::new(env!("CARGO_BIN_EXE_testbed"))
        .args(["kernel", "build", "vm-base"])
        .env("TESTBED_CACHE", cache)
        .env_remove("TESTBED_PHASES")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap()
}

/// Stops the build's whole process group (testbed and make alike).
/// SIGTERM, not SIGINT: a shell that starts a job in the background may
/// hand SIGINT down ignored.
fn interrupt(child: &mut Child) {
    let pgid = nix::unistd::Pid::from_raw(-(child.id() as i32));
    let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGTERM);
    let _ = child.wait();
}

#[test]
#[ignore = "unpacks and configures the real kernel source (~2 min)"]
fn an_interrupted_build_resumes_its_configured_tree() {
    let cache = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    let mut first = build_in_own_group(cache.path());
    let at = wait_for(&mut first, &["building bzImage"], &mut seen);
    assert_eq!(at.as_deref(), Some("building bzImage"), "{seen:#?}");
    assert!(seen.iter().any(|l| l.contains("unpacking")), "{seen:#?}");
    interrupt(&mut first);
    let kernels = cache.path().join("kernels");
    // Dot-named entries are the build's lock and staging, not a kernel.
    let built: Vec<_> = std::fs::read_dir(&kernels)
        .map(|d| {
            d.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.file_name())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        built.is_empty(),
        "the first build was stopped before it finished: {built:?}"
    );

    seen.clear();
    let mut second = build_in_own_group(cache.path());
    let at = wait_for(
        &mut second,
        &[
            "unpacking",
            "resuming the earlier attempt",
            "building bzImage",
        ],
        &mut seen,
    );
    interrupt(&mut second);
    assert_eq!(
        at.as_deref(),
        Some("resuming the earlier attempt"),
        "the retry must not unpack again: {seen:#?}"
    );
}
