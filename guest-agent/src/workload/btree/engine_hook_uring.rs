//! The `syscall-hook-uring` and `nvme-hook-uring` engines: one ring per
//! thread with `batch` chains in flight, each an IORING_OP_CHAINED_READ
//! (the io_uring form of chained_read(2), for HotOS fig. 3d). A completed
//! chain is verified and its slot starts the next lookup (closed loop).

use std::time::Instant;

use rand_chacha::ChaCha8Rng;

use super::engine_hook::{
    ChainJob, HookMode, begin, load_program, read_size, syscall_error, tree_seed,
};
use super::engine::LookupEngine;
use super::lookup::{Lookups, Plan};
use super::lookup_ring::{LookupRing, SlotEngine, run_closed_loop};
use super::recorder::{Recorder, ns_since};
use super::target::{Target, direct_buf};
use crate::bpf::abi::ChainArgs;
use crate::bpf::prog::Program;
use crate::bpf::ring::Sqe;
use crate::workload::WorkloadError;
use crate::workload::randread::AlignedBuf;

/// One chain in flight: the kernel reads and writes `args`, `job.scratch`
/// and `buf` until its completion is reaped, so slots never move.
struct Slot {
    job: ChainJob,
    args: ChainArgs,
    buf: AlignedBuf,
    started: Instant,
}

// Field order: the ring is closed before the slots it may reference.
pub struct HookUringEngine {
    ring: LookupRing,
    target: Target,
    prog: Program,
    slots: Box<[Slot]>,
    mode: HookMode,
    kernel_hops: u64,
}

impl HookUringEngine {
    pub fn open(
        path: &str,
        plan: &Plan,
        mode: HookMode,
        batch: u32,
    ) -> Result<Self, WorkloadError> {
        super::protection::refuse_protection_information(path, std::path::Path::new("/sys"))?;
        // Our own ring: the io-uring crate cannot build this opcode's SQE.
        let (ring, batch) = LookupRing::new_own(batch)?;
        let slots = (0..batch)
            .map(|_| {
                Ok(Slot {
                    job: begin_placeholder(plan),
                    args: ChainArgs::default(),
                    buf: direct_buf(read_size(plan))?,
                    started: Instant::now(),
                })
            })
            .collect::<Result<Vec<_>, WorkloadError>>()?
            .into_boxed_slice();
        Ok(HookUringEngine {
            ring,
            target: Target::open(path)?,
            prog: load_program(plan)?,
            slots,
            mode,
            kernel_hops: 0,
        })
    }

}

impl LookupEngine for HookUringEngine {
    fn take_kernel_hops(&mut self) -> u64 {
        std::mem::take(&mut self.kernel_hops)
    }

    /// Runs `n` lookups, at most `batch` in flight.
    fn run(&mut self, job: Lookups<'_>) -> Result<(), WorkloadError> {
        let slots = self.slots.len();
        run_closed_loop(self, slots, job)
    }
}

impl SlotEngine for HookUringEngine {
    fn ring(&mut self) -> &mut LookupRing {
        &mut self.ring
    }

    /// Begins a new lookup in `slot` and queues its chain.
    fn start(
        &mut self,
        plan: &Plan,
        rng: &mut ChaCha8Rng,
        slot: usize,
    ) -> Result<(), WorkloadError> {
        let (fd, prog_fd, mode) = (self.target.fd(), self.prog.fd(), self.mode);
        let s = &mut self.slots[slot];
        s.job = begin(plan, rng);
        s.args = s.job.args(fd, prog_fd, s.buf.as_mut_slice(), mode);
        s.started = Instant::now();
        let sqe = Sqe::chained_read(fd, &mut s.args, slot as u64);
        // SAFETY: the slot (args, scratch, buffer) lives in a boxed slice
        // that is neither moved nor freed while busy: the closed loop reaps
        // every queued chain before returning, and a broken ring leaks the
        // slots.
        unsafe { self.ring.push_sqe(&sqe) }
    }

    /// A chain is one request: its completion always ends the lookup.
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
            .ok_or_else(|| WorkloadError::Other(format!("completion for unknown slot {slot}")))?;
        let ns = ns_since(s.started);
        let hops = if res < 0 {
            Err(syscall_error(
                &self.target.path,
                std::io::Error::from_raw_os_error(-res),
            ))
        } else {
            s.job
                .verify(res as usize, &s.args, s.buf.as_slice(), tree_seed(plan))
        }?;
        self.kernel_hops += u64::from(hops);
        rec.record(ns, &[]);
        Ok(true)
    }

    fn abandon_slots(&mut self) {
        std::mem::forget(std::mem::take(&mut self.slots));
    }
}

/// A job for an idle slot (overwritten before use).
fn begin_placeholder(plan: &Plan) -> ChainJob {
    use rand::SeedableRng;
    begin(plan, &mut ChaCha8Rng::seed_from_u64(0))
}
