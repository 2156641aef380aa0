//! The host's load as the VM tests see it: a CPU hog, and other processes'
//! share of the CPU measured by the test itself, independent of the
//! testbed's own per-point measure.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `yes > /dev/null` per host CPU, killed on drop.
pub struct Hog(Vec<Child>);

impl Hog {
    pub fn start() -> Hog {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        Hog((0..n)
            .map(|_| {
                Command::new("yes")
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("yes runs")
            })
            .collect())
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The host's counters and this test process's CPU time, children it
/// reaped included (a finished `testbed run` and, through it, QEMU).
pub fn counters() -> (testbed::machine::noise::CpuTimes, u64) {
    let cpu =
        testbed::machine::noise::parse_proc_stat(&std::fs::read_to_string("/proc/stat").unwrap())
            .unwrap();
    let (_, mine) = testbed::machine::noise::parse_pid_stat(
        &std::fs::read_to_string("/proc/self/stat").unwrap(),
    )
    .unwrap();
    (cpu, mine)
}

/// Other processes' share of the host's CPU between two `counters()`, %.
pub fn others_pct(
    a: (testbed::machine::noise::CpuTimes, u64),
    b: (testbed::machine::noise::CpuTimes, u64),
) -> f64 {
    testbed::machine::noise::between(&a.0, a.1, &b.0, b.1).0
}

/// Other processes' share of the host's CPU over the next `window`, %.
pub fn others_pct_over(window: Duration) -> f64 {
    let a = counters();
    std::thread::sleep(window);
    others_pct(a, counters())
}

/// Waits (until `deadline`) for a `window` in which other users of a
/// shared machine take under 3 % of it; false if none came.
pub fn wait_for_quiet_host(deadline: Instant, window: Duration) -> bool {
    while Instant::now() < deadline {
        if others_pct_over(window) < 3.0 {
            return true;
        }
    }
    false
}
