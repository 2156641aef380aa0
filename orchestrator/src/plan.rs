//! A spec expanded into points: the cartesian product of the sweep axes,
//! times repetitions, each with its concrete workload and seed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use testbed_agent::protocol::DeviceRef;
use testbed_agent::workload::Workload;

use crate::spec::{DeviceKind, LoadedSpec, SpecError};

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
}

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

/// Expands and validates every point; nothing boots unless all are valid.
pub fn plan(loaded: &LoadedSpec) -> Result<Plan, SpecError> {
    let spec = &loaded.spec;
    let devices = device_refs(loaded);
    let axes: Vec<(&String, &Vec<toml::Value>)> = spec.sweep.iter().collect();
    // Type-check each axis value alone first, so an error names its axis.
    for (axis, values) in &axes {
        for v in values.iter() {
            let mut table = spec.workload.clone();
            table.insert(axis.to_string(), v.clone());
            crate::spec::workload_from_table(loaded, &table, Some(axis)).map_err(|mut e| {
                e.message = format!("value {v}: {}", e.message);
                e
            })?;
        }
    }
    let combos = cartesian(&axes);
    let mut points = Vec::new();
    for (index, combo) in combos.iter().enumerate() {
        let mut table = spec.workload.clone();
        let mut params = BTreeMap::new();
        for (axis, value) in combo {
            table.insert(axis.to_string(), value.clone());
            params.insert(axis.to_string(), value.clone());
        }
        let workload =
            crate::spec::workload_from_table(loaded, &table, None).map_err(|mut e| {
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
        to_check.validate(&devices).map_err(|pe| {
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
        for rep in 0..spec.experiment.repetitions {
            points.push(Point {
                point: index as u32,
                rep,
                params: params.clone(),
                workload: workload.clone(),
                seed: point_seed(spec.experiment.seed, index as u64, u64::from(rep)),
            });
        }
    }
    // Repetitions outermost, so an interrupted run has whole sweeps done.
    points.sort_by_key(|p| (p.rep, p.point));
    Ok(Plan { points, devices })
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
        let size = match d.kind {
            // The real size is read from the controller at run time; until
            // then a passthrough device is not limited by the planner.
            DeviceKind::Vfio => u64::MAX,
            _ => d.size.map_or(0, |s| s.bytes()),
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
    fn cartesian_product_times_repetitions() {
        let s = crate::spec::parse(Path::new("t.toml"), SPEC).unwrap();
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
    fn a_bad_sweep_value_is_refused_at_the_sweep_line() {
        let s =
            crate::spec::parse(Path::new("t.toml"), &SPEC.replace("[1, 2, 4]", "[1, 0]")).unwrap();
        let e = plan(&s).unwrap_err();
        assert_eq!(e.line, Some(16), "{e}");
        assert!(e.message.contains("threads=0"), "{e}");
        assert_eq!(e.field.as_deref(), Some("workload.threads"));
    }

    #[test]
    fn a_wrongly_typed_sweep_value_is_refused() {
        let s = crate::spec::parse(
            Path::new("t.toml"),
            &SPEC.replace("[512, 4096]", "[512, \"big\"]"),
        )
        .unwrap();
        let e = plan(&s).unwrap_err();
        assert!(e.message.contains("invalid type"), "{e}");
        assert_eq!(e.line, Some(17), "{e}");
    }
}
