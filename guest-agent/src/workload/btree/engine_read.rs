//! The `read` engine: synchronous pread with O_DIRECT, one lookup at a time,
//! one fd per thread.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use rand_chacha::ChaCha8Rng;

use super::lookup::{MAX_HOPS, Plan};
use super::recorder::Recorder;
use crate::workload::WorkloadError;
use crate::workload::randread::{AlignedBuf, open_direct};

pub struct ReadEngine {
    file: File,
    buf: AlignedBuf,
    path: String,
}

impl ReadEngine {
    pub fn open(path: &str, plan: &Plan) -> Result<Self, WorkloadError> {
        Ok(ReadEngine {
            file: open_direct(path)?,
            buf: AlignedBuf::new(plan.max_io_len(), 4096)?,
            path: path.to_string(),
        })
    }

    /// Runs `n` lookups back to back.
    pub fn run(
        &mut self,
        plan: &Plan,
        rng: &mut ChaCha8Rng,
        n: u64,
        rec: &mut Recorder,
    ) -> Result<(), WorkloadError> {
        let hops = plan.ios_per_lookup() as usize;
        let mut hop_ns = [0u64; MAX_HOPS];
        for _ in 0..n {
            let mut l = plan.begin(rng);
            let started = Instant::now();
            loop {
                let io = l.io;
                let buf = &mut self.buf.as_mut_slice()[..io.len];
                let t0 = Instant::now();
                let got = self.file.read_at(buf, io.offset).map_err(|e| {
                    WorkloadError::io(format!("pread {} at {}", self.path, io.offset), e)
                })?;
                hop_ns[l.hop as usize] = t0.elapsed().as_nanos() as u64;
                if got != io.len {
                    return Err(short_read(&self.path, io.offset, got, io.len));
                }
                if plan.advance(&mut l, buf)? {
                    break;
                }
            }
            rec.record(started.elapsed().as_nanos() as u64, &hop_ns[..hops]);
        }
        Ok(())
    }
}

pub fn short_read(path: &str, offset: u64, got: usize, want: usize) -> WorkloadError {
    WorkloadError::io(
        format!("read {path} at {offset}"),
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("short read: {got} of {want} bytes"),
        ),
    )
}
