//! The `testbed-flight serve` child, `gen-cert`, and the loopback interface
//! the local role needs.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use testbed_lines::flight::ServeReady;

use super::other;
use crate::workload::{WorkloadError, child};

/// A child `testbed-flight serve`, stopped (SIGTERM, then SIGKILL) on drop.
pub(super) struct ServerChild {
    pub(super) child: Child,
    /// Where it listens, from its first line (port 0 resolved).
    pub(super) addr: String,
}

impl ServerChild {
    /// Starts the server and waits up to `timeout` for its [`ServeReady`] line.
    pub(super) fn start(
        bin: &Path,
        addr: &str,
        tls_dir: Option<&Path>,
        timeout: Duration,
    ) -> Result<Self, WorkloadError> {
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--addr", addr]);
        if let Some(d) = tls_dir {
            cmd.arg("--tls-dir").arg(d);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| WorkloadError::io(format!("spawn {} serve", bin.display()), e))?;
        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
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
                "testbed-flight serve --addr {addr} did not start within {timeout:?}"
            )))
        } else {
            child::json_line(&line, "testbed-flight serve")
        };
        let mut server = ServerChild {
            child,
            addr: String::new(),
        };
        match ready {
            Ok(r) => {
                server.addr = r.listening;
                if let Some(err) = server.child.stderr.take() {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut BufReader::new(err), &mut std::io::sink());
                    });
                }
                Ok(server)
            }
            Err(e) => {
                let _ = server.child.kill();
                let _ = server.child.wait();
                let mut err = String::new();
                if let Some(mut s) = server.child.stderr.take() {
                    let _ = s.read_to_string(&mut err);
                }
                Err(other(format!("{e}: {}", err.trim())))
            }
        }
    }

    pub(super) fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// `testbed-flight gen-cert --dir DIR`: a CA and a server certificate.
pub(super) fn gen_cert(bin: &Path, dir: &Path) -> Result<(), WorkloadError> {
    let out = Command::new(bin)
        .arg("gen-cert")
        .arg("--dir")
        .arg(dir)
        .output()
        .map_err(|e| WorkloadError::io(format!("spawn {} gen-cert", bin.display()), e))?;
    if !out.status.success() {
        return Err(other(format!(
            "testbed-flight gen-cert failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
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

    #[test]
    fn loopback_is_up_afterwards() {
        ensure_loopback_up().unwrap();
        assert!(std::net::TcpListener::bind("127.0.0.1:0").is_ok());
    }

    #[test]
    fn a_server_reports_where_it_listens_and_stops() {
        let bin = super::super::real_binary();
        let mut s = ServerChild::start(&bin, "127.0.0.1:0", None, Duration::from_secs(60)).unwrap();
        let addr: std::net::SocketAddr = s.addr.parse().unwrap();
        assert_ne!(addr.port(), 0);
        s.stop();
        assert!(s.child.try_wait().unwrap().is_some());
    }

    #[test]
    fn a_server_that_cannot_start_is_an_error_with_its_stderr() {
        let bin = super::super::real_binary();
        let e = ServerChild::start(&bin, "not-an-address", None, Duration::from_secs(60))
            .err()
            .unwrap();
        let e = e.to_string();
        assert!(e.contains("did not start"), "{e}");
        assert!(e.contains("invalid address"), "{e}");
    }
}
