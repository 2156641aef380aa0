//! Running a child process to completion with a deadline, stdout and stderr
//! captured. The agent runs its helper binaries this way and testbed-flight
//! its pyarrow scripts; both read JSON lines from what this returns.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a child that exited left behind.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("spawn {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("wait for {command}: {source}")]
    Wait {
        command: String,
        source: std::io::Error,
    },
    #[error("{command} timed out after {timeout:?}")]
    TimedOut { command: String, timeout: Duration },
}

const POLL: Duration = Duration::from_millis(10);

/// Runs `cmd` until it exits or `timeout` passes (then it is killed).
/// Both pipes are drained on their own threads so a chatty child cannot
/// block on a full pipe while we wait.
pub fn run_captured(cmd: &mut Command, timeout: Duration) -> Result<Finished, RunError> {
    let command = format!("{cmd:?}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| RunError::Spawn {
            command: command.clone(),
            source,
        })?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = wait_until(&mut child, Instant::now() + timeout).map_err(|e| match e {
        Some(source) => RunError::Wait {
            command: command.clone(),
            source,
        },
        None => RunError::TimedOut {
            command: command.clone(),
            timeout,
        },
    })?;
    Ok(Finished {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// The exit status, or `Err(None)` once `deadline` passed (child killed).
fn wait_until(child: &mut Child, deadline: Instant) -> Result<ExitStatus, Option<std::io::Error>> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(None);
            }
            Err(e) => return Err(Some(e)),
        }
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut s);
        }
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_both_streams_and_the_status() {
        let f = run_captured(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!((f.stdout.as_str(), f.stderr.as_str()), ("out\n", "err\n"));
        assert_eq!(f.status.code(), Some(3));
    }

    #[test]
    fn a_child_past_its_deadline_is_killed() {
        let started = Instant::now();
        let e =
            run_captured(Command::new("sleep").arg("30"), Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, RunError::TimedOut { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_missing_program_is_a_spawn_error_naming_it() {
        let e = run_captured(
            &mut Command::new("/nonexistent/prog"),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/prog"), "{e}");
    }
}
