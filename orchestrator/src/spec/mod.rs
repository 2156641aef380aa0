//! Experiment specs: strict TOML, validated in full before anything boots.
//!
//! Errors carry the file, line, column and the dotted field, e.g.
//! `experiments/smoke.toml:12:1: devices[0].size: invalid size "12QB" ...`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use testbed_agent::workload::Workload;

use crate::units::{Size, Span};

pub mod device_kinds;
pub use device_kinds::{DeviceKind, Origin};

/// A spec file as written, minus the workload (kept raw until sweep points
/// are applied to it).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub experiment: Experiment,
    #[serde(default)]
    pub vm: VmSection,
    #[serde(default)]
    pub kernel: KernelSection,
    #[serde(default)]
    pub image: ImageSection,
    #[serde(default)]
    pub devices: Vec<DeviceSpec>,
    pub workload: toml::Table,
    #[serde(default)]
    pub sweep: BTreeMap<String, Vec<toml::Value>>,
    #[serde(default)]
    pub timeouts: Timeouts,
    /// Two VMs on one virtual link (qemu executor), e.g. Flight remote.
    #[serde(default)]
    pub topology: Option<Topology>,
    /// Resources and chunking of the Slurm job array (`executor = "slurm"`
    /// or `testbed run --executor slurm`).
    #[serde(default)]
    pub slurm: SlurmSection,
}

/// `[slurm]`: how the plan becomes a job array. Every array task runs
/// `chunk` points with the same `testbed` binary on its node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSection {
    /// Points per array task.
    #[serde(default = "one")]
    pub chunk: u32,
    /// Where each task runs its points: "qemu" (a VM on the node) or "host".
    #[serde(default)]
    pub task_executor: ExecutorKind,
    /// --cpus-per-task (default: the VM's vcpus, or 1 on the host executor).
    #[serde(default)]
    pub cpus: Option<u32>,
    /// --mem per task (default: the VM's memory plus 512 MiB for QEMU and
    /// the testbed, or none on the host executor).
    #[serde(default)]
    pub memory: Option<Size>,
    /// --time per task.
    #[serde(default)]
    pub time: Option<Span>,
    #[serde(default)]
    pub partition: Option<String>,
    /// --constraint, e.g. "nvme&kvm": node features the points need.
    #[serde(default)]
    pub constraint: Option<String>,
    /// At most this many tasks at once (the array's `%N`).
    #[serde(default)]
    pub max_parallel: Option<u32>,
    /// Further sbatch options, as written (e.g. ["--account=lab", "--qos=long"]).
    #[serde(default)]
    pub sbatch_args: Vec<String>,
}

impl Default for SlurmSection {
    fn default() -> Self {
        SlurmSection {
            chunk: 1,
            task_executor: ExecutorKind::Qemu,
            cpus: None,
            memory: None,
            time: None,
            partition: None,
            constraint: None,
            max_parallel: None,
            sbatch_args: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyKind {
    /// A server VM and a client VM joined by a QEMU socket link; the points
    /// run on the client, `{peer}` in the workload is the server's address.
    Pair,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub kind: TopologyKind,
    /// Link-local addresses: the link never touches a host network.
    #[serde(default = "default_server_address")]
    pub server_address: String,
    #[serde(default = "default_client_address")]
    pub client_address: String,
    /// The workload the server VM runs once per boot before any point
    /// (a service that keeps running, e.g. kind = "flight-serve").
    pub server: toml::Table,
}

fn default_server_address() -> String {
    "169.254.10.1/16".into()
}
fn default_client_address() -> String {
    "169.254.10.2/16".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Paper figure ids (see papers.md) this spec produces data for.
    #[serde(default)]
    pub figures: Vec<String>,
    #[serde(default)]
    pub executor: ExecutorKind,
    #[serde(default = "one")]
    pub repetitions: u32,
    /// Boots the repetitions are spread over (qemu executor, one boot per
    /// run): repetitions r·boots/repetitions.. share boot r, so the
    /// variation between boots is in the repetitions' spread, and the
    /// estimates resample boots first, then repetitions within them.
    #[serde(default = "one")]
    pub boots: u32,
    #[serde(default)]
    pub seed: u64,
    /// A point is noisy when other processes took more than this % of the
    /// host's CPU while it ran (noise.rs).
    #[serde(
        default = "default_noisy_above",
        skip_serializing_if = "is_default_noisy_above"
    )]
    pub noisy_above_pct: f64,
}

fn default_noisy_above() -> f64 {
    crate::noise::DEFAULT_NOISY_ABOVE_PCT
}

fn is_default_noisy_above(v: &f64) -> bool {
    *v == crate::noise::DEFAULT_NOISY_ABOVE_PCT
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecutorKind {
    #[default]
    Qemu,
    Host,
    Slurm,
}

// Defined with the accelerator probe (machine layer) that decides on it.
pub use crate::qemu::accel::AccelChoice;

impl std::str::FromStr for ExecutorKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "qemu" => Ok(ExecutorKind::Qemu),
            "host" => Ok(ExecutorKind::Host),
            "slurm" => Ok(ExecutorKind::Slurm),
            _ => Err(format!("unknown executor {s:?}: use qemu, host or slurm")),
        }
    }
}

impl std::str::FromStr for AccelChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(AccelChoice::Auto),
            "kvm" => Ok(AccelChoice::Kvm),
            "tcg" => Ok(AccelChoice::Tcg),
            _ => Err(format!("unknown accelerator {s:?}: use auto, kvm or tcg")),
        }
    }
}

/// How points map to boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BootPolicy {
    /// One boot runs every point (engines and points interleave in one boot).
    #[default]
    PerRun,
    /// A fresh boot for every point.
    PerPoint,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSection {
    #[serde(default = "default_vcpus")]
    pub vcpus: u32,
    #[serde(default = "default_memory")]
    pub memory: Size,
    #[serde(default)]
    pub accel: AccelChoice,
    #[serde(default)]
    pub boot: BootPolicy,
    /// Extra kernel command-line words.
    #[serde(default)]
    pub cmdline: Vec<String>,
    /// QEMU's threads on host CPUs: "off", "auto" or a list (qemu::pin).
    #[serde(default, skip_serializing_if = "is_off")]
    pub pin: crate::qemu::pin::PinSetting,
}

fn is_off(p: &crate::qemu::pin::PinSetting) -> bool {
    *p == crate::qemu::pin::PinSetting::Off
}

fn default_vcpus() -> u32 {
    2
}
fn default_memory() -> Size {
    Size(1 << 30)
}

impl Default for VmSection {
    fn default() -> Self {
        VmSection {
            vcpus: default_vcpus(),
            memory: default_memory(),
            accel: AccelChoice::Auto,
            boot: BootPolicy::PerRun,
            cmdline: Vec::new(),
            pin: Default::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelSection {
    /// A descriptor in kernel-configs/ (`debian-cloud`, `vm-base`, ...).
    #[serde(default = "default_kernel")]
    pub name: String,
}

fn default_kernel() -> String {
    "debian-cloud".into()
}

impl Default for KernelSection {
    fn default() -> Self {
        KernelSection {
            name: default_kernel(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSection {
    /// A root filesystem image built from `images/<name>.toml`, attached
    /// read-only; the agent switches to it (with a tmpfs overlay) before
    /// any point. None: the initramfs alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Host programs copied into the initramfs with their shared libraries.
    #[serde(default)]
    pub include: Vec<String>,
    /// Extra kernel modules to load (dependencies are added).
    #[serde(default)]
    pub modules: Vec<String>,
}

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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    /// From QEMU start to the agent's hello.
    #[serde(default = "default_boot_timeout")]
    pub boot: Span,
    /// Longest a single point may run.
    #[serde(default = "default_point_timeout")]
    pub point: Span,
    /// Silence (no heartbeat) after which the guest counts as hung.
    #[serde(default = "default_heartbeat_timeout")]
    pub heartbeat: Span,
}

fn default_boot_timeout() -> Span {
    Span(std::time::Duration::from_secs(60))
}
fn default_point_timeout() -> Span {
    Span(std::time::Duration::from_secs(900))
}
fn default_heartbeat_timeout() -> Span {
    Span(std::time::Duration::from_secs(15))
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            boot: default_boot_timeout(),
            point: default_point_timeout(),
            heartbeat: default_heartbeat_timeout(),
        }
    }
}

/// A spec error located in its file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct SpecError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// Dotted path of the field, when known (`vm.memory`, `sweep.depth`).
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
            if let Some(c) = self.column {
                write!(f, ":{c}")?;
            }
        }
        write!(f, ": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        write!(f, "{}", self.message)
    }
}

/// A parsed spec with its source, so later checks can point into the file.
#[derive(Debug, Clone)]
pub struct LoadedSpec {
    pub path: PathBuf,
    pub source: String,
    pub spec: Spec,
    /// The workload with no sweep applied, already type-checked.
    pub base_workload: Workload,
    /// The server VM's workload of a pair topology, type-checked.
    pub server_workload: Option<Workload>,
}

impl LoadedSpec {
    /// An error about `key` in `[section]` (a dotted section such as
    /// `topology.server` is a path of tables), located at that key's line,
    /// or at the section when the key is not written.
    pub fn error_at(
        &self,
        section: &str,
        key: Option<&str>,
        message: impl Into<String>,
    ) -> SpecError {
        let mut path: Vec<PathSeg<'_>> = section.split('.').map(PathSeg::Key).collect();
        path.extend(key.map(PathSeg::Key));
        self.error_at_path(&path, message)
    }

    /// An error about the value at `path` (e.g. `devices`, 1, `size`),
    /// located at the deepest part of the path that is written in the file.
    /// The field reads `devices[1].size`.
    pub fn error_at_path(&self, path: &[PathSeg<'_>], message: impl Into<String>) -> SpecError {
        let (line, column) = match locate(&self.source, path) {
            Some(offset) => {
                let (l, c) = line_col(&self.source, offset);
                (Some(l), Some(c))
            }
            None => (None, None),
        };
        SpecError {
            file: self.path.clone(),
            line,
            column,
            field: Some(field_name(path)),
            message: message.into(),
        }
    }
}

/// One step of a path into the spec document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathSeg<'a> {
    /// A key of a table.
    Key(&'a str),
    /// An element of an array (or array of tables, `[[devices]]`).
    Index(usize),
}

/// `devices[1].size` for [`Key("devices")`, `Index(1)`, `Key("size")`].
fn field_name(path: &[PathSeg<'_>]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            PathSeg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            PathSeg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Reads and type-checks a spec file. Sweep points are checked by `plan`.
pub fn load(path: &Path) -> Result<LoadedSpec, SpecError> {
    let source = std::fs::read_to_string(path).map_err(|e| SpecError {
        file: path.to_path_buf(),
        line: None,
        column: None,
        field: None,
        message: format!("cannot read spec: {e}"),
    })?;
    parse(path, &source)
}

pub fn parse(path: &Path, source: &str) -> Result<LoadedSpec, SpecError> {
    let spec: Spec = toml::from_str(source).map_err(|e| toml_error(path, source, &e))?;
    let mut loaded = LoadedSpec {
        path: path.to_path_buf(),
        source: source.to_string(),
        spec,
        // Replaced just below once the raw table type-checks.
        base_workload: Workload::Fault(testbed_agent::workload::fault::FaultParams {
            mode: testbed_agent::workload::fault::FaultMode::Error,
            after_s: 0.0,
            size: 1000,
        }),
        server_workload: None,
    };
    loaded.base_workload = workload_from_table(&loaded, &loaded.spec.workload, None)?;
    if let Some(t) = &loaded.spec.topology {
        let w = Workload::deserialize(toml::Value::Table(t.server.clone())).map_err(|e| {
            loaded.error_at("topology.server", None, e.to_string().trim().to_string())
        })?;
        loaded.server_workload = Some(w);
    }
    check_sections(&loaded)?;
    Ok(loaded)
}

/// Type-checks a workload table; `sweep_key` says which sweep axis produced
/// an override, so its error points at the sweep line instead.
pub fn workload_from_table(
    loaded: &LoadedSpec,
    table: &toml::Table,
    sweep_key: Option<&str>,
) -> Result<Workload, SpecError> {
    if !table.contains_key("kind") {
        return Err(loaded.error_at(
            "workload",
            None,
            "missing field `kind` (e.g. kind = \"randread\")",
        ));
    }
    Workload::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
        let msg = e.to_string();
        let msg = msg.trim().to_string();
        let field = backticked(&msg)
            .filter(|f| table.contains_key(f.as_str()) || msg.contains("unknown field"));
        match sweep_key {
            Some(axis) => loaded.error_at("sweep", Some(axis), msg),
            None => loaded.error_at("workload", field.as_deref(), msg),
        }
    })
}

fn backticked(msg: &str) -> Option<String> {
    let start = msg.find('`')? + 1;
    let len = msg[start..].find('`')?;
    Some(msg[start..start + len].to_string())
}

/// `boots` spreads repetitions over fresh boots of one run: it needs
/// repetitions to spread and a VM booted once per run.
fn check_boots(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let e = &loaded.spec.experiment;
    let at = |m: String| loaded.error_at("experiment", Some("boots"), m);
    if e.boots == 0 {
        return Err(at("must be at least 1".into()));
    }
    if e.boots == 1 {
        return Ok(());
    }
    if e.boots > e.repetitions {
        return Err(at(format!(
            "{} boots for {} repetitions: at most one boot per repetition",
            e.boots, e.repetitions
        )));
    }
    if e.executor != ExecutorKind::Qemu {
        return Err(at(format!(
            "spreading repetitions over boots needs the qemu executor (this spec runs on {:?})",
            e.executor
        )));
    }
    if loaded.spec.vm.boot == BootPolicy::PerPoint {
        return Err(at(
            "[vm] boot = \"per-point\" already boots for every point: drop boots".into(),
        ));
    }
    Ok(())
}

fn check_sections(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let spec = &loaded.spec;
    if let Err(why) = check_experiment_name(&spec.experiment.name) {
        return Err(loaded.error_at("experiment", Some("name"), why));
    }
    if spec.experiment.repetitions == 0 {
        return Err(loaded.error_at("experiment", Some("repetitions"), "must be at least 1"));
    }
    check_boots(loaded)?;
    let limit = spec.experiment.noisy_above_pct;
    if !(limit > 0.0 && limit <= 100.0) {
        return Err(loaded.error_at(
            "experiment",
            Some("noisy_above_pct"),
            format!("{limit} is not a share of the host's CPU: between 0 and 100 (%)"),
        ));
    }
    if spec.vm.vcpus == 0 || spec.vm.vcpus > 64 {
        return Err(loaded.error_at("vm", Some("vcpus"), "must be between 1 and 64"));
    }
    if spec.vm.memory.bytes() < 128 << 20 {
        return Err(loaded.error_at(
            "vm",
            Some("memory"),
            format!("{} is too small: at least 128M", spec.vm.memory),
        ));
    }
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
    check_image_name(loaded)?;
    check_slurm(loaded)?;
    if spec.topology.is_some() && spec.experiment.executor != ExecutorKind::Qemu {
        return Err(loaded.error_at(
            "topology",
            Some("kind"),
            "a pair topology needs executor = \"qemu\"",
        ));
    }
    for (axis, values) in &spec.sweep {
        if values.is_empty() {
            return Err(loaded.error_at(
                "sweep",
                Some(axis),
                "an empty sweep axis gives no points",
            ));
        }
        if axis == "kind" {
            return Err(loaded.error_at("sweep", Some(axis), "the workload kind cannot be swept"));
        }
    }
    Ok(())
}

/// `filesystem` and `mount` of a device: the key at fault and why.
fn check_filesystem(loaded: &LoadedSpec, d: &DeviceSpec) -> Result<(), (&'static str, String)> {
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

/// `[image] name`: the recipe must exist and load.
fn check_image_name(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let Some(name) = &loaded.spec.image.name else {
        return Ok(());
    };
    crate::image::recipe::load(&crate::image::recipes_dir(), name)
        .map_err(|e| loaded.error_at("image", Some("name"), e.to_string()))?;
    let serial = crate::image::rootfs::SERIAL;
    if let Some(i) = loaded.spec.devices.iter().position(|d| d.name == serial) {
        return Err(loaded.error_at_path(
            &[
                PathSeg::Key("devices"),
                PathSeg::Index(i),
                PathSeg::Key("name"),
            ],
            format!("{serial:?} is the root image's disk: choose another name"),
        ));
    }
    Ok(())
}

/// Longest experiment name: it is one path component of every run
/// directory, well under any filesystem's limit.
pub const MAX_NAME_LEN: usize = 64;

/// The experiment name becomes `results/<name>/`, so it must be one plain
/// path component that stays inside `results/`: no `/`, not `.` or `..`,
/// not hidden, no control characters.
pub fn check_experiment_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "is {} bytes long: at most {MAX_NAME_LEN} (it names the results directory)",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!(
            "{name:?} would put the run directory outside results/: use a plain name"
        ));
    }
    if name.starts_with('.') {
        return Err(format!(
            "{name:?} starts with '.': the results directory would be hidden"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Err(format!(
            "{name:?}: use only letters, digits, '-', '_' and '.' (it names the results directory)"
        ));
    }
    Ok(())
}

/// `[slurm]` values Slurm would refuse later, after the inputs are built.
fn check_slurm(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let s = &loaded.spec.slurm;
    let at = |key: &str, message: String| loaded.error_at("slurm", Some(key), message);
    if s.chunk == 0 {
        return Err(at("chunk", "0 points per task: give at least 1".into()));
    }
    if s.task_executor == ExecutorKind::Slurm {
        return Err(at(
            "task_executor",
            "a task runs its points itself: use \"qemu\" or \"host\"".into(),
        ));
    }
    if s.cpus == Some(0) {
        return Err(at("cpus", "0 CPUs per task: give at least 1".into()));
    }
    if s.max_parallel == Some(0) {
        return Err(at("max_parallel", "0 tasks at once would never run".into()));
    }
    if let Some(t) = s.time
        && t.0 < std::time::Duration::from_secs(60)
    {
        return Err(at(
            "time",
            format!("{:?}: Slurm counts time in minutes; give at least 1m", t.0),
        ));
    }
    for (key, value) in [("partition", &s.partition), ("constraint", &s.constraint)] {
        if let Some(v) = value
            && (v.is_empty() || v.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(at(key, format!("{v:?}: empty or with spaces")));
        }
    }
    for (i, a) in s.sbatch_args.iter().enumerate() {
        if !a.starts_with("--") || a.contains('\n') || a.starts_with("--array") {
            return Err(loaded.error_at_path(
                &[
                    PathSeg::Key("slurm"),
                    PathSeg::Key("sbatch_args"),
                    PathSeg::Index(i),
                ],
                format!("{a:?}: give long sbatch options (--name=value); --array is the testbed's"),
            ));
        }
    }
    Ok(())
}

fn toml_error(path: &Path, source: &str, e: &toml::de::Error) -> SpecError {
    let span = e.span();
    let (line, column) = match &span {
        Some(span) => {
            let (l, c) = line_col(source, span.start);
            (Some(l), Some(c))
        }
        None => (None, None),
    };
    // The key or value at the error span names the field best.
    let field = span
        .and_then(|s| path_at(source, s.start))
        .map(|p| field_name(&p.iter().map(OwnedSeg::as_seg).collect::<Vec<_>>()));
    SpecError {
        file: path.to_path_buf(),
        line,
        column,
        field,
        message: e.message().trim().to_string(),
    }
}

// Moved to the host layer (crate::fsutil), where image recipes find it too.
pub use crate::fsutil::line_col;

/// Where `(key, value)` is written: the table header (`[vm]`, `[[devices]]`)
/// for a table opened by one, else the key.
fn entry_offset(key: &toml::Spanned<toml::de::DeString<'_>>, value: &SpannedValue<'_>) -> usize {
    key.span().start.min(value.span().start)
}

type SpannedValue<'i> = toml::Spanned<toml::de::DeValue<'i>>;

/// Byte offset of the deepest part of `path` written in `source`, from the
/// spans of the TOML parser. `None` when the source does not parse or not
/// even the first key is written.
fn locate(source: &str, path: &[PathSeg<'_>]) -> Option<usize> {
    let doc = toml::de::DeTable::parse(source).ok()?;
    let mut table = Some(doc.get_ref());
    let mut array: Option<&[SpannedValue<'_>]> = None;
    let mut found = None;
    for seg in path {
        let value = match seg {
            PathSeg::Key(k) => {
                let Some((key, value)) = table.and_then(|t| t.get_key_value(*k)) else {
                    break;
                };
                found = Some(entry_offset(key, value));
                value
            }
            PathSeg::Index(i) => {
                let Some(value) = array.and_then(|a| a.get(*i)) else {
                    break;
                };
                found = Some(value.span().start);
                value
            }
        };
        table = value.get_ref().as_table();
        array = value.get_ref().as_array().map(|a| a.as_ref());
    }
    found
}

/// A [`PathSeg`] that owns its key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OwnedSeg {
    Key(String),
    Index(usize),
}

impl OwnedSeg {
    fn as_seg(&self) -> PathSeg<'_> {
        match self {
            OwnedSeg::Key(k) => PathSeg::Key(k),
            OwnedSeg::Index(i) => PathSeg::Index(*i),
        }
    }
}

/// The path of the innermost key or value written at `offset`.
fn path_at(source: &str, offset: usize) -> Option<Vec<OwnedSeg>> {
    let doc = toml::de::DeTable::parse(source).ok()?;
    let mut path = Vec::new();
    path_in_table(doc.get_ref(), offset, &mut path).then_some(path)
}

fn span_holds(span: &std::ops::Range<usize>, offset: usize) -> bool {
    span.contains(&offset) || span.start == offset
}

/// Pushes onto `path` the entries of `table` down to the one at `offset`.
fn path_in_table(table: &toml::de::DeTable<'_>, offset: usize, path: &mut Vec<OwnedSeg>) -> bool {
    for (key, value) in table {
        path.push(OwnedSeg::Key(key.get_ref().to_string()));
        // A table or an array of tables may hold the offset anywhere below
        // its header (or its first header), so always look inside.
        if path_in_value(value.get_ref(), offset, path)
            || span_holds(&key.span(), offset)
            || span_holds(&value.span(), offset)
        {
            return true;
        }
        path.pop();
    }
    false
}

fn path_in_value(value: &toml::de::DeValue<'_>, offset: usize, path: &mut Vec<OwnedSeg>) -> bool {
    if let Some(t) = value.as_table() {
        return path_in_table(t, offset, path);
    }
    if let Some(a) = value.as_array() {
        for (i, el) in a.iter().enumerate() {
            path.push(OwnedSeg::Index(i));
            if path_in_value(el.get_ref(), offset, path) || span_holds(&el.span(), offset) {
                return true;
            }
            path.pop();
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[experiment]
name = "smoke"
seed = 7

[vm]
memory = "512M"

[[devices]]
name = "data"
kind = "nvme"
size = "64M"

[workload]
kind = "randread"
device = "data"
reads_per_thread = 100

[sweep]
threads = [1, 2]
"#;

    fn err(src: &str) -> SpecError {
        parse(Path::new("x.toml"), src).unwrap_err()
    }

    #[test]
    fn a_good_spec_parses_with_defaults() {
        let s = parse(Path::new("x.toml"), GOOD).unwrap();
        assert_eq!(s.spec.vm.vcpus, 2);
        assert_eq!(s.spec.vm.memory.bytes(), 512 << 20);
        assert_eq!(s.spec.kernel.name, "debian-cloud");
        assert_eq!(s.base_workload.kind(), "randread");
        assert_eq!(s.spec.sweep["threads"].len(), 2);
    }

    #[test]
    fn unknown_key_names_file_line_and_field() {
        let e = err(&GOOD.replace("memory = \"512M\"", "memory = \"512M\"\nmemroy = 1"));
        assert_eq!(e.line, Some(8), "{e}");
        assert!(e.to_string().starts_with("x.toml:8:"), "{e}");
        assert!(e.message.contains("unknown field `memroy`"), "{e}");
    }

    #[test]
    fn bad_size_names_the_field_and_unit() {
        let e = err(&GOOD.replace("size = \"64M\"", "size = \"12QB\""));
        assert_eq!(e.line, Some(12), "{e}");
        assert!(e.message.contains("unknown unit \"QB\""), "{e}");
        assert_eq!(e.field.as_deref(), Some("devices[0].size"), "{e}");
    }

    #[test]
    fn wrong_type_is_reported() {
        let e = err(&GOOD.replace("seed = 7", "seed = \"seven\""));
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains("invalid type"), "{e}");
    }

    #[test]
    fn unknown_workload_field_points_at_its_line() {
        let e = err(&GOOD.replace("reads_per_thread = 100", "reads_per_thred = 100"));
        assert!(e.message.contains("unknown field `reads_per_thred`"), "{e}");
        assert_eq!(e.line, Some(17), "{e}");
        assert_eq!(e.field.as_deref(), Some("workload.reads_per_thred"));
    }

    #[test]
    fn empty_sweep_is_refused() {
        let e = err(&GOOD.replace("threads = [1, 2]", "threads = []"));
        assert!(e.message.contains("empty sweep"), "{e}");
        assert_eq!(e.line, Some(20), "{e}");
    }

    #[test]
    fn device_checks() {
        let e = err(&GOOD.replace("size = \"64M\"", "size = \"1000\""));
        assert!(e.message.contains("multiple of the block size"), "{e}");
        let e = err(&GOOD.replace("size = \"64M\"\n", ""));
        assert!(e.message.contains("needs a size"), "{e}");
        let e = err(&GOOD.replace("kind = \"nvme\"\nsize = \"64M\"", "kind = \"vfio\""));
        assert!(e.message.contains("PCI address explicitly"), "{e}");
    }

    #[test]
    fn passthrough_takes_bind_and_vfio_stays_its_alias() {
        let block = "kind = \"passthrough\"\npci = \"0000:01:00.0\"\nbind = true";
        let s = parse(
            Path::new("x.toml"),
            &GOOD.replace("kind = \"nvme\"\nsize = \"64M\"", block),
        )
        .unwrap();
        assert_eq!(s.spec.devices[0].kind, DeviceKind::Vfio);
        assert!(s.spec.devices[0].bind);
        let old = GOOD.replace(
            "kind = \"nvme\"\nsize = \"64M\"",
            "kind = \"vfio\"\npci = \"0000:01:00.0\"",
        );
        let s = parse(Path::new("x.toml"), &old).unwrap();
        assert_eq!(s.spec.devices[0].kind, DeviceKind::Vfio);
        assert!(!s.spec.devices[0].bind, "bind defaults to false");
        // bind on an emulated device: the error names the field and line.
        let e = err(&GOOD.replace("size = \"64M\"", "size = \"64M\"\nbind = true"));
        assert_eq!(e.field.as_deref(), Some("devices[0].bind"), "{e}");
        assert_eq!(e.line, Some(13), "{e}");
        assert!(
            e.message.contains("only passthrough devices take bind"),
            "{e}"
        );
        let e = err(&GOOD
            .replace("kind = \"nvme\"\nsize = \"64M\"", block)
            .replace("seed = 7", "seed = 7\nexecutor = \"host\""));
        assert_eq!(e.field.as_deref(), Some("devices[0].bind"), "{e}");
        assert!(e.message.contains("needs executor = \"qemu\""), "{e}");
    }

    /// GOOD with a second `[[devices]]` block (lines 14 to 17) before
    /// `[workload]`, its `size` line replaced by `size_line`.
    fn two_devices(size_line: &str) -> String {
        let second =
            format!("[[devices]]\nname = \"logs\"\nkind = \"nvme\"\n{size_line}\n\n[workload]");
        GOOD.replace("[workload]", &second)
    }

    #[test]
    fn an_error_in_the_second_device_points_at_the_second_block() {
        let src = two_devices("size = \"64M\"");
        assert_eq!(src.lines().nth(13), Some("[[devices]]"));
        parse(Path::new("x.toml"), &src).unwrap();

        // A check of the whole spec: the key is also written in the first
        // block (line 12), the error is about the second one's (line 17).
        let e = err(&two_devices("size = \"1000\""));
        assert_eq!((e.line, e.column), (Some(17), Some(1)), "{e}");
        assert_eq!(e.field.as_deref(), Some("devices[1].size"), "{e}");
        assert!(
            e.to_string()
                .starts_with("x.toml:17:1: devices[1].size: 1000 is not"),
            "{e}"
        );

        // A value the TOML types refuse.
        let e = err(&two_devices("size = \"12QB\""));
        assert_eq!(e.line, Some(17), "{e}");
        assert_eq!(e.field.as_deref(), Some("devices[1].size"), "{e}");
        assert!(e.to_string().starts_with("x.toml:17:"), "{e}");
        assert!(e.message.contains("unknown unit \"QB\""), "{e}");

        // A name taken by the first block (line 10).
        let e = err(&two_devices("size = \"64M\"").replace("\"logs\"", "\"data\""));
        assert_eq!(e.line, Some(15), "{e}");
        assert_eq!(e.field.as_deref(), Some("devices[1].name"), "{e}");
        assert!(e.message.contains("declared twice"), "{e}");

        // A key not written: the error points at the second block's header.
        let e = err(&two_devices(""));
        assert_eq!((e.line, e.column), (Some(14), Some(1)), "{e}");
        assert_eq!(e.field.as_deref(), Some("devices[1].size"), "{e}");
        assert!(e.message.contains("needs a size"), "{e}");
    }

    #[test]
    fn a_missing_field_in_the_second_device_names_it() {
        let e = err(&two_devices("size = \"64M\"").replace(
            "kind = \"nvme\"\nsize = \"64M\"\n\n[workload]",
            "size = \"64M\"\n\n[workload]",
        ));
        assert!(e.message.contains("missing field `kind`"), "{e}");
        assert_eq!(e.line, Some(14), "{e}");
        assert_eq!(e.field.as_deref(), Some("devices[1]"), "{e}");
    }

    #[test]
    fn a_formatted_device_is_checked_where_it_is_written() {
        let fs = "size = \"64M\"\nfilesystem = \"ext4\"\nmount = \"/mnt/scratch\"";
        let with_mkfs = |src: String| {
            src.replace(
                "[workload]",
                "[image]\ninclude = [\"mkfs.ext4\"]\n\n[workload]",
            )
        };
        let s = parse(
            Path::new("x.toml"),
            &with_mkfs(GOOD.replace("size = \"64M\"", fs)),
        )
        .unwrap();
        assert_eq!(
            s.spec.devices[0].mount_point().as_deref(),
            Some("/mnt/scratch")
        );

        // mkfs.ext4 must come from somewhere.
        let e = err(&GOOD.replace("size = \"64M\"", fs));
        assert_eq!(e.field.as_deref(), Some("devices[0].filesystem"), "{e}");
        assert_eq!(e.line, Some(13), "{e}");
        assert!(e.message.contains("include = [\"mkfs.ext4\"]"), "{e}");

        for (bad, field, fragment) in [
            ("/tmp/x", "devices[0].mount", "below /mnt/"),
            ("/mnt/../etc", "devices[0].mount", "below /mnt/"),
            ("/mnt/", "devices[0].mount", "below /mnt/"),
        ] {
            let e = err(&with_mkfs(
                GOOD.replace("size = \"64M\"", &fs.replace("/mnt/scratch", bad)),
            ));
            assert_eq!(e.field.as_deref(), Some(field), "{bad}: {e}");
            assert!(e.message.contains(fragment), "{bad}: {e}");
            assert_eq!(e.line, Some(14), "{e}");
        }
        let e = err(&with_mkfs(GOOD.replace(
            "size = \"64M\"",
            &fs.replace("size = \"64M\"", "size = \"64M\"\nbackend = \"null\""),
        )));
        assert!(e.message.contains("null backend keeps no data"), "{e}");
        let e = err(&GOOD.replace("size = \"64M\"", "size = \"64M\"\nmount = \"/mnt/x\""));
        assert!(e.message.contains("needs filesystem"), "{e}");
        // Never a disk the testbed did not create.
        let e = err(&with_mkfs(GOOD.replace(
            "kind = \"nvme\"\nsize = \"64M\"",
            "kind = \"passthrough\"\npci = \"0000:01:00.0\"\nfilesystem = \"ext4\"",
        )));
        assert!(e.message.contains("never formatted"), "{e}");
    }

    #[test]
    fn an_image_name_must_be_a_recipe() {
        let with = |name: &str| {
            GOOD.replace(
                "[workload]",
                &format!("[image]\nname = \"{name}\"\n\n[workload]"),
            )
        };
        let s = parse(Path::new("x.toml"), &with("test-tiny")).unwrap();
        assert_eq!(s.spec.image.name.as_deref(), Some("test-tiny"));
        let e = err(&with("no-such-image"));
        assert_eq!(e.field.as_deref(), Some("image.name"), "{e}");
        assert_eq!(e.line, Some(15), "{e}");
        assert!(e.message.contains("no-such-image.toml"), "{e}");
        let e = err(&with("test-tiny")
            .replace("name = \"data\"", "name = \"testbed-root\"")
            .replace("device = \"data\"", "device = \"testbed-root\""));
        assert!(e.message.contains("root image's disk"), "{e}");
    }

    #[test]
    fn errors_in_dotted_sections_and_sweeps_are_located() {
        let s = parse(Path::new("x.toml"), GOOD).unwrap();
        let e = s.error_at("sweep", Some("threads"), "m");
        assert_eq!((e.line, e.column), (Some(20), Some(1)), "{e}");
        assert_eq!(e.field.as_deref(), Some("sweep.threads"));
        // A key not written points at its section's header.
        let e = s.error_at("vm", Some("vcpus"), "m");
        assert_eq!((e.line, e.column), (Some(6), Some(1)), "{e}");
        // A section not written at all has no line.
        let e = s.error_at("topology.server", None, "m");
        assert_eq!(e.line, None, "{e}");
        assert_eq!(e.to_string(), "x.toml: topology.server: m");
    }

    #[test]
    fn the_experiment_name_is_one_plain_path_component() {
        for (name, fragment) in [
            ("..", "outside results/"),
            (".", "outside results/"),
            (".hidden", "starts with '.'"),
            ("a/b", "use only letters"),
            ("a\\u0000b", "use only letters"),
            ("tab\\tname", "use only letters"),
            ("", "must not be empty"),
        ] {
            let e = err(&GOOD.replace("name = \"smoke\"", &format!("name = \"{name}\"")));
            assert!(e.message.contains(fragment), "{name:?}: {e}");
            assert_eq!(e.field.as_deref(), Some("experiment.name"), "{e}");
            assert_eq!(e.line, Some(3), "{e}");
        }
        let long = "x".repeat(MAX_NAME_LEN + 1);
        let e = err(&GOOD.replace("\"smoke\"", &format!("\"{long}\"")));
        assert!(e.message.contains("at most 64"), "{e}");
        for ok in ["smoke", "a.b", "x..y", "fig3-baseline_quick"] {
            check_experiment_name(ok).unwrap();
        }
    }

    #[test]
    fn line_col_of_an_offset_inside_a_character_does_not_panic() {
        let src = "a = \"é\"\nb";
        // Byte 6 is the second byte of 'é'.
        assert_eq!(line_col(src, 6), (1, 6));
        assert_eq!(line_col(src, 999), (2, 2));
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let e = load(Path::new("/nonexistent/spec.toml")).unwrap_err();
        assert!(
            e.to_string()
                .contains("/nonexistent/spec.toml: cannot read spec"),
            "{e}"
        );
    }
}
