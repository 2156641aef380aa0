//! CPU time: per thread and per process from getrusage, and for the whole
//! guest from /proc/stat (which also sees interrupts and kernel threads such
//! as an SQPOLL poller).

use nix::sys::resource::{UsageWho, getrusage};
use nix::sys::time::TimeVal;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    pub user_s: f64,
    pub sys_s: f64,
}

impl CpuTimes {
    pub fn since(self, earlier: CpuTimes) -> CpuTimes {
        CpuTimes {
            user_s: self.user_s - earlier.user_s,
            sys_s: self.sys_s - earlier.sys_s,
        }
    }

    pub fn add(&mut self, other: CpuTimes) {
        self.user_s += other.user_s;
        self.sys_s += other.sys_s;
    }
}

fn secs(t: TimeVal) -> f64 {
    t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6
}

fn usage(who: UsageWho) -> CpuTimes {
    // A failing getrusage only loses a metric; never the run.
    getrusage(who).map_or(CpuTimes::default(), |u| CpuTimes {
        user_s: secs(u.user_time()),
        sys_s: secs(u.system_time()),
    })
}

/// CPU time of the calling thread so far.
pub fn thread_cpu() -> CpuTimes {
    usage(UsageWho::RUSAGE_THREAD)
}

/// CPU time of the whole process so far.
pub fn process_cpu() -> CpuTimes {
    usage(UsageWho::RUSAGE_SELF)
}

/// CPU time so far of another thread of this process, such as the kernel
/// thread that polls an SQPOLL ring's submission queue (`iou-sqp-PID`,
/// one of our threads since Linux 5.12): read through the thread's CPU
/// clock, in nanoseconds, as `pthread_getcpuclockid` builds it. It does
/// not split user from system time; a kernel poller's time is all system.
pub fn other_thread_cpu(tid: i32) -> Option<CpuTimes> {
    // MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED): (~tid << 3) | 4 | 2.
    let clock = ((!tid) << 3) | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let r = unsafe { libc::clock_gettime(clock as libc::clockid_t, &mut ts) };
    (r == 0).then(|| CpuTimes {
        user_s: 0.0,
        sys_s: ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9,
    })
}

/// Aggregate guest CPU counters from the `cpu` line of /proc/stat, in ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GuestCpu {
    pub busy_ticks: u64,
    pub total_ticks: u64,
}

impl GuestCpu {
    pub fn read() -> Option<GuestCpu> {
        parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// (busy seconds, total seconds summed over CPUs) between two readings.
    pub fn seconds_since(self, earlier: GuestCpu) -> (f64, f64) {
        // SAFETY: sysconf has no memory-safety preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        (
            self.busy_ticks.saturating_sub(earlier.busy_ticks) as f64 / hz,
            self.total_ticks.saturating_sub(earlier.total_ticks) as f64 / hz,
        )
    }
}

/// Busy = everything but idle and iowait; guest/guest_nice are already in user.
pub fn parse_proc_stat(text: &str) -> Option<GuestCpu> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    if f.len() < 5 {
        return None;
    }
    let total: u64 = f.iter().sum();
    let idle = f[3] + f[4];
    Some(GuestCpu {
        busy_ticks: total - idle,
        total_ticks: total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_busy_excludes_idle_and_iowait() {
        let s = "cpu  100 5 50 1000 20 3 2 0 0 0\ncpu0 1 2 3 4 5 6 7 8\n";
        let g = parse_proc_stat(s).unwrap();
        assert_eq!(
            g,
            GuestCpu {
                busy_ticks: 160,
                total_ticks: 1180
            }
        );
        assert!(parse_proc_stat("intr 1 2").is_none());
    }

    #[test]
    fn another_threads_cpu_clock_reads_its_work() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            let mut x = 0u64;
            for i in 0..50_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            done_rx.recv().unwrap();
            x
        });
        let tid = rx.recv().unwrap();
        let first = other_thread_cpu(tid).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let later = other_thread_cpu(tid).unwrap();
        done_tx.send(()).unwrap();
        worker.join().unwrap();
        assert!(later.sys_s > 0.0 && later.sys_s >= first.sys_s, "{first:?} {later:?}");
        // Not a thread of ours (pid 1 is never one of a test's threads).
        assert!(other_thread_cpu(1).is_none());
    }

    #[test]
    fn thread_cpu_grows_with_work() {
        let before = thread_cpu();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let spent = thread_cpu().since(before);
        assert!(spent.user_s + spent.sys_s > 0.0, "{spent:?} {x}");
    }
}
