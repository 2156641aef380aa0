//! fio (from Debian) as a peer check: `fio --output-format=json`, read-only,
//! O_DIRECT, parsed for IOPS and completion-latency percentiles. Also used by
//! the btree workload's `compare_with_fio`.

use std::collections::BTreeMap;
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::{JobContext, ParamError, Summary, WorkloadError, defaults};
use testbed_vocab::protocol::DeviceRef;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FioRw {
    #[default]
    Randread,
    Read,
}

/// fio's clock. `clock_gettime` is CLOCK_MONOTONIC, the clock the lookup
/// engines time with; fio's default `cpu` (TSC, calibrated at start-up) can
/// be off in a TCG guest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FioClock {
    #[default]
    ClockGettime,
    Cpu,
    Gettimeofday,
}

impl FioClock {
    fn as_str(self) -> &'static str {
        match self {
            FioClock::ClockGettime => "clock_gettime",
            FioClock::Cpu => "cpu",
            FioClock::Gettimeofday => "gettimeofday",
        }
    }
}

impl FioRw {
    fn as_str(self) -> &'static str {
        match self {
            FioRw::Randread => "randread",
            FioRw::Read => "read",
        }
    }
}

/// I/O engines allowed; the synchronous ones keep one I/O in flight.
pub const SYNC_ENGINES: &[&str] = &["psync", "pvsync", "pvsync2", "sync"];
const ASYNC_ENGINES: &[&str] = &["libaio", "io_uring"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FioParams {
    pub device: String,
    #[serde(default = "defaults::block_size")]
    pub block_size: u32,
    /// Random offsets are multiples of this (fio `blockalign`).
    #[serde(default = "defaults::align")]
    pub align: u32,
    #[serde(default)]
    pub rw: FioRw,
    #[serde(default = "defaults::one_u32")]
    pub iodepth: u32,
    #[serde(default = "defaults::one_u32")]
    pub numjobs: u32,
    #[serde(default = "defaults::fio_ioengine")]
    pub ioengine: String,
    /// Run for this long (time based); excludes `ios`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_s: Option<u32>,
    /// I/Os per job; default 2000 when `runtime_s` is not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ios: Option<u64>,
    /// Read only the first this many bytes of the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(default)]
    pub clocksource: FioClock,
    /// fio `gtod_reduce`: no per-I/O clock reads, so no latencies, only
    /// IOPS; fio's own CPU cost per I/O drops (it matters under TCG).
    #[serde(default)]
    pub gtod_reduce: bool,
}

const DEFAULT_IOS: u64 = 2000;

impl FioParams {
    pub fn validate(&self, devices: &BTreeMap<String, DeviceRef>) -> Result<(), ParamError> {
        let dev = super::named_device(devices, &self.device)?;
        super::lba_multiple("block_size", self.block_size, dev)?;
        super::lba_multiple("align", self.align, dev)?;
        if self.iodepth == 0 {
            return Err(ParamError::new("iodepth", "must be at least 1"));
        }
        if self.numjobs == 0 {
            return Err(ParamError::new("numjobs", "must be at least 1"));
        }
        let sync = SYNC_ENGINES.contains(&self.ioengine.as_str());
        if !sync && !ASYNC_ENGINES.contains(&self.ioengine.as_str()) {
            return Err(ParamError::new(
                "ioengine",
                format!(
                    "{:?} is not one of {SYNC_ENGINES:?} or {ASYNC_ENGINES:?}",
                    self.ioengine
                ),
            ));
        }
        if sync && self.iodepth > 1 {
            return Err(ParamError::new(
                "iodepth",
                format!(
                    "{} needs an async ioengine; {} keeps one I/O in flight",
                    self.iodepth, self.ioengine
                ),
            ));
        }
        match (self.runtime_s, self.ios) {
            (Some(_), Some(_)) => {
                return Err(ParamError::new(
                    "ios",
                    "set either `ios` or `runtime_s`, not both",
                ));
            }
            (Some(0), _) => return Err(ParamError::new("runtime_s", "must be at least 1")),
            (_, Some(0)) => return Err(ParamError::new("ios", "must be at least 1")),
            _ => {}
        }
        let region = self.size_bytes.unwrap_or(dev.size_bytes);
        if region > dev.size_bytes || region < u64::from(self.block_size.max(self.align)) {
            return Err(ParamError::new(
                "size_bytes",
                format!(
                    "{region} must lie within device {:?} of {} bytes and hold one block",
                    self.device, dev.size_bytes
                ),
            ));
        }
        Ok(())
    }

    fn job(&self, path: String, seed: u64) -> FioJob {
        FioJob {
            path,
            block_size: self.block_size,
            align: self.align,
            rw: self.rw,
            iodepth: self.iodepth,
            numjobs: self.numjobs,
            ioengine: self.ioengine.clone(),
            clocksource: self.clocksource,
            gtod_reduce: self.gtod_reduce,
            cpus_allowed: None,
            size: self.size_bytes,
            amount: match self.runtime_s {
                Some(s) => Amount::Seconds(s),
                None => Amount::Ios(self.ios.unwrap_or(DEFAULT_IOS)),
            },
            seed,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// I/Os per job.
    Ios(u64),
    Seconds(u32),
}

/// One fio invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct FioJob {
    pub path: String,
    pub block_size: u32,
    pub align: u32,
    pub rw: FioRw,
    pub iodepth: u32,
    pub numjobs: u32,
    pub ioengine: String,
    pub clocksource: FioClock,
    pub gtod_reduce: bool,
    /// fio `cpus_allowed` with `cpus_allowed_policy=split`: job i on the
    /// i-th CPU of the set.
    pub cpus_allowed: Option<String>,
    /// Region from offset 0; `None` = the whole device or file.
    pub size: Option<u64>,
    pub amount: Amount,
    pub seed: u64,
}

impl FioJob {
    /// fio's command line (without the program name).
    pub fn args(&self) -> Vec<String> {
        let mut a = vec![
            "--name=peer".to_string(),
            format!("--filename={}", self.path),
            "--readonly".into(),
            "--direct=1".into(),
            format!("--rw={}", self.rw.as_str()),
            format!("--bs={}", self.block_size),
            format!("--blockalign={}", self.align),
            format!("--ioengine={}", self.ioengine),
            format!("--clocksource={}", self.clocksource.as_str()),
            format!("--iodepth={}", self.iodepth),
            format!("--numjobs={}", self.numjobs),
            // Jobs as threads of one process, like the lookup engines, and no
            // periodic disk-util or bandwidth sampling: under TCG every extra
            // guest instruction competes with the emulated device.
            "--thread".into(),
            "--disk_util=0".into(),
            "--disable_bw_measurement=1".into(),
            "--group_reporting".into(),
            // fio parses the seed as a signed 64-bit number.
            format!("--randseed={}", self.seed & i64::MAX as u64),
            "--output-format=json".into(),
        ];
        if self.gtod_reduce {
            a.push("--gtod_reduce=1".into());
        }
        if let Some(cpus) = &self.cpus_allowed {
            a.push(format!("--cpus_allowed={cpus}"));
            a.push("--cpus_allowed_policy=split".into());
        }
        if let Some(size) = self.size {
            a.push(format!("--size={size}"));
        }
        match self.amount {
            // io_size beyond the region makes fio wrap around; norandommap
            // lets random offsets repeat instead of covering the region once.
            Amount::Ios(n) => {
                a.push(format!("--io_size={}", n * u64::from(self.block_size)));
                a.push("--norandommap".into());
            }
            Amount::Seconds(s) => {
                a.push("--time_based".into());
                a.push(format!("--runtime={s}"));
            }
        }
        a
    }
}

/// What fio reported for the read side.
#[derive(Debug, Clone, PartialEq)]
pub struct FioReport {
    pub version: String,
    pub iops: f64,
    pub total_ios: u64,
    pub runtime_ms: f64,
    pub clat_mean_ns: f64,
    pub lat_mean_ns: f64,
    /// (percentile as fio names it, e.g. "99.900000", ns).
    pub clat_percentiles: Vec<(String, f64)>,
    /// fio's job CPU time (user, system), from its usr_cpu/sys_cpu
    /// percentages of the runtime.
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
}

impl FioReport {
    /// Adds `iops`, latencies and p50/p95/p99/p99.9 under `prefix`.
    pub fn add_to(&self, prefix: &str, summary: &mut Summary) {
        let mut put = |k: &str, v: serde_json::Value| {
            summary.insert(format!("{prefix}{k}"), v);
        };
        put("iops", self.iops.into());
        put("total_ios", self.total_ios.into());
        put("runtime_ms", self.runtime_ms.into());
        put("clat_mean_ns", self.clat_mean_ns.into());
        put("lat_mean_ns", self.lat_mean_ns.into());
        put("version", self.version.clone().into());
        put("cpu_user_s", self.cpu_user_s.into());
        put("cpu_sys_s", self.cpu_sys_s.into());
        if self.total_ios > 0 {
            let per_io = (self.cpu_user_s + self.cpu_sys_s) / self.total_ios as f64;
            put("cpu_us_per_io", (per_io * 1e6).into());
        }
        for (name, pct) in [("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9)] {
            if let Some(v) = self.percentile(pct) {
                put(&format!("clat_{name}_ns"), v.into());
            }
        }
    }

    pub fn percentile(&self, pct: f64) -> Option<f64> {
        self.clat_percentiles
            .iter()
            .find(|(k, _)| k.parse::<f64>().is_ok_and(|p| (p - pct).abs() < 1e-9))
            .map(|&(_, v)| v)
    }

    /// One `fio_clat_percentile` sample per percentile, tagged `pct`.
    pub fn emit(&self, ctx: &JobContext, tags: &BTreeMap<String, String>) {
        for (name, v) in &self.clat_percentiles {
            let mut t = tags.clone();
            let pct = name.parse::<f64>().map_or(name.clone(), |p| p.to_string());
            t.insert("pct".into(), pct);
            ctx.emit_samples("fio_clat_percentile", "ns", 0, &t, &[*v]);
        }
    }
}

/// Folds the reports of several runs of one job into one: I/Os and runtimes
/// add up (so `iops` is total I/Os over total time), means are weighted by
/// I/Os. Percentiles cannot be merged and are left out.
pub fn combine(reports: &[FioReport]) -> Option<FioReport> {
    let first = reports.first()?;
    let total_ios: u64 = reports.iter().map(|r| r.total_ios).sum();
    let runtime_ms: f64 = reports.iter().map(|r| r.runtime_ms).sum();
    let weighted = |f: fn(&FioReport) -> f64| {
        let w: f64 = reports.iter().map(|r| f(r) * r.total_ios as f64).sum();
        if total_ios > 0 {
            w / total_ios as f64
        } else {
            0.0
        }
    };
    Some(FioReport {
        version: first.version.clone(),
        iops: if runtime_ms > 0.0 {
            total_ios as f64 / (runtime_ms / 1e3)
        } else {
            0.0
        },
        total_ios,
        runtime_ms,
        clat_mean_ns: weighted(|r| r.clat_mean_ns),
        lat_mean_ns: weighted(|r| r.lat_mean_ns),
        clat_percentiles: Vec::new(),
        cpu_user_s: reports.iter().map(|r| r.cpu_user_s).sum(),
        cpu_sys_s: reports.iter().map(|r| r.cpu_sys_s).sum(),
    })
}

/// Parses fio's JSON (anything printed before the first `{` is skipped).
pub fn parse_report(out: &str) -> Result<FioReport, WorkloadError> {
    let bad = |what: &str| WorkloadError::Other(format!("fio output: {what}"));
    let start = out.find('{').ok_or_else(|| bad("no JSON object"))?;
    let v: serde_json::Value =
        serde_json::from_str(&out[start..]).map_err(|e| bad(&format!("invalid JSON: {e}")))?;
    let job = v
        .get("jobs")
        .and_then(|j| j.get(0))
        .ok_or_else(|| bad("no jobs[0]"))?;
    let read = job.get("read").ok_or_else(|| bad("no jobs[0].read"))?;
    let num = |node: &serde_json::Value, k: &str| node.get(k).and_then(serde_json::Value::as_f64);
    let runtime_ms = num(read, "runtime").unwrap_or(0.0);
    // usr_cpu/sys_cpu are percentages of `job_runtime`, which group
    // reporting sums over the jobs (read.runtime is one job's).
    let cpu_base_ms = num(job, "job_runtime").unwrap_or(runtime_ms);
    let cpu_s = |k: &str| num(job, k).unwrap_or(0.0) / 100.0 * cpu_base_ms / 1e3;
    let clat = read.get("clat_ns").ok_or_else(|| bad("no read.clat_ns"))?;
    let mut clat_percentiles: Vec<(String, f64)> = clat
        .get("percentile")
        .and_then(serde_json::Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    clat_percentiles.sort_by(|a, b| {
        let p = |s: &str| s.parse::<f64>().unwrap_or(f64::MAX);
        p(&a.0).total_cmp(&p(&b.0))
    });
    Ok(FioReport {
        version: v
            .get("fio version")
            .and_then(|s| s.as_str())
            .unwrap_or("")
            .to_string(),
        iops: num(read, "iops").ok_or_else(|| bad("no read.iops"))?,
        total_ios: num(read, "total_ios").unwrap_or(0.0) as u64,
        runtime_ms,
        clat_mean_ns: num(clat, "mean").unwrap_or(0.0),
        lat_mean_ns: read
            .get("lat_ns")
            .and_then(|l| num(l, "mean"))
            .unwrap_or(0.0),
        clat_percentiles,
        cpu_user_s: cpu_s("usr_cpu"),
        cpu_sys_s: cpu_s("sys_cpu"),
    })
}

/// fio on PATH, else the Debian location (PID 1 may have no PATH).
pub fn fio_binary() -> Option<std::path::PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("fio"));
    on_path
        .chain(["/usr/bin/fio", "/usr/local/bin/fio"].map(std::path::PathBuf::from))
        .find(|p| p.is_file())
}

pub fn run_fio(job: &FioJob) -> Result<FioReport, WorkloadError> {
    let bin = fio_binary().ok_or_else(|| {
        WorkloadError::Other(
            "fio not found on PATH or in /usr/bin (install Debian's fio in the image)".into(),
        )
    })?;
    // In a process group of its own that dies with the agent; the host's
    // point timeout bounds the run, this one only a fio that never ends.
    let out = testbed_proc::run_captured(
        Command::new(&bin).args(job.args()),
        std::time::Duration::from_secs(6 * 3600),
    )
    .map_err(|e| WorkloadError::Other(e.to_string()))?;
    if !out.status.success() {
        return Err(WorkloadError::Other(format!(
            "fio failed ({}): {}",
            out.status,
            out.stderr.trim()
        )));
    }
    parse_report(&out.stdout)
}

pub fn run(p: &FioParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    let path = ctx.device_path(&p.device)?;
    let report = run_fio(&p.job(path, ctx.seed))?;
    report.emit(ctx, &BTreeMap::new());
    let mut summary = Summary::new();
    report.add_to("", &mut summary);
    Ok(summary)
}

impl super::WorkloadParams for FioParams {
    fn validate(&self, devices: &BTreeMap<String, DeviceRef>) -> Result<(), ParamError> {
        FioParams::validate(self, devices)
    }
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run(self, ctx)
    }
    fn needs(&self) -> super::Needs {
        super::Needs {
            host_steps: vec!["fio"],
            ..Default::default()
        }
    }
    fn metrics(&self) -> Vec<super::MetricInfo> {
        use super::MetricInfo as M;
        vec![
            M::raw("fio_clat_percentile", "ns", &["pct"]),
            M::summary("iops", "IOPS", &[]),
            M::summary("clat_mean_ns", "ns", &[]),
            M::summary("cpu_us_per_io", "µs", &[]),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{VecSink, Workload};
    use std::sync::Arc;

    fn devices(size: u64) -> BTreeMap<String, DeviceRef> {
        BTreeMap::from([(
            "data".to_string(),
            DeviceRef {
                path: None,
                size_bytes: size,
                logical_block_size: 512,
            },
        )])
    }

    fn params() -> FioParams {
        serde_json::from_str(r#"{"device": "data"}"#).unwrap()
    }

    #[test]
    fn defaults_are_the_qd1_randread_peer() {
        let p = params();
        assert_eq!(
            (p.block_size, p.align, p.iodepth, p.rw),
            (512, 4096, 1, FioRw::Randread)
        );
        let args = p.job("/dev/x".into(), 7).args();
        for want in [
            "--readonly",
            "--direct=1",
            "--rw=randread",
            "--bs=512",
            "--iodepth=1",
            "--io_size=1024000",
            "--randseed=7",
        ] {
            assert!(
                args.iter().any(|a| a == want),
                "{want} missing from {args:?}"
            );
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        let d = devices(1 << 20);
        let mut p = params();
        p.iodepth = 4;
        assert_eq!(p.validate(&d).unwrap_err().field, "iodepth");
        p.ioengine = "io_uring".into();
        assert!(p.validate(&d).is_ok());
        p.ioengine = "spdk".into();
        assert_eq!(p.validate(&d).unwrap_err().field, "ioengine");
        let mut p = params();
        p.block_size = 700;
        assert_eq!(p.validate(&d).unwrap_err().field, "block_size");
        let mut p = params();
        (p.ios, p.runtime_s) = (Some(5), Some(5));
        assert_eq!(p.validate(&d).unwrap_err().field, "ios");
        let e = serde_json::from_str::<FioParams>(r#"{"device": "data", "rw": "randwrite"}"#)
            .unwrap_err();
        assert!(e.to_string().contains("randwrite"), "{e}");
    }

    #[test]
    fn parses_fio_json_with_noise_before_it() {
        let text = r#"fio: some warning
{"fio version": "fio-3.33", "jobs": [{"job_runtime": 570, "usr_cpu": 20.0, "sys_cpu": 40.0, "read": {"iops": 7000.5, "total_ios": 2000, "runtime": 285,
 "clat_ns": {"mean": 140000.0, "percentile": {"99.900000": 400000, "50.000000": 130000, "95.000000": 200000}},
 "lat_ns": {"mean": 141000.0}}}]}"#;
        let r = parse_report(text).unwrap();
        assert_eq!(
            (r.iops, r.total_ios, r.version.as_str()),
            (7000.5, 2000, "fio-3.33")
        );
        assert_eq!(r.clat_percentiles[0], ("50.000000".to_string(), 130000.0));
        // Two group-reported jobs: the percentages are of their summed runtime.
        assert!((r.cpu_user_s - 0.114).abs() < 1e-9 && (r.cpu_sys_s - 0.228).abs() < 1e-9);
        assert_eq!(r.percentile(99.9), Some(400000.0));
        let mut s = Summary::new();
        r.add_to("fio.", &mut s);
        assert_eq!(s["fio.clat_p999_ns"], serde_json::json!(400000.0));
        let per_io = s["fio.cpu_us_per_io"].as_f64().unwrap();
        assert!((per_io - 0.342 / 2000.0 * 1e6).abs() < 1e-6, "{per_io}");
        assert!(!s.contains_key("fio.clat_p99_ns"));
        assert!(parse_report("no json").is_err());
    }

    #[test]
    fn combined_reports_add_ios_and_time() {
        let r = |ios: u64, ms: f64, lat: f64| FioReport {
            version: "fio-3.33".into(),
            iops: ios as f64 / ms * 1e3,
            total_ios: ios,
            runtime_ms: ms,
            clat_mean_ns: lat,
            lat_mean_ns: lat,
            clat_percentiles: vec![("50.000000".into(), lat)],
            cpu_user_s: 0.5,
            cpu_sys_s: 0.25,
        };
        let c = combine(&[r(1000, 100.0, 100.0), r(3000, 500.0, 200.0)]).unwrap();
        assert_eq!(
            (c.total_ios, c.runtime_ms, c.iops),
            (4000, 600.0, 4000.0 / 0.6)
        );
        assert_eq!(c.lat_mean_ns, 175.0);
        assert_eq!((c.cpu_user_s, c.cpu_sys_s), (1.0, 0.5));
        assert!(c.clat_percentiles.is_empty());
        assert!(combine(&[]).is_none());
    }

    #[test]
    #[ignore = "needs fio (./x setup installs it; ./x test runs this)"]
    fn runs_real_fio_on_a_file() {
        assert!(fio_binary().is_some(), "fio is not installed: ./x setup");
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let path = dir.path().join("dev.img");
        std::fs::write(&path, vec![3u8; 1 << 20]).unwrap();
        let mut devs = devices(1 << 20);
        devs.get_mut("data").unwrap().path = Some(path.to_string_lossy().into());
        let sink = Arc::new(VecSink::default());
        let ctx = JobContext {
            job_id: 1,
            // Above i64::MAX, as the planner's seeds often are.
            seed: u64::MAX - 5,
            devices: devs,
            sink: sink.clone(),
        };
        let mut p = params();
        p.ios = Some(300);
        let w = Workload::Fio(p);
        w.validate(&ctx.devices).unwrap();
        let s = w.run(&ctx).unwrap();
        assert_eq!(s["total_ios"], serde_json::json!(300));
        assert!(s["iops"].as_f64().unwrap() > 0.0);
        let chunks = sink.0.lock().unwrap();
        assert!(
            chunks
                .iter()
                .any(|c| c.metric == "fio_clat_percentile" && c.tags["pct"] == "99.9")
        );
    }
}
