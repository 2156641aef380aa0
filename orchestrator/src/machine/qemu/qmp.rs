//! A minimal QMP client: the greeting, `qmp_capabilities`, and
//! `query-cpus-fast` for the host thread id of each vCPU.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::host::wait::{Until, Waited, poll};

#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    #[error("QMP socket {path}: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("QMP: {0}")]
    Io(#[from] std::io::Error),
    #[error("QMP closed the connection")]
    Closed,
    #[error("QMP sent what is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("QMP refused {command}: {error}")]
    Refused { command: String, error: String },
    #[error("QMP's first message is not a greeting: {0}")]
    NoGreeting(String),
}

/// One vCPU and the host thread that runs it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct VcpuThread {
    #[serde(rename = "cpu-index")]
    pub cpu_index: u32,
    #[serde(rename = "thread-id")]
    pub thread_id: u32,
}

pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects (retrying until `timeout`: QEMU may still be starting),
    /// reads the greeting and leaves capabilities negotiation.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Qmp, QmpError> {
        let mut last = None;
        let connected = poll(Until::after(timeout), Duration::from_millis(10), || {
            UnixStream::connect(path).map_err(|e| last = Some(e)).ok()
        });
        let Waited::Done(stream) = connected else {
            return Err(QmpError::Connect {
                path: path.display().to_string(),
                source: last.unwrap_or_else(|| std::io::ErrorKind::TimedOut.into()),
            });
        };
        stream.set_read_timeout(Some(timeout))?;
        let mut q = Qmp {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        };
        let greeting = q.read_message()?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::NoGreeting(greeting.to_string()));
        }
        q.execute("qmp_capabilities")?;
        Ok(q)
    }

    fn read_message(&mut self) -> Result<serde_json::Value, QmpError> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(QmpError::Closed);
        }
        Ok(serde_json::from_str(&line)?)
    }

    /// Runs a command without arguments; its `return` value.
    pub fn execute(&mut self, command: &str) -> Result<serde_json::Value, QmpError> {
        let msg = serde_json::json!({ "execute": command });
        self.writer.write_all(format!("{msg}\n").as_bytes())?;
        loop {
            let reply = self.read_message()?;
            if let Some(r) = reply.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = reply.get("error") {
                return Err(QmpError::Refused {
                    command: command.into(),
                    error: e.to_string(),
                });
            }
            // Anything else is an asynchronous event: not our answer.
        }
    }

    /// Every vCPU with its host thread id, by vCPU index.
    pub fn vcpu_threads(&mut self) -> Result<Vec<VcpuThread>, QmpError> {
        let mut v: Vec<VcpuThread> = serde_json::from_value(self.execute("query-cpus-fast")?)?;
        v.sort_by_key(|t| t.cpu_index);
        Ok(v)
    }
}
