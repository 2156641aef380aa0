//! Whether a device's queue completes by polling: what the io-uring-poll
//! engine needs. The nvme driver makes poll queues only when asked
//! (`nvme.poll_queues=N` on the kernel command line); without them an
//! IOPOLL ring fails every read with EOPNOTSUPP, so the engine checks
//! first and says what to change.

use std::path::{Path, PathBuf};

use crate::workload::WorkloadError;

/// Checks that `device`'s queue polls (`/sys/class/block/NAME/queue/io_poll`
/// is 1; a partition's queue is its disk's).
pub fn check_polled_queue(device: &str) -> Result<(), WorkloadError> {
    check_in(Path::new("/sys/class/block"), Path::new(device))
}

fn check_in(class_block: &Path, device: &Path) -> Result<(), WorkloadError> {
    let real = std::fs::canonicalize(device).unwrap_or_else(|_| device.to_path_buf());
    let Some(name) = real.file_name().and_then(|n| n.to_str()) else {
        return Err(WorkloadError::Other(format!(
            "io-uring-poll: {} is not a block device path",
            device.display()
        )));
    };
    let dir = class_block.join(name);
    let candidates: [PathBuf; 2] = [
        dir.join("queue/io_poll"),
        dir.join("../queue/io_poll"),
    ];
    let Some((file, value)) = candidates
        .iter()
        .find_map(|f| Some((f, std::fs::read_to_string(f).ok()?)))
    else {
        return Err(WorkloadError::Other(format!(
            "io-uring-poll polls a block device's queue, and {} has none ({} is missing)",
            device.display(),
            candidates[0].display()
        )));
    };
    match value.trim() {
        "1" => Ok(()),
        v => Err(WorkloadError::Other(format!(
            "io-uring-poll needs a queue that polls, and {}'s does not ({} is {v}): the nvme driver makes poll queues when the guest boots with `[vm] cmdline = [\"nvme.poll_queues=1\"]`",
            device.display(),
            file.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sysfs(t: &Path, disk: &str, poll: &str) {
        let q = t.join(disk).join("queue");
        std::fs::create_dir_all(&q).unwrap();
        std::fs::write(q.join("io_poll"), format!("{poll}\n")).unwrap();
    }

    #[test]
    fn a_queue_without_polling_is_refused_with_the_option_that_adds_it() {
        let t = tempfile::tempdir().unwrap();
        sysfs(t.path(), "nvme0n1", "1");
        sysfs(t.path(), "nvme1n1", "0");
        // A partition's queue is its disk's.
        std::fs::create_dir_all(t.path().join("nvme0n1/nvme0n1p1")).unwrap();
        std::os::unix::fs::symlink(
            t.path().join("nvme0n1/nvme0n1p1"),
            t.path().join("nvme0n1p1"),
        )
        .unwrap();

        check_in(t.path(), Path::new("/dev/nvme0n1")).unwrap();
        check_in(t.path(), Path::new("/dev/nvme0n1p1")).unwrap();
        let e = check_in(t.path(), Path::new("/dev/nvme1n1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/dev/nvme1n1") && e.contains("is 0"), "{e}");
        assert!(e.contains("nvme.poll_queues=1"), "{e}");
        let e = check_in(t.path(), Path::new("/dev/vda"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("has none"), "{e}");
    }
}
