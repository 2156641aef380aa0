//! A one-node Slurm cluster in a private directory: munged, slurmctld and
//! slurmd from Debian, started as this user's children and stopped on
//! drop. The tests run sweeps through it (no stand-in scheduler), and a
//! user can try the slurm executor on a laptop the same way
//! (`testbed slurm local DIR`).
//!
//! Working choices on this kind of host (cgroup v1, no systemd, no
//! slurmdbd) are in machine-notes: linuxproc process tracking, no task
//! plugin, no accounting; `batch_sched_delay=0` so a submitted array
//! starts within a second.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::host::wait::{Until, Waited, poll};
use crate::machine::qemu::process::GroupProcess;

use super::SlurmError;

/// A running local cluster. Client commands find it through `SLURM_CONF`
/// (see [`LocalSlurm::env`]).
pub struct LocalSlurm {
    pub dir: PathBuf,
    pub conf: PathBuf,
    /// The node's name (this host's), as `slurmd -C` prints it.
    pub node: String,
    /// CPUs of the node: how many 1-CPU tasks run at once.
    pub cpus: u32,
    // Stopped in reverse order: slurmd, slurmctld, munged.
    daemons: Vec<(&'static str, GroupProcess)>,
}

/// A free TCP port on the loopback (bound, then released for the daemon).
fn free_port() -> Result<u16, SlurmError> {
    let l = std::net::TcpListener::bind("0.0.0.0:0").map_err(|e| SlurmError::Local {
        step: "pick a port".into(),
        detail: e.to_string(),
    })?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| SlurmError::Local {
            step: "pick a port".into(),
            detail: e.to_string(),
        })
}

fn local_err(step: &str, detail: impl std::fmt::Display) -> SlurmError {
    SlurmError::Local {
        step: step.into(),
        detail: detail.to_string(),
    }
}

fn mkdir(path: &Path, mode: u32) -> Result<(), SlurmError> {
    std::fs::create_dir_all(path)
        .map_err(|e| local_err("create directory", format!("{}: {e}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| local_err("set permissions", format!("{}: {e}", path.display())))
}

/// `NodeName=... CPUs=... RealMemory=...` of this host, from `slurmd -C`.
fn node_line() -> Result<String, SlurmError> {
    let out = Command::new(sbin("slurmd"))
        .arg("-C")
        .output()
        .map_err(|e| local_err("slurmd -C", e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.starts_with("NodeName="))
        .map(str::to_string)
        .ok_or_else(|| local_err("slurmd -C", format!("no NodeName line in {text:?}")))
}

/// Debian installs the daemons in /usr/sbin, which a plain user's PATH
/// may lack.
fn sbin(name: &str) -> PathBuf {
    let p = Path::new("/usr/sbin").join(name);
    if p.exists() { p } else { PathBuf::from(name) }
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

impl LocalSlurm {
    /// Starts munged, slurmctld and slurmd with everything under `dir`
    /// (created 0711: munged wants its socket's directories searchable;
    /// the key, state and logs are in a 0700 subdirectory), and waits
    /// until the node takes jobs.
    pub fn start(dir: &Path) -> Result<LocalSlurm, SlurmError> {
        Self::start_with(dir, 100_001)
    }

    /// As [`LocalSlurm::start`], with the cluster's `MaxArraySize` (array
    /// task ids below it; sites often keep Slurm's default of 1001).
    pub fn start_with(dir: &Path, max_array_size: u32) -> Result<LocalSlurm, SlurmError> {
        let dir = std::path::absolute(dir).map_err(|e| local_err("directory", e))?;
        mkdir(&dir, 0o711)?;
        let private = dir.join("private");
        mkdir(&private, 0o700)?;
        let run = dir.join("run");
        mkdir(&run, 0o755)?;
        for sub in ["state", "spool", "log"] {
            mkdir(&private.join(sub), 0o700)?;
        }
        let key = private.join("munge.key");
        let mut bytes = vec![0u8; 1024];
        getrandom(&mut bytes)?;
        crate::host::fsutil::write_atomic(&key, &bytes).map_err(|e| local_err("munge key", e))?;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400))
            .map_err(|e| local_err("munge key", e))?;
        let socket = run.join("munge.sock");
        let log = private.join("log");
        let mut daemons = Vec::new();
        let mut munged = Command::new(sbin("munged"));
        munged
            .arg("-F")
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!(
                "--pid-file={}",
                private.join("munged.pid").display()
            ))
            .arg(format!(
                "--seed-file={}",
                private.join("munged.seed").display()
            ))
            .arg(format!("--log-file={}", log.join("munged.log").display()));
        daemons.push(("munged", spawn(&mut munged, &log.join("munged.out"))?));
        wait_for(Duration::from_secs(10), "munged socket", || socket.exists()).map_err(|e| {
            local_err(
                "start munged",
                format!(
                    "{e}: {}",
                    crate::machine::qemu::process::tail_lines(&log.join("munged.out"), 2)
                ),
            )
        })?;

        let node_line = node_line()?;
        let node = field(&node_line, "NodeName")
            .unwrap_or("localhost")
            .to_string();
        let cpus: u32 = field(&node_line, "CPUs")
            .and_then(|c| c.parse().ok())
            .unwrap_or(1);
        // The node line without UpTime=..., which slurm.conf does not take.
        let node_decl: Vec<&str> = node_line
            .split_whitespace()
            .filter(|w| !w.starts_with("UpTime="))
            .collect();
        let state = private.join("state");
        let spool = private.join("spool");
        let conf_text = format!(
            "# A one-node cluster for the testbed's tests (testbed::slurm::local).\n\
             ClusterName=testbed\n\
             SlurmctldHost={node}\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={slurmd_port}\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={socket}\n\
             CredType=cred/munge\n\
             SlurmUser={user}\n\
             SlurmdUser=root\n\
             StateSaveLocation={state}\n\
             SlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={log}/slurmctld.pid\n\
             SlurmdPidFile={log}/slurmd.pid\n\
             SlurmctldLogFile={log}/slurmctld.log\n\
             SlurmdLogFile={log}/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             SchedulerParameters=batch_sched_delay=0\n\
             ReturnToService=2\n\
             MpiDefault=none\n\
             MinJobAge=3600\n\
             MaxArraySize={max_array_size}\n\
             MaxJobCount=200000\n\
             {decl} State=UNKNOWN\n\
             PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
            ctld_port = free_port()?,
            slurmd_port = free_port()?,
            socket = socket.display(),
            user = whoami(),
            state = state.display(),
            spool = spool.display(),
            log = log.display(),
            decl = node_decl.join(" "),
        );
        let conf = dir.join("slurm.conf");
        crate::host::fsutil::write_atomic(&conf, conf_text.as_bytes())
            .map_err(|e| local_err("slurm.conf", e))?;
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644))
            .map_err(|e| local_err("slurm.conf", e))?;
        let mut cluster = LocalSlurm {
            dir: dir.clone(),
            conf: conf.clone(),
            node,
            cpus,
            daemons,
        };
        for daemon in ["slurmctld", "slurmd"] {
            let mut cmd = Command::new(sbin(daemon));
            cmd.arg("-D").arg("-f").arg(&conf).env("SLURM_CONF", &conf);
            let p = spawn(&mut cmd, &log.join(format!("{daemon}.out")))?;
            cluster.daemons.push((daemon, p));
        }
        cluster.wait_idle(Duration::from_secs(30))?;
        Ok(cluster)
    }

    /// The environment client commands (sbatch, squeue, scontrol) need.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![("SLURM_CONF".into(), self.conf.display().to_string())]
    }

    /// Waits until the node reports idle (slurmctld takes ~3 s to start
    /// scheduling, slurmd to register).
    fn wait_idle(&mut self, limit: Duration) -> Result<(), SlurmError> {
        let started = Instant::now();
        loop {
            if let Some((name, status)) = self.exited_daemon() {
                return Err(local_err(
                    &format!("start {name}"),
                    format!(
                        "it exited ({status}); see {}",
                        self.dir.join("private/log").display()
                    ),
                ));
            }
            let out = Command::new("sinfo")
                .args(["-h", "-o", "%T"])
                .env("SLURM_CONF", &self.conf)
                .stderr(Stdio::null())
                .output();
            if let Ok(o) = out
                && String::from_utf8_lossy(&o.stdout).trim() == "idle"
            {
                return Ok(());
            }
            if started.elapsed() > limit {
                return Err(local_err(
                    "wait for the node",
                    format!(
                        "not idle after {limit:?}; see {}",
                        self.dir.join("private/log").display()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn exited_daemon(&mut self) -> Option<(&'static str, String)> {
        self.daemons
            .iter_mut()
            .find_map(|(n, p)| p.try_wait().map(|s| (*n, s.to_string())))
    }

    /// Cancels every job, then stops the daemons (slurmd first).
    pub fn stop(&mut self) {
        let _ = Command::new("scancel")
            .args(["--full", "-u", &whoami()])
            .env("SLURM_CONF", &self.conf)
            .stderr(Stdio::null())
            .status();
        while let Some((_, mut p)) = self.daemons.pop() {
            p.kill();
        }
    }
}

impl Drop for LocalSlurm {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn(cmd: &mut Command, log: &Path) -> Result<GroupProcess, SlurmError> {
    let out = std::fs::File::create(log)
        .map_err(|e| local_err("log", format!("{}: {e}", log.display())))?;
    let err = out.try_clone().map_err(|e| local_err("log", e))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let program = cmd.get_program().to_string_lossy().into_owned();
    GroupProcess::spawn_command(cmd).map_err(|e| local_err(&format!("start {program}"), e))
}

fn wait_for(
    limit: Duration,
    what: &str,
    mut ready: impl FnMut() -> bool,
) -> Result<(), SlurmError> {
    match poll(Until::after(limit), Duration::from_millis(50), || {
        ready().then_some(())
    }) {
        Waited::Done(()) => Ok(()),
        Waited::TimedOut | Waited::Interrupted => {
            Err(local_err(what, format!("not ready after {limit:?}")))
        }
    }
}

fn getrandom(buf: &mut [u8]) -> Result<(), SlurmError> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .map_err(|e| local_err("munge key", e))
}

/// This process's user name (Slurm runs the jobs as the submitting user).
pub fn whoami() -> String {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string())
}
