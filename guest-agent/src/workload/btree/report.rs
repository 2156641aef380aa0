//! Turns the threads' tallies into raw samples (`lookup_latency`,
//! `hop_latency`, tagged by engine) and summary numbers per engine.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use super::lookup::Plan;
use super::params::Engine;
use super::runner::ThreadOutcome;
use crate::workload::{JobContext, Summary, latency_summary};

/// Summary key `name` under `prefix` (`read.lookups_per_s`), or bare.
pub fn key(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

fn put(summary: &mut Summary, k: String, v: impl Into<serde_json::Value>) {
    summary.insert(k, v.into());
}

/// Sends the kept raw samples of every thread and engine.
pub fn emit_samples(ctx: &JobContext, engines: &[Engine], outcomes: &[ThreadOutcome]) {
    for (t, o) in outcomes.iter().enumerate() {
        for (engine, tally) in engines.iter().zip(&o.tallies) {
            let mut tags = BTreeMap::from([("engine".to_string(), engine.name().to_string())]);
            ctx.emit_samples(
                "lookup_latency",
                "ns",
                t as u32,
                &tags,
                &tally.rec.kept_lookups_ns(),
            );
            for (hop, values) in tally.rec.kept_hops_ns.iter().enumerate() {
                tags.insert("hop".into(), hop.to_string());
                ctx.emit_samples("hop_latency", "ns", t as u32, &tags, values);
            }
        }
    }
}

/// Headline numbers of one engine, for comparisons.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineNumbers {
    pub ios_per_s: f64,
    pub hop_mean_ns: f64,
}

/// Summary of engine `e` (index into the job's engines) under `prefix`.
pub fn summarise_engine(
    prefix: &str,
    e: usize,
    plan: &Plan,
    outcomes: &[ThreadOutcome],
    wall_s: f64,
    bios_counted: bool,
    summary: &mut Summary,
) -> EngineNumbers {
    let tallies: Vec<_> = outcomes.iter().filter_map(|o| o.tallies.get(e)).collect();
    let all: Vec<f64> = tallies
        .iter()
        .flat_map(|t| t.rec.lookups_ns.iter().copied())
        .collect();
    let lookups = all.len() as f64;
    let lookups_per_s = if wall_s > 0.0 { lookups / wall_s } else { 0.0 };
    let ios_per_s = lookups_per_s * f64::from(plan.ios_per_lookup());
    put(summary, key(prefix, "lookups"), lookups);
    put(summary, key(prefix, "wall_s"), wall_s);
    put(summary, key(prefix, "lookups_per_s"), lookups_per_s);
    put(summary, key(prefix, "ios_per_s"), ios_per_s);
    if bios_counted {
        let bios: u64 = tallies.iter().map(|t| t.bios).sum();
        put(summary, key(prefix, "block_bios"), bios);
        if lookups > 0.0 {
            put(summary, key(prefix, "bios_per_lookup"), bios as f64 / lookups);
        }
    }
    let verified: u64 = tallies.iter().map(|t| t.rec.verified).sum();
    put(summary, key(prefix, "verified_lookups"), verified);
    latency_summary(&key(prefix, "lookup_latency"), &all, summary);

    // Hop latency: per hop index, merged over threads, then over hops.
    let hops = plan.ios_per_lookup() as usize;
    let mut by_hop = Vec::with_capacity(hops);
    let mut overall: Option<Histogram<u64>> = None;
    for h in 0..hops {
        let mut merged: Option<Histogram<u64>> = None;
        for t in &tallies {
            let Some(src) = t.rec.hop_hist.get(h) else {
                continue;
            };
            match merged.as_mut() {
                None => merged = Some(src.clone()),
                // Auto-resizing histograms of the same precision always add.
                Some(m) => {
                    let _ = m.add(src);
                }
            }
        }
        let Some(m) = merged else { continue };
        by_hop.push(m.mean());
        match overall.as_mut() {
            None => overall = Some(m),
            Some(o) => {
                let _ = o.add(&m);
            }
        }
    }
    let hop_mean_ns = overall.as_ref().map_or(0.0, Histogram::mean);
    if let Some(o) = overall {
        put(summary, key(prefix, "hop_latency_mean_ns"), o.mean());
        put(
            summary,
            key(prefix, "hop_latency_p99_ns"),
            o.value_at_quantile(0.99),
        );
    }
    put(summary, key(prefix, "hop_latency_mean_ns_by_hop"), by_hop);
    let (user, sys) = tallies
        .iter()
        .fold((0.0, 0.0), |(u, s), t| (u + t.cpu.user_s, s + t.cpu.sys_s));
    put(summary, key(prefix, "cpu_user_s"), user);
    put(summary, key(prefix, "cpu_sys_s"), sys);
    let guest_busy: f64 = tallies.iter().map(|t| t.guest_busy_s).sum();
    put(summary, key(prefix, "guest_busy_s"), guest_busy);
    if lookups > 0.0 {
        put(
            summary,
            key(prefix, "cpu_us_per_lookup"),
            (user + sys) / lookups * 1e6,
        );
        put(
            summary,
            key(prefix, "guest_cpu_us_per_lookup"),
            guest_busy / lookups * 1e6,
        );
    }
    let ios = lookups * f64::from(plan.ios_per_lookup());
    if ios > 0.0 {
        put(
            summary,
            key(prefix, "cpu_us_per_io"),
            (user + sys) / ios * 1e6,
        );
    }
    EngineNumbers {
        ios_per_s,
        hop_mean_ns,
    }
}

/// The subsampling rule, in words, for the summary.
pub fn sample_rule(sample_every: u64) -> String {
    if sample_every <= 1 {
        "every lookup and hop kept".into()
    } else {
        format!(
            "lookup i of each (thread, engine) kept when i % {sample_every} == 0, with its hops; \
             summary statistics use all lookups"
        )
    }
}
