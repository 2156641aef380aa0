//! Loading and running the storage-hook BPF programs without libbpf or aya:
//! aya 0.14 cannot load a program of a type it does not know
//! (`BPF_PROG_TYPE_STORAGE_CHAIN` exists only in the patched kernel), so the
//! program's instructions are taken from the clang-built ELF object and
//! loaded with the raw bpf(2) syscall, and chains are started with the raw
//! chained_read(2) syscall or the matching io_uring opcode (through a ring
//! of our own, ring.rs: the io-uring crate cannot build that SQE).

pub mod abi;
pub mod chain;
pub mod elf;
pub mod prog;
pub mod ring;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a BPF ELF object: {reason}")]
    Elf { path: PathBuf, reason: String },
    #[error("{path}: no section {section:?} (sections: {known})")]
    NoSection {
        path: PathBuf,
        section: String,
        known: String,
    },
    #[error(
        "{path}: section {section:?} has relocations (maps or global data), which this loader does not support"
    )]
    Relocations { path: PathBuf, section: String },
    #[error("the verifier rejected {name}: {source}\n--- verifier log ---\n{log}")]
    Rejected {
        name: String,
        source: std::io::Error,
        log: String,
    },
}
