//! What a point cost the host, in BenchExec's manner: CPU time (user and
//! system) and peak resident memory of the run's processes — QEMU, or the
//! host agent and the helpers it starts — over the point's interval. A
//! figure can then say whether a point was CPU-starved, and a runaway
//! helper shows in its point's record before the host swaps.
//!
//! CPU: under cgroup v2 containment, from the run's cgroups' `cpu.stat`
//! (everything that ran in them, processes that exited during the point
//! included, and cgroups removed during it: `cgroup::cpu_usec` keeps a
//! removed group's last count); otherwise from /proc/PID/stat of the run's processes (their
//! own time and that of the children they reaped).
//! Memory: each run process's peak resident set (VmHWM), reset as the
//! point starts (`/proc/PID/clear_refs`, "5") and added up as it ends: for
//! QEMU, one process, that is its whole footprint; a helper that ended
//! before its point did is not counted, which the record's `source` says.
//! Where a group has a memory cgroup (`[limits] memory`, enforced by the
//! kernel), also the peak the kernel charged it over the point
//! (`memory.peak`, v1's `memory.max_usage_in_bytes`): every process of the
//! group, those that ended during the point included, and its page cache:
//! the quantity the limit is enforced on.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::host::kernel_limits::{MemoryGroup, PeakFromNow, live_memory_groups};

/// One point's cost to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostCost {
    pub cpu_user_s: f64,
    pub cpu_system_s: f64,
    /// Added peaks of the processes alive at the point's end; `None` when
    /// none could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_mib: Option<f64>,
    /// The peak memory the kernel charged the run's memory cgroups over
    /// the point (page cache included), added up; `None` without a memory
    /// cgroup (no `[limits] memory`, or no writable controller) or where a
    /// group's peak cannot be started over at the point's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_charged_mib: Option<f64>,
    /// CPU time of QEMU's vCPU threads ("CPU n/KVM", "CPU n/TCG"), user and
    /// system: the guest's work as the host sees it — under KVM the guest's
    /// own cycles, under TCG its emulation as well. Part of the CPU above;
    /// `None` when no vCPU thread ran (host executor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu_s: Option<f64>,
    /// Where the numbers come from ("cgroup v2 cpu.stat; VmHWM of 1
    /// process").
    pub source: String,
}

/// CPU counters of the run as a point starts (µs, user and system): from
/// its cgroups where it has v2 ones, and from /proc; and its memory
/// cgroups' peaks, started over.
#[derive(Debug)]
pub struct Start {
    cgroup: Option<(u64, u64)>,
    procs: (u64, u64),
    vcpu_us: Option<u64>,
    memory: Vec<(MemoryGroup, Option<PeakFromNow>)>,
}

/// Resets the run's processes' peak memory and reads their CPU time: the
/// point starts now.
pub fn start() -> Start {
    let procs = run_processes();
    for p in &procs {
        // Not every process may be ours to reset (a setuid helper): its
        // peak then dates from its start, which is no smaller.
        let _ = std::fs::write(format!("/proc/{}/clear_refs", p.pid), "5");
    }
    Start {
        cgroup: crate::host::cgroup::cpu_usec(),
        procs: proc_cpu(&procs),
        vcpu_us: vcpu_usec(&procs),
        memory: live_memory_groups()
            .into_iter()
            .map(|g| {
                let from_now = g.peak_from_now();
                (g, from_now)
            })
            .collect(),
    }
}

/// The memory cgroups' peaks over the point, added up (MiB), and where
/// they were read; `None` if a live group's peak cannot be told for the
/// point (it was there at the start and could not be started over).
fn charged_peak(start: &Start) -> Option<(f64, String)> {
    let groups = live_memory_groups();
    if groups.is_empty() {
        return None;
    }
    let mut bytes = 0u64;
    let mut sources = BTreeSet::new();
    for g in &groups {
        let peak = match start.memory.iter().find(|(s, _)| s == g) {
            Some((_, Some(from_start))) => from_start.read(),
            Some((_, None)) => None,
            // Made during the point: its whole life is in it.
            None => g.lifetime_peak(),
        };
        bytes += peak?;
        sources.insert(g.source());
    }
    let sources: Vec<String> = sources.into_iter().collect();
    Some((
        round3(bytes as f64 / (1u64 << 20) as f64),
        format!("{} of {} group(s)", sources.join(", "), groups.len()),
    ))
}

/// The cost since `start`.
pub fn end(start: &Start) -> HostCost {
    let procs = run_processes();
    let peaks: Vec<u64> = procs.iter().filter_map(|p| vm_hwm_kib(p.pid)).collect();
    // Both ends from one source: cgroups only if both could be read.
    let ((user0, system0), (user1, system1), cpu) =
        match (start.cgroup, crate::host::cgroup::cpu_usec()) {
            (Some(a), Some(b)) => (a, b, "cgroup v2 cpu.stat"),
            _ => (
                start.procs,
                proc_cpu(&procs),
                "/proc/PID/stat of the run's processes",
            ),
        };
    let charged = charged_peak(start);
    let charged_source = charged
        .as_ref()
        .map_or(String::new(), |(_, from)| format!("; charged: {from}"));
    HostCost {
        cpu_user_s: seconds(user1.saturating_sub(user0)),
        cpu_system_s: seconds(system1.saturating_sub(system0)),
        peak_rss_mib: (!peaks.is_empty())
            .then(|| round3(peaks.iter().sum::<u64>() as f64 / 1024.0)),
        peak_charged_mib: charged.map(|(mib, _)| mib),
        vcpu_s: start
            .vcpu_us
            .zip(vcpu_usec(&procs))
            .map(|(a, b)| seconds(b.saturating_sub(a))),
        source: format!(
            "{cpu}; VmHWM of {} process(es){charged_source}",
            peaks.len()
        ),
    }
}

fn seconds(us: u64) -> f64 {
    round3(us as f64 / 1e6)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A run process and its CPU time in µs (own and reaped children's).
struct Proc {
    pid: u32,
    user_us: u64,
    system_us: u64,
}

/// The processes of the run's live process groups and cgroups, not this
/// testbed process itself.
fn run_processes() -> Vec<Proc> {
    let me = std::process::id();
    let groups: BTreeSet<u32> = crate::machine::qemu::process::live_leaders()
        .into_iter()
        .collect();
    let contained: BTreeSet<u32> = crate::host::cgroup::live_members().into_iter().collect();
    let tick_us = 1e6 / clock_ticks_per_second();
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        // A process may end between listing and reading: skipped.
        let Ok(text) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        if let Some((pgrp, user, system)) = parse_stat(&text)
            && (groups.contains(&pgrp) || contained.contains(&pid))
        {
            out.push(Proc {
                pid,
                user_us: (user as f64 * tick_us) as u64,
                system_us: (system as f64 * tick_us) as u64,
            });
        }
    }
    out
}

/// From /proc/PID/stat: (process group, utime + cutime, stime + cstime)
/// in clock ticks.
pub fn parse_stat(text: &str) -> Option<(u32, u64, u64)> {
    let f = stat_fields(text)?;
    Some((f.pgrp, f.utime + f.cutime, f.stime + f.cstime))
}

/// From /proc/PID/task/TID/stat: the thread's own (utime, stime) in clock
/// ticks. Its cutime and cstime are the whole process's reaped children's,
/// not the thread's: left out.
pub fn parse_thread_stat(text: &str) -> Option<(u64, u64)> {
    let f = stat_fields(text)?;
    Some((f.utime, f.stime))
}

struct StatFields {
    pgrp: u32,
    utime: u64,
    stime: u64,
    cutime: u64,
    cstime: u64,
}

fn stat_fields(text: &str) -> Option<StatFields> {
    // The command name may hold spaces and parentheses: count from the last ')'.
    let rest: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    // rest[0] is field 3 (state): pgrp is field 5, utime..cstime 14..17.
    let field = |i: usize| -> Option<u64> { Some(rest.get(i)?.parse::<i64>().ok()?.max(0) as u64) };
    Some(StatFields {
        pgrp: rest.get(2)?.parse().ok()?,
        utime: field(11)?,
        stime: field(12)?,
        cutime: field(13)?,
        cstime: field(14)?,
    })
}

/// QEMU names its vCPU threads "CPU <n>/KVM" or "CPU <n>/TCG".
pub fn is_vcpu_thread(comm: &str) -> bool {
    let comm = comm.trim_end();
    comm.starts_with("CPU ") && (comm.ends_with("/KVM") || comm.ends_with("/TCG"))
}

/// The CPU time (µs, user + system) of the processes' vCPU threads so far;
/// `None` when they have none.
fn vcpu_usec(procs: &[Proc]) -> Option<u64> {
    let tick_us = 1e6 / clock_ticks_per_second();
    let mut total = None;
    for p in procs {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", p.pid)) else {
            continue;
        };
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if !is_vcpu_thread(&comm) {
                continue;
            }
            if let Some((user, system)) = std::fs::read_to_string(t.path().join("stat"))
                .ok()
                .as_deref()
                .and_then(parse_thread_stat)
            {
                *total.get_or_insert(0) += ((user + system) as f64 * tick_us) as u64;
            }
        }
    }
    total
}

/// The processes' CPU time added up (µs, user and system).
fn proc_cpu(procs: &[Proc]) -> (u64, u64) {
    (
        procs.iter().map(|p| p.user_us).sum(),
        procs.iter().map(|p| p.system_us).sum(),
    )
}

/// A process's peak resident set since its start or its last reset (KiB).
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_hwm(&status)
}

pub fn parse_vm_hwm(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_group_and_times_past_a_command_name_with_parentheses() {
        let text = "4242 (qemu (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    150 30 7 3 20 0 5 0 1000 2000000 500";
        // utime 150 + cutime 7, stime 30 + cstime 3.
        assert_eq!(parse_stat(text), Some((4242, 157, 33)));
    }

    #[test]
    fn a_threads_time_leaves_out_the_process_childrens() {
        let text = "4243 (CPU 0/TCG) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    150 30 7 3 20 0 5 0 1000 2000000 500";
        assert_eq!(parse_thread_stat(text), Some((150, 30)));
    }

    fn limited(memory: Option<u64>, processes: Option<u64>) -> crate::host::kernel_limits::Wanted {
        use crate::host::kernel_limits::{Limit, Wanted};
        Wanted {
            memory: memory.map(|m| Limit {
                value: m << 20,
                named: format!("limits.memory = \"{m}M\""),
            }),
            processes: processes.map(|n| Limit {
                value: n,
                named: format!("limits.processes = {n}"),
            }),
            address_space_fallback: true,
        }
    }

    #[test]
    #[ignore = "needs a writable memory controller (cgroup v2 with memory delegated, or cgroup v1's memory hierarchy; root): ./x test runs it where the host has one, else names it skipped"]
    fn a_group_over_its_memory_limit_is_stopped_by_the_kernel_and_says_so() {
        use std::process::Command;
        // 256 MiB written under a 32 MiB limit.
        let mut cmd = Command::new("python3");
        cmd.args(["-c", "b = b'x' * (256 << 20)\nimport time\ntime.sleep(30)"]);
        let mut child = crate::machine::qemu::process::GroupProcess::spawn_command_limited(
            &mut cmd,
            &limited(Some(32), None),
        )
        .unwrap();
        let described = child.limits_described();
        let status = child
            .wait_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|| panic!("not stopped in 20 s: {described:?}"));
        assert!(!status.success(), "{status}");
        let hit = child
            .limit_hit()
            .unwrap_or_else(|| panic!("no kernel limit acted ({status}): {described:?}"));
        assert!(
            hit.starts_with(
                "over its memory limit: limits.memory = \"32M\", enforced by the kernel (cgroup v"
            ) && hit.contains("OOM killer ended"),
            "{hit}"
        );
    }

    #[test]
    #[ignore = "needs a writable memory controller (cgroup v2 with memory delegated, or cgroup v1's memory hierarchy; root): ./x test runs it where the host has one, else names it skipped"]
    fn the_peak_charged_to_a_memory_cgroup_counts_what_ended_and_starts_over_each_point() {
        use std::process::Command;
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let done = dir.path().join("done");
        // 96 MiB touched by a process that ends; the group lives on in sh.
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "python3 -c 'b = bytearray(96 << 20)'; touch \"$1\"; sleep 30",
            "sh",
        ])
        .arg(&done);
        let first = start();
        let mut child = crate::machine::qemu::process::GroupProcess::spawn_command_limited(
            &mut cmd,
            &limited(Some(512), None),
        )
        .unwrap();
        let described = child.limits_described();
        let finished = crate::host::wait::poll(
            crate::host::wait::Until::after(Duration::from_secs(20)),
            Duration::from_millis(20),
            || done.exists().then_some(()),
        );
        assert!(
            matches!(finished, crate::host::wait::Waited::Done(())),
            "python never finished: {described:?}"
        );
        let point = end(&first);
        let charged = point
            .peak_charged_mib
            .unwrap_or_else(|| panic!("no charged peak: {point:?} {described:?}"));
        assert!(charged >= 96.0, "the ended process's 96 MiB: {point:?}");
        assert!(
            point.peak_rss_mib.unwrap_or(0.0) < 96.0,
            "VmHWM cannot see an ended process: {point:?}"
        );
        assert!(
            point.source.contains("charged: cgroup v"),
            "{}",
            point.source
        );
        // The next point starts its peak over: nothing large ran in it.
        let second_start = start();
        std::thread::sleep(Duration::from_millis(200));
        let second = end(&second_start);
        child.kill();
        let again = second.peak_charged_mib.unwrap_or(f64::MAX);
        assert!(again < 48.0, "the next point starts over: {second:?}");
    }

    #[test]
    #[ignore = "needs a writable pids controller (cgroup v2 with pids delegated, or cgroup v1's pids hierarchy; root): ./x test runs it where the host has one, else names it skipped"]
    fn a_group_over_its_process_limit_cannot_fork_past_it() {
        use std::process::Command;
        // 64 sleepers under a limit of 32 processes.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "for i in $(seq 64); do sleep 30 & done; wait"]);
        let mut child = crate::machine::qemu::process::GroupProcess::spawn_command_limited(
            &mut cmd,
            &limited(None, Some(32)),
        )
        .unwrap();
        let described = child.limits_described();
        let hit = crate::host::wait::poll(
            crate::host::wait::Until::after(std::time::Duration::from_secs(20)),
            std::time::Duration::from_millis(50),
            || child.limit_hit(),
        );
        child.kill();
        let crate::host::wait::Waited::Done(hit) = hit else {
            panic!("no fork refused in 20 s: {described:?}");
        };
        assert!(
            hit.starts_with(
                "over its process limit: limits.processes = 32, enforced by the kernel (cgroup v"
            ) && hit.contains("refused"),
            "{hit}"
        );
    }

    #[test]
    fn qemu_vcpu_threads_are_told_by_name() {
        assert!(is_vcpu_thread("CPU 0/KVM\n"));
        assert!(is_vcpu_thread("CPU 11/TCG"));
        assert!(!is_vcpu_thread("qemu-system-x86"));
        assert!(!is_vcpu_thread("CPU 0/something"));
    }

    #[test]
    fn reads_the_peak_resident_set() {
        let status = "Name:\tqemu\nVmPeak:\t 900 kB\nVmHWM:\t  524288 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(524288));
        assert_eq!(parse_vm_hwm("Name:\tkthread\n"), None);
    }

    #[test]
    fn a_busy_child_in_a_group_of_ours_is_counted_and_its_peak_read() {
        use std::process::Command;
        // A child that allocates 64 MiB, touches it, and spins for 0.3 s.
        let mut cmd = Command::new("python3");
        cmd.args([
            "-c",
            "import time\nb = bytearray(64 << 20)\nt = time.time()\nwhile time.time() - t < 0.3: pass\ntime.sleep(5)",
        ]);
        let start = start();
        let mut child =
            crate::machine::qemu::process::GroupProcess::spawn_command(&mut cmd).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(900));
        let cost = end(&start);
        child.kill();
        assert!(
            cost.cpu_user_s + cost.cpu_system_s >= 0.2,
            "the child's spin counts: {cost:?}"
        );
        let peak = cost.peak_rss_mib.unwrap_or(0.0);
        assert!(peak >= 64.0, "the child's 64 MiB count: {cost:?}");
    }
}
