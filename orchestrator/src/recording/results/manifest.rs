//! manifest.json: everything needed to know what ran and to redo it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    Running,
    Complete,
    /// Finished with failed points.
    Partial,
    Interrupted,
    Failed,
}

/// One point's outcome, also stored as points/<id>.json.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PointRecord {
    pub id: String,
    pub point: u32,
    pub rep: u32,
    /// The sweep axes' values at this point.
    pub params: BTreeMap<String, toml::Value>,
    /// The workload as run: every field, defaults filled in. Absent in
    /// records written before it was kept.
    #[serde(default)]
    pub workload: Option<serde_json::Value>,
    pub seed: u64,
    pub ok: bool,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub wall_s: Option<f64>,
    #[serde(default)]
    pub samples: usize,
    #[serde(default)]
    pub summary: BTreeMap<String, serde_json::Value>,
    pub boot: u32,
    /// How busy the host was while the point ran (noise.rs); absent in
    /// records written before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<crate::machine::noise::HostNoise>,
    /// CPU time and peak memory of the run's processes over the point
    /// (hostcost.rs); absent in records written before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cost: Option<crate::machine::hostcost::HostCost>,
    /// Other attempts at this point by `--rerun-noisy`, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<EarlierMeasurement>,
}

impl PointRecord {
    pub fn noisy(&self) -> bool {
        self.noise.as_ref().is_some_and(|n| n.noisy)
    }

    /// Whether `--rerun-noisy` measured this point again: an earlier
    /// attempt that finished (one that failed left the point as it was).
    pub fn measured_again(&self) -> bool {
        self.earlier.iter().any(|e| e.error.is_none())
    }
}

/// A run's points measured on a busy host, after any `--rerun-noisy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NoisyPoints {
    /// Points whose measurement is noisy.
    pub noisy: usize,
    /// Of those, the points measured again and still noisy.
    pub rerun: usize,
    /// Points with a noise record.
    pub measured: usize,
    /// The limit they were judged by, in % of the host's CPU.
    pub limit_pct: f64,
}

impl NoisyPoints {
    /// Noisy points that were not measured again.
    pub fn not_rerun(&self) -> usize {
        self.noisy - self.rerun
    }

    /// Some points are noisy, and every one was measured again.
    pub fn all_rerun(&self) -> bool {
        self.noisy > 0 && self.rerun == self.noisy
    }

    /// "2 of 10 points measured on a busy host (other processes above
    /// 10 % of its CPU), 1 of them run again and still noisy".
    pub fn text(&self) -> String {
        let mut s = format!(
            "{} of {} points measured on a busy host (other processes above {} % of its CPU)",
            self.noisy, self.measured, self.limit_pct
        );
        match (self.rerun, self.noisy) {
            (0, _) => s.push_str(", none run again"),
            (r, n) if r == n => s.push_str(", each run again and still noisy"),
            (r, _) => s.push_str(&format!(", {r} of them run again and still noisy")),
        }
        s
    }
}

/// Another attempt at a point: a finished measurement a rerun replaced
/// (its numbers and noise; its raw samples are not kept), or a rerun that
/// failed (`error`; the point kept its measurement).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EarlierMeasurement {
    pub boot: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub wall_s: Option<f64>,
    #[serde(default)]
    pub samples: usize,
    #[serde(default)]
    pub summary: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pub noise: Option<crate::machine::noise::HostNoise>,
}

impl EarlierMeasurement {
    pub fn of(rec: &PointRecord) -> EarlierMeasurement {
        EarlierMeasurement {
            boot: rec.boot,
            error: None,
            wall_s: rec.wall_s,
            samples: rec.samples,
            summary: rec.summary.clone(),
            noise: rec.noise.clone(),
        }
    }
}

/// The kernel a VM run booted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelInput {
    pub name: String,
    pub key: String,
    pub release: String,
    pub description: String,
    pub config_sha256: Option<String>,
    pub patches: Vec<String>,
    /// sha256 of each patch (by name) as the run found it in the kernel's
    /// cache entry: `pack` and `verify` check the packed copies against it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub patch_sha256: BTreeMap<String, String>,
    pub bzimage: std::path::PathBuf,
}

/// Content hashes and descriptions of every input. `kernel` is typed;
/// the files (agent, helpers, initramfs, BPF programs) keep their own
/// records by name.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Inputs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelInput>,
    #[serde(flatten)]
    pub files: BTreeMap<String, serde_json::Value>,
}

/// `inputs.forced_resume`: one entry per `--resume --force` that continued
/// this run with inputs other than its earlier attempt's (what differed,
/// both values, when), so the manifest says its points do not all share
/// the inputs it lists. (Kept among the inputs' records by name, as the
/// other input records are.)
pub const FORCED_RESUME: &str = "forced_resume";

impl Inputs {
    /// The sha256 an input file's record holds (`agent`, a helper, ...).
    pub fn file_sha256(&self, name: &str) -> Option<&str> {
        self.files.get(name)?.get("sha256")?.as_str()
    }

    /// The files the inputs were read from: the kernel's bzImage and every
    /// recorded `path` (initramfs, root image, each BPF object).
    pub fn paths(&self) -> Vec<std::path::PathBuf> {
        let mut out: Vec<std::path::PathBuf> =
            self.kernel.iter().map(|k| k.bzimage.clone()).collect();
        for v in self.files.values() {
            let listed = v.as_array().into_iter().flatten();
            for p in std::iter::once(v)
                .chain(listed)
                .filter_map(|x| x.get("path"))
            {
                if let Some(p) = p.as_str() {
                    out.push(std::path::PathBuf::from(p));
                }
            }
        }
        out
    }
}

/// What the guest said about itself at its first boot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestInfo {
    pub uname: String,
    pub cmdline: String,
    pub cpus: u32,
    pub mem_total_kib: u64,
    pub modules_loaded: Vec<String>,
    pub devices: BTreeMap<String, String>,
    pub agent_version: String,
    pub uptime_at_ready_ms: u64,
}

impl GuestInfo {
    pub fn from_hello(h: &testbed_agent::protocol::Hello) -> GuestInfo {
        GuestInfo {
            uname: h.uname.clone(),
            cmdline: h.kernel_cmdline.clone(),
            cpus: h.ncpus,
            mem_total_kib: h.mem_total_kib,
            modules_loaded: h.modules_loaded.clone(),
            devices: h.devices.clone(),
            agent_version: h.agent_version.clone(),
            uptime_at_ready_ms: h.uptime_ms,
        }
    }
}

/// One device as the run prepared it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceEntry {
    pub spec: crate::planning::spec::DeviceSpec,
    #[serde(default)]
    pub backing_files: Vec<std::path::PathBuf>,
    #[serde(default)]
    pub host_o_direct: bool,
    #[serde(default)]
    pub note: Option<String>,
}

/// What one boot (or agent process) did, for the manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BootRecord {
    pub index: u32,
    pub hello: Option<testbed_agent::protocol::Hello>,
    /// Host-measured time from spawn to the agent's hello.
    pub ready_ms: Option<u64>,
    pub points: Vec<String>,
    /// How it ended: "shutdown", or the failure.
    pub ended: String,
    pub argv: Vec<String>,
    /// The server VM's argv in a pair topology (its link settings included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_argv: Option<Vec<String>>,
    /// Each QEMU thread (vCPUs by index) with the host CPUs it was pinned
    /// to, or why not. Absent for boots of no VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinning: Option<crate::machine::qemu::pin::Pinning>,
}

/// The VM a run asked for, as the manifest's spec records it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct VmShape {
    pub vcpus: u32,
    pub memory: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub testbed_version: String,
    pub status: RunStatus,
    pub experiment: String,
    pub run_id: String,
    pub figures: Vec<String>,
    pub spec_file: String,
    pub spec_sha256: String,
    /// The spec as parsed (defaults filled in).
    pub spec: serde_json::Value,
    pub executor: String,
    /// What contained the run's processes (`crate::host::cgroup`): "cgroup v2
    /// (<dir>)", "cgroup v1 freezer (<dir>)" or "process groups only (why)".
    #[serde(default)]
    pub containment: String,
    /// Content hashes and descriptions of every input: kernel, initramfs, agent.
    #[serde(default)]
    pub inputs: Inputs,
    pub accel: Option<crate::machine::qemu::accel::AccelDecision>,
    /// "TCG: shape-only" etc.
    pub timing_note: String,
    pub qemu_argv: Vec<String>,
    #[serde(default)]
    pub host: crate::machine::hostinfo::HostInfo,
    /// From the first boot's hello: uname, cmdline, cpus, memory.
    pub guest: Option<GuestInfo>,
    pub boots: Vec<BootRecord>,
    /// Host-measured QEMU start to agent hello, per boot.
    pub boot_to_agent_ms: Vec<u64>,
    pub devices: Vec<DeviceEntry>,
    pub seed: u64,
    pub points: Vec<PointRecord>,
    /// Each summary number's spread within a boot and between boots
    /// (results/levels.rs); empty when no point has two repetitions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variance: Vec<super::levels::LevelVariance>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub wall_s: Option<f64>,
    /// Every file the run wrote (outputs.rs), recorded as it finished:
    /// `testbed verify` checks them. Empty in runs written before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<super::outputs::OutputFile>,
}

impl Manifest {
    /// Points measured on a busy host (their noise above the spec's limit,
    /// after any `--rerun-noisy`), and the points with a noise record.
    pub fn noisy_points(&self) -> (usize, usize) {
        let measured = self.points.iter().filter_map(|p| p.noise.as_ref());
        let (mut noisy, mut total) = (0, 0);
        for n in measured {
            total += 1;
            noisy += usize::from(n.noisy);
        }
        (noisy, total)
    }

    /// The noisy points and how many of them were measured again.
    pub fn noisy(&self) -> NoisyPoints {
        let mut n = NoisyPoints::default();
        for p in &self.points {
            let Some(noise) = &p.noise else { continue };
            n.measured += 1;
            if noise.noisy {
                if n.noisy == 0 {
                    n.limit_pct = noise.noisy_above_pct;
                }
                n.noisy += 1;
                n.rerun += usize::from(p.measured_again());
            }
        }
        n
    }

    /// "k of n points measured on a busy host", when any was.
    pub fn busy_host(&self) -> Option<String> {
        match self.noisy_points() {
            (0, _) => None,
            (k, n) => Some(format!(
                "{k} of {n} points measured on a busy host (other processes above {} % of its CPU)",
                self.points
                    .iter()
                    .find_map(|p| p.noise.as_ref().filter(|n| n.noisy))
                    .map_or(0.0, |n| n.noisy_above_pct)
            )),
        }
    }

    /// vCPUs and memory of the spec as run (None for a spec without [vm]).
    pub fn vm(&self) -> Option<VmShape> {
        serde_json::from_value(self.spec.get("vm")?.clone()).ok()
    }
}

/// A manifest that cannot be read or written, with its path.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{}: {source}", path.display())]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a valid manifest: {source}", path.display())]
    Invalid {
        path: std::path::PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: the manifest cannot be encoded: {source}", path.display())]
    Encode {
        path: std::path::PathBuf,
        source: serde_json::Error,
    },
}

pub fn read(path: &Path) -> Result<Manifest, ManifestError> {
    let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| ManifestError::Invalid {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes the manifest, then its digest beside it
/// (`manifest.json.sha256`, see integrity.rs), each atomically.
pub fn write(path: &Path, m: &Manifest) -> Result<(), ManifestError> {
    let text = serde_json::to_vec_pretty(m).map_err(|source| ManifestError::Encode {
        path: path.to_path_buf(),
        source,
    })?;
    crate::host::fsutil::write_atomic(path, &text).map_err(|source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let digest = super::integrity::digest_path(path);
    crate::host::fsutil::write_atomic(
        &digest,
        super::integrity::digest_line(&text, &name).as_bytes(),
    )
    .map_err(|source| ManifestError::Io {
        path: digest,
        source,
    })
}

/// UTC time as "2026-11-30T09:28:38Z", without a date crate.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Seconds since the epoch of a time written by [`format_utc`].
pub fn parse_utc(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Howard Hinnant's days-from-civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_what_it_formats() {
        for secs in [0, 951_782_400, 1_796_101_438, 4_102_444_799] {
            assert_eq!(super::parse_utc(&super::format_utc(secs)), Some(secs));
        }
        assert_eq!(super::parse_utc("2026-13-01T00:00:00Z"), None);
        assert_eq!(super::parse_utc("yesterday"), None);
    }

    #[test]
    fn noisy_points_count_those_measured_again_and_still_noisy() {
        use super::{EarlierMeasurement, PointRecord};
        let noise = |noisy: bool| crate::machine::noise::HostNoise {
            others_pct: if noisy { 40.0 } else { 1.0 },
            steal_pct: 0.0,
            own_pct: 50.0,
            load1: None,
            interval_s: 1.0,
            noisy_above_pct: 10.0,
            noisy,
        };
        let point = |id: &str, noisy: Option<bool>, earlier: Vec<Option<&str>>| PointRecord {
            id: id.into(),
            point: 0,
            rep: 0,
            params: Default::default(),
            workload: None,
            seed: 0,
            ok: true,
            error: None,
            wall_s: None,
            samples: 0,
            summary: Default::default(),
            boot: 0,
            noise: noisy.map(noise),
            host_cost: None,
            earlier: earlier
                .into_iter()
                .map(|error| EarlierMeasurement {
                    error: error.map(String::from),
                    noise: Some(noise(true)),
                    ..Default::default()
                })
                .collect(),
        };
        let mut m: super::Manifest = serde_json::from_value(serde_json::json!({
            "testbed_version": "0.1.0", "status": "complete", "experiment": "e",
            "run_id": "r", "figures": [], "spec_file": "e.toml", "spec_sha256": "00",
            "spec": {}, "executor": "host", "accel": null, "timing_note": "",
            "qemu_argv": [], "guest": null, "boots": [], "boot_to_agent_ms": [],
            "devices": [], "seed": 1, "points": [], "started_at": "", "finished_at": null,
            "wall_s": null,
        }))
        .unwrap();
        m.points = vec![
            point("quiet", Some(false), vec![]),
            // Noisy once, quiet after its rerun: not noisy.
            point("calmed", Some(false), vec![None]),
            point("unmeasured", None, vec![]),
            point("never-rerun", Some(true), vec![]),
            // Its only rerun failed: the noisy measurement stands alone.
            point("rerun-failed", Some(true), vec![Some("boot failed")]),
            point("still-noisy", Some(true), vec![Some("boot failed"), None]),
        ];
        let n = m.noisy();
        assert_eq!((n.noisy, n.rerun, n.measured), (3, 1, 5));
        assert_eq!((n.not_rerun(), n.all_rerun()), (2, false));
        assert_eq!(
            n.text(),
            "3 of 5 points measured on a busy host (other processes above 10 % of its CPU), 1 of them run again and still noisy"
        );
        m.points.truncate(3);
        m.points
            .push(point("still-noisy", Some(true), vec![None, None]));
        let n = m.noisy();
        assert!(n.all_rerun());
        assert!(
            n.text().ends_with(", each run again and still noisy"),
            "{}",
            n.text()
        );
    }

    #[test]
    fn formats_utc() {
        assert_eq!(super::format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::format_utc(1_796_031_718), "2026-11-30T09:41:58Z");
    }
}
