//! One conversation with an agent: hello, jobs with a watchdog, shutdown.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use testbed_agent::protocol::{DeviceRef, GuestMsg, Hello, HostMsg, Job, PROTOCOL_VERSION};
use testbed_agent::text::{printable, printable_lines};

use super::{BootError, BootRecord, OnPoint, PointOutcome, interrupted};
use crate::host::progress::Event;
use crate::machine::qemu::channel::{Channel, ChannelError};
use crate::planning::plan::Point;
use crate::planning::spec::Limits;
use crate::recording::results::spill::{Spill, SpillError};

/// How a wait ended badly.
#[derive(Debug, Clone, PartialEq)]
pub enum Fatal {
    /// The VM or agent process is gone.
    Died(String),
    /// No heartbeat for too long.
    Hung(String),
    TimedOut(String),
    Protocol(String),
    /// The host could not keep what the guest sent (disk full, permission).
    Store(String),
    /// The point went over a `[limits]` entry (its text names which).
    OverLimit(String),
    Interrupted,
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fatal::Died(s)
            | Fatal::Hung(s)
            | Fatal::TimedOut(s)
            | Fatal::Protocol(s)
            | Fatal::Store(s)
            | Fatal::OverLimit(s) => f.write_str(s),
            Fatal::Interrupted => f.write_str("interrupted"),
        }
    }
}

pub struct Session<'a> {
    pub channel: Channel,
    /// Some(reason) once the VM/process has exited.
    pub is_dead: Box<dyn FnMut() -> Option<String> + 'a>,
    pub heartbeat_timeout: Duration,
    /// Where a point's samples are spilled while it runs (the run directory).
    pub spill_dir: PathBuf,
}

/// What a wait produced: a message, or a line that was not one (reported,
/// and the channel goes on).
enum Incoming {
    Msg(GuestMsg),
    Bad(String),
}

const POLL: Duration = Duration::from_millis(100);

/// One boot's points and what each of their jobs needs.
pub struct PointRun<'p> {
    pub points: &'p [Point],
    pub devices: &'p BTreeMap<String, DeviceRef>,
    pub timeout: Duration,
    /// What each point may cost the host.
    pub limits: &'p Limits,
    /// The server's address in a pair topology, put in each job's "{peer}".
    pub peer: Option<&'p str>,
}

/// How often a point with `[limits]` has its cost read (a /proc scan).
const LIMITS_EVERY: Duration = Duration::from_millis(500);

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
    p.workload = crate::planning::plan::substitute_peer(&point.workload, peer);
    p
}

impl Session<'_> {
    /// Waits for the agent's hello, checks the nonce and acknowledges it.
    pub fn handshake(&mut self, nonce: &str, timeout: Duration) -> Result<Hello, Fatal> {
        let deadline = Instant::now() + timeout;
        loop {
            let msg = match self.next(deadline, timeout, "the agent's hello")? {
                Incoming::Msg(m) => m,
                Incoming::Bad(why) => return Err(Fatal::Protocol(why)),
            };
            match msg {
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
                    return Ok(bounded_hello(h));
                }
                GuestMsg::Log { .. } | GuestMsg::Heartbeat { .. } => {}
                other => {
                    return Err(Fatal::Protocol(format!(
                        "expected hello, got {}",
                        describe(&other)
                    )));
                }
            }
        }
    }

    /// Runs one point; a workload error is a failed point, anything worse is
    /// fatal. Samples go to a spill file as they arrive; a chunk no point
    /// may hold (a NaN, too many tag keys) or a line that is not a message
    /// fails the point, and the boot goes on with the next.
    pub fn run_point(
        &mut self,
        job_id: u64,
        point: &Point,
        devices: &BTreeMap<String, DeviceRef>,
        timeout: Duration,
        limits: &Limits,
    ) -> Result<PointOutcome, Fatal> {
        let started = Instant::now();
        // Read between messages (heartbeats come every second or so);
        // over a limit mid-point is fatal to the boot, whose processes are
        // the ones over it.
        let meter = limits.any().then(crate::machine::hostcost::start);
        let mut metered = Instant::now();
        let over = |meter: &Option<crate::machine::hostcost::Start>| {
            let m = meter.as_ref()?;
            limits.exceeded(&crate::machine::hostcost::end(m))
        };
        let mut spill = Spill::new(&self.spill_dir).map_err(|e| Fatal::Store(e.to_string()))?;
        self.send(&HostMsg::Job(Box::new(Job {
            job_id,
            seed: point.seed,
            workload: point.workload.clone(),
            devices: devices.clone(),
        })))?;
        let deadline = started + timeout;
        // The first reason the point cannot count; later ones add nothing.
        let mut refused: Option<String> = None;
        let waiting_for = format!("point {}", point.id());
        loop {
            let msg = match self.next(deadline, timeout, &waiting_for)? {
                Incoming::Msg(m) => m,
                Incoming::Bad(why) => {
                    refused.get_or_insert(why);
                    continue;
                }
            };
            if metered.elapsed() >= LIMITS_EVERY {
                metered = Instant::now();
                if let Some(why) = over(&meter) {
                    return Err(Fatal::OverLimit(format!("point {}: {why}", point.id())));
                }
            }
            match msg {
                GuestMsg::Samples(c) if c.job_id == job_id => {
                    if refused.is_some() {
                        continue;
                    }
                    match spill.push(&c) {
                        Ok(()) => {}
                        Err(SpillError::Refused(why)) => refused = Some(why),
                        // Writing the host's own file failed: the run stops.
                        Err(e @ (SpillError::Io { .. } | SpillError::Corrupt { .. })) => {
                            return Err(Fatal::Store(e.to_string()));
                        }
                    }
                }
                GuestMsg::JobDone {
                    job_id: id,
                    summary,
                } if id == job_id => {
                    if let Some(why) = refused {
                        return Ok(PointOutcome::Failed {
                            error: format!("the guest sent samples the host refuses: {why}"),
                        });
                    }
                    // A peak between two readings shows in the peak.
                    if let Some(why) = over(&meter) {
                        return Ok(PointOutcome::Failed { error: why });
                    }
                    let samples = spill.finish().map_err(|e| Fatal::Store(e.to_string()))?;
                    return Ok(PointOutcome::Done {
                        summary: bounded_summary(summary)?,
                        samples,
                        wall_s: started.elapsed().as_secs_f64(),
                    });
                }
                GuestMsg::JobFailed { job_id: id, error } if id == job_id => {
                    return Ok(PointOutcome::Failed {
                        error: printable_lines(&error, MAX_ERROR),
                    });
                }
                GuestMsg::Heartbeat { .. } | GuestMsg::Log { .. } => {}
                other => {
                    return Err(Fatal::Protocol(format!(
                        "unexpected message during a job: {}",
                        describe(&other)
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
            match self.run_point(job_id, &job, run.devices, run.timeout, run.limits) {
                Ok(outcome) => {
                    record.points.push(point.id());
                    if let Err(e) = on_point(point, outcome) {
                        record.ended = format!("stopped: {e}");
                        return Ok(PointsEnded::Stopped);
                    }
                }
                Err(Fatal::Interrupted) => return Err(BootError::Interrupted),
                // Losing what the guest measured is never a point failure:
                // the run stops, loudly.
                Err(Fatal::Store(e)) => {
                    record.ended = format!("cannot store point {}: {e}", point.id());
                    return Err(BootError::Store(record.ended.clone()));
                }
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
            match self.next(deadline, timeout, "the agent's goodbye") {
                Ok(Incoming::Msg(GuestMsg::Bye)) => return Ok(()),
                Ok(_) => {}
                // The agent may power off before the host reads its goodbye.
                Err(Fatal::Died(_)) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    fn send(&mut self, msg: &HostMsg) -> Result<(), Fatal> {
        self.channel
            .send(msg)
            .map_err(|e| self.died_or(Fatal::Protocol(e.to_string())))
    }

    /// After the channel is lost: QEMU's exit if it shows within a second
    /// (so the reason is its status), else `otherwise`.
    fn died_or(&mut self, otherwise: Fatal) -> Fatal {
        for _ in 0..20 {
            if let Some(reason) = (self.is_dead)() {
                return Fatal::Died(reason);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        otherwise
    }

    /// The next message, enforcing the deadline (checked before every
    /// message, so a guest that never stops talking still times out), the
    /// heartbeat watchdog (any message resets it: each call starts afresh),
    /// liveness of the VM and Ctrl-C.
    fn next(
        &mut self,
        deadline: Instant,
        timeout: Duration,
        waiting_for: &str,
    ) -> Result<Incoming, Fatal> {
        let last_heard = Instant::now();
        loop {
            if interrupted() {
                return Err(Fatal::Interrupted);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Fatal::TimedOut(format!(
                    "timed out after {timeout:?} waiting for {waiting_for}"
                )));
            }
            match self.channel.recv_timeout(POLL.min(deadline - now)) {
                Ok(Some(m)) => return Ok(Incoming::Msg(m)),
                Ok(None) => {}
                Err(ChannelError::BadMessage(e)) => return Ok(Incoming::Bad(e.to_string())),
                // A closed or reset channel most often means QEMU is going
                // away: give it a moment to exit so the reason is its status.
                Err(lost) => {
                    let otherwise = match lost {
                        ChannelError::Closed => Fatal::Died(format!(
                            "agent channel closed while waiting for {waiting_for}"
                        )),
                        other => {
                            Fatal::Protocol(format!("{other} while waiting for {waiting_for}"))
                        }
                    };
                    return Err(self.died_or(otherwise));
                }
            }
            if let Some(reason) = (self.is_dead)() {
                return Err(Fatal::Died(reason));
            }
            // The first wait for hello has no heartbeats yet: the deadline rules.
            if waiting_for != "the agent's hello" && last_heard.elapsed() > self.heartbeat_timeout {
                return Err(Fatal::Hung(format!(
                    "no heartbeat from the agent for {:?} while waiting for {waiting_for}: guest hung",
                    self.heartbeat_timeout
                )));
            }
        }
    }
}

/// The longest error text kept from a guest (in the point record, the
/// manifest and the terminal).
pub const MAX_ERROR: usize = 4000;
/// Summary entries and the longest summary JSON a point may carry.
const MAX_SUMMARY_KEYS: usize = 1000;
const MAX_SUMMARY_BYTES: usize = 1 << 20;

/// The agent's hello as the manifest keeps it: every text bounded and
/// printable, at most `MAX_LIST` modules and devices.
fn bounded_hello(mut h: Hello) -> Hello {
    const MAX_TEXT: usize = 4096;
    const MAX_LIST: usize = 256;
    let clean = |s: &mut String| *s = printable(s, MAX_TEXT);
    clean(&mut h.agent_version);
    clean(&mut h.uname);
    clean(&mut h.kernel_cmdline);
    h.modules_loaded.truncate(MAX_LIST);
    h.modules_loaded.iter_mut().for_each(clean);
    h.devices = std::mem::take(&mut h.devices)
        .into_iter()
        .take(MAX_LIST)
        .map(|(mut k, mut v)| {
            clean(&mut k);
            clean(&mut v);
            (k, v)
        })
        .collect();
    if let Some(n) = h.net.as_mut() {
        clean(n);
    }
    h
}

/// A message named for an error: its kind and a short printable excerpt.
fn describe(msg: &GuestMsg) -> String {
    let json = serde_json::to_vec(msg).unwrap_or_default();
    testbed_agent::protocol::excerpt(&json)
}

/// A job's summary, refused (as a protocol error) when it is too large to
/// be a summary; its keys become columns of summary.parquet. Every text in
/// it is made printable: `show` and the report print them.
fn bounded_summary(
    summary: testbed_agent::workload::Summary,
) -> Result<testbed_agent::workload::Summary, Fatal> {
    let bytes = serde_json::to_vec(&summary).map(|v| v.len()).unwrap_or(0);
    if summary.len() > MAX_SUMMARY_KEYS || bytes > MAX_SUMMARY_BYTES {
        return Err(Fatal::Protocol(format!(
            "a job summary with {} keys and {bytes} bytes (at most {MAX_SUMMARY_KEYS} keys, {MAX_SUMMARY_BYTES} bytes)",
            summary.len()
        )));
    }
    Ok(summary
        .into_iter()
        .map(|(k, v)| (printable(&k, 200), printable_json(v)))
        .collect())
}

fn printable_json(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => Value::String(printable(&s, MAX_ERROR)),
        Value::Array(a) => Value::Array(a.into_iter().map(printable_json).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (printable(&k, 200), printable_json(v)))
                .collect(),
        ),
        other => other,
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
                size: 1000,
            }),
            seed: 7,
            vm_vcpus: None,
            boot_group: 0,
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
        raw(said)
    }

    /// A session whose agent says exactly `bytes`, then closes the channel.
    fn raw(bytes: Vec<u8>) -> Session<'static> {
        from_reader(Cursor::new(bytes))
    }

    fn from_reader<R: std::io::BufRead + Send + 'static>(r: R) -> Session<'static> {
        let spill = tempfile::tempdir().unwrap().keep();
        Session {
            channel: Channel::from_parts(r, Box::new(std::io::sink())),
            is_dead: Box::new(|| None),
            heartbeat_timeout: Duration::from_secs(10),
            spill_dir: spill,
        }
    }

    fn samples(n: u64, values: Vec<f64>, tags: &[(&str, &str)]) -> GuestMsg {
        GuestMsg::Samples(testbed_agent::protocol::SampleChunk {
            job_id: (u64::from(BOOT) << 32) | n,
            metric: "lat".into(),
            unit: "ns".into(),
            thread: 0,
            first_seq: 0,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            values,
        })
    }

    /// An agent that logs forever and never finishes its job.
    struct EndlessLog;

    impl std::io::Read for EndlessLog {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let line = b"{\"type\":\"log\",\"line\":\"still busy\"}\n";
            let n = line.len().min(buf.len());
            buf[..n].copy_from_slice(&line[..n]);
            Ok(n)
        }
    }

    #[test]
    fn a_guest_that_never_stops_talking_still_times_out() {
        let mut s = from_reader(std::io::BufReader::new(EndlessLog));
        let started = Instant::now();
        let err = s
            .run_point(
                1,
                &point(0),
                &BTreeMap::new(),
                Duration::from_millis(300),
                &Limits::default(),
            )
            .unwrap_err();
        assert!(
            matches!(&err, Fatal::TimedOut(m) if m.contains("300ms") && m.contains("point p0000-r00")),
            "{err:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        let err = s.handshake("n", Duration::from_millis(200)).unwrap_err();
        assert!(
            matches!(&err, Fatal::TimedOut(m) if m.contains("hello")),
            "{err:?}"
        );
        let err = s.shutdown(Duration::from_millis(200)).unwrap_err();
        assert!(
            matches!(&err, Fatal::TimedOut(m) if m.contains("goodbye")),
            "{err:?}"
        );
    }

    #[test]
    fn a_nan_sample_fails_its_point_and_the_next_point_runs() {
        let mut record = record();
        let (ended, outcomes, _) = run_two(
            &[
                samples(0, vec![1.0, f64::NAN], &[]),
                done(0),
                samples(1, vec![2.0], &[]),
                done(1),
            ],
            false,
            &mut record,
        );
        assert_eq!(ended, PointsEnded::Completed);
        match &outcomes[0] {
            PointOutcome::Failed { error } => {
                assert!(error.contains("sample 1: not a finite number"), "{error}")
            }
            other => panic!("{other:?}"),
        }
        match &outcomes[1] {
            PointOutcome::Done { samples, .. } => assert_eq!(samples.summary.values, 1),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_bad_line_fails_its_point_with_a_printable_excerpt() {
        let mut bytes = b"{\"type\":\"samples\", \x1b[31m broken\n".to_vec();
        for m in [done(0), done(1)] {
            testbed_agent::protocol::send(&mut bytes, &m).unwrap();
        }
        let points = [point(0), point(1)];
        let mut s = raw(bytes);
        let first = s
            .run_point(
                u64::from(BOOT) << 32,
                &points[0],
                &BTreeMap::new(),
                Duration::from_secs(5),
                &Limits::default(),
            )
            .unwrap();
        match first {
            PointOutcome::Failed { error } => {
                assert!(
                    error.contains("malformed message") && error.contains("broken"),
                    "{error}"
                );
                assert!(!error.contains('\x1b'), "{error:?}");
            }
            other => panic!("{other:?}"),
        }
        let second = s
            .run_point(
                (u64::from(BOOT) << 32) | 1,
                &points[1],
                &BTreeMap::new(),
                Duration::from_secs(5),
                &Limits::default(),
            )
            .unwrap();
        assert!(matches!(second, PointOutcome::Done { .. }), "{second:?}");
    }

    #[test]
    fn summary_and_hello_texts_are_made_printable() {
        let summary = BTreeMap::from([(
            "note\x1b[2J".to_string(),
            serde_json::json!({"k": ["\x1b]0;x\x07"]}),
        )]);
        let clean = bounded_summary(summary).unwrap();
        let text = serde_json::to_string(&clean).unwrap();
        assert!(!text.contains("\\u001b"), "{text}");
        assert!(text.contains("note\\\\u{1b}[2J"), "{text}");
        let huge = BTreeMap::from([("k".to_string(), serde_json::json!("x".repeat(2 << 20)))]);
        assert!(matches!(bounded_summary(huge), Err(Fatal::Protocol(_))));
    }

    #[test]
    fn a_flood_of_tag_keys_is_refused_without_holding_it() {
        let mut script = Vec::new();
        for i in 0..200 {
            let key = format!("k{i}");
            script.push(samples(0, vec![1.0], &[(&key, "v")]));
        }
        script.push(done(0));
        script.push(done(1));
        let mut record = record();
        let (ended, outcomes, _) = run_two(&script, false, &mut record);
        assert_eq!(ended, PointsEnded::Completed);
        assert!(
            matches!(&outcomes[0], PointOutcome::Failed { error } if error.contains("distinct tag keys")),
            "{:?}",
            outcomes[0]
        );
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
            pinning: None,
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
            limits: &Limits::default(),
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
                        Err(crate::execution::executor::PointRefused::Store {
                            point: "p".into(),
                            source: "disk full".into(),
                        })
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
        assert_eq!(record.ended, "stopped: could not store point p: disk full");
        assert_eq!(record.points, ["p0000-r00"]);
        assert_eq!((outcomes.len(), started), (1, 1));
    }

    /// A channel whose peer resets the connection, as QEMU's socket does
    /// when QEMU is killed.
    struct Reset;

    impl std::io::Read for Reset {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::ConnectionReset.into())
        }
    }

    #[test]
    fn a_reset_channel_reports_qemus_exit_once_it_shows() {
        let mut session = from_reader(std::io::BufReader::new(Reset));
        // QEMU's exit shows only on the third look, after the reset.
        let mut looks = 0;
        session.is_dead = Box::new(move || {
            looks += 1;
            (looks >= 3).then(|| "QEMU exited (signal: 9 (SIGKILL))".to_string())
        });
        let got = session.next(
            Instant::now() + Duration::from_secs(5),
            Duration::from_secs(5),
            "the job",
        );
        match got {
            Err(Fatal::Died(reason)) => assert!(reason.starts_with("QEMU exited"), "{reason}"),
            other => panic!("expected QEMU's exit, got {:?}", other.err()),
        }

        // A reset with QEMU still alive is a protocol error naming the wait.
        let mut session = from_reader(std::io::BufReader::new(Reset));
        let got = session.next(
            Instant::now() + Duration::from_secs(5),
            Duration::from_secs(5),
            "the job",
        );
        match got {
            Err(Fatal::Protocol(e)) => assert!(e.ends_with("while waiting for the job"), "{e}"),
            other => panic!("expected a protocol error, got {:?}", other.err()),
        }
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
