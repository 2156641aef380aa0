//! The host end of the agent channel: a Unix socket QEMU serves for the
//! virtio-serial port (or a child's stdio in host mode). A reader thread
//! turns lines into messages so the caller can wait with a timeout.
//!
//! Everything from the guest is bounded: a line longer than
//! `protocol::MAX_LINE` is read past and reported, never held, and the queue
//! between the reader and the caller holds at most `QUEUE` messages, so a
//! guest that talks faster than the host listens is slowed, not buffered.

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError, sync_channel};
use std::time::Duration;

use testbed_agent::protocol::{self, GuestMsg, HostMsg, ProtocolError};

use super::process::VmProcess;
use crate::host::wait::{Until, Waited, poll};

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("QEMU exited ({status}) before its agent socket accepted a connection")]
    QemuExited { status: String },
    #[error("agent socket {path} did not accept a connection within {waited:?}")]
    NoSocket { path: String, waited: Duration },
    #[error("agent channel: {0}")]
    Protocol(#[from] ProtocolError),
    /// One line was not a message (malformed or too long); the channel
    /// goes on.
    #[error("the guest sent a bad message: {0}")]
    BadMessage(ProtocolError),
    #[error("agent channel closed")]
    Closed,
}

/// Messages read ahead of the caller, at most.
pub const QUEUE: usize = 64;

pub struct Channel {
    rx: Receiver<Result<GuestMsg, ProtocolError>>,
    writer: Box<dyn Write + Send>,
}

impl Channel {
    /// Connects to QEMU's socket as soon as it exists: the guest's first
    /// write blocks until a peer is connected.
    pub fn connect_vm(
        socket: &Path,
        vm: &mut VmProcess,
        timeout: Duration,
    ) -> Result<Channel, ChannelError> {
        let connected = poll(Until::after(timeout), Duration::from_millis(5), || {
            if let Some(status) = vm.try_wait() {
                return Some(Err(ChannelError::QemuExited {
                    status: status.to_string(),
                }));
            }
            UnixStream::connect(socket).ok().map(Ok)
        });
        match connected {
            Waited::Done(Ok(stream)) => {
                let reader = stream.try_clone().map_err(ProtocolError::Io)?;
                Ok(Channel::from_parts(
                    BufReader::new(reader),
                    Box::new(stream),
                ))
            }
            Waited::Done(Err(e)) => Err(e),
            Waited::TimedOut | Waited::Interrupted => Err(ChannelError::NoSocket {
                path: socket.display().to_string(),
                waited: timeout,
            }),
        }
    }

    pub fn from_parts<R: std::io::BufRead + Send + 'static>(
        mut reader: R,
        writer: Box<dyn Write + Send>,
    ) -> Channel {
        let (tx, rx) = sync_channel(QUEUE);
        std::thread::spawn(move || {
            loop {
                let msg = protocol::recv::<_, GuestMsg>(&mut reader);
                // A bad line is reported and the next one read; the end of
                // the stream or an I/O error ends the reader.
                let end = msg.as_ref().is_err_and(|e| !e.is_recoverable());
                if tx.send(msg).is_err() || end {
                    return;
                }
            }
        });
        Channel { rx, writer }
    }

    pub fn send(&mut self, msg: &HostMsg) -> Result<(), ChannelError> {
        protocol::send(&mut self.writer, msg)?;
        Ok(())
    }

    /// The next message, `None` on timeout.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<GuestMsg>, ChannelError> {
        match self.rx.recv_timeout(timeout) {
            Ok(Ok(m)) => Ok(Some(m)),
            Ok(Err(ProtocolError::Closed)) => Err(ChannelError::Closed),
            Ok(Err(e)) if e.is_recoverable() => Err(ChannelError::BadMessage(e)),
            Ok(Err(e)) => Err(e.into()),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(ChannelError::Closed),
        }
    }
}
