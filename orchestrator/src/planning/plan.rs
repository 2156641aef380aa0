//! A spec expanded into points: the cartesian product of the sweep axes,
//! times repetitions, each with its concrete workload and seed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use testbed_agent::protocol::DeviceRef;
use testbed_agent::workload::{ParamError, Workload};

use crate::host::units::Size;
use crate::planning::spec::{ExecutorKind, LoadedSpec, Origin, PathSeg, SpecError, TopologyKind};

/// Most threads (or jobs, or streams) one workload may start in the guest:
/// each is a thread or process with its own stack, and a typo such as
/// `threads = 1000000` would otherwise bring the guest down mid-run.
pub const MAX_THREADS: u64 = 1024;

/// Workload fields that count threads or processes the guest starts.
const THREAD_FIELDS: [&str; 3] = ["threads", "numjobs", "streams"];

/// Most points one spec may expand to (sweep combinations × repetitions):
/// the plan is held in memory and every point is a guest run.
pub const MAX_POINTS: u64 = 100_000;

/// Bytes of sweep values one point may hold (the largest value of each
/// axis, written as TOML, summed).
pub const MAX_SWEEP_BYTES_PER_POINT: usize = 4096;

/// What the host offers, against which a plan is checked before boot.
#[derive(Debug, Clone)]
pub struct HostLimits {
    /// MemTotal of /proc/meminfo; `None` when it cannot be read (no check).
    pub mem_total: Option<u64>,
    /// Where the figure definitions live (`experiments/figures`).
    pub figures_dir: PathBuf,
    /// The CPUs the testbed may use (its affinity); `None`: not checked.
    pub cpus: Option<Vec<u32>>,
}

impl HostLimits {
    /// This host and this source tree.
    pub fn current() -> Self {
        HostLimits {
            mem_total: crate::machine::hostinfo::mem_total_bytes(),
            figures_dir: crate::host::paths::figure_defs(),
            cpus: Some(crate::machine::qemu::pin::host_cpus()).filter(|c| !c.is_empty()),
        }
    }
}

/// One measurement unit: a sweep point at one repetition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Index of the sweep combination (0-based, same for every repetition).
    pub point: u32,
    pub rep: u32,
    /// Axis name -> value at this point.
    pub params: BTreeMap<String, toml::Value>,
    pub workload: Workload,
    pub seed: u64,
    /// vCPUs of the VM(s) this point runs in, when the sweep has a
    /// `vm.vcpus` axis (else the spec's `[vm] vcpus`): points of one boot
    /// share it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_vcpus: Option<u32>,
    /// Which of the spec's `boots` runs this repetition (0 with one boot):
    /// points of different groups never share a boot.
    #[serde(default)]
    pub boot_group: u32,
}

/// The one VM setting a sweep may vary (a fresh boot per value).
pub const VCPUS_AXIS: &str = "vm.vcpus";

impl Point {
    /// Stable name used for per-point files and resume.
    pub fn id(&self) -> String {
        format!("p{:04}-r{:02}", self.point, self.rep)
    }

    /// "threads=2 depth=3"
    pub fn label(&self) -> String {
        if self.params.is_empty() {
            return format!("rep {}", self.rep);
        }
        let axes: Vec<String> = self
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("{} (rep {})", axes.join(" "), self.rep)
    }
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub points: Vec<Point>,
    /// The devices as the workloads see them (sizes known before boot).
    pub devices: BTreeMap<String, DeviceRef>,
}

/// Expands and validates every point against this host; nothing boots
/// unless all are valid.
pub fn plan(loaded: &LoadedSpec) -> Result<Plan, SpecError> {
    plan_on(loaded, &HostLimits::current())
}

/// [`plan`] against the given host limits.
pub fn plan_on(loaded: &LoadedSpec, host: &HostLimits) -> Result<Plan, SpecError> {
    let spec = &loaded.spec;
    check_memory(loaded, host.mem_total)?;
    check_pin(loaded, host.cpus.as_deref())?;
    check_figures(loaded, &host.figures_dir)?;
    check_point_count(loaded)?;
    if let Some(server) = &loaded.server_workload {
        check_thread_counts(server).map_err(|pe| {
            loaded.error_at_path(
                &[
                    PathSeg::Key("topology"),
                    PathSeg::Key("server"),
                    PathSeg::Key(&pe.field),
                ],
                pe.reason,
            )
        })?;
    }
    let devices = device_refs(loaded);
    check_vm_axes(loaded)?;
    let axes: Vec<(&String, &Vec<toml::Value>)> = spec.sweep.iter().collect();
    // Type-check each axis value alone first, so an error names its axis.
    for (axis, values) in axes.iter().filter(|(a, _)| !a.starts_with("vm.")) {
        for v in values.iter() {
            let mut table = spec.workload.clone();
            table.insert(axis.to_string(), v.clone());
            crate::planning::spec::workload_from_table(loaded, &table, Some(axis)).map_err(
                |mut e| {
                    e.message = format!("value {v}: {}", e.message);
                    e
                },
            )?;
        }
    }
    let combos: Vec<Combo<'_>> = cartesian(&axes)
        .into_iter()
        .filter(|c| !skipped(c, &spec.sweep_skip))
        .collect();
    if combos.is_empty() {
        return Err(loaded.error_at(
            "sweep_skip",
            None,
            "every combination of the sweep is skipped: no point is left",
        ));
    }
    let mut points = Vec::new();
    for (index, combo) in combos.iter().enumerate() {
        let mut table = spec.workload.clone();
        let mut params = BTreeMap::new();
        let mut vm_vcpus = None;
        for (axis, value) in combo {
            if axis.as_str() == VCPUS_AXIS {
                vm_vcpus = value.as_integer().and_then(|n| u32::try_from(n).ok());
            } else {
                table.insert(axis.to_string(), value.clone());
            }
            params.insert(axis.to_string(), value.clone());
        }
        let workload =
            crate::planning::spec::workload_from_table(loaded, &table, None).map_err(|mut e| {
                if !params.is_empty() {
                    e.message = format!("at sweep point {}: {}", describe(&params), e.message);
                }
                e
            })?;
        // Validate as the client will run it: with the server's address.
        let peer = spec
            .topology
            .as_ref()
            .map(|t| t.server_address.split('/').next().unwrap_or("").to_string());
        let to_check = match &peer {
            Some(peer) => substitute_peer(&workload, peer),
            None => workload.clone(),
        };
        check_thread_counts(&to_check)
            .and_then(|()| to_check.validate(&devices))
            .map_err(|pe| {
                let in_sweep = spec.sweep.contains_key(&pe.field);
                let mut e = if in_sweep {
                    loaded.error_at("sweep", Some(&pe.field), pe.reason.clone())
                } else {
                    loaded.error_at("workload", Some(&pe.field), pe.reason.clone())
                };
                e.field = Some(format!("workload.{}", pe.field));
                if !params.is_empty() {
                    e.message = format!("at sweep point {}: {}", describe(&params), e.message);
                }
                e
            })?;
        check_dynamic_helpers(loaded, &workload)?;
        for rep in 0..spec.experiment.repetitions {
            points.push(Point {
                point: index as u32,
                rep,
                params: params.clone(),
                workload: workload.clone(),
                seed: point_seed(spec.experiment.seed, index as u64, u64::from(rep)),
                vm_vcpus,
                boot_group: boot_group(rep, spec.experiment.repetitions, spec.experiment.boots),
            });
        }
    }
    // Repetitions outermost, so an interrupted run has whole sweeps done
    // (and a boot group's repetitions are consecutive); within one, points
    // of one vCPU count together (one boot each).
    points.sort_by_key(|p| (p.rep, p.vm_vcpus, p.point));
    Ok(Plan { points, devices })
}

/// [`plan`] reporting every error it finds (`testbed validate`): each of
/// the checks against the host and of each sweep value, then, when all of
/// those pass, the points' own checks (the first failing point).
pub fn plan_all(loaded: &LoadedSpec) -> Result<Plan, Vec<SpecError>> {
    plan_all_on(loaded, &HostLimits::current())
}

/// [`plan_all`] against the given host limits.
pub fn plan_all_on(loaded: &LoadedSpec, host: &HostLimits) -> Result<Plan, Vec<SpecError>> {
    let mut errors = Vec::new();
    let checks = [
        check_memory(loaded, host.mem_total),
        check_pin(loaded, host.cpus.as_deref()),
        check_figures(loaded, &host.figures_dir),
        check_point_count(loaded),
        check_vm_axes(loaded),
    ];
    for e in checks.into_iter().filter_map(Result::err) {
        crate::planning::spec::push_new(&mut errors, e);
    }
    let spec = &loaded.spec;
    for (axis, values) in spec.sweep.iter().filter(|(a, _)| !a.starts_with("vm.")) {
        for v in values {
            let mut table = spec.workload.clone();
            table.insert(axis.to_string(), v.clone());
            if let Err(mut e) =
                crate::planning::spec::workload_from_table(loaded, &table, Some(axis))
            {
                e.message = format!("value {v}: {}", e.message);
                crate::planning::spec::push_new(&mut errors, e);
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    plan_on(loaded, host).map_err(|e| vec![e])
}

/// The boot of repetition `rep` when `reps` repetitions are spread over
/// `boots` boots: consecutive repetitions share one, as evenly as they
/// divide (7 over 3: 3, 2, 2).
pub fn boot_group(rep: u32, reps: u32, boots: u32) -> u32 {
    let boots = boots.clamp(1, reps.max(1));
    // Group g holds the repetitions from ceil(g·reps/boots) on.
    let (rep, reps, boots) = (u64::from(rep), u64::from(reps), u64::from(boots));
    ((rep * boots) / reps.max(1)).min(boots - 1) as u32
}

/// A helper linked dynamically (testbed-odbc) runs in a guest only on a
/// Debian root image that has its libraries.
fn check_dynamic_helpers(loaded: &LoadedSpec, workload: &Workload) -> Result<(), SpecError> {
    let spec = &loaded.spec;
    let in_guest = match spec.experiment.executor {
        ExecutorKind::Qemu => true,
        ExecutorKind::Slurm => spec.slurm.task_executor == ExecutorKind::Qemu,
        ExecutorKind::Host => false,
    };
    if !in_guest || spec.image.name.is_some() {
        return Ok(());
    }
    match workload.needs().helpers.iter().find(|h| h.dynamic) {
        Some(h) => Err(loaded.error_at(
            "image",
            Some("name"),
            format!(
                "{} is linked dynamically (libodbc, psqlODBC): in a guest it runs only on a \
                 Debian root image with its libraries; set [image] name = \"bookworm-asam\"",
                h.binary
            ),
        )),
        None => Ok(()),
    }
}

/// A `vm.*` sweep axis: only `vm.vcpus`, integers 1..=64, on the qemu
/// executor.
fn check_vm_axes(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let spec = &loaded.spec;
    for (axis, values) in spec.sweep.iter().filter(|(a, _)| a.starts_with("vm.")) {
        let at = |m: String| loaded.error_at("sweep", Some(axis), m);
        if axis != VCPUS_AXIS {
            return Err(at(format!(
                "{axis}: the only VM setting a sweep may vary is {VCPUS_AXIS}"
            )));
        }
        if spec.experiment.executor != crate::planning::spec::ExecutorKind::Qemu {
            return Err(at(format!("{VCPUS_AXIS} needs the qemu executor")));
        }
        if let Some(v) = values
            .iter()
            .find(|v| !v.as_integer().is_some_and(|n| (1..=64).contains(&n)))
        {
            return Err(at(format!(
                "{VCPUS_AXIS} value {v}: must be an integer 1..=64"
            )));
        }
    }
    Ok(())
}

/// Refuses a workload whose thread, job or stream count exceeds
/// [`MAX_THREADS`]; one check for every workload kind, on its resolved
/// fields.
pub fn check_thread_counts(workload: &Workload) -> Result<(), ParamError> {
    fn walk(v: &serde_json::Value, path: &str) -> Result<(), ParamError> {
        let serde_json::Value::Object(map) = v else {
            return Ok(());
        };
        for (key, value) in map {
            let field = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            if THREAD_FIELDS.contains(&key.as_str())
                && let Some(n) = value.as_u64()
                && n > MAX_THREADS
            {
                return Err(ParamError::new(
                    field,
                    format!(
                        "{n} is too many: at most {MAX_THREADS} (each is a thread or process in the guest)"
                    ),
                ));
            }
            walk(value, &field)?;
        }
        Ok(())
    }
    walk(&workload.resolved(), "")
}

/// Refuses a spec whose VMs together need more memory than the host has:
/// QEMU would fail to allocate it and the guest never start.
/// An explicit `[vm] pin` list names CPUs this host has, one per vCPU.
fn check_pin(loaded: &LoadedSpec, host: Option<&[u32]>) -> Result<(), SpecError> {
    let (crate::machine::qemu::pin::PinSetting::Cpus(list), Some(host)) =
        (&loaded.spec.vm.pin, host)
    else {
        return Ok(());
    };
    crate::machine::qemu::pin::check_list(list, loaded.spec.vm.vcpus, host)
        .map_err(|why| loaded.error_at("vm", Some("pin"), why.to_string()))
}

pub fn check_memory(loaded: &LoadedSpec, mem_total: Option<u64>) -> Result<(), SpecError> {
    let spec = &loaded.spec;
    let Some(host) = mem_total else {
        return Ok(());
    };
    if spec.experiment.executor != ExecutorKind::Qemu {
        return Ok(());
    }
    let vms: u64 = match spec.topology.as_ref().map(|t| t.kind) {
        Some(TopologyKind::Pair) => 2,
        None => 1,
    };
    let each = spec.vm.memory.bytes();
    let total = each.saturating_mul(vms);
    if total <= host {
        return Ok(());
    }
    let need = if vms > 1 {
        format!(
            "{vms} VMs of the pair topology need {vms} × {} = {}",
            spec.vm.memory,
            Size(total)
        )
    } else {
        format!("the VM needs {}", spec.vm.memory)
    };
    Err(loaded.error_at(
        "vm",
        Some("memory"),
        format!(
            "{need}, more than this host's {} (MemTotal in /proc/meminfo)",
            crate::machine::hostinfo::human_bytes(host)
        ),
    ))
}

/// The figure ids defined in `dir`: one `<id>.toml` each.
pub fn known_figures(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    let mut ids = BTreeSet::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == "toml")
            && let Some(stem) = path.file_stem()
        {
            ids.insert(stem.to_string_lossy().into_owned());
        }
    }
    Ok(ids)
}

/// Refuses a `figures` entry naming no definition in `dir`: the run would
/// go ahead and its figure never appear.
pub fn check_figures(loaded: &LoadedSpec, dir: &Path) -> Result<(), SpecError> {
    let wanted = &loaded.spec.experiment.figures;
    if wanted.is_empty() {
        return Ok(());
    }
    let known = known_figures(dir);
    for (i, id) in wanted.iter().enumerate() {
        if known.as_ref().is_ok_and(|k| k.contains(id)) {
            continue;
        }
        let message = match &known {
            Ok(k) => format!(
                "no figure {id:?} in {}; known: {}",
                dir.display(),
                k.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
            Err(e) => format!(
                "no figure {id:?}: cannot read the definitions in {}: {e}",
                dir.display()
            ),
        };
        return Err(loaded.error_at_path(
            &[
                PathSeg::Key("experiment"),
                PathSeg::Key("figures"),
                PathSeg::Index(i),
            ],
            message,
        ));
    }
    Ok(())
}

/// Refuses a spec that expands to more than [`MAX_POINTS`] points, before
/// the expansion itself takes the memory.
pub fn check_point_count(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let spec = &loaded.spec;
    // Every point holds one value of each axis: with large values a
    // plan within MAX_POINTS would still take gigabytes.
    let per_point: usize = spec
        .sweep
        .values()
        .map(|v| v.iter().map(|x| x.to_string().len()).max().unwrap_or(0))
        .sum();
    if per_point > MAX_SWEEP_BYTES_PER_POINT {
        return Err(loaded.error_at(
            "sweep",
            None,
            format!(
                "the axes' largest values add up to {per_point} bytes per point: at most {MAX_SWEEP_BYTES_PER_POINT} (sweep numbers and short names, not documents)"
            ),
        ));
    }
    let reps = u64::from(spec.experiment.repetitions);
    let combos = spec
        .sweep
        .values()
        .try_fold(1u64, |n, v| n.checked_mul(v.len() as u64));
    let total = combos.and_then(|c| c.checked_mul(reps));
    if total.is_some_and(|t| t <= MAX_POINTS) {
        return Ok(());
    }
    let shape: Vec<String> = spec
        .sweep
        .iter()
        .map(|(k, v)| format!("{} {k}", v.len()))
        .chain(std::iter::once(format!("{reps} repetitions")))
        .collect();
    let count = total.map_or("more than 2^64".to_string(), |t| t.to_string());
    let message = format!(
        "{count} points ({}): at most {MAX_POINTS}",
        shape.join(" × ")
    );
    Err(if combos.is_some_and(|c| c <= MAX_POINTS) {
        loaded.error_at("experiment", Some("repetitions"), message)
    } else {
        loaded.error_at("sweep", None, message)
    })
}

/// The workload with "{peer}" replaced in every string parameter.
pub fn substitute_peer(workload: &Workload, peer: &str) -> Workload {
    serde_json::to_string(workload)
        .ok()
        .filter(|json| json.contains("{peer}"))
        .and_then(|json| serde_json::from_str(&json.replace("{peer}", peer)).ok())
        .unwrap_or_else(|| workload.clone())
}

fn describe(params: &BTreeMap<String, toml::Value>) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Devices as workloads see them before boot; paths are filled in later.
pub fn device_refs(loaded: &LoadedSpec) -> BTreeMap<String, DeviceRef> {
    let mut out = BTreeMap::new();
    for d in &loaded.spec.devices {
        let size = match d.kind.def().origin() {
            // The real size is read from the controller at run time; until
            // then a passthrough device is not limited by the planner.
            Origin::HostPci => u64::MAX,
            Origin::Emulated => d.size.map_or(0, |s| s.bytes()),
        };
        let namespaces = d.namespaces.unwrap_or(1);
        for ns in 1..=namespaces {
            let name = if ns == 1 {
                d.name.clone()
            } else {
                format!("{}.ns{ns}", d.name)
            };
            out.insert(
                name,
                DeviceRef {
                    path: None,
                    size_bytes: size,
                    logical_block_size: d.logical_block_size,
                },
            );
        }
    }
    out
}

type Combo<'a> = Vec<(&'a String, toml::Value)>;

fn cartesian<'a>(axes: &[(&'a String, &'a Vec<toml::Value>)]) -> Vec<Combo<'a>> {
    let mut combos: Vec<Combo<'a>> = vec![Vec::new()];
    for (name, values) in axes {
        let mut next = Vec::with_capacity(combos.len() * values.len());
        for combo in &combos {
            for v in values.iter() {
                let mut c = combo.clone();
                c.push((*name, v.clone()));
                next.push(c);
            }
        }
        combos = next;
    }
    combos
}

/// Whether an entry of `[[sweep_skip]]` matches every axis it names.
fn skipped(combo: &Combo<'_>, skip: &[BTreeMap<String, toml::Value>]) -> bool {
    skip.iter().any(|entry| {
        entry.iter().all(|(axis, value)| {
            combo
                .iter()
                .any(|(a, v)| *a == axis && crate::planning::spec::skip_values(value).contains(v))
        })
    })
}

/// splitmix64 over (seed, point, rep): independent, reproducible streams.
pub fn point_seed(seed: u64, point: u64, rep: u64) -> u64 {
    let mut z =
        seed ^ point.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ rep.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const SPEC: &str = r#"
[experiment]
name = "t"
repetitions = 2

[[devices]]
name = "data"
kind = "nvme"
size = "1M"

[workload]
kind = "randread"
device = "data"

[sweep]
threads = [1, 2, 4]
block_size = [512, 4096]
"#;

    #[test]
    fn a_dynamically_linked_helper_in_a_guest_needs_the_debian_image() {
        let spec = |extra: &str, clients: &str| {
            format!(
                "[experiment]\nname = \"q\"\n{extra}\n[workload]\nkind = \"flight-query\"\nclients = {clients}\n"
            )
        };
        let planned =
            |text: String| plan(&crate::planning::spec::parse(Path::new("q.toml"), &text).unwrap());
        let e = planned(spec("", r#"["odbc-row"]"#)).unwrap_err();
        assert!(
            e.to_string().contains("testbed-odbc is linked dynamically")
                && e.to_string().contains("bookworm-asam"),
            "{e}"
        );
        assert_eq!(e.field.as_deref(), Some("image.name"), "{e:?}");
        assert!(planned(spec("", r#"["tokio-postgres"]"#)).is_ok());
        assert!(
            planned(spec(
                "\n[image]\nname = \"bookworm-asam\"",
                r#"["odbc-row"]"#
            ))
            .is_ok()
        );
        assert!(planned(spec("executor = \"host\"", r#"["odbc-row"]"#)).is_ok());
    }

    #[test]
    fn skipped_combinations_are_not_planned_and_a_bad_skip_names_its_line() {
        let with = |skip: &str| format!("{SPEC}\n{skip}");
        let planned =
            |text: String| plan(&crate::planning::spec::parse(Path::new("t.toml"), &text)?);
        // threads 2 and 4 at block size 512: 2 of the 6 combinations.
        let p = planned(with("[[sweep_skip]]\nthreads = [2, 4]\nblock_size = 512\n")).unwrap();
        assert_eq!(p.points.len(), 4 * 2);
        assert!(p.points.iter().all(|pt| {
            pt.params["threads"].as_integer() == Some(1)
                || pt.params["block_size"].as_integer() == Some(4096)
        }));
        // Consecutive combination indices, each with its repetitions.
        let ids: std::collections::BTreeSet<u32> = p.points.iter().map(|pt| pt.point).collect();
        assert_eq!(ids, (0..4).collect());
        // Two entries: either one skips.
        let two = "[[sweep_skip]]\nthreads = 4\n\n[[sweep_skip]]\nblock_size = 512\nthreads = 1\n";
        assert_eq!(planned(with(two)).unwrap().points.len(), 3 * 2);

        let e = planned(with("[[sweep_skip]]\nthreds = 2\n")).unwrap_err();
        assert!(e.to_string().contains("threds is not a sweep axis"), "{e}");
        assert_eq!(e.field.as_deref(), Some("sweep_skip[0].threds"), "{e:?}");
        assert!(e.line.is_some(), "{e:?}");
        let e = planned(with("[[sweep_skip]]\nthreads = 3\n")).unwrap_err();
        assert!(
            e.to_string()
                .contains("3 is not one of the sweep's threads values"),
            "{e}"
        );
        let e = planned(with("[[sweep_skip]]\nthreads = [1, 2, 4]\n")).unwrap_err();
        assert!(e.to_string().contains("no point is left"), "{e}");
    }

    #[test]
    fn cartesian_product_times_repetitions() {
        let s = crate::planning::spec::parse(Path::new("t.toml"), SPEC).unwrap();
        let p = plan(&s).unwrap();
        assert_eq!(p.points.len(), 3 * 2 * 2);
        let ids: std::collections::BTreeSet<_> = p.points.iter().map(Point::id).collect();
        assert_eq!(ids.len(), 12);
        assert_eq!(p.points[0].rep, 0);
        assert_eq!(p.points[11].rep, 1);
        let Workload::Randread(r) = &p.points[5].workload else {
            panic!()
        };
        assert_eq!(
            r.threads,
            p.points[5].params["threads"].as_integer().unwrap() as u32
        );
        // Seeds differ per point and repetition but are reproducible.
        assert_ne!(p.points[0].seed, p.points[6].seed);
        assert_eq!(plan(&s).unwrap().points[3].seed, p.points[3].seed);
    }

    #[test]
    fn boots_spread_consecutive_repetitions_evenly() {
        let groups = |reps: u32, boots: u32| -> Vec<u32> {
            (0..reps).map(|r| boot_group(r, reps, boots)).collect()
        };
        assert_eq!(groups(7, 3), [0, 0, 0, 1, 1, 2, 2]);
        assert_eq!(groups(3, 3), [0, 1, 2]);
        assert_eq!(groups(4, 1), [0, 0, 0, 0]);
        assert_eq!(groups(6, 2), [0, 0, 0, 1, 1, 1]);
        // The plan carries them: each repetition's points in its group.
        let s = crate::planning::spec::parse(
            Path::new("t.toml"),
            &SPEC.replace("repetitions = 2", "repetitions = 2\nboots = 2"),
        )
        .unwrap();
        let p = plan(&s).unwrap();
        assert!(
            p.points.iter().all(|pt| pt.boot_group == pt.rep),
            "{:?}",
            p.points
        );
        let one = plan(&crate::planning::spec::parse(Path::new("t.toml"), SPEC).unwrap()).unwrap();
        assert!(one.points.iter().all(|pt| pt.boot_group == 0));
    }

    #[test]
    fn boots_beyond_repetitions_or_off_the_qemu_executor_are_refused() {
        let err =
            |text: String| crate::planning::spec::parse(Path::new("t.toml"), &text).unwrap_err();
        let e = err(SPEC.replace("repetitions = 2", "repetitions = 2\nboots = 3"));
        assert_eq!(e.field.as_deref(), Some("experiment.boots"), "{e}");
        assert!(e.to_string().contains("3 boots for 2 repetitions"), "{e}");
        let e = err(SPEC.replace("repetitions = 2", "repetitions = 2\nboots = 0"));
        assert!(e.to_string().contains("at least 1"), "{e}");
        let e = err(SPEC.replace(
            "repetitions = 2",
            "repetitions = 2\nboots = 2\nexecutor = \"host\"",
        ));
        assert!(e.to_string().contains("needs the qemu executor"), "{e}");
    }

    #[test]
    fn a_vcpus_axis_sets_each_points_vm_and_groups_them_per_boot() {
        let spec = SPEC.replace("block_size = [512, 4096]", "\"vm.vcpus\" = [2, 1]");
        let s = crate::planning::spec::parse(Path::new("t.toml"), &spec).unwrap();
        let p = plan(&s).unwrap();
        assert_eq!(p.points.len(), 3 * 2 * 2);
        // Within a repetition, one vCPU count's points are together.
        let first_rep: Vec<Option<u32>> = p
            .points
            .iter()
            .filter(|p| p.rep == 0)
            .map(|p| p.vm_vcpus)
            .collect();
        assert_eq!(
            first_rep,
            [Some(1), Some(1), Some(1), Some(2), Some(2), Some(2)]
        );
        for pt in &p.points {
            assert_eq!(
                pt.params[VCPUS_AXIS].as_integer(),
                pt.vm_vcpus.map(i64::from),
                "the axis is a param column too"
            );
        }
        let refused = |sweep: &str| {
            let spec = SPEC.replace("block_size = [512, 4096]", sweep);
            let s = crate::planning::spec::parse(Path::new("t.toml"), &spec).unwrap();
            plan(&s).unwrap_err()
        };
        let e = refused("\"vm.memory\" = [\"1G\"]");
        assert!(
            e.message
                .contains("only VM setting a sweep may vary is vm.vcpus"),
            "{e}"
        );
        let e = refused("\"vm.vcpus\" = [0]");
        assert!(e.message.contains("must be an integer 1..=64"), "{e}");
        assert_eq!(e.field.as_deref(), Some("sweep.vm.vcpus"), "{e}");
    }

    #[test]
    fn sweep_values_too_large_for_many_points_are_refused() {
        let big = format!("\"{}\"", "x".repeat(5000));
        let s = crate::planning::spec::parse(
            Path::new("t.toml"),
            &SPEC.replace(
                "block_size = [512, 4096]",
                &format!("block_size = [512]\nlabel = [{big}]"),
            ),
        )
        .unwrap();
        let e = plan(&s).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("sweep"), "{e}");
        assert!(e.message.contains("5006 bytes per point"), "{e}");
    }

    #[test]
    fn a_bad_sweep_value_is_refused_at_the_sweep_line() {
        let s =
            crate::planning::spec::parse(Path::new("t.toml"), &SPEC.replace("[1, 2, 4]", "[1, 0]"))
                .unwrap();
        let e = plan(&s).unwrap_err();
        assert_eq!(e.line, Some(16), "{e}");
        assert!(e.message.contains("threads=0"), "{e}");
        assert_eq!(e.field.as_deref(), Some("workload.threads"));
    }

    fn limits(mem_total: Option<u64>) -> HostLimits {
        HostLimits {
            mem_total,
            figures_dir: crate::host::paths::figure_defs(),
            cpus: Some(vec![0, 1]),
        }
    }

    #[test]
    fn a_pin_list_beyond_the_host_is_refused_at_its_line() {
        let text = format!("{SPEC}[vm]\npin = [1, 2]\n");
        let e = plan_on(&parse(&text), &limits(None)).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("vm.pin"), "{e}");
        assert_eq!(e.file, Path::new("t.toml"));
        let line = text.lines().position(|l| l.starts_with("pin")).unwrap() + 1;
        assert_eq!(e.line, Some(line), "{e}");
        assert!(e.message.contains("host CPU 2"), "{e}");
        let ok = parse(&format!("{SPEC}[vm]\npin = [1, 0]\n"));
        plan_on(&ok, &limits(None)).unwrap();
    }

    fn parse(src: &str) -> LoadedSpec {
        crate::planning::spec::parse(Path::new("t.toml"), src).unwrap()
    }

    #[test]
    fn a_million_threads_are_refused_with_the_limit() {
        let s = parse(&SPEC.replace("[1, 2, 4]", "[1, 1000000]"));
        let e = plan_on(&s, &limits(None)).unwrap_err();
        assert_eq!(e.line, Some(16), "{e}");
        assert_eq!(e.field.as_deref(), Some("workload.threads"), "{e}");
        assert!(e.message.contains("threads=1000000"), "{e}");
        assert!(e.message.contains("at most 1024"), "{e}");
        // Not swept: the error points at the workload's line.
        let s = parse(
            &SPEC
                .replace("threads = [1, 2, 4]\n", "")
                .replace("device = \"data\"", "device = \"data\"\nthreads = 2000"),
        );
        let e = plan_on(&s, &limits(None)).unwrap_err();
        assert_eq!(e.line, Some(14), "{e}");
        assert!(e.message.contains("2000 is too many: at most 1024"), "{e}");
        // The limit itself is fine.
        let s = parse(&SPEC.replace("[1, 2, 4]", "[1024]"));
        plan_on(&s, &limits(None)).unwrap();
    }

    #[test]
    fn fio_jobs_and_flight_streams_count_as_threads() {
        let fio = r#"
[experiment]
name = "t"
[[devices]]
name = "data"
kind = "nvme"
size = "1M"
[workload]
kind = "fio"
device = "data"
numjobs = 5000
"#;
        let e = plan_on(&parse(fio), &limits(None)).unwrap_err();
        assert!(e.message.contains("5000 is too many"), "{e}");
        assert_eq!(e.field.as_deref(), Some("workload.numjobs"), "{e}");
        let bulk =
            "[experiment]\nname = \"t\"\n[workload]\nkind = \"flight-bulk\"\nstreams = 4096\n";
        let e = plan_on(&parse(bulk), &limits(None)).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("workload.streams"), "{e}");
    }

    #[test]
    fn vm_memory_beyond_the_host_is_refused_with_both_numbers() {
        let host = 24 << 30;
        let s = parse(&SPEC.replace("repetitions = 2", "repetitions = 2\n[vm]\nmemory = \"64T\""));
        let e = plan_on(&s, &limits(Some(host))).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("vm.memory"), "{e}");
        assert_eq!(e.line, Some(6), "{e}");
        assert!(e.message.contains("the VM needs 64T"), "{e}");
        assert!(e.message.contains("this host's 24.0G"), "{e}");
        // The host executor boots no VM.
        let host_exec = s
            .source
            .replace("repetitions = 2", "repetitions = 2\nexecutor = \"host\"");
        plan_on(&parse(&host_exec), &limits(Some(host))).unwrap();
        // Unknown host memory: no check.
        plan_on(&s, &limits(None)).unwrap();
    }

    #[test]
    fn a_pair_topology_needs_memory_for_both_vms() {
        let pair = r#"
[experiment]
name = "t"
[vm]
memory = "13G"
[topology]
kind = "pair"
server = { kind = "flight-bulk", role = "server", address = "0.0.0.0:50051" }
[workload]
kind = "flight-bulk"
role = "client"
address = "{peer}:50051"
"#;
        let s = parse(pair);
        let e = plan_on(&s, &limits(Some(24 << 30))).unwrap_err();
        assert!(
            e.message
                .contains("2 VMs of the pair topology need 2 × 13G = 26G"),
            "{e}"
        );
        assert!(e.message.contains("24.0G"), "{e}");
        plan_on(&s, &limits(Some(26 << 30))).unwrap();
    }

    #[test]
    fn an_unknown_figure_is_refused_with_the_known_names() {
        let s = parse(&SPEC.replace(
            "repetitions = 2",
            "repetitions = 2\nfigures = [\"smoke-latency\", \"no-such-fig\"]",
        ));
        let e = plan_on(&s, &limits(None)).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("experiment.figures[1]"), "{e}");
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.message.contains("no figure \"no-such-fig\""), "{e}");
        assert!(e.message.contains("known: "), "{e}");
        assert!(e.message.contains("smoke-latency"), "{e}");
        let s = parse(&SPEC.replace(
            "repetitions = 2",
            "repetitions = 2\nfigures = [\"smoke-latency\"]",
        ));
        plan_on(&s, &limits(None)).unwrap();
        // No definitions to check against: say where they were looked for.
        let none = HostLimits {
            mem_total: None,
            figures_dir: "/nonexistent/figures".into(),
            cpus: None,
        };
        let e = plan_on(&s, &none).unwrap_err();
        assert!(e.message.contains("/nonexistent/figures"), "{e}");
    }

    #[test]
    fn a_sweep_too_large_to_expand_is_refused_before_expanding() {
        let s = parse(&SPEC.replace("repetitions = 2", "repetitions = 4000000000"));
        let e = plan_on(&s, &limits(None)).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("experiment.repetitions"), "{e}");
        assert!(e.message.contains("at most 100000"), "{e}");
        let big: Vec<String> = (1..=400).map(|i| i.to_string()).collect();
        let axes = format!("depth = [{0}]\nbatch = [{0}]", big.join(", "));
        let s = parse(&format!("{SPEC}{axes}\n"));
        let e = plan_on(&s, &limits(None)).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("sweep"), "{e}");
        assert!(
            e.message
                .contains("400 batch × 2 block_size × 400 depth × 3 threads × 2 repetitions"),
            "{e}"
        );
    }

    #[test]
    fn a_wrongly_typed_sweep_value_is_refused() {
        let s = crate::planning::spec::parse(
            Path::new("t.toml"),
            &SPEC.replace("[512, 4096]", "[512, \"big\"]"),
        )
        .unwrap();
        let e = plan(&s).unwrap_err();
        assert!(e.message.contains("invalid type"), "{e}");
        assert_eq!(e.line, Some(17), "{e}");
    }
}
