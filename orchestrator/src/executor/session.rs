//! One conversation with an agent: hello, jobs with a watchdog, shutdown.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use testbed_agent::protocol::{DeviceRef, GuestMsg, Hello, HostMsg, Job, PROTOCOL_VERSION};

use super::{BootError, BootRecord, OnPoint, PointOutcome, interrupted};
use crate::plan::Point;
use crate::progress::Event;
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

/// One boot's points and what each of their jobs needs.
pub struct PointRun<'p> {
    pub points: &'p [Point],
    pub devices: &'p BTreeMap<String, DeviceRef>,
    pub timeout: Duration,
    /// The server's address in a pair topology, put in each job's "{peer}".
    pub peer: Option<&'p str>,
}

/// How a boot's run of points ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointsEnded {
    /// Every point got an outcome; the agent still waits for more.
    Completed,
    /// `on_point` refused an outcome (`record.ended` says why); the agent
    /// still waits for more.
    Stopped,
    /// The boot died at a point (`record.ended` says where), which was
    /// reported failed: only teardown is left.
    Died,
}

/// The point with "{peer}" replaced in its workload's strings.
pub fn with_peer(point: &Point, peer: &str) -> Point {
    let mut p = point.clone();
    p.workload = crate::plan::substitute_peer(&point.workload, peer);
    p
}

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
        devices: &BTreeMap<String, DeviceRef>,
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

    /// Runs `run.points` in order: announces each to `events`, lists it in
    /// `record` and hands its outcome to `on_point`. A fatal error fails the
    /// point with the text `describe_fatal` gives (which may tear the boot
    /// down first, to read its last words) and ends the run.
    pub fn run_points(
        &mut self,
        run: &PointRun<'_>,
        record: &mut BootRecord,
        on_point: &mut OnPoint<'_>,
        events: &mut dyn FnMut(Event),
        describe_fatal: impl FnOnce(&Fatal) -> String,
    ) -> Result<PointsEnded, BootError> {
        for (i, point) in run.points.iter().enumerate() {
            events(Event::PointStarted {
                id: point.id(),
                label: point.label(),
            });
            // Unique per run: the boot in the high half, the point in the low.
            let job_id = (u64::from(record.index) << 32) | i as u64;
            let job = match run.peer {
                Some(peer) => Cow::Owned(with_peer(point, peer)),
                None => Cow::Borrowed(point),
            };
            match self.run_point(job_id, &job, run.devices, run.timeout) {
                Ok(outcome) => {
                    record.points.push(point.id());
                    if let Err(e) = on_point(point, outcome) {
                        record.ended = format!("stopped: {e}");
                        return Ok(PointsEnded::Stopped);
                    }
                }
                Err(Fatal::Interrupted) => return Err(BootError::Interrupted),
                Err(fatal) => {
                    record.points.push(point.id());
                    record.ended = format!("failed at point {}: {fatal}", point.id());
                    let error = describe_fatal(&fatal);
                    let _ = on_point(point, PointOutcome::Failed { error });
                    return Ok(PointsEnded::Died);
                }
            }
        }
        Ok(PointsEnded::Completed)
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

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use testbed_agent::workload::Workload;
    use testbed_agent::workload::fault::{FaultMode, FaultParams};

    use super::*;

    const BOOT: u32 = 2;

    fn point(n: u32) -> Point {
        Point {
            point: n,
            rep: 0,
            params: BTreeMap::new(),
            workload: Workload::Fault(FaultParams {
                mode: FaultMode::Error,
                after_s: 0.0,
            }),
            seed: 7,
        }
    }

    fn done(n: u64) -> GuestMsg {
        GuestMsg::JobDone {
            job_id: (u64::from(BOOT) << 32) | n,
            summary: BTreeMap::new(),
        }
    }

    /// A session whose agent says `script`, then closes the channel.
    fn scripted(script: &[GuestMsg]) -> Session<'static> {
        let mut said = Vec::new();
        for msg in script {
            testbed_agent::protocol::send(&mut said, msg).unwrap();
        }
        Session {
            channel: Channel::from_parts(Cursor::new(said), Box::new(std::io::sink())),
            is_dead: Box::new(|| None),
            heartbeat_timeout: Duration::from_secs(10),
        }
    }

    fn record() -> BootRecord {
        BootRecord {
            index: BOOT,
            hello: None,
            ready_ms: None,
            points: Vec::new(),
            ended: String::new(),
            argv: Vec::new(),
            server_argv: None,
        }
    }

    /// Runs two points; what `on_point` was handed, and how many started.
    fn run_two(
        script: &[GuestMsg],
        refuse: bool,
        record: &mut BootRecord,
    ) -> (PointsEnded, Vec<PointOutcome>, usize) {
        let points = [point(0), point(1)];
        let devices = BTreeMap::new();
        let run = PointRun {
            points: &points,
            devices: &devices,
            timeout: Duration::from_secs(10),
            peer: None,
        };
        let mut outcomes = Vec::new();
        let mut started = 0;
        let ended = scripted(script)
            .run_points(
                &run,
                record,
                &mut |_, outcome| {
                    outcomes.push(outcome);
                    if refuse {
                        Err("disk full".into())
                    } else {
                        Ok(())
                    }
                },
                &mut |event| {
                    if matches!(event, Event::PointStarted { .. }) {
                        started += 1;
                    }
                },
                |fatal| format!("described: {fatal}"),
            )
            .unwrap();
        (ended, outcomes, started)
    }

    #[test]
    fn every_point_runs_and_is_listed() {
        let mut record = record();
        let (ended, outcomes, started) = run_two(&[done(0), done(1)], false, &mut record);
        assert_eq!(ended, PointsEnded::Completed);
        assert_eq!(record.points, ["p0000-r00", "p0001-r00"]);
        assert!(record.ended.is_empty());
        assert_eq!(started, 2);
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, PointOutcome::Done { .. }))
        );
    }

    #[test]
    fn a_refused_outcome_stops_the_run() {
        let mut record = record();
        let (ended, outcomes, started) = run_two(&[done(0), done(1)], true, &mut record);
        assert_eq!(ended, PointsEnded::Stopped);
        assert_eq!(record.ended, "stopped: disk full");
        assert_eq!(record.points, ["p0000-r00"]);
        assert_eq!((outcomes.len(), started), (1, 1));
    }

    #[test]
    fn a_dead_boot_fails_its_point_with_the_description() {
        let mut record = record();
        let (ended, outcomes, _) = run_two(&[done(0)], false, &mut record);
        assert_eq!(ended, PointsEnded::Died);
        assert_eq!(record.points, ["p0000-r00", "p0001-r00"]);
        assert!(
            record.ended.starts_with("failed at point p0001-r00: "),
            "{}",
            record.ended
        );
        match &outcomes[1] {
            PointOutcome::Failed { error } => {
                assert!(
                    error.starts_with("described: agent channel closed"),
                    "{error}"
                );
            }
            other => panic!("expected a failed point, got {other:?}"),
        }
    }
}
