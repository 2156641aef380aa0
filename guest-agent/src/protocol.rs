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

/// Bumped on any incompatible change of the messages below.
pub const PROTOCOL_VERSION: u32 = 1;

/// Name of the virtio-serial port the agent looks for in /sys/class/virtio-ports.
pub const PORT_NAME: &str = "org.testbed.agent";

/// Kernel command-line keys the host sets for the agent.
pub const CMDLINE_NONCE: &str = "testbed.nonce";
pub const CMDLINE_MODE: &str = "testbed.mode";
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceRef {
    /// Path of the block device or file, if the host knows it.
    pub path: Option<String>,
    pub size_bytes: u64,
    pub logical_block_size: u32,
}

/// A run of raw samples of one metric from one thread, sent column-wise so
/// the JSON stays compact. `seq` of values[i] is `first_seq + i`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleChunk {
    pub job_id: u64,
    pub metric: String,
    pub unit: String,
    pub thread: u32,
    pub first_seq: u64,
    /// Extra labels, e.g. the engine when engines are interleaved in a job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    pub values: Vec<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("channel I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed message {line:?}: {source}")]
    Malformed {
        line: String,
        source: serde_json::Error,
    },
    #[error("channel closed")]
    Closed,
}

/// Writes one message as a JSON line and flushes.
pub fn send<W: Write, M: Serialize>(w: &mut W, msg: &M) -> Result<(), ProtocolError> {
    let mut line = serde_json::to_vec(msg).map_err(|e| ProtocolError::Malformed {
        line: String::new(),
        source: e,
    })?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()?;
    Ok(())
}

/// Reads one JSON line; `Closed` at end of stream.
pub fn recv<R: BufRead, M: for<'de> Deserialize<'de>>(r: &mut R) -> Result<M, ProtocolError> {
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(ProtocolError::Closed);
        }
        // Blank lines (a guest console quirk) are skipped, not errors.
        if !line.trim().is_empty() {
            break;
        }
    }
    serde_json::from_str(line.trim_end()).map_err(|source| ProtocolError::Malformed {
        line: line.trim_end().to_string(),
        source,
    })
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
        let err = recv::<_, GuestMsg>(&mut Cursor::new(Vec::new())).unwrap_err();
        assert!(matches!(err, ProtocolError::Closed));
    }
}
