//! The fault suite: a guest that floods the host, a NaN sample, `testbed`
//! killed with SIGKILL and SIGTERM, a disk that fills while a point is
//! stored, a corrupt point file before `--resume`, two runs of one spec
//! at once, and a job whose children call `setsid` (out of every process
//! group the host kills: the run's cgroup holds them). Each test checks that the run directory is consistent, that no
//! process of the run is left (by process group and by name), and that
//! `--resume` ends with the same points an uninterrupted run has.
//!
//! They use the host executor (the agent as a process): the faults are the
//! host's to survive, and a VM would only make each test slower.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn run_command(spec: &Path, out: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_testbed"));
    c.arg("run").arg(spec).arg("--out").arg(out);
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A host-executor spec of the fault workload; `rest` adds lines.
fn spec(dir: &Path, name: &str, workload: &str, rest: &str) -> PathBuf {
    let p = dir.join(format!("{name}.toml"));
    let body = format!(
        "[experiment]\nname = \"{name}\"\nexecutor = \"host\"\n{rest}\n\n[workload]\nkind = \"fault\"\n{workload}\n"
    );
    std::fs::write(&p, body).unwrap();
    p
}

fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

fn point_ids(m: &serde_json::Value) -> BTreeSet<String> {
    m["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_string())
        .collect()
}

fn point<'a>(m: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    m["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("no point {id} in {m}"))
}

/// Every point with a record has a consistent pair of files: an ok point a
/// readable parquet with as many rows as its record says, a failed point
/// none; and nothing half-written (temp or spill files) is left.
fn assert_consistent(dir: &Path) {
    check_consistent(dir, false);
}

/// As `assert_consistent`, after `testbed` itself was SIGKILLed: the samples
/// of the point in flight may be left in a spill file (never counted as a
/// point; the next start removes it).
fn assert_consistent_after_sigkill(dir: &Path) {
    check_consistent(dir, true);
}

fn check_consistent(dir: &Path, in_flight_spill: bool) {
    let points = dir.join("points");
    let mut spills = 0;
    for e in std::fs::read_dir(&points).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        spills += usize::from(name.starts_with(".spill"));
        assert!(
            !name.starts_with(".tmp") && (in_flight_spill || !name.starts_with(".spill")),
            "half-written file left: {}",
            e.path().display()
        );
        if let Some(id) = name.strip_suffix(".json") {
            let rec: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap();
            let parquet = points.join(format!("{id}.parquet"));
            if rec["ok"] == true {
                let rows = parquet_rows(&parquet);
                assert_eq!(Some(rows), rec["samples"].as_u64(), "{id}: rows vs record");
            } else {
                assert!(!parquet.exists(), "failed point {id} has a sample file");
            }
        }
    }
    assert!(
        spills <= 1,
        "{spills} spill files: only one point is ever in flight"
    );
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(!name.starts_with(".tmp"), "half-written file left: {name}");
    }
}

fn parquet_rows(path: &Path) -> u64 {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let r = parquet::file::reader::SerializedFileReader::new(f)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    use parquet::file::reader::FileReader;
    r.metadata().file_metadata().num_rows() as u64
}

/// Processes whose environment names `run_dir` (the agent and everything
/// it started carry TESTBED_RUN_DIR), with their process group.
fn processes_of_run(run_dir: &Path) -> Vec<(u32, String)> {
    let needle = format!("TESTBED_RUN_DIR={}", run_dir.display());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            out.push((pid, comm.trim().to_string()));
        }
    }
    out
}

/// Whether any process is left in process group `pgid`.
fn group_alive(pgid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(-(pgid as i32), 0) == 0 }
}

fn assert_nothing_left(run_dir: &Path, groups: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_of_run(run_dir);
        let groups_left: Vec<u32> = groups.iter().copied().filter(|g| group_alive(*g)).collect();
        if left.is_empty() && groups_left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes left by the run: {left:?}, live groups {groups_left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs to the end and returns the output with the peak resident memory
/// of `testbed` itself (KiB), from wait4's rusage.
// The child is reaped by wait4, which std's Child cannot do with rusage.
#[allow(clippy::zombie_processes)]
fn run_measured(cmd: &mut Command) -> (Output, u64) {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let (mut so, mut se) = (child.stdout.unwrap(), child.stderr.unwrap());
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut so, &mut b).unwrap();
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut se, &mut b).unwrap();
        b
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for the child we spawned; the Child handle is not used again.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid);
    let output = Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(status),
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    };
    (output, usage.ru_maxrss as u64)
}

/// The direct children of `pid` (their process groups are their pids:
/// the testbed starts each in a group of its own).
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if rest.split_whitespace().nth(1) == Some(&pid.to_string()) {
            out.push(child);
        }
    }
    out
}

#[test]
#[ignore = "builds the static release guest binaries (nested cargo build --release)"]
fn a_flooding_guest_fails_its_points_and_the_host_stays_small() {
    let _g = serial();
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // One 200 MB line, a NaN and 200k tag keys, then a healthy point: each
    // bad point fails alone, in the same agent process.
    let s = spec(
        t.path(),
        "flood",
        "mode = \"flood-line\"\nsize = 200_000_000",
        "[sweep]\nmode = [\"flood-line\", \"nan\"]\n",
    );
    // What testbed itself needs for a healthy run of the same size.
    let calm = spec(
        t.path(),
        "calm",
        "mode = \"samples\"\nsize = 10",
        "repetitions = 2",
    );
    let (o, calm_kib) = run_measured(&mut run_command(&calm, &t.path().join("run-calm")));
    assert!(o.status.success(), "{}", text(&o));
    println!("peak RSS of testbed for two healthy points: {calm_kib} KiB");
    let out = t.path().join("run");
    let (o, peak_kib) = run_measured(&mut run_command(&s, &out));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let m = manifest(&out);
    let err = |id: &str| point(&m, id)["error"].as_str().unwrap_or("").to_string();
    let e = err("p0000-r00");
    assert!(
        e.contains("message of more than 4194304 bytes skipped"),
        "{e}"
    );
    assert!(
        e.len() < 1000,
        "the error quotes an excerpt, not the line: {} bytes",
        e.len()
    );
    assert!(err("p0001-r00").contains("not a finite number"));
    assert_eq!(
        m["boots"].as_array().unwrap().len(),
        1,
        "one agent ran both points"
    );
    assert!(
        std::fs::metadata(out.join("manifest.json")).unwrap().len() < 100_000,
        "the manifest holds no flood"
    );
    println!("peak RSS of testbed while a guest sent a 200 MB line: {peak_kib} KiB");
    assert!(
        peak_kib < calm_kib + 50_000,
        "testbed held the flood: peak {peak_kib} KiB, {calm_kib} KiB when calm (a held line alone is 200 000 KiB)"
    );
    assert_consistent(&out);
    assert_nothing_left(&out, &[]);

    let s = spec(
        t.path(),
        "tags",
        "mode = \"tag-flood\"\nsize = 200_000",
        "[sweep]\nmode = [\"tag-flood\", \"samples\"]\n",
    );
    let out = t.path().join("run-tags");
    let (o, peak_kib) = run_measured(&mut run_command(&s, &out));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let m = manifest(&out);
    let e = point(&m, "p0000-r00")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(e.contains("more than 16 distinct tag keys"), "{e}");
    assert_eq!(point(&m, "p0001-r00")["samples"], 200_000);
    println!("peak RSS of testbed while a guest sent 200k tag keys: {peak_kib} KiB");
    assert!(
        peak_kib < calm_kib + 50_000,
        "testbed held the tag flood: peak {peak_kib} KiB, {calm_kib} KiB when calm"
    );
    assert_consistent(&out);
    assert_nothing_left(&out, &[]);
}

#[test]
#[ignore = "builds the static release guest binaries (nested cargo build --release)"]
fn a_guest_that_logs_without_end_times_out_and_the_next_point_runs() {
    let _g = serial();
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let s = spec(
        t.path(),
        "logflood",
        "mode = \"log-flood\"\nsize = 5",
        "\n[sweep]\nmode = [\"log-flood\", \"samples\"]\n\n[timeouts]\npoint = \"10s\"\n",
    );
    let out = t.path().join("run");
    let started = Instant::now();
    let o = run_command(&s, &out).output().unwrap();
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let m = manifest(&out);
    let e = point(&m, "p0000-r00")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        e.contains("timed out after 10s waiting for point p0000-r00"),
        "{e}"
    );
    assert_eq!(point(&m, "p0001-r00")["ok"], true);
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert_consistent(&out);
    assert_nothing_left(&out, &[]);
}

/// The summary of point `id` as stored in the manifest.
fn summary<'a>(m: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    &point(m, id)["summary"]
}

#[test]
#[ignore = "builds the static release guest binaries (nested cargo build --release)"]
fn children_that_call_setsid_are_killed_with_the_runs_cgroup() {
    let _g = serial();
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let s = spec(t.path(), "escape", "mode = \"escape\"\nsize = 3", "");
    let out = t.path().join("run");
    let o = run_command(&s, &out).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&out);
    assert_eq!(summary(&m, "p0000-r00")["escaped"], 3, "{m}");
    // Root on this kind of host: cgroup v2 (v1's freezer where v2 lacks
    // cgroup.kill). Under process groups alone the three would survive.
    let contained = m["containment"].as_str().unwrap_or_default();
    assert!(
        contained.starts_with("cgroup v"),
        "containment: {contained:?}"
    );
    assert_nothing_left(&out, &[]);
}

#[test]
#[ignore = "builds the static release guest binaries (nested cargo build --release)"]
fn a_sigkilled_runs_escapees_are_killed_by_the_next_start() {
    let _g = serial();
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // Two children escape, then the next point hangs until testbed is killed.
    let s = spec(
        t.path(),
        "escape-hang",
        "mode = \"escape\"\nsize = 2",
        "\n[sweep]\nmode = [\"escape\", \"hang\"]\n",
    );
    let out = t.path().join("run");
    let mut child: Child = run_command(&s, &out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the escaping point", Duration::from_secs(600), || {
        out.join("points/p0000-r00.json").exists()
    });
    // SAFETY: plain kill(2) on our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    // The agent dies with testbed (parent-death signal); the escapees do
    // not: no parent of theirs is left to kill them.
    wait_for("the agent to die", Duration::from_secs(10), || {
        processes_of_run(&out).len() == 2
    });
    let other = spec(t.path(), "next", "mode = \"samples\"\nsize = 10", "");
    let o = run_command(&other, &t.path().join("next"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("killed 2 process(es) left in"),
        "the next start names what it killed:\n{}",
        text(&o)
    );
    assert_nothing_left(&out, &[]);
}

/// Four points of 2 s each; the run is stopped with `signal` once the first
/// is stored, then resumed to the end.
fn killed_then_resumed(signal: i32) {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let s = spec(
        t.path(),
        "slow",
        "mode = \"samples\"\nsize = 1000\nafter_s = 2.0",
        "repetitions = 4",
    );
    let out = t.path().join("run");
    let mut child: Child = run_command(&s, &out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the first point", Duration::from_secs(600), || {
        out.join("points/p0000-r00.json").exists()
    });
    let groups = children_of(child.id());
    assert!(!groups.is_empty(), "the agent runs as a child of testbed");
    // SAFETY: plain kill(2) on our child.
    unsafe { libc::kill(child.id() as i32, signal) };
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert_nothing_left(&out, &groups);
    if signal == libc::SIGKILL {
        assert_consistent_after_sigkill(&out);
    } else {
        assert_consistent(&out);
    }
    let o = run_command(&s, &out).arg("--resume").output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&out);
    assert_eq!(m["status"], "complete");
    let want: BTreeSet<String> = (0..4).map(|r| format!("p0000-r{r:02}")).collect();
    assert_eq!(point_ids(&m), want);
    assert_consistent(&out);
    assert_nothing_left(&out, &[]);
}

#[test]
#[ignore = "builds the static release guest binaries (nested cargo build --release)"]
fn sigkill_of_testbed_leaves_no_process_and_resume_completes() {
    let _g = serial();
    killed_then_resumed(libc::SIGKILL);
}

#[test]
#[ignore = "builds the static release guest binaries (nested cargo build --release)"]
fn sigterm_of_testbed_leaves_no_process_and_resume_completes() {
    let _g = serial();
    killed_then_resumed(libc::SIGTERM);
}

/// A small tmpfs at `dir`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount a tmpfs (the suite runs as root)");
        Tmpfs(dir.to_path_buf())
    }
    fn resize(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
#[ignore = "builds the static release guest binaries; mounts a tmpfs (root)"]
fn a_full_disk_while_storing_fails_the_run_loudly_and_resume_completes() {
    let _g = serial();
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let s = spec(
        t.path(),
        "full",
        "mode = \"samples\"\nsize = 10",
        "[sweep]\nsize = [10, 3_000_000, 10]\n",
    );
    let fs = Tmpfs::mount(&t.path().join("small"), "4M");
    let out = fs.0.join("run");
    let o = run_command(&s, &out).output().unwrap();
    let said = text(&o);
    assert!(!o.status.success(), "{said}");
    assert!(said.contains("No space left on device"), "{said}");
    assert!(
        said.contains("p0001-r00"),
        "the error names the point: {said}"
    );
    let m = manifest(&out);
    assert_eq!(m["status"], "failed", "{m}");
    assert_ne!(point_ids(&m).len(), 3);
    assert_consistent(&out);
    assert_nothing_left(&out, &[]);
    fs.resize("400M");
    let o = run_command(&s, &out).arg("--resume").output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&out);
    assert_eq!(m["status"], "complete");
    assert_eq!(point_ids(&m).len(), 3);
    assert_eq!(point(&m, "p0001-r00")["samples"], 3_000_000);
    assert_consistent(&out);
}

#[test]
#[ignore = "builds the static release guest binaries (nested cargo build --release)"]
fn a_corrupt_point_file_is_found_before_resume_runs_anything_and_rerun() {
    let _g = serial();
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let s = spec(
        t.path(),
        "corrupt",
        "mode = \"samples\"\nsize = 100",
        "repetitions = 3",
    );
    let out = t.path().join("run");
    let o = run_command(&s, &out).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let want = point_ids(&manifest(&out));
    std::fs::write(out.join("points/p0000-r01.parquet"), b"PAR1 garbage").unwrap();
    let o = run_command(&s, &out).arg("--resume").output().unwrap();
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    assert!(
        said.contains("p0000-r01"),
        "resume says which point it re-runs: {said}"
    );
    let m = manifest(&out);
    assert_eq!(m["status"], "complete");
    assert_eq!(point_ids(&m), want);
    assert_eq!(parquet_rows(&out.join("points/p0000-r01.parquet")), 100);
    assert_consistent(&out);
    assert_nothing_left(&out, &[]);
}

#[test]
#[ignore = "builds the static release guest binaries (nested cargo build --release)"]
fn two_runs_of_one_spec_at_once_do_not_collide() {
    let _g = serial();
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let s = spec(
        t.path(),
        "twice",
        "mode = \"samples\"\nsize = 100\nafter_s = 1.0",
        "repetitions = 3",
    );
    // Into one directory: the second is refused while the first runs.
    let out = t.path().join("run");
    let first = run_command(&s, &out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the first run's manifest", Duration::from_secs(600), || {
        out.join("manifest.json").exists()
    });
    let second = run_command(&s, &out).arg("--resume").output().unwrap();
    assert!(!second.status.success());
    assert!(text(&second).contains("in use"), "{}", text(&second));
    // Into two directories at once: both complete.
    let other = t.path().join("run2");
    let third = run_command(&s, &other).output().unwrap();
    assert!(third.status.success(), "{}", text(&third));
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success());
    for dir in [&out, &other] {
        let m = manifest(dir);
        assert_eq!(m["status"], "complete");
        assert_eq!(point_ids(&m).len(), 3);
        assert_consistent(dir);
        assert_nothing_left(dir, &[]);
    }
}

#[test]
#[ignore = "builds the static release guest binaries (nested cargo build --release)"]
fn a_point_over_its_memory_limit_fails_alone_and_show_prints_each_points_host_cost() {
    let _g = serial();
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // The agent writes 512 MiB in the first point, 8 MiB in the second.
    let s = spec(
        t.path(),
        "limits",
        "mode = \"alloc\"",
        "\n[sweep]\nsize = [512, 8]\n\n[limits]\nmemory = \"64M\"\n",
    );
    let out = t.path().join("run");
    let o = run_command(&s, &out).output().unwrap();
    let m = manifest(&out);
    assert_eq!(m["status"], "partial", "{}\n{m}", text(&o));
    let over = point(&m, "p0000-r00");
    assert_eq!(over["ok"], false, "{over}");
    let error = over["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("over its memory limit: limits.memory = \"64M\""),
        "the error names the limit: {error}"
    );
    // Stopped by the kernel (a cgroup's memory controller, v2 or v1: this
    // kind of machine has v1's), not found by the half-second poll after
    // the host's memory was taken; the record says which limit acted.
    assert!(
        error.contains("enforced by the kernel (cgroup v") && error.contains("OOM killer ended"),
        "the kernel's limit stopped it: {error}"
    );
    let under = point(&m, "p0001-r00");
    assert_eq!(under["ok"], true, "the next point runs: {under}");
    let cost = &under["host_cost"];
    assert!(
        cost["peak_rss_mib"].as_f64().unwrap_or(0.0) >= 8.0,
        "{cost}"
    );
    // The memory cgroup the limit is enforced in has its own peak, what
    // the kernel charged the group over the point.
    assert!(
        cost["peak_charged_mib"].as_f64().unwrap_or(0.0) >= 8.0,
        "{cost}"
    );
    assert!(cost["cpu_user_s"].is_number(), "{cost}");
    // No VM, no vCPU thread: not a zero.
    assert!(cost.get("vcpu_s").is_none(), "{cost}");
    assert_consistent(&out);
    let shown = Command::new(env!("CARGO_BIN_EXE_testbed"))
        .arg("show")
        .arg(&out)
        .output()
        .unwrap();
    let shown = text(&shown);
    assert!(
        shown.contains("host cost  CPU ")
            && shown.contains(" MiB charged to its memory cgroup (")
            && !shown.contains("vCPU"),
        "show prints the point's host CPU and peak memory:\n{shown}"
    );
    assert_nothing_left(&out, &[]);
}
