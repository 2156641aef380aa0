//! The kernel ABI of the storage hooks (include/uapi/linux/chained_read.h
//! and the storage_chain parts of include/uapi/linux/bpf.h in the
//! `storage-hooks` patch series) and the scratch-word contract of the
//! programs in ebpf-programs/ (chain_abi.h). Keep all three in step.

/// x86_64 syscall number of chained_read(2).
pub const SYS_CHAINED_READ: libc::c_long = 451;
/// `IORING_OP_CHAINED_READ`: the first opcode after 6.1's `IORING_OP_SENDMSG_ZC`.
pub const IORING_OP_CHAINED_READ: u8 = 49;
/// `BPF_PROG_TYPE_STORAGE_CHAIN`: the first type after `BPF_PROG_TYPE_SYSCALL`.
pub const BPF_PROG_TYPE_STORAGE_CHAIN: u32 = 32;

/// `flags`: loop in the system-call layer.
pub const CHAINED_READ_SYSCALL: u32 = 1 << 0;
/// `flags`: re-send from the NVMe completion handler.
pub const CHAINED_READ_NVME: u32 = 1 << 1;
/// The kernel's hard cap on reads per chain, the first included.
pub const CHAINED_READ_MAX_HOPS: u32 = 32;

/// Program verdicts (`enum storage_chain_action`).
pub const STORAGE_CHAIN_DONE: u64 = 0;
pub const STORAGE_CHAIN_NEXT: u64 = 1;

/// Words of `storage_chain_ctx.scratch`.
pub const SCRATCH_WORDS: usize = 8;
pub type Scratch = [u64; SCRATCH_WORDS];

/// btree_lookup's scratch words.
pub mod bt {
    pub const KEY: usize = 0;
    pub const VALUE: usize = 1;
    pub const PHASE: usize = 2;
    pub const ERROR: usize = 3;
    pub const NODES: usize = 4;

    /// Why the program ended a lookup early (scratch[ERROR]).
    pub fn error_name(code: u64) -> &'static str {
        match code {
            0 => "none",
            1 => "block shorter than a node",
            2 => "node count 0 or above the fanout",
            3 => "neither inner node nor leaf",
            4 => "no child for the key",
            5 => "leaf does not hold the key",
            _ => "unknown error code",
        }
    }
}

/// synthetic_chain's scratch words.
pub mod sc {
    pub const STATE: usize = 0;
    pub const SLOTS: usize = 1;
    pub const DEPTH: usize = 2;
}

/// hook_attacks `jump`: where to go next and what to return.
pub mod at {
    pub const NEXT: usize = 0;
    pub const VERDICT: usize = 1;
}

/// `struct chained_read_args`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ChainArgs {
    pub fd: u32,
    pub prog_fd: u32,
    pub buf: u64,
    pub offset: u64,
    pub scratch: u64,
    pub size: u32,
    pub scratch_len: u32,
    pub flags: u32,
    pub max_hops: u32,
    /// Written back: offset of the last block read.
    pub final_offset: u64,
    /// Written back: reads done in the kernel, the first included.
    pub hops: u32,
    pub reserved: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_match_the_kernel_layout() {
        // 64 bytes, with the written-back fields where the header puts them.
        assert_eq!(std::mem::size_of::<ChainArgs>(), 64);
        assert_eq!(std::mem::offset_of!(ChainArgs, size), 32);
        assert_eq!(std::mem::offset_of!(ChainArgs, final_offset), 48);
        assert_eq!(std::mem::offset_of!(ChainArgs, hops), 56);
    }
}
