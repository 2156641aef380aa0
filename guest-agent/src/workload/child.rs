//! Helper binaries the agent runs as child processes (testbed-flight,
//! testbed-asam), so the agent itself links none of their dependencies:
//! finding them, and running one to completion for its JSON lines.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::WorkloadError;

/// `$<env>`, then `name` on PATH, then /bin/`name`.
pub fn find_binary(env: &str, name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let p = Path::new("/bin").join(name);
        p.is_file().then_some(p)
    })
}

fn other(msg: String) -> WorkloadError {
    WorkloadError::Other(msg)
}

/// Runs `bin args` (killed after `timeout`) and returns the JSON objects it
/// printed, one per line; `what` names it in errors, which carry stderr.
pub fn run_json(
    bin: &Path,
    args: &[String],
    timeout: Duration,
    what: &str,
) -> Result<Vec<serde_json::Value>, WorkloadError> {
    let mut child = Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| WorkloadError::io(format!("spawn {} ({what})", bin.display()), e))?;
    let reader = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(other(format!("{what} timed out after {timeout:?}")));
            }
            Err(e) => return Err(WorkloadError::io(format!("wait for the {what}"), e)),
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !status.success() {
        return Err(other(format!("{what} failed ({status}): {}", err.trim())));
    }
    out.lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(|l| {
            serde_json::from_str(l)
                .map_err(|e| other(format!("{what} printed bad JSON {l:?}: {e}")))
        })
        .collect()
}
