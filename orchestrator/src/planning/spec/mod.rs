//! Experiment specs: strict TOML, validated in full before anything boots.
//!
//! Errors carry the file, line, column and the dotted field, e.g.
//! `experiments/smoke.toml:12:1: devices[0].size: invalid size "12QB" ...`.
//!
//! One file per section, each with its types and its checks: `experiment`,
//! `vm`, `guest` (`[kernel]`, `[image]`), `devices` (and `device_kinds`,
//! one module per kind), `timeouts`, `limits`, `slurm`, `topology`; `located` turns
//! a field's path into the file, line and column of an error. Here: the
//! whole spec, loading, the workload table and `[sweep]`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use testbed_agent::workload::Workload;

use crate::host::units::{Size, Span};

pub mod device_kinds;
mod devices;
mod experiment;
mod guest;
mod limits;
mod located;
mod sections;
mod slurm;
mod timeouts;
mod topology;
mod vm;
pub use device_kinds::{DeviceKind, Origin};
pub use devices::*;
pub use experiment::*;
pub use guest::*;
pub use limits::*;
pub use located::*;
pub use slurm::*;
pub use timeouts::*;
pub use topology::*;
pub use vm::*;

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
    /// Combinations of the sweep not to run (`[[sweep_skip]]`): a
    /// combination is skipped when, for every axis an entry names, its
    /// value is the entry's value or one of its list.
    #[serde(default)]
    pub sweep_skip: Vec<BTreeMap<String, toml::Value>>,
    #[serde(default)]
    pub timeouts: Timeouts,
    /// What one point may cost the host (memory, CPU time).
    #[serde(default)]
    pub limits: Limits,
    /// Two VMs on one virtual link (qemu executor), e.g. Flight remote.
    #[serde(default)]
    pub topology: Option<Topology>,
    /// Resources and chunking of the Slurm job array (`executor = "slurm"`
    /// or `testbed run --executor slurm`).
    #[serde(default)]
    pub slurm: SlurmSection,
}

fn one() -> u32 {
    1
}

// Defined with the accelerator probe (machine layer) that decides on it.
pub use crate::machine::qemu::accel::AccelChoice;

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

/// Reads and type-checks a spec file. Sweep points are checked by `plan`.
pub fn load(path: &Path) -> Result<LoadedSpec, SpecError> {
    let source = std::fs::read_to_string(path).map_err(|e| unreadable(path, &e))?;
    parse(path, &source)
}

/// The error of a spec file that could not be read at all.
fn unreadable(path: &Path, e: &std::io::Error) -> SpecError {
    SpecError {
        file: path.to_path_buf(),
        line: None,
        column: None,
        field: None,
        message: format!("cannot read spec: {e}"),
    }
}

pub fn parse(path: &Path, source: &str) -> Result<LoadedSpec, SpecError> {
    let spec: Spec = toml::from_str(source).map_err(|e| toml_error(path, source, &e))?;
    let mut loaded = loaded_without_workloads(path, source, spec);
    loaded.base_workload = workload_from_table(&loaded, &loaded.spec.workload, None)?;
    loaded.server_workload = server_workload(&loaded)?;
    check_sections(&loaded)?;
    Ok(loaded)
}

/// At most this many errors of one spec file are reported
/// ([`load_all`]); the rest are counted.
pub const MAX_ERRORS: usize = 20;

/// Reads and type-checks a spec file as [`load`] does, but reports every
/// error it finds rather than the first: each section's (`[vm]`, each
/// `[[devices]]` entry, `[workload]`, …) first error, in file order.
pub fn load_all(path: &Path) -> Result<LoadedSpec, Vec<SpecError>> {
    let source = std::fs::read_to_string(path).map_err(|e| vec![unreadable(path, &e)])?;
    parse_all(path, &source)
}

/// [`parse`] reporting every error (see [`load_all`]), in file order.
pub fn parse_all(path: &Path, source: &str) -> Result<LoadedSpec, Vec<SpecError>> {
    let spec: Spec = match toml::from_str(source) {
        Ok(spec) => spec,
        Err(e) => {
            let mut errors = vec![toml_error(path, source, &e)];
            for e in sections::errors(path, source) {
                push_new(&mut errors, e);
            }
            sort_by_line(&mut errors);
            return Err(errors);
        }
    };
    let mut loaded = loaded_without_workloads(path, source, spec);
    let mut errors = Vec::new();
    match workload_from_table(&loaded, &loaded.spec.workload, None) {
        Ok(w) => loaded.base_workload = w,
        Err(e) => errors.push(e),
    }
    match server_workload(&loaded) {
        Ok(w) => loaded.server_workload = w,
        Err(e) => errors.push(e),
    }
    for check in SECTION_CHECKS {
        if let Err(e) = check(&loaded) {
            push_new(&mut errors, e);
        }
    }
    if errors.is_empty() {
        Ok(loaded)
    } else {
        sort_by_line(&mut errors);
        Err(errors)
    }
}

/// Adds `e` unless an error about the same field at the same place is
/// already there.
pub fn push_new(errors: &mut Vec<SpecError>, e: SpecError) {
    if !errors
        .iter()
        .any(|o| o.file == e.file && o.line == e.line && o.field == e.field)
    {
        errors.push(e);
    }
}

/// File order; errors with no line (a section not written) last.
fn sort_by_line(errors: &mut [SpecError]) {
    errors.sort_by_key(|e| (e.line.is_none(), e.line, e.column));
}

fn loaded_without_workloads(path: &Path, source: &str, spec: Spec) -> LoadedSpec {
    LoadedSpec {
        path: path.to_path_buf(),
        source: source.to_string(),
        spec,
        // Replaced once the raw table type-checks.
        base_workload: Workload::Fault(testbed_agent::workload::fault::FaultParams {
            mode: testbed_agent::workload::fault::FaultMode::Error,
            after_s: 0.0,
            size: 1000,
        }),
        server_workload: None,
    }
}

/// The server VM's workload of a pair topology, type-checked.
fn server_workload(loaded: &LoadedSpec) -> Result<Option<Workload>, SpecError> {
    let Some(t) = &loaded.spec.topology else {
        return Ok(None);
    };
    Workload::deserialize(toml::Value::Table(t.server.clone()))
        .map(Some)
        .map_err(|e| loaded.error_at("topology.server", None, e.to_string().trim().to_string()))
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

/// Runs the spec on `executor` instead of its own (`testbed run
/// --executor`, a Slurm task's executor), checked again: what a spec may
/// ask for depends on where it runs (a formatted device needs the VM, and
/// on the host its mount point would be the host's own directory).
pub fn set_executor(loaded: &mut LoadedSpec, executor: ExecutorKind) -> Result<(), SpecError> {
    loaded.spec.experiment.executor = executor;
    check_sections(loaded)
}

/// The checks of each section once the whole spec type-checks, in order.
type SectionCheck = fn(&LoadedSpec) -> Result<(), SpecError>;
const SECTION_CHECKS: [SectionCheck; 8] = [
    check_experiment,
    check_limits,
    check_vm,
    check_devices,
    check_image_name,
    check_slurm,
    check_topology,
    check_sweep,
];

fn check_sections(loaded: &LoadedSpec) -> Result<(), SpecError> {
    SECTION_CHECKS.iter().try_for_each(|check| check(loaded))
}

/// `[limits]`: a process limit the run's own processes fit under.
fn check_limits(loaded: &LoadedSpec) -> Result<(), SpecError> {
    match loaded.spec.limits.processes {
        Some(n) if n < MIN_PROCESSES => Err(loaded.error_at(
            "limits",
            Some("processes"),
            format!("{n} is too few: QEMU or the agent alone needs more; at least {MIN_PROCESSES}"),
        )),
        _ => Ok(()),
    }
}

/// The fewest processes and threads `[limits] processes` may allow: QEMU
/// runs a dozen threads before the guest does anything.
const MIN_PROCESSES: u32 = 32;

/// `[sweep]`: every axis has values, and the workload kind stays fixed.
fn check_sweep(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let spec = &loaded.spec;
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
    check_sweep_skip(loaded)
}

/// `[[sweep_skip]]`: each entry names sweep axes only, with values those
/// axes have, so a typo cannot silently skip nothing.
fn check_sweep_skip(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let spec = &loaded.spec;
    for (i, entry) in spec.sweep_skip.iter().enumerate() {
        let at = |key: Option<&str>, m: String| {
            let mut path = vec![PathSeg::Key("sweep_skip"), PathSeg::Index(i)];
            path.extend(key.map(PathSeg::Key));
            loaded.error_at_path(&path, m)
        };
        if entry.is_empty() {
            return Err(at(None, "an empty entry would skip every point".into()));
        }
        for (axis, value) in entry {
            let Some(values) = spec.sweep.get(axis) else {
                let axes: Vec<&str> = spec.sweep.keys().map(String::as_str).collect();
                return Err(at(
                    Some(axis),
                    format!("{axis} is not a sweep axis (axes: {})", axes.join(", ")),
                ));
            };
            for v in skip_values(value) {
                if !values.contains(v) {
                    return Err(at(
                        Some(axis),
                        format!("{v} is not one of the sweep's {axis} values"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A `[[sweep_skip]]` value: one value, or any of a list.
pub fn skip_values(v: &toml::Value) -> &[toml::Value] {
    match v {
        toml::Value::Array(a) => a,
        one => std::slice::from_ref(one),
    }
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
        // `testbed run --executor host` checks the spec again for the host,
        // where /mnt/scratch would be the host's own directory.
        let mut on_host = s.clone();
        let e = set_executor(&mut on_host, ExecutorKind::Host).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("devices[0].filesystem"), "{e}");
        assert!(e.message.contains("needs executor = \"qemu\""), "{e}");
        let mut in_vm = s.clone();
        set_executor(&mut in_vm, ExecutorKind::Qemu).unwrap();

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
