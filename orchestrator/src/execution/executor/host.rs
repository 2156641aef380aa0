//! The `host` executor: the agent as a plain child process on this machine,
//! speaking the protocol over its stdin/stdout. For workloads that need no
//! special kernel (Flight on loopback, library-level checks).

use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testbed_agent::protocol::DeviceRef;

use super::session::{Fatal, PointRun, PointsEnded, Session};
use super::{Boot, BootError, BootRecord, Executor, PointOutcome};
use crate::host::progress::Event;
use crate::machine::qemu::channel::Channel;
use crate::machine::qemu::process::GroupProcess;
use crate::planning::spec::{Limits, Timeouts};

pub struct HostExecutor {
    pub agent: PathBuf,
    /// Devices with `path` set to their backing files.
    pub devices: BTreeMap<String, DeviceRef>,
    pub timeouts: Timeouts,
    /// What each point may cost the host.
    pub limits: Limits,
    /// Extra environment for the agent (e.g. where helper binaries are).
    pub env: Vec<(String, String)>,
    /// Where points' samples wait to be stored (inside the run directory).
    pub spill_dir: PathBuf,
}

impl Executor for HostExecutor {
    fn run_boot(&mut self, boot: Boot<'_>) -> Result<(BootRecord, usize), BootError> {
        let nonce = super::qemu::random_hex(8);
        let argv = vec![
            self.agent.to_string_lossy().into_owned(),
            "--stdio".to_string(),
        ];
        (boot.events)(Event::BootStarted {
            index: boot.index,
            accel: "host".into(),
        });
        let started = Instant::now();
        // Its own process group, dying with us, killed as a group when this
        // boot ends by any path (the guard's drop): helpers it started go too.
        // Memory and processes limited by the kernel for the whole boot:
        // a point over them is ended at once, not at the next poll.
        let mut child = GroupProcess::spawn_command_limited(
            Command::new(&self.agent)
                .arg("--stdio")
                .env("TESTBED_NONCE", &nonce)
                // Names the run in the environment of the agent and of all
                // it starts, so what belongs to a run can be found by name.
                .env(
                    "TESTBED_RUN_DIR",
                    self.spill_dir.parent().unwrap_or(&self.spill_dir),
                )
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
            &self.limits.for_the_kernel(true),
        )
        .map_err(|source| BootError::AgentSpawn {
            path: self.agent.clone(),
            source,
        })?;
        let (Some(stdin), Some(stdout)) = (
            child.child_mut().stdin.take(),
            child.child_mut().stdout.take(),
        ) else {
            return Err(BootError::NoStdio);
        };
        let channel = Channel::from_parts(BufReader::new(stdout), Box::new(stdin));
        let child_cell = std::cell::RefCell::new(&mut child);
        let mut session = Session {
            channel,
            is_dead: Box::new(|| {
                let mut child = child_cell.borrow_mut();
                let status = child.try_wait()?;
                Some(match child.limit_hit() {
                    Some(hit) => format!("{hit}; agent process exited ({status})"),
                    None => format!("agent process exited ({status})"),
                })
            }),
            heartbeat_timeout: self.timeouts.heartbeat.0,
            spill_dir: self.spill_dir.clone(),
        };
        let mut record = BootRecord {
            index: boot.index,
            hello: None,
            ready_ms: None,
            points: Vec::new(),
            ended: String::new(),
            argv,
            server_argv: None,
            pinning: None,
        };
        let hello = match session.handshake(&nonce, self.timeouts.boot.0) {
            Ok(h) => h,
            Err(Fatal::Interrupted) => return Err(BootError::Interrupted),
            Err(e) => return Err(BootError::AgentNotStarted(e.to_string())),
        };
        let ready_ms = started.elapsed().as_millis() as u64;
        record.ready_ms = Some(ready_ms);
        (boot.events)(Event::BootReady {
            index: boot.index,
            ready_ms,
            uname: hello.uname.clone(),
        });
        record.hello = Some(hello);
        let run = PointRun {
            points: boot.points,
            devices: &self.devices,
            timeout: self.timeouts.point.0,
            limits: &self.limits,
            peer: None,
        };
        // A point the agent failed by itself (a fork the process limit
        // refused) names the kernel limit that acted during it, once.
        let on_point = boot.on_point;
        let mut named = None;
        let mut on_point_named = |point: &crate::planning::plan::Point, outcome: PointOutcome| {
            let outcome = match outcome {
                PointOutcome::Failed { error } => {
                    let hit = child_cell.borrow().limit_hit();
                    PointOutcome::Failed {
                        error: match hit {
                            Some(h) if named.as_ref() != Some(&h) && !error.contains(&h) => {
                                named = Some(h.clone());
                                format!("{error} ({h})")
                            }
                            _ => error,
                        },
                    }
                }
                done => done,
            };
            on_point(point, outcome)
        };
        let points_ended = session.run_points(
            &run,
            &mut record,
            &mut on_point_named,
            boot.events,
            |fatal| fatal.to_string(),
        )?;
        if points_ended == PointsEnded::Completed {
            record.ended = match session.shutdown(Duration::from_secs(10)) {
                Ok(()) => "shutdown".into(),
                Err(e) => format!("shutdown: {e}"),
            };
        }
        drop(session);
        child.kill();
        // Every point that got an outcome is listed in the record.
        let handled = record.points.len();
        Ok((record, handled))
    }
}
