//! A private one-node Slurm for the tests and the slurm_scale benchmark,
//! and readers of the run directories it leaves.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use testbed::execution::slurm::local::LocalSlurm;

/// A temporary directory only we can enter.
pub fn private_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    t
}

/// A cluster in its own temporary directory: munged wants every
/// directory above its socket searchable by all, so not under the
/// tests' 0700 directories (LocalSlurm keeps its key and state in a 0700
/// subdirectory).
pub fn cluster(t: &Path) -> (tempfile::TempDir, LocalSlurm) {
    cluster_with(t, 100_001)
}

/// A cluster whose arrays take indices below `max_array_size`.
pub fn cluster_with(_t: &Path, max_array_size: u32) -> (tempfile::TempDir, LocalSlurm) {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let c = LocalSlurm::start_with(&t.path().join("slurm"), max_array_size)
        .unwrap_or_else(|e| panic!("local Slurm did not start: {e}"));
    (t, c)
}

/// The testbed CLI with the cluster's environment.
pub fn testbed(c: &LocalSlurm, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_testbed"));
    cmd.args(args);
    for (k, v) in c.env() {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// stdout and stderr, as text.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A JSON file, or a panic naming it.
pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// A spec of the fault workload's deterministic samples mode: point k
/// sends `size` values 0..size after sleeping `after_s`.
pub fn fault_spec(dir: &Path, name: &str, slurm: &str, sweep: &str, after_s: f64) -> PathBuf {
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

/// (start, end) in seconds of each task, from its manifest.
pub fn task_spans(run: &Path) -> BTreeMap<u64, (f64, f64)> {
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

/// The ids of the run's points that passed, sorted.
pub fn point_ids(run: &Path) -> Vec<String> {
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

/// An array of `tasks` one-point tasks (point k sends k samples, host
/// executor, `cpus = 1`), run with `testbed run --wait` into `dir/run`;
/// the run directory, once it succeeded.
pub fn run_one_point_tasks(c: &LocalSlurm, dir: &Path, name: &str, tasks: usize) -> PathBuf {
    let sizes: Vec<String> = (1..=tasks).map(|i| i.to_string()).collect();
    let spec = fault_spec(
        dir,
        name,
        "chunk = 1\ncpus = 1",
        &format!("size = [{}]", sizes.join(", ")),
        0.0,
    );
    let run = dir.join("run");
    let o = testbed(
        c,
        &[
            "run",
            spec.to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
            "--wait",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    run
}
