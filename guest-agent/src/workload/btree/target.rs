//! What every lookup engine reads: the device (or tree file) opened for
//! O_DIRECT, its path kept for error messages, and buffers O_DIRECT accepts.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};

use crate::workload::WorkloadError;
use crate::workload::randread::{AlignedBuf, open_direct};

/// O_DIRECT wants buffers aligned to the logical block size; a page covers
/// every device the testbed uses.
const DIRECT_ALIGN: usize = 4096;

pub struct Target {
    pub file: File,
    pub path: String,
}

impl Target {
    pub fn open(path: &str) -> Result<Self, WorkloadError> {
        Ok(Target {
            file: open_direct(path)?,
            path: path.to_string(),
        })
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// The error of a read that returned fewer bytes than it asked for.
    pub fn short_read(&self, offset: u64, got: usize, want: usize) -> WorkloadError {
        WorkloadError::io(
            format!("read {} at {offset}", self.path),
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("short read: {got} of {want} bytes"),
            ),
        )
    }
}

/// A read buffer of `len` bytes that O_DIRECT accepts.
pub fn direct_buf(len: usize) -> Result<AlignedBuf, WorkloadError> {
    AlignedBuf::new(len, DIRECT_ALIGN)
}
