//! One NVMe admin command: Set Features / Error Recovery with DULBE, so a
//! read of a never-written block fails with an NVMe status (Deallocated or
//! Unwritten Logical Block). QEMU's emulated NVMe supports it, and a hole in
//! the sparse backing file counts as unwritten. Used by the hook-safety
//! mode to provoke a failed status in the middle of a chain.

use std::fs::File;
use std::os::fd::AsRawFd;

/// `struct nvme_passthru_cmd` (include/uapi/linux/nvme_ioctl.h).
#[repr(C)]
#[derive(Default)]
struct PassthruCmd {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

/// `_IO('N', 0x40)`: the namespace id of a namespace block device.
const NVME_IOCTL_ID: libc::c_ulong = 0x4e40;
/// `_IOWR('N', 0x41, struct nvme_admin_cmd)`.
const NVME_IOCTL_ADMIN_CMD: libc::c_ulong = 0xc048_4e41;
const SET_FEATURES: u8 = 0x09;
const FID_ERROR_RECOVERY: u32 = 0x05;
const DULBE: u32 = 1 << 16;

/// The namespace id of `dev` (a namespace's block or generic char device).
pub fn namespace_id(dev: &File) -> Result<u32, std::io::Error> {
    // SAFETY: NVME_IOCTL_ID takes no argument and returns the nsid.
    let nsid = unsafe { libc::ioctl(dev.as_raw_fd(), NVME_IOCTL_ID) };
    if nsid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(nsid as u32)
}

/// Turns DULBE on or off for the namespace `dev` (a block device) is.
pub fn set_dulbe(dev: &File, on: bool) -> Result<(), std::io::Error> {
    let nsid = namespace_id(dev)?;
    let mut cmd = PassthruCmd {
        opcode: SET_FEATURES,
        nsid,
        cdw10: FID_ERROR_RECOVERY,
        cdw11: if on { DULBE } else { 0 },
        ..Default::default()
    };
    // SAFETY: cmd is a live nvme_passthru_cmd with no data buffer.
    let r = unsafe { libc::ioctl(dev.as_raw_fd(), NVME_IOCTL_ADMIN_CMD, &mut cmd) };
    match r {
        0 => Ok(()),
        r if r < 0 => Err(std::io::Error::last_os_error()),
        status => Err(std::io::Error::other(format!(
            "Set Features (error recovery) failed with NVMe status {status:#x}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passthru_command_has_the_kernel_size() {
        // The size is encoded in the ioctl number: 0x48 = 72 bytes.
        assert_eq!(std::mem::size_of::<PassthruCmd>(), 72);
        assert_eq!((NVME_IOCTL_ADMIN_CMD >> 16) & 0x3fff, 72);
    }
}
