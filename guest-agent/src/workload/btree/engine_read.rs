//! The `read` engine: synchronous pread with O_DIRECT, one lookup at a time,
//! one fd per thread.

use std::os::unix::fs::FileExt;
use std::time::Instant;

use super::engine::LookupEngine;
use super::lookup::{Lookups, MAX_HOPS, Plan};
use super::recorder::ns_since;
use super::target::{Target, direct_buf};
use crate::workload::WorkloadError;
use crate::workload::randread::AlignedBuf;

pub struct ReadEngine {
    target: Target,
    buf: AlignedBuf,
}

impl ReadEngine {
    pub fn open(path: &str, plan: &Plan) -> Result<Self, WorkloadError> {
        Ok(ReadEngine {
            target: Target::open(path)?,
            buf: direct_buf(plan.max_io_len())?,
        })
    }

}

impl LookupEngine for ReadEngine {
    /// Runs `n` lookups back to back.
    fn run(&mut self, job: Lookups<'_>) -> Result<(), WorkloadError> {
        let Lookups { plan, rng, n, rec } = job;
        let hops = plan.ios_per_lookup() as usize;
        let mut hop_ns = [0u64; MAX_HOPS];
        for _ in 0..n {
            let mut l = plan.begin(rng);
            let started = Instant::now();
            loop {
                let io = l.io;
                let buf = &mut self.buf.as_mut_slice()[..io.len];
                let t0 = Instant::now();
                let got = self.target.file.read_at(buf, io.offset).map_err(|e| {
                    WorkloadError::io(format!("pread {} at {}", self.target.path, io.offset), e)
                })?;
                hop_ns[l.hop as usize] = ns_since(t0);
                if got != io.len {
                    return Err(self.target.short_read(io.offset, got, io.len));
                }
                if plan.advance(&mut l, buf)? {
                    break;
                }
            }
            rec.record(ns_since(started), &hop_ns[..hops]);
        }
        Ok(())
    }
}
