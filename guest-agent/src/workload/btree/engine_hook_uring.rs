//! The `syscall-hook-uring` and `nvme-hook-uring` engines: one ring per
//! thread with `batch` chains in flight, each an IORING_OP_CHAINED_READ
//! (the io_uring form of chained_read(2), for HotOS fig. 3d). A completed
//! chain is verified and its slot starts the next lookup (closed loop).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Instant;

use io_uring::IoUring;
use rand_chacha::ChaCha8Rng;

use super::engine_hook::{
    ChainJob, HookMode, begin, load_program, read_size, syscall_error, tree_seed,
};
use super::engine_uring::MAX_BATCH;
use super::lookup::Plan;
use super::recorder::Recorder;
use crate::bpf::abi::ChainArgs;
use crate::bpf::chain::chained_read_sqe;
use crate::bpf::prog::Program;
use crate::workload::WorkloadError;
use crate::workload::randread::{AlignedBuf, open_direct};

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
    ring: IoUring,
    file: File,
    prog: Program,
    slots: Box<[Slot]>,
    mode: HookMode,
    path: String,
    kernel_hops: u64,
}

impl HookUringEngine {
    pub fn open(
        path: &str,
        plan: &Plan,
        mode: HookMode,
        batch: u32,
    ) -> Result<Self, WorkloadError> {
        let batch = batch.clamp(1, MAX_BATCH);
        let ring = IoUring::new(batch.next_power_of_two())
            .map_err(|e| WorkloadError::io("io_uring_setup", e))?;
        let slots = (0..batch)
            .map(|_| {
                Ok(Slot {
                    job: begin_placeholder(plan),
                    args: ChainArgs::default(),
                    buf: AlignedBuf::new(read_size(plan), 4096)?,
                    started: Instant::now(),
                })
            })
            .collect::<Result<Vec<_>, WorkloadError>>()?
            .into_boxed_slice();
        Ok(HookUringEngine {
            ring,
            file: open_direct(path)?,
            prog: load_program(plan)?,
            slots,
            mode,
            path: path.to_string(),
            kernel_hops: 0,
        })
    }

    pub fn take_kernel_hops(&mut self) -> u64 {
        std::mem::take(&mut self.kernel_hops)
    }

    /// Runs `n` lookups, at most `batch` in flight.
    pub fn run(
        &mut self,
        plan: &Plan,
        rng: &mut ChaCha8Rng,
        n: u64,
        rec: &mut Recorder,
    ) -> Result<(), WorkloadError> {
        let seed = tree_seed(plan);
        let width = (self.slots.len() as u64).min(n) as usize;
        let mut started = 0u64;
        let mut inflight = 0usize;
        let mut failure: Option<WorkloadError> = None;
        for s in 0..width {
            if let Err(e) = self.start(plan, rng, s) {
                failure = Some(e);
                break;
            }
            started += 1;
            inflight += 1;
        }
        let mut reaped: Vec<(u64, i32)> = Vec::with_capacity(self.slots.len());
        // After a failure keep reaping: the kernel still owns busy slots.
        while inflight > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    // The ring is unusable; leak the slots rather than free
                    // memory the kernel might still write.
                    std::mem::forget(std::mem::take(&mut self.slots));
                    return Err(WorkloadError::io("io_uring_enter", e));
                }
            }
            reaped.clear();
            reaped.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            for &(slot, res) in &reaped {
                let slot = slot as usize;
                inflight -= 1;
                let Some(s) = self.slots.get_mut(slot) else {
                    failure.get_or_insert(WorkloadError::Other(format!(
                        "completion for unknown slot {slot}"
                    )));
                    continue;
                };
                if failure.is_some() {
                    continue;
                }
                let ns = s.started.elapsed().as_nanos() as u64;
                let done = if res < 0 {
                    Err(syscall_error(
                        &self.path,
                        std::io::Error::from_raw_os_error(-res),
                    ))
                } else {
                    s.job.verify(res as usize, &s.args, s.buf.as_slice(), seed)
                };
                match done {
                    Ok(hops) => {
                        self.kernel_hops += u64::from(hops);
                        rec.record(ns, &[]);
                        if started < n {
                            match self.start(plan, rng, slot) {
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

    /// Begins a new lookup in `slot` and queues its chain.
    fn start(
        &mut self,
        plan: &Plan,
        rng: &mut ChaCha8Rng,
        slot: usize,
    ) -> Result<(), WorkloadError> {
        let (fd, prog_fd, mode) = (self.file.as_raw_fd(), self.prog.fd(), self.mode);
        let s = &mut self.slots[slot];
        s.job = begin(plan, rng);
        s.args = s.job.args(fd, prog_fd, s.buf.as_mut_slice(), mode);
        s.started = Instant::now();
        // SAFETY: the slot (args, scratch, buffer) lives in a boxed slice
        // that is neither moved nor freed while busy: `run` reaps every
        // queued chain before returning, and a broken ring leaks the slots.
        let entry = unsafe { chained_read_sqe(fd, &mut s.args, slot as u64) };
        // SAFETY: as above.
        unsafe { self.ring.submission().push(&entry) }
            .map_err(|_| WorkloadError::Other("io_uring submission queue full".into()))
    }
}

/// A job for an idle slot (overwritten before use).
fn begin_placeholder(plan: &Plan) -> ChainJob {
    use rand::SeedableRng;
    begin(plan, &mut ChaCha8Rng::seed_from_u64(0))
}
