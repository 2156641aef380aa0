//! Runs programs joined by pipes (`a | b | c > out`), each in its own
//! contained process group, and records when each one exits. A single
//! program is a chain of one. Stages that overlap through pipes are timed
//! by these exit times: a stage "ends" when its process exits.

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use testbed_proc::{Group, RunError};

use crate::{AsamError, Result};

/// One program of a chain: argv and the Debian package to name when it is
/// missing.
#[derive(Debug, Clone)]
pub struct Step {
    pub argv: Vec<OsString>,
    pub package: &'static str,
    /// A file to read as standard input, for a program that reads only
    /// there (bamsormadup); the first step of a chain only.
    pub stdin: Option<std::path::PathBuf>,
}

impl Step {
    pub fn new<S: Into<OsString>>(
        package: &'static str,
        argv: impl IntoIterator<Item = S>,
    ) -> Step {
        Step {
            argv: argv.into_iter().map(Into::into).collect(),
            package,
            stdin: None,
        }
    }

    pub fn program(&self) -> String {
        self.argv
            .first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn shown(&self) -> String {
        self.argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// When the chain started and when each step exited, in seconds since the
/// workflow's origin.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    pub start: f64,
    pub ends: Vec<f64>,
    /// Each step's peak resident memory (its `wait4` ru_maxrss, which
    /// holds the largest of the processes it waited for).
    pub peaks: Vec<u64>,
}

/// The last 64 KiB of a stream, read on a thread so no pipe fills up.
fn tail_of(r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut r = r;
        let mut keep: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            keep.extend_from_slice(&buf[..n]);
            if keep.len() > 128 * 1024 {
                keep.drain(..keep.len() - 64 * 1024);
            }
        }
        String::from_utf8_lossy(&keep).into_owned()
    })
}

/// Runs `steps` joined by pipes; the last one's stdout goes to `out` (a
/// new file) or is discarded. Fails, killing the rest, when any step exits
/// non-zero or the chain outlives `timeout`; the error names the step and
/// ends with its stderr.
pub fn run(
    steps: &[Step],
    out: Option<&Path>,
    origin: Instant,
    timeout: Duration,
) -> Result<Timing> {
    if steps.is_empty() {
        return Err(AsamError::Invalid("an empty chain of programs".into()));
    }
    let start = origin.elapsed().as_secs_f64();
    let mut running: Vec<(Group, JoinHandle<String>)> = Vec::new();
    let mut previous = None;
    let mut last_output: Option<JoinHandle<String>> = None;
    for (i, step) in steps.iter().enumerate() {
        let (program, args) = step
            .argv
            .split_first()
            .ok_or_else(|| AsamError::Invalid("a step without a program".into()))?;
        let mut cmd = Command::new(program);
        cmd.args(args).stderr(Stdio::piped());
        cmd.stdin(match (previous.take(), &step.stdin) {
            (Some(_), Some(_)) => {
                return Err(AsamError::Invalid(format!(
                    "{}: a step inside a chain reads the previous one, not a file",
                    step.shown()
                )));
            }
            (Some(p), None) => Stdio::from(p),
            (None, Some(path)) => {
                Stdio::from(std::fs::File::open(path).map_err(|e| AsamError::io(path, e))?)
            }
            (None, None) => Stdio::null(),
        });
        if i + 1 < steps.len() {
            cmd.stdout(Stdio::piped());
        } else if let Some(path) = out {
            let f = std::fs::File::create_new(path).map_err(|e| AsamError::io(path, e))?;
            cmd.stdout(f);
        } else {
            // Kept for the error: some tools (the JVM) report a crash there.
            cmd.stdout(Stdio::piped());
        }
        let mut group = Group::spawn(&mut cmd).map_err(|e| match e {
            RunError::Spawn { source, .. } => AsamError::Spawn {
                tool: step.program(),
                package: step.package.into(),
                source,
            },
            e => AsamError::Invalid(e.to_string()),
        })?;
        let stdout = group.take_stdout();
        let last_stdout = if i + 1 < steps.len() {
            previous = stdout;
            None
        } else {
            stdout.map(tail_of)
        };
        let stderr = group
            .take_stderr()
            .map(tail_of)
            .unwrap_or_else(|| std::thread::spawn(String::new));
        running.push((group, stderr));
        if let Some(t) = last_stdout {
            last_output = Some(t);
        }
    }
    let deadline = Instant::now() + timeout;
    let mut ends: Vec<Option<f64>> = vec![None; steps.len()];
    while ends.iter().any(Option::is_none) {
        let mut failed = None;
        for (i, (group, _)) in running.iter_mut().enumerate() {
            if ends[i].is_some() {
                continue;
            }
            let status = group
                .try_wait()
                .map_err(|e| AsamError::Invalid(format!("wait for {}: {e}", steps[i].program())))?;
            let Some(status) = status else { continue };
            ends[i] = Some(origin.elapsed().as_secs_f64());
            if !status.success() {
                failed = Some((i, status));
                break;
            }
        }
        if let Some((i, status)) = failed {
            // Stop the others first: a reader blocked on this one's pipe
            // would otherwise keep its stderr thread waiting.
            let (_, stderr) = running.swap_remove(i);
            drop(running);
            let mut text = stderr.join().unwrap_or_default();
            if i + 1 == steps.len()
                && let Some(out) = last_output.and_then(|t| t.join().ok())
                && !out.trim().is_empty()
            {
                text.push_str(&out);
            }
            let tail: Vec<&str> = text.lines().rev().take(25).collect();
            return Err(AsamError::Tool {
                tool: steps[i].shown(),
                status: status.to_string(),
                stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            });
        }
        if Instant::now() > deadline {
            let pending: Vec<String> = steps
                .iter()
                .zip(&ends)
                .filter(|(_, e)| e.is_none())
                .map(|(s, _)| s.program())
                .collect();
            return Err(AsamError::Invalid(format!(
                "timed out after {timeout:?} waiting for {}",
                pending.join(", ")
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let peaks = running
        .iter()
        .map(|(g, _)| g.usage().map_or(0, |u| u.max_rss_bytes))
        .collect();
    for (_, stderr) in running {
        let _ = stderr.join();
    }
    if let Some(t) = last_output {
        let _ = t.join();
    }
    Ok(Timing {
        start,
        ends: ends.into_iter().flatten().collect(),
        peaks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Step {
        Step::new("dash", ["sh", "-c", script])
    }

    #[test]
    fn a_pipe_carries_data_and_each_exit_is_timed() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let origin = Instant::now();
        let t = run(
            &[
                sh("printf 'b\\na\\n'"),
                sh("sort; sleep 0.3"),
                sh("tr a-z A-Z"),
            ],
            Some(&out),
            origin,
            Duration::from_secs(20),
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "A\nB\n");
        assert_eq!(t.ends.len(), 3);
        // The sorter outlives the writer by its sleep.
        assert!(t.ends[1] - t.ends[0] >= 0.25, "{t:?}");
        // The last reader sees end of file only when the sorter's sleep
        // closes the pipe; which of the two exits is reaped first is the
        // kernel's race (0.312 s vs 0.317 s, once), so no order between them.
        assert!(t.ends[2] - t.ends[0] >= 0.25, "{t:?}");
        // The output file is new: a second run does not overwrite it.
        assert!(run(&[sh("true")], Some(&out), origin, Duration::from_secs(5)).is_err());
    }

    #[test]
    fn a_failing_step_is_named_with_its_stderr_and_stops_the_rest() {
        let started = Instant::now();
        let e = run(
            &[sh("sleep 30"), sh("echo broken >&2; exit 4")],
            None,
            Instant::now(),
            Duration::from_secs(60),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("exit 4") && e.contains("broken"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(20));
        let e = run(
            &[Step::new("nothing", ["/nonexistent/prog"])],
            None,
            Instant::now(),
            Duration::from_secs(5),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("apt-get install nothing"), "{e}");
    }

    #[test]
    fn a_chain_that_runs_too_long_is_stopped() {
        let e = run(
            &[sh("sleep 30")],
            None,
            Instant::now(),
            Duration::from_millis(300),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("timed out") && e.contains("sh"), "{e}");
    }
}
