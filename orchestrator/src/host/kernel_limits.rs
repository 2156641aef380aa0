//! Limits the kernel enforces on one group's processes (QEMU, or the host
//! agent and its helpers). `[limits] memory` becomes the memory
//! controller's hard limit and `[limits] processes` the pids controller's:
//! on cgroup v2 where the controller is delegated to the testbed's
//! cgroups, else in cgroup v1's own hierarchy for that controller (a hybrid
//! host mounts them there, and an empty v2), else — memory only, and not
//! for QEMU — `RLIMIT_AS` on the started process. The kernel ends a point over such a
//! limit at once (its OOM killer, a refused fork); polling (`hostcost`)
//! would see it half a second later, after the host's memory was taken.
//! `hit` reads the controller's event counters afterwards, so the point's
//! record names the limit that ended it.

use std::ffi::CString;
use std::io::{Read, Seek, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::host::wait::{Until, poll};

/// The directory under a v1 controller's mount that holds the testbed's
/// cgroups (as `cgroup::TOP` does for containment).
const TOP: &str = "testbed";

/// The memory cgroups of the live groups, whose peaks `hostcost` reads.
static MEMORY_GROUPS: Mutex<Vec<MemoryGroup>> = Mutex::new(Vec::new());

/// A group's memory cgroup: its peak is what the kernel charged it (page
/// cache included), the quantity `[limits] memory` is enforced on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryGroup {
    pub dir: PathBuf,
    v2: bool,
}

/// A peak counted from a point's start: v1's counter reset (for every
/// reader), or v2's `memory.peak` reset for this open file only (Linux
/// 6.12 and later).
#[derive(Debug)]
pub enum PeakFromNow {
    Reset(PathBuf),
    OwnFile(std::fs::File),
}

impl PeakFromNow {
    /// The peak in bytes since the reset.
    pub fn read(&self) -> Option<u64> {
        let text = match self {
            PeakFromNow::Reset(path) => std::fs::read_to_string(path).ok()?,
            PeakFromNow::OwnFile(f) => {
                let mut f = f;
                f.rewind().ok()?;
                let mut text = String::new();
                f.read_to_string(&mut text).ok()?;
                text
            }
        };
        text.trim().parse().ok()
    }
}

impl MemoryGroup {
    fn peak_file(&self) -> PathBuf {
        self.dir.join(if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        })
    }

    /// Where its peak is read: "cgroup v1 memory.max_usage_in_bytes".
    pub fn source(&self) -> String {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        format!("cgroup {} {file}", if self.v2 { "v2" } else { "v1" })
    }

    /// The peak over the cgroup's life, in bytes (v2 kernels before 5.19
    /// have no memory.peak).
    pub fn lifetime_peak(&self) -> Option<u64> {
        std::fs::read_to_string(self.peak_file())
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Starts its peak over from the current usage; `None` where the
    /// kernel cannot (v2 before 6.12).
    pub fn peak_from_now(&self) -> Option<PeakFromNow> {
        let path = self.peak_file();
        if self.v2 {
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .ok()?;
            f.write_all(b"reset\n").ok()?;
            Some(PeakFromNow::OwnFile(f))
        } else {
            std::fs::write(&path, "0").ok()?;
            Some(PeakFromNow::Reset(path))
        }
    }

    /// The processes in it now.
    pub fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

/// The memory cgroups of the groups alive now.
pub fn live_memory_groups() -> Vec<MemoryGroup> {
    MEMORY_GROUPS.lock().map(|g| g.clone()).unwrap_or_default()
}

/// One limit as the spec wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub value: u64,
    /// `limits.memory = "64M"`: how the record names it.
    pub named: String,
}

/// What a group may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    /// Bytes of memory (resident and page cache charged to the group).
    pub memory: Option<Limit>,
    /// Processes and threads alive at once.
    pub processes: Option<Limit>,
    /// Whether memory may fall back to `RLIMIT_AS` where no memory
    /// controller is writable: not for QEMU, whose reserved address space
    /// (TCG's translation buffer, guest RAM mapped whole) is far above
    /// what it uses.
    pub address_space_fallback: bool,
}

impl Wanted {
    pub fn any(&self) -> bool {
        self.memory.is_some() || self.processes.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Controller {
    Memory,
    Pids,
}

impl Controller {
    fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
        }
    }
}

/// Where a limit is enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
enum How {
    V2(PathBuf),
    V1(PathBuf),
    RlimitAs,
    /// Not enforced by the kernel, and why (the poll still watches memory).
    NotEnforced(String),
}

#[derive(Debug)]
struct Applied {
    controller: Controller,
    limit: Limit,
    how: How,
}

/// The limits set up for one group, before its process starts.
#[derive(Debug, Default)]
pub struct Enforced {
    applied: Vec<Applied>,
    /// v1 cgroups made here: joined between fork and exec, removed at the end.
    made: Vec<PathBuf>,
}

impl Enforced {
    /// Sets `wanted` up: `v2_group` is the group's own cgroup v2 directory
    /// (`<mount>/testbed/<owner>/g<n>`) when containment is cgroup v2;
    /// `owner` and `group` name the v1 cgroups the same way.
    pub fn set_up(wanted: &Wanted, v2_group: Option<&Path>, owner: &str, group: &str) -> Enforced {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut out = Enforced::default();
        for (controller, limit) in [
            (Controller::Memory, &wanted.memory),
            (Controller::Pids, &wanted.processes),
        ] {
            let Some(limit) = limit else { continue };
            let mut tried = Vec::new();
            let how = match v2_group.map(|g| set_v2(controller, limit.value, g)) {
                Some(Ok(dir)) => How::V2(dir),
                other => {
                    if let Some(Err(e)) = other {
                        tried.push(e);
                    }
                    match v1_mount(&mountinfo, controller)
                        .ok_or_else(|| format!("no cgroup v1 {} hierarchy", controller.name()))
                        .and_then(|m| set_v1(controller, limit.value, &m, owner, group))
                    {
                        Ok(dir) => {
                            out.made.push(dir.clone());
                            How::V1(dir)
                        }
                        Err(e) => {
                            tried.push(e);
                            match controller {
                                Controller::Memory if wanted.address_space_fallback => {
                                    How::RlimitAs
                                }
                                _ => How::NotEnforced(tried.join("; ")),
                            }
                        }
                    }
                }
            };
            if controller == Controller::Memory
                && let How::V1(dir) | How::V2(dir) = &how
                && let Ok(mut groups) = MEMORY_GROUPS.lock()
            {
                groups.push(MemoryGroup {
                    dir: dir.clone(),
                    v2: matches!(how, How::V2(_)),
                });
            }
            out.applied.push(Applied {
                controller,
                limit: limit.clone(),
                how,
            });
        }
        out
    }

    /// Makes `cmd`'s process join the v1 cgroups and take the rlimits
    /// before it runs anything, so all it starts is born limited.
    pub fn join_before_exec(&self, cmd: &mut Command) -> std::io::Result<()> {
        let procs: Vec<CString> = self
            .made
            .iter()
            .map(|d| crate::host::cgroup::procs_file(d))
            .collect::<Result<_, _>>()?;
        let address_space = self
            .applied
            .iter()
            .find(|a| a.how == How::RlimitAs)
            .map(|a| a.limit.value);
        // SAFETY: open, write, close and setrlimit are async-signal-safe;
        // the closure reads only what was made before the fork.
        unsafe {
            cmd.pre_exec(move || {
                for p in &procs {
                    crate::host::cgroup::join_in_child(p)?;
                }
                if let Some(bytes) = address_space {
                    let lim = libc::rlimit {
                        rlim_cur: bytes,
                        rlim_max: bytes,
                    };
                    if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// One line per limit: where the kernel enforces it, or why not.
    pub fn describe(&self) -> Vec<String> {
        self.applied
            .iter()
            .map(|a| format!("{}: {}", a.limit.named, how_text(a)))
            .collect()
    }

    /// The first kernel limit that acted on the group, named as the spec
    /// writes it, with what the kernel did; `None` if none did (or it
    /// cannot tell, as with `RLIMIT_AS`).
    pub fn hit(&self) -> Option<String> {
        self.applied.iter().find_map(|a| {
            let (dir, file, key) = match (&a.how, a.controller) {
                (How::V2(d), Controller::Memory) => (d, "memory.events", "oom_kill"),
                (How::V1(d), Controller::Memory) => (d, "memory.oom_control", "oom_kill"),
                (How::V2(d) | How::V1(d), Controller::Pids) => (d, "pids.events", "max"),
                _ => return None,
            };
            let n = counter(&std::fs::read_to_string(dir.join(file)).ok()?, key)?;
            (n > 0).then(|| {
                let what = match a.controller {
                    Controller::Memory => format!("its OOM killer ended {n} process(es)"),
                    Controller::Pids => format!("it refused {n} fork(s)"),
                };
                let over = match a.controller {
                    Controller::Memory => "memory",
                    Controller::Pids => "process",
                };
                format!(
                    "over its {over} limit: {}, enforced by the kernel ({}): {what}",
                    a.limit.named,
                    how_text(a)
                )
            })
        })
    }

    /// Removes the v1 cgroups (once their processes are gone) and their
    /// owner's directory when it is empty.
    pub fn remove(&self) {
        if let Ok(mut groups) = MEMORY_GROUPS.lock() {
            groups.retain(|g| {
                !self
                    .applied
                    .iter()
                    .any(|a| matches!(&a.how, How::V1(d) | How::V2(d) if *d == g.dir))
            });
        }
        for dir in &self.made {
            let _ = poll(
                Until::after(Duration::from_secs(2)),
                Duration::from_millis(10),
                || std::fs::remove_dir(dir).ok(),
            );
            if let Some(owner) = dir.parent() {
                let _ = std::fs::remove_dir(owner);
            }
        }
    }
}

fn how_text(a: &Applied) -> String {
    let file = |v2: bool| match (a.controller, v2) {
        (Controller::Memory, true) => "memory.max",
        (Controller::Memory, false) => "memory.limit_in_bytes",
        (Controller::Pids, _) => "pids.max",
    };
    match &a.how {
        How::V2(d) => format!("cgroup v2 {} of {}", file(true), d.display()),
        How::V1(d) => format!("cgroup v1 {} of {}", file(false), d.display()),
        How::RlimitAs => "RLIMIT_AS of the started process (no memory controller writable)".into(),
        How::NotEnforced(why) => format!("not enforced by the kernel ({why})"),
    }
}

/// `key N` in a flat keyed file (memory.events, memory.oom_control).
pub fn counter(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// Enables `controller` for the testbed's v2 cgroups and sets the limit
/// in `group`.
fn set_v2(controller: Controller, value: u64, group: &Path) -> Result<PathBuf, String> {
    let name = controller.name();
    // The top and owner directories hold no process, so their children may
    // have controllers; the root's own delegation is the host's business.
    for dir in group.ancestors().skip(1).take(2) {
        let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{name}"));
    }
    let file = group.join(format!("{name}.max"));
    if !file.exists() {
        return Err(format!(
            "cgroup v2 has no {name} controller for {}",
            group.display()
        ));
    }
    std::fs::write(&file, value.to_string())
        .map_err(|e| format!("write {}: {e}", file.display()))?;
    if controller == Controller::Memory {
        // Swap would let a point's memory past the limit unseen.
        let _ = std::fs::write(group.join("memory.swap.max"), "0");
    }
    Ok(group.to_path_buf())
}

/// Makes `<mount>/testbed/<owner>/<group>` and sets the limit there.
fn set_v1(
    controller: Controller,
    value: u64,
    mount: &Path,
    owner: &str,
    group: &str,
) -> Result<PathBuf, String> {
    let dir = mount.join(TOP).join(owner).join(group);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let files: &[&str] = match controller {
        Controller::Memory => &["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"],
        Controller::Pids => &["pids.max"],
    };
    for (i, f) in files.iter().enumerate() {
        let path = dir.join(f);
        // memsw (memory + swap) exists only with swap accounting on.
        if i > 0 && !path.exists() {
            continue;
        }
        if let Err(e) = std::fs::write(&path, value.to_string()) {
            let _ = std::fs::remove_dir(&dir);
            return Err(format!("write {}: {e}", path.display()));
        }
    }
    Ok(dir)
}

/// The mount point of cgroup v1's hierarchy that has `controller`.
fn v1_mount(mountinfo: &str, controller: Controller) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let dash = fields.iter().position(|f| *f == "-")?;
        let (mount, fstype, options) =
            (fields.get(4)?, fields.get(dash + 1)?, fields.get(dash + 3)?);
        (*fstype == "cgroup" && options.split(',').any(|o| o == controller.name()))
            .then(|| PathBuf::from(mount.replace("\\040", " ")))
    })
}

/// Removes what testbed processes that are gone left under the v1
/// controllers' hierarchies (empty once `cgroup::sweep` killed their
/// members), sparing the owners `alive` says are running.
pub fn sweep(alive: impl Fn(&str) -> bool) {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for controller in [Controller::Memory, Controller::Pids] {
        let Some(mount) = v1_mount(&mountinfo, controller) else {
            continue;
        };
        let Ok(owners) = std::fs::read_dir(mount.join(TOP)) else {
            continue;
        };
        for owner in owners.flatten() {
            if alive(&owner.file_name().to_string_lossy()) {
                continue;
            }
            for group in std::fs::read_dir(owner.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let _ = std::fs::remove_dir(group.path());
            }
            let _ = std::fs::remove_dir(owner.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernels_event_counters() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(counter(v1, "oom_kill"), Some(2));
        let v2 = "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(counter(v2, "oom_kill"), Some(1));
        assert_eq!(counter(v2, "max"), Some(5));
        assert_eq!(counter("max 0\n", "oom_kill"), None);
    }

    #[test]
    fn finds_each_controllers_v1_mount() {
        let mountinfo = "\
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            v1_mount(mountinfo, Controller::Memory),
            Some(PathBuf::from("/sys/fs/cgroup/memory"))
        );
        assert_eq!(
            v1_mount(mountinfo, Controller::Pids),
            Some(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        assert_eq!(v1_mount("", Controller::Pids), None);
    }
}
