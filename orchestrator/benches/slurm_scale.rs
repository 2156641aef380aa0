//! The testbed's own cost per Slurm array task, measured on a real
//! one-node Slurm (munged, slurmctld, slurmd from Debian): an array of
//! one-point tasks (the fault workload sending 1..N samples, host
//! executor, `cpus = 1`), and what each task spent outside its point.
//! The figure of docs/scale.md. Prints figures and asserts only that the
//! run completed; the behaviour is tested in tests/slurm.rs.
//!
//! `./x bench slurm_scale` (the release build `./x build` made);
//! TESTBED_SLURM_TASKS sets the array's size (200).

use std::time::Instant;

#[path = "../tests/common/mod.rs"]
mod common;
use common::slurm::{
    cluster, json, point_ids, private_dir, run_one_point_tasks, task_spans, testbed, text,
};

fn main() {
    let tasks: usize = std::env::var("TESTBED_SLURM_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    // `cargo bench` passes --bench; `cargo test --benches` would pass
    // nothing we measure with: run only when asked to measure.
    if !std::env::args().any(|a| a == "--bench") {
        println!("slurm_scale: run by `./x bench slurm_scale` (measures; takes minutes)");
        return;
    }
    let t = private_dir();
    let (_ct, c) = cluster(t.path());
    let started = Instant::now();
    let run = run_one_point_tasks(&c, t.path(), "slurm-scale", tasks);
    let makespan = started.elapsed().as_secs_f64();
    assert_eq!(json(&run.join("manifest.json"))["status"], "complete");
    assert_eq!(point_ids(&run).len(), tasks);
    // Per task: its testbed process's wall time (start-up, agent, storing)
    // beyond what its point itself took.
    let m = json(&run.join("manifest.json"));
    let mut overhead = Vec::new();
    let mut task_wall = 0.0;
    for task in m["inputs"]["slurm"]["tasks"].as_array().unwrap() {
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
    overhead.sort_by(f64::total_cmp);
    let mean = overhead.iter().sum::<f64>() / overhead.len() as f64;
    let p50 = overhead[overhead.len() / 2];
    let p95 = overhead[overhead.len() * 95 / 100];
    // From the first task's start to the last one's end: the array itself,
    // without the submitting host's build check and the final collect.
    let spans = task_spans(&run);
    let first = spans.values().map(|s| s.0).fold(f64::INFINITY, f64::min);
    let last = spans.values().map(|s| s.1).fold(0.0, f64::max);
    let array_s = last - first;
    println!(
        "slurm scale: {tasks} tasks on {} CPU(s): testbed run --wait {makespan:.1} s (build check, submit, run, collect), \
         the array {array_s:.1} s (first task start to last task end); \
         testbed per task: mean {mean:.3} s, p50 {p50:.3} s, p95 {p95:.3} s; \
         sum of task walls {task_wall:.1} s; collect alone {collect_s:.1} s; \
         Slurm dispatch and process start per task (array x slots - task walls) / tasks: {:.3} s",
        c.cpus,
        (array_s * c.cpus as f64 - task_wall) / tasks as f64
    );
}
