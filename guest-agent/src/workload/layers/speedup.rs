//! Does the breakdown explain the NVMe hook's speedup? From the layers: a
//! chain of d dependent reads costs d whole reads from user space, but
//! with the hook only its first read goes through every layer; each later
//! hop is re-issued from the completion path and pays the NVMe driver and
//! the device only. The prediction uses the breakdown's proportions only
//! (the driver and device layers' share of the sum of layers): under TCG
//! the probes' attach and detach make the kernel retranslate its code, so
//! the traced run's absolute times are longer than the chains' reads. Beside that prediction, the same boot measures the
//! speedup on the same namespace: synthetic chains (the btree workload's
//! `mode = "synthetic"`), `read` and `nvme-hook` interleaved.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::events::LAYERS;
use crate::workload::btree::BtreeParams;
use crate::workload::{JobContext, Summary, VecSink, WorkloadError, WorkloadParams};

/// Layers a re-issued hop still pays: the NVMe driver and the device.
const PER_HOP: [&str; 2] = ["NVMe driver", "device"];

/// Speedup of the NVMe hook over read() at `depth` if every hop after the
/// first skips every layer above the driver:
/// d × whole / (whole + (d − 1) × (driver + device)), whole the sum of the
/// layers.
pub fn predicted(layer_means: &[f64], depth: u32) -> f64 {
    let whole: f64 = layer_means.iter().sum();
    let per_hop: f64 = LAYERS
        .iter()
        .zip(layer_means)
        .filter(|(l, _)| PER_HOP.contains(l))
        .map(|(_, m)| m)
        .sum();
    let d = f64::from(depth);
    d * whole / (whole + (d - 1.0) * per_hop)
}

/// What the chains measured at one depth.
pub struct Measured {
    /// Mean lookup latency of read over nvme-hook.
    pub speedup: f64,
}

/// Synthetic chains of `depth` reads on `device`, read and nvme-hook
/// interleaved (the btree workload, `mode = "synthetic"`).
pub fn measured(
    ctx: &JobContext,
    device: &str,
    depth: u32,
    lookups: u64,
) -> Result<Measured, WorkloadError> {
    let params: BtreeParams = serde_json::from_value(serde_json::json!({
        "device": device,
        "mode": "synthetic",
        "engines": ["read", "nvme-hook"],
        "depth": depth,
        "threads": 1,
        "batch": 1,
        "lookups_per_thread": lookups,
        "warmup_lookups": 10,
        "interleave_block": 10,
    }))
    .map_err(|e| WorkloadError::Other(format!("hook chains: {e}")))?;
    // The chains' own samples stay out of this job's table: only the
    // speedup is this workload's result.
    let sub = JobContext {
        job_id: ctx.job_id,
        seed: ctx.seed ^ u64::from(depth),
        devices: ctx.devices.clone(),
        sink: Arc::new(VecSink::default()),
    };
    let summary: Summary = params.run(&sub)?;
    let get = |key: &str| {
        summary.get(key).and_then(|v| v.as_f64()).ok_or_else(|| {
            WorkloadError::Other(format!(
                "hook chains at depth {depth}: no {key} in their summary"
            ))
        })
    };
    Ok(Measured {
        speedup: get("speedup.nvme-hook.latency")?,
    })
}

/// Raw `hook_speedup` samples: one predicted and one measured per depth.
pub fn emit(ctx: &JobContext, rows: &[(u32, f64, f64)]) {
    for &(depth, predicted, measured) in rows {
        for (estimate, v) in [("predicted", predicted), ("measured", measured)] {
            let tags = BTreeMap::from([
                ("estimate".to_string(), estimate.to_string()),
                ("depth".to_string(), depth.to_string()),
            ]);
            ctx.emit_samples("hook_speedup", "x", 0, &tags, &[v]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prediction_is_one_at_depth_one_and_bounded_by_the_share_skipped() {
        // Table 1 of the paper: 6.27 µs, driver + device 3.34 µs.
        let paper = [351.0, 199.0, 2006.0, 379.0, 113.0, 3224.0];
        let whole: f64 = paper.iter().sum();
        assert!((predicted(&paper, 1) - 1.0).abs() < 1e-12);
        let at10 = predicted(&paper, 10);
        // 10 × 6272 / (6272 + 9 × 3337) = 1.728
        assert!((at10 - 1.7276).abs() < 1e-3, "{at10}");
        // Deep chains approach whole / per-hop.
        let limit = whole / (113.0 + 3224.0);
        let deep = predicted(&paper, 1000);
        assert!(deep < limit && deep > 0.99 * limit);
        // Only proportions count: every layer twice as long, same speedup.
        let doubled: Vec<f64> = paper.iter().map(|v| 2.0 * v).collect();
        assert!((predicted(&doubled, 10) - at10).abs() < 1e-12);
    }
}
