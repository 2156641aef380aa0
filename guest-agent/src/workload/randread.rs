//! Random O_DIRECT reads at queue depth 1 per thread: the first real workload,
//! and the peer of fio's `randread` at iodepth 1.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{JobContext, ParamError, Summary, WorkloadError, defaults, latency_summary};
use testbed_vocab::protocol::DeviceRef;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandReadParams {
    /// Name of the device (a `[[devices]]` entry) to read from.
    pub device: String,
    /// Bytes per read; a multiple of the device's logical block size.
    #[serde(default = "defaults::block_size")]
    pub block_size: u32,
    /// Offsets are multiples of this (4096 as in the HotOS benchmark).
    #[serde(default = "defaults::align")]
    pub align: u32,
    #[serde(default = "defaults::one_u32")]
    pub threads: u32,
    /// Measured reads per thread.
    #[serde(default = "default_reads")]
    pub reads_per_thread: u64,
    /// Unmeasured reads per thread before measuring.
    #[serde(default = "default_warmup")]
    pub warmup_reads: u64,
}

fn default_reads() -> u64 {
    1000
}
fn default_warmup() -> u64 {
    50
}

impl RandReadParams {
    pub fn validate(&self, devices: &BTreeMap<String, DeviceRef>) -> Result<(), ParamError> {
        let dev = super::named_device(devices, &self.device)?;
        super::lba_multiple("block_size", self.block_size, dev)?;
        super::lba_multiple("align", self.align, dev)?;
        if self.threads == 0 {
            return Err(ParamError::new("threads", "must be at least 1"));
        }
        if self.reads_per_thread == 0 {
            return Err(ParamError::new("reads_per_thread", "must be at least 1"));
        }
        if u64::from(self.block_size.max(self.align)) > dev.size_bytes {
            return Err(ParamError::new(
                "block_size",
                format!(
                    "device {:?} holds only {} bytes",
                    self.device, dev.size_bytes
                ),
            ));
        }
        Ok(())
    }
}

/// A heap buffer aligned for O_DIRECT.
pub struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// The buffer is plain memory owned by one thread at a time.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    pub fn new(len: usize, align: usize) -> Result<Self, WorkloadError> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), align.max(1))
            .map_err(|e| WorkloadError::Other(format!("buffer layout: {e}")))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(WorkloadError::Other("out of memory for I/O buffer".into()));
        }
        Ok(AlignedBuf { ptr, layout })
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live allocation of layout.size() bytes owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in new().
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// Opens a device or file for O_DIRECT reads.
pub fn open_direct(path: &str) -> Result<File, WorkloadError> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| WorkloadError::io(format!("open {path} with O_DIRECT"), e))
}

struct ThreadResult {
    latencies_ns: Vec<f64>,
}

pub fn run(p: &RandReadParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    let dev = ctx.device(&p.device)?.clone();
    let path = ctx.device_path(&p.device)?;
    let slots = dev.size_bytes.saturating_sub(u64::from(p.block_size)) / u64::from(p.align) + 1;

    let started = Instant::now();
    let results: Vec<Result<ThreadResult, WorkloadError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..p.threads)
            .map(|t| {
                let path = path.clone();
                s.spawn(move || {
                    read_loop(p, &path, slots, ctx.seed ^ (u64::from(t) << 32 | 0x5eed))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(WorkloadError::Other("reader thread panicked".into())))
            })
            .collect()
    });
    let wall = started.elapsed().as_secs_f64();

    let mut all = Vec::new();
    let no_tags = BTreeMap::new();
    for (t, r) in results.into_iter().enumerate() {
        let r = r?;
        ctx.emit_samples("read_latency", "ns", t as u32, &no_tags, &r.latencies_ns);
        all.extend(r.latencies_ns);
    }
    let mut summary = Summary::new();
    let reads = all.len() as f64;
    summary.insert("reads".into(), serde_json::json!(reads));
    summary.insert("wall_s".into(), serde_json::json!(wall));
    summary.insert("iops".into(), serde_json::json!(reads / wall));
    summary.insert(
        "mb_per_s".into(),
        serde_json::json!(reads * f64::from(p.block_size) / wall / (1 << 20) as f64),
    );
    latency_summary("read_latency", &all, &mut summary);
    Ok(summary)
}

fn read_loop(
    p: &RandReadParams,
    path: &str,
    slots: u64,
    seed: u64,
) -> Result<ThreadResult, WorkloadError> {
    let file = open_direct(path)?;
    let mut buf = AlignedBuf::new(p.block_size as usize, 4096)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut latencies_ns = Vec::with_capacity(p.reads_per_thread as usize);
    for i in 0..(p.warmup_reads + p.reads_per_thread) {
        let off = rng.random_range(0..slots) * u64::from(p.align);
        let t0 = Instant::now();
        let n = file
            .read_at(buf.as_mut_slice(), off)
            .map_err(|e| WorkloadError::io(format!("pread {path} at {off}"), e))?;
        let dt = t0.elapsed();
        if n != p.block_size as usize {
            return Err(WorkloadError::io(
                format!("pread {path} at {off}"),
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("short read of {n} bytes"),
                ),
            ));
        }
        if i >= p.warmup_reads {
            latencies_ns.push(dt.as_nanos() as f64);
        }
    }
    Ok(ThreadResult { latencies_ns })
}

impl super::WorkloadParams for RandReadParams {
    fn validate(&self, devices: &BTreeMap<String, DeviceRef>) -> Result<(), ParamError> {
        RandReadParams::validate(self, devices)
    }
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run(self, ctx)
    }
    fn metrics(&self) -> Vec<super::MetricInfo> {
        use super::MetricInfo as M;
        vec![
            M::raw("read_latency", "ns", &[]),
            M::summary("reads", "", &[]),
            M::summary("wall_s", "s", &[]),
            M::summary("iops", "IOPS", &[]),
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

    fn params() -> RandReadParams {
        RandReadParams {
            device: "data".into(),
            block_size: 512,
            align: 4096,
            threads: 2,
            reads_per_thread: 20,
            warmup_reads: 2,
        }
    }

    #[test]
    fn validation_names_the_field() {
        let mut p = params();
        p.threads = 0;
        assert_eq!(p.validate(&devices(1 << 20)).unwrap_err().field, "threads");
        let mut p = params();
        p.block_size = 700;
        assert_eq!(
            p.validate(&devices(1 << 20)).unwrap_err().field,
            "block_size"
        );
        let mut p = params();
        p.device = "nope".into();
        assert!(
            p.validate(&devices(1 << 20))
                .unwrap_err()
                .to_string()
                .contains("nope")
        );
        assert!(params().validate(&devices(1 << 20)).is_ok());
    }

    #[test]
    fn reads_a_file_and_emits_one_sample_per_read() {
        // O_DIRECT needs a real filesystem: use the target dir, not tmpfs.
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let path = dir.path().join("dev.img");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let mut devs = devices(1 << 20);
        devs.get_mut("data").unwrap().path = Some(path.to_string_lossy().into());
        let sink = Arc::new(VecSink::default());
        let ctx = JobContext {
            job_id: 9,
            seed: 1,
            devices: devs,
            sink: sink.clone(),
        };
        let summary = Workload::Randread(params()).run(&ctx).unwrap();
        let chunks = sink.0.lock().unwrap();
        let n: usize = chunks.iter().map(|c| c.values.len()).sum();
        assert_eq!(n, 40);
        assert!(
            chunks
                .iter()
                .all(|c| c.job_id == 9 && c.metric == "read_latency")
        );
        assert!(chunks.iter().flat_map(|c| &c.values).all(|&v| v > 0.0));
        assert_eq!(summary["reads"], serde_json::json!(40.0));
    }
}
