//! A throwaway PostgreSQL 15 cluster in a run directory: initdb with
//! password authentication (a random password, never trust), the server
//! binary run as our child on a free 127.0.0.1 port with its socket in a
//! private directory, and stopped with the cluster (on every path: drop).
//! Root cannot run postgres, so as root the server runs as user `postgres`
//! (looked up in /etc/passwd, no NSS needed).

use std::fs::DirBuilder;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testbed_proc::Group;

use crate::error::{FlightError, Result};

pub const INSTALL_HINT: &str = "apt-get install -y postgresql-15";

/// How long initdb and the server's start may take (TCG is slow).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a fast shutdown may take before the group is killed.
const STOP_GRACE: Duration = Duration::from_secs(30);

pub struct PgCluster {
    pub data_dir: PathBuf,
    pub sock_dir: PathBuf,
    pub port: u16,
    password: String,
    bin: PathBuf,
    log: PathBuf,
    user: Option<(u32, u32)>,
    /// The postmaster; None once stopped.
    server: Option<Group>,
}

/// uid and gid of `name` from /etc/passwd.
fn passwd_ids(name: &str) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

pub fn bin_dir() -> Result<PathBuf> {
    let dir = std::env::var_os("TESTBED_PG_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"));
    if dir.join("postgres").is_file() {
        Ok(dir)
    } else {
        Err(FlightError::Other(format!(
            "PostgreSQL 15 not found in {} ({INSTALL_HINT}, or set TESTBED_PG_BIN)",
            dir.display()
        )))
    }
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| FlightError::io("pick a free port", e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| FlightError::io("pick a free port", e))
}

/// 32 random bytes from the kernel, as hex: the cluster's password.
pub fn random_password() -> Result<String> {
    let mut bytes = [0u8; 32];
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: getrandom writes at most rest.len() bytes into rest.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(FlightError::io("getrandom", e));
            }
        } else {
            filled += n as usize;
        }
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Creates `dir` with mode 0700; an existing one must be a real directory
/// (not a symlink), and gets mode 0700 too.
fn private_dir(dir: &Path) -> Result<()> {
    let ctx = |e| FlightError::io(format!("create {}", dir.display()), e);
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let m = std::fs::symlink_metadata(dir).map_err(ctx)?;
            if !m.is_dir() {
                return Err(FlightError::Other(format!(
                    "{} exists and is not a directory",
                    dir.display()
                )));
            }
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(ctx)
        }
        Err(e) => Err(ctx(e)),
    }
}

impl PgCluster {
    /// Creates a cluster under `run_dir/pg` and starts it; returns once it
    /// accepts connections.
    pub fn start(run_dir: &Path) -> Result<Self> {
        let bin = bin_dir()?;
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let user = if root {
            Some(passwd_ids("postgres").ok_or_else(|| {
                FlightError::Other(format!(
                    "running as root needs the postgres user ({INSTALL_HINT} creates it)"
                ))
            })?)
        } else {
            None
        };
        let base = run_dir.join("pg");
        let sock_dir = base.join("sock");
        private_dir(&base)?;
        private_dir(&sock_dir)?;
        if let Some((uid, gid)) = user {
            // postgres must get through the run directory (not list it) and
            // own its directories, which stay 0700.
            let mut p = std::fs::metadata(run_dir)
                .map_err(|e| FlightError::io(format!("stat {}", run_dir.display()), e))?
                .permissions();
            p.set_mode(p.mode() | 0o711);
            let _ = std::fs::set_permissions(run_dir, p);
            for d in [&base, &sock_dir] {
                std::os::unix::fs::chown(d, Some(uid), Some(gid))
                    .map_err(|e| FlightError::io(format!("chown {}", d.display()), e))?;
            }
        }
        let mut pg = PgCluster {
            data_dir: base.join("data"),
            sock_dir,
            port: free_port()?,
            password: random_password()?,
            bin,
            log: base.join("postgres.log"),
            user,
            server: None,
        };
        pg.initdb(&base)?;
        pg.start_server()?;
        Ok(pg)
    }

    /// initdb with password authentication for every connection, the
    /// password passed in a 0600 file that is removed right after.
    fn initdb(&self, base: &Path) -> Result<()> {
        let pwfile = base.join("pwfile");
        let written = crate::private::create_new(&pwfile).and_then(|mut f| {
            if let Some((uid, gid)) = self.user {
                std::os::unix::fs::fchown(&f, Some(uid), Some(gid))
                    .map_err(|e| FlightError::io(format!("chown {}", pwfile.display()), e))?;
            }
            writeln!(f, "{}", self.password)
                .map_err(|e| FlightError::io(format!("write {}", pwfile.display()), e))
        });
        let result = written.and_then(|()| {
            let mut cmd = self.command("initdb");
            cmd.arg("-D")
                .arg(&self.data_dir)
                .args(["-U", "postgres", "--auth=scram-sha-256", "-E", "UTF8"])
                .args(["--locale=C", "--no-sync"])
                .arg(format!("--pwfile={}", pwfile.display()));
            let out = testbed_proc::run_captured(&mut cmd, START_TIMEOUT)
                .map_err(|e| FlightError::Other(format!("initdb: {e}")))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(FlightError::Other(format!(
                    "initdb failed ({}): {}{}",
                    out.status,
                    out.stdout.trim(),
                    out.stderr.trim()
                )))
            }
        });
        let _ = std::fs::remove_file(&pwfile);
        result
    }

    /// Runs the postmaster as our child in its own process group (killed
    /// with us, see testbed_proc::contain) and waits until it is ready.
    fn start_server(&mut self) -> Result<()> {
        let log = crate::private::create_new(&self.log)?;
        let log_err = log
            .try_clone()
            .map_err(|e| FlightError::io(format!("open {}", self.log.display()), e))?;
        let mut cmd = self.command("postgres");
        cmd.arg("-D")
            .arg(&self.data_dir)
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(&self.sock_dir)
            // Only loopback; settings for a benchmark, not for durability;
            // no parallel scans and no synchronized scans so LIMIT N returns
            // the same rows to all.
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_permissions=0700"])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off"])
            .args(["-c", "max_parallel_workers_per_gather=0"])
            .args([
                "-c",
                "synchronize_seqscans=off",
                "-c",
                "shared_buffers=256MB",
            ])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        // SIGINT is PostgreSQL's fast shutdown.
        let server = Group::spawn(&mut cmd)
            .map_err(|e| FlightError::Other(e.to_string()))?
            .stop_with(libc::SIGINT, STOP_GRACE);
        let pid = server.id();
        self.server = Some(server);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.ready(pid) {
                return Ok(());
            }
            let exited = match self.server.as_mut().map(Group::try_wait) {
                Some(Ok(Some(status))) => Some(status.to_string()),
                Some(Err(e)) => Some(e.to_string()),
                _ => None,
            };
            if exited.is_some() || Instant::now() >= deadline {
                let why = exited.map_or_else(
                    || format!("not ready within {START_TIMEOUT:?}"),
                    |s| format!("exited ({s})"),
                );
                // Drops (stops) the server too.
                self.server = None;
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                return Err(FlightError::Other(format!(
                    "postgres {why}\npostgres log:\n{}",
                    log.trim()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether postmaster.pid names `pid` and says "ready" (what `pg_ctl
    /// -w` waits for): the server accepts connections.
    fn ready(&self, pid: u32) -> bool {
        let Ok(text) = std::fs::read_to_string(self.data_dir.join("postmaster.pid")) else {
            return false;
        };
        let lines: Vec<&str> = text.lines().collect();
        lines.first().map(|l| l.trim()) == Some(pid.to_string().as_str())
            && lines.get(7).map(|l| l.trim()) == Some("ready")
    }

    /// A PostgreSQL program, run as the postgres user when we are root.
    fn command(&self, tool: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(tool));
        cmd.env("LC_ALL", "C");
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid).current_dir("/");
        }
        cmd
    }

    /// The postmaster's pid while it runs (its backends are its children).
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(Group::id)
    }

    /// The password of user `postgres`.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// libpq-style connection string over TCP, password included (what
    /// every client uses).
    pub fn conn_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres password={}",
            self.port, self.password
        )
    }

    /// Fast shutdown (SIGINT), then SIGKILL to the group after a grace.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut server) = self.server.take() else {
            return Ok(());
        };
        let status = server
            .stop()
            .map_err(|e| FlightError::io("stop postgres", e))?;
        if status.success() {
            Ok(())
        } else {
            Err(FlightError::Other(format!(
                "postgres did not shut down cleanly ({status})"
            )))
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
