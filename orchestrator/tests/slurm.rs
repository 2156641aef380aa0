//! The Slurm executor through a real one-node Slurm: munged, slurmctld
//! and slurmd from Debian, started by each test in a private directory
//! (testbed::execution::slurm::local) and stopped when it ends. No stand-in
//! scheduler: sbatch, scontrol and scancel are Slurm's own.
//!
//! - a quick spec as an array whose collected run equals a direct run's,
//!   with two tasks running at once;
//! - a VM spec (emulated NVMe, TCG) as two array tasks at once;
//! - one task killed with scancel, and --resume submitting only it;
//! - a 24-task array of one-point tasks, collected twice to the same run.
//!
//! The 200-task measure of the testbed's per-task overhead (docs/scale.md)
//! is a benchmark: `./x bench slurm_scale`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use testbed::execution::slurm::local::LocalSlurm;

mod common;
use common::slurm::{
    cluster, cluster_with, fault_spec, json, point_ids, private_dir, run_one_point_tasks,
    task_spans, testbed, text,
};

/// One cluster at a time: each test starts its own on this node.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every column of samples.parquet but run_id, row by row, sorted.
fn sample_rows(run: &Path) -> (Vec<String>, Vec<String>) {
    use arrow::array::Array;
    let (_, batches) =
        testbed::recording::results::samples::read_parquet(&run.join("samples.parquet"))
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

fn most_at_once(spans: &BTreeMap<u64, (f64, f64)>) -> usize {
    spans
        .values()
        .map(|(s, _)| spans.values().filter(|(a, b)| a <= s && s < b).count())
        .max()
        .unwrap_or(0)
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
        testbed::recording::results::samples::read_parquet(&run.join("summary.parquet")).unwrap();
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
#[ignore = "starts a local Slurm and runs a 24-task array; run by ./x test"]
fn an_array_of_one_point_tasks_completes_and_collecting_again_changes_nothing() {
    // The per-task overhead at 200 tasks is a measurement, not a check:
    // `./x bench slurm_scale` (orchestrator/benches/slurm_scale.rs).
    const TASKS: usize = 24;
    let _s = serial();
    let t = private_dir();
    let started = Instant::now();
    let (_ct, c) = cluster(t.path());
    eprintln!("cluster up after {:.1} s", started.elapsed().as_secs_f64());
    let run = run_one_point_tasks(&c, t.path(), "slurm-many", TASKS);
    eprintln!(
        "array run and collected after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let m = json(&run.join("manifest.json"));
    assert_eq!(m["status"], "complete");
    let ids = point_ids(&run);
    assert_eq!(ids.len(), TASKS, "{ids:?}");
    // One task per point, each a complete run directory of its own, and
    // every task's samples in the merged table (point k sent k values).
    let spans = task_spans(&run);
    assert_eq!(spans.len(), TASKS, "{spans:?}");
    let (rows, _) = sample_rows(&run);
    assert_eq!(rows.len(), TASKS * (TASKS + 1) / 2);
    let o = testbed(&c, &["collect", run.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json(&run.join("manifest.json"))["status"], "complete");
    assert_eq!(point_ids(&run), ids);
    assert_eq!(
        sample_rows(&run).0,
        rows,
        "collecting again changed the samples"
    );
}
