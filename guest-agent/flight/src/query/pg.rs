//! A throwaway PostgreSQL 15 cluster in a run directory: initdb, start on a
//! free 127.0.0.1 port with its socket in the run directory, stop on drop.
//! Root cannot run postgres, so as root the server runs as user `postgres`
//! (looked up in /etc/passwd, no NSS needed).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{FlightError, Result};

pub const INSTALL_HINT: &str = "apt-get install -y postgresql-15";

pub struct PgCluster {
    pub data_dir: PathBuf,
    pub sock_dir: PathBuf,
    pub port: u16,
    bin: PathBuf,
    log: PathBuf,
    user: Option<(u32, u32)>,
    running: bool,
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

impl PgCluster {
    /// Creates and starts a cluster under `run_dir/pg`.
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
        std::fs::create_dir_all(&sock_dir)
            .map_err(|e| FlightError::io(format!("create {}", sock_dir.display()), e))?;
        if let Some((uid, gid)) = user {
            // postgres must reach and own its directories.
            for d in [run_dir, base.as_path()] {
                let mut p = std::fs::metadata(d)
                    .map_err(|e| FlightError::io(format!("stat {}", d.display()), e))?
                    .permissions();
                p.set_mode(p.mode() | 0o711);
                let _ = std::fs::set_permissions(d, p);
            }
            for d in [&base, &sock_dir] {
                std::os::unix::fs::chown(d, Some(uid), Some(gid))
                    .map_err(|e| FlightError::io(format!("chown {}", d.display()), e))?;
            }
        }
        let mut pg = PgCluster {
            data_dir: base.join("data"),
            sock_dir,
            port: free_port()?,
            bin,
            log: base.join("postgres.log"),
            user,
            running: false,
        };
        pg.run(
            "initdb",
            &[
                "-D",
                &pg.data_dir.display().to_string(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        )?;
        // Settings for a benchmark, not for durability; no parallel scans
        // and no synchronized scans so LIMIT N returns the same rows to all.
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_parallel_workers_per_gather=0 \
             -c synchronize_seqscans=off -c shared_buffers=256MB",
            pg.port,
            pg.sock_dir.display()
        );
        pg.run(
            "pg_ctl",
            &[
                "-D",
                &pg.data_dir.display().to_string(),
                "-l",
                &pg.log.display().to_string(),
                "-w",
                "-t",
                "120",
                "-o",
                &opts,
                "start",
            ],
        )
        .map_err(|e| {
            let log = std::fs::read_to_string(&pg.log).unwrap_or_default();
            FlightError::Other(format!("{e}\npostgres log:\n{}", log.trim()))
        })?;
        pg.running = true;
        Ok(pg)
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<()> {
        let mut cmd = Command::new(self.bin.join(tool));
        cmd.args(args).env("LC_ALL", "C");
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid).current_dir("/");
        }
        let out = cmd
            .output()
            .map_err(|e| FlightError::io(format!("run {tool}"), e))?;
        if !out.status.success() {
            return Err(FlightError::Other(format!(
                "{tool} {} failed ({}): {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// libpq-style connection string over TCP (what every client uses).
    pub fn conn_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    pub fn stop(&mut self) -> Result<()> {
        if !self.running {
            return Ok(());
        }
        self.running = false;
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data_dir.display().to_string(),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
        )
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
