//! Starting chains: chained_read(2), and the SQE of IORING_OP_CHAINED_READ.

use io_uring::squeue;

use super::abi::{ChainArgs, IORING_OP_CHAINED_READ, SYS_CHAINED_READ};

/// Runs one chain; the kernel writes `hops` and `final_offset` back into
/// `args` (also on failure) and the scratch words into `args.scratch`.
pub fn chained_read(args: &mut ChainArgs) -> Result<usize, std::io::Error> {
    // SAFETY: args is a live ChainArgs; the buffers it points to are owned
    // by the caller for the duration of the call.
    let r = unsafe {
        libc::syscall(
            SYS_CHAINED_READ,
            args as *mut ChainArgs,
            std::mem::size_of::<ChainArgs>(),
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `struct io_uring_sqe` as 6.1 lays it out.
#[repr(C)]
#[derive(Default)]
struct RawSqe {
    opcode: u8,
    flags: u8,
    ioprio: u16,
    fd: i32,
    off: u64,
    addr: u64,
    len: u32,
    rw_flags: u32,
    user_data: u64,
    buf_index: u16,
    personality: u16,
    splice_fd_in: i32,
    addr3: u64,
    pad2: u64,
}

/// The SQE of one IORING_OP_CHAINED_READ on `fd`. The io-uring crate has no
/// builder for an opcode it does not know, so the entry is built from its
/// C layout.
///
/// # Safety
/// `args` and the buffers it points to must stay valid and unmoved until
/// the completion of this entry has been reaped.
pub unsafe fn chained_read_sqe(fd: i32, args: *mut ChainArgs, user_data: u64) -> squeue::Entry {
    let raw = RawSqe {
        opcode: IORING_OP_CHAINED_READ,
        fd,
        addr: args as u64,
        len: std::mem::size_of::<ChainArgs>() as u32,
        user_data,
        ..Default::default()
    };
    // SAFETY: squeue::Entry is #[repr(C)] around the kernel's 64-byte
    // io_uring_sqe, which RawSqe reproduces field by field (the size is
    // checked by transmute at compile time).
    unsafe { std::mem::transmute::<RawSqe, squeue::Entry>(raw) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqe_carries_opcode_fd_args_and_user_data() {
        let mut args = ChainArgs::default();
        // SAFETY: the entry is only inspected, never submitted.
        let e = unsafe { chained_read_sqe(7, &mut args, 42) };
        assert_eq!(e.get_user_data(), 42);
        // SAFETY: Entry is the 64-byte SQE (see chained_read_sqe).
        let bytes: [u8; 64] = unsafe { std::mem::transmute(e) };
        assert_eq!(bytes[0], IORING_OP_CHAINED_READ);
        assert_eq!(i32::from_le_bytes(bytes[4..8].try_into().unwrap()), 7);
        let addr = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        assert_eq!(addr, &args as *const ChainArgs as u64);
        assert_eq!(u32::from_le_bytes(bytes[24..28].try_into().unwrap()), 64);
    }
}
