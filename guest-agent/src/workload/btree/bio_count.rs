//! Counts the bios submitted anywhere in the guest, through the
//! `block:block_bio_queue` tracepoint as a perf counter on every CPU: what
//! tells a read that went through the block layer (read(), io_uring on the
//! block device) from one that bypassed it (NVMe passthrough, whose
//! commands go to the driver as requests without a bio submission).
//! System-wide rather than per thread, so that bios a lookup thread leaves
//! to an SQPOLL poller or an io-wq worker are counted too.

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};

use crate::workload::WorkloadError;

const TRACEPOINT_ID: &str = "/sys/kernel/tracing/events/block/block_bio_queue/id";
const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

/// `struct perf_event_attr` up to `config1` (PERF_ATTR_SIZE_VER0, 64
/// bytes): all a counting tracepoint event needs. Flags are bit fields;
/// none set means enabled from the start, no inheritance.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

/// One `block_bio_queue` counter per online CPU.
pub struct BioCounter {
    counters: Vec<File>,
}

impl BioCounter {
    pub fn open() -> Result<BioCounter, WorkloadError> {
        crate::workload::layers::datafile::ensure_tracefs()?;
        let id: u64 = std::fs::read_to_string(TRACEPOINT_ID)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| {
                WorkloadError::Other(format!(
                    "count_bios: this kernel has no block:block_bio_queue tracepoint ({TRACEPOINT_ID} \
                     missing; it needs CONFIG_TRACEPOINTS and CONFIG_EVENT_TRACING)"
                ))
            })?;
        let attr = PerfEventAttr {
            kind: PERF_TYPE_TRACEPOINT,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: id,
            ..PerfEventAttr::default()
        };
        let cpus = super::runner::online_cpus();
        let mut counters = Vec::with_capacity(cpus);
        for cpu in 0..cpus {
            // SAFETY: `attr` is a valid perf_event_attr of the size it
            // declares; the kernel only reads it.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    &attr as *const PerfEventAttr,
                    -1 as libc::pid_t,
                    cpu as libc::c_int,
                    -1 as libc::c_int,
                    PERF_FLAG_FD_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(WorkloadError::Other(format!(
                    "count_bios: perf_event_open of block:block_bio_queue on CPU {cpu}: {} \
                     (the kernel needs CONFIG_PERF_EVENTS)",
                    std::io::Error::last_os_error()
                )));
            }
            // SAFETY: a new descriptor that nothing else owns.
            counters.push(File::from(unsafe { OwnedFd::from_raw_fd(fd as i32) }));
        }
        Ok(BioCounter { counters })
    }

    /// Bios submitted so far, over all CPUs.
    pub fn total(&self) -> Result<u64, WorkloadError> {
        let mut sum = 0u64;
        for mut c in &self.counters {
            let mut b = [0u8; 8];
            c.read_exact(&mut b)
                .map_err(|e| WorkloadError::io("read the block_bio_queue counter", e))?;
            sum += u64::from_ne_bytes(b);
        }
        Ok(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attribute_is_perf_attr_size_ver0() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 64);
    }

}
