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
    #[serde(default)]
    pub seed: u64,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccelChoice {
    #[default]
    Auto,
    Kvm,
    Tcg,
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
    /// Host programs copied into the initramfs with their shared libraries.
    #[serde(default)]
    pub include: Vec<String>,
    /// Extra kernel modules to load (dependencies are added).
    #[serde(default)]
    pub modules: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    Nvme,
    VirtioBlk,
    /// A real NVMe controller passed through with vfio-pci.
    Vfio,
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
    /// vfio only: the PCI address of the controller, e.g. "0000:3b:00.0".
    #[serde(default)]
    pub pci: Option<String>,
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
    /// An error about `field` in `[section]`, located at that key's line.
    pub fn error_at(
        &self,
        section: &str,
        key: Option<&str>,
        message: impl Into<String>,
    ) -> SpecError {
        let (line, column) = locate(&self.source, section, key);
        SpecError {
            file: self.path.clone(),
            line,
            column,
            field: Some(match key {
                Some(k) => format!("{section}.{k}"),
                None => section.to_string(),
            }),
            message: message.into(),
        }
    }
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

fn check_sections(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let spec = &loaded.spec;
    if spec.experiment.name.trim().is_empty() {
        return Err(loaded.error_at("experiment", Some("name"), "must not be empty"));
    }
    if !spec
        .experiment
        .name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Err(loaded.error_at(
            "experiment",
            Some("name"),
            "use only letters, digits, '-', '_' and '.' (it names the results directory)",
        ));
    }
    if spec.experiment.repetitions == 0 {
        return Err(loaded.error_at("experiment", Some("repetitions"), "must be at least 1"));
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
            let mut e = loaded.error_at("devices", Some(key), msg);
            e.field = Some(format!("devices[{i}].{key}"));
            e
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
        match d.kind {
            DeviceKind::Vfio => {
                if d.pci.is_none() {
                    return Err(at(
                        "pci",
                        "a vfio device must name its PCI address explicitly".into(),
                    ));
                }
                if d.size.is_some() {
                    return Err(at(
                        "size",
                        "a passed-through device has its own size".into(),
                    ));
                }
            }
            DeviceKind::Nvme | DeviceKind::VirtioBlk => {
                if d.pci.is_some() {
                    return Err(at("pci", "only vfio devices take a PCI address".into()));
                }
                let Some(size) = d.size else {
                    return Err(at(
                        "size",
                        "an emulated device needs a size, e.g. size = \"256M\"".into(),
                    ));
                };
                if size.bytes() == 0 || size.bytes() % u64::from(d.logical_block_size) != 0 {
                    return Err(at(
                        "size",
                        format!(
                            "{size} is not a positive multiple of the block size {}",
                            d.logical_block_size
                        ),
                    ));
                }
            }
        }
        if d.latency_ns.is_some() && d.backend != Backend::Null {
            return Err(at(
                "latency_ns",
                "only the null backend takes latency_ns".into(),
            ));
        }
        if let Some(ns) = d.namespaces {
            if d.kind != DeviceKind::Nvme {
                return Err(at("namespaces", "only nvme devices have namespaces".into()));
            }
            if !(1..=8).contains(&ns) {
                return Err(at("namespaces", format!("{ns} must be between 1 and 8")));
            }
        }
        if let Some(q) = d.queues
            && !(1..=64).contains(&q)
        {
            return Err(at("queues", format!("{q} must be between 1 and 64")));
        }
    }
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

fn toml_error(path: &Path, source: &str, e: &toml::de::Error) -> SpecError {
    let (line, column) = match e.span() {
        Some(span) => {
            let (l, c) = line_col(source, span.start);
            (Some(l), Some(c))
        }
        None => (None, None),
    };
    // The key at the error span names the field best; fall back to the message.
    let field = e.span().and_then(|s| field_path_at(source, s.start));
    SpecError {
        file: path.to_path_buf(),
        line,
        column,
        field,
        message: e.message().trim().to_string(),
    }
}

/// 1-based line and column of a byte offset.
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let before = &source[..offset.min(source.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |p| before.len() - p - 1)
        + 1;
    (line, col)
}

/// `section.key` for the line holding `offset`, from the last header above it.
fn field_path_at(source: &str, offset: usize) -> Option<String> {
    let (line_no, _) = line_col(source, offset);
    let lines: Vec<&str> = source.lines().collect();
    let line = lines.get(line_no - 1)?.trim();
    let key = line
        .split('=')
        .next()
        .map(str::trim)
        .filter(|k| !k.is_empty() && !k.starts_with('['));
    let section = lines[..line_no - 1]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').to_string());
    match (section, key) {
        (Some(s), Some(k)) => Some(format!("{s}.{k}")),
        (None, Some(k)) => Some(k.to_string()),
        (Some(s), None) if line.starts_with('[') => Some(s),
        _ => None,
    }
}

/// Line and column of `key = ...` inside `[section]` (or of the header).
fn locate(source: &str, section: &str, key: Option<&str>) -> (Option<usize>, Option<usize>) {
    let mut in_section = false;
    let mut header = None;
    for (i, raw) in source.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            let name = line.trim_matches(|c| c == '[' || c == ']').trim();
            in_section = name == section;
            if in_section && header.is_none() {
                header = Some(i + 1);
            }
            continue;
        }
        if in_section && let Some(k) = key {
            let lhs = line
                .split('=')
                .next()
                .unwrap_or("")
                .trim()
                .trim_matches('"');
            if line.contains('=') && lhs == k {
                let col = raw.len() - raw.trim_start().len() + 1;
                return (Some(i + 1), Some(col));
            }
        }
    }
    (header, header.map(|_| 1))
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
        assert_eq!(e.field.as_deref(), Some("devices.size"), "{e}");
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
    fn missing_file_is_a_clear_error() {
        let e = load(Path::new("/nonexistent/spec.toml")).unwrap_err();
        assert!(
            e.to_string()
                .contains("/nonexistent/spec.toml: cannot read spec"),
            "{e}"
        );
    }
}
