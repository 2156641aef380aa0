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
        memory_kib: meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0),
        qemu_version: qemu.and_then(crate::qemu::process::qemu_version),
        git_commit: git(repo, &["rev-parse", "HEAD"]),
        git_dirty: git(repo, &["status", "--porcelain", "--untracked-files=no"])
            .map(|s| !s.is_empty()),
    }
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
