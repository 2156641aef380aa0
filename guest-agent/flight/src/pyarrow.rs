//! Running pyarrow's Flight (C++ under Python) beside ours: the scripts are
//! compiled in, written to a temporary directory and run with `python3`
//! (or `$TESTBED_PYTHON`). pyarrow comes from PyPI: `pip install pyarrow`.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use crate::error::{FlightError, Result};

pub const SERVER_PY: &str = include_str!("../tests/interop/pyarrow_server.py");
pub const CLIENT_PY: &str = include_str!("../tests/interop/pyarrow_client.py");

/// What to tell a user whose Python lacks pyarrow.
pub const INSTALL_HINT: &str = "pyarrow with Flight is required: pip install pyarrow";

pub fn python() -> String {
    std::env::var("TESTBED_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The pyarrow version, or an error carrying [`INSTALL_HINT`].
pub fn check(python: &str) -> Result<String> {
    let out = Command::new(python)
        .args([
            "-c",
            "import pyarrow, pyarrow.flight; print(pyarrow.__version__)",
        ])
        .output()
        .map_err(|e| FlightError::Other(format!("{INSTALL_HINT} (running {python}: {e})")))?;
    if !out.status.success() {
        return Err(FlightError::Other(format!(
            "{INSTALL_HINT} ({python}: {})",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The two scripts in a private temporary directory, removed on drop.
pub struct Scripts {
    dir: PathBuf,
}

impl Scripts {
    pub fn write() -> Result<Self> {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "testbed-flight-py-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| FlightError::io(format!("create {}", dir.display()), e))?;
        for (name, text) in [
            ("pyarrow_server.py", SERVER_PY),
            ("pyarrow_client.py", CLIENT_PY),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, text)
                .map_err(|e| FlightError::io(format!("write {}", p.display()), e))?;
        }
        Ok(Scripts { dir })
    }

    pub fn server(&self) -> PathBuf {
        self.dir.join("pyarrow_server.py")
    }

    pub fn client(&self) -> PathBuf {
        self.dir.join("pyarrow_client.py")
    }
}

impl Drop for Scripts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server child process that printed `{"listening": ADDR}` first; killed
/// on drop.
pub struct ChildServer {
    child: Child,
    pub addr: String,
}

impl ChildServer {
    pub fn spawn(cmd: Command, timeout: Duration) -> Result<Self> {
        let (mut child, shown) = spawn_piped(cmd)?;
        let stdout = child.stdout.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            if let Some(out) = stdout {
                let mut r = BufReader::new(out);
                let _ = r.read_line(&mut line);
                let _ = tx.send(line);
                // Keep draining so the child never blocks on a full pipe.
                let _ = std::io::copy(&mut r, &mut std::io::sink());
            }
        });
        let line = rx.recv_timeout(timeout).unwrap_or_default();
        let addr = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| v["listening"].as_str().map(str::to_string));
        match addr {
            Some(addr) => {
                if let Some(err) = child.stderr.take() {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut BufReader::new(err), &mut std::io::sink());
                    });
                }
                Ok(ChildServer { child, addr })
            }
            None => {
                let _ = child.kill();
                let _ = child.wait();
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                Err(FlightError::Other(format!(
                    "server {shown} did not report its address within {timeout:?}: {line:?} {}",
                    err.trim()
                )))
            }
        }
    }
}

/// Spawns `cmd` with stdout and stderr piped to us; also returns the
/// command as shown in errors.
fn spawn_piped(mut cmd: Command) -> Result<(Child, String)> {
    let shown = format!("{cmd:?}");
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| FlightError::io(format!("spawn {shown}"), e))?;
    Ok((child, shown))
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a command that prints JSON lines; fails with its stderr if it
/// exits non-zero or outlives `timeout`.
pub fn run_json_lines(mut cmd: Command, timeout: Duration) -> Result<Vec<serde_json::Value>> {
    let shown = format!("{cmd:?}");
    let done = testbed_proc::run_captured(&mut cmd, timeout)
        .map_err(|e| FlightError::Other(e.to_string()))?;
    if !done.status.success() {
        return Err(FlightError::Other(format!(
            "{shown} failed ({}): {}",
            done.status,
            done.stderr.trim()
        )));
    }
    Ok(done
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// `python pyarrow_server.py --addr ADDR`, started and listening.
pub fn start_server(
    python: &str,
    scripts: &Scripts,
    addr: &str,
    tls_dir: Option<&Path>,
) -> Result<ChildServer> {
    let mut cmd = Command::new(python);
    cmd.arg(scripts.server()).args(["--addr", addr]);
    if let Some(d) = tls_dir {
        cmd.arg("--tls-cert").arg(d.join("server.pem"));
        cmd.arg("--tls-key").arg(d.join("server.key"));
    }
    ChildServer::spawn(cmd, Duration::from_secs(30))
}
