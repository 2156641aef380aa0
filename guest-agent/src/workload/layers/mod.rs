//! Where the time of one read goes (HotOS'21 Table 1): synchronous 512 B
//! O_DIRECT random `pread()`s of a file on ext4 on an NVMe namespace (or of
//! the namespace itself, `read_path = "block-device"`: HotOS'21 Figure 1), in
//! blocks that alternate between no probes and the tracing probes of
//! ebpf-programs/layer_trace.bpf.c (loaded and attached with aya). A read
//! with probes is split into six layers by the boundaries inside its
//! user-space window (`events.rs`); a read without them gives the
//! untraced end-to-end latency the layers are checked against, and the
//! difference of the two means is the probes' own cost per read.

pub mod datafile;
pub mod events;
pub mod speedup;
pub mod tracer;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::randread::{AlignedBuf, open_direct};
use super::{JobContext, MetricInfo, Needs, ParamError, Summary, WorkloadError, WorkloadParams};
use testbed_vocab::protocol::DeviceRef;
use events::{LAYERS, LAYERS_BLOCK_DEVICE, Layers, Unattributed, Window};
pub use tracer::ReadPath;

impl LayerLatencyParams {
    /// The layer names of this read path, in the table's order.
    pub fn layer_names(&self) -> [&'static str; 6] {
        match self.read_path {
            ReadPath::Ext4 => LAYERS,
            ReadPath::BlockDevice => LAYERS_BLOCK_DEVICE,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerLatencyParams {
    /// The NVMe `[[devices]]` entry: with `filesystem = "ext4"` for the
    /// ext4 path.
    pub device: String,
    /// `ext4`: a file on the device's ext4; `block-device`: the namespace
    /// itself (its first `file_mib` MiB, written with random bytes first).
    #[serde(default)]
    pub read_path: ReadPath,
    /// Bytes per read (the paper: 512).
    #[serde(default = "default_block_size")]
    pub block_size: u32,
    /// Size of the file the reads hit, in MiB; written with random bytes.
    #[serde(default = "default_file_mib")]
    pub file_mib: u64,
    /// Measured reads with the probes attached (as many again without).
    #[serde(default = "default_reads")]
    pub reads: u64,
    /// Unmeasured reads before measuring, without probes.
    #[serde(default = "default_warmup")]
    pub warmup_reads: u64,
    /// Reads per block; blocks alternate between probes off and on. Short
    /// blocks keep both states under the same host conditions (under TCG
    /// the emulated device's latency drifts in phases of a few dozen reads);
    /// each switch costs time too (under TCG ~0.35 s: kprobes and
    /// tracepoints patch kernel text on every CPU).
    #[serde(default = "default_block")]
    pub interleave_block: u64,
    /// The reading thread runs on this CPU only: a thread the scheduler
    /// moves mid-run changes the interrupt's wake-up path, and with it the
    /// latency of every read after the move.
    #[serde(default)]
    pub cpu: u32,
    /// Chain depths at which to compare the NVMe hook's speedup over read()
    /// predicted from the layers with the one measured on the same
    /// namespace in the same boot (synthetic chains; needs the vm-hooks
    /// kernel). Empty: no comparison.
    #[serde(default)]
    pub hook_depths: Vec<u32>,
    /// Lookups per engine and depth of that comparison.
    #[serde(default = "default_hook_lookups")]
    pub hook_lookups: u64,
}

fn default_hook_lookups() -> u64 {
    200
}

fn default_block_size() -> u32 {
    512
}
fn default_file_mib() -> u64 {
    64
}
fn default_reads() -> u64 {
    1000
}
fn default_warmup() -> u64 {
    50
}
fn default_block() -> u64 {
    10
}

/// Kernel options the probes need: checked against the kernel's .config
/// before boot.
pub const KERNEL_OPTIONS: &[(&str, &str)] = &[
    ("CONFIG_BPF_SYSCALL", "loading BPF programs"),
    ("CONFIG_DEBUG_INFO_BTF", "the BTF the programs are built against"),
    ("CONFIG_BPF_EVENTS", "BPF programs on kprobes and tracepoints"),
    ("CONFIG_KPROBES", "the ext4 and NVMe driver probes"),
    ("CONFIG_KPROBE_EVENTS", "the ext4 and NVMe driver probes"),
    ("CONFIG_TRACEPOINTS", "the block layer tracepoints"),
    ("CONFIG_FTRACE_SYSCALLS", "the raw_syscalls tracepoints"),
    ("CONFIG_EXT4_FS", "the file system the reads go through"),
    ("CONFIG_BLK_DEV_NVME", "the NVMe driver probes"),
];

/// What `hook_depths` adds: the storage hooks.
const HOOK_OPTION: (&str, &str) = (
    "CONFIG_CHAINED_READ",
    "hook_depths (the storage hooks: kernel.name = \"vm-hooks\")",
);

impl WorkloadParams for LayerLatencyParams {
    fn validate(&self, devices: &BTreeMap<String, DeviceRef>) -> Result<(), ParamError> {
        let dev = super::named_device(devices, &self.device)?;
        super::lba_multiple("block_size", self.block_size, dev)?;
        if self.block_size > 4096 {
            return Err(ParamError::new(
                "block_size",
                "at most 4096: reads are 4 KiB-aligned and must not cross a file block",
            ));
        }
        // On ext4, half the device leaves the file system room.
        let room = match self.read_path {
            ReadPath::Ext4 => dev.size_bytes / 2,
            ReadPath::BlockDevice => dev.size_bytes,
        };
        if self.file_mib == 0 || (self.file_mib << 20) > room {
            return Err(ParamError::new(
                "file_mib",
                format!(
                    "{} MiB does not fit: at least 1, at most {} MiB of device {:?} ({} MiB{})",
                    self.file_mib,
                    room >> 20,
                    self.device,
                    dev.size_bytes >> 20,
                    if self.read_path == ReadPath::Ext4 {
                        ", half of it so ext4 has room"
                    } else {
                        ""
                    }
                ),
            ));
        }
        if let Some(d) = self.hook_depths.iter().find(|d| !(1..=32).contains(*d)) {
            return Err(ParamError::new(
                "hook_depths",
                format!("{d}: chain depths are 1 to 32"),
            ));
        }
        for (field, v) in [
            ("reads", self.reads),
            ("interleave_block", self.interleave_block),
            ("hook_lookups", self.hook_lookups),
        ] {
            if v == 0 {
                return Err(ParamError::new(field, "must be at least 1"));
            }
        }
        Ok(())
    }

    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run(self, ctx)
    }

    fn needs(&self) -> Needs {
        Needs {
            bpf_programs: true,
            kernel_options: KERNEL_OPTIONS
                .iter()
                .copied()
                .chain((!self.hook_depths.is_empty()).then_some(HOOK_OPTION))
                .collect(),
            ..Needs::default()
        }
    }

    fn metrics(&self) -> Vec<MetricInfo> {
        vec![
            MetricInfo::raw("layer_latency", "ns", &["layer"]),
            MetricInfo::raw("read_latency", "ns", &["probes"]),
            MetricInfo::summary("layer_mean_ns", "ns", &["layer"]),
            MetricInfo::summary("traced_mean_ns", "ns", &[]),
            MetricInfo::summary("untraced_mean_ns", "ns", &[]),
            MetricInfo::summary("probe_overhead_ns", "ns", &[]),
            MetricInfo::summary("traced_median_ns", "ns", &[]),
            MetricInfo::summary("untraced_median_ns", "ns", &[]),
            MetricInfo::summary("probe_overhead_median_ns", "ns", &[]),
            MetricInfo::summary("layer_sum_ratio", "", &[]),
            MetricInfo::summary("kernel_software_share", "", &[]),
            MetricInfo::summary("reads_unattributed", "", &[]),
            MetricInfo::raw("hook_speedup", "x", &["estimate", "depth"]),
        ]
    }

    fn summary_scopes(&self) -> Option<(&'static str, Vec<String>)> {
        Some((
            "layer",
            self.layer_names().iter().map(|s| s.to_string()).collect(),
        ))
    }

    fn show_lines(&self, s: &Summary) -> Vec<String> {
        show_lines(s, &self.layer_names())
    }
}

/// What the reads of one block measured.
#[derive(Default)]
struct Collected {
    untraced_ns: Vec<f64>,
    traced_ns: Vec<f64>,
    layers: Vec<Layers>,
    unattributed: BTreeMap<String, u64>,
}

fn run(p: &LayerLatencyParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    pin_to_cpu(p.cpu)?;
    // Where the point's time went, for `testbed show`: seconds since start.
    let started = std::time::Instant::now();
    let mut phases: Vec<(String, f64)> = Vec::new();
    let mut phase = |what: &str| phases.push((what.to_string(), started.elapsed().as_secs_f64()));
    let bytes = p.file_mib << 20;
    let (file_path, dev) = match p.read_path {
        ReadPath::Ext4 => {
            let file = datafile::prepare(&p.device, bytes, ctx.seed)?;
            let dev = datafile::nvme_dev_of(&file, &p.device)?;
            (file, dev)
        }
        ReadPath::BlockDevice => {
            // The namespace's first MiBs are overwritten: never a mounted one.
            if std::env::var_os(crate::workload::mount_env(&p.device)).is_some() {
                return Err(WorkloadError::Device {
                    name: p.device.clone(),
                    reason: "it holds a mounted file system, which read_path = \"block-device\" would overwrite: use an unformatted device".into(),
                });
            }
            let path = std::path::PathBuf::from(ctx.device_path(&p.device)?);
            let dev = datafile::nvme_dev_of(&path, &p.device)?;
            datafile::fill_device(&path, bytes, ctx.seed)?;
            (path, dev)
        }
    };
    phase("data written");
    datafile::ensure_tracefs()?;
    let tid = nix::unistd::gettid().as_raw() as u32;
    let object = super::btree::engine_hook::bpf_dir().join(tracer::OBJECT);
    let mut tracer = tracer::Tracer::load(&object, p.read_path, tid, dev.kernel_dev)
        .map_err(|e| WorkloadError::Other(format!("tracing programs: {e}")))?;
    phase("tracing programs loaded");
    let file = open_direct(&file_path.display().to_string())?;
    let mut buf = AlignedBuf::new(p.block_size as usize, 4096)?;
    let mut rng = ChaCha8Rng::seed_from_u64(ctx.seed);
    let slots = (p.file_mib << 20) / 4096;
    let mut read_one = |buf: &mut AlignedBuf| -> Result<Window, WorkloadError> {
        let off = rng.random_range(0..slots) * 4096;
        let start_ns = monotonic_ns();
        let n = file
            .read_at(buf.as_mut_slice(), off)
            .map_err(|e| WorkloadError::io(format!("read {} B at {off}", p.block_size), e))?;
        let end_ns = monotonic_ns();
        if n != p.block_size as usize {
            return Err(WorkloadError::Other(format!(
                "short read: {n} of {} bytes at {off}",
                p.block_size
            )));
        }
        Ok(Window { start_ns, end_ns })
    };
    for _ in 0..p.warmup_reads {
        read_one(&mut buf)?;
    }
    let mut got = Collected::default();
    let mut events = Vec::new();
    let mut foreign = 0;
    let mut toggling = std::time::Duration::ZERO;
    let blocks = p.reads.div_ceil(p.interleave_block);
    for block in 0..2 * blocks {
        // Alternate, starting with the probes on in odd-numbered jobs, so
        // neither state always comes first.
        let traced = (block + ctx.job_id) % 2 == 1;
        let n = p.interleave_block.min(p.reads - (block / 2) * p.interleave_block);
        let t = std::time::Instant::now();
        if traced {
            tracer.attach().map_err(trace_err)?;
        } else {
            tracer.detach().map_err(trace_err)?;
        }
        toggling += t.elapsed();
        // Events of anything before the block (attach itself) are dropped.
        events.clear();
        foreign += tracer.drain(&mut events);
        events.clear();
        let mut windows = Vec::with_capacity(n as usize);
        for _ in 0..n {
            windows.push(read_one(&mut buf)?);
        }
        let ns = windows.iter().map(|w| (w.end_ns - w.start_ns) as f64);
        if !traced {
            got.untraced_ns.extend(ns);
            continue;
        }
        got.traced_ns.extend(ns);
        foreign += tracer.drain(&mut events);
        for r in events::attribute(&windows, &events) {
            match r {
                Ok(l) => got.layers.push(l),
                Err(why) => *got.unattributed.entry(why_text(why)).or_default() += 1,
            }
        }
    }
    tracer.detach().map_err(trace_err)?;
    phase(&format!(
        "reads, with {:.1} s attaching and detaching",
        toggling.as_secs_f64()
    ));
    if foreign > 0 {
        return Err(WorkloadError::Other(format!(
            "{foreign} ring-buffer records were not layer events: the object {} and the agent disagree",
            object.display()
        )));
    }
    if got.layers.is_empty() {
        return Err(WorkloadError::Other(format!(
            "no traced read could be split into layers (why: {:?}); is {} the only device with I/O?",
            got.unattributed, p.device
        )));
    }
    let names = p.layer_names();
    emit(ctx, &got, &names);
    let mut summary = summarize(&got, &dev.name, &names);
    if !p.hook_depths.is_empty() {
        let means: Vec<f64> = (0..names.len())
            .map(|i| mean(got.layers.iter().map(|l| l[i] as f64)))
            .collect();
        let mut rows = Vec::new();
        for &d in &p.hook_depths {
            let m = speedup::measured(ctx, &p.device, d, p.hook_lookups)?;
            phase(&format!("hook chains at depth {d}"));
            rows.push((
                d,
                speedup::predicted(&means, d),
                m.speedup,
            ));
        }
        speedup::emit(ctx, &rows);
        summary.insert("hook_speedup".into(), serde_json::json!(rows));
    }
    summary.insert("phase_seconds".into(), serde_json::json!(phases));
    Ok(summary)
}

fn pin_to_cpu(cpu: u32) -> Result<(), WorkloadError> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu as usize)
        .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set))
        .map_err(|e| WorkloadError::Other(format!("workload.cpu: cannot run on CPU {cpu}: {e}")))
}

fn trace_err(e: tracer::TraceError) -> WorkloadError {
    WorkloadError::Other(format!("tracing programs: {e}"))
}

fn why_text(why: Unattributed) -> String {
    match why {
        Unattributed::Missing(b) => format!("missing {b:?}"),
        Unattributed::Twice(b) => format!("twice {b:?}"),
        Unattributed::OutOfOrder => "out of order".into(),
    }
}

/// CLOCK_MONOTONIC in ns: the clock of bpf_ktime_get_ns.
fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64);
    t.unwrap_or(0)
}

fn emit(ctx: &JobContext, got: &Collected, names: &[&str; 6]) {
    for (i, layer) in names.iter().enumerate() {
        let v: Vec<f64> = got.layers.iter().map(|l| l[i] as f64).collect();
        let tags = BTreeMap::from([("layer".to_string(), layer.to_string())]);
        ctx.emit_samples("layer_latency", "ns", 0, &tags, &v);
    }
    for (probes, v) in [("detached", &got.untraced_ns), ("attached", &got.traced_ns)] {
        let tags = BTreeMap::from([("probes".to_string(), probes.to_string())]);
        ctx.emit_samples("read_latency", "ns", 0, &tags, v);
    }
}

fn mean(v: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, n) = v.into_iter().fold((0.0, 0u64), |(s, n), x| (s + x, n + 1));
    if n == 0 { f64::NAN } else { sum / n as f64 }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn summarize(got: &Collected, device: &str, names: &[&str; 6]) -> Summary {
    let mut s = Summary::new();
    let layer_means: Vec<f64> = (0..names.len())
        .map(|i| mean(got.layers.iter().map(|l| l[i] as f64)))
        .collect();
    for (layer, m) in names.iter().zip(&layer_means) {
        s.insert(format!("{layer}.layer_mean_ns"), serde_json::json!(m));
    }
    let traced = mean(got.traced_ns.iter().copied());
    let untraced = mean(got.untraced_ns.iter().copied());
    let layer_sum: f64 = layer_means.iter().sum();
    let device_ns = layer_means[names.len() - 1];
    let put = |s: &mut Summary, k: &str, v: serde_json::Value| {
        s.insert(k.to_string(), v);
    };
    put(&mut s, "traced_mean_ns", traced.into());
    put(&mut s, "untraced_mean_ns", untraced.into());
    put(&mut s, "probe_overhead_ns", (traced - untraced).into());
    // Under TCG a few slow reads move the means; the medians say whether
    // the probes cost anything at all.
    let (traced_p50, untraced_p50) = (median(&got.traced_ns), median(&got.untraced_ns));
    put(&mut s, "traced_median_ns", traced_p50.into());
    put(&mut s, "untraced_median_ns", untraced_p50.into());
    put(
        &mut s,
        "probe_overhead_median_ns",
        (traced_p50 - untraced_p50).into(),
    );
    put(&mut s, "layer_sum_ratio", (layer_sum / untraced).into());
    put(&mut s, "kernel_software_share", (1.0 - device_ns / layer_sum).into());
    put(&mut s, "reads", (got.traced_ns.len() + got.untraced_ns.len()).into());
    put(&mut s, "reads_split", got.layers.len().into());
    let unattributed: u64 = got.unattributed.values().sum();
    put(&mut s, "reads_unattributed", unattributed.into());
    put(&mut s, "unattributed_why", serde_json::json!(got.unattributed));
    put(&mut s, "block_device", device.into());
    s
}

fn show_lines(s: &Summary, names: &[&str; 6]) -> Vec<String> {
    let num = |k: &str| s.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
    if !s.contains_key("traced_mean_ns") {
        return Vec::new();
    }
    let mut lines = vec![format!("{:<16} {:>12}", "layer", "mean (ns)")];
    for layer in names {
        lines.push(format!(
            "{layer:<16} {:>12.0}",
            num(&format!("{layer}.layer_mean_ns"))
        ));
    }
    let sum: f64 = names
        .iter()
        .map(|l| num(&format!("{l}.layer_mean_ns")))
        .sum();
    lines.push(format!("{:<16} {sum:>12.0}", "sum of layers"));
    lines.push(format!(
        "end to end in user space, mean: {:.0} ns with probes, {:.0} ns without; probe overhead {:.0} ns per read",
        num("traced_mean_ns"),
        num("untraced_mean_ns"),
        num("probe_overhead_ns")
    ));
    lines.push(format!(
        "end to end in user space, median: {:.0} ns with probes, {:.0} ns without; probe overhead {:.0} ns per read",
        num("traced_median_ns"),
        num("untraced_median_ns"),
        num("probe_overhead_median_ns")
    ));
    lines.push(format!(
        "sum of layers / untraced end to end: {:.3}; software share {:.1} %",
        num("layer_sum_ratio"),
        100.0 * num("kernel_software_share")
    ));
    if let Some(rows) = s.get("hook_speedup").and_then(|v| v.as_array()) {
        lines.push("NVMe hook speedup over read(): depth, predicted from the layers, measured".into());
        for r in rows {
            let f = |i: usize| r.get(i).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
            let (pred, meas) = (f(1), f(2));
            let off = (meas / pred - 1.0) * 100.0;
            let flag = if off.abs() > 15.0 {
                "  <- disagree by more than 15 %"
            } else {
                ""
            };
            lines.push(format!(
                "  depth {:>2}: predicted {pred:.2}x, measured {meas:.2}x ({off:+.0} %){flag}",
                f(0)
            ));
        }
    }
    if let Some(phases) = s.get("phase_seconds").and_then(|v| v.as_array()) {
        let text: Vec<String> = phases
            .iter()
            .filter_map(|p| Some(format!("{} {:.1} s", p.get(0)?.as_str()?, p.get(1)?.as_f64()?)))
            .collect();
        lines.push(format!("time line: {}", text.join("; ")));
    }
    let dropped = num("reads_unattributed");
    if dropped > 0.0 {
        lines.push(format!(
            "{dropped:.0} traced reads not split into layers: {}",
            s.get("unattributed_why").map(|v| v.to_string()).unwrap_or_default()
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    fn devices() -> BTreeMap<String, DeviceRef> {
        BTreeMap::from([(
            "data".to_string(),
            DeviceRef {
                path: None,
                size_bytes: 256 << 20,
                logical_block_size: 512,
            },
        )])
    }

    #[test]
    fn bad_parameters_name_their_field() {
        for (json, field) in [
            (r#""device": "nope""#, "device"),
            (r#""device": "data", "block_size": 700"#, "block_size"),
            (r#""device": "data", "block_size": 8192"#, "block_size"),
            (r#""device": "data", "file_mib": 200"#, "file_mib"),
            (r#""device": "data", "reads": 0"#, "reads"),
        ] {
            let w: Workload =
                serde_json::from_str(&format!(r#"{{"kind": "layer-latency", {json}}}"#)).unwrap();
            assert_eq!(w.validate(&devices()).unwrap_err().field, field, "{json}");
        }
        let w: Workload =
            serde_json::from_str(r#"{"kind": "layer-latency", "device": "data"}"#).unwrap();
        w.validate(&devices()).unwrap();
        assert!(w.needs().bpf_programs);
        assert!(
            w.needs()
                .kernel_options
                .iter()
                .any(|(o, _)| *o == "CONFIG_KPROBES")
        );
    }

    #[test]
    fn the_summary_checks_the_layers_against_the_untraced_reads() {
        let got = Collected {
            untraced_ns: vec![1000.0, 1200.0],
            traced_ns: vec![1300.0, 1300.0],
            layers: vec![[100, 100, 200, 100, 100, 600], [100, 100, 200, 100, 100, 600]],
            unattributed: BTreeMap::from([("twice NvmeIrq".to_string(), 1)]),
        };
        let s = summarize(&got, "nvme0n1", &LAYERS);
        assert_eq!(s["probe_overhead_ns"], 200.0);
        assert_eq!(s["probe_overhead_median_ns"], 200.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(s["layer_sum_ratio"], 1200.0 / 1100.0);
        assert_eq!(s["kernel_software_share"], 0.5);
        assert_eq!(s["ext4.layer_mean_ns"], 200.0);
        assert_eq!(s["reads_unattributed"], 1);
        let lines = show_lines(&s, &LAYERS).join("\n");
        assert!(lines.contains("mean: 1300 ns with probes, 1100 ns without; probe overhead 200 ns per read"), "{lines}");
        assert!(lines.contains("1 traced reads not split"), "{lines}");
    }
}
