//! The host's own speed, measured the same way in every run: a canary.
//!
//! Two reproductions of one commit on this kind of machine once differed
//! by ~40 % everywhere (boots 1.1 → 1.4 s) while no other process took CPU
//! and steal stayed under 1 %: the host itself was slower (a throttled
//! cloud VM, another tenant's memory traffic), which the noise measure of
//! noise.rs cannot see. So every run times a fixed piece of host work at
//! its start and at its end — a dependent walk through a random cycle of
//! 256 KiB, the kind of work (memory and branches) an emulated guest does —
//! and `testbed show` and `testbed compare` print it (MongoDB's
//! performance CI runs canaries for the same reason). It decides nothing
//! yet: in CI on 2026-12-03 this walk read 4.9 ns a step in one run and
//! 5.2, 6.3 and 7.3 ns in three runs minutes later, while the same
//! device's A/A latencies stayed within 1.3 %. A canary that tracks what
//! slows a TCG guest is still to be found.
//!
//! The cycle fits the core's own L2 cache. An 8 MiB one (the first canary)
//! lived in the L3 that other tenants of a cloud host share: within
//! seconds it read 13.5, 28 and 87 ns a step while QEMU's reads moved by
//! under 3 %, and `compare` then called a 10 % slower device "host
//! changed". The 256 KiB walk read 3.29–3.53 ns over the same minutes
//! (standalone; see above for what it did inside runs).

use serde::{Deserialize, Serialize};

/// Slots of the cycle: 256 KiB of u32, in L2 (see above).
const SLOTS: usize = 1 << 16;

/// Steps of one timed pass (~7 ms here: 3.3 ns a step).
const STEPS: usize = 1 << 21;

/// Names the canary in the manifest: runs measured by another one are not
/// compared by it.
pub const CANARY: &str = "walk-256KiB";

/// Timed passes at the start and at the end of a run (~0.6 s in all).
pub const PASSES: usize = 10;

/// What the canary measured for one run: ns per step of each pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostSpeed {
    /// Which canary ([`CANARY`]); runs before it had the 8 MiB walk.
    #[serde(default = "first_canary")]
    pub canary: String,
    pub start_ns_per_step: Vec<f64>,
    #[serde(default)]
    pub end_ns_per_step: Vec<f64>,
}

fn first_canary() -> String {
    "walk-8MiB".into()
}

impl HostSpeed {
    /// The host's speed, undisturbed: the lower quartile of ns per step
    /// over every pass, start and end. Disturbances only add time, and
    /// they come in bursts of seconds (a VM's memory being freed, page
    /// cache written back): in two reproductions of 12 specs here, single
    /// phases' medians reached 16.6–32.7 ns against 13–14 ns, while the
    /// lower quartiles of the two runs of each spec stayed within ±6 %.
    pub fn typical(&self) -> Option<f64> {
        quantile(
            self.start_ns_per_step.iter().chain(&self.end_ns_per_step),
            0.25,
        )
    }
}

/// The `q` quantile (nearest rank) of the finite, positive values.
fn quantile<'a>(values: impl Iterator<Item = &'a f64>, q: f64) -> Option<f64> {
    let mut all: Vec<f64> = values
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    if all.is_empty() {
        return None;
    }
    all.sort_by(f64::total_cmp);
    let rank = ((all.len() - 1) as f64 * q).round() as usize;
    Some(all[rank])
}

/// A random single cycle over `n` slots (Sattolo's algorithm), from a
/// fixed seed: every run walks the same cycle.
fn cycle(n: usize) -> Vec<u32> {
    let mut next: Vec<u32> = (0..n as u32).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = (x % i as u64) as usize;
        next.swap(i, j);
    }
    next
}

/// `passes` timed walks of the cycle, ns per step each.
pub fn measure(passes: usize) -> Vec<f64> {
    let next = cycle(SLOTS);
    // One untimed pass: page faults and caches warmed, as for every pass.
    let mut at = walk(&next, 0);
    (0..passes)
        .map(|_| {
            let started = std::time::Instant::now();
            at = walk(&next, at);
            started.elapsed().as_nanos() as f64 / STEPS as f64
        })
        .collect()
}

/// STEPS dependent loads: each slot names the next.
fn walk(next: &[u32], from: u32) -> u32 {
    let mut at = from;
    for _ in 0..STEPS {
        at = next[at as usize];
    }
    std::hint::black_box(at)
}

/// "canary 13.0 ns per step (lower quartile; medians at the start 12.9,
/// at the end 13.1)".
pub fn describe(speed: &HostSpeed) -> Option<String> {
    let typical = speed.typical()?;
    let start = quantile(speed.start_ns_per_step.iter(), 0.5);
    let end = quantile(speed.end_ns_per_step.iter(), 0.5);
    Some(match (start, end) {
        (Some(a), Some(b)) => format!(
            "canary {typical:.1} ns per step (lower quartile of {} passes; medians at the start {a:.1}, at the end {b:.1})",
            speed.start_ns_per_step.len() + speed.end_ns_per_step.len()
        ),
        _ => format!("canary {typical:.1} ns per step"),
    })
}

/// B's host relative to A's: typical(B) / typical(A) − 1 (0.25: every
/// step took 25 % longer on B's). None unless both runs were measured by
/// the same canary.
pub fn shift(a: &HostSpeed, b: &HostSpeed) -> Option<f64> {
    if a.canary != b.canary {
        return None;
    }
    Some(b.typical()? / a.typical()? - 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cycle_visits_every_slot_once() {
        let next = cycle(1000);
        let mut seen = vec![false; 1000];
        let mut at = 0u32;
        for _ in 0..1000 {
            assert!(!seen[at as usize], "slot {at} twice");
            seen[at as usize] = true;
            at = next[at as usize];
        }
        assert_eq!(at, 0);
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn a_measure_gives_one_positive_time_per_pass() {
        let t = measure(2);
        assert_eq!(t.len(), 2);
        assert!(t.iter().all(|v| v.is_finite() && *v > 0.0), "{t:?}");
    }

    #[test]
    fn the_shift_is_the_ratio_of_the_lower_quartiles() {
        // A burst at the end of A (30 ns) does not move its speed.
        let a = HostSpeed {
            canary: CANARY.into(),
            start_ns_per_step: vec![10.0, 11.0, 10.0, 10.5, 10.0],
            end_ns_per_step: vec![30.0, 31.0, 30.0, 10.0],
        };
        assert_eq!(a.typical(), Some(10.0));
        // B slower throughout.
        let b = HostSpeed {
            canary: CANARY.into(),
            start_ns_per_step: vec![14.0, 13.0, 13.5, 15.0, 13.0],
            end_ns_per_step: vec![13.0, 14.0, 13.0, 13.5],
        };
        let s = shift(&a, &b).unwrap();
        assert!((s - 0.3).abs() < 1e-9, "{s}");
        assert_eq!(shift(&a, &HostSpeed::default()), None);
        // A run of the first canary (8 MiB) is not compared with this one.
        let old: HostSpeed =
            serde_json::from_str(r#"{"start_ns_per_step": [13.0], "end_ns_per_step": [13.0]}"#)
                .unwrap();
        assert_eq!(old.canary, "walk-8MiB");
        assert_eq!(shift(&a, &old), None);
    }
}
