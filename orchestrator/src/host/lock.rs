//! Advisory locks between testbed processes on one machine: flock(2) on a
//! lock file. The kernel drops a lock when its holder exits, however it
//! exits, so a killed run never leaves a stale lock. The holder of an
//! exclusive lock writes its pid into the file, so a process that is
//! refused or has to wait can say who holds it.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One holder: writers (a run, a build, an install).
    Exclusive,
    /// Any number of holders, no exclusive one.
    Shared,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("lock file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} is in use by {}", holder_text(*pid))]
    Busy {
        what: String,
        path: PathBuf,
        pid: Option<u32>,
    },
}

/// "pid N", or a vaguer phrase when the holder did not say (a shared
/// holder, or one that has not written its pid yet).
pub fn holder_text(pid: Option<u32>) -> String {
    match pid {
        Some(p) => format!("pid {p}"),
        None => "another process".into(),
    }
}

/// A held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct Lock {
    flock: Option<Flock<File>>,
    path: PathBuf,
    mode: Mode,
}

impl Lock {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if let Some(f) = self.flock.take() {
            if self.mode == Mode::Exclusive {
                // Best effort: an empty file names no holder; a stale pid
                // would only be shown if the next holder is a shared one.
                let _ = f.set_len(0);
            }
            // Dropping the Flock unlocks and closes.
            drop(f);
        }
    }
}

/// Takes the lock now or fails with `Busy`, naming the holder.
pub fn try_lock(path: &Path, mode: Mode, what: &str) -> Result<Lock, LockError> {
    match acquire(path, mode, false)? {
        Ok(lock) => Ok(lock),
        Err(()) => Err(LockError::Busy {
            what: what.to_string(),
            path: path.to_path_buf(),
            pid: holder_after_refusal(path),
        }),
    }
}

/// Takes the lock, waiting as long as it takes; if it has to wait, says so
/// once through `notify` ("waiting for WHAT: in use by pid N").
pub fn lock(
    path: &Path,
    mode: Mode,
    what: &str,
    notify: &mut dyn FnMut(&str),
) -> Result<Lock, LockError> {
    if let Ok(lock) = acquire(path, mode, false)? {
        return Ok(lock);
    }
    let holder = holder_text(holder_after_refusal(path));
    notify(&format!("waiting for {what}: in use by {holder}"));
    match acquire(path, mode, true)? {
        Ok(lock) => Ok(lock),
        // A blocking flock does not report "would block".
        Err(()) => Err(LockError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other("flock refused a blocking request"),
        }),
    }
}

/// As `lock`, saying on stderr that it waits: for callers without a
/// progress channel of their own.
pub fn lock_or_wait(path: &Path, mode: Mode, what: &str) -> Result<Lock, LockError> {
    lock(path, mode, what, &mut |m| eprintln!("[testbed] {m}"))
}

/// The pid an exclusive holder wrote, if that process is still alive.
pub fn holder(path: &Path) -> Option<u32> {
    let mut text = String::new();
    File::open(path).ok()?.read_to_string(&mut text).ok()?;
    let pid: u32 = text.trim().parse().ok()?;
    Path::new("/proc")
        .join(pid.to_string())
        .exists()
        .then_some(pid)
}

/// The holder right after a refusal: it may not have written its pid yet.
fn holder_after_refusal(path: &Path) -> Option<u32> {
    for _ in 0..10 {
        if let Some(p) = holder(path) {
            return Some(p);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Ok(Ok(lock)) when taken, Ok(Err(())) when held elsewhere (non-blocking).
fn acquire(path: &Path, mode: Mode, block: bool) -> Result<Result<Lock, ()>, LockError> {
    let io = |source: std::io::Error| LockError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(io)?;
    let arg = match (mode, block) {
        (Mode::Exclusive, false) => FlockArg::LockExclusiveNonblock,
        (Mode::Exclusive, true) => FlockArg::LockExclusive,
        (Mode::Shared, false) => FlockArg::LockSharedNonblock,
        (Mode::Shared, true) => FlockArg::LockShared,
    };
    let flock = loop {
        match Flock::lock(file, arg) {
            Ok(f) => break f,
            Err((f, Errno::EINTR)) => file = f,
            Err((_, Errno::EWOULDBLOCK)) if !block => return Ok(Err(())),
            Err((_, e)) => return Err(io(std::io::Error::from(e))),
        }
    };
    if mode == Mode::Exclusive {
        let pid = format!("{}\n", std::process::id());
        flock
            .set_len(0)
            .and_then(|()| flock.write_all_at(pid.as_bytes(), 0))
            .map_err(io)?;
    }
    Ok(Ok(Lock {
        flock: Some(flock),
        path: path.to_path_buf(),
        mode,
    }))
}

/// Other processes that hold a lock, for tests across modules.
#[cfg(test)]
pub(crate) mod test_support {
    use std::io::{BufRead, BufReader};
    use std::path::Path;
    use std::process::{Child, Command, Stdio};

    use super::tests::HELD;

    /// The name libtest runs a unit test by, for a child process re-running
    /// this binary with `--exact`: `module_path!()` of the test's module
    /// without the crate (`host::lock::tests`), then the test. Follows a
    /// module that moves, where a written-out name would go stale.
    pub fn unit_test_name(module_path: &str, test: &str) -> String {
        let within_crate = module_path.split_once("::").map_or("", |(_, m)| m);
        format!("{within_crate}::{test}")
    }

    /// This test binary, re-run as a process that takes the lock on `path`
    /// with this module and holds it until dropped.
    pub struct Holder {
        child: Child,
    }

    impl Holder {
        pub fn exclusive(path: &Path) -> Holder {
            // Still runs if cargo rebuilt the binary meanwhile (not a host
            // tool: this very test binary).
            let me = Path::new("/proc/self/exe");
            let mut child = Command::new(me)
                .args([
                    "--exact",
                    &unit_test_name(
                        &module_path!().replace("::test_support", "::tests"),
                        "hold_lock_in_child",
                    ),
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(super::tests::HOLD_ENV, path)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("re-run the test binary");
            let out = child.stdout.take().expect("piped stdout");
            let mut lines = BufReader::new(out).lines();
            loop {
                match lines.next() {
                    // libtest prints the test's name on the same line.
                    Some(Ok(l)) if l.contains(HELD) => break,
                    Some(Ok(_)) => {}
                    other => panic!("lock holder ended before taking the lock: {other:?}"),
                }
            }
            Holder { child }
        }

        pub fn pid(&self) -> u32 {
            self.child.id()
        }

        /// Ends the holder (closing its stdin) and waits for it.
        pub fn release(mut self) {
            self.stop();
        }

        /// SIGKILLs the holder and reaps it.
        pub fn kill(mut self) {
            let _ = self.child.kill();
            self.stop();
        }

        fn stop(&mut self) {
            drop(self.child.stdin.take());
            let _ = self.child.wait();
        }
    }

    impl Drop for Holder {
        fn drop(&mut self) {
            let _ = self.child.kill();
            self.stop();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::mpsc;

    pub(crate) const HOLD_ENV: &str = "TESTBED_TEST_HOLD_LOCK";
    /// What the holder prints once it has the lock.
    pub(crate) const HELD: &str = "TESTBED-LOCK-HELD";

    /// Not a test: the child `test_support::Holder` runs. Takes the lock on
    /// $TESTBED_TEST_HOLD_LOCK, says so, and keeps it until stdin closes.
    #[test]
    #[ignore = "helper process for the lock tests, run by them"]
    fn hold_lock_in_child() {
        let Some(path) = std::env::var_os(HOLD_ENV) else {
            return;
        };
        let _l = try_lock(Path::new(&path), Mode::Exclusive, "test").unwrap();
        println!("{HELD}");
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    }

    #[test]
    fn exclusive_excludes_and_shared_shares() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("sub/x.lock");
        let a = try_lock(&p, Mode::Exclusive, "thing").unwrap();
        // A second open file is a second holder, even in this process.
        let e = try_lock(&p, Mode::Exclusive, "thing").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("thing is in use by pid {}", std::process::id())
        );
        assert!(try_lock(&p, Mode::Shared, "thing").is_err());
        drop(a);
        assert_eq!(
            std::fs::read(&p).unwrap(),
            b"",
            "the pid goes with the lock"
        );
        let s1 = try_lock(&p, Mode::Shared, "thing").unwrap();
        let s2 = try_lock(&p, Mode::Shared, "thing").unwrap();
        // Shared holders do not write their pids.
        let e = try_lock(&p, Mode::Exclusive, "thing").unwrap_err();
        assert_eq!(e.to_string(), "thing is in use by another process");
        drop((s1, s2));
        try_lock(&p, Mode::Exclusive, "thing").unwrap();
    }

    #[test]
    fn two_threads_take_turns() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("x.lock");
        let first = try_lock(&p, Mode::Exclusive, "thing").unwrap();
        let (tx, rx) = mpsc::channel();
        let p2 = p.clone();
        let waiter = std::thread::spawn(move || {
            let mut said = Vec::new();
            let l = lock(&p2, Mode::Exclusive, "thing", &mut |m| {
                said.push(m.to_string())
            });
            tx.send(()).unwrap();
            (l.is_ok(), said)
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "waits"
        );
        drop(first);
        let (ok, said) = waiter.join().unwrap();
        assert!(ok);
        assert_eq!(
            said,
            [format!(
                "waiting for thing: in use by pid {}",
                std::process::id()
            )]
        );
    }

    #[test]
    fn another_process_is_named_waited_for_and_followed() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("x.lock");
        let holder = test_support::Holder::exclusive(&p);
        let pid = holder.pid();
        let e = try_lock(&p, Mode::Exclusive, "run directory /r").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("run directory /r is in use by pid {pid}")
        );
        assert!(matches!(e, LockError::Busy { pid: Some(p), .. } if p == pid));
        let (tx, rx) = mpsc::channel();
        let p2 = p.clone();
        let waiter = std::thread::spawn(move || {
            let mut said = Vec::new();
            let l = lock(&p2, Mode::Exclusive, "the cache", &mut |m| {
                said.push(m.to_string())
            });
            tx.send(()).unwrap();
            (l.map(|_| std::process::id()).ok(), said)
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(500)).is_err(),
            "waits"
        );
        holder.release();
        let (got, said) = waiter.join().unwrap();
        assert_eq!(got, Some(std::process::id()));
        assert_eq!(
            said,
            [format!("waiting for the cache: in use by pid {pid}")]
        );
    }

    #[test]
    fn a_killed_holder_leaves_no_lock() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("x.lock");
        let holder = test_support::Holder::exclusive(&p);
        assert!(try_lock(&p, Mode::Shared, "x").is_err());
        holder.kill();
        try_lock(&p, Mode::Exclusive, "x").unwrap();
    }
}
