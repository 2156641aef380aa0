//! Whether a device's queue completes by polling: what the io-uring-poll
//! engine needs. The nvme driver makes poll queues only when asked
//! (`nvme.poll_queues=N` on the kernel command line); without them an
//! IOPOLL ring fails every read with EOPNOTSUPP, so the engine checks
//! first and says what to change.

use std::path::{Path, PathBuf};

use crate::workload::WorkloadError;

/// Linux before 6.5 polls a passthrough command through its bio
/// (`nvme_ns_chr_uring_cmd_iopoll` reads `ioucmd->cookie` under RCU), which
/// another ring polling the same queue may already have completed and
/// freed: with two threads on `nvme-passthru-poll` the 6.1 guest died here
/// in `bio_poll` (general protection fault). 6.5 polls the request instead
/// ("nvme: improved uring polling"). `release` is `uname -r`.
pub fn check_passthru_poll_threads(release: &str, threads: u32) -> Result<(), WorkloadError> {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if threads > 1 && version < (6, 5) {
        return Err(WorkloadError::Other(format!(
            "nvme-passthru-poll with {threads} threads: Linux {release} polls a passthrough \
             command through a bio that another thread's ring may have completed and freed \
             (nvme_ns_chr_uring_cmd_iopoll → bio_poll; a general protection fault in this \
             testbed's 6.1 guest), fixed in Linux 6.5; run it with threads = 1 on this kernel"
        )));
    }
    Ok(())
}

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

    #[test]
    fn polled_passthrough_with_threads_is_refused_before_linux_6_5() {
        let e = check_passthru_poll_threads("6.1.192", 2).unwrap_err().to_string();
        assert!(e.contains("threads = 1") && e.contains("6.1.192"), "{e}");
        assert!(check_passthru_poll_threads("6.1.192", 1).is_ok());
        assert!(check_passthru_poll_threads("6.5.0-1-amd64", 4).is_ok());
        assert!(check_passthru_poll_threads("6.12.9", 2).is_ok());
        assert!(check_passthru_poll_threads("5.19.0", 2).is_err());
    }
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
