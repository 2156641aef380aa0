//! A child the testbed starts (QEMU, or the agent in host mode): spawned
//! in its own process group and its own cgroup (`crate::host::cgroup`, where the
//! host allows) with the parent-death signal, killed as a group on drop,
//! on Ctrl-C/SIGTERM, and — should `testbed` itself be SIGKILLed while a
//! child ignored the signal — by the sweep at the next start
//! (`sweep_leftovers`), from the list every run keeps on disk and the
//! cgroups it left. The cgroup also holds what left the process group
//! (`setsid`), and is killed with it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use testbed_agent::text::printable_lines;

use crate::host::cgroup::Cgroup;
use crate::host::kernel_limits::{Enforced, Wanted};
use crate::host::procfs::start_ticks;
use crate::host::wait::{Until, Waited, poll};

/// How often a wait looks at a process again.
const POLL: Duration = Duration::from_millis(20);

/// Groups this process started and has not reaped yet.
static LIVE: Mutex<Vec<Leader>> = Mutex::new(Vec::new());

/// A process-group leader, told apart from a later process that reuses
/// its pid by its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leader {
    pub pid: u32,
    pub start_ticks: u64,
}

pub struct GroupProcess {
    child: Child,
    pub pid: u32,
    exited: Option<ExitStatus>,
    /// None under process-group containment.
    cgroup: Option<Cgroup>,
    /// The limits the kernel enforces on the group (none asked: empty).
    limits: Enforced,
}

/// QEMU is a group process like any other.
pub type VmProcess = GroupProcess;

impl GroupProcess {
    /// Starts QEMU with stdout and stderr going to `log`.
    pub fn spawn(argv: &[String], log: &Path) -> std::io::Result<GroupProcess> {
        Self::spawn_limited(argv, log, &Wanted::default())
    }

    /// `spawn` with limits the kernel enforces on QEMU and all it starts.
    pub fn spawn_limited(
        argv: &[String],
        log: &Path,
        limits: &Wanted,
    ) -> std::io::Result<GroupProcess> {
        let out = std::fs::File::create(log)
            .map_err(|e| std::io::Error::new(e.kind(), format!("create {}: {e}", log.display())))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        Self::spawn_command_limited(&mut cmd, limits)
            .map_err(|e| std::io::Error::new(e.kind(), format!("start {}: {e}", argv[0])))
    }

    /// Starts `cmd` as the leader of a new process group, in a cgroup of
    /// its own, that dies with this process.
    pub fn spawn_command(cmd: &mut Command) -> std::io::Result<GroupProcess> {
        Self::spawn_command_limited(cmd, &Wanted::default())
    }

    /// `spawn_command` with limits the kernel enforces on the group
    /// (`crate::host::kernel_limits`), set up before the process starts.
    pub fn spawn_command_limited(
        cmd: &mut Command,
        wanted: &Wanted,
    ) -> std::io::Result<GroupProcess> {
        cmd.process_group(0);
        let cgroup = Cgroup::create()?;
        if let Some(c) = &cgroup {
            c.join_before_exec(cmd)?;
        }
        let limits = if wanted.any() {
            let group = cgroup.as_ref().and_then(|c| {
                c.dir()
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            });
            let group = group.unwrap_or_else(|| {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                format!("p{}", NEXT.fetch_add(1, Ordering::Relaxed))
            });
            Enforced::set_up(
                wanted,
                cgroup.as_ref().and_then(|c| c.v2_dir()),
                &crate::host::cgroup::owner_name(),
                &group,
            )
        } else {
            Enforced::default()
        };
        limits.join_before_exec(cmd)?;
        // SAFETY: prctl and getppid are async-signal-safe; this runs in the
        // child between fork and exec and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before prctl: then no signal comes.
                if libc::getppid() == 1 {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                if let Some(c) = &cgroup {
                    c.remove();
                }
                limits.remove();
                return Err(e);
            }
        };
        let pid = child.id();
        let leader = Leader {
            pid,
            start_ticks: start_ticks(pid).unwrap_or(0),
        };
        if let Ok(mut live) = LIVE.lock() {
            live.push(leader);
            registry::save(&live);
        }
        Ok(GroupProcess {
            child,
            pid,
            exited: None,
            cgroup,
            limits,
        })
    }

    /// The kernel limit that acted on the group, if one did: what ended a
    /// point whose process died (`Enforced::hit`).
    pub fn limit_hit(&self) -> Option<String> {
        self.limits.hit()
    }

    /// Where each kernel limit is enforced, or why it is not.
    pub fn limits_described(&self) -> Vec<String> {
        self.limits.describe()
    }

    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The exit status if the leader has ended (its group and cgroup are
    /// then killed: nothing it started may stay behind).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none()
            && let Ok(Some(s)) = self.child.try_wait()
        {
            signal_group(self.pid, libc::SIGKILL);
            if let Some(c) = &self.cgroup {
                c.kill();
            }
            self.exited = Some(s);
            forget(self.pid);
        }
        self.exited
    }

    /// Waits up to `timeout` for the leader to end by itself.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        match poll(Until::after(timeout), POLL, || self.try_wait()) {
            Waited::Done(s) => Some(s),
            Waited::TimedOut | Waited::Interrupted => None,
        }
    }

    /// Waits for the leader to end; `None` if Ctrl-C or SIGTERM came first
    /// (the group is then killed and reaped).
    pub fn wait_or_interrupt(&mut self) -> Option<ExitStatus> {
        match poll(Until::interrupted(), POLL, || self.try_wait()) {
            Waited::Done(s) => Some(s),
            Waited::TimedOut | Waited::Interrupted => {
                self.kill();
                None
            }
        }
    }

    /// SIGTERM to the group, then SIGKILL after a grace period; always reaps.
    pub fn kill(&mut self) {
        if self.try_wait().is_some() {
            return;
        }
        signal_group(self.pid, libc::SIGTERM);
        if self.wait_timeout(Duration::from_secs(2)).is_none() {
            signal_group(self.pid, libc::SIGKILL);
            if let Some(c) = &self.cgroup {
                c.kill();
            }
            if let Ok(s) = self.child.wait() {
                self.exited = Some(s);
            }
            forget(self.pid);
        }
    }
}

impl Drop for GroupProcess {
    fn drop(&mut self) {
        self.kill();
        if let Some(c) = &self.cgroup {
            c.remove();
        }
        self.limits.remove();
    }
}

fn signal_group(pid: u32, sig: i32) {
    // SAFETY: plain kill(2) on a group we created.
    unsafe {
        libc::kill(-(pid as i32), sig);
    }
}

fn forget(pid: u32) {
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|l| l.pid != pid);
        registry::save(&live);
    }
}

/// The leaders (= group ids) of the groups this process started and has
/// not reaped: the run's own processes, for the noise measure.
pub fn live_leaders() -> Vec<u32> {
    LIVE.lock()
        .map(|l| l.iter().map(|x| x.pid).collect())
        .unwrap_or_default()
}

/// Kills every live group and cgroup (from a signal-handling thread).
pub fn kill_all() {
    let live: Vec<Leader> = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
    for l in live {
        signal_group(l.pid, libc::SIGKILL);
    }
    crate::host::cgroup::kill_all();
}

/// Whether `leader` is still the process it was (not a reused pid).
fn alive(leader: &Leader) -> bool {
    start_ticks(leader.pid).is_some_and(|t| t == leader.start_ticks)
}

/// Kills what testbed processes that are gone (SIGKILLed, say) left
/// running, in their process groups and their cgroups, and says what it
/// killed. Called as a run starts.
pub fn sweep_leftovers() -> Vec<String> {
    let mut said = registry::sweep(&registry::dir(), std::process::id());
    said.extend(crate::host::cgroup::sweep());
    said
}

/// The list of live groups on disk, one file per testbed process under
/// `<cache>/live/`, so a later testbed can clean up after a killed one.
mod registry {
    use super::*;

    pub fn dir() -> PathBuf {
        crate::host::paths::cache_root().join("live")
    }

    fn own_file(dir: &Path) -> PathBuf {
        let me = std::process::id();
        dir.join(format!("{me}-{}", start_ticks(me).unwrap_or(0)))
    }

    /// Writes this process's list (best effort: the list is a safety net,
    /// the parent-death signal is the first line of defence).
    pub fn save(live: &[Leader]) {
        let dir = dir();
        let file = own_file(&dir);
        if live.is_empty() {
            let _ = std::fs::remove_file(&file);
            return;
        }
        let text: String = live
            .iter()
            .map(|l| format!("{} {}\n", l.pid, l.start_ticks))
            .collect();
        let _ = std::fs::create_dir_all(&dir)
            .and_then(|()| crate::host::fsutil::write_atomic(&file, text.as_bytes()));
    }

    pub fn sweep(dir: &Path, me: u32) -> Vec<String> {
        let mut killed = Vec::new();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return killed;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((owner, ticks)) = parse_pair(&name, '-') else {
                continue;
            };
            let owner = Leader {
                pid: owner as u32,
                start_ticks: ticks,
            };
            if owner.pid == me || alive(&owner) {
                continue;
            }
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            for line in text.lines() {
                let Some((pid, ticks)) = parse_pair(line, ' ') else {
                    continue;
                };
                let leader = Leader {
                    pid: pid as u32,
                    start_ticks: ticks,
                };
                if alive(&leader) {
                    signal_group(leader.pid, libc::SIGKILL);
                    killed.push(format!(
                        "killed process group {} ({}) left by testbed pid {}, which was killed",
                        leader.pid,
                        crate::host::procfs::command_name(leader.pid),
                        owner.pid
                    ));
                }
            }
            let _ = std::fs::remove_file(e.path());
        }
        killed
    }

    fn parse_pair(s: &str, sep: char) -> Option<(u64, u64)> {
        let (a, b) = s.trim().split_once(sep)?;
        Some((a.parse().ok()?, b.parse().ok()?))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_dead_owners_groups_are_killed_and_a_live_owners_kept() {
            let dir = tempfile::tempdir().unwrap();
            let spawn = || {
                let mut c = Command::new("sleep");
                c.arg("1000").process_group(0);
                c.spawn().unwrap()
            };
            let (mut orphan, mut kept) = (spawn(), spawn());
            let entry = |c: &Child| format!("{} {}\n", c.id(), start_ticks(c.id()).unwrap());
            // An owner that no longer exists: pid 1's start time is never 1.
            std::fs::write(dir.path().join("1-999999999"), entry(&orphan)).unwrap();
            // A live owner (this test process).
            let me = std::process::id();
            let mine = dir
                .path()
                .join(format!("{me}-{}", start_ticks(me).unwrap()));
            std::fs::write(&mine, entry(&kept)).unwrap();
            let said = sweep(dir.path(), 0);
            assert_eq!(said.len(), 1, "{said:?}");
            assert!(said[0].contains("(sleep)"), "{said:?}");
            let status = orphan.wait().unwrap();
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(9)
            );
            assert!(
                kept.try_wait().unwrap().is_none(),
                "a live owner's child was killed"
            );
            assert!(mine.exists() && !dir.path().join("1-999999999").exists());
            kept.kill().unwrap();
            kept.wait().unwrap();
        }
    }
}

/// QEMU's version line, e.g. "QEMU emulator version 7.2.19 (Debian ...)".
/// Gives up after 5 s: a broken QEMU must not hang the testbed.
pub fn qemu_version(qemu: &Path) -> Option<String> {
    let mut child = Command::new(qemu)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // Done(Ok): it exited; Done(Err) or a timeout: it is killed.
    let exited = poll(Until::after(Duration::from_secs(5)), POLL, || {
        child.try_wait().transpose()
    });
    if !matches!(exited, Waited::Done(Ok(_))) {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take()?, &mut out).ok()?;
    out.lines().next().map(str::to_string)
}

/// The last `n` lines of a text file (console logs), lossily decoded.
pub fn tail_lines(path: &Path, n: usize) -> String {
    let text = read_bounded(path);
    let lines: Vec<&str> = text.lines().collect();
    printable_lines(
        &lines[lines.len().saturating_sub(n)..].join("\n"),
        MAX_QUOTE,
    )
}

/// A log as text, at most its first and last `READ_LIMIT / 2` bytes (a
/// guest may have written gigabytes).
fn read_bounded(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let half = READ_LIMIT / 2;
    let mut bytes = Vec::new();
    if len <= READ_LIMIT {
        let _ = f.read_to_end(&mut bytes);
    } else {
        let _ = (&mut f).take(half).read_to_end(&mut bytes);
        bytes.extend_from_slice(format!("\n[… {} bytes not read …]\n", len - 2 * half).as_bytes());
        if f.seek(SeekFrom::End(-(half as i64))).is_ok() {
            let _ = f.take(half).read_to_end(&mut bytes);
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

const READ_LIMIT: u64 = 16 << 20;

/// The most of a log an error quotes.
const MAX_QUOTE: usize = 4000;

/// What a person needs from a dead guest's console: the first line that
/// says what went wrong (panic, oops, BUG), then the last `n` lines.
pub fn console_digest(path: &Path, n: usize) -> String {
    let text = read_bounded(path);
    let lines: Vec<&str> = text.lines().collect();
    let tail_start = lines.len().saturating_sub(n);
    let alarm = lines.iter().position(|l| {
        [
            "Kernel panic",
            "BUG:",
            "Oops",
            "WARNING:",
            "possible recursive locking",
            "inconsistent lock state",
        ]
        .iter()
        .any(|m| l.contains(m))
    });
    let digest = match alarm {
        Some(i) if i < tail_start => {
            format!("{}\n...\n{}", lines[i], lines[tail_start..].join("\n"))
        }
        _ => lines[tail_start..].join("\n"),
    };
    // Console text is the guest's: show its escape sequences, never obey them.
    printable_lines(&digest, MAX_QUOTE)
}
