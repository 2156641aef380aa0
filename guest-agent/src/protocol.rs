//! Host <-> guest protocol: newline-delimited JSON, one message per line.
//!
//! The guest speaks first (`Hello`, echoing the nonce the host put on the
//! kernel command line, so a stale socket or a previous boot cannot be taken
//! for this one). The host answers `HelloAck`, then sends `Job`s one at a
//! time; the guest streams `Samples` and ends each job with `JobDone` or
//! `JobFailed`. `Heartbeat`s flow from the guest all the time so the host's
//! watchdog can tell a busy guest from a hung one. `Shutdown` ends the boot.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

use crate::workload::Workload;

/// A device as a job names it, and a run of samples: the vocabulary's
/// (workloads use them without the wire around them).
pub use testbed_vocab::protocol::{DeviceRef, SampleChunk};

/// Bumped on any incompatible change of the messages below.
pub const PROTOCOL_VERSION: u32 = 1;

/// Name of the virtio-serial port the agent looks for in /sys/class/virtio-ports.
pub const PORT_NAME: &str = "org.testbed.agent";

/// Kernel command-line keys the host sets for the agent.
pub const CMDLINE_NONCE: &str = "testbed.nonce";
pub const CMDLINE_MODE: &str = "testbed.mode";
/// `testbed.accel=tcg` when QEMU emulates the CPU; the agent exports it to
/// workloads as `$TESTBED_ACCEL` (some tools need care under TCG).
pub const CMDLINE_ACCEL: &str = "testbed.accel";
/// `testbed.net=169.254.10.1/16`: address of the guest's first NIC.
pub const CMDLINE_NET: &str = "testbed.net";

/// Messages from the guest (agent) to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GuestMsg {
    Hello(Hello),
    Heartbeat {
        seq: u64,
        uptime_ms: u64,
    },
    Log {
        line: String,
    },
    Samples(SampleChunk),
    JobDone {
        job_id: u64,
        summary: BTreeMap<String, serde_json::Value>,
    },
    JobFailed {
        job_id: u64,
        error: String,
    },
    Bye,
}

/// What the agent says about itself once the channel is open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    pub nonce: String,
    pub agent_version: String,
    /// `uname -a` equivalent: sysname release version machine.
    pub uname: String,
    pub kernel_cmdline: String,
    /// Guest uptime (CLOCK_BOOTTIME) when the agent was ready, in ms.
    pub uptime_ms: u64,
    pub ncpus: u32,
    pub mem_total_kib: u64,
    /// Modules loaded, in order, with the time each took.
    pub modules_loaded: Vec<String>,
    /// Block devices found: name given by the host (serial) -> /dev path.
    pub devices: BTreeMap<String, String>,
    /// Network set up by the agent, e.g. "eth0 169.254.10.1/16", if any.
    #[serde(default)]
    pub net: Option<String>,
}

/// Messages from the host to the guest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HostMsg {
    HelloAck { protocol: u32, nonce: String },
    // Boxed: a job carries the workload parameters, far larger than the rest.
    Job(Box<Job>),
    Shutdown,
}

/// One sweep point (one repetition) to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub job_id: u64,
    /// Seed for everything random in this job.
    pub seed: u64,
    pub workload: Workload,
    /// Devices by name: where the agent finds them. In a VM the agent
    /// resolves names itself (NVMe/virtio serial numbers); the host executor
    /// fills in backing-file paths.
    pub devices: BTreeMap<String, DeviceRef>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("channel I/O: {0}")]
    Io(#[from] std::io::Error),
    /// One line that is not a message; the stream is still in step.
    #[error("malformed message ({len} bytes) {excerpt:?}: {reason}")]
    Malformed {
        excerpt: String,
        len: usize,
        reason: String,
    },
    /// One line longer than `MAX_LINE`, skipped; the stream is still in step.
    #[error("message of more than {limit} bytes skipped (starts {excerpt:?})")]
    TooLong { excerpt: String, limit: usize },
    #[error("channel closed")]
    Closed,
}

impl ProtocolError {
    /// Whether the reader can go on with the next line.
    pub fn is_recoverable(&self) -> bool {
        matches!(
            self,
            ProtocolError::Malformed { .. } | ProtocolError::TooLong { .. }
        )
    }
}

/// The longest message either side accepts. A sample chunk of
/// `CHUNK_VALUES` values is ~100 KiB; a job's parameters are far smaller.
pub const MAX_LINE: usize = 4 << 20;

/// How much of a rejected line an error quotes.
pub const EXCERPT: usize = 120;

/// The first `EXCERPT` characters of `bytes`, printable: control characters
/// (escape sequences from a guest included) become `\u{..}`.
pub fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(EXCERPT * 4)]);
    let start: String = text.chars().take(EXCERPT).collect();
    let mut out = crate::text::printable(&start, usize::MAX);
    if start.len() < bytes.len() {
        out.push('…');
    }
    out
}

/// Writes one message as a JSON line and flushes.
pub fn send<W: Write, M: Serialize>(w: &mut W, msg: &M) -> Result<(), ProtocolError> {
    let mut line = serde_json::to_vec(msg).map_err(|e| ProtocolError::Malformed {
        excerpt: String::new(),
        len: 0,
        reason: e.to_string(),
    })?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()?;
    Ok(())
}

/// Reads one JSON line of at most `MAX_LINE` bytes; `Closed` at end of
/// stream. A longer line is read past (never held) and refused.
pub fn recv<R: BufRead, M: for<'de> Deserialize<'de>>(r: &mut R) -> Result<M, ProtocolError> {
    recv_limited(r, MAX_LINE)
}

pub fn recv_limited<R: BufRead, M: for<'de> Deserialize<'de>>(
    r: &mut R,
    limit: usize,
) -> Result<M, ProtocolError> {
    let mut line = Vec::new();
    loop {
        line.clear();
        match read_line_limited(r, &mut line, limit)? {
            LineRead::Eof => return Err(ProtocolError::Closed),
            LineRead::TooLong => {
                return Err(ProtocolError::TooLong {
                    excerpt: excerpt(&line),
                    limit,
                });
            }
            LineRead::Line => {}
        }
        // Blank lines (a guest console quirk) are skipped, not errors.
        if !line.iter().all(u8::is_ascii_whitespace) {
            break;
        }
    }
    while line.last().is_some_and(u8::is_ascii_whitespace) {
        line.pop();
    }
    serde_json::from_slice(&line).map_err(|source| ProtocolError::Malformed {
        excerpt: excerpt(&line),
        len: line.len(),
        reason: source.to_string(),
    })
}

enum LineRead {
    Line,
    Eof,
    /// The line exceeded the limit: `line` holds its start, the rest was
    /// consumed up to and including its newline (or the end of stream).
    TooLong,
}

fn read_line_limited<R: BufRead>(
    r: &mut R,
    line: &mut Vec<u8>,
    limit: usize,
) -> Result<LineRead, std::io::Error> {
    let mut too_long = false;
    let mut any = false;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(match (any, too_long) {
                (false, _) => LineRead::Eof,
                (true, true) => LineRead::TooLong,
                (true, false) => LineRead::Line,
            });
        }
        any = true;
        let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..=i], true),
            None => (buf, false),
        };
        let n = chunk.len();
        if !too_long {
            if line.len() + n > limit.saturating_add(1) {
                // Keep only the start, for the excerpt.
                let keep = EXCERPT.saturating_sub(line.len()).min(n);
                line.extend_from_slice(&chunk[..keep]);
                line.truncate(EXCERPT);
                too_long = true;
            } else {
                line.extend_from_slice(chunk);
            }
        }
        r.consume(n);
        if found {
            return Ok(if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn messages_roundtrip_as_tagged_json_lines() {
        let msg = GuestMsg::Heartbeat {
            seq: 3,
            uptime_ms: 1200,
        };
        let mut buf = Vec::new();
        send(&mut buf, &msg).unwrap();
        assert_eq!(
            String::from_utf8(buf.clone()).unwrap(),
            "{\"type\":\"heartbeat\",\"seq\":3,\"uptime_ms\":1200}\n"
        );
        let back: GuestMsg = recv(&mut Cursor::new(buf)).unwrap();
        assert_eq!(back, msg);
    }

    #[test]
    fn garbage_line_is_a_malformed_error_naming_the_line() {
        let err = recv::<_, GuestMsg>(&mut Cursor::new(b"\n{not json}\n".to_vec())).unwrap_err();
        assert!(err.to_string().contains("{not json}"), "{err}");
        assert!(err.is_recoverable());
        let err = recv::<_, GuestMsg>(&mut Cursor::new(Vec::new())).unwrap_err();
        assert!(matches!(err, ProtocolError::Closed));
    }

    #[test]
    fn an_overlong_line_is_skipped_with_an_excerpt_and_the_next_one_read() {
        let mut input = vec![b'x'; 10_000];
        input.extend_from_slice(b"\x1b[2J\n{\"type\":\"bye\"}\n");
        // A reader with a small buffer, as a socket gives.
        let mut r = std::io::BufReader::with_capacity(64, Cursor::new(input));
        let err = recv_limited::<_, GuestMsg>(&mut r, 1000).unwrap_err();
        match &err {
            ProtocolError::TooLong { excerpt, limit } => {
                assert_eq!(*limit, 1000);
                assert!(excerpt.starts_with("xxxx") && excerpt.chars().count() <= EXCERPT + 1);
            }
            other => panic!("expected TooLong, got {other:?}"),
        }
        assert!(err.is_recoverable());
        let next: GuestMsg = recv_limited(&mut r, 1000).unwrap();
        assert_eq!(next, GuestMsg::Bye);
        assert!(matches!(
            recv_limited::<_, GuestMsg>(&mut r, 1000),
            Err(ProtocolError::Closed)
        ));
    }

    #[test]
    fn a_line_of_exactly_the_limit_is_read() {
        let msg = b"{\"type\":\"bye\"}\n";
        let limit = msg.len() - 1;
        let got: GuestMsg = recv_limited(&mut Cursor::new(msg.to_vec()), limit).unwrap();
        assert_eq!(got, GuestMsg::Bye);
        let err = recv_limited::<_, GuestMsg>(&mut Cursor::new(msg.to_vec()), limit - 1);
        assert!(matches!(err, Err(ProtocolError::TooLong { .. })));
    }

    #[test]
    fn a_malformed_line_quotes_a_printable_excerpt() {
        let err = recv::<_, GuestMsg>(&mut Cursor::new(b"\x1b]0;pwned\x07 junk\n".to_vec()))
            .unwrap_err()
            .to_string();
        assert!(!err.contains('\x1b') && !err.contains('\x07'), "{err:?}");
        assert!(err.contains("pwned"), "{err}");
    }

    #[test]
    fn a_null_sample_value_reads_as_not_a_number() {
        // serde_json writes NaN and infinities as null.
        let chunk = SampleChunk {
            job_id: 1,
            metric: "m".into(),
            unit: "ns".into(),
            thread: 0,
            first_seq: 0,
            tags: BTreeMap::new(),
            values: vec![1.0, f64::NAN, f64::INFINITY],
        };
        let mut buf = Vec::new();
        send(&mut buf, &GuestMsg::Samples(chunk)).unwrap();
        let back: GuestMsg = recv(&mut Cursor::new(buf)).unwrap();
        let GuestMsg::Samples(c) = back else {
            panic!("{back:?}")
        };
        assert_eq!(c.values[0], 1.0);
        assert!(c.values[1].is_nan() && c.values[2].is_nan());
    }
}
