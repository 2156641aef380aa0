//! After a storage-hook job: did the kernel complain? The hooks take the
//! NVMe submission-queue lock from interrupt context, so a debug kernel's
//! lockdep report is a real failure. Reads /proc/lockdep_stats (lockdep
//! turns `debug_locks` off at its first report) and scans the kernel log
//! for report headers; the host checks the console log as well.

use crate::workload::Summary;

/// Headers of kernel reports (lockdep, BUG, WARN, RCU stalls).
pub const SPLAT_MARKERS: &[&str] = &[
    "possible circular locking dependency",
    "inconsistent lock state",
    "possible irq lock inversion",
    "possible recursive locking",
    "suspicious RCU usage",
    "BUG: ",
    "WARNING: ",
    "rcu_sched self-detected stall",
    "INFO: task ",
];

const SYSLOG_ACTION_READ_ALL: libc::c_int = 3;
const LOG_BYTES: usize = 1 << 20;
const KEEP_LINES: usize = 5;

/// The report lines among `log`'s lines.
pub fn splat_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| SPLAT_MARKERS.iter().any(|m| l.contains(m)))
        .collect()
}

/// `debug_locks` from /proc/lockdep_stats; None without lockdep.
pub fn debug_locks(stats: &str) -> Option<u64> {
    stats
        .lines()
        .find_map(|l| l.trim().strip_prefix("debug_locks:"))
        .and_then(|v| v.trim().parse().ok())
}

fn read_kernel_log() -> Result<String, std::io::Error> {
    let mut buf = vec![0u8; LOG_BYTES];
    // SAFETY: the kernel writes at most buf.len() bytes into buf.
    let n = unsafe {
        libc::klogctl(
            SYSLOG_ACTION_READ_ALL,
            buf.as_mut_ptr().cast(),
            buf.len() as libc::c_int,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Adds `kernel.lockdep`, `kernel.debug_locks`, `kernel.splats` and the
/// first report lines to the summary.
pub fn check(summary: &mut Summary) {
    match std::fs::read_to_string("/proc/lockdep_stats") {
        Ok(stats) => {
            summary.insert("kernel.lockdep".into(), "on".into());
            if let Some(d) = debug_locks(&stats) {
                summary.insert("kernel.debug_locks".into(), d.into());
            }
        }
        Err(_) => {
            summary.insert("kernel.lockdep".into(), "off".into());
        }
    }
    match read_kernel_log() {
        Ok(log) => {
            let lines = splat_lines(&log);
            summary.insert("kernel.splats".into(), lines.len().into());
            let first: Vec<&str> = lines.into_iter().take(KEEP_LINES).collect();
            summary.insert("kernel.splat_lines".into(), first.into());
        }
        Err(e) => {
            summary.insert("kernel.log_error".into(), e.to_string().into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_lockdep_reports_and_debug_locks() {
        let log = "<6>[ 1.0] nvme nvme0: 2/0/0 default/read/poll queues\n\
                   <4>[ 2.0] WARNING: possible circular locking dependency detected\n\
                   <4>[ 2.1] ================================\n\
                   <4>[ 3.0] WARNING: inconsistent lock state\n";
        let lines = splat_lines(log);
        assert_eq!(lines.len(), 2);
        assert!(lines[0].contains("circular"));
        let stats =
            " lock-classes:      1000 [max: 8191]\n debug_locks:                             0\n";
        assert_eq!(debug_locks(stats), Some(0));
        assert_eq!(debug_locks("nothing"), None);
    }
}
