//! NVMe reads passed through io_uring (`IORING_OP_URING_CMD` with
//! `NVME_URING_CMD_IO` on the namespace's generic char device
//! `/dev/ngXnY`, Linux 5.19 and later): the command goes to the driver as
//! it is, with no bio, no block-layer merging or scheduling and no file
//! system. The ring needs 128-byte SQEs (the command is 72 bytes) and
//! 32-byte CQEs.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use io_uring::{opcode, squeue, types};

use super::nvme_admin::namespace_id;
use crate::workload::WorkloadError;

/// `_IOWR('N', 0x80, struct nvme_uring_cmd)`; the struct is 72 bytes.
const NVME_URING_CMD_IO: u32 = 0xc048_4e80;
const NVME_CMD_READ: u8 = 0x02;

/// A namespace opened for passthrough reads.
pub struct Namespace {
    /// The generic char device (`/dev/ng0n1`).
    pub char_dev: File,
    pub char_path: String,
    pub nsid: u32,
    /// log2 of the logical block size.
    pub lba_shift: u32,
}

impl Namespace {
    /// The generic char device of the namespace whose block device is
    /// `block` (`/dev/nvme0n1` → `/dev/ng0n1`), its id and block size.
    pub fn open(block: &str) -> Result<Namespace, WorkloadError> {
        let real = std::fs::canonicalize(block).unwrap_or_else(|_| block.into());
        let name = real.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let refuse = |why: String| {
            WorkloadError::Other(format!("nvme-passthru on {block}: {why}"))
        };
        let Some(rest) = name.strip_prefix("nvme").filter(|r| !r.contains('p')) else {
            return Err(refuse(format!(
                "{name} is not an NVMe namespace (nvmeXnY; a partition has no char device)"
            )));
        };
        let char_path = format!("/dev/ng{rest}");
        let char_dev = std::fs::OpenOptions::new()
            .read(true)
            .open(&char_path)
            .map_err(|e| {
                refuse(format!(
                    "its generic char device {char_path} does not open ({e}); it needs Linux 5.19 or later"
                ))
            })?;
        let nsid = namespace_id(&char_dev)
            .map_err(|e| refuse(format!("NVME_IOCTL_ID on {char_path}: {e}")))?;
        let lbs_path = Path::new("/sys/class/block").join(name).join("queue/logical_block_size");
        let lbs: u32 = std::fs::read_to_string(&lbs_path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .filter(|v: &u32| v.is_power_of_two() && *v >= 512)
            .ok_or_else(|| refuse(format!("no logical block size in {}", lbs_path.display())))?;
        Ok(Namespace {
            char_dev,
            char_path,
            nsid,
            lba_shift: lbs.trailing_zeros(),
        })
    }

    /// The SQE of a read of `len` bytes at byte `offset` into `buf`:
    /// whole logical blocks only.
    pub fn read(&self, buf: *mut u8, offset: u64, len: usize) -> Result<squeue::Entry128, WorkloadError> {
        let block = 1u64 << self.lba_shift;
        if !offset.is_multiple_of(block) || !(len as u64).is_multiple_of(block) || len == 0 {
            return Err(WorkloadError::Other(format!(
                "nvme-passthru reads whole {block}-byte blocks: {len} bytes at {offset} are not"
            )));
        }
        let blocks = len as u64 >> self.lba_shift;
        let cmd = read_command(self.nsid, buf as u64, offset >> self.lba_shift, blocks as u32, len as u32);
        Ok(opcode::UringCmd80::new(types::Fd(self.char_dev.as_raw_fd()), NVME_URING_CMD_IO)
            .cmd(cmd)
            .build())
    }
}

/// `struct nvme_uring_cmd` (include/uapi/linux/nvme_ioctl.h) for an NVM
/// Read, in the SQE's 80 command bytes: opcode, nsid, data address and
/// length, starting LBA (cdw10/11) and block count − 1 (cdw12).
fn read_command(nsid: u32, addr: u64, slba: u64, blocks: u32, data_len: u32) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[0] = NVME_CMD_READ;
    c[4..8].copy_from_slice(&nsid.to_le_bytes());
    c[24..32].copy_from_slice(&addr.to_le_bytes());
    c[36..40].copy_from_slice(&data_len.to_le_bytes());
    c[40..44].copy_from_slice(&(slba as u32).to_le_bytes());
    c[44..48].copy_from_slice(&((slba >> 32) as u32).to_le_bytes());
    c[48..52].copy_from_slice(&(blocks - 1).to_le_bytes());
    c
}

/// A passthrough completion's result: 0, an NVMe status (> 0) or −errno.
pub fn check_completion(res: i32, char_path: &str, offset: u64) -> Result<(), WorkloadError> {
    match res {
        0 => Ok(()),
        s if s > 0 => Err(WorkloadError::Other(format!(
            "nvme-passthru read on {char_path} at {offset}: NVMe status {s:#x}"
        ))),
        e => Err(WorkloadError::io(
            format!("nvme-passthru read on {char_path} at {offset}"),
            std::io::Error::from_raw_os_error(-e),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_command_has_the_uapi_layout() {
        let c = read_command(1, 0x1122_3344_5566_7788, 0x1_0000_0002, 8, 4096);
        assert_eq!(c[0], 0x02);
        assert_eq!(u32::from_le_bytes(c[4..8].try_into().unwrap()), 1);
        assert_eq!(u64::from_le_bytes(c[24..32].try_into().unwrap()), 0x1122_3344_5566_7788);
        assert_eq!(u32::from_le_bytes(c[36..40].try_into().unwrap()), 4096);
        assert_eq!(u32::from_le_bytes(c[40..44].try_into().unwrap()), 2);
        assert_eq!(u32::from_le_bytes(c[44..48].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(c[48..52].try_into().unwrap()), 7, "0-based count");
        // The ioctl number encodes the struct's 72 bytes.
        assert_eq!((NVME_URING_CMD_IO >> 16) & 0x3fff, 72);
        assert!(c[72..].iter().all(|&b| b == 0));
    }

    #[test]
    fn completions_name_the_status_or_the_error() {
        check_completion(0, "/dev/ng0n1", 0).unwrap();
        let e = check_completion(0x4002, "/dev/ng0n1", 512).unwrap_err().to_string();
        assert!(e.contains("NVMe status 0x4002") && e.contains("at 512"), "{e}");
        let e = check_completion(-libc::EIO, "/dev/ng0n1", 0).unwrap_err().to_string();
        assert!(e.contains("/dev/ng0n1"), "{e}");
    }
}
