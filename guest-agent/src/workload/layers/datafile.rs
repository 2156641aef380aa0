//! The file the traced reads hit: on the ext4 file system the agent made on
//! the named device, filled with random bytes (a hole would be read
//! without any I/O), and the block device under it.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::workload::mount_env;
use crate::workload::WorkloadError;

/// ext4's superblock magic as statfs reports it.
const EXT4_MAGIC: i64 = 0xEF53;

fn device_error(device: &str, reason: impl Into<String>) -> WorkloadError {
    WorkloadError::Device {
        name: device.to_string(),
        reason: reason.into(),
    }
}

/// The mount point of `device` ($TESTBED_MOUNT_<NAME>, set by the agent
/// after it formatted and mounted it), checked to be ext4.
pub fn mount_of(device: &str) -> Result<PathBuf, WorkloadError> {
    let var = mount_env(device);
    let dir = std::env::var_os(&var).map(PathBuf::from).ok_or_else(|| {
        device_error(
            device,
            format!(
                "not mounted (${var} unset): give the device filesystem = \"ext4\" and a mount point"
            ),
        )
    })?;
    let fs = nix::sys::statfs::statfs(&dir)
        .map_err(|e| WorkloadError::io(format!("statfs {}", dir.display()), e.into()))?;
    let magic = fs.filesystem_type().0 as i64;
    if magic != EXT4_MAGIC {
        return Err(device_error(
            device,
            format!(
                "{} is not ext4 (file system magic {magic:#x}): the probes trace ext4's read path",
                dir.display()
            ),
        ));
    }
    Ok(dir)
}

/// Writes `bytes` of seeded random data to `layers.dat` on the device's
/// file system (unless a file of that size is there), synced to the device.
pub fn prepare(device: &str, bytes: u64, seed: u64) -> Result<PathBuf, WorkloadError> {
    let path = mount_of(device)?.join("layers.dat");
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == bytes) {
        return Ok(path);
    }
    let ctx_err = |e| WorkloadError::io(format!("write {}", path.display()), e);
    let mut f = std::fs::File::create(&path).map_err(ctx_err)?;
    write_random(&mut f, bytes, seed).map_err(ctx_err)?;
    f.sync_all().map_err(ctx_err)?;
    Ok(path)
}

/// Writes `bytes` of seeded random data at the start of the block device
/// `path` (a device the testbed created: only emulated devices reach a
/// workload unformatted), so that a file-backed namespace reads data the
/// host stores rather than holes it never reads.
pub fn fill_device(path: &Path, bytes: u64, seed: u64) -> Result<(), WorkloadError> {
    let ctx_err = |e| WorkloadError::io(format!("write {}", path.display()), e);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(ctx_err)?;
    write_random(&mut f, bytes, seed).map_err(ctx_err)?;
    f.sync_all().map_err(ctx_err)
}

fn write_random(f: &mut std::fs::File, bytes: u64, seed: u64) -> std::io::Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6c61_7965_7273);
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        rng.fill_bytes(&mut chunk[..n]);
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// The block device a file lives on, as the block tracepoints name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDev {
    /// Kernel-internal dev_t: major << 20 | minor.
    pub kernel_dev: u32,
    /// e.g. nvme0n1 (or nvme0n1p1).
    pub name: String,
}

/// The kernel's dev_t of (major, minor) (include/linux/kdev_t.h MKDEV).
pub fn kernel_dev(major: u64, minor: u64) -> u32 {
    ((major << 20) | (minor & 0xfffff)) as u32
}

/// The NVMe block device under `file` (or `file` itself, when it is a
/// block device); anything else is refused, since the driver's probes are
/// NVMe's.
pub fn nvme_dev_of(file: &Path, device: &str) -> Result<BlockDev, WorkloadError> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(file)
        .map_err(|e| WorkloadError::io(format!("stat {}", file.display()), e))?;
    let dev = if meta.file_type().is_block_device() {
        meta.rdev()
    } else {
        meta.dev()
    };
    let (major, minor) = (libc::major(dev) as u64, libc::minor(dev) as u64);
    let sys = format!("/sys/dev/block/{major}:{minor}");
    let name = std::fs::canonicalize(&sys)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .ok_or_else(|| device_error(device, format!("{sys}: no such block device")))?;
    if !name.starts_with("nvme") {
        return Err(device_error(
            device,
            format!("the file system is on {name}, not an NVMe namespace: use kind = \"nvme\""),
        ));
    }
    Ok(BlockDev {
        kernel_dev: kernel_dev(major, minor),
        name,
    })
}

/// aya finds tracepoints in tracefs: mount it where the agent (PID 1 in a
/// VM) has not.
pub fn ensure_tracefs() -> Result<(), WorkloadError> {
    let dir = Path::new("/sys/kernel/tracing");
    if dir.join("events").is_dir() {
        return Ok(());
    }
    nix::mount::mount(
        Some("tracefs"),
        dir,
        Some("tracefs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|e| WorkloadError::io("mount tracefs on /sys/kernel/tracing", e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_t_is_encoded_as_the_kernel_does() {
        // nvme0n1 is usually 259:0; a partition 259:1.
        assert_eq!(kernel_dev(259, 0), 259 << 20);
        assert_eq!(kernel_dev(259, 1), (259 << 20) | 1);
        assert_eq!(kernel_dev(8, 16), (8 << 20) | 16);
    }

    #[test]
    fn a_device_without_a_mount_is_refused_by_name() {
        let e = mount_of("no-such-dev").unwrap_err().to_string();
        assert!(e.contains("no-such-dev") && e.contains("TESTBED_MOUNT_NO_SUCH_DEV"), "{e}");
    }
}
