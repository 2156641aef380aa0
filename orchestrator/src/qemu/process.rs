//! A running QEMU: spawned in its own process group, killed with the
//! orchestrator (PR_SET_PDEATHSIG) and on drop, so none is left behind.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// PIDs of live QEMUs, for the Ctrl-C handler.
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

pub struct VmProcess {
    child: Child,
    pub pid: u32,
    exited: Option<ExitStatus>,
}

impl VmProcess {
    /// Starts QEMU with stdout and stderr going to `log`.
    pub fn spawn(argv: &[String], log: &Path) -> std::io::Result<VmProcess> {
        let out = std::fs::File::create(log)
            .map_err(|e| std::io::Error::new(e.kind(), format!("create {}: {e}", log.display())))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; runs in the child before exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| std::io::Error::new(e.kind(), format!("start {}: {e}", argv[0])))?;
        let pid = child.id();
        if let Ok(mut live) = LIVE.lock() {
            live.push(pid);
        }
        Ok(VmProcess {
            child,
            pid,
            exited: None,
        })
    }

    /// The exit status if QEMU has ended.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none()
            && let Ok(Some(s)) = self.child.try_wait()
        {
            self.exited = Some(s);
            forget(self.pid);
        }
        self.exited
    }

    /// Waits up to `timeout` for QEMU to end by itself.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(s) = self.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.try_wait()
    }

    /// SIGTERM, then SIGKILL after a grace period; always reaps.
    pub fn kill(&mut self) {
        if self.try_wait().is_some() {
            return;
        }
        signal_group(self.pid, libc::SIGTERM);
        if self.wait_timeout(Duration::from_secs(2)).is_none() {
            signal_group(self.pid, libc::SIGKILL);
            if let Ok(s) = self.child.wait() {
                self.exited = Some(s);
            }
            forget(self.pid);
        }
    }
}

impl Drop for VmProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn signal_group(pid: u32, sig: i32) {
    // SAFETY: plain kill(2) on the group we created.
    unsafe {
        libc::kill(-(pid as i32), sig);
    }
}

fn forget(pid: u32) {
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|p| *p != pid);
    }
}

/// Kills every live QEMU (from a signal-handling thread).
pub fn kill_all() {
    let pids: Vec<u32> = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
    for pid in pids {
        signal_group(pid, libc::SIGKILL);
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
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take()?, &mut out).ok()?;
    out.lines().next().map(str::to_string)
}

/// The last `n` lines of a text file (console logs), lossily decoded.
pub fn tail_lines(path: &Path, n: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// What a person needs from a dead guest's console: the first line that
/// says what went wrong (panic, oops, BUG), then the last `n` lines.
pub fn console_digest(path: &Path, n: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
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
    match alarm {
        Some(i) if i < tail_start => {
            format!("{}\n...\n{}", lines[i], lines[tail_start..].join("\n"))
        }
        _ => lines[tail_start..].join("\n"),
    }
}
