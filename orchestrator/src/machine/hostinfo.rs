//! Facts about the host for the manifest: CPU, kernel, QEMU, git state.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct HostInfo {
    pub hostname: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub kernel: String,
    pub memory_kib: u64,
    pub qemu_version: Option<String>,
    pub git_commit: Option<String>,
    pub git_dirty: Option<bool>,
    /// The canary's timings at the run's start and end (calibrate.rs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed: Option<crate::machine::calibrate::HostSpeed>,
}

pub fn collect(repo: &Path, qemu: Option<&Path>) -> HostInfo {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let uname = nix::sys::utsname::uname().ok();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    HostInfo {
        hostname: uname
            .as_ref()
            .map(|u| u.nodename().to_string_lossy().into_owned())
            .unwrap_or_default(),
        cpu_model: cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            .unwrap_or_default(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel: uname
            .as_ref()
            .map(|u| {
                format!(
                    "{} {}",
                    u.release().to_string_lossy(),
                    u.version().to_string_lossy()
                )
            })
            .unwrap_or_default(),
        memory_kib: mem_total_kib(&meminfo).unwrap_or(0),
        qemu_version: qemu.and_then(crate::machine::qemu::process::qemu_version),
        git_commit: git(repo, &["rev-parse", "HEAD"]),
        git_dirty: git(repo, &["status", "--porcelain", "--untracked-files=no"])
            .map(|s| !s.is_empty()),
        speed: None,
    }
}

/// MemTotal of a /proc/meminfo text, in KiB.
pub fn mem_total_kib(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// This host's memory (MemTotal), in bytes; `None` if /proc is unreadable.
pub fn mem_total_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    mem_total_kib(&meminfo).map(|k: u64| k.saturating_mul(1024))
}

/// Bytes in the largest binary unit, one decimal ("23.5G"), for messages
/// that compare a need with what the host has.
pub fn human_bytes(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1 << shift {
            return format!("{:.1}{unit}", bytes as f64 / (1u64 << shift) as f64);
        }
    }
    format!("{bytes}B")
}

fn git(repo: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_is_read_from_meminfo() {
        let text = "MemTotal:       24684092 kB\nMemFree:        24201256 kB\n";
        assert_eq!(mem_total_kib(text), Some(24_684_092));
        assert_eq!(mem_total_kib("MemFree: 1 kB\n"), None);
        assert!(mem_total_bytes().is_some_and(|b| b > 0));
    }

    #[test]
    fn human_bytes_keeps_one_decimal() {
        assert_eq!(human_bytes(24_684_092 * 1024), "23.5G");
        assert_eq!(human_bytes(64 << 40), "64.0T");
        assert_eq!(human_bytes(512), "512B");
    }
}
