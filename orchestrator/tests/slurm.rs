//! The Slurm executor through a real one-node Slurm: munged, slurmctld
//! and slurmd from Debian, started by each test in a private directory
//! (testbed::slurm::local) and stopped when it ends. No stand-in
//! scheduler: sbatch, scontrol and scancel are Slurm's own.
//!
//! - a quick spec as an array whose collected run equals a direct run's,
//!   with two tasks running at once;
//! - a VM spec (emulated NVMe, TCG) as two array tasks at once;
//! - one task killed with scancel, and --resume submitting only it;
//! - a 200-task array of tiny points, printing the testbed's per-task
//!   overhead (the figure in docs/scale.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use testbed::slurm::local::LocalSlurm;

/// One cluster at a time: each test starts its own on this node.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn private_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    t
}

/// A cluster in its own temporary directory: munged wants every
/// directory above its socket searchable by all, so not under the
/// tests' 0700 directories (LocalSlurm keeps its key and state in a 0700
/// subdirectory).
fn cluster(t: &Path) -> (tempfile::TempDir, LocalSlurm) {
    cluster_with(t, 100_001)
}

/// A cluster whose arrays take indices below `max_array_size`.
fn cluster_with(_t: &Path, max_array_size: u32) -> (tempfile::TempDir, LocalSlurm) {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let c = LocalSlurm::start_with(&t.path().join("slurm"), max_array_size)
        .unwrap_or_else(|e| panic!("local Slurm did not start: {e}"));
    (t, c)
}

fn testbed(c: &LocalSlurm, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_testbed"));
    cmd.args(args);
    for (k, v) in c.env() {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// A spec of the fault workload's deterministic samples mode: point k
/// sends `size` values 0..size after sleeping `after_s`.
fn fault_spec(dir: &Path, name: &str, slurm: &str, sweep: &str, after_s: f64) -> PathBuf {
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(
        &p,
        format!(
            "[experiment]\nname = \"{name}\"\nexecutor = \"slurm\"\n\n[slurm]\ntask_executor = \"host\"\n{slurm}\n\n[workload]\nkind = \"fault\"\nmode = \"samples\"\nafter_s = {after_s}\n\n[sweep]\n{sweep}\n"
        ),
    )
    .unwrap();
    p
}

/// Every column of samples.parquet but run_id, row by row, sorted.
fn sample_rows(run: &Path) -> (Vec<String>, Vec<String>) {
    use arrow::array::Array;
    let (_, batches) = testbed::results::samples::read_parquet(&run.join("samples.parquet"))
        .unwrap_or_else(|e| panic!("{}: {e}", run.display()));
    let mut rows = Vec::new();
    let mut run_ids = Vec::new();
    for b in &batches {
        let schema = b.schema();
        for r in 0..b.num_rows() {
            let mut row = Vec::new();
            for (i, f) in schema.fields().iter().enumerate() {
                let col = b.column(i);
                let v = arrow::util::display::array_value_to_string(col, r).unwrap();
                if f.name() == "run_id" {
                    run_ids.push(v);
                } else {
                    row.push(format!(
                        "{}={}{}",
                        f.name(),
                        v,
                        if col.is_null(r) { "(null)" } else { "" }
                    ));
                }
            }
            rows.push(row.join(","));
        }
    }
    rows.sort();
    run_ids.sort();
    run_ids.dedup();
    (rows, run_ids)
}

/// (start, end) in seconds of each task, from its manifest.
fn task_spans(run: &Path) -> BTreeMap<u64, (f64, f64)> {
    let m = json(&run.join("manifest.json"));
    let tasks = m["inputs"]["slurm"]["tasks"].as_array().unwrap();
    let mut out = BTreeMap::new();
    for t in tasks {
        let task = t["task"].as_u64().unwrap();
        let tm = json(&run.join(t["manifest"].as_str().unwrap()));
        let info = &tm["inputs"]["slurm_task"];
        let start = info["started_unix_s"].as_f64().unwrap();
        let wall = tm["wall_s"].as_f64().unwrap();
        out.insert(task, (start, start + wall));
    }
    out
}

fn most_at_once(spans: &BTreeMap<u64, (f64, f64)>) -> usize {
    spans
        .values()
        .map(|(s, _)| spans.values().filter(|(a, b)| a <= s && s < b).count())
        .max()
        .unwrap_or(0)
}

fn point_ids(run: &Path) -> Vec<String> {
    let m = json(&run.join("manifest.json"));
    let mut ids: Vec<String> = m["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["ok"] == true)
        .map(|p| p["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
#[ignore = "starts a local Slurm (munged, slurmctld, slurmd); run by ./x test"]
fn a_quick_spec_as_a_job_array_collects_to_what_a_direct_run_gives() {
    let _s = serial();
    let t = private_dir();
    // Arrays of at most 3 tasks here, as on a site with a small
    // MaxArraySize: the 4 tasks go in two arrays.
    let (_ct, c) = cluster_with(t.path(), 3);
    let spec = fault_spec(
        t.path(),
        "slurm-e2e",
        "chunk = 1\ncpus = 1",
        "size = [10, 20, 30, 40]",
        2.0,
    );
    let spec_s = spec.to_str().unwrap();
    let run = t.path().join("array-run");
    let o = testbed(
        &c,
        &["run", spec_s, "--out", run.to_str().unwrap(), "--wait"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let direct = t.path().join("direct-run");
    let o2 = testbed(
        &c,
        &[
            "run",
            spec_s,
            "--executor",
            "host",
            "--out",
            direct.to_str().unwrap(),
        ],
    );
    assert!(o2.status.success(), "{}", text(&o2));

    let m = json(&run.join("manifest.json"));
    assert_eq!(m["status"], "complete", "{}", text(&o));
    assert_eq!(m["executor"], "slurm");
    let subs = m["inputs"]["slurm"]["submissions"].as_array().unwrap();
    assert_eq!(subs.len(), 2, "{subs:?}");
    assert_eq!(subs[0]["tasks"], serde_json::json!([0, 1, 2]));
    assert_eq!(
        (subs[1]["tasks"].clone(), subs[1]["offset"].clone()),
        (serde_json::json!([3]), serde_json::json!(3))
    );
    assert!(
        subs[1]["argv"].to_string().contains("--array=0"),
        "{}",
        subs[1]
    );
    assert_eq!(point_ids(&run), point_ids(&direct));
    assert_eq!(point_ids(&run).len(), 4);
    let (rows, run_ids) = sample_rows(&run);
    let (direct_rows, _) = sample_rows(&direct);
    assert_eq!(rows.len(), 10 + 20 + 30 + 40);
    assert_eq!(rows, direct_rows, "the same samples as a direct run");
    assert_eq!(run_ids, ["array-run"], "the whole run's id in every row");
    // The summary table holds every point too.
    let (_, summary) =
        testbed::results::samples::read_parquet(&run.join("summary.parquet")).unwrap();
    assert_eq!(summary.iter().map(|b| b.num_rows()).sum::<usize>(), 4);
    // Each task on its node, with its own manifest kept.
    let tasks = m["inputs"]["slurm"]["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 4);
    for task in tasks {
        assert_eq!(task["node"], c.node.as_str(), "{task}");
        assert!(run.join(task["manifest"].as_str().unwrap()).is_file());
    }
    let spans = task_spans(&run);
    let at_once = most_at_once(&spans);
    eprintln!("slurm e2e: task spans {spans:?}; at most {at_once} at once");
    assert!(
        at_once >= 2,
        "two 1-CPU tasks on a {}-CPU node: {spans:?}",
        c.cpus
    );
    // status reads the array from Slurm and the task directories.
    let st = testbed(&c, &["status", run.to_str().unwrap()]);
    let st_text = text(&st);
    assert!(st.status.success(), "{st_text}");
    assert!(
        st_text.contains("4 of 4 task(s) complete; collected"),
        "{st_text}"
    );
    assert!(st_text.contains("COMPLETED"), "{st_text}");
}

#[test]
#[ignore = "starts a local Slurm and boots VMs under TCG; run by ./x test"]
fn a_vm_spec_runs_as_array_tasks_two_at_once() {
    let _s = serial();
    let t = private_dir();
    let (_ct, c) = cluster(t.path());
    // The smoke spec (stock kernel, emulated NVMe), one CPU per task so
    // both of its points run at once on this node.
    let smoke = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/smoke.toml"),
    )
    .unwrap();
    let spec = t.path().join("smoke-slurm.toml");
    std::fs::write(
        &spec,
        smoke.replace("reads_per_thread = 2000", "reads_per_thread = 300")
            + "\n[slurm]\ncpus = 1\n",
    )
    .unwrap();
    let run = t.path().join("vm-run");
    let o = testbed(
        &c,
        &[
            "run",
            spec.to_str().unwrap(),
            "--executor",
            "slurm",
            "--accel",
            "tcg",
            "--out",
            run.to_str().unwrap(),
            "--wait",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let m = json(&run.join("manifest.json"));
    assert_eq!(m["status"], "complete");
    assert_eq!(point_ids(&run), ["p0000-r00", "p0001-r00"]);
    assert_eq!(m["inputs"]["slurm"]["task_executor"], "qemu");
    // Built once by the submitter: every task booted the same image.
    let tasks = m["inputs"]["slurm"]["tasks"].as_array().unwrap();
    let images: std::collections::BTreeSet<String> = tasks
        .iter()
        .map(|task| {
            let tm = json(&run.join(task["manifest"].as_str().unwrap()));
            tm["inputs"]["initramfs"]["sha256"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(images.len(), 1, "{images:?}");
    let spans = task_spans(&run);
    assert!(most_at_once(&spans) >= 2, "{spans:?}");
}

/// Waits until `ready` holds, polling.
fn wait_until(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn slurm_state(c: &LocalSlurm, job_task: &str) -> String {
    let o = Command::new("scontrol")
        .args(["-o", "show", "job", job_task])
        .envs(c.env())
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .find_map(|w| w.strip_prefix("JobState="))
        .unwrap_or("")
        .to_string()
}

#[test]
#[ignore = "starts a local Slurm; run by ./x test"]
fn a_killed_task_is_the_only_one_resume_submits_again() {
    let _s = serial();
    let t = private_dir();
    let (_ct, c) = cluster(t.path());
    // Task 1 sleeps long enough to be cancelled while it runs.
    let spec = fault_spec(
        t.path(),
        "slurm-kill",
        "chunk = 1\ncpus = 1",
        "after_s = [0.2, 6.0, 0.2]",
        0.0,
    );
    let run = t.path().join("run");
    let o = testbed(
        &c,
        &[
            "run",
            spec.to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let state = json(&run.join("slurm/array.json"));
    let job = state["submissions"][0]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let task1 = format!("{job}_1");
    wait_until(Duration::from_secs(60), "task 1 running", || {
        slurm_state(&c, &task1) == "RUNNING" && run.join("slurm/tasks/t0001/spec.toml").is_file()
    });
    let o = Command::new("scancel")
        .arg(&task1)
        .envs(c.env())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    wait_until(Duration::from_secs(60), "the array done", || {
        (0..3).all(|i| {
            let s = slurm_state(&c, &format!("{job}_{i}"));
            s == "COMPLETED" || s == "CANCELLED" || s == "FAILED"
        })
    });
    assert_eq!(slurm_state(&c, &task1), "CANCELLED");
    // Collecting now says what is missing, and the run is not complete.
    let o = testbed(&c, &["collect", run.to_str().unwrap()]);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("p0001-r00"), "{out}");
    assert!(
        out.contains("task(s) 1 have not stored all their points"),
        "{out}"
    );
    assert_eq!(json(&run.join("manifest.json"))["status"], "failed");

    let o = testbed(
        &c,
        &[
            "run",
            spec.to_str().unwrap(),
            "--resume",
            "--out",
            run.to_str().unwrap(),
            "--wait",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let state = json(&run.join("slurm/array.json"));
    let subs = state["submissions"].as_array().unwrap();
    assert_eq!(subs.len(), 2);
    assert_eq!(
        subs[1]["tasks"],
        serde_json::json!([1]),
        "only the killed task"
    );
    assert!(
        subs[1]["argv"].to_string().contains("--array=1"),
        "{}",
        subs[1]
    );
    let m = json(&run.join("manifest.json"));
    assert_eq!(m["status"], "complete");
    assert_eq!(point_ids(&run), ["p0000-r00", "p0001-r00", "p0002-r00"]);
    // The killed attempt's directory was resumed, not started afresh.
    let t1 = json(&run.join("slurm/tasks/t0001/manifest.json"));
    assert_eq!(t1["status"], "complete");
}

#[test]
#[ignore = "starts a local Slurm and runs a 200-task array; run by ./x test"]
fn a_200_task_array_measures_the_testbeds_per_task_overhead() {
    let _s = serial();
    let t = private_dir();
    let (_ct, c) = cluster(t.path());
    let sizes: Vec<String> = (1..=200).map(|i| i.to_string()).collect();
    let spec = fault_spec(
        t.path(),
        "slurm-scale",
        "chunk = 1\ncpus = 1",
        &format!("size = [{}]", sizes.join(", ")),
        0.0,
    );
    let run = t.path().join("run");
    let started = Instant::now();
    let o = testbed(
        &c,
        &[
            "run",
            spec.to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
            "--wait",
        ],
    );
    let makespan = started.elapsed().as_secs_f64();
    assert!(o.status.success(), "{}", text(&o));
    let m = json(&run.join("manifest.json"));
    assert_eq!(m["status"], "complete");
    assert_eq!(point_ids(&run).len(), 200);
    // Per task: its testbed process's wall time (start-up, agent, storing)
    // beyond what its point itself took.
    let tasks = m["inputs"]["slurm"]["tasks"].as_array().unwrap();
    let mut overhead = Vec::new();
    let mut task_wall = 0.0;
    for task in tasks {
        let tm = json(&run.join(task["manifest"].as_str().unwrap()));
        let wall = tm["wall_s"].as_f64().unwrap();
        let points: f64 = tm["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["wall_s"].as_f64().unwrap_or(0.0))
            .sum();
        task_wall += wall;
        overhead.push(wall - points);
    }
    // Collecting again (it is idempotent) times the merge alone.
    let collect_started = Instant::now();
    let o = testbed(&c, &["collect", run.to_str().unwrap()]);
    let collect_s = collect_started.elapsed().as_secs_f64();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json(&run.join("manifest.json"))["status"], "complete");
    assert_eq!(point_ids(&run).len(), 200);
    overhead.sort_by(f64::total_cmp);
    let mean = overhead.iter().sum::<f64>() / overhead.len() as f64;
    let p50 = overhead[overhead.len() / 2];
    let p95 = overhead[overhead.len() * 95 / 100];
    let slots = c.cpus as f64;
    // From the first task's start to the last one's end: the array itself,
    // without the submitting host's build and the final collect.
    let spans = task_spans(&run);
    let first = spans.values().map(|s| s.0).fold(f64::INFINITY, f64::min);
    let last = spans.values().map(|s| s.1).fold(0.0, f64::max);
    let array_s = last - first;
    eprintln!(
        "slurm scale: 200 tasks on {} CPU(s): testbed run --wait {makespan:.1} s (build check, submit, run, collect), \
         the array {array_s:.1} s (first task start to last task end); \
         testbed per task: mean {mean:.3} s, p50 {p50:.3} s, p95 {p95:.3} s; \
         sum of task walls {task_wall:.1} s; collect alone {collect_s:.1} s; \
         Slurm dispatch and process start per task (array x slots - task walls) / tasks: {:.3} s",
        c.cpus,
        (array_s * slots - task_wall) / 200.0
    );
}
