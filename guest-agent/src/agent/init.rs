//! PID 1 duties: fork the agent off and reap orphans, mount the pseudo
//! filesystems, load the modules the host listed (in dependency order),
//! find the control port, and power off.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::mount::{MsFlags, mount};

/// Modules to load, one path per line, in the order the host computed.
pub const MODULE_LIST: &str = "/etc/testbed/modules";

pub fn mount_pseudo_filesystems() -> Vec<String> {
    let mut problems = Vec::new();
    let mounts: [(&str, &str, &str); 6] = [
        ("proc", "/proc", "proc"),
        ("sysfs", "/sys", "sysfs"),
        ("devtmpfs", "/dev", "devtmpfs"),
        ("tmpfs", "/tmp", "tmpfs"),
        ("tmpfs", "/run", "tmpfs"),
        ("debugfs", "/sys/kernel/debug", "debugfs"),
    ];
    for (src, target, fstype) in mounts {
        let _ = std::fs::create_dir_all(target);
        if let Err(e) = mount(
            Some(src),
            target,
            Some(fstype),
            MsFlags::empty(),
            None::<&str>,
        ) && e != nix::errno::Errno::EBUSY
        {
            problems.push(format!("mount {fstype} on {target}: {e}"));
        }
    }
    problems
}

/// Loads every module in the list; "already loaded" is not an error.
pub fn load_modules(list: &Path) -> Result<Vec<String>, String> {
    let Ok(text) = std::fs::read_to_string(list) else {
        return Ok(Vec::new());
    };
    let mut loaded = Vec::new();
    for path in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let file = File::open(path).map_err(|e| format!("open module {path}: {e}"))?;
        match nix::kmod::finit_module(&file, c"", nix::kmod::ModuleInitFlags::empty()) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => loaded.push(path.to_string()),
            Err(e) => return Err(format!("load module {path}: {e}")),
        }
    }
    Ok(loaded)
}

/// Waits for the virtio-serial port named `name` and returns its /dev path.
pub fn find_port(name: &str, timeout: Duration) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(entries) = std::fs::read_dir("/sys/class/virtio-ports") {
            for e in entries.flatten() {
                let port_name = std::fs::read_to_string(e.path().join("name")).unwrap_or_default();
                if port_name.trim() == name {
                    let dev = format!("/dev/{}", e.file_name().to_string_lossy());
                    if Path::new(&dev).exists() {
                        return Ok(dev);
                    }
                }
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no virtio-serial port named {name} after {timeout:?} (is virtio_console loaded?)"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of `key=` on the kernel command line.
pub fn cmdline_value(cmdline: &str, key: &str) -> Option<String> {
    cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .map(str::to_string)
}

/// Forks the agent off PID 1: `Some(agent)` in PID 1, `None` in the agent.
pub fn fork_agent() -> nix::Result<Option<nix::unistd::Pid>> {
    // SAFETY: PID 1 has started no thread yet, so the child may do anything.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { child } => Ok(Some(child)),
        nix::unistd::ForkResult::Child => Ok(None),
    }
}

/// PID 1 after the fork: reaps every child it has (the agent's orphans)
/// until the agent ends, then ends with the agent's status. The agent
/// powers the VM off itself; if it dies instead, PID 1 ending panics the
/// kernel ("Attempted to kill init!"), as when the agent was PID 1.
pub fn reap_until(agent: nix::unistd::Pid) -> ! {
    use nix::sys::wait::{WaitStatus, waitpid};
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == agent => std::process::exit(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == agent => {
                eprintln!("testbed-agent: the agent was killed by {signal}");
                std::process::exit(128 + signal as i32)
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                eprintln!("testbed-agent: PID 1 cannot wait for its children: {e}");
                std::process::exit(1)
            }
        }
    }
}

/// Flushes disks and ends the VM. With QEMU's -no-reboot a reboot ends
/// QEMU, which works even on kernels without ACPI power-off.
pub fn power_off() -> ! {
    nix::unistd::sync();
    let _ = nix::sys::reboot::reboot(nix::sys::reboot::RebootMode::RB_AUTOBOOT);
    // Unreachable in a VM; as a plain process just exit.
    std::process::exit(0)
}

/// Brings up loopback and, if asked, the first NIC with an address, using
/// busybox `ip` (present in every testbed initramfs).
pub fn setup_network(address: Option<&str>) -> Result<Option<String>, String> {
    let ip = |args: &[&str]| -> Result<(), String> {
        let out = std::process::Command::new("/bin/ip")
            .args(args)
            .output()
            .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    ip(&["link", "set", "lo", "up"])?;
    let Some(addr) = address else {
        return Ok(None);
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !Path::new("/sys/class/net/eth0").exists() {
        if Instant::now() > deadline {
            return Err("no eth0 after 10 s (is virtio_net loaded?)".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    ip(&["addr", "add", addr, "dev", "eth0"])?;
    ip(&["link", "set", "eth0", "up"])?;
    Ok(Some(format!("eth0 {addr}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cmdline_values() {
        let c = "console=ttyS0 testbed.nonce=abc123 panic=-1 testbed.mode=probe";
        assert_eq!(cmdline_value(c, "testbed.nonce").as_deref(), Some("abc123"));
        assert_eq!(cmdline_value(c, "testbed.mode").as_deref(), Some("probe"));
        assert_eq!(cmdline_value(c, "testbed.none"), None);
    }
}
