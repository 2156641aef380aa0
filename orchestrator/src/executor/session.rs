//! One conversation with an agent: hello, jobs with a watchdog, shutdown.

use std::time::{Duration, Instant};

use testbed_agent::protocol::{DeviceRef, GuestMsg, Hello, HostMsg, Job, PROTOCOL_VERSION};

use super::{PointOutcome, interrupted};
use crate::plan::Point;
use crate::qemu::channel::{Channel, ChannelError};

/// How a wait ended badly.
#[derive(Debug, Clone, PartialEq)]
pub enum Fatal {
    /// The VM or agent process is gone.
    Died(String),
    /// No heartbeat for too long.
    Hung(String),
    TimedOut(String),
    Protocol(String),
    Interrupted,
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fatal::Died(s) | Fatal::Hung(s) | Fatal::TimedOut(s) | Fatal::Protocol(s) => {
                f.write_str(s)
            }
            Fatal::Interrupted => f.write_str("interrupted"),
        }
    }
}

pub struct Session<'a> {
    pub channel: Channel,
    /// Some(reason) once the VM/process has exited.
    pub is_dead: Box<dyn FnMut() -> Option<String> + 'a>,
    pub heartbeat_timeout: Duration,
}

const POLL: Duration = Duration::from_millis(100);

impl Session<'_> {
    /// Waits for the agent's hello, checks the nonce and acknowledges it.
    pub fn handshake(&mut self, nonce: &str, timeout: Duration) -> Result<Hello, Fatal> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.next(deadline, "the agent's hello")? {
                GuestMsg::Hello(h) => {
                    if h.protocol != PROTOCOL_VERSION {
                        return Err(Fatal::Protocol(format!(
                            "agent speaks protocol {}, host speaks {PROTOCOL_VERSION}: rebuild the agent",
                            h.protocol
                        )));
                    }
                    if h.nonce != nonce {
                        return Err(Fatal::Protocol(format!(
                            "agent hello carries nonce {:?}, expected {nonce:?} (a stale agent?)",
                            h.nonce
                        )));
                    }
                    self.send(&HostMsg::HelloAck {
                        protocol: PROTOCOL_VERSION,
                        nonce: nonce.to_string(),
                    })?;
                    return Ok(h);
                }
                GuestMsg::Log { .. } | GuestMsg::Heartbeat { .. } => {}
                other => return Err(Fatal::Protocol(format!("expected hello, got {other:?}"))),
            }
        }
    }

    /// Runs one point; a workload error is a failed point, anything worse is fatal.
    pub fn run_point(
        &mut self,
        job_id: u64,
        point: &Point,
        devices: &std::collections::BTreeMap<String, DeviceRef>,
        timeout: Duration,
    ) -> Result<PointOutcome, Fatal> {
        let started = Instant::now();
        self.send(&HostMsg::Job(Box::new(Job {
            job_id,
            seed: point.seed,
            workload: point.workload.clone(),
            devices: devices.clone(),
        })))?;
        let deadline = started + timeout;
        let mut chunks = Vec::new();
        loop {
            match self.next(deadline, &format!("point {}", point.id()))? {
                GuestMsg::Samples(c) if c.job_id == job_id => chunks.push(c),
                GuestMsg::JobDone {
                    job_id: id,
                    summary,
                } if id == job_id => {
                    return Ok(PointOutcome::Done {
                        summary,
                        chunks,
                        wall_s: started.elapsed().as_secs_f64(),
                    });
                }
                GuestMsg::JobFailed { job_id: id, error } if id == job_id => {
                    return Ok(PointOutcome::Failed { error });
                }
                GuestMsg::Heartbeat { .. } | GuestMsg::Log { .. } => {}
                other => {
                    return Err(Fatal::Protocol(format!(
                        "unexpected message during a job: {other:?}"
                    )));
                }
            }
        }
    }

    /// Asks the agent to end; waits for its goodbye.
    pub fn shutdown(&mut self, timeout: Duration) -> Result<(), Fatal> {
        self.send(&HostMsg::Shutdown)?;
        let deadline = Instant::now() + timeout;
        loop {
            match self.next(deadline, "the agent's goodbye") {
                Ok(GuestMsg::Bye) => return Ok(()),
                Ok(_) => {}
                // The agent may power off before the host reads its goodbye.
                Err(Fatal::Died(_)) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    fn send(&mut self, msg: &HostMsg) -> Result<(), Fatal> {
        self.channel.send(msg).map_err(|e| match (self.is_dead)() {
            Some(reason) => Fatal::Died(reason),
            None => Fatal::Protocol(e.to_string()),
        })
    }

    /// The next message, enforcing the deadline, the heartbeat watchdog (any
    /// message, heartbeats included, resets it: each call starts afresh),
    /// liveness of the VM and Ctrl-C.
    fn next(&mut self, deadline: Instant, waiting_for: &str) -> Result<GuestMsg, Fatal> {
        let last_heard = Instant::now();
        loop {
            if interrupted() {
                return Err(Fatal::Interrupted);
            }
            match self.channel.recv_timeout(POLL) {
                Ok(Some(m)) => return Ok(m),
                Ok(None) => {}
                Err(ChannelError::Closed) => {
                    // Give QEMU a moment to exit so the reason is its status.
                    for _ in 0..20 {
                        if let Some(reason) = (self.is_dead)() {
                            return Err(Fatal::Died(reason));
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    return Err(Fatal::Died(format!(
                        "agent channel closed while waiting for {waiting_for}"
                    )));
                }
                Err(e) => return Err(Fatal::Protocol(e.to_string())),
            }
            if let Some(reason) = (self.is_dead)() {
                return Err(Fatal::Died(reason));
            }
            let now = Instant::now();
            if now > deadline {
                return Err(Fatal::TimedOut(format!(
                    "timed out waiting for {waiting_for}"
                )));
            }
            // The first wait for hello has no heartbeats yet: the deadline rules.
            if waiting_for != "the agent's hello"
                && now.duration_since(last_heard) > self.heartbeat_timeout
            {
                return Err(Fatal::Hung(format!(
                    "no heartbeat from the agent for {:?} while waiting for {waiting_for}: guest hung",
                    self.heartbeat_timeout
                )));
            }
        }
    }
}
