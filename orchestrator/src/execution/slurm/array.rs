//! A Slurm run's own files: its tasks and submissions (array.json), the
//! batch script, and where each task writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::SlurmError;
use crate::planning::spec::{AccelChoice, ExecutorKind, SlurmSection};

/// The Slurm part of a run directory.
#[derive(Debug, Clone)]
pub struct ArrayDir {
    pub root: PathBuf,
}

impl ArrayDir {
    pub fn new(root: &Path) -> ArrayDir {
        ArrayDir {
            root: root.to_path_buf(),
        }
    }
    pub fn slurm(&self) -> PathBuf {
        self.root.join("slurm")
    }
    pub fn state_file(&self) -> PathBuf {
        self.slurm().join("array.json")
    }
    pub fn script(&self) -> PathBuf {
        self.slurm().join("array.sh")
    }
    pub fn logs(&self) -> PathBuf {
        self.slurm().join("logs")
    }
    pub fn task_dir(&self, task: u32) -> PathBuf {
        self.slurm().join("tasks").join(format!("t{task:04}"))
    }
    /// Whether `root` is a run directory of the Slurm executor.
    pub fn is_array(root: &Path) -> bool {
        ArrayDir::new(root).state_file().is_file()
    }
    pub fn read(&self) -> Result<ArrayState, SlurmError> {
        let path = self.state_file();
        let text = std::fs::read(&path).map_err(|e| SlurmError::File {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        serde_json::from_slice(&text).map_err(|e| SlurmError::File {
            path,
            detail: format!("not a testbed array state: {e}"),
        })
    }
    pub fn write(&self, state: &ArrayState) -> Result<(), SlurmError> {
        let path = self.state_file();
        let text = serde_json::to_vec_pretty(state).map_err(|e| SlurmError::File {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        crate::host::fsutil::write_atomic(&path, &text).map_err(|e| SlurmError::File {
            path,
            detail: e.to_string(),
        })
    }
}

/// What the tasks of one run share, and every submission of its array.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArrayState {
    pub experiment: String,
    /// The whole run's id (every task writes it into its samples).
    pub run_id: String,
    pub spec_sha256: String,
    /// How each task runs its points.
    pub task_executor: ExecutorKind,
    pub accel: Option<AccelChoice>,
    pub fail_fast: bool,
    /// The binary every task runs (on a shared path).
    pub testbed: PathBuf,
    /// Every point of the plan, in plan order.
    pub planned: Vec<String>,
    /// Task i runs `tasks[i]`.
    pub tasks: Vec<Vec<String>>,
    pub submissions: Vec<Submission>,
    /// Environment every task starts with: where the inputs the
    /// submitting host built are.
    pub env: BTreeMap<String, String>,
}

impl ArrayState {
    /// The job that last ran (or runs) task `task`.
    pub fn job_of(&self, task: u32) -> Option<&Submission> {
        self.submissions
            .iter()
            .rev()
            .find(|s| s.tasks.contains(&task))
    }
}

/// One `sbatch` of some of the tasks. Slurm numbers an array's tasks
/// below its MaxArraySize, so task `t` runs as array index `t - offset`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Submission {
    pub job_id: String,
    pub tasks: Vec<u32>,
    #[serde(default)]
    pub offset: u32,
    pub at: String,
    pub argv: Vec<String>,
}

/// The tasks in windows that fit arrays of `max_array_size` indices:
/// (offset, tasks) per sbatch.
pub fn windows(tasks: &[u32], max_array_size: u32) -> Vec<(u32, Vec<u32>)> {
    let size = max_array_size.max(1);
    let mut out: Vec<(u32, Vec<u32>)> = Vec::new();
    let mut sorted = tasks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    for t in sorted {
        let offset = t / size * size;
        match out.last_mut() {
            Some((o, ts)) if *o == offset => ts.push(t),
            _ => out.push((offset, vec![t])),
        }
    }
    out
}

/// The point ids in plan order, `chunk` per task.
pub fn chunk_points(ids: &[String], chunk: u32) -> Vec<Vec<String>> {
    ids.chunks(chunk.max(1) as usize)
        .map(<[String]>::to_vec)
        .collect()
}

/// `--array` for these task indices: ranges where they are consecutive,
/// and `%N` for at most N at once.
pub fn array_spec(tasks: &[u32], max_parallel: Option<u32>) -> String {
    let mut sorted = tasks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    let mut out = parts.join(",");
    if let Some(n) = max_parallel {
        out.push_str(&format!("%{n}"));
    }
    out
}

/// Task indices of an `--array`-style list ("0-3,7,9-10%2"), as Slurm
/// prints them for pending array tasks.
pub fn parse_task_list(text: &str) -> Option<Vec<u32>> {
    let list = text.split('%').next()?;
    let mut out = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        // "1-9:2" steps too.
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (r, s.parse::<u32>().ok()?),
            None => (part, 1),
        };
        match range.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?);
                if b < a || step == 0 || b - a > 1_000_000 {
                    return None;
                }
                out.extend((a..=b).step_by(step as usize));
            }
            None => out.push(range.parse().ok()?),
        }
    }
    Some(out)
}

/// Resources per task: the spec's `[slurm]`, else what the points need.
pub struct Resources {
    pub cpus: u32,
    pub memory_mib: Option<u64>,
}

pub fn resources(s: &SlurmSection, executor: ExecutorKind, vcpus: u32, vm_mib: u64) -> Resources {
    let vm = executor == ExecutorKind::Qemu;
    Resources {
        cpus: s.cpus.unwrap_or(if vm { vcpus } else { 1 }),
        // QEMU's own memory and the testbed's on top of the guest's.
        memory_mib: s.memory.map(|m| m.mib()).or(vm.then_some(vm_mib + 512)),
    }
}

/// A word for a shell script, single-quoted.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The batch script: sbatch options, the tasks' environment, and the one
/// command every task runs.
pub fn batch_script(
    dir: &ArrayDir,
    state: &ArrayState,
    s: &SlurmSection,
    res: &Resources,
) -> String {
    let mut lines = vec![
        "#!/bin/bash".to_string(),
        format!("#SBATCH --job-name=testbed-{}", state.experiment),
        format!("#SBATCH --output={}/%A_%a.out", dir.logs().display()),
        format!("#SBATCH --cpus-per-task={}", res.cpus),
    ];
    if let Some(m) = res.memory_mib {
        lines.push(format!("#SBATCH --mem={m}M"));
    }
    if let Some(t) = s.time {
        lines.push(format!("#SBATCH --time={}", t.0.as_secs().div_ceil(60)));
    }
    if let Some(p) = &s.partition {
        lines.push(format!("#SBATCH --partition={p}"));
    }
    if let Some(c) = &s.constraint {
        lines.push(format!("#SBATCH --constraint={c}"));
    }
    for a in &s.sbatch_args {
        lines.push(format!("#SBATCH {a}"));
    }
    lines.push(
        "# Written by `testbed run`: each array task runs its share of the points\n\
         # (slurm/array.json) into slurm/tasks/tNNNN with the inputs the submitting\n\
         # host built; `testbed collect` merges them."
            .into(),
    );
    lines.push("set -eu".into());
    for (k, v) in &state.env {
        lines.push(format!("export {k}={}", quote(v)));
    }
    // sbatch --export sets TESTBED_TASK_OFFSET for arrays after the first.
    lines.push(format!(
        "exec {} slurm-task {}",
        quote(&state.testbed.to_string_lossy()),
        quote(&dir.root.to_string_lossy())
    ));
    lines.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_lists_round_trip() {
        assert_eq!(array_spec(&[0, 1, 2, 3, 7, 9, 10], Some(2)), "0-3,7,9-10%2");
        assert_eq!(array_spec(&[5], None), "5");
        assert_eq!(
            parse_task_list("0-3,7,9-10%2"),
            Some(vec![0, 1, 2, 3, 7, 9, 10])
        );
        assert_eq!(parse_task_list("1-7:3"), Some(vec![1, 4, 7]));
        assert_eq!(parse_task_list("3-1"), None);
        assert_eq!(parse_task_list("x"), None);
    }

    #[test]
    fn tasks_past_the_array_size_go_in_further_arrays_with_an_offset() {
        let w = windows(&[0, 1, 2, 3, 7, 1000, 1001, 2500], 1000);
        assert_eq!(
            w,
            [
                (0, vec![0, 1, 2, 3, 7]),
                (1000, vec![1000, 1001]),
                (2000, vec![2500])
            ]
        );
        assert_eq!(windows(&[3, 1], 1001), [(0, vec![1, 3])]);
    }

    #[test]
    fn points_are_chunked_in_plan_order() {
        let ids: Vec<String> = (0..5).map(|i| format!("p{i}")).collect();
        let c = chunk_points(&ids, 2);
        assert_eq!(c, [vec!["p0", "p1"], vec!["p2", "p3"], vec!["p4"]]);
    }

    #[test]
    fn the_script_quotes_paths_and_carries_the_resources() {
        let dir = ArrayDir::new(Path::new("/shared/it's here"));
        let state = ArrayState {
            experiment: "e".into(),
            run_id: "r".into(),
            spec_sha256: String::new(),
            task_executor: ExecutorKind::Host,
            accel: None,
            fail_fast: false,
            testbed: "/opt/testbed".into(),
            planned: vec![],
            tasks: vec![],
            submissions: vec![],
            env: [("TESTBED_AGENT".to_string(), "/c/agent".to_string())].into(),
        };
        let s = SlurmSection {
            partition: Some("nvme".into()),
            time: Some(crate::host::units::Span(std::time::Duration::from_secs(90))),
            ..SlurmSection::default()
        };
        let res = resources(&s, ExecutorKind::Qemu, 2, 1024);
        let text = batch_script(&dir, &state, &s, &res);
        assert!(text.contains("#SBATCH --cpus-per-task=2\n"), "{text}");
        assert!(text.contains("#SBATCH --mem=1536M\n"), "{text}");
        assert!(text.contains("#SBATCH --time=2\n"), "{text}");
        assert!(text.contains("#SBATCH --partition=nvme\n"), "{text}");
        assert!(text.contains("export TESTBED_AGENT='/c/agent'\n"), "{text}");
        assert!(
            text.ends_with("exec '/opt/testbed' slurm-task '/shared/it'\\''s here'\n"),
            "{text}"
        );
    }
}
