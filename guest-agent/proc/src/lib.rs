//! Running child processes so that none outlives the testbed. Every child
//! leads its own process group and gets SIGKILL from the kernel when the
//! thread that spawned it dies ([`contain`]); whatever ends its use kills the
//! whole group, not just the direct child. [`run_captured`] runs one to
//! completion with a deadline, stdout and stderr captured (the agent's
//! helper binaries, testbed-flight's pyarrow scripts; both read JSON lines
//! from what it returns); [`Group`] holds a long-running one (a server) and
//! stops its group on drop.

pub mod affinity;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a reaped child used. wait4 reports the child together with every
/// descendant it waited for (RUSAGE_BOTH), so a wrapper script's program
/// counts: `max_rss_bytes` is the largest of their peaks, not a sum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    pub max_rss_bytes: u64,
    pub user_s: f64,
    pub system_s: f64,
}

impl Usage {
    fn from_rusage(ru: &libc::rusage) -> Usage {
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        Usage {
            // Linux reports ru_maxrss in KiB.
            max_rss_bytes: (ru.ru_maxrss.max(0) as u64) * 1024,
            user_s: secs(ru.ru_utime),
            system_s: secs(ru.ru_stime),
        }
    }
}

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

/// Makes the child of `cmd` the leader of a new process group and has the
/// kernel SIGKILL it when the spawning *thread* exits (PR_SET_PDEATHSIG
/// follows the thread, not the process: spawn long-lived children from a
/// thread that lives as long as they should).
pub fn contain(cmd: &mut Command) -> &mut Command {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    cmd.process_group(0);
    // SAFETY: the closure runs in the forked child before exec. It only
    // makes system calls that are async-signal-safe (prctl, getppid) and
    // builds io::Errors from an errno, which does not allocate; it takes no
    // lock and touches no state shared with the parent. std runs it after
    // setuid/setgid, which would otherwise clear the death signal.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl: no signal would come.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    cmd
}

/// A child that leads its own process group (see [`contain`]). Dropping it
/// stops the group: the stop signal (SIGTERM unless [`Group::stop_with`]
/// says otherwise) to the group, up to the grace period for the leader to
/// exit, then SIGKILL to the group and the leader, which is reaped.
#[derive(Debug)]
pub struct Group {
    child: Child,
    status: Option<ExitStatus>,
    usage: Option<Usage>,
    stop_signal: i32,
    grace: Duration,
    command: String,
}

impl Group {
    /// Spawns `cmd` contained.
    pub fn spawn(cmd: &mut Command) -> Result<Group, RunError> {
        let command = format!("{cmd:?}");
        let child = contain(cmd).spawn().map_err(|source| RunError::Spawn {
            command: command.clone(),
            source,
        })?;
        Ok(Group {
            child,
            status: None,
            usage: None,
            stop_signal: libc::SIGTERM,
            grace: Duration::from_secs(5),
            command,
        })
    }

    /// How [`Group::stop`] (and drop) asks the group to end first.
    pub fn stop_with(mut self, signal: i32, grace: Duration) -> Self {
        self.stop_signal = signal;
        self.grace = grace;
        self
    }

    /// The leader's pid, which is also the group's id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The command, as shown in errors.
    pub fn command(&self) -> &str {
        &self.command
    }

    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// The leader's exit status once it exited; the rest of its group is
    /// killed then, so nothing a finished child started lingers.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        if !self.leader_exited()? {
            return Ok(None);
        }
        self.kill().map(Some)
    }

    /// Waits for the leader to exit, then kills the rest of its group (as
    /// [`Group::try_wait`]) and returns the leader's status.
    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        self.wait_leader(0)?;
        self.kill()
    }

    /// Stops the group (stop signal, grace, SIGKILL) and returns the
    /// leader's status.
    pub fn stop(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        if !self.leader_exited()? {
            self.signal_group(self.stop_signal);
            let deadline = Instant::now() + self.grace;
            while Instant::now() < deadline && !self.leader_exited()? {
                std::thread::sleep(POLL);
            }
        }
        self.kill()
    }

    /// SIGKILL to the group and the leader, then reaps the leader.
    pub fn kill(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        // The leader is not reaped yet, so its pid (the group id) cannot
        // have been reused: the signal reaches only what it started.
        self.signal_group(libc::SIGKILL);
        // The leader itself, should it have left its group.
        let _ = self.child.kill();
        let (s, usage) = self.reap()?;
        self.status = Some(s);
        self.usage = Some(usage);
        Ok(s)
    }

    /// What the leader used, once it was reaped (after [`Group::wait`],
    /// [`Group::stop`] or [`Group::kill`]).
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// wait4 on the leader: its status and its resource use.
    fn reap(&mut self) -> std::io::Result<(ExitStatus, Usage)> {
        use std::os::unix::process::ExitStatusExt;
        loop {
            let mut status: libc::c_int = 0;
            // SAFETY: a zeroed rusage is valid; wait4 writes into it.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: wait4 on our own unreaped child with valid pointers.
            let r = unsafe { libc::wait4(self.child.id() as libc::pid_t, &mut status, 0, &mut ru) };
            if r > 0 {
                return Ok((ExitStatus::from_raw(status), Usage::from_rusage(&ru)));
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Whether the leader exited, without reaping it (WNOWAIT), so the
    /// group id stays reserved for [`Group::kill`].
    fn leader_exited(&self) -> std::io::Result<bool> {
        self.wait_leader(libc::WNOHANG)
    }

    /// waitid on the leader with WNOWAIT and `flags`: whether it exited.
    fn wait_leader(&self, flags: libc::c_int) -> std::io::Result<bool> {
        loop {
            // SAFETY: a zeroed siginfo_t is valid; waitid writes into it.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: waitid on our own child with a valid siginfo pointer.
            let r = unsafe {
                libc::waitid(
                    libc::P_PID,
                    self.child.id(),
                    &mut info,
                    libc::WEXITED | libc::WNOWAIT | flags,
                )
            };
            if r == 0 {
                // SAFETY: waitid filled in a SIGCHLD siginfo (or left the
                // zeroes: no child changed state).
                return Ok(unsafe { info.si_pid() } != 0);
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    fn signal_group(&self, signal: i32) {
        // SAFETY: kill has no memory preconditions; see `kill` for why the
        // group id is still ours.
        unsafe { libc::kill(-(self.child.id() as libc::pid_t), signal) };
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Runs `cmd` until it exits or `timeout` passes; either way its whole
/// process group is killed before this returns. Both pipes are drained on
/// their own threads so a chatty child cannot block on a full pipe while we
/// wait.
/// Creates `path`, which must not exist yet (not even as a symlink), for
/// reading and writing by us only (mode 0600): the one way the helpers
/// create files another user could otherwise have planted first.
pub fn create_private_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

pub fn run_captured(cmd: &mut Command, timeout: Duration) -> Result<Finished, RunError> {
    let deadline = Instant::now() + timeout;
    let mut group = Group::spawn(cmd.stdout(Stdio::piped()).stderr(Stdio::piped()))?;
    let command = group.command.clone();
    let timed_out = || RunError::TimedOut {
        command: command.clone(),
        timeout,
    };
    let stdout = drain(group.take_stdout());
    let stderr = drain(group.take_stderr());
    let status = loop {
        match group.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            Ok(None) => {
                let _ = group.kill();
                return Err(timed_out());
            }
            Err(source) => {
                let _ = group.kill();
                return Err(RunError::Wait {
                    command: command.clone(),
                    source,
                });
            }
        }
    };
    // The group is dead, so the pipes close, unless something left the
    // group (setsid) holding them: that one gets until the deadline.
    let until = deadline.max(Instant::now() + Duration::from_secs(1));
    let read = |rx: mpsc::Receiver<String>| {
        rx.recv_timeout(until.saturating_duration_since(Instant::now()))
            .map_err(|_| timed_out())
    };
    Ok(Finished {
        status,
        stdout: read(stdout)?,
        stderr: read(stderr)?,
    })
}

/// Reads `pipe` to its end on a thread; the text arrives on the channel.
fn drain(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut s);
        }
        let _ = tx.send(s);
    });
    rx
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
    fn a_groups_usage_holds_the_peak_of_a_program_its_leader_waited_for() {
        // sh forks python and waits for it: the 96 MiB python touches must
        // show in the leader's usage, though sh itself stays small.
        let mut g = Group::spawn(Command::new("sh").args([
            "-c",
            "python3 -c 'b = bytearray(96 << 20); b[::4096] = b\"x\" * len(b[::4096])'; true",
        ]))
        .unwrap();
        assert!(g.usage().is_none());
        assert!(g.wait().unwrap().success());
        let u = g.usage().unwrap();
        assert!(u.max_rss_bytes >= 96 << 20, "{u:?}");
        assert!(u.max_rss_bytes < 1 << 30, "{u:?}");
        assert!(u.user_s + u.system_s > 0.0, "{u:?}");
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

    /// This test process becomes the reaper of its orphans, so a killed
    /// grandchild can be reaped and its fate read here (PID 1 of a
    /// container may never reap it).
    fn become_subreaper() {
        // SAFETY: prctl with integer arguments only.
        let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    }

    /// Waits up to 10 s for `pid` (a descendant) to die: the signal that
    /// killed it (0 after a normal exit, or when its own parent reaped it
    /// first), or None when it is still alive.
    fn killed_by(pid: i32) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let mut status = 0;
            // SAFETY: waitpid on one pid with a valid status pointer.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                return Some(if libc::WIFSIGNALED(status) {
                    libc::WTERMSIG(status)
                } else {
                    0
                });
            }
            // Not ours to reap: a dying parent may reap it before it is
            // handed to us.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
            let dead = stat.map_or(true, |s| {
                s.rsplit(')')
                    .next()
                    .map(str::trim_start)
                    .is_some_and(|s| s.starts_with('Z'))
            });
            if r < 0 && dead {
                return Some(0);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn pid_in(path: &std::path::Path) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(s) = std::fs::read_to_string(path)
                && let Ok(p) = s.trim().parse()
            {
                return p;
            }
            assert!(Instant::now() < deadline, "no pid in {}", path.display());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_timeout_kills_the_grandchildren_too() {
        become_subreaper();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pid");
        let script = format!(
            "sleep 1000 & echo $! > {}.tmp && mv {0}.tmp {0}; sleep 1000",
            file.display()
        );
        let e = run_captured(
            Command::new("sh").args(["-c", &script]),
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(matches!(e, RunError::TimedOut { .. }), "{e}");
        let grandchild = pid_in(&file);
        assert!(killed_by(grandchild).is_some(), "{grandchild} still alive");
    }

    #[test]
    fn a_grandchild_left_behind_by_a_finished_child_is_killed() {
        become_subreaper();
        let started = Instant::now();
        // The grandchild keeps stdout open: waiting for it to close would
        // take the sleep's 30 s.
        let f = run_captured(
            Command::new("sh").args(["-c", "sleep 30 & echo $!"]),
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(f.status.success());
        assert!(started.elapsed() < Duration::from_secs(10));
        let grandchild: i32 = f.stdout.trim().parse().unwrap();
        assert!(killed_by(grandchild).is_some(), "{grandchild} still alive");
    }

    #[test]
    fn dropping_a_group_stops_the_leader_and_what_it_started() {
        use std::io::BufRead;
        become_subreaper();
        let mut g = Group::spawn(
            Command::new("sh")
                .args(["-c", "sleep 1000 & echo $!; wait"])
                .stdout(Stdio::piped()),
        )
        .unwrap();
        let leader = g.id() as i32;
        let mut line = String::new();
        std::io::BufReader::new(g.take_stdout().unwrap())
            .read_line(&mut line)
            .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        // Both lead or belong to the group the leader's pid names.
        // SAFETY: getpgid has no memory preconditions.
        assert_eq!(unsafe { libc::getpgid(grandchild) }, leader);
        let started = Instant::now();
        drop(g);
        // The SIGTERM went to the whole group, not just to sh.
        assert!(killed_by(grandchild).is_some(), "{grandchild} still alive");
        assert!(!std::path::Path::new(&format!("/proc/{leader}")).exists());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_group_that_ignores_the_stop_signal_is_killed_after_the_grace() {
        let mut g = Group::spawn(Command::new("sh").args(["-c", "trap '' TERM; sleep 1000"]))
            .unwrap()
            .stop_with(libc::SIGTERM, Duration::from_millis(300));
        std::thread::sleep(Duration::from_millis(200));
        let st = g.stop().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGKILL));
        assert!(g.try_wait().unwrap().is_some());
    }

    #[test]
    fn waiting_for_a_leader_kills_what_it_left_behind() {
        use std::io::BufRead;
        become_subreaper();
        let mut g = Group::spawn(
            Command::new("sh")
                .args(["-c", "sleep 1000 & echo $!; exit 4"])
                .stdout(Stdio::piped()),
        )
        .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(g.take_stdout().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(g.wait().unwrap().code(), Some(4));
        let grandchild: i32 = line.trim().parse().unwrap();
        assert!(killed_by(grandchild).is_some(), "{grandchild} still alive");
    }

    #[test]
    fn a_child_dies_with_the_thread_that_spawned_it() {
        let pid = std::thread::spawn(|| {
            let g = Group::spawn(Command::new("sleep").arg("1000")).unwrap();
            let pid = g.id() as i32;
            // Lost without a stop: only the death signal can end it.
            std::mem::forget(g);
            pid
        })
        .join()
        .unwrap();
        assert_eq!(killed_by(pid), Some(libc::SIGKILL));
    }
}
