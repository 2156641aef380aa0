//! `testbed … | head -1`: a reader that goes away does not make the CLI
//! panic ("failed printing to stdout: Broken pipe"); it stops quietly
//! with status 141 (128 + SIGPIPE), as `cat` or `seq` would.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `testbed ARGS` with stdout a pipe whose read end is already closed, so
/// its first write fails with EPIPE whatever the size of its output.
fn into_closed_pipe(args: &[&str], cache: &Path) -> Output {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills both descriptors, owned right below.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors from pipe2, each owned once.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Command::new(env!("CARGO_BIN_EXE_testbed"))
        .args(args)
        .current_dir(repo())
        .env("TESTBED_CACHE", cache)
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("testbed {args:?}: {e}"))
}

#[test]
fn printing_commands_stop_quietly_on_a_closed_pipe() {
    use std::os::unix::process::ExitStatusExt;
    let cache = tempfile::tempdir().unwrap();
    for args in [
        &["list"][..],
        &["kernel", "list"],
        &["validate", "experiments/smoke.toml"],
        &["cache", "list"],
    ] {
        let out = into_closed_pipe(args, cache.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "testbed {args:?} on a closed pipe said: {stderr}"
        );
        assert!(stderr.is_empty(), "testbed {args:?}: stderr {stderr:?}");
        assert_eq!(
            out.status.signal(),
            None,
            "testbed {args:?}: {}",
            out.status
        );
        assert_eq!(
            out.status.code(),
            Some(141),
            "testbed {args:?}: {} (stderr {stderr:?})",
            out.status
        );
    }
}

#[test]
fn piped_into_head_it_prints_the_first_line_and_no_panic() {
    let cache = tempfile::tempdir().unwrap();
    // As a user types it; the whole list may fit in the pipe before head
    // exits, so the status is 0 or the quiet 141, never 101 (a panic).
    let out = Command::new("bash")
        .arg("-c")
        .arg("set -o pipefail; \"$0\" list | head -1")
        .arg(env!("CARGO_BIN_EXE_testbed"))
        .current_dir(repo())
        .env("TESTBED_CACHE", cache.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        matches!(out.status.code(), Some(0 | 141)),
        "{} {stderr}",
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout:?}");
}
