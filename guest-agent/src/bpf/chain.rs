//! Starting chains: chained_read(2). IORING_OP_CHAINED_READ goes through
//! our own ring (ring.rs: `Sqe::chained_read`).

use super::abi::{ChainArgs, SYS_CHAINED_READ};

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
