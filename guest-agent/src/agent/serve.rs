//! The protocol loop: hello, then jobs until shutdown, with a heartbeat
//! thread so the host can tell a long job from a hung guest.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::protocol::{
    self, GuestMsg, Hello, HostMsg, Job, PROTOCOL_VERSION, ProtocolError, SampleChunk,
};
use crate::workload::{JobContext, SampleSink, fault};

use super::devices::FoundDevice;

/// The agent's one writer, shared by the job, the sink and the heartbeat.
pub type SharedWriter = Arc<Mutex<Box<dyn Write + Send>>>;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error("host answered with nonce {got:?}, expected {want:?}")]
    NonceMismatch { got: String, want: String },
    #[error("host speaks protocol {0}, agent speaks {PROTOCOL_VERSION}")]
    Version(u32),
    #[error("channel lock poisoned")]
    Poisoned,
}

fn send(w: &SharedWriter, msg: &GuestMsg) -> Result<(), ServeError> {
    let mut guard = w.lock().map_err(|_| ServeError::Poisoned)?;
    protocol::send(&mut *guard, msg)?;
    Ok(())
}

struct ChannelSink(SharedWriter);

impl SampleSink for ChannelSink {
    fn emit(&self, chunk: SampleChunk) {
        // A lost channel surfaces at the job's end message; nothing to do here.
        let _ = send(&self.0, &GuestMsg::Samples(chunk));
    }
    fn log(&self, line: &str) {
        let _ = send(
            &self.0,
            &GuestMsg::Log {
                line: line.to_string(),
            },
        );
    }
    fn write_raw(
        &self,
        write: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut guard = self
            .0
            .lock()
            .map_err(|_| std::io::Error::other("channel lock poisoned"))?;
        write(&mut **guard)
    }
}

/// Runs the loop until `Shutdown` or the host closes the channel.
pub fn serve<R: BufRead>(
    mut reader: R,
    writer: SharedWriter,
    hello: Hello,
    local_devices: &std::collections::BTreeMap<String, FoundDevice>,
) -> Result<(), ServeError> {
    let nonce = hello.nonce.clone();
    send(&writer, &GuestMsg::Hello(hello))?;

    let stop = Arc::new(AtomicBool::new(false));
    let heartbeat = {
        let (w, stop) = (writer.clone(), stop.clone());
        std::thread::spawn(move || heartbeat_loop(&w, &stop))
    };
    let result = job_loop(&mut reader, &writer, &nonce, local_devices);
    // Also when the host went away without a Shutdown.
    crate::workload::flight::stop_boot_server();
    stop.store(true, Ordering::SeqCst);
    let _ = heartbeat.join();
    result
}

fn heartbeat_loop(w: &SharedWriter, stop: &AtomicBool) {
    let start = Instant::now();
    let mut seq = 0;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1000));
        if fault::HANGING.load(Ordering::SeqCst) || stop.load(Ordering::SeqCst) {
            continue;
        }
        seq += 1;
        let msg = GuestMsg::Heartbeat {
            seq,
            uptime_ms: start.elapsed().as_millis() as u64,
        };
        if send(w, &msg).is_err() {
            return;
        }
    }
}

fn job_loop<R: BufRead>(
    reader: &mut R,
    writer: &SharedWriter,
    nonce: &str,
    local_devices: &std::collections::BTreeMap<String, FoundDevice>,
) -> Result<(), ServeError> {
    loop {
        let msg: HostMsg = match protocol::recv(reader) {
            Ok(m) => m,
            Err(ProtocolError::Closed) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        match msg {
            HostMsg::HelloAck {
                protocol,
                nonce: got,
            } => {
                if protocol != PROTOCOL_VERSION {
                    return Err(ServeError::Version(protocol));
                }
                if got != nonce {
                    return Err(ServeError::NonceMismatch {
                        got,
                        want: nonce.to_string(),
                    });
                }
            }
            HostMsg::Job(job) => {
                let job_id = job.job_id;
                let reply = match run_job(*job, writer, local_devices) {
                    Ok(summary) => GuestMsg::JobDone { job_id, summary },
                    Err(error) => GuestMsg::JobFailed { job_id, error },
                };
                send(writer, &reply)?;
            }
            HostMsg::Shutdown => {
                // A server kept for the boot (pair topology) ends with it.
                crate::workload::flight::stop_boot_server();
                send(writer, &GuestMsg::Bye)?;
                return Ok(());
            }
        }
    }
}

fn run_job(
    job: Job,
    writer: &SharedWriter,
    local_devices: &std::collections::BTreeMap<String, FoundDevice>,
) -> Result<crate::workload::Summary, String> {
    let mut devices = job.devices.clone();
    // Paths found in the guest win; the host only knows them in host mode.
    for (name, dev) in devices.iter_mut() {
        if let Some(found) = local_devices.get(name) {
            dev.path = Some(found.path.clone());
            dev.size_bytes = found.size_bytes;
            dev.logical_block_size = found.logical_block_size;
        }
    }
    let ctx = JobContext {
        job_id: job.job_id,
        seed: job.seed,
        devices,
        sink: Arc::new(ChannelSink(writer.clone())),
    };
    job.workload.run(&ctx).map_err(|e| e.to_string())
}
