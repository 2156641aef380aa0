//! The `testbed-flight serve` child, `gen-cert`, and the loopback interface
//! the local role needs.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use testbed_vocab::flight::ServeReady;
use testbed_vocab::request::flight::{FlightRequest, GenCertRequest};
use testbed_proc::{Group, RunError};

use super::other;
use crate::workload::{WorkloadError, child};

/// A child `testbed-flight serve` in its own process group, stopped with
/// everything it started (SIGTERM, then SIGKILL to the group) on drop, and
/// killed by the kernel should the thread that started it die first.
pub(super) struct ServerChild {
    pub(super) child: Group,
    /// Where it listens, from its first line (port 0 resolved).
    pub(super) addr: String,
    /// The `settings` of that line (`genomics-serve`: its BAM address).
    pub(super) settings: serde_json::Value,
    /// The request it was started with, kept as long as it runs.
    _request: tempfile::NamedTempFile,
}

impl ServerChild {
    /// Starts `bin request FILE` with a server's request (`serve`,
    /// `py-serve` for pyarrow's server, `genomics-serve`) and waits up to
    /// `timeout` for its [`ServeReady`] line.
    pub(super) fn start(
        bin: &Path,
        request: &FlightRequest,
        timeout: Duration,
    ) -> Result<Self, WorkloadError> {
        let what = format!("testbed-flight {}", request.command());
        let file = child::request_file(request, &what)?;
        let mut cmd = Command::new(bin);
        cmd.args(child::request_args(&file));
        let mut child = Group::spawn(cmd.stdout(Stdio::piped()).stderr(Stdio::piped())).map_err(
            |e| match e {
                RunError::Spawn { source, .. } => {
                    WorkloadError::io(format!("spawn {} ({what})", bin.display()), source)
                }
                e => other(e.to_string()),
            },
        )?;
        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.take_stdout() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(out);
                let mut line = String::new();
                let _ = r.read_line(&mut line);
                let _ = tx.send(line);
                let _ = std::io::copy(&mut r, &mut std::io::sink());
            });
        }
        let line = rx.recv_timeout(timeout).unwrap_or_default();
        let ready: Result<ServeReady, WorkloadError> = if line.trim().is_empty() {
            Err(other(format!(
                "{what} ({}) did not start within {timeout:?}",
                serde_json::to_string(request).unwrap_or_default()
            )))
        } else {
            child::json_line(&line, &what)
        };
        match ready {
            Ok(r) => {
                if let Some(err) = child.take_stderr() {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut BufReader::new(err), &mut std::io::sink());
                    });
                }
                Ok(ServerChild {
                    child,
                    addr: r.listening,
                    settings: r.settings,
                    _request: file,
                })
            }
            Err(e) => {
                let _ = child.kill();
                let mut err = String::new();
                if let Some(mut s) = child.take_stderr() {
                    let _ = s.read_to_string(&mut err);
                }
                Err(other(format!("{e}: {}", err.trim())))
            }
        }
    }

    /// SIGTERM to the group, up to 5 s, then SIGKILL (as on drop).
    pub(super) fn stop(&mut self) {
        let _ = self.child.stop();
    }
}

/// `testbed-flight gen-cert`: a CA and a server certificate in `dir`.
pub(super) fn gen_cert(bin: &Path, dir: &Path) -> Result<(), WorkloadError> {
    let request = FlightRequest::GenCert(GenCertRequest {
        dir: dir.to_path_buf(),
    });
    let file = child::request_file(&request, "testbed-flight gen-cert")?;
    let out = testbed_proc::run_captured(
        Command::new(bin).args(child::request_args(&file)),
        Duration::from_secs(60),
    )
    .map_err(|e| other(format!("testbed-flight gen-cert: {e}")))?;
    if !out.status.success() {
        return Err(other(format!(
            "testbed-flight gen-cert failed: {}",
            out.stderr.trim()
        )));
    }
    Ok(())
}

/// Brings the loopback interface up if it is down: as PID 1 in a fresh
/// initramfs nothing else does, and the local role talks over 127.0.0.1.
/// A no-op (no privilege needed) where `lo` is already up, as on a host.
pub fn ensure_loopback_up() -> Result<(), WorkloadError> {
    let err = |what: &str| {
        WorkloadError::io(
            format!("{what} (bringing lo up)"),
            std::io::Error::last_os_error(),
        )
    };
    // SAFETY: socket/ioctl/close on a descriptor we own, with a zeroed
    // ifreq whose name is the NUL-terminated "lo".
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(err("socket"));
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let up = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        let result = if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) < 0 {
            Err(err("SIOCGIFFLAGS"))
        } else if req.ifr_ifru.ifru_flags & (libc::IFF_UP as libc::c_short) != 0 {
            Ok(())
        } else {
            req.ifr_ifru.ifru_flags |= up;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) < 0 {
                Err(err("SIOCSIFFLAGS"))
            } else {
                Ok(())
            }
        };
        libc::close(fd);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(addr: &str) -> FlightRequest {
        use testbed_vocab::request::flight::ServeRequest;
        FlightRequest::Serve(ServeRequest::new(addr))
    }

    #[test]
    fn loopback_is_up_afterwards() {
        ensure_loopback_up().unwrap();
        assert!(std::net::TcpListener::bind("127.0.0.1:0").is_ok());
    }

    #[test]
    fn a_server_reports_where_it_listens_and_stops() {
        let bin = super::super::real_binary();
        let mut s = ServerChild::start(&bin, &serve("127.0.0.1:0"), Duration::from_secs(60)).unwrap();
        let addr: std::net::SocketAddr = s.addr.parse().unwrap();
        assert_ne!(addr.port(), 0);
        s.stop();
        assert!(s.child.try_wait().unwrap().is_some());
    }

    #[test]
    fn a_server_that_cannot_start_is_an_error_with_its_stderr() {
        let bin = super::super::real_binary();
        let e = ServerChild::start(&bin, &serve("not-an-address"), Duration::from_secs(60))
            .err()
            .unwrap();
        let e = e.to_string();
        assert!(e.contains("did not start"), "{e}");
        assert!(e.contains("invalid address"), "{e}");
    }

    #[test]
    fn a_server_leads_its_own_process_group_and_is_gone_after_drop() {
        let bin = super::super::real_binary();
        let s = ServerChild::start(&bin, &serve("127.0.0.1:0"), Duration::from_secs(60)).unwrap();
        let pid = s.child.id() as i32;
        // SAFETY: getpgid has no memory preconditions.
        assert_eq!(unsafe { libc::getpgid(pid) }, pid);
        drop(s);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }
}

/// CPU seconds the processes of process group `pgid` have run so far, over
/// all their threads: from each thread's `/proc/PID/task/TID/schedstat`
/// (nanoseconds on a CPU), or, where the kernel keeps no schedstat, from
/// `/proc/PID/stat`'s utime + stime in 10 ms ticks. A thread that exits
/// between two readings takes its time with it; a server's threads live as
/// long as it serves.
pub(super) fn group_cpu_s(pgid: u32) -> Option<f64> {
    let mut total = 0.0;
    let mut seen = false;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((pgrp, ticks)) = parse_pgrp_and_ticks(&stat) else {
            continue;
        };
        if pgrp != pgid {
            continue;
        }
        seen = true;
        total += threads_run_s(pid).unwrap_or_else(|| {
            // SAFETY: sysconf has no preconditions.
            let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
            ticks as f64 / hz
        });
    }
    seen.then_some(total)
}

/// Seconds on a CPU of every thread of `pid`, from schedstat.
fn threads_run_s(pid: u32) -> Option<f64> {
    let mut ns = 0u64;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let text = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
        ns += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(ns as f64 / 1e9)
}

/// (process group, utime + stime) from a /proc/PID/stat line; the command
/// name may hold spaces and parentheses, so fields count from the last ')'.
fn parse_pgrp_and_ticks(stat: &str) -> Option<(u32, u64)> {
    let rest: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let pgrp = rest.get(2)?.parse().ok()?;
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some((pgrp, utime + stime))
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_group_and_ticks_past_odd_names() {
        let line = "4242 (py (x) y) S 1 4240 4240 0 -1 4194560 100 0 0 0 150 30 7 3 20 0";
        assert_eq!(parse_pgrp_and_ticks(line), Some((4240, 180)));
        assert_eq!(parse_pgrp_and_ticks("garbage"), None);
    }

    #[test]
    fn a_busy_group_is_charged_its_cpu_time() {
        let mut cmd = Command::new("python3");
        cmd.args([
            "-c",
            "import time\nt = time.time()\nwhile time.time() - t < 0.4: pass\ntime.sleep(5)",
        ]);
        let mut g = Group::spawn(&mut cmd).unwrap();
        std::thread::sleep(Duration::from_millis(700));
        let spent = group_cpu_s(g.id()).unwrap();
        let _ = g.kill();
        assert!(spent > 0.2 && spent < 0.8, "{spent}");
        assert_eq!(group_cpu_s(u32::MAX - 1), None);
    }
}
