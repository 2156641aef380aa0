//! The host's own noise around a point: how much of the host's CPU went to
//! processes that are not the run's, over the point's interval.
//!
//! Measure: from /proc/stat, the busy CPU time of the whole host (user,
//! nice, system, irq, softirq) minus the run's own (this testbed process
//! and every process in a group or cgroup it started — QEMU, the host
//! agent and their helpers — from /proc/PID/stat, children's reaped time
//! included),
//! plus steal time (a hypervisor gave our CPUs to someone else), as a
//! share of all CPU time that passed. Why this and not the others:
//! - it covers the whole interval at the cost of two reads of /proc; a
//!   calibration loop would take CPU from the guest it watches (under TCG
//!   every core is busy) and sees contention only while it spins;
//! - the load average counts our own vCPU threads and lags a minute, so it
//!   is recorded for context, never decides;
//! - other processes get CPU only by taking it from the run, so their
//!   share is the interference itself, whatever the run's own load.
//!
//! A point is noisy when that share is above the limit (spec
//! `experiment.noisy_above_pct`, default [`DEFAULT_NOISY_ABOVE_PCT`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Idle hosts here measure 0–2 %; a hog of one busy thread per core while
/// the guest keeps every core busy takes about half. 10 % is far from both.
pub const DEFAULT_NOISY_ABOVE_PCT: f64 = 10.0;

/// The aggregate `cpu` line of /proc/stat, in clock ticks (USER_HZ).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// user + nice + system + irq + softirq (guest time is inside user).
    pub busy: u64,
    pub steal: u64,
    /// Every tick that passed on every CPU (guest time not counted twice).
    pub total: u64,
}

/// The `cpu ` line of /proc/stat's text.
pub fn parse_proc_stat(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    if f.len() < 8 {
        return None;
    }
    Some(CpuTimes {
        busy: f[0] + f[1] + f[2] + f[5] + f[6],
        steal: f[7],
        total: f[..8].iter().sum(),
    })
}

/// From /proc/PID/stat: (process group, utime + stime + cutime + cstime).
pub fn parse_pid_stat(text: &str) -> Option<(u32, u64)> {
    let (pgrp, user, system) = crate::machine::hostcost::parse_stat(text)?;
    Some((pgrp, user + system))
}

/// The host's counters at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    pub cpu: CpuTimes,
    /// CPU time of the run's own processes.
    pub own: u64,
    at: std::time::Instant,
}

impl Snapshot {
    /// Reads /proc now; `None` where /proc is not readable.
    pub fn take() -> Option<Snapshot> {
        let cpu = parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let me = std::process::id();
        let groups: BTreeSet<u32> = crate::machine::qemu::process::live_leaders()
            .into_iter()
            .collect();
        // What left its group (setsid) is still the run's, by its cgroup.
        let contained: BTreeSet<u32> = crate::host::cgroup::live_members().into_iter().collect();
        let mut own = 0;
        for e in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            // A process may end between listing and reading: skipped.
            let Ok(text) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            if let Some((pgrp, ticks)) = parse_pid_stat(&text)
                && (pid == me || groups.contains(&pgrp) || contained.contains(&pid))
            {
                own += ticks;
            }
        }
        Some(Snapshot {
            cpu,
            own,
            at: std::time::Instant::now(),
        })
    }
}

/// The host's noise over one point, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostNoise {
    /// Other processes' CPU time plus steal, % of the host's CPU time.
    pub others_pct: f64,
    /// Steal alone (inside `others_pct`).
    pub steal_pct: f64,
    /// The run's own processes, % of the host's CPU time.
    pub own_pct: f64,
    /// 1-minute load average at the point's end (context only).
    #[serde(default)]
    pub load1: Option<f64>,
    pub interval_s: f64,
    /// The limit it was judged by, and whether it was above.
    pub noisy_above_pct: f64,
    pub noisy: bool,
}

/// The noise between two snapshots; pure arithmetic on the counters.
pub fn between(a: &CpuTimes, own_a: u64, b: &CpuTimes, own_b: u64) -> (f64, f64, f64) {
    let total = b.total.saturating_sub(a.total);
    if total == 0 {
        return (0.0, 0.0, 0.0);
    }
    let busy = b.busy.saturating_sub(a.busy);
    let own = own_b.saturating_sub(own_a).min(busy);
    let steal = b.steal.saturating_sub(a.steal);
    let pct = |t: u64| 100.0 * t as f64 / total as f64;
    (pct(busy - own + steal), pct(steal), pct(own))
}

impl HostNoise {
    pub fn measure(start: &Snapshot, end: &Snapshot, noisy_above_pct: f64) -> HostNoise {
        let (others_pct, steal_pct, own_pct) = between(&start.cpu, start.own, &end.cpu, end.own);
        HostNoise {
            others_pct: round2(others_pct),
            steal_pct: round2(steal_pct),
            own_pct: round2(own_pct),
            load1: load1(),
            interval_s: round2(end.at.duration_since(start.at).as_secs_f64()),
            noisy_above_pct,
            noisy: others_pct > noisy_above_pct,
        }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn load1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// "median 2.1 % of CPU, 0 of 30 points noisy (limit 10 %)" over the
/// points that carry a measurement; `None` when none does.
pub fn describe<'a>(noises: impl Iterator<Item = &'a HostNoise>) -> Option<String> {
    let all: Vec<&HostNoise> = noises.collect();
    if all.is_empty() {
        return None;
    }
    let mut shares: Vec<f64> = all.iter().map(|n| n.others_pct).collect();
    shares.sort_by(f64::total_cmp);
    let mid = shares.len() / 2;
    let median = if shares.len().is_multiple_of(2) {
        (shares[mid - 1] + shares[mid]) / 2.0
    } else {
        shares[mid]
    };
    let noisy = all.iter().filter(|n| n.noisy).count();
    let mut limits: Vec<f64> = all.iter().map(|n| n.noisy_above_pct).collect();
    limits.sort_by(f64::total_cmp);
    limits.dedup();
    let limit = limits
        .iter()
        .map(|l| format!("{l} %"))
        .collect::<Vec<_>>()
        .join("/");
    Some(format!(
        "median {median:.1} % of CPU to other processes, max {:.1} %; {noisy} of {} points noisy (above {limit})",
        shares[shares.len() - 1],
        all.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_aggregate_cpu_line() {
        let text =
            "cpu  1104515 60 237674 2505406 11841 0 2940 2178 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let t = parse_proc_stat(text).unwrap();
        assert_eq!(t.busy, 1104515 + 60 + 237674 + 2940);
        assert_eq!(t.steal, 2178);
        assert_eq!(
            t.total,
            1104515 + 60 + 237674 + 2505406 + 11841 + 2940 + 2178
        );
        assert_eq!(parse_proc_stat("cpu0 1 2 3\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 2 x 4 5 6 7 8\n"), None);
    }

    #[test]
    fn parses_a_process_stat_with_a_name_holding_parentheses() {
        let text =
            "4242 (qemu (x) y) S 1 4240 4240 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 5 0 99 0 0";
        assert_eq!(parse_pid_stat(text), Some((4240, 250 + 50 + 7 + 3)));
        assert_eq!(parse_pid_stat("12 (a) S 1"), None);
    }

    #[test]
    fn others_are_busy_time_minus_ours_plus_steal_over_all_time() {
        let a = CpuTimes {
            busy: 1000,
            steal: 10,
            total: 5000,
        };
        // 200 ticks passed: 150 busy, of which 100 ours; 10 stolen.
        let b = CpuTimes {
            busy: 1150,
            steal: 20,
            total: 5200,
        };
        let (others, steal, own) = between(&a, 40, &b, 140);
        assert_eq!((others, steal, own), (30.0, 5.0, 50.0));
        // Our count can run ahead of the host's by rounding: never negative.
        let (others, _, own) = between(&a, 0, &b, 500);
        assert_eq!((others, own), (5.0, 75.0));
        assert_eq!(between(&a, 0, &a, 0), (0.0, 0.0, 0.0));
    }

    #[test]
    fn describes_the_median_and_the_noisy_count() {
        let n = |pct: f64| HostNoise {
            others_pct: pct,
            steal_pct: 0.0,
            own_pct: 90.0,
            load1: Some(2.0),
            interval_s: 1.0,
            noisy_above_pct: 10.0,
            noisy: pct > 10.0,
        };
        let all = [n(1.0), n(3.0), n(40.0), n(2.0)];
        assert_eq!(
            describe(all.iter()).unwrap(),
            "median 2.5 % of CPU to other processes, max 40.0 %; 1 of 4 points noisy (above 10 %)"
        );
        assert_eq!(describe([].iter()), None);
    }
}
