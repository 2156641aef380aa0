//! Whether anything on the host uses an NVMe controller's disks: a mount
//! (by name in /proc/mounts and by major:minor in /proc/self/mountinfo,
//! which also catches mounts made through another name), swap, the root
//! filesystem, or a holder (device-mapper, LVM, md, multipath), followed
//! down the chain of holders.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::sysfs::{Host, ProcUnreadable, entries, read_trim};

/// The /proc files the checks read, as text.
#[derive(Debug, Clone, Default)]
pub struct ProcFiles {
    pub mounts: String,
    pub mountinfo: String,
    pub swaps: String,
}

impl ProcFiles {
    /// Read from the host; an unreadable file is an error, not "unused".
    pub fn read(host: &Host) -> Result<ProcFiles, ProcUnreadable> {
        Ok(ProcFiles {
            mounts: host.proc_text("proc/mounts")?,
            mountinfo: host.proc_text("proc/self/mountinfo")?,
            swaps: host.proc_text("proc/swaps")?,
        })
    }
}

/// Why a controller's disk is not free for passthrough.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InUse {
    /// Mounted (on "/": the root filesystem) or used as swap.
    #[error("{what} {how}")]
    Directly { what: String, how: String },
    /// A holder (device-mapper, LVM, md, multipath) sits on it.
    #[error(
        "{what} is held by {chain}: a holder (device-mapper, LVM, md, multipath) still uses it"
    )]
    Held { what: String, chain: String },
}

/// A block device: a namespace, a partition or a holder.
struct Node {
    name: String,
    sysdir: PathBuf,
    /// "namespace /dev/nvme0n1", "dm-0 (LVM volume \"vg-data\")".
    what: String,
    /// Names it may be mounted or swapped by: /dev/dm-0, /dev/mapper/vg-data.
    aliases: Vec<String>,
    /// "259:1", from sysfs `dev`.
    dev: Option<String>,
}

impl Node {
    fn at(sysdir: PathBuf, name: &str, kind: &str) -> Node {
        Node {
            dev: read_trim(&sysdir.join("dev")),
            what: format!("{kind} /dev/{name}"),
            aliases: vec![format!("/dev/{name}")],
            name: name.to_string(),
            sysdir,
        }
    }

    /// A holder, named by what it is.
    fn holder(host: &Host, name: &str) -> Node {
        let mut n = Node::at(host.path("sys/block").join(name), name, "");
        let dm_name = read_trim(&n.sysdir.join("dm/name"));
        let uuid = read_trim(&n.sysdir.join("dm/uuid")).unwrap_or_default();
        let kind = if let Some(dm) = &dm_name {
            n.aliases.push(format!("/dev/mapper/{dm}"));
            let k = match uuid.split('-').next().unwrap_or("") {
                "LVM" => "LVM volume",
                "mpath" => "multipath device",
                "CRYPT" => "dm-crypt device",
                _ => "device-mapper device",
            };
            format!("{k} {dm:?}")
        } else if n.sysdir.join("md").exists() {
            "md RAID".to_string()
        } else {
            "a holder".to_string()
        };
        n.what = format!("{name} ({kind})");
        n
    }
}

/// The disks of a controller as the nvme driver shows them: `nvme0n1`, or
/// with native multipath the path `nvme0c0n1`, whose disk is `nvme0n1`.
pub fn namespaces(host: &Host, pci: &str) -> Vec<String> {
    let mut out = BTreeSet::new();
    let ctrl_dir = host.pci_dev(pci).join("nvme");
    for ctrl in entries(&ctrl_dir) {
        for e in entries(&ctrl_dir.join(&ctrl)) {
            if let Some(disk) = disk_name(&e) {
                out.insert(disk);
            }
        }
    }
    out.into_iter().collect()
}

/// `nvme0n1` -> itself, `nvme0c2n1` -> `nvme0n1`, anything else -> None.
fn disk_name(entry: &str) -> Option<String> {
    let rest = entry.strip_prefix("nvme")?;
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    let (subsys, ns) = rest.split_once('n')?;
    if !digits(ns) {
        return None;
    }
    let subsys = match subsys.split_once('c') {
        Some((s, c)) if digits(c) => s,
        Some(_) => return None,
        None => subsys,
    };
    digits(subsys).then(|| format!("nvme{subsys}n{ns}"))
}

/// Checks every namespace and partition of the controller; the names it
/// checked, or why one is in use.
pub fn check_unused(host: &Host, pci: &str, proc: &ProcFiles) -> Result<Vec<String>, InUse> {
    let mut checked = Vec::new();
    for disk in namespaces(host, pci) {
        let sysdir = host.path("sys/block").join(&disk);
        let mut nodes = vec![Node::at(sysdir.clone(), &disk, "namespace")];
        for e in entries(&sysdir) {
            if sysdir.join(&e).join("partition").is_file() {
                nodes.push(Node::at(sysdir.join(&e), &e, "partition"));
            }
        }
        for n in &nodes {
            if let Some(how) = in_use(n, proc) {
                return Err(InUse::Directly {
                    what: n.what.clone(),
                    how,
                });
            }
            if let Some(chain) = holder_chain(host, n, proc, &mut BTreeSet::new()) {
                return Err(InUse::Held {
                    what: n.what.clone(),
                    chain,
                });
            }
            checked.push(n.name.clone());
        }
    }
    Ok(checked)
}

/// "dm-0 (LVM volume "vg-data"), which is mounted on /data", following
/// holders of holders; None when nothing holds `n`.
fn holder_chain(
    host: &Host,
    n: &Node,
    proc: &ProcFiles,
    seen: &mut BTreeSet<String>,
) -> Option<String> {
    let first = entries(&n.sysdir.join("holders")).into_iter().next()?;
    let h = Node::holder(host, &first);
    let mut text = h.what.clone();
    if let Some(why) = in_use(&h, proc) {
        text.push_str(&format!(", which {why}"));
    }
    // A loop in a fake or odd tree must not recurse forever.
    if seen.insert(h.name.clone())
        && seen.len() < 16
        && let Some(next) = holder_chain(host, &h, proc, seen)
    {
        text.push_str(&format!(", itself held by {next}"));
    }
    Some(text)
}

/// Why `n` is in use (mounted, root, swap), or None.
fn in_use(n: &Node, proc: &ProcFiles) -> Option<String> {
    let mut targets = Vec::new();
    for line in proc.mountinfo.lines() {
        // id parent major:minor root mountpoint ...
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 4 && n.dev.as_deref() == Some(f[2]) {
            targets.push(unescape(f[4]));
        }
    }
    for line in proc.mounts.lines() {
        let mut f = line.split_whitespace();
        if let (Some(src), Some(target)) = (f.next(), f.next())
            && n.aliases.iter().any(|a| a == src)
        {
            targets.push(unescape(target));
        }
    }
    if targets.iter().any(|t| t == "/") {
        return Some("holds the root filesystem".into());
    }
    if let Some(t) = targets.first() {
        return Some(format!("is mounted on {t}"));
    }
    let swap = proc
        .swaps
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .any(|src| n.aliases.iter().any(|a| a == src));
    swap.then(|| "is in use as swap".into())
}

/// /proc/mounts writes a space in a path as \040.
fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipath_paths_name_their_disk() {
        assert_eq!(disk_name("nvme0n1").as_deref(), Some("nvme0n1"));
        assert_eq!(disk_name("nvme3c1n2").as_deref(), Some("nvme3n2"));
        for not in [
            "nvme0",
            "ng0n1",
            "nvme0n1p1",
            "nvmexn1",
            "nvme0cn1",
            "power",
        ] {
            assert_eq!(disk_name(not), None, "{not}");
        }
    }

    #[test]
    fn mount_points_with_spaces_are_unescaped() {
        let n = Node {
            name: "nvme0n1".into(),
            sysdir: PathBuf::new(),
            what: String::new(),
            aliases: vec!["/dev/nvme0n1".into()],
            dev: None,
        };
        let proc = ProcFiles {
            mounts: "/dev/nvme0n10 /other ext4 rw 0 0\n/dev/nvme0n1 /mnt/my\\040data xfs rw 0 0\n"
                .into(),
            ..Default::default()
        };
        assert_eq!(
            in_use(&n, &proc).as_deref(),
            Some("is mounted on /mnt/my data")
        );
    }
}
