//! Helper binaries the agent runs as child processes (testbed-flight,
//! testbed-asam), so the agent itself links none of their dependencies:
//! finding them, and running one to completion for its JSON lines.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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
    let done = testbed_proc::run_captured(Command::new(bin).args(args), timeout)
        .map_err(|e| other(format!("{what}: {e}")))?;
    if !done.status.success() {
        return Err(other(format!(
            "{what} failed ({}): {}",
            done.status,
            done.stderr.trim()
        )));
    }
    done.stdout
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(|l| {
            serde_json::from_str(l)
                .map_err(|e| other(format!("{what} printed bad JSON {l:?}: {e}")))
        })
        .collect()
}

/// For tests: the helper binary built in this workspace: `$<env>`, else the
/// debug or release build in `$CARGO_TARGET_DIR` or the workspace `target/`.
#[cfg(test)]
pub fn built_binary(env: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dirs: Vec<PathBuf> = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain([workspace.join("target")])
        .collect();
    for d in &dirs {
        for profile in ["debug", "release"] {
            let p = d.join(profile).join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "{name} binary not found in {dirs:?}: build it first with \
         `cargo build -p {name}` (same CARGO_TARGET_DIR) or set {env}"
    );
}
