//! The guest image and formatted devices, set up by PID 1 once the
//! modules are loaded and before the control port is opened.
//!
//! When the host attached a root image (`/etc/testbed/rootfs` in the
//! initramfs says so), the agent finds its disk by serial, mounts it
//! read-only, lays a tmpfs overlay over it at /newroot, moves /proc /sys
//! /dev /run /tmp there, bind-mounts its own binaries (`/bin/testbed-*`,
//! `/init`) into /newroot/opt/testbed/bin and makes /newroot the root
//! (mount --move . /; chroot .): every later workload sees a plain Debian.
//! Devices listed in `/etc/testbed/filesystems` are then formatted and
//! mounted, and each mount point is exported as `$TESTBED_MOUNT_<NAME>`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::mount::{MsFlags, mount};

use super::devices::{self, FoundDevice};

/// What the host says about the root image: `key=value` lines.
pub const ROOTFS_CONF: &str = "/etc/testbed/rootfs";
/// Devices to format: `name<TAB>fstype<TAB>mount point` lines.
pub const FILESYSTEMS_CONF: &str = "/etc/testbed/filesystems";

/// The PATH of every process after the switch: the agent's helpers first.
pub const PATH: &str =
    "/opt/testbed/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How long a disk may take to appear after its driver loaded.
const DEVICE_WAIT: Duration = Duration::from_secs(20);

/// The root image as the host described it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RootConf {
    pub name: String,
    pub key: String,
    /// Serial of the virtio disk holding the image.
    pub serial: String,
    /// Commands that must succeed in the new root.
    pub check: Vec<String>,
}

pub fn parse_root_conf(text: &str) -> Result<RootConf, String> {
    let mut c = RootConf::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| format!("{ROOTFS_CONF}: {line:?} is not key=value"))?;
        match k {
            "name" => c.name = v.to_string(),
            "key" => c.key = v.to_string(),
            "serial" => c.serial = v.to_string(),
            "check" => c.check.push(v.to_string()),
            _ => return Err(format!("{ROOTFS_CONF}: unknown key {k:?}")),
        }
    }
    if c.serial.is_empty() {
        return Err(format!("{ROOTFS_CONF}: no serial"));
    }
    Ok(c)
}

/// A device to format and mount.
#[derive(Debug, Clone, PartialEq)]
pub struct FsConf {
    pub device: String,
    pub fstype: String,
    pub mount: String,
}

pub fn parse_fs_conf(text: &str) -> Result<Vec<FsConf>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match l.split('\t').collect::<Vec<_>>().as_slice() {
            [device, fstype, mount] if mount.starts_with('/') => Ok(FsConf {
                device: device.to_string(),
                fstype: fstype.to_string(),
                mount: mount.to_string(),
            }),
            _ => Err(format!("{FILESYSTEMS_CONF}: bad line {l:?}")),
        })
        .collect()
}

/// Switches to the root image and formats the devices, as the host's
/// files in the initramfs ask; lines for the console on success. Nothing
/// to do without those files (the initramfs alone).
pub fn prepare() -> Result<Vec<String>, String> {
    // An accelerator probe boots without the image's disk or devices.
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    if super::init::cmdline_value(&cmdline, crate::protocol::CMDLINE_MODE).as_deref()
        == Some("probe")
    {
        return Ok(Vec::new());
    }
    // Both read first: /etc/testbed stays behind in the initramfs.
    let root = match std::fs::read_to_string(ROOTFS_CONF) {
        Ok(text) => Some(parse_root_conf(&text)?),
        Err(_) => None,
    };
    let filesystems = match std::fs::read_to_string(FILESYSTEMS_CONF) {
        Ok(text) => parse_fs_conf(&text)?,
        Err(_) => Vec::new(),
    };
    let mut said = Vec::new();
    if let Some(conf) = root {
        said.push(switch_root(&conf).map_err(|e| format!("root image {}: {e}", conf.name))?);
        said.extend(run_checks(&conf.check).map_err(|e| format!("root image {}: {e}", conf.name))?);
    }
    said.extend(make_filesystems(&filesystems)?);
    Ok(said)
}

/// Formats and mounts each device (its label: the device name, cut to
/// ext4's 16 bytes).
fn make_filesystems(list: &[FsConf]) -> Result<Vec<String>, String> {
    let mut said = Vec::new();
    for fs in list {
        if fs.fstype != "ext4" {
            return Err(format!(
                "device {}: unknown file system {}",
                fs.device, fs.fstype
            ));
        }
        let dev = wait_for_device(&fs.device)?;
        let label: String = fs.device.chars().take(16).collect();
        let out = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L"])
            .arg(&label)
            .arg(&dev.path)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("device {}: mkfs.ext4: {e}", fs.device))?;
        if !out.status.success() {
            return Err(format!(
                "device {}: mkfs.ext4 {}: {}",
                fs.device,
                dev.path,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        mkdir(&fs.mount)?;
        mnt(&dev.path, &fs.mount, Some("ext4"), MsFlags::empty(), None)
            .map_err(|e| format!("device {}: {e}", fs.device))?;
        // SAFETY: PID 1 during start-up, before the agent starts any thread.
        unsafe { std::env::set_var(crate::workload::mount_env(&fs.device), &fs.mount) };
        said.push(format!(
            "formatted {} ({}) as ext4, mounted on {}",
            fs.device, dev.path, fs.mount
        ));
    }
    Ok(said)
}

/// The device with this serial, once the kernel has it.
fn wait_for_device(serial: &str) -> Result<FoundDevice, String> {
    let deadline = Instant::now() + DEVICE_WAIT;
    loop {
        let found: BTreeMap<String, FoundDevice> = devices::discover(Path::new("/sys"));
        if let Some(d) = found.get(serial)
            && Path::new(&d.path).exists()
        {
            return Ok(d.clone());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no disk with serial {serial} after {DEVICE_WAIT:?} (found: {:?})",
                found.keys().collect::<Vec<_>>()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mkdir(path: &str) -> Result<(), String> {
    std::fs::create_dir_all(path).map_err(|e| format!("mkdir {path}: {e}"))
}

fn mnt(
    src: &str,
    target: &str,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), String> {
    mount(Some(src), target, fstype, flags, data).map_err(|e| {
        format!(
            "mount {src} on {target} ({}): {e}",
            fstype.unwrap_or("move/bind")
        )
    })
}

/// The switch itself; a line saying what the new root is.
fn switch_root(conf: &RootConf) -> Result<String, String> {
    let disk = wait_for_device(&conf.serial)?;
    for d in ["/lower", "/overlay", "/newroot"] {
        mkdir(d)?;
    }
    // The image is shared by every run: never written (noload: no journal replay).
    mnt(
        &disk.path,
        "/lower",
        Some("ext4"),
        MsFlags::MS_RDONLY,
        Some("noload"),
    )?;
    mnt(
        "tmpfs",
        "/overlay",
        Some("tmpfs"),
        MsFlags::empty(),
        Some("mode=0755"),
    )?;
    mkdir("/overlay/upper")?;
    mkdir("/overlay/work")?;
    mnt(
        "overlay",
        "/newroot",
        Some("overlay"),
        MsFlags::empty(),
        Some("lowerdir=/lower,upperdir=/overlay/upper,workdir=/overlay/work"),
    )?;
    for d in ["/proc", "/sys", "/dev", "/run", "/tmp"] {
        let target = format!("/newroot{d}");
        mkdir(&target)?;
        mnt(d, &target, None, MsFlags::MS_MOVE, None)?;
    }
    bind_helpers()?;
    // As switch_root(8): the initramfs cannot be pivoted away, so the new
    // root is moved over / and entered with chroot.
    nix::unistd::chdir("/newroot").map_err(|e| format!("chdir /newroot: {e}"))?;
    mnt(".", "/", None, MsFlags::MS_MOVE, None)?;
    nix::unistd::chroot(".").map_err(|e| format!("chroot: {e}"))?;
    nix::unistd::chdir("/").map_err(|e| format!("chdir /: {e}"))?;
    // SAFETY: PID 1 during start-up, before the agent starts any thread.
    unsafe { std::env::set_var("PATH", PATH) };
    let version = std::fs::read_to_string("/etc/debian_version").unwrap_or_default();
    Ok(format!(
        "root is image {} ({}) from {}: Debian {}",
        conf.name,
        &conf.key[..conf.key.len().min(12)],
        disk.path,
        version.trim()
    ))
}

/// The agent (`/init`) and its helpers (`/bin/testbed-*`) into
/// /newroot/opt/testbed/bin, bind-mounted: no copy in memory.
fn bind_helpers() -> Result<(), String> {
    let dir = "/newroot/opt/testbed/bin";
    mkdir(dir)?;
    let mut files = vec![("/init".to_string(), "testbed-agent".to_string())];
    for e in std::fs::read_dir("/bin")
        .map_err(|e| format!("read /bin: {e}"))?
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        // testbed-agent is a symlink to /init, bound above.
        if name.starts_with("testbed-") && name != "testbed-agent" {
            files.push((format!("/bin/{name}"), name));
        }
    }
    for (src, name) in files {
        let target = format!("{dir}/{name}");
        std::fs::write(&target, b"").map_err(|e| format!("create {target}: {e}"))?;
        mnt(&src, &target, None, MsFlags::MS_BIND, None)?;
    }
    Ok(())
}

/// Runs each check with sh in the new root; the first that fails stops
/// the boot with its output.
fn run_checks(checks: &[String]) -> Result<Vec<String>, String> {
    let mut said = Vec::new();
    for c in checks {
        let out = Command::new("sh")
            .args(["-c", c])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("check `{c}`: {e}"))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            return Err(format!(
                "check `{c}` failed ({}): {}",
                out.status,
                text.trim()
            ));
        }
        let first = text.lines().next().unwrap_or_default().to_string();
        said.push(format!("check `{c}`: {first}"));
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_conf_is_read_and_checked() {
        let c = parse_root_conf(
            "name=test-tiny\nkey=abc\nserial=testbed-root\ncheck=samtools --version\ncheck=true\n",
        )
        .unwrap();
        assert_eq!(c.serial, "testbed-root");
        assert_eq!(c.check, ["samtools --version", "true"]);
        assert!(
            parse_root_conf("name=x\n")
                .unwrap_err()
                .contains("no serial")
        );
        assert!(parse_root_conf("serial=a\nnope\n").is_err());
    }

    #[test]
    fn filesystems_and_their_environment_names() {
        let l = parse_fs_conf("scratch\text4\t/mnt/scratch\n").unwrap();
        assert_eq!(l[0].mount, "/mnt/scratch");
        assert!(parse_fs_conf("scratch ext4 /mnt/x\n").is_err());
        assert_eq!(
            crate::workload::mount_env("my-disk.ns2"),
            "TESTBED_MOUNT_MY_DISK_NS2"
        );
    }

    #[test]
    fn a_failing_check_stops_with_its_output() {
        let ok = run_checks(&["echo hello".into()]).unwrap();
        assert_eq!(ok, ["check `echo hello`: hello"]);
        let e = run_checks(&["echo broken >&2; exit 3".into()]).unwrap_err();
        assert!(e.contains("broken") && e.contains("exit status: 3"), "{e}");
    }
}
