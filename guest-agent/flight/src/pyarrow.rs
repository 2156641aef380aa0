//! Running pyarrow's Flight (C++ under Python) beside ours: the scripts are
//! compiled in, written to a private temporary directory and run with
//! `python3` (or `$TESTBED_PYTHON`). pyarrow comes from PyPI: `pip install
//! pyarrow`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use testbed_proc::Group;

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
    let out = testbed_proc::run_captured(
        Command::new(python).args([
            "-c",
            "import pyarrow, pyarrow.flight; print(pyarrow.__version__)",
        ]),
        Duration::from_secs(120),
    )
    .map_err(|e| FlightError::Other(format!("{INSTALL_HINT} ({e})")))?;
    if !out.status.success() {
        return Err(FlightError::Other(format!(
            "{INSTALL_HINT} ({python}: {})",
            out.stderr.trim()
        )));
    }
    Ok(out.stdout.trim().to_string())
}

/// The two scripts in a private temporary directory (mode 0700), removed
/// on drop.
pub struct Scripts {
    dir: tempfile::TempDir,
}

impl Scripts {
    pub fn write() -> Result<Self> {
        let dir = crate::private::tempdir("testbed-flight-py-")?;
        for (name, text) in [
            ("pyarrow_server.py", SERVER_PY),
            ("pyarrow_client.py", CLIENT_PY),
        ] {
            let p = dir.path().join(name);
            crate::private::create_new(&p)?
                .write_all(text.as_bytes())
                .map_err(|e| FlightError::io(format!("write {}", p.display()), e))?;
        }
        Ok(Scripts { dir })
    }

    pub fn server(&self) -> PathBuf {
        self.dir.path().join("pyarrow_server.py")
    }

    pub fn client(&self) -> PathBuf {
        self.dir.path().join("pyarrow_client.py")
    }
}

/// A server child process that printed `{"listening": ADDR}` first; it
/// and whatever it started are stopped on drop (see [`Group`]).
pub struct ChildServer {
    child: Group,
    pub addr: String,
}

impl ChildServer {
    pub fn spawn(mut cmd: Command, timeout: Duration) -> Result<Self> {
        let mut child = Group::spawn(cmd.stdout(Stdio::piped()).stderr(Stdio::piped()))
            .map_err(|e| FlightError::Other(e.to_string()))?;
        let shown = child.command().to_string();
        let stdout = child.take_stdout();
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
                if let Some(err) = child.take_stderr() {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut BufReader::new(err), &mut std::io::sink());
                    });
                }
                Ok(ChildServer { child, addr })
            }
            None => {
                let _ = child.kill();
                let mut err = String::new();
                if let Some(mut e) = child.take_stderr() {
                    let _ = e.read_to_string(&mut err);
                }
                Err(FlightError::Other(format!(
                    "server {shown} did not report its address within {timeout:?}: {line:?} {}",
                    err.trim()
                )))
            }
        }
    }

    /// The server's pid (also its process group's id).
    pub fn id(&self) -> u32 {
        self.child.id()
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

/// Runs `python pyarrow_server.py` (its ready line on our stdout) until
/// it exits or we get SIGINT/SIGTERM; the scripts' directory goes either way.
pub fn serve_cli(addr: &str, tls_dir: Option<&Path>) -> anyhow::Result<()> {
    let python = python();
    check(&python)?;
    let scripts = Scripts::write()?;
    let mut cmd = Command::new(&python);
    cmd.arg(scripts.server()).args(["--addr", addr]);
    if let Some(d) = tls_dir {
        cmd.arg("--tls-cert").arg(d.join("server.pem"));
        cmd.arg("--tls-key").arg(d.join("server.key"));
    }
    let status = run_until_signal(cmd)?;
    drop(scripts);
    match status {
        Some(st) if !st.success() => anyhow::bail!("pyarrow server exited ({st})"),
        _ => Ok(()),
    }
}

/// Runs `python pyarrow_client.py` with `bench`'s arguments (what pyarrow
/// can take: not --threads, one per stream, nor single transport flags,
/// only --profile); its JSON lines go to our stdout.
pub fn bench_cli(a: &testbed_vocab::request::flight::BenchRequest) -> anyhow::Result<()> {
    use crate::settings::{Op, TransportSettings};
    let op = match if a.put { Op::Put } else { a.op } {
        Op::Get => "get",
        Op::Put => "put",
        Op::Exchange => anyhow::bail!("the pyarrow client runs get and put, not exchange"),
    };
    if a.threads != 0 && a.threads != a.streams {
        anyhow::bail!("the pyarrow client runs one thread per stream: drop --threads");
    }
    if a.settings != TransportSettings::default() {
        anyhow::bail!(
            "the pyarrow client takes --profile tuned|defaults|library, not single transport flags"
        );
    }
    let python = python();
    check(&python)?;
    let scripts = Scripts::write()?;
    let mut cmd = Command::new(&python);
    cmd.arg(scripts.client()).arg(op);
    cmd.args(["--server", &a.server]);
    cmd.args(["--streams", &a.streams.to_string()]);
    cmd.args(["--records-per-stream", &a.records_per_stream.to_string()]);
    cmd.args(["--batch", &a.records_per_batch.to_string()]);
    cmd.args(["--compression", a.compression.name()]);
    cmd.args(["--seed", &a.seed.to_string()]);
    cmd.args(["--profile", a.profile.name()]);
    if let Some(ca) = &a.tls_ca {
        cmd.arg("--tls-ca").arg(ca);
    }
    if a.verify {
        cmd.arg("--verify");
    }
    if a.keep_batches {
        cmd.arg("--keep-batches");
    }
    let status = run_until_signal(cmd)?;
    drop(scripts);
    match status {
        Some(st) if !st.success() => anyhow::bail!("pyarrow client exited ({st})"),
        Some(_) => Ok(()),
        None => anyhow::bail!("stopped by a signal"),
    }
}

/// The child's exit status, or None when a signal stopped us first (the
/// child is then killed and reaped).
fn run_until_signal(mut cmd: Command) -> anyhow::Result<Option<std::process::ExitStatus>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut child = cmd
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| FlightError::io(format!("spawn {cmd:?}"), e))?;
    let rt = crate::runtime::runtime(Some(1))?;
    rt.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        loop {
            if let Some(st) = child.try_wait()? {
                return Ok(Some(st));
            }
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        Ok(None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    #[test]
    fn scripts_go_to_a_private_dir_not_a_pre_created_path() {
        let victim_dir = tempfile::tempdir().unwrap();
        let victim = victim_dir.path().join("victim");
        std::fs::write(&victim, "mine").unwrap();
        // Where the scripts used to go: temp_dir/testbed-flight-py-<pid>-<n>,
        // which another user can create first, with symlinks inside.
        let planted: Vec<PathBuf> = (0..16)
            .map(|n| {
                std::env::temp_dir().join(format!("testbed-flight-py-{}-{n}", std::process::id()))
            })
            .collect();
        for d in &planted {
            std::fs::create_dir(d).unwrap();
            for name in ["pyarrow_server.py", "pyarrow_client.py"] {
                symlink(&victim, d.join(name)).unwrap();
            }
        }
        let scripts = Scripts::write();
        for d in &planted {
            let _ = std::fs::remove_dir_all(d);
        }
        let scripts = scripts.unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
        let dir = scripts.server().parent().unwrap().to_path_buf();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
        assert_eq!(
            std::fs::read_to_string(scripts.server()).unwrap(),
            SERVER_PY
        );
        drop(scripts);
        assert!(!dir.exists());
    }
}
