//! The `qemu` executor: one VM boot runs points until done or dead.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use testbed_agent::protocol::DeviceRef;

use super::session::{Fatal, Session};
use super::{BootError, BootRecord, Executor, OnPoint, PointOutcome};
use crate::plan::Point;
use crate::progress::Event;
use crate::qemu::argv::{VmConfig, build_argv, kernel_append};
use crate::qemu::channel::Channel;
use crate::qemu::process::{VmProcess, console_digest, tail_lines};
use crate::spec::Timeouts;

pub struct QemuExecutor {
    /// Everything but the per-boot append line, console and socket paths.
    pub config: VmConfig,
    pub cmdline_extra: Vec<String>,
    pub devices: BTreeMap<String, DeviceRef>,
    pub timeouts: Timeouts,
    pub run_dir: PathBuf,
}

/// Random hex from the kernel, for nonces and socket names.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut buf);
    }
    hex::encode(buf)
}

impl QemuExecutor {
    fn console_path(&self, index: u32) -> PathBuf {
        if index == 0 {
            self.run_dir.join("console.log")
        } else {
            self.run_dir.join(format!("console.boot{index}.log"))
        }
    }
}

impl Executor for QemuExecutor {
    fn run_boot(
        &mut self,
        index: u32,
        points: &[Point],
        on_point: &mut OnPoint<'_>,
        events: &mut dyn FnMut(Event),
    ) -> Result<(BootRecord, usize), BootError> {
        let nonce = random_hex(8);
        let mut config = self.config.clone();
        config.append = kernel_append(config.accel, &nonce, false, &self.cmdline_extra);
        config.console_log = self.console_path(index);
        // Unix socket paths are limited to 108 bytes: keep it short, in /tmp.
        config.agent_socket = std::env::temp_dir().join(format!("testbed-{nonce}.sock"));
        let argv = build_argv(&config);
        let console = config.console_log.clone();
        let mut record = BootRecord {
            index,
            hello: None,
            ready_ms: None,
            points: Vec::new(),
            ended: String::new(),
            argv: argv.clone(),
        };
        events(Event::BootStarted {
            index,
            accel: config.accel.to_string(),
        });
        let started = Instant::now();
        let qemu_log = self.run_dir.join(if index == 0 {
            "qemu.log".to_string()
        } else {
            format!("qemu.boot{index}.log")
        });
        let mut vm =
            VmProcess::spawn(&argv, &qemu_log).map_err(|e| BootError::Failed(e.to_string()))?;
        let socket = config.agent_socket.clone();
        let _cleanup = RemoveOnDrop(socket.clone());
        let channel = match Channel::connect_vm(&socket, &mut vm, self.timeouts.boot.0) {
            Ok(c) => c,
            Err(e) => {
                vm.kill();
                return Err(BootError::Failed(format!(
                    "{e}\nQEMU said:\n{}",
                    tail_lines(&qemu_log, 10)
                )));
            }
        };
        let vm_cell = std::cell::RefCell::new(&mut vm);
        let console_for_dead = console.clone();
        let qemu_log_for_dead = qemu_log.clone();
        let mut session = Session {
            channel,
            is_dead: Box::new(|| {
                let status = vm_cell.borrow_mut().try_wait()?;
                Some(format!(
                    "QEMU exited ({status})\nlast console lines:\n{}\nQEMU said:\n{}",
                    console_digest(&console_for_dead, 15),
                    tail_lines(&qemu_log_for_dead, 5)
                ))
            }),
            heartbeat_timeout: self.timeouts.heartbeat.0,
        };
        let hello = match session.handshake(&nonce, self.timeouts.boot.0) {
            Ok(h) => h,
            Err(Fatal::Interrupted) => return Err(BootError::Interrupted),
            Err(e) => {
                drop(session);
                vm.kill();
                return Err(BootError::Failed(format!(
                    "the guest never reached the agent: {e}\nlast console lines:\n{}",
                    console_digest(&console, 15)
                )));
            }
        };
        let ready_ms = started.elapsed().as_millis() as u64;
        record.ready_ms = Some(ready_ms);
        events(Event::BootReady {
            index,
            ready_ms,
            uname: hello.uname.clone(),
        });
        record.hello = Some(hello);

        let mut handled = 0;
        for (i, point) in points.iter().enumerate() {
            events(Event::PointStarted {
                id: point.id(),
                label: point.label(),
            });
            let job_id = (u64::from(index) << 32) | i as u64;
            match session.run_point(job_id, point, &self.devices, self.timeouts.point.0) {
                Ok(outcome) => {
                    handled += 1;
                    record.points.push(point.id());
                    if let Err(e) = on_point(point, outcome) {
                        record.ended = format!("stopped: {e}");
                        return Ok((record, handled));
                    }
                }
                Err(Fatal::Interrupted) => return Err(BootError::Interrupted),
                Err(fatal) => {
                    handled += 1;
                    record.points.push(point.id());
                    drop(session);
                    vm.kill();
                    let error = format!(
                        "{fatal}\nlast console lines:\n{}",
                        console_digest(&console, 15)
                    );
                    record.ended = format!("failed at point {}: {fatal}", point.id());
                    let _ = on_point(point, PointOutcome::Failed { error });
                    return Ok((record, handled));
                }
            }
        }
        let shutdown = session.shutdown(Duration::from_secs(10));
        drop(session);
        record.ended = match shutdown {
            Ok(()) => "shutdown".into(),
            Err(e) => format!("shutdown: {e}"),
        };
        if vm.wait_timeout(Duration::from_secs(15)).is_none() {
            record.ended.push_str(" (QEMU did not exit: killed)");
            vm.kill();
        }
        Ok((record, handled))
    }
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
