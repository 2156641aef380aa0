//! The `qemu` executor: one VM boot runs points until done or dead; and the
//! pair variant, two VMs on one virtual link (server and client).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use testbed_agent::protocol::{DeviceRef, Hello};

use super::session::{Fatal, PointRun, PointsEnded, Session};
use super::{Boot, BootError, BootRecord, Executor, PointOutcome};
use crate::host::kernel_limits::Wanted;
use crate::host::progress::Event;
use crate::machine::qemu::argv::{Nic, VmConfig, build_argv, kernel_append};
use crate::machine::qemu::channel::Channel;
use crate::machine::qemu::pin::{PinSetting, Pinning};
use crate::machine::qemu::process::{VmProcess, console_digest, tail_lines};
use crate::machine::qemu::qmp::Qmp;
use crate::planning::spec::{Limits, Timeouts};

pub struct QemuExecutor {
    /// Everything but the per-boot append line, console and socket paths.
    pub config: VmConfig,
    pub cmdline_extra: Vec<String>,
    pub devices: BTreeMap<String, DeviceRef>,
    pub timeouts: Timeouts,
    /// What each point may cost the host.
    pub limits: Limits,
    pub run_dir: PathBuf,
    /// `[vm] pin`: where the (client) VM's threads run.
    pub pin: PinSetting,
    /// Two VMs on one link: the setup job for the server VM, and the link.
    pub pair: Option<PairSetup>,
}

#[derive(Debug, Clone)]
pub struct PairSetup {
    /// Runs on the server VM once per boot, before any point (a service).
    pub server_job: crate::planning::plan::Point,
    /// Guest addresses of server and client on the link.
    pub server_addr: String,
    pub client_addr: String,
}

// Moved to the host layer (crate::host::random); this re-export keeps this file
// and executor/host.rs as they are. To be removed once they use it.
pub use crate::host::random::hex as random_hex;

/// A booted VM whose agent has said hello.
pub struct BootedVm {
    pub vm: Rc<RefCell<VmProcess>>,
    pub session: Session<'static>,
    pub console: PathBuf,
    pub hello: Hello,
    pub ready_ms: u64,
    pub argv: Vec<String>,
    pub pinning: Pinning,
}

/// Kills QEMU; the error text for a point, with the console digest.
fn kill_and_describe(vm: &RefCell<VmProcess>, console: &Path, fatal: &Fatal) -> String {
    vm.borrow_mut().kill();
    format!(
        "{fatal}\nlast console lines:\n{}",
        console_digest(console, 15)
    )
}

impl BootedVm {
    /// Ends the conversation and kills QEMU; the error text for a point.
    fn fail(self, fatal: &Fatal) -> String {
        drop(self.session);
        kill_and_describe(&self.vm, &self.console, fatal)
    }

    /// Asks the agent to power off; kills QEMU if it does not end by itself.
    fn shutdown(self) -> String {
        let mut session = self.session;
        let mut ended = match session.shutdown(Duration::from_secs(10)) {
            Ok(()) => "shutdown".to_string(),
            Err(e) => format!("shutdown: {e}"),
        };
        drop(session);
        let mut vm = self.vm.borrow_mut();
        if vm.wait_timeout(Duration::from_secs(15)).is_none() {
            ended.push_str(" (QEMU did not exit: killed)");
            vm.kill();
        }
        ended
    }
}

/// Reads the vCPU threads over QMP and pins them (and QEMU's other
/// threads) by `setting`; the record says what each thread got.
fn pin_threads(pid: u32, qmp_socket: &Path, setting: &PinSetting) -> Pinning {
    let host = crate::machine::qemu::pin::host_cpus();
    match Qmp::connect(qmp_socket, Duration::from_secs(10)).and_then(|mut q| q.vcpu_threads()) {
        Ok(vcpus) => crate::machine::qemu::pin::apply(pid, &vcpus, setting, &host),
        Err(e) => crate::machine::qemu::pin::unknown(setting, &host, &e.to_string()),
    }
}

/// Boots one VM (`label` names its log files), pins its threads and waits
/// for its agent.
pub fn boot_vm(
    base: &VmConfig,
    cmdline_extra: &[String],
    run_dir: &Path,
    label: &str,
    timeouts: &Timeouts,
    pin: &PinSetting,
    limits: &Wanted,
) -> Result<BootedVm, BootError> {
    let nonce = random_hex(8);
    let mut config = base.clone();
    config.append = kernel_append(config.accel, &nonce, false, cmdline_extra);
    config.console_log = run_dir.join(format!("console{label}.log"));
    // Unix socket paths are limited to 108 bytes, so not in the run
    // directory: in a private directory of our own (mkdtemp, mode 0700)
    // under /tmp, where no other user can reach or replace it.
    let socket_dir = private_socket_dir()?;
    config.agent_socket = socket_dir.path().join("agent.sock");
    config.qmp_socket = Some(socket_dir.path().join("qmp.sock"));
    let argv = build_argv(&config);
    let console = config.console_log.clone();
    let qemu_log = run_dir.join(format!("qemu{label}.log"));
    let started = Instant::now();
    let mut vm =
        VmProcess::spawn_limited(&argv, &qemu_log, limits).map_err(BootError::QemuSpawn)?;
    let socket = config.agent_socket.clone();
    let connected = Channel::connect_vm(&socket, &mut vm, timeouts.boot.0);
    // QEMU is up once its agent socket is: pinned before the guest has
    // done much, so the boot and every point run where they will.
    let pinning = match (&connected, &config.qmp_socket) {
        (Ok(_), Some(qmp)) => pin_threads(vm.pid, qmp, pin),
        _ => crate::machine::qemu::pin::unknown(pin, &[], "QEMU did not come up"),
    };
    // QEMU holds the sockets open; their names are no longer needed.
    drop(socket_dir);
    let channel = match connected {
        Ok(c) => c,
        Err(e) => {
            vm.kill();
            return Err(BootError::QemuNotUp {
                error: e.to_string(),
                qemu_said: tail_lines(&qemu_log, 10),
            });
        }
    };
    let vm = Rc::new(RefCell::new(vm));
    let (vm_for_dead, console_for_dead) = (vm.clone(), console.clone());
    let qemu_log_for_error = qemu_log.clone();
    let mut session = Session {
        channel,
        is_dead: Box::new(move || {
            // A guest flooding its console is stopped before it fills the disk.
            if let Some(size) = oversized(&console_for_dead, MAX_CONSOLE) {
                vm_for_dead.borrow_mut().kill();
                return Some(format!(
                    "the guest wrote {size} bytes to its console (at most {MAX_CONSOLE}): stopped\nlast console lines:\n{}",
                    console_digest(&console_for_dead, 5)
                ));
            }
            let mut vm = vm_for_dead.borrow_mut();
            let status = vm.try_wait()?;
            // Named first: the kernel's limit is why, the rest is what it did.
            let hit = vm.limit_hit().map(|h| format!("{h}; ")).unwrap_or_default();
            Some(format!(
                "{hit}QEMU exited ({status})\nlast console lines:\n{}\nQEMU said:\n{}",
                console_digest(&console_for_dead, 15),
                tail_lines(&qemu_log, 5)
            ))
        }),
        heartbeat_timeout: timeouts.heartbeat.0,
        spill_dir: run_dir.join("points"),
    };
    match session.handshake(&nonce, timeouts.boot.0) {
        Ok(hello) => Ok(BootedVm {
            vm,
            session,
            console,
            hello,
            ready_ms: started.elapsed().as_millis() as u64,
            argv,
            pinning,
        }),
        Err(Fatal::Interrupted) => Err(BootError::Interrupted),
        Err(e) => {
            drop(session);
            vm.borrow_mut().kill();
            Err(BootError::NoAgent {
                error: e.to_string(),
                console: console_digest(&console, 15),
                qemu_said: tail_lines(&qemu_log_for_error, 10),
            })
        }
    }
}

/// A new directory only this user can enter, for the agent socket.
fn private_socket_dir() -> Result<tempfile::TempDir, BootError> {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix("testbed-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(BootError::SocketDir)
}

/// The most a guest may write to its console in one boot; the kernel and
/// the agent write kilobytes.
pub const MAX_CONSOLE: u64 = 64 << 20;

/// The file's size when it is larger than `limit`.
fn oversized(path: &Path, limit: u64) -> Option<u64> {
    let size = std::fs::metadata(path).ok()?.len();
    (size > limit).then_some(size)
}

/// "" for boot 0, ".boot3" after, plus a role suffix for pairs.
fn label(index: u32, role: &str) -> String {
    let boot = if index == 0 {
        String::new()
    } else {
        format!(".boot{index}")
    };
    if role.is_empty() {
        boot
    } else {
        format!("-{role}{boot}")
    }
}

impl QemuExecutor {
    fn record(index: u32, vm: &BootedVm) -> BootRecord {
        BootRecord {
            index,
            hello: Some(vm.hello.clone()),
            ready_ms: Some(vm.ready_ms),
            points: Vec::new(),
            ended: String::new(),
            argv: vm.argv.clone(),
            server_argv: None,
            pinning: Some(vm.pinning.clone()),
        }
    }

    /// Boots one VM of boot `index` (`role` names its logs), telling
    /// `events` when it starts and when its agent is ready.
    #[allow(clippy::too_many_arguments)]
    fn boot_announced(
        &self,
        index: u32,
        config: &VmConfig,
        extra: &[String],
        role: &str,
        accel: String,
        pin: &PinSetting,
        limits: &Wanted,
        events: &mut dyn FnMut(Event),
    ) -> Result<BootedVm, BootError> {
        events(Event::BootStarted { index, accel });
        let vm = boot_vm(
            config,
            extra,
            &self.run_dir,
            &label(index, role),
            &self.timeouts,
            pin,
            limits,
        )?;
        events(Event::BootReady {
            index,
            ready_ms: vm.ready_ms,
            uname: vm.hello.uname.clone(),
        });
        Ok(vm)
    }

    /// The server VM of a pair: listens on the link, runs the setup job.
    fn boot_server(
        &self,
        index: u32,
        pair: &PairSetup,
        link: &Path,
        vcpus: Option<u32>,
        events: &mut dyn FnMut(Event),
    ) -> Result<BootedVm, BootError> {
        let mut config = self.config.clone();
        if let Some(n) = vcpus {
            config.vcpus = n;
        }
        config.nics = vec![Nic {
            mac: "52:54:00:7e:57:01".into(),
            netdev: link_netdev(link, true),
        }];
        let mut extra = self.cmdline_extra.clone();
        extra.push(format!(
            "{}={}",
            testbed_agent::protocol::CMDLINE_NET,
            pair.server_addr
        ));
        let accel = format!("{} server", config.accel);
        // The server is not what a point measures: its threads stay where
        // the scheduler puts them (recorded as such).
        let mut vm = self.boot_announced(
            index,
            &config,
            &extra,
            "server",
            accel,
            &PinSetting::Off,
            // A service for the whole boot: the points' limits are not its.
            &Wanted::default(),
            events,
        )?;
        let job_id = (u64::from(index) << 32) | 0xFFFF_FFFF;
        match vm.session.run_point(
            job_id,
            &pair.server_job,
            &self.devices,
            self.timeouts.point.0,
            // A service for the whole boot: the points' limits are not its.
            &Limits::default(),
        ) {
            Ok(PointOutcome::Done { .. }) => Ok(vm),
            Ok(PointOutcome::Failed { error }) => {
                let _ = vm.shutdown();
                Err(BootError::ServerSetup(error))
            }
            Err(Fatal::Interrupted) => Err(BootError::Interrupted),
            Err(fatal) => Err(BootError::ServerVm(vm.fail(&fatal))),
        }
    }
}

/// The two VMs' link: a stream socket (the same framing as QEMU's
/// `socket` backend) on a Unix socket in a private directory. A TCP port on
/// loopback would let any local user connect first and take the link.
fn link_netdev(path: &Path, server: bool) -> String {
    format!(
        "stream,server={},addr.type=unix,addr.path={}",
        if server { "on" } else { "off" },
        path.to_string_lossy().replace(',', ",,")
    )
}

impl Executor for QemuExecutor {
    fn run_boot(&mut self, boot: Boot<'_>) -> Result<(BootRecord, usize), BootError> {
        let mut server = None;
        let mut config = self.config.clone();
        // A `vm.vcpus` sweep: this boot's points share their count.
        let vcpus = boot.points.first().and_then(|p| p.vm_vcpus);
        if let Some(n) = vcpus {
            config.vcpus = n;
        }
        let mut extra = self.cmdline_extra.clone();
        let mut peer = None;
        // Lives until both VMs are gone.
        let link_dir = match self.pair {
            Some(_) => Some(private_socket_dir()?),
            None => None,
        };
        if let (Some(pair), Some(dir)) = (self.pair.clone(), &link_dir) {
            let link = dir.path().join("link.sock");
            server = Some(self.boot_server(boot.index, &pair, &link, vcpus, boot.events)?);
            // The server's QEMU listens from its start, long before its
            // agent answered; QEMU 7.2 never retries a connect, so check.
            if !link.exists() {
                return Err(BootError::NoLinkSocket(link));
            }
            config.nics = vec![Nic {
                mac: "52:54:00:7e:57:02".into(),
                netdev: link_netdev(&link, false),
            }];
            extra.push(format!(
                "{}={}",
                testbed_agent::protocol::CMDLINE_NET,
                pair.client_addr
            ));
            // The address without its prefix length; none leaves "{peer}" as written.
            peer = pair
                .server_addr
                .split('/')
                .next()
                .filter(|addr| !addr.is_empty())
                .map(str::to_string);
        }
        let role = if server.is_some() { "client" } else { "" };
        let accel = config.accel.to_string();
        let pin = self.pin.clone();
        let mut vm = self.boot_announced(
            boot.index,
            &config,
            &extra,
            role,
            accel,
            &pin,
            &self.limits.for_the_kernel(false),
            boot.events,
        )?;
        let mut record = Self::record(boot.index, &vm);
        record.server_argv = server.as_ref().map(|s| s.argv.clone());
        let run = PointRun {
            points: boot.points,
            devices: &self.devices,
            timeout: self.timeouts.point.0,
            limits: &self.limits,
            peer: peer.as_deref(),
        };
        let points_ended =
            vm.session
                .run_points(&run, &mut record, boot.on_point, boot.events, |fatal| {
                    kill_and_describe(&vm.vm, &vm.console, fatal)
                })?;
        // Every point that got an outcome is listed in the record.
        let handled = record.points.len();
        if points_ended == PointsEnded::Died {
            drop(vm);
            if let Some(s) = server {
                let _ = s.shutdown();
            }
            return Ok((record, handled));
        }
        let ended = vm.shutdown();
        if record.ended.is_empty() {
            record.ended = ended;
        }
        if let Some(s) = server {
            let ended = s.shutdown();
            record.ended.push_str(&format!("; server VM: {ended}"));
        }
        Ok((record, handled))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_socket_lives_in_a_directory_only_we_can_enter() {
        use std::os::unix::fs::PermissionsExt;
        let dir = private_socket_dir().unwrap();
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let sock = dir.path().join("agent.sock");
        assert!(sock.as_os_str().len() < 108, "{}", sock.display());
    }

    #[test]
    fn labels_name_boots_and_roles() {
        assert_eq!(label(0, ""), "");
        assert_eq!(label(2, ""), ".boot2");
        assert_eq!(label(0, "server"), "-server");
        assert_eq!(label(1, "client"), "-client.boot1");
    }

    #[test]
    fn the_vm_link_is_a_unix_socket_not_a_port() {
        let link = Path::new("/tmp/testbed-a,b/link.sock");
        assert_eq!(
            link_netdev(link, true),
            "stream,server=on,addr.type=unix,addr.path=/tmp/testbed-a,,b/link.sock"
        );
        assert!(link_netdev(link, false).starts_with("stream,server=off,addr.type=unix,"));
    }
}
