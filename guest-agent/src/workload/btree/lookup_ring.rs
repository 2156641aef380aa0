//! The closed loop both io_uring engines run: up to `batch` lookups in
//! flight on one ring, each completion handled at once, a finished lookup's
//! slot starting the next. The loop keeps the rule that makes the engines'
//! unsafe code sound: every queued request is reaped before `run` returns,
//! even after a failure, because the kernel may still write into the
//! request's memory; and if the ring breaks, that memory is leaked.

use io_uring::{IoUring, cqueue, squeue};
use rand_chacha::ChaCha8Rng;

use crate::bpf::ring::{Ring, Sqe};

use super::lookup::{Lookups, Plan};
use super::recorder::Recorder;
use crate::workload::WorkloadError;

/// Registered buffer indexes are u16, and bigger batches make no sense here.
pub const MAX_BATCH: u32 = 4096;
/// How long an idle SQPOLL thread spins before sleeping, ms. Short: the
/// engines take turns in blocks, and a poller still spinning through the
/// next engine's block would take a CPU from it (and charge its own engine
/// for time it did not serve). Between the dependent reads of a lookup the
/// ring idles for microseconds, far less than this.
const SQPOLL_IDLE_MS: u32 = 10;

/// The io-uring crate's ring (with 128-byte SQEs and 32-byte CQEs for NVMe
/// passthrough), or ours for the SQEs it cannot build
/// (IORING_OP_CHAINED_READ, crate::bpf::ring).
enum Backend {
    Crate(IoUring),
    Big(IoUring<squeue::Entry128, cqueue::Entry32>),
    Own(Ring),
}

/// A ring and the completions of its last reap.
pub struct LookupRing {
    ring: Backend,
    reaped: Vec<(u64, i32)>,
}

impl LookupRing {
    /// A ring for `batch` requests in flight, clamped to 1..=MAX_BATCH;
    /// returns the clamped batch too. `sqpoll` has a kernel thread poll the
    /// submission queue; `iopoll` makes waiting poll the device for
    /// completions (O_DIRECT reads on a queue that polls).
    pub fn new(batch: u32, sqpoll: bool, iopoll: bool) -> Result<(Self, u32), WorkloadError> {
        Self::set_up(batch, "io_uring_setup", |entries| {
            let mut builder = IoUring::builder();
            if sqpoll {
                builder.setup_sqpoll(SQPOLL_IDLE_MS);
            }
            if iopoll {
                builder.setup_iopoll();
            }
            builder.build(entries).map(Backend::Crate)
        })
    }

    /// A ring of 128-byte SQEs and 32-byte CQEs, for NVMe passthrough
    /// commands ([`LookupRing::push_big`]); `iopoll` as in [`LookupRing::new`].
    pub fn new_big(batch: u32, iopoll: bool) -> Result<(Self, u32), WorkloadError> {
        Self::set_up(batch, "io_uring_setup (SQE128, CQE32)", |entries| {
            let mut builder = IoUring::<squeue::Entry128, cqueue::Entry32>::builder();
            if iopoll {
                builder.setup_iopoll();
            }
            builder.build(entries).map(Backend::Big)
        })
    }

    /// As [`LookupRing::new`] without SQPOLL, on our own ring: for
    /// [`LookupRing::push_sqe`].
    pub fn new_own(batch: u32) -> Result<(Self, u32), WorkloadError> {
        Self::set_up(batch, "io_uring_setup", |entries| {
            Ring::new(entries).map(Backend::Own)
        })
    }

    /// The batch clamped to 1..=MAX_BATCH and a ring of the next power of
    /// two entries made by `build`.
    fn set_up(
        batch: u32,
        what: &str,
        build: impl FnOnce(u32) -> std::io::Result<Backend>,
    ) -> Result<(Self, u32), WorkloadError> {
        let batch = batch.clamp(1, MAX_BATCH);
        let ring = build(batch.next_power_of_two()).map_err(|e| WorkloadError::io(what, e))?;
        let reaped = Vec::with_capacity(batch as usize);
        Ok((LookupRing { ring, reaped }, batch))
    }

    /// The thread id of the ring's SQPOLL kernel thread, from the ring's
    /// `/proc/self/fdinfo` entry (`SqThread:`, -1 or absent without one).
    pub fn sq_thread(&self) -> Option<i32> {
        use std::os::fd::AsRawFd;
        let fd = match &self.ring {
            Backend::Crate(r) => r.as_raw_fd(),
            Backend::Big(r) => r.as_raw_fd(),
            Backend::Own(_) => return None,
        };
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
        sq_thread_of(&info)
    }

    /// Registers `iovecs` as the ring's fixed buffers (for `ReadFixed`).
    ///
    /// # Safety
    /// The buffers must stay valid and unmoved until the ring is dropped.
    pub unsafe fn register_buffers(&self, iovecs: &[libc::iovec]) -> Result<(), WorkloadError> {
        let Backend::Crate(ring) = &self.ring else {
            return Err(WorkloadError::Other(
                "fixed buffers need the io-uring crate's ring of 64-byte SQEs".into(),
            ));
        };
        // SAFETY: the caller keeps the buffers alive as long as the ring.
        unsafe { ring.submitter().register_buffers(iovecs) }
            .map_err(|e| WorkloadError::io("io_uring register buffers", e))
    }

    /// Registers `fd` as the ring's file 0 (`types::Fixed(0)`).
    pub fn register_file(&self, fd: std::os::fd::RawFd) -> Result<(), WorkloadError> {
        let Backend::Crate(ring) = &self.ring else {
            return Err(WorkloadError::Other(
                "registered files need the io-uring crate's ring of 64-byte SQEs".into(),
            ));
        };
        ring.submitter()
            .register_files(&[fd])
            .map_err(|e| WorkloadError::io("io_uring register files", e))
    }

    /// Queues `entry`; it is submitted by the loop's next `submit_and_wait`.
    ///
    /// # Safety
    /// Whatever `entry` points to must stay valid until its completion is
    /// reaped.
    pub unsafe fn push(&mut self, entry: &squeue::Entry) -> Result<(), WorkloadError> {
        let Backend::Crate(ring) = &mut self.ring else {
            return Err(WorkloadError::Other(
                "an io-uring crate entry on our own ring".into(),
            ));
        };
        // SAFETY: the caller keeps the entry's memory alive until reaped.
        unsafe { ring.submission().push(entry) }
            .map_err(|_| WorkloadError::Other("io_uring submission queue full".into()))
    }

    /// Queues a 128-byte `entry` ([`LookupRing::new_big`]).
    ///
    /// # Safety
    /// As [`LookupRing::push`].
    pub unsafe fn push_big(&mut self, entry: &squeue::Entry128) -> Result<(), WorkloadError> {
        let Backend::Big(ring) = &mut self.ring else {
            return Err(WorkloadError::Other(
                "a 128-byte SQE on a ring of 64-byte ones".into(),
            ));
        };
        // SAFETY: the caller keeps the entry's memory alive until reaped.
        unsafe { ring.submission().push(entry) }
            .map_err(|_| WorkloadError::Other("io_uring submission queue full".into()))
    }

    /// Queues `sqe` on our own ring ([`LookupRing::new_own`]).
    ///
    /// # Safety
    /// As [`LookupRing::push`].
    pub unsafe fn push_sqe(&mut self, sqe: &Sqe) -> Result<(), WorkloadError> {
        let Backend::Own(ring) = &mut self.ring else {
            return Err(WorkloadError::Other(
                "a raw SQE on the io-uring crate's ring".into(),
            ));
        };
        // SAFETY: the caller keeps the SQE's memory alive until reaped.
        unsafe { ring.push(sqe) }.map_err(|e| WorkloadError::io("io_uring submit", e))
    }

    fn submit_and_wait(&mut self, want: usize) -> std::io::Result<usize> {
        match &mut self.ring {
            Backend::Crate(r) => r.submit_and_wait(want),
            Backend::Big(r) => r.submit_and_wait(want),
            Backend::Own(r) => r.submit_and_wait(want as u32).map(|n| n as usize),
        }
    }

    /// Replaces `reaped` with the completions waiting in the ring.
    fn reap(&mut self) {
        self.reaped.clear();
        match &mut self.ring {
            Backend::Crate(r) => self
                .reaped
                .extend(r.completion().map(|c| (c.user_data(), c.result()))),
            Backend::Big(r) => self
                .reaped
                .extend(r.completion().map(|c| (c.user_data(), c.result()))),
            Backend::Own(r) => r.reap(&mut self.reaped),
        }
    }
}

/// `SqThread:` of an io_uring fdinfo text, when it names a thread.
fn sq_thread_of(fdinfo: &str) -> Option<i32> {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("SqThread:"))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&tid: &i32| tid > 0)
}

/// An engine whose lookups run in numbered slots on a [`LookupRing`]; the
/// slot number is each request's user data.
pub trait SlotEngine {
    fn ring(&mut self) -> &mut LookupRing;
    /// Begins a new lookup in `slot` and queues its first request.
    fn start(
        &mut self,
        plan: &Plan,
        rng: &mut ChaCha8Rng,
        slot: usize,
    ) -> Result<(), WorkloadError>;
    /// Handles the completion `res` of `slot`: true when its lookup finished
    /// (and was recorded in `rec`), false when its next request was queued.
    fn complete(
        &mut self,
        plan: &Plan,
        slot: usize,
        res: i32,
        rec: &mut Recorder,
    ) -> Result<bool, WorkloadError>;
    /// The ring broke with requests in flight: leak the memory they may
    /// still write rather than free it.
    fn abandon_slots(&mut self);
}

/// Runs `n` lookups, at most `slots` in flight.
pub fn run_closed_loop<E: SlotEngine>(
    engine: &mut E,
    slots: usize,
    job: Lookups<'_>,
) -> Result<(), WorkloadError> {
    let Lookups { plan, rng, n, rec } = job;
    let width = (slots as u64).min(n) as usize;
    let mut started = 0u64;
    let mut inflight = 0usize;
    let mut failure: Option<WorkloadError> = None;
    for s in 0..width {
        if let Err(e) = engine.start(plan, rng, s) {
            failure = Some(e);
            break;
        }
        started += 1;
        inflight += 1;
    }
    // After a failure keep reaping until nothing is in flight.
    while inflight > 0 {
        let ring = engine.ring();
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => {
                engine.abandon_slots();
                return Err(WorkloadError::io("io_uring_enter", e));
            }
        }
        ring.reap();
        for i in 0..engine.ring().reaped.len() {
            let (slot, res) = engine.ring().reaped[i];
            inflight -= 1;
            if failure.is_some() {
                continue;
            }
            match engine.complete(plan, slot as usize, res, rec) {
                Ok(false) => inflight += 1,
                Ok(true) if started < n => match engine.start(plan, rng, slot as usize) {
                    Ok(()) => {
                        started += 1;
                        inflight += 1;
                    }
                    Err(e) => failure = Some(e),
                },
                Ok(true) => {}
                Err(e) => failure = Some(e),
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sq_thread_is_read_from_fdinfo() {
        let info = "SqMask:\t0x3\nSqThread:\t4242\nSqThreadCpu:\t1\n";
        assert_eq!(sq_thread_of(info), Some(4242));
        assert_eq!(sq_thread_of("SqThread:\t-1\n"), None);
        assert_eq!(sq_thread_of("SqMask:\t0x3\n"), None);
    }

    #[test]
    fn an_sqpoll_ring_names_its_poller_and_a_plain_one_none() {
        let (sqpoll, _) = LookupRing::new(1, true, false).unwrap();
        let tid = sqpoll.sq_thread().expect("an SQPOLL ring has a poller");
        assert!(crate::workload::btree::cpu::other_thread_cpu(tid).is_some());
        let (plain, _) = LookupRing::new(1, false, false).unwrap();
        assert_eq!(plain.sq_thread(), None);
    }
}
