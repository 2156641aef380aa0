//! What the storage-hook engines add to a btree job's summary: the
//! cross-check (every engine looks up the same keys), the reads the kernel
//! did (re-issued reads never show in /proc/diskstats), and each engine's
//! speedup over its user-space baseline measured in the same job.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::params::Engine;
use super::recorder::Recorder;
use super::report::key;
use super::engine;
use super::lookup::Lookups;
use super::runner::{RunConfig, ThreadOutcome};
use crate::workload::{Summary, WorkloadError};

/// Mixed into the job seed so the cross-check keys differ from the measured ones.
const CROSS_SEED: u64 = 0x00c4_05c4_ec4e_d000;

/// Every engine looks up the same `n` keys (one rng seed for all engines,
/// one thread); each engine verifies every value against its key, so all
/// engines returned the same bytes for the same keys, or the job fails.
pub fn cross_check(cfg: &RunConfig, n: u64, summary: &mut Summary) -> Result<(), WorkloadError> {
    let hops = cfg.plan.ios_per_lookup() as usize;
    for &engine in cfg.engines {
        let mut inst = engine::open(engine, cfg.path, cfg.plan, cfg.uring)?;
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ CROSS_SEED);
        let mut rec = Recorder::new(hops, u64::MAX)?;
        inst.run(Lookups {
            plan: cfg.plan,
            rng: &mut rng,
            n,
            rec: &mut rec,
        }).map_err(|e| {
            WorkloadError::Other(format!("cross-check, engine {}: {e}", engine.name()))
        })?;
        summary.insert(
            format!("cross_check.{}.verified", engine.name()),
            rec.verified.into(),
        );
        if engine.is_hook() {
            summary.insert(
                format!("cross_check.{}.kernel_hops", engine.name()),
                inst.take_kernel_hops().into(),
            );
        }
    }
    summary.insert("cross_check.lookups".into(), n.into());
    summary.insert("cross_check.seed".into(), (cfg.seed ^ CROSS_SEED).into());
    Ok(())
}

/// Reads done in the kernel by engine `e`'s measured lookups.
pub fn put_kernel_hops(prefix: &str, e: usize, outcomes: &[ThreadOutcome], summary: &mut Summary) {
    let hops: u64 = outcomes
        .iter()
        .filter_map(|o| o.tallies.get(e))
        .map(|t| t.kernel_hops)
        .sum();
    let lookups: u64 = outcomes
        .iter()
        .filter_map(|o| o.tallies.get(e))
        .map(|t| t.rec.verified)
        .sum();
    summary.insert(key(prefix, "kernel_hops"), hops.into());
    if lookups > 0 {
        summary.insert(
            key(prefix, "kernel_hops_per_lookup"),
            (hops as f64 / lookups as f64).into(),
        );
    }
}

/// The user-space engine a hook engine is compared with.
fn baseline(e: Engine) -> Option<Engine> {
    match e {
        Engine::SyscallHook | Engine::NvmeHook => Some(Engine::Read),
        Engine::SyscallHookUring | Engine::NvmeHookUring => Some(Engine::IoUring),
        Engine::Read
        | Engine::IoUring
        | Engine::IoUringPoll
        | Engine::IoUringSqpoll
        | Engine::NvmePassthru
        | Engine::NvmePassthruPoll => None,
    }
}

fn number(summary: &Summary, k: &str) -> Option<f64> {
    summary.get(k).and_then(serde_json::Value::as_f64)
}

/// `speedup.<engine>.latency` (baseline mean lookup latency / the
/// engine's), `.latency_p50` (the same with medians, robust to a busy
/// host's hiccups) and `.throughput` (lookups/s ratio), for every
/// hook engine whose baseline ran in the same job; interleaved engines in
/// one boot are the only fair comparison (results drift between boots).
pub fn put_speedups(engines: &[Engine], summary: &mut Summary) {
    if engines.len() < 2 {
        return;
    }
    for &e in engines {
        let Some(base) = baseline(e).filter(|b| engines.contains(b)) else {
            continue;
        };
        let prefix = format!("speedup.{}", e.name());
        let ratios: Vec<(String, f64)> = [
            ("latency", "lookup_latency_mean_ns", false),
            ("latency_p50", "lookup_latency_p50_ns", false),
            ("throughput", "lookups_per_s", true),
        ]
        .into_iter()
        .filter_map(|(name, field, invert)| {
            let a = number(summary, &key(base.name(), field))?;
            let b = number(summary, &key(e.name(), field))?;
            let (num, den) = if invert { (b, a) } else { (a, b) };
            (den > 0.0).then(|| (format!("{prefix}.{name}"), num / den))
        })
        .collect();
        for (k, x) in ratios {
            summary.insert(k, x.into());
        }
        summary.insert(format!("{prefix}.baseline"), base.name().into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speedups_compare_each_hook_with_its_own_baseline() {
        let mut s = Summary::new();
        for (k, v) in [
            ("read.lookup_latency_mean_ns", 1500.0),
            ("read.lookups_per_s", 600.0),
            ("nvme-hook.lookup_latency_mean_ns", 1000.0),
            ("nvme-hook.lookups_per_s", 1000.0),
            ("nvme-hook-uring.lookup_latency_mean_ns", 10.0),
        ] {
            s.insert(k.into(), v.into());
        }
        let engines = [Engine::Read, Engine::NvmeHook, Engine::NvmeHookUring];
        put_speedups(&engines, &mut s);
        assert_eq!(s["speedup.nvme-hook.latency"], 1.5);
        assert!((s["speedup.nvme-hook.throughput"].as_f64().unwrap() - 1.6667).abs() < 1e-3);
        assert_eq!(s["speedup.nvme-hook.baseline"], "read");
        // io-uring did not run: no ratio for the ring variant.
        assert!(!s.contains_key("speedup.nvme-hook-uring.latency"));
    }
}
