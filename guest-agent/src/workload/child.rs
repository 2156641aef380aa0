//! Helper binaries the agent runs as child processes (testbed-flight,
//! testbed-asam), so none of their code (arrow, tonic, tokio) runs in the
//! agent: finding them, and running one to completion for its JSON lines,
//! read into the line types the helper crates define and print.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use std::io::Write;

use serde::Serialize;
use serde::de::DeserializeOwned;

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

/// A fresh scratch directory `<temp dir>/<prefix>XXXXXX` that only we can
/// enter (mkdtemp, mode 0700: nobody can pre-create it or plant symlinks
/// in it), removed when the value is dropped.
pub fn private_dir(prefix: &str) -> Result<tempfile::TempDir, WorkloadError> {
    private_dir_in(&std::env::temp_dir(), prefix)
}

/// [`private_dir`] under `parent` (which must exist).
pub fn private_dir_in(parent: &Path, prefix: &str) -> Result<tempfile::TempDir, WorkloadError> {
    use std::os::unix::fs::PermissionsExt;
    // tempfile leaves the mode to the umask (often 0755).
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(parent)
        .map_err(|e| {
            WorkloadError::io(
                format!(
                    "create a private {prefix}* directory in {}",
                    parent.display()
                ),
                e,
            )
        })
}

/// Runs `bin args` (killed after `timeout`) and returns the JSON objects it
/// printed, one per line, each read as a `T` (the helper's line type);
/// other output lines are skipped. `what` names it in errors, which carry
/// stderr.
pub fn run_json<T: DeserializeOwned>(
    bin: &Path,
    args: &[String],
    timeout: Duration,
    what: &str,
) -> Result<Vec<T>, WorkloadError> {
    let done = testbed_proc::run_captured(Command::new(bin).args(args), timeout)
        .map_err(|e| other(format!("{what}: {e}")))?;
    if !done.status.success() {
        return Err(other(format!(
            "{what} failed ({}): {}",
            done.status,
            done.stderr.trim()
        )));
    }
    json_lines(&done.stdout, what)
}

/// `request` as JSON in a private temporary file (removed on drop), for
/// `<helper> request FILE`: the helper reads the same type
/// (`testbed_vocab::request`), so the agent builds no command line by hand.
pub fn request_file<R: Serialize>(
    request: &R,
    what: &str,
) -> Result<tempfile::NamedTempFile, WorkloadError> {
    let mut file = tempfile::Builder::new()
        .prefix("testbed-request-")
        .suffix(".json")
        .tempfile()
        .map_err(|e| other(format!("{what}: a file for its request: {e}")))?;
    serde_json::to_writer(&mut file, request)
        .map_err(|e| other(format!("{what}: writing its request: {e}")))?;
    file.flush()
        .map_err(|e| other(format!("{what}: writing its request: {e}")))?;
    Ok(file)
}

/// `<helper> request FILE`'s arguments.
pub fn request_args(file: &tempfile::NamedTempFile) -> [String; 2] {
    [
        testbed_vocab::request::SUBCOMMAND.to_string(),
        file.path().display().to_string(),
    ]
}

/// Runs `bin request FILE` with `request` in FILE ([`request_file`]) and
/// returns the JSON lines it printed, as [`run_json`].
pub fn run_request<R: Serialize, T: DeserializeOwned>(
    bin: &Path,
    request: &R,
    timeout: Duration,
    what: &str,
) -> Result<Vec<T>, WorkloadError> {
    let file = request_file(request, what)?;
    run_json(bin, &request_args(&file), timeout, what)
}

/// The lines of `out` that hold a JSON object, each read as a `T`.
pub fn json_lines<T: DeserializeOwned>(out: &str, what: &str) -> Result<Vec<T>, WorkloadError> {
    out.lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(|l| json_line(l, what))
        .collect()
}

/// One line a helper printed, read as a `T`.
pub fn json_line<T: DeserializeOwned>(line: &str, what: &str) -> Result<T, WorkloadError> {
    serde_json::from_str(line.trim())
        .map_err(|e| other(format!("{what} printed a bad line {:?}: {e}", line.trim())))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Line {
        n: u32,
    }

    #[test]
    fn a_private_dir_is_ours_only_and_removed_on_drop() {
        use std::os::unix::fs::PermissionsExt;
        let d = private_dir("testbed-child-test-").unwrap();
        let path = d.path().to_path_buf();
        assert!(
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("testbed-child-test-")
        );
        let mode = std::fs::symlink_metadata(&path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        drop(d);
        assert!(!path.exists());
    }

    #[test]
    fn json_lines_skips_other_output_and_names_a_bad_line() {
        let out = "starting\n{\"n\": 1}\n  {\"n\": 2}\n\n";
        let lines: Vec<Line> = json_lines(out, "helper").unwrap();
        assert_eq!(lines, [Line { n: 1 }, Line { n: 2 }]);
        let e = json_lines::<Line>("{\"n\": -1}\n", "helper").unwrap_err();
        assert!(e.to_string().contains("helper printed a bad line"), "{e}");
    }
}
