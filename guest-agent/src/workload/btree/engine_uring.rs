//! The `io-uring` engine: one ring per thread with `batch` lookups in flight.
//! Each completion is parsed at once and submits that lookup's next read
//! (closed loop); a finished lookup's slot starts a new one. Registered
//! buffers and SQPOLL are options; with `iopoll` (the io-uring-poll engine)
//! the ring is IOPOLL: waiting for a completion polls the device's poll
//! queue instead of sleeping until its interrupt.

use std::time::Instant;

use io_uring::{opcode, squeue, types};
use rand_chacha::ChaCha8Rng;

use super::engine::LookupEngine;
use super::lookup::{Lookup, Lookups, MAX_HOPS, Plan};
use super::lookup_ring::{LookupRing, SlotEngine, run_closed_loop};
use super::nvme_passthru::{Namespace, check_completion};
use super::recorder::{Recorder, ns_since};
use super::target::{Target, direct_buf};
use crate::workload::WorkloadError;
use crate::workload::randread::AlignedBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UringOptions {
    pub batch: u32,
    pub registered_buffers: bool,
    pub sqpoll: bool,
    pub iopoll: bool,
    /// NVMe reads passed through to the driver (nvme_passthru.rs) instead
    /// of reads of the block device.
    pub passthru: bool,
    /// The device registered with the ring (IOSQE_FIXED_FILE): no file
    /// lookup per request.
    pub registered_file: bool,
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
    ring: LookupRing,
    target: Target,
    /// The namespace passthrough commands go to (`opts.passthru`).
    namespace: Option<Namespace>,
    bufs: Vec<AlignedBuf>,
    slots: Vec<Option<Slot>>,
    opts: UringOptions,
}

impl UringEngine {
    pub fn open(path: &str, plan: &Plan, opts: UringOptions) -> Result<Self, WorkloadError> {
        let target = Target::open(path)?;
        if opts.iopoll {
            super::polled::check_polled_queue(path)?;
        }
        let namespace = opts.passthru.then(|| Namespace::open(path)).transpose()?;
        let (ring, batch) = if opts.passthru {
            LookupRing::new_big(opts.batch, opts.iopoll)?
        } else {
            LookupRing::new(opts.batch, opts.sqpoll, opts.iopoll)?
        };
        let bufs = (0..batch)
            .map(|_| direct_buf(plan.max_io_len()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut engine = UringEngine {
            ring,
            target,
            namespace,
            bufs,
            slots: (0..batch).map(|_| None).collect(),
            opts: UringOptions { batch, ..opts },
        };
        if opts.registered_file {
            engine.ring.register_file(engine.target.fd())?;
        }
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
            unsafe { engine.ring.register_buffers(&iovecs) }?;
        }
        Ok(engine)
    }

    /// Queues the read the lookup in `slot` asks for.
    fn push(&mut self, slot: usize) -> Result<(), WorkloadError> {
        let io = self
            .slots
            .get(slot)
            .and_then(Option::as_ref)
            .map(|s| s.lookup.io)
            .ok_or_else(|| WorkloadError::Other(format!("push for idle slot {slot}")))?;
        let ptr = self.bufs[slot].as_mut_slice().as_mut_ptr();
        if let Some(ns) = &self.namespace {
            let entry = ns.read(ptr, io.offset, io.len)?.user_data(slot as u64);
            // SAFETY: as below; the command's buffer is this slot's.
            return unsafe { self.ring.push_big(&entry) };
        }
        let len = io.len as u32;
        let entry: squeue::Entry = match (self.opts.registered_file, self.opts.registered_buffers) {
            (true, true) => opcode::ReadFixed::new(types::Fixed(0), ptr, len, slot as u16)
                .offset(io.offset)
                .build(),
            (true, false) => opcode::Read::new(types::Fixed(0), ptr, len)
                .offset(io.offset)
                .build(),
            (false, true) => {
                opcode::ReadFixed::new(types::Fd(self.target.fd()), ptr, len, slot as u16)
                    .offset(io.offset)
                    .build()
            }
            (false, false) => opcode::Read::new(types::Fd(self.target.fd()), ptr, len)
                .offset(io.offset)
                .build(),
        };
        // SAFETY: the buffer belongs to this slot alone and outlives the read:
        // the closed loop reaps every queued read before returning.
        unsafe { self.ring.push(&entry.user_data(slot as u64)) }
    }
}

impl LookupEngine for UringEngine {
    /// The ring's SQPOLL kernel thread, when it has one.
    fn helper_thread(&self) -> Option<i32> {
        self.ring.sq_thread()
    }

    /// Runs `n` lookups, at most `batch` in flight.
    fn run(&mut self, job: Lookups<'_>) -> Result<(), WorkloadError> {
        let slots = self.slots.len();
        run_closed_loop(self, slots, job)
    }
}

impl SlotEngine for UringEngine {
    fn ring(&mut self) -> &mut LookupRing {
        &mut self.ring
    }

    fn start(
        &mut self,
        plan: &Plan,
        rng: &mut ChaCha8Rng,
        slot: usize,
    ) -> Result<(), WorkloadError> {
        let now = Instant::now();
        self.slots[slot] = Some(Slot {
            lookup: plan.begin(rng),
            started: now,
            hop_started: now,
            hop_ns: [0; MAX_HOPS],
        });
        self.push(slot)
    }

    fn complete(
        &mut self,
        plan: &Plan,
        slot: usize,
        res: i32,
        rec: &mut Recorder,
    ) -> Result<bool, WorkloadError> {
        let s = self
            .slots
            .get_mut(slot)
            .and_then(Option::as_mut)
            .ok_or_else(|| WorkloadError::Other(format!("completion for idle slot {slot}")))?;
        s.hop_ns[s.lookup.hop as usize] = ns_since(s.hop_started);
        let io = s.lookup.io;
        if let Some(ns) = &self.namespace {
            // A passthrough read moves every byte or fails with a status.
            check_completion(res, &ns.char_path, io.offset)?;
        } else if res < 0 {
            return Err(WorkloadError::io(
                format!("io_uring read {} at {}", self.target.path, io.offset),
                std::io::Error::from_raw_os_error(-res),
            ));
        } else if res as usize != io.len {
            return Err(self.target.short_read(io.offset, res as usize, io.len));
        }
        let data = &self.bufs[slot].as_slice()[..io.len];
        if plan.advance(&mut s.lookup, data)? {
            if let Some(done) = self.slots[slot].take() {
                let hops = plan.ios_per_lookup() as usize;
                rec.record(ns_since(done.started), &done.hop_ns[..hops]);
            }
            return Ok(true);
        }
        s.hop_started = Instant::now();
        self.push(slot).map(|()| false)
    }

    fn abandon_slots(&mut self) {
        std::mem::forget(std::mem::take(&mut self.bufs));
    }
}
