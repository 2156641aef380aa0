//! `[[devices]]`: the fields every device has and the checks every device
//! gets (name, block size, backend, file system); each kind's own fields
//! are checked by its module in `device_kinds`.

use super::*;

/// A file system the agent makes on an emulated device before any point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Filesystem {
    Ext4,
}

impl Filesystem {
    pub fn as_str(self) -> &'static str {
        match self {
            Filesystem::Ext4 => "ext4",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// A raw file created in the run directory.
    #[default]
    File,
    /// QEMU's null-co: no data, reads return zeroes after `latency_ns`.
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostCache {
    /// O_DIRECT on the host (falls back to writeback where unsupported).
    #[default]
    None,
    Writeback,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// Also the device's serial number, by which the agent finds it.
    pub name: String,
    pub kind: DeviceKind,
    #[serde(default)]
    pub backend: Backend,
    #[serde(default)]
    pub size: Option<Size>,
    #[serde(default = "default_lbs")]
    pub logical_block_size: u32,
    #[serde(default)]
    pub namespaces: Option<u32>,
    /// NVMe I/O queue pairs / virtio-blk queues.
    #[serde(default)]
    pub queues: Option<u32>,
    /// null backend only: completion latency QEMU adds.
    #[serde(default)]
    pub latency_ns: Option<u64>,
    #[serde(default)]
    pub host_cache: HostCache,
    /// passthrough only: the PCI address of the controller, e.g. "0000:3b:00.0".
    #[serde(default)]
    pub pci: Option<String>,
    /// passthrough only: take the controller from the nvme driver for the
    /// run (after the safety checks) and give it back afterwards; without
    /// it the controller must already be bound to vfio-pci.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bind: bool,
    /// Emulated devices only: the agent formats the device (namespace 1)
    /// with this file system at boot and mounts it at `mount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<Filesystem>,
    /// Where the file system is mounted in the guest, under /mnt/
    /// (default /mnt/<name>); workloads find it in $TESTBED_MOUNT_<NAME>.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<String>,
}

impl DeviceSpec {
    /// The guest mount point of its file system, if it has one.
    pub fn mount_point(&self) -> Option<String> {
        self.filesystem?;
        Some(
            self.mount
                .clone()
                .unwrap_or_else(|| format!("/mnt/{}", self.name)),
        )
    }
}

fn default_lbs() -> u32 {
    512
}

/// `filesystem` and `mount` of a device: the key at fault and why.
pub(super) fn check_filesystem(
    loaded: &LoadedSpec,
    d: &DeviceSpec,
) -> Result<(), (&'static str, String)> {
    let spec = &loaded.spec;
    let Some(fs) = d.filesystem else {
        if d.mount.is_some() {
            return Err(("mount", "a mount point needs filesystem = \"ext4\"".into()));
        }
        return Ok(());
    };
    // Only a device the testbed created may be formatted.
    if d.kind.def().origin() == Origin::HostPci {
        return Err((
            "filesystem",
            "a passed-through device is never formatted by the testbed: use an emulated one".into(),
        ));
    }
    if d.backend == Backend::Null {
        return Err((
            "filesystem",
            "the null backend keeps no data: a file system needs backend = \"file\"".into(),
        ));
    }
    if spec.experiment.executor == ExecutorKind::Host {
        return Err((
            "filesystem",
            "the agent formats and mounts it in the VM: needs executor = \"qemu\"".into(),
        ));
    }
    let mkfs = format!("mkfs.{}", fs.as_str());
    if spec.image.name.is_none() && !spec.image.include.contains(&mkfs) {
        return Err((
            "filesystem",
            format!(
                "{mkfs} must be in the guest: name an image with e2fsprogs ([image] name) or include it ([image] include = [\"{mkfs}\"])"
            ),
        ));
    }
    if let Some(m) = &d.mount {
        let plain = |c: char| c.is_ascii_alphanumeric() || "-_./".contains(c);
        let rest = m.strip_prefix("/mnt/").unwrap_or_default();
        if rest.is_empty()
            || !m.chars().all(plain)
            || rest
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err((
                "mount",
                format!("{m:?}: give a plain path below /mnt/, e.g. \"/mnt/scratch\""),
            ));
        }
    }
    let mine = d.mount_point();
    let taken = spec
        .devices
        .iter()
        .take_while(|o| o.name != d.name)
        .any(|o| o.mount_point().is_some() && o.mount_point() == mine);
    if taken {
        return Err((
            "mount",
            format!(
                "{:?} is another device's mount point",
                mine.unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

/// `[[devices]]`: unique serial-safe names, a usable block size, the
/// kind's own checks (`device_kinds`), then backend and file system.
pub(super) fn check_devices(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let spec = &loaded.spec;
    let mut names = std::collections::BTreeSet::new();
    for (i, d) in spec.devices.iter().enumerate() {
        let at = |key: &str, msg: String| {
            loaded.error_at_path(
                &[
                    PathSeg::Key("devices"),
                    PathSeg::Index(i),
                    PathSeg::Key(key),
                ],
                msg,
            )
        };
        if d.name.is_empty()
            || d.name.len() > 20
            || !d
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(at(
                "name",
                format!(
                    "{:?}: use 1 to 20 letters, digits, '-' or '_' (it becomes the device serial)",
                    d.name
                ),
            ));
        }
        if !names.insert(d.name.clone()) {
            return Err(at("name", format!("{:?} is declared twice", d.name)));
        }
        if !d.logical_block_size.is_power_of_two() || !(512..=4096).contains(&d.logical_block_size)
        {
            return Err(at(
                "logical_block_size",
                format!(
                    "{} must be a power of two from 512 to 4096",
                    d.logical_block_size
                ),
            ));
        }
        d.kind
            .def()
            .check(d, spec.experiment.executor)
            .map_err(|(key, msg)| at(key, msg))?;
        if d.latency_ns.is_some() && d.backend != Backend::Null {
            return Err(at(
                "latency_ns",
                "only the null backend takes latency_ns".into(),
            ));
        }
        if let Some(q) = d.queues
            && !(1..=64).contains(&q)
        {
            return Err(at("queues", format!("{q} must be between 1 and 64")));
        }
        check_filesystem(loaded, d).map_err(|(key, msg)| at(key, msg))?;
    }
    Ok(())
}
