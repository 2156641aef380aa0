//! A minimal io_uring of our own, for IORING_OP_CHAINED_READ: the io-uring
//! crate has no builder for an opcode it does not know and keeps its SQE
//! private, so SQEs are built here as the kernel's `struct io_uring_sqe`
//! (the uapi layout, checked at compile time) and written into a ring this
//! module sets up (io_uring_setup, mmap, io_uring_enter). No SQPOLL, no
//! registered files or buffers: what the chain engines need, nothing more.

use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use super::abi::{ChainArgs, IORING_OP_CHAINED_READ};

/// `struct io_uring_sqe` (include/uapi/linux/io_uring.h), unions flattened
/// to the members this code uses.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sqe {
    pub opcode: u8,
    pub flags: u8,
    pub ioprio: u16,
    pub fd: i32,
    /// `off` / `addr2`.
    pub off: u64,
    /// `addr` / `splice_off_in`.
    pub addr: u64,
    pub len: u32,
    /// `rw_flags` and the other per-opcode flags.
    pub op_flags: u32,
    pub user_data: u64,
    /// `buf_index` / `buf_group`.
    pub buf_index: u16,
    pub personality: u16,
    /// `splice_fd_in` / `file_index`.
    pub splice_fd_in: i32,
    pub addr3: u64,
    pub pad2: u64,
}

const _: () = {
    assert!(size_of::<Sqe>() == 64);
    assert!(offset_of!(Sqe, fd) == 4);
    assert!(offset_of!(Sqe, off) == 8);
    assert!(offset_of!(Sqe, addr) == 16);
    assert!(offset_of!(Sqe, len) == 24);
    assert!(offset_of!(Sqe, op_flags) == 28);
    assert!(offset_of!(Sqe, user_data) == 32);
    assert!(offset_of!(Sqe, buf_index) == 40);
    assert!(offset_of!(Sqe, splice_fd_in) == 44);
    assert!(offset_of!(Sqe, addr3) == 48);
};

/// `IORING_OP_NOP` and `IORING_OP_READ` (for the tests of the ring itself).
pub const IORING_OP_NOP: u8 = 0;
pub const IORING_OP_READ: u8 = 22;

impl Sqe {
    /// One IORING_OP_CHAINED_READ on `fd` described by `args`; the kernel
    /// reads and writes `*args` and the buffers it points to until the
    /// completion is reaped (see [`Ring::push`]).
    pub fn chained_read(fd: i32, args: *mut ChainArgs, user_data: u64) -> Sqe {
        Sqe {
            opcode: IORING_OP_CHAINED_READ,
            fd,
            addr: args as u64,
            len: size_of::<ChainArgs>() as u32,
            user_data,
            ..Sqe::default()
        }
    }
}

/// `struct io_uring_cqe` without the CQE32 extension (not set up here).
#[repr(C)]
#[derive(Clone, Copy)]
struct Cqe {
    user_data: u64,
    res: i32,
    flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct SqringOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    flags: u32,
    dropped: u32,
    array: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct CqringOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    overflow: u32,
    cqes: u32,
    flags: u32,
    resv1: u32,
    user_addr: u64,
}

/// `struct io_uring_params`.
#[repr(C)]
#[derive(Default)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: SqringOffsets,
    cq_off: CqringOffsets,
}

const _: () = {
    assert!(size_of::<Cqe>() == 16);
    assert!(size_of::<Params>() == 120);
    assert!(offset_of!(Params, sq_off) == 40);
    assert!(offset_of!(Params, cq_off) == 80);
};

const IORING_OFF_SQ_RING: libc::off_t = 0;
const IORING_OFF_CQ_RING: libc::off_t = 0x800_0000;
const IORING_OFF_SQES: libc::off_t = 0x1000_0000;
const IORING_ENTER_GETEVENTS: u32 = 1;

/// A shared mapping of part of the ring, unmapped on drop.
struct Map {
    ptr: NonNull<u8>,
    len: usize,
}

impl Map {
    fn new(fd: &OwnedFd, len: usize, offset: libc::off_t) -> std::io::Result<Map> {
        // SAFETY: a fresh shared mapping of the ring fd; the kernel checks
        // the offset and length.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(std::io::Error::last_os_error)?;
        Ok(Map { ptr, len })
    }

    /// The address `offset` bytes in, as a `T`.
    fn at<T>(&self, offset: u32) -> *mut T {
        debug_assert!(offset as usize + size_of::<T>() <= self.len);
        // SAFETY: the kernel's offsets lie inside the mapping it sized.
        unsafe { self.ptr.as_ptr().add(offset as usize).cast() }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: ptr/len are a mapping made by Map::new, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A ring with at most `entries` requests in flight.
///
/// Dropping a ring with requests in flight does not wait for them: whoever
/// owns their memory must reap them first, or leak that memory.
pub struct Ring {
    // The mappings go before the fd they map.
    sq: Map,
    cq: Map,
    sqes: Map,
    fd: OwnedFd,
    sq_mask: u32,
    sq_entries: u32,
    sq_off: SqringOffsets,
    cq_mask: u32,
    cq_off: CqringOffsets,
    /// Our copy of the SQ tail (only we write it).
    tail: u32,
    /// Pushed and not yet reaped.
    in_flight: u32,
}

// SAFETY: the ring's memory is only touched through &mut self.
unsafe impl Send for Ring {}

impl Ring {
    /// A ring for `entries` requests (rounded up to a power of two).
    pub fn new(entries: u32) -> std::io::Result<Ring> {
        let mut p = Params::default();
        // SAFETY: io_uring_setup fills in the params struct we pass.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_io_uring_setup,
                entries.max(1),
                &mut p as *mut Params,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the syscall returned a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let sq_len = p.sq_off.array as usize + p.sq_entries as usize * size_of::<u32>();
        let cq_len = p.cq_off.cqes as usize + p.cq_entries as usize * size_of::<Cqe>();
        let sq = Map::new(&fd, sq_len, IORING_OFF_SQ_RING)?;
        let cq = Map::new(&fd, cq_len, IORING_OFF_CQ_RING)?;
        let sqes = Map::new(
            &fd,
            p.sq_entries as usize * size_of::<Sqe>(),
            IORING_OFF_SQES,
        )?;
        let mut ring = Ring {
            sq,
            cq,
            sqes,
            fd,
            sq_mask: 0,
            sq_entries: p.sq_entries,
            sq_off: p.sq_off,
            cq_mask: 0,
            cq_off: p.cq_off,
            tail: 0,
            in_flight: 0,
        };
        // SAFETY: the ring's own fields, inside the mappings; nothing is in
        // flight yet.
        unsafe {
            ring.sq_mask = *ring.sq.at::<u32>(ring.sq_off.ring_mask);
            ring.cq_mask = *ring.cq.at::<u32>(ring.cq_off.ring_mask);
            ring.tail = (*ring.sq_atomic(ring.sq_off.tail)).load(Ordering::Acquire);
        }
        Ok(ring)
    }

    fn sq_atomic(&self, offset: u32) -> &AtomicU32 {
        // SAFETY: head/tail are aligned u32s the kernel shares with us for
        // the life of the mapping; AtomicU32 has u32's layout.
        unsafe { &*self.sq.at::<AtomicU32>(offset) }
    }

    fn cq_atomic(&self, offset: u32) -> &AtomicU32 {
        // SAFETY: as in sq_atomic.
        unsafe { &*self.cq.at::<AtomicU32>(offset) }
    }

    /// Requests pushed and not yet reaped.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Queues `sqe`; the next [`Ring::submit_and_wait`] submits it. Fails
    /// when `entries` requests are in flight already.
    ///
    /// # Safety
    /// Whatever `sqe` points to must stay valid, and not be moved, until its
    /// completion has been reaped (or be leaked).
    pub unsafe fn push(&mut self, sqe: &Sqe) -> std::io::Result<()> {
        if self.in_flight >= self.sq_entries {
            return Err(std::io::Error::other("io_uring submission queue full"));
        }
        let idx = self.tail & self.sq_mask;
        // SAFETY: idx < sq_entries: slot idx of the SQE array and of the
        // index array, which the kernel does not read before the tail moves
        // past it (in_flight < sq_entries keeps us off unconsumed slots).
        unsafe {
            self.sqes
                .at::<Sqe>(0)
                .add(idx as usize)
                .write_volatile(*sqe);
            self.sq
                .at::<u32>(self.sq_off.array)
                .add(idx as usize)
                .write_volatile(idx);
        }
        self.tail = self.tail.wrapping_add(1);
        self.sq_atomic(self.sq_off.tail)
            .store(self.tail, Ordering::Release);
        self.in_flight += 1;
        Ok(())
    }

    /// Submits what was pushed and waits for at least `want` completions.
    /// Returns how many requests were submitted; EINTR is the caller's to
    /// retry (what is submitted stays submitted).
    pub fn submit_and_wait(&mut self, want: u32) -> std::io::Result<u32> {
        let head = self.sq_atomic(self.sq_off.head).load(Ordering::Acquire);
        let to_submit = self.tail.wrapping_sub(head);
        let flags = if want > 0 { IORING_ENTER_GETEVENTS } else { 0 };
        // SAFETY: io_uring_enter on our ring, no signal mask.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                self.fd.as_raw_fd(),
                to_submit,
                want,
                flags,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r as u32)
        }
    }

    /// Moves every completion waiting in the ring into `out` as
    /// (user_data, res).
    pub fn reap(&mut self, out: &mut Vec<(u64, i32)>) {
        let tail = self.cq_atomic(self.cq_off.tail).load(Ordering::Acquire);
        let mut head = self.cq_atomic(self.cq_off.head).load(Ordering::Relaxed);
        while head != tail {
            // SAFETY: slot head & mask of the CQE array, written by the
            // kernel before it published the tail we loaded (Acquire).
            let c = unsafe {
                self.cq
                    .at::<Cqe>(self.cq_off.cqes)
                    .add((head & self.cq_mask) as usize)
                    .read_volatile()
            };
            out.push((c.user_data, c.res));
            head = head.wrapping_add(1);
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        self.cq_atomic(self.cq_off.head)
            .store(head, Ordering::Release);
    }

    /// Runs one request on an idle ring: `build` makes its SQE from the
    /// address of `mem`, the memory the kernel reads and writes. Interrupted
    /// waits are retried, so this returns only once the completion is
    /// reaped, with its result and `mem`; if the ring fails with the request
    /// in flight, `mem` is leaked, never freed under the kernel.
    ///
    /// # Safety
    /// The SQE must point only into `*mem` (or at memory that outlives the
    /// program).
    pub unsafe fn run_one<T>(
        &mut self,
        mem: Box<T>,
        build: impl FnOnce(*mut T) -> Sqe,
    ) -> std::io::Result<(i32, Box<T>)> {
        if self.in_flight != 0 {
            return Err(std::io::Error::other("run_one needs an idle ring"));
        }
        // A raw pointer while the kernel owns the memory; a Box again after.
        let mem = Box::into_raw(mem);
        let sqe = build(mem);
        // SAFETY: the caller's SQE points into *mem, which stays allocated
        // until the completion is reaped below (or forever).
        if let Err(e) = unsafe { self.push(&sqe) } {
            // SAFETY: not submitted: the memory is ours again.
            drop(unsafe { Box::from_raw(mem) });
            return Err(e);
        }
        let mut done = Vec::with_capacity(1);
        loop {
            match self.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                // In flight or not, we cannot tell: leak the memory.
                Err(e) => return Err(e),
            }
            self.reap(&mut done);
            if let Some(&(_, res)) = done.iter().find(|c| c.0 == sqe.user_data) {
                // SAFETY: the completion is reaped: the kernel is done with
                // the memory, which came from Box::into_raw above.
                return Ok((res, unsafe { Box::from_raw(mem) }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};

    #[test]
    fn a_chained_read_sqe_is_the_kernel_layout() {
        let mut args = ChainArgs::default();
        let e = Sqe::chained_read(7, &mut args, 42);
        // SAFETY: Sqe is repr(C), 64 bytes of plain integers (asserted).
        let bytes: [u8; 64] = unsafe { std::mem::transmute(e) };
        assert_eq!(bytes[0], IORING_OP_CHAINED_READ);
        assert_eq!(i32::from_le_bytes(bytes[4..8].try_into().unwrap()), 7);
        let addr = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        assert_eq!(addr, &args as *const ChainArgs as u64);
        assert_eq!(u32::from_le_bytes(bytes[24..28].try_into().unwrap()), 64);
        assert_eq!(u64::from_le_bytes(bytes[32..40].try_into().unwrap()), 42);
    }

    #[test]
    fn nops_and_a_read_complete_through_our_ring() {
        let mut ring = Ring::new(4).unwrap();
        for ud in [1, 2, 3] {
            let nop = Sqe {
                opcode: IORING_OP_NOP,
                user_data: ud,
                ..Sqe::default()
            };
            // SAFETY: a NOP points at nothing.
            unsafe { ring.push(&nop) }.unwrap();
        }
        assert_eq!(ring.submit_and_wait(3).unwrap(), 3);
        let mut done = Vec::new();
        ring.reap(&mut done);
        done.sort();
        assert_eq!(done, [(1, 0), (2, 0), (3, 0)]);
        assert_eq!(ring.in_flight(), 0);

        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"hello ring").unwrap();
        let fd = f.as_raw_fd();
        // SAFETY: the SQE points into the boxed buffer only.
        let (res, buf) = unsafe {
            ring.run_one(Box::new([0u8; 16]), |b| Sqe {
                opcode: IORING_OP_READ,
                fd,
                addr: b as u64,
                len: 16,
                off: 0,
                user_data: 9,
                ..Sqe::default()
            })
        }
        .unwrap();
        assert_eq!(res, 10);
        assert_eq!(&buf[..10], b"hello ring");
    }

    extern "C" fn ignore(_: libc::c_int) {}

    /// A wait interrupted by signals (no SA_RESTART) while a read is in
    /// flight: run_one must keep the buffer until the read completes.
    #[test]
    fn run_one_outlasts_interrupted_waits() {
        // SAFETY: a handler that does nothing, installed without
        // SA_RESTART so io_uring_enter returns EINTR.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = ignore as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
        }
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills in two fds.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both fds are new and ours.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() } as usize;
        let poker = std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(300) {
                // SAFETY: the waiting thread lives until it joins us.
                unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGUSR1) };
                std::thread::sleep(Duration::from_millis(10));
            }
            let mut w = std::fs::File::from(wr);
            w.write_all(b"late").unwrap();
        });
        let mut ring = Ring::new(2).unwrap();
        let fd = rd.as_raw_fd();
        // SAFETY: the SQE points into the boxed buffer only.
        let r = unsafe {
            ring.run_one(Box::new([0u8; 8]), |b| Sqe {
                opcode: IORING_OP_READ,
                fd,
                addr: b as u64,
                len: 8,
                // -1: the pipe's current position.
                off: u64::MAX,
                user_data: 5,
                ..Sqe::default()
            })
        };
        poker.join().unwrap();
        let (res, buf) = r.unwrap();
        assert_eq!(res, 4);
        assert_eq!(&buf[..4], b"late");
    }
}
