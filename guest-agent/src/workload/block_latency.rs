//! Device read latency vs block size: for each named device, random
//! O_DIRECT reads at queue depth 1 with the block sizes interleaved in a
//! seeded random order, one raw sample per read, tagged with the device and
//! the block size. The worked example of
//! experiments/EXTENDING.md: this file and its one line in the registry
//! (`workload/mod.rs`) are all the code it needs.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::randread::{AlignedBuf, open_direct};
use super::{JobContext, MetricInfo, ParamError, Summary, WorkloadError, WorkloadParams};
use testbed_vocab::protocol::DeviceRef;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockLatencyParams {
    /// The `[[devices]]` to read from, in order.
    pub devices: Vec<String>,
    /// Bytes per read; each a multiple of every device's logical block size.
    #[serde(default = "default_block_sizes")]
    pub block_sizes: Vec<u32>,
    /// Measured reads per device and block size.
    #[serde(default = "default_reads")]
    pub reads: u64,
    /// Unmeasured reads before each measured series.
    #[serde(default = "default_warmup")]
    pub warmup_reads: u64,
}

fn default_block_sizes() -> Vec<u32> {
    vec![512, 4096, 16384, 65536, 131072]
}
fn default_reads() -> u64 {
    200
}
fn default_warmup() -> u64 {
    10
}

impl WorkloadParams for BlockLatencyParams {
    fn validate(&self, devices: &BTreeMap<String, DeviceRef>) -> Result<(), ParamError> {
        if self.devices.is_empty() {
            return Err(ParamError::new("devices", "name at least one device"));
        }
        if self.block_sizes.is_empty() {
            return Err(ParamError::new("block_sizes", "name at least one size"));
        }
        if self.reads == 0 {
            return Err(ParamError::new("reads", "must be at least 1"));
        }
        for name in &self.devices {
            let dev = devices.get(name).ok_or_else(|| {
                ParamError::new("devices", format!("no device named {name:?} in [[devices]]"))
            })?;
            let lbs = dev.logical_block_size.max(1);
            for &bs in &self.block_sizes {
                if bs == 0 || !bs.is_multiple_of(lbs) || u64::from(bs) > dev.size_bytes {
                    return Err(ParamError::new(
                        "block_sizes",
                        format!(
                            "{bs} does not fit device {name:?}: it must be a positive multiple of its logical block size {lbs} and at most its size {}",
                            dev.size_bytes
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        let mut rng = ChaCha8Rng::seed_from_u64(ctx.seed);
        let mut total = 0u64;
        for name in &self.devices {
            let dev = ctx.device(name)?.clone();
            let file = open_direct(&ctx.device_path(name)?)?;
            let mut bufs: Vec<AlignedBuf> = self
                .block_sizes
                .iter()
                .map(|&bs| AlignedBuf::new(bs as usize, 4096))
                .collect::<Result<_, _>>()?;
            // The sizes are interleaved in a seeded random order, so none
            // of them always runs first (cold) or last.
            let mut schedule: Vec<usize> = (0..self.block_sizes.len())
                .flat_map(|i| std::iter::repeat_n(i, (self.warmup_reads + self.reads) as usize))
                .collect();
            schedule.shuffle(&mut rng);
            let mut seen = vec![0u64; self.block_sizes.len()];
            let mut latencies: Vec<Vec<f64>> = vec![Vec::new(); self.block_sizes.len()];
            for i in schedule {
                let bs = self.block_sizes[i];
                // Offsets aligned to the read size (and to 4 KiB at least).
                let align = u64::from(bs.max(4096));
                let slots = dev.size_bytes.saturating_sub(u64::from(bs)) / align + 1;
                let off = rng.random_range(0..slots) * align;
                let t = Instant::now();
                let n = file
                    .read_at(bufs[i].as_mut_slice(), off)
                    .map_err(|e| WorkloadError::io(format!("{name}: read {bs} B at {off}"), e))?;
                let ns = t.elapsed().as_nanos() as f64;
                if n != bs as usize {
                    return Err(WorkloadError::Device {
                        name: name.clone(),
                        reason: format!("short read: {n} of {bs} bytes at {off}"),
                    });
                }
                seen[i] += 1;
                // Each size's first reads warm up and are not kept.
                if seen[i] > self.warmup_reads {
                    latencies[i].push(ns);
                }
            }
            for (&bs, lat) in self.block_sizes.iter().zip(&latencies) {
                let tags = BTreeMap::from([
                    ("device".to_string(), name.clone()),
                    ("block_size".to_string(), bs.to_string()),
                ]);
                ctx.emit_samples("read_latency", "ns", 0, &tags, lat);
                total += lat.len() as u64;
            }
        }
        Ok(Summary::from([("reads".to_string(), total.into())]))
    }

    fn needs(&self) -> super::Needs {
        super::Needs::default()
    }

    fn metrics(&self) -> Vec<MetricInfo> {
        vec![
            MetricInfo::raw("read_latency", "ns", &["device", "block_size"]),
            MetricInfo::summary("reads", "", &[]),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{VecSink, Workload};
    use std::sync::Arc;

    fn devices(path: Option<String>) -> BTreeMap<String, DeviceRef> {
        BTreeMap::from([(
            "data".to_string(),
            DeviceRef {
                path,
                size_bytes: 1 << 20,
                logical_block_size: 512,
            },
        )])
    }

    #[test]
    fn bad_sizes_and_devices_name_their_field() {
        let w: Workload = serde_json::from_str(
            r#"{"kind": "block-latency", "devices": ["data"], "block_sizes": [700]}"#,
        )
        .unwrap();
        assert_eq!(w.validate(&devices(None)).unwrap_err().field, "block_sizes");
        let w: Workload =
            serde_json::from_str(r#"{"kind": "block-latency", "devices": ["nope"]}"#).unwrap();
        let e = w.validate(&devices(None)).unwrap_err();
        assert!(e.field == "devices" && e.reason.contains("nope"), "{e}");
    }

    #[test]
    fn one_tagged_series_per_device_and_size() {
        // In the checkout, not /tmp: tmpfs has no O_DIRECT, and a test that
        // returned early there would read as passed.
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let f = dir.path().join("disk");
        std::fs::write(&f, vec![7u8; 1 << 20]).unwrap();
        let p = BlockLatencyParams {
            devices: vec!["data".into()],
            block_sizes: vec![512, 8192],
            reads: 5,
            warmup_reads: 1,
        };
        let sink = Arc::new(VecSink::default());
        let ctx = JobContext {
            job_id: 1,
            seed: 3,
            devices: devices(Some(f.display().to_string())),
            sink: sink.clone(),
        };
        let summary = p.run(&ctx).unwrap();
        assert_eq!(summary["reads"], 10);
        let chunks = sink.0.lock().unwrap();
        let sizes: Vec<&str> = chunks.iter().map(|c| c.tags["block_size"].as_str()).collect();
        assert_eq!(sizes, ["512", "8192"]);
        assert!(chunks.iter().all(|c| c.values.len() == 5 && c.tags["device"] == "data"));
        assert!(chunks.iter().flat_map(|c| &c.values).all(|v| *v > 0.0));
    }
}
