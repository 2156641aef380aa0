//! The `io-uring` engine: one ring per thread with `batch` lookups in flight.
//! Each completion is parsed at once and submits that lookup's next read
//! (closed loop); a finished lookup's slot starts a new one. Registered
//! buffers and SQPOLL are options.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Instant;

use io_uring::{IoUring, opcode, squeue, types};
use rand_chacha::ChaCha8Rng;

use super::engine_read::short_read;
use super::lookup::{Lookup, MAX_HOPS, Plan};
use super::recorder::Recorder;
use crate::workload::WorkloadError;
use crate::workload::randread::{AlignedBuf, open_direct};

/// How long an idle SQPOLL thread spins before sleeping, ms.
const SQPOLL_IDLE_MS: u32 = 2000;
/// Registered buffer indexes are u16, and bigger batches make no sense here.
pub const MAX_BATCH: u32 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UringOptions {
    pub batch: u32,
    pub registered_buffers: bool,
    pub sqpoll: bool,
}

struct Slot {
    lookup: Lookup,
    started: Instant,
    hop_started: Instant,
    hop_ns: [u64; MAX_HOPS],
}

// Field order matters: the ring is dropped (closed) before the buffers it
// may still reference are freed.
pub struct UringEngine {
    ring: IoUring,
    file: File,
    bufs: Vec<AlignedBuf>,
    opts: UringOptions,
    path: String,
    reaped: Vec<(u64, i32)>,
}

impl UringEngine {
    pub fn open(path: &str, plan: &Plan, opts: UringOptions) -> Result<Self, WorkloadError> {
        let batch = opts.batch.clamp(1, MAX_BATCH);
        let mut builder = IoUring::builder();
        if opts.sqpoll {
            builder.setup_sqpoll(SQPOLL_IDLE_MS);
        }
        let ring = builder
            .build(batch.next_power_of_two())
            .map_err(|e| WorkloadError::io("io_uring_setup", e))?;
        let bufs = (0..batch)
            .map(|_| AlignedBuf::new(plan.max_io_len(), 4096))
            .collect::<Result<Vec<_>, _>>()?;
        let mut engine = UringEngine {
            ring,
            file: open_direct(path)?,
            bufs,
            opts: UringOptions { batch, ..opts },
            path: path.to_string(),
            reaped: Vec::with_capacity(batch as usize),
        };
        if opts.registered_buffers {
            let iovecs: Vec<libc::iovec> = engine
                .bufs
                .iter_mut()
                .map(|b| {
                    let s = b.as_mut_slice();
                    libc::iovec {
                        iov_base: s.as_mut_ptr().cast(),
                        iov_len: s.len(),
                    }
                })
                .collect();
            // SAFETY: the buffers live in `engine.bufs`, are never reallocated,
            // and are freed only after the ring is closed (field order).
            unsafe { engine.ring.submitter().register_buffers(&iovecs) }
                .map_err(|e| WorkloadError::io("io_uring register buffers", e))?;
        }
        Ok(engine)
    }

    /// Runs `n` lookups, at most `batch` in flight.
    pub fn run(
        &mut self,
        plan: &Plan,
        rng: &mut ChaCha8Rng,
        n: u64,
        rec: &mut Recorder,
    ) -> Result<(), WorkloadError> {
        let hops = plan.ios_per_lookup() as usize;
        let width = u64::from(self.opts.batch).min(n) as usize;
        let mut slots: Vec<Option<Slot>> = (0..width).map(|_| None).collect();
        let mut started = 0u64;
        let mut inflight = 0usize;
        let mut failure: Option<WorkloadError> = None;
        for s in 0..width {
            if let Err(e) = self.start(plan, rng, s, &mut slots) {
                failure = Some(e);
                break;
            }
            started += 1;
            inflight += 1;
        }
        // After a failure keep reaping until nothing is in flight: the kernel
        // may still write into our buffers.
        while inflight > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    // The ring is unusable; leak the buffers rather than free
                    // memory the kernel might still write.
                    std::mem::forget(std::mem::take(&mut self.bufs));
                    return Err(WorkloadError::io("io_uring_enter", e));
                }
            }
            self.reaped.clear();
            self.reaped
                .extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            for i in 0..self.reaped.len() {
                let (slot, res) = self.reaped[i];
                inflight -= 1;
                if failure.is_some() {
                    continue;
                }
                match self.complete(plan, slot as usize, res, &mut slots) {
                    Ok(false) => inflight += 1,
                    Ok(true) => {
                        if let Some(done) = slots[slot as usize].take() {
                            rec.record(
                                done.started.elapsed().as_nanos() as u64,
                                &done.hop_ns[..hops],
                            );
                        }
                        if started < n {
                            match self.start(plan, rng, slot as usize, &mut slots) {
                                Ok(()) => {
                                    started += 1;
                                    inflight += 1;
                                }
                                Err(e) => failure = Some(e),
                            }
                        }
                    }
                    Err(e) => failure = Some(e),
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Begins a new lookup in `slot` and queues its first read.
    fn start(
        &mut self,
        plan: &Plan,
        rng: &mut ChaCha8Rng,
        slot: usize,
        slots: &mut [Option<Slot>],
    ) -> Result<(), WorkloadError> {
        let now = Instant::now();
        slots[slot] = Some(Slot {
            lookup: plan.begin(rng),
            started: now,
            hop_started: now,
            hop_ns: [0; MAX_HOPS],
        });
        self.push(slot, slots)
    }

    /// Handles one completion; true when the slot's lookup finished,
    /// false when its next read was queued.
    fn complete(
        &mut self,
        plan: &Plan,
        slot: usize,
        res: i32,
        slots: &mut [Option<Slot>],
    ) -> Result<bool, WorkloadError> {
        let s = slots
            .get_mut(slot)
            .and_then(Option::as_mut)
            .ok_or_else(|| WorkloadError::Other(format!("completion for idle slot {slot}")))?;
        s.hop_ns[s.lookup.hop as usize] = s.hop_started.elapsed().as_nanos() as u64;
        let io = s.lookup.io;
        if res < 0 {
            return Err(WorkloadError::io(
                format!("io_uring read {} at {}", self.path, io.offset),
                std::io::Error::from_raw_os_error(-res),
            ));
        }
        if res as usize != io.len {
            return Err(short_read(&self.path, io.offset, res as usize, io.len));
        }
        let data = &self.bufs[slot].as_slice()[..io.len];
        if plan.advance(&mut s.lookup, data)? {
            return Ok(true);
        }
        s.hop_started = Instant::now();
        self.push(slot, slots).map(|()| false)
    }

    /// Queues the read the lookup in `slot` asks for.
    fn push(&mut self, slot: usize, slots: &[Option<Slot>]) -> Result<(), WorkloadError> {
        let io = slots
            .get(slot)
            .and_then(Option::as_ref)
            .map(|s| s.lookup.io)
            .ok_or_else(|| WorkloadError::Other(format!("push for idle slot {slot}")))?;
        let fd = types::Fd(self.file.as_raw_fd());
        let ptr = self.bufs[slot].as_mut_slice().as_mut_ptr();
        let entry: squeue::Entry = if self.opts.registered_buffers {
            opcode::ReadFixed::new(fd, ptr, io.len as u32, slot as u16)
                .offset(io.offset)
                .build()
        } else {
            opcode::Read::new(fd, ptr, io.len as u32)
                .offset(io.offset)
                .build()
        };
        // SAFETY: the buffer belongs to this slot alone and outlives the read:
        // `run` reaps every queued read before returning.
        unsafe { self.ring.submission().push(&entry.user_data(slot as u64)) }
            .map_err(|_| WorkloadError::Other("io_uring submission queue full".into()))
    }
}
