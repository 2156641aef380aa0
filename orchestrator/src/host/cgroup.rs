//! Containment by cgroup. Every process the testbed starts as a group
//! (QEMU, the agent in host mode, kernel and image builds, the local Slurm
//! daemons) also runs in a cgroup of its own, so a descendant that leaves
//! the process group (`setsid`, as PostgreSQL's backends do) is still found
//! and killed with it. In order of preference:
//!
//! - cgroup v2: the child joins `<v2 mount>/testbed/<owner>/g<n>` between
//!   fork and exec, and `cgroup.kill` (Linux 5.14) kills every member at
//!   once. No controller is needed, so a hybrid host's empty v2 mount
//!   serves too.
//! - cgroup v1's freezer, the same layout under its hierarchy: the cgroup
//!   is frozen, every member SIGKILLed, then thawed, so nothing forks past
//!   the kill.
//! - process groups alone, where neither hierarchy is writable (not root,
//!   a container without cgroupfs): what escapes its group then survives.
//!
//! `<owner>` is `<pid>-<start ticks>` of the testbed process, so the next
//! start tells a dead owner's cgroups from a live one's and kills what a
//! SIGKILLed testbed left (`sweep`). `TESTBED_CONTAINMENT=cgroup-v2 |
//! cgroup-v1 | process-group` asks for one; the manifest records which
//! was used.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::host::procfs;
use crate::host::wait::{Until, poll};

/// The variable that asks for one kind of containment.
pub const CONTAINMENT_ENV: &str = "TESTBED_CONTAINMENT";

/// The directory under a hierarchy's mount that holds every owner's cgroups.
const TOP: &str = "testbed";

/// How long a kill waits for the members to be gone.
const KILL_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    V2,
    V1Freezer,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::V2 => "cgroup v2",
            Kind::V1Freezer => "cgroup v1 freezer",
        }
    }
}

/// How this process contains what it starts, decided once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    Cgroup {
        kind: Kind,
        /// `<mount>/testbed/<pid>-<start ticks>`: this process's cgroups.
        owner_dir: PathBuf,
    },
    ProcessGroup {
        /// Why no cgroup: what was tried and how it failed.
        why: String,
    },
}

impl Containment {
    /// One line for the manifest, `testbed doctor` and the logs.
    pub fn describe(&self) -> String {
        match self {
            Containment::Cgroup { kind, owner_dir } => {
                format!("{} ({})", kind.name(), owner_dir.display())
            }
            Containment::ProcessGroup { why } => format!("process groups only ({why})"),
        }
    }
}

/// This process's containment: chosen at the first call.
pub fn current() -> &'static Containment {
    static CURRENT: OnceLock<Containment> = OnceLock::new();
    CURRENT.get_or_init(|| {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let wanted = std::env::var(CONTAINMENT_ENV).unwrap_or_default();
        decide(&wanted, &mounts(&mountinfo), std::process::id())
    })
}

/// `<pid>-<start ticks>` of this process: the name its cgroups live under
/// in every hierarchy (`sweep` tells a dead owner's by it).
pub fn owner_name() -> String {
    let pid = std::process::id();
    format!("{pid}-{}", procfs::start_ticks(pid).unwrap_or(0))
}

/// Whether the owner a directory is named after (`<pid>-<start ticks>`)
/// is this process or still running.
pub fn owner_alive(name: &str) -> bool {
    name.split_once('-')
        .and_then(|(p, t)| Some((p.parse::<u32>().ok()?, t.parse::<u64>().ok()?)))
        .is_none_or(|(pid, ticks)| pid == std::process::id() || procfs::alive(pid, ticks))
}

/// The cgroup hierarchies mounted here: (kind, mount point).
pub fn mounts(mountinfo: &str) -> Vec<(Kind, PathBuf)> {
    let mut found = Vec::new();
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(mount), Some(fstype), Some(options)) =
            (fields.get(4), fields.get(dash + 1), fields.get(dash + 3))
        else {
            continue;
        };
        let kind = match *fstype {
            "cgroup2" => Kind::V2,
            "cgroup" if options.split(',').any(|o| o == "freezer") => Kind::V1Freezer,
            _ => continue,
        };
        // mountinfo escapes spaces and the like as \040.
        let mount = mount.replace("\\040", " ");
        if !found.iter().any(|(k, _)| *k == kind) {
            found.push((kind, PathBuf::from(mount)));
        }
    }
    found
}

/// Picks the containment: the one `wanted` names (`""`: the best that
/// works), set up for owner `pid`.
fn decide(wanted: &str, mounts: &[(Kind, PathBuf)], pid: u32) -> Containment {
    let order: &[Kind] = match wanted {
        "cgroup-v2" => &[Kind::V2],
        "cgroup-v1" => &[Kind::V1Freezer],
        "process-group" => {
            return Containment::ProcessGroup {
                why: format!("{CONTAINMENT_ENV}=process-group"),
            };
        }
        "" => &[Kind::V2, Kind::V1Freezer],
        other => {
            eprintln!(
                "[testbed] warning: {CONTAINMENT_ENV}={other:?} is not cgroup-v2, cgroup-v1 or process-group; using the best this host has"
            );
            &[Kind::V2, Kind::V1Freezer]
        }
    };
    let mut tried = Vec::new();
    for kind in order {
        let Some((_, mount)) = mounts.iter().find(|(k, _)| k == kind) else {
            tried.push(format!("no {} mounted", kind.name()));
            continue;
        };
        match set_up(*kind, mount, pid) {
            Ok(owner_dir) => {
                return Containment::Cgroup {
                    kind: *kind,
                    owner_dir,
                };
            }
            Err(e) => tried.push(format!("{}: {e}", kind.name())),
        }
    }
    Containment::ProcessGroup {
        why: tried.join("; "),
    }
}

/// Creates `<mount>/testbed/<pid>-<ticks>` and checks it can kill.
fn set_up(kind: Kind, mount: &Path, pid: u32) -> Result<PathBuf, String> {
    let top = mount.join(TOP);
    std::fs::create_dir_all(&top).map_err(|e| format!("create {}: {e}", top.display()))?;
    let ticks = procfs::start_ticks(pid).ok_or("no /proc entry for this process")?;
    let owner_dir = top.join(format!("{pid}-{ticks}"));
    match std::fs::create_dir(&owner_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("create {}: {e}", owner_dir.display())),
    }
    let needed = match kind {
        Kind::V2 => "cgroup.kill",
        Kind::V1Freezer => "freezer.state",
    };
    if !owner_dir.join(needed).exists() {
        let _ = std::fs::remove_dir(&owner_dir);
        return Err(format!(
            "{} has no {needed}{}",
            owner_dir.display(),
            if kind == Kind::V2 {
                " (Linux before 5.14)"
            } else {
                ""
            }
        ));
    }
    Ok(owner_dir)
}

/// The cgroups this process made and has not removed, for `kill_all`.
static LIVE: Mutex<Vec<(Kind, PathBuf)>> = Mutex::new(Vec::new());

/// One process's cgroup (the leader of a process group and everything it
/// starts, wherever they go).
#[derive(Debug)]
pub struct Cgroup {
    kind: Kind,
    dir: PathBuf,
}

impl Cgroup {
    /// A new, empty cgroup under this process's, or `None` under
    /// process-group containment.
    pub fn create() -> std::io::Result<Option<Cgroup>> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let Containment::Cgroup { kind, owner_dir } = current() else {
            return Ok(None);
        };
        let dir = owner_dir.join(format!("g{}", NEXT.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir(&dir).map_err(|e| {
            std::io::Error::new(e.kind(), format!("create cgroup {}: {e}", dir.display()))
        })?;
        if let Ok(mut live) = LIVE.lock() {
            live.push((*kind, dir.clone()));
        }
        Ok(Some(Cgroup { kind: *kind, dir }))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory when it is a cgroup v2 one (where controllers such as
    /// memory may be enabled: `kernel_limits`).
    pub fn v2_dir(&self) -> Option<&Path> {
        (self.kind == Kind::V2).then_some(self.dir.as_path())
    }

    /// Makes `cmd`'s process join this cgroup before it runs anything, so
    /// every process it starts is born inside.
    pub fn join_before_exec(&self, cmd: &mut Command) -> std::io::Result<()> {
        let procs = procs_file(&self.dir)?;
        // SAFETY: `join_in_child` is async-signal-safe; the closure only
        // reads `procs`, made before the fork.
        unsafe {
            cmd.pre_exec(move || join_in_child(&procs));
        }
        Ok(())
    }

    /// The pids in the cgroup now.
    pub fn members(&self) -> Vec<u32> {
        members(&self.dir)
    }

    /// Kills every process in the cgroup and waits (up to 5 s) until none
    /// is left; says how many it killed.
    pub fn kill(&self) -> usize {
        kill(self.kind, &self.dir)
    }

    /// Kills what is left and removes the cgroup, its CPU time kept in
    /// `cpu_usec`'s count of removed cgroups first.
    pub fn remove(&self) {
        self.kill();
        // Under LIVE's lock, which `cpu_usec` reads under: the group is
        // counted once, live or removed, never both or neither.
        let mut live = LIVE.lock().ok();
        if self.kind == Kind::V2
            && let Some((user, system)) = std::fs::read_to_string(self.dir.join("cpu.stat"))
                .ok()
                .and_then(|t| parse_cpu_stat(&t))
            && let Ok(mut removed) = REMOVED_USEC.lock()
        {
            removed.0 += user;
            removed.1 += system;
        }
        let _ = std::fs::remove_dir(&self.dir);
        if let Some(live) = live.as_mut() {
            live.retain(|(_, d)| d != &self.dir);
        }
    }
}

/// `<dir>/cgroup.procs` as a C string, made before a fork for
/// `join_in_child`.
pub fn procs_file(dir: &Path) -> std::io::Result<CString> {
    CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

/// Moves the calling process into the cgroup whose `cgroup.procs` this is.
/// Between fork and exec: open, write and close only (async-signal-safe).
pub fn join_in_child(procs: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: plain open/write/close on a path made before the fork.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // "0": the writing process itself.
        let wrote = libc::write(fd, b"0".as_ptr().cast(), 1);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if wrote != 1 {
            return Err(err);
        }
    }
    Ok(())
}

fn members(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn write(path: &Path, text: &str) -> bool {
    std::fs::write(path, text).is_ok()
}

fn kill(kind: Kind, dir: &Path) -> usize {
    let before = members(dir);
    if before.is_empty() {
        return 0;
    }
    match kind {
        Kind::V2 => {
            if !write(&dir.join("cgroup.kill"), "1") {
                signal_each(dir);
            }
        }
        Kind::V1Freezer => {
            // Frozen, nothing can fork between the listing and the kill.
            let state = dir.join("freezer.state");
            if write(&state, "FROZEN") {
                let _ = poll(
                    Until::after(Duration::from_secs(2)),
                    Duration::from_millis(10),
                    || {
                        std::fs::read_to_string(&state)
                            .ok()
                            .filter(|s| s.trim() == "FROZEN")
                    },
                );
            }
            signal_each(dir);
            write(&state, "THAWED");
        }
    }
    // SIGKILLed members still need a moment to leave; a repeat catches a
    // fork that raced an unfrozen kill.
    let _ = poll(Until::after(KILL_WAIT), Duration::from_millis(10), || {
        if members(dir).is_empty() {
            return Some(());
        }
        signal_each(dir);
        None
    });
    before.len()
}

fn signal_each(dir: &Path) {
    for pid in members(dir) {
        // SAFETY: plain kill(2) on a member of a cgroup this testbed made.
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
    }
}

/// The processes in this process's live cgroups: what it started, those
/// that left their process group included.
pub fn live_members() -> Vec<u32> {
    let live: Vec<(Kind, PathBuf)> = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
    live.iter().flat_map(|(_, dir)| members(dir)).collect()
}

/// CPU time (user, system; µs) the cgroups this process removed had used:
/// counted on, so that a difference of `cpu_usec` over a point keeps the
/// time of a group that ended during it.
static REMOVED_USEC: Mutex<(u64, u64)> = Mutex::new((0, 0));

/// CPU time (user, system; µs) of everything that ran in this process's
/// cgroups, live and removed, exited processes included, from cgroup v2's
/// `cpu.stat` (present with no controller enabled); `None` when the run is
/// not in cgroup v2 or a cgroup's file cannot be read. It only grows, so
/// the difference over a point is what the point's processes used.
pub fn cpu_usec() -> Option<(u64, u64)> {
    let Containment::Cgroup { kind: Kind::V2, .. } = current() else {
        return None;
    };
    // Under the lock `remove` holds while it moves a group's time from
    // live to removed.
    let live = LIVE.lock().ok()?;
    let mut total = *REMOVED_USEC.lock().ok()?;
    for (_, dir) in live.iter() {
        let (user, system) = parse_cpu_stat(&std::fs::read_to_string(dir.join("cpu.stat")).ok()?)?;
        total = (total.0 + user, total.1 + system);
    }
    Some(total)
}

/// `user_usec` and `system_usec` of a `cpu.stat` text.
pub fn parse_cpu_stat(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
    };
    Some((field("user_usec ")?, field("system_usec ")?))
}

/// Kills every cgroup this process still has (from a signal-handling
/// thread, or before exiting).
pub fn kill_all() {
    let live: Vec<(Kind, PathBuf)> = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
    for (kind, dir) in live {
        kill(kind, &dir);
    }
}

/// Kills and removes what testbed processes that are gone left in their
/// cgroups, in every hierarchy mounted here, and says what it killed.
/// Called as a run starts.
pub fn sweep() -> Vec<String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut said = Vec::new();
    for (kind, mount) in mounts(&mountinfo) {
        said.extend(sweep_top(kind, &mount.join(TOP), std::process::id()));
    }
    // The memory and pids cgroups of a hybrid host's v1 hierarchies, empty
    // now that their members were killed above.
    crate::host::kernel_limits::sweep(owner_alive);
    said
}

/// `sweep` in one hierarchy's `top` directory, sparing owner `me`.
fn sweep_top(kind: Kind, top: &Path, me: u32) -> Vec<String> {
    let mut said = Vec::new();
    let Ok(owners) = std::fs::read_dir(top) else {
        return said;
    };
    for owner in owners.flatten() {
        let name = owner.file_name().to_string_lossy().into_owned();
        let Some((pid, ticks)) = name
            .split_once('-')
            .and_then(|(p, t)| Some((p.parse::<u32>().ok()?, t.parse::<u64>().ok()?)))
        else {
            continue;
        };
        if pid == me || procfs::alive(pid, ticks) {
            continue;
        }
        let Ok(groups) = std::fs::read_dir(owner.path()) else {
            continue;
        };
        for group in groups.flatten().filter(|g| g.path().is_dir()) {
            let names: Vec<String> = members(&group.path())
                .into_iter()
                .map(|p| format!("{p} {}", procfs::command_name(p)))
                .collect();
            let killed = kill(kind, &group.path());
            if killed > 0 {
                said.push(format!(
                    "killed {killed} process(es) left in {} by testbed pid {pid}, which is gone: {}",
                    group.path().display(),
                    names.join(", ")
                ));
            }
            let _ = std::fs::remove_dir(group.path());
        }
        let _ = std::fs::remove_dir(owner.path());
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::wait::Waited;

    const MOUNTINFO: &str = "\
25 30 0:23 / /sys rw,nosuid shared:7 - sysfs sysfs rw
34 25 0:29 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
35 34 0:30 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate
40 34 0:35 / /sys/fs/cgroup/freezer rw,nosuid shared:16 - cgroup cgroup rw,freezer
41 34 0:36 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
";

    #[test]
    fn reads_user_and_system_time_from_cpu_stat() {
        let text = "usage_usec 5200\nuser_usec 4000\nsystem_usec 1200\nnr_periods 0\n";
        assert_eq!(parse_cpu_stat(text), Some((4000, 1200)));
        assert_eq!(parse_cpu_stat("usage_usec 5\n"), None);
    }

    #[test]
    fn finds_the_v2_mount_and_the_v1_freezer_in_mountinfo() {
        assert_eq!(
            mounts(MOUNTINFO),
            [
                (Kind::V2, PathBuf::from("/sys/fs/cgroup/unified")),
                (Kind::V1Freezer, PathBuf::from("/sys/fs/cgroup/freezer")),
            ]
        );
        assert!(mounts("36 35 98:0 / /mnt rw - ext4 /dev/vda rw\n").is_empty());
    }

    #[test]
    fn without_a_writable_hierarchy_it_says_why_and_uses_process_groups() {
        let t = tempfile::tempdir().unwrap();
        // A hierarchy that is a plain directory: no cgroup.kill appears.
        let fake = [(Kind::V2, t.path().to_path_buf())];
        let c = decide("", &fake, std::process::id());
        let Containment::ProcessGroup { why } = &c else {
            panic!("{c:?}");
        };
        assert!(why.contains("has no cgroup.kill"), "{why}");
        assert!(why.contains("no cgroup v1 freezer mounted"), "{why}");
        assert!(c.describe().starts_with("process groups only ("));
        let asked = decide("process-group", &fake, 1);
        assert_eq!(
            asked.describe(),
            "process groups only (TESTBED_CONTAINMENT=process-group)"
        );
        // A value it does not know: warned about, and the best is tried.
        let typo = decide("cgroups", &[], 1);
        assert!(typo.describe().contains("no cgroup v2 mounted"), "{typo:?}");
    }

    /// `sh` starts a `setsid` child that sleeps; its pid once it runs.
    fn start_escapee(cmd: &mut Command) -> (std::process::Child, u32) {
        let mut child = cmd
            .args([
                "-c",
                "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!; wait",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let pid: u32 = line.trim().parse().unwrap();
        let found = poll(
            Until::after(Duration::from_secs(5)),
            Duration::from_millis(10),
            || {
                // setsid(1) forks when it is a group leader; wait for `sleep`.
                members_named(pid, "sleep")
            },
        );
        let Waited::Done(sleeper) = found else {
            panic!("the escapee never started");
        };
        (child, sleeper)
    }

    /// `pid` or a child of it, once it runs `name`.
    fn members_named(pid: u32, name: &str) -> Option<u32> {
        if procfs::command_name(pid) == name {
            return Some(pid);
        }
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        children
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .find(|c| procfs::command_name(*c) == name)
    }

    /// Field 5 of /proc/PID/stat.
    fn process_group(pid: u32) -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(2)?
            .parse()
            .ok()
    }

    fn gone(pid: u32, ticks: u64) -> bool {
        matches!(
            poll(
                Until::after(Duration::from_secs(5)),
                Duration::from_millis(10),
                || { (!procfs::alive(pid, ticks)).then_some(()) }
            ),
            Waited::Done(())
        )
    }

    // The tests that need a hierarchy are `#[ignore]`d with what they
    // need: `./x test` runs each where this host has it writable and
    // names the others skipped, with why; a plain `cargo test` lists them
    // as ignored rather than passing without having run.

    /// This process's owner directory in the hierarchy of `kind`, or why
    /// there is none here.
    fn writable(kind: Kind) -> Result<PathBuf, String> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
        writable_among(&mounts(&mountinfo), kind)
    }

    fn writable_among(mounts: &[(Kind, PathBuf)], kind: Kind) -> Result<PathBuf, String> {
        let Some((_, mount)) = mounts.iter().find(|(k, _)| *k == kind) else {
            return Err(format!("no {} mounted here", kind.name()));
        };
        set_up(kind, mount, std::process::id())
            .map_err(|e| format!("{} not usable here: {e}", kind.name()))
    }

    /// [`writable`], or the test fails saying why: it runs only when asked
    /// for (an ignored test), so a host without the hierarchy is an error,
    /// never a pass.
    fn writable_or_fail(kind: Kind) -> PathBuf {
        writable(kind).unwrap_or_else(|why| panic!("not testable on this host: {why}"))
    }

    /// A `setsid` escapee dies with the cgroup of `kind`, which is then
    /// removed. Needs root and the hierarchy mounted.
    fn escapee_dies_with_its_cgroup(kind: Kind) {
        let owner = writable_or_fail(kind);
        let dir = owner.join(format!("test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let group = Cgroup {
            kind,
            dir: dir.clone(),
        };
        let mut cmd = Command::new("sh");
        group.join_before_exec(&mut cmd).unwrap();
        let (mut sh, sleeper) = start_escapee(&mut cmd);
        let ticks = procfs::start_ticks(sleeper).unwrap();
        assert!(
            group.members().contains(&sleeper),
            "the escapee is in the cgroup"
        );
        // Killing sh's process group would miss it: it leads its own.
        assert_eq!(
            process_group(sleeper),
            Some(sleeper),
            "the escapee called setsid"
        );
        assert_ne!(process_group(sh.id()), Some(sleeper));
        assert!(group.kill() >= 2, "sh and the escapee were killed");
        assert!(
            gone(sleeper, ticks),
            "the escapee survived its cgroup's kill"
        );
        let _ = sh.wait();
        group.remove();
        assert!(!dir.exists(), "the cgroup is removed");
        // The owner directory stays: it is this process's, shared with the
        // tests running beside this one in other threads (a later sweep
        // removes it once the process is gone).
    }

    #[test]
    #[ignore = "needs a writable cgroup v2 hierarchy with cgroup.kill (root, Linux 5.14+): ./x test runs it where the host has one, else names it skipped"]
    fn a_removed_groups_cpu_time_still_counts() {
        let before = cpu_usec().expect("cgroup v2 containment");
        let group = Cgroup::create().unwrap().expect("a cgroup v2 group");
        // 0.3 s of CPU, then the group is removed before the count is read.
        let mut cmd = Command::new("python3");
        cmd.args([
            "-c",
            "import time\nt = time.time()\nwhile time.time() - t < 0.3: pass",
        ]);
        group.join_before_exec(&mut cmd).unwrap();
        assert!(cmd.status().unwrap().success());
        group.remove();
        let after = cpu_usec().unwrap();
        let used = (after.0 + after.1).saturating_sub(before.0 + before.1);
        assert!(used >= 200_000, "the removed group's CPU: {used} µs");
    }

    #[test]
    #[ignore = "needs a writable cgroup v2 hierarchy with cgroup.kill (root, Linux 5.14+): ./x test runs it where the host has one, else names it skipped"]
    fn a_setsid_escapee_dies_with_its_v2_cgroup() {
        escapee_dies_with_its_cgroup(Kind::V2);
    }

    #[test]
    #[ignore = "needs a writable cgroup v1 freezer hierarchy (root): ./x test runs it where the host has one, else names it skipped"]
    fn a_setsid_escapee_dies_with_its_v1_freezer_cgroup() {
        escapee_dies_with_its_cgroup(Kind::V1Freezer);
    }

    #[test]
    fn a_hierarchy_that_is_not_there_is_named() {
        // A plain directory standing for a v1 mount: no freezer.state.
        let t = tempfile::tempdir().unwrap();
        let only_v1 = [(Kind::V1Freezer, t.path().to_path_buf())];
        assert_eq!(
            writable_among(&only_v1, Kind::V2).unwrap_err(),
            "no cgroup v2 mounted here"
        );
        let why = writable_among(&only_v1, Kind::V1Freezer).unwrap_err();
        assert!(
            why.starts_with("cgroup v1 freezer not usable here: ")
                && why.ends_with("has no freezer.state"),
            "{why}"
        );
    }

    #[test]
    #[ignore = "needs a writable cgroup v2 or v1 freezer hierarchy (root): ./x test runs it where the host has one, else names it skipped"]
    fn a_dead_owners_cgroups_are_killed_and_removed_and_a_live_owners_kept() {
        let (kind, mount) = [Kind::V2, Kind::V1Freezer]
            .into_iter()
            .find_map(|k| {
                let owner = writable(k).ok()?;
                // <mount>/testbed/<owner>
                Some((k, owner.parent()?.parent()?.to_path_buf()))
            })
            .unwrap_or_else(|| {
                panic!(
                    "not testable on this host: {}; {}",
                    writable(Kind::V2).unwrap_err(),
                    writable(Kind::V1Freezer).unwrap_err()
                )
            });
        let top = mount.join(TOP);
        // An owner that no longer exists (pid 1's start time is never 1),
        // with an escapee inside; and a live owner (this test process).
        let dead = top.join(format!("1-1{}", std::process::id()));
        let me = std::process::id();
        let live = top.join(format!("{me}-{}", procfs::start_ticks(me).unwrap()));
        let mut started = Vec::new();
        for owner in [&dead, &live] {
            // Not a `g<n>` name: `Cgroup::create` in tests beside this one
            // makes those under the live owner.
            let dir = owner.join("sweep-test");
            std::fs::create_dir_all(&dir).unwrap();
            let group = Cgroup { kind, dir };
            let mut cmd = Command::new("sh");
            group.join_before_exec(&mut cmd).unwrap();
            let (sh, sleeper) = start_escapee(&mut cmd);
            started.push((group, sh, sleeper, procfs::start_ticks(sleeper).unwrap()));
        }
        let said: Vec<String> = sweep_top(kind, &top, 0)
            .into_iter()
            .filter(|l| l.contains(&dead.display().to_string()))
            .collect();
        let (kept_group, mut kept_sh, kept, kept_ticks) = started.pop().unwrap();
        let (_, mut dead_sh, orphan, orphan_ticks) = started.pop().unwrap();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("sleep") && said[0].contains("by testbed pid 1,"),
            "{said:?}"
        );
        assert!(
            gone(orphan, orphan_ticks),
            "the dead owner's escapee survived the sweep"
        );
        assert!(!dead.exists(), "the dead owner's cgroups are removed");
        assert!(
            procfs::alive(kept, kept_ticks),
            "a live owner's process was killed"
        );
        let _ = dead_sh.wait();
        kept_group.remove();
        let _ = kept_sh.wait();
        // `live` is this process's owner directory: kept (see above).
    }
}
