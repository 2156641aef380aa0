//! Defaults of job parameters that several workloads share. serde's
//! `#[serde(default = "path")]` takes a function, so a shared default is a
//! shared function; keeping them here keeps, e.g., fio's block size and
//! alignment the same as those of the randread workload it is the peer of.

pub fn one_u32() -> u32 {
    1
}

pub fn one_u64() -> u64 {
    1
}

/// One 512-byte sector per read: the smallest O_DIRECT read.
pub fn block_size() -> u32 {
    512
}

/// Read offsets are multiples of 4 KiB, as in the HotOS benchmark.
pub fn align() -> u32 {
    4096
}

/// fio's plain synchronous engine, one pread(2) per I/O.
pub fn fio_ioengine() -> String {
    "psync".into()
}

/// For switches that are on unless a spec turns them off.
pub fn yes() -> bool {
    true
}
