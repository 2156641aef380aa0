//! The storage hooks re-issue reads from the kernel without protection
//! information, so on a namespace formatted with PI every hop would fail
//! with EIO. Refused before the first lookup instead, naming the device
//! and its integrity format.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::workload::WorkloadError;

/// The block integrity format of `dev` ("none" when it has none), read
/// under `sys` (`/sys`; a test passes its own); None for a non-device.
fn integrity_format(dev: &Path, sys: &Path) -> Option<String> {
    let meta = std::fs::metadata(dev).ok()?;
    if !std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
        return None;
    }
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let node = sys.join(format!("dev/block/{major}:{minor}"));
    // A partition's integrity is its disk's (one directory up).
    [node.join("integrity/format"), node.join("../integrity/format")]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
}

/// Refuses a namespace with protection information for the hook engines.
pub fn refuse_protection_information(dev: &str, sys: &Path) -> Result<(), WorkloadError> {
    match integrity_format(Path::new(dev), sys) {
        Some(f) if f != "none" && !f.is_empty() => Err(WorkloadError::Other(format!(
            "{dev}: the namespace carries protection information (integrity format {f}); \
             the storage hooks re-issue reads without it and every hop would fail with EIO: \
             format it without PI (nvme format --pi=0) or use the read/io-uring engines"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sysfs tree whose loop0-like device has `format`.
    fn sys_with(dev: &Path, format: Option<&str>) -> tempfile::TempDir {
        let sys = tempfile::tempdir().unwrap();
        let rdev = std::fs::metadata(dev).unwrap().rdev();
        let node = sys
            .path()
            .join(format!("dev/block/{}:{}", libc::major(rdev), libc::minor(rdev)));
        std::fs::create_dir_all(node.join("integrity")).unwrap();
        if let Some(f) = format {
            std::fs::write(node.join("integrity/format"), format!("{f}\n")).unwrap();
        }
        sys
    }

    #[test]
    fn a_namespace_with_protection_information_is_refused_by_name() {
        // Any block device node will do: only its numbers are read.
        let Some(dev) = ["/dev/loop0", "/dev/vda", "/dev/sda", "/dev/nvme0n1"]
            .into_iter()
            .map(Path::new)
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type()))
            })
        else {
            panic!("no block device node to test with");
        };
        let d = dev.to_str().unwrap();
        let pi = sys_with(dev, Some("T10-DIF-TYPE1-CRC"));
        let e = refuse_protection_information(d, pi.path()).unwrap_err().to_string();
        assert!(e.contains("T10-DIF-TYPE1-CRC") && e.contains(d), "{e}");
        let none = sys_with(dev, Some("none"));
        assert!(refuse_protection_information(d, none.path()).is_ok());
        let absent = sys_with(dev, None);
        assert!(refuse_protection_information(d, absent.path()).is_ok());
        // A regular file (a file on ext4) has no integrity to check.
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(refuse_protection_information(f.path().to_str().unwrap(), pi.path()).is_ok());
    }
}
