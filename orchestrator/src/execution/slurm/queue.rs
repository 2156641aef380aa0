//! What Slurm says about an array's tasks: `sacct` where accounting
//! (slurmdbd) exists, else `scontrol show job`, which knows a finished
//! job until slurmctld forgets it (MinJobAge).

use std::collections::BTreeMap;
use std::process::Command;

use super::SlurmError;
use super::array::parse_task_list;

/// One array task as Slurm sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskState {
    /// PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    pub state: String,
    pub node: Option<String>,
    /// Why it waits, for a pending task.
    pub reason: Option<String>,
}

impl TaskState {
    /// Still to run or running: not to be submitted again.
    pub fn is_live(&self) -> bool {
        matches!(
            self.state.as_str(),
            "PENDING"
                | "RUNNING"
                | "CONFIGURING"
                | "COMPLETING"
                | "SUSPENDED"
                | "REQUEUED"
                | "REQUEUE_HOLD"
                | "REQUEUE_FED"
                | "RESIZING"
                | "SIGNALING"
                | "STAGE_OUT"
        )
    }
}

/// The tasks of array job `job_id` by task index; empty when Slurm no
/// longer knows the job.
pub fn array_tasks(job_id: &str) -> Result<BTreeMap<u32, TaskState>, SlurmError> {
    if let Some(tasks) = from_sacct(job_id)? {
        return Ok(tasks);
    }
    from_scontrol(job_id)
}

/// `None` when there is no accounting to ask.
fn from_sacct(job_id: &str) -> Result<Option<BTreeMap<u32, TaskState>>, SlurmError> {
    let out = Command::new("sacct")
        .args([
            "-n",
            "-P",
            "-X",
            "--format=JobID,State,NodeList,Reason",
            "-j",
            job_id,
        ])
        .output();
    let Ok(out) = out else {
        return Ok(None);
    };
    if !out.status.success() {
        // "Slurm accounting storage is disabled": ask slurmctld instead.
        return Ok(None);
    }
    Ok(Some(parse_sacct(
        &String::from_utf8_lossy(&out.stdout),
        job_id,
    )))
}

fn from_scontrol(job_id: &str) -> Result<BTreeMap<u32, TaskState>, SlurmError> {
    let out = Command::new("scontrol")
        .args(["-o", "show", "job", job_id])
        .output()
        .map_err(|e| SlurmError::Command {
            command: format!("scontrol -o show job {job_id}"),
            detail: e.to_string(),
        })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if stderr.contains("Invalid job id") {
            return Ok(BTreeMap::new());
        }
        return Err(SlurmError::Command {
            command: format!("scontrol -o show job {job_id}"),
            detail: stderr.trim().to_string(),
        });
    }
    Ok(parse_scontrol(&String::from_utf8_lossy(&out.stdout)))
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

fn node(text: Option<&str>) -> Option<String> {
    text.filter(|n| !n.is_empty() && *n != "(null)" && *n != "None assigned")
        .map(str::to_string)
}

/// One line per job record (`scontrol -o`): a started task alone, the
/// still-pending ones as a list (`ArrayTaskId=2-3%2`).
pub fn parse_scontrol(text: &str) -> BTreeMap<u32, TaskState> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let (Some(ids), Some(state)) = (field(line, "ArrayTaskId"), field(line, "JobState")) else {
            continue;
        };
        let st = TaskState {
            state: state.to_string(),
            node: node(field(line, "NodeList")),
            reason: field(line, "Reason")
                .filter(|r| *r != "None")
                .map(str::to_string),
        };
        for t in parse_task_list(ids).unwrap_or_default() {
            out.insert(t, st.clone());
        }
    }
    out
}

/// `JobID|State|NodeList|Reason` lines, JobID `123_4` or `123_[5-7%2]`.
pub fn parse_sacct(text: &str, job_id: &str) -> BTreeMap<u32, TaskState> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split('|').collect();
        let [id, state, nodes, reason, ..] = cols[..] else {
            continue;
        };
        let Some(tasks) = id.strip_prefix(job_id).and_then(|r| r.strip_prefix('_')) else {
            continue;
        };
        let tasks = tasks.trim_start_matches('[').trim_end_matches(']');
        // "CANCELLED by 0" is CANCELLED.
        let state = state.split_whitespace().next().unwrap_or(state);
        let st = TaskState {
            state: state.to_string(),
            node: node(Some(nodes)),
            reason: Some(reason)
                .filter(|r| !r.is_empty() && *r != "None")
                .map(str::to_string),
        };
        for t in parse_task_list(tasks).unwrap_or_default() {
            out.insert(t, st.clone());
        }
    }
    out
}

/// The cluster's MaxArraySize (array indices stay below it): from
/// `scontrol show config`, Slurm's default 1001 if it does not say.
pub fn max_array_size() -> Result<u32, SlurmError> {
    let out = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .map_err(|e| SlurmError::Command {
            command: "scontrol show config".into(),
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(SlurmError::Command {
            command: "scontrol show config".into(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(parse_max_array_size(&String::from_utf8_lossy(&out.stdout)).unwrap_or(1001))
}

fn parse_max_array_size(config: &str) -> Option<u32> {
    config.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "MaxArraySize").then(|| v.trim().parse().ok())?
    })
}

/// `sbatch --parsable` prints "JOBID" or "JOBID;CLUSTER".
pub fn parse_job_id(stdout: &str) -> Option<String> {
    let id = stdout.trim().split(';').next()?.trim();
    (!id.is_empty() && id.chars().all(|c| c.is_ascii_digit())).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scontrol_lines_give_each_task() {
        let text = "JobId=7 ArrayJobId=5 ArrayTaskId=2-3%2 JobName=t UserId=root(0) JobState=PENDING Reason=JobArrayTaskLimit Dependency=(null) NodeList=(null)\n\
                    JobId=6 ArrayJobId=5 ArrayTaskId=1 JobName=t JobState=RUNNING Reason=None NodeList=vm\n\
                    JobId=5 ArrayJobId=5 ArrayTaskId=0 JobName=t JobState=COMPLETED Reason=None NodeList=vm\n";
        let t = parse_scontrol(text);
        assert_eq!(t.len(), 4);
        assert_eq!(t[&0].state, "COMPLETED");
        assert_eq!(t[&1].node.as_deref(), Some("vm"));
        assert!(t[&1].is_live() && !t[&0].is_live());
        assert_eq!(t[&3].reason.as_deref(), Some("JobArrayTaskLimit"));
        assert_eq!(t[&3].node, None);
    }

    #[test]
    fn sacct_lines_give_each_task() {
        let text = "12_0|COMPLETED|n1|None\n12_1|CANCELLED by 0|n2|None\n12_[2-3]|PENDING|None assigned|Resources\n13_0|RUNNING|n1|None\n";
        let t = parse_sacct(text, "12");
        assert_eq!(t.len(), 4);
        assert_eq!(t[&1].state, "CANCELLED");
        assert_eq!(t[&2].reason.as_deref(), Some("Resources"));
        assert_eq!(t[&2].node, None);
    }

    #[test]
    fn max_array_size_from_the_config() {
        let text = "MaxArraySize            = 1001\nMaxJobCount             = 10000\n";
        assert_eq!(parse_max_array_size(text), Some(1001));
        assert_eq!(parse_max_array_size("MaxJobCount = 5\n"), None);
    }

    #[test]
    fn job_ids_from_sbatch() {
        assert_eq!(parse_job_id("123\n").as_deref(), Some("123"));
        assert_eq!(parse_job_id("123;cluster\n").as_deref(), Some("123"));
        assert_eq!(parse_job_id("Submitted batch job 5"), None);
    }
}
