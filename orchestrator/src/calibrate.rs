//! The host's own speed, measured the same way in every run: a canary.
//!
//! Two reproductions of one commit on this kind of machine once differed
//! by ~40 % everywhere (boots 1.1 → 1.4 s) while no other process took CPU
//! and steal stayed under 1 %: the host itself was slower (a throttled
//! cloud VM, another tenant's memory traffic), which the noise measure of
//! noise.rs cannot see. So every run times a fixed piece of host work at
//! its start and at its end — a dependent walk through a random cycle of
//! 8 MiB, the kind of work (memory and branches) an emulated guest does —
//! and `testbed compare` refuses to decide a change the host's own change
//! could explain (MongoDB's performance CI runs canaries for the same
//! reason).

use serde::{Deserialize, Serialize};

/// Steps of one timed pass: the cycle's length, so a pass touches every
/// slot once (~27 ms here: 13 ns a step, the walk lives in the L3 cache).
/// A 64 MiB walk (DRAM) measured ±8 % between runs seconds apart on this
/// machine, too noisy to decide a 5 % shift; this one ±4 % at 5 passes.
const STEPS: usize = 1 << 21;

/// Timed passes at the start and at the end of a run (~0.6 s in all).
pub const PASSES: usize = 10;

/// What the canary measured for one run: ns per step of each pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostSpeed {
    pub start_ns_per_step: Vec<f64>,
    #[serde(default)]
    pub end_ns_per_step: Vec<f64>,
}

impl HostSpeed {
    /// Median ns per step over every pass, start and end.
    pub fn median(&self) -> Option<f64> {
        let mut all: Vec<f64> = self
            .start_ns_per_step
            .iter()
            .chain(&self.end_ns_per_step)
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        if all.is_empty() {
            return None;
        }
        all.sort_by(f64::total_cmp);
        let mid = all.len() / 2;
        Some(if all.len().is_multiple_of(2) {
            (all[mid - 1] + all[mid]) / 2.0
        } else {
            all[mid]
        })
    }
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
    let next = cycle(STEPS);
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
    for _ in 0..next.len() {
        at = next[at as usize];
    }
    std::hint::black_box(at)
}

/// "canary 13.0 ns per step (start 12.9, end 13.1: +1.6 % over the run)".
pub fn describe(speed: &HostSpeed) -> Option<String> {
    let median = speed.median()?;
    let part = |v: &[f64]| {
        HostSpeed {
            start_ns_per_step: v.to_vec(),
            end_ns_per_step: Vec::new(),
        }
        .median()
    };
    let start = part(&speed.start_ns_per_step);
    let end = part(&speed.end_ns_per_step);
    Some(match (start, end) {
        (Some(a), Some(b)) => format!(
            "canary {median:.1} ns per step (start {a:.1}, end {b:.1}: {:+.1} % over the run)",
            (b / a - 1.0) * 100.0
        ),
        _ => format!("canary {median:.1} ns per step"),
    })
}

/// B's host relative to A's: median(B) / median(A) − 1 (0.25: every step
/// took 25 % longer on B's). None unless both runs were measured.
pub fn shift(a: &HostSpeed, b: &HostSpeed) -> Option<f64> {
    Some(b.median()? / a.median()? - 1.0)
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
    fn the_shift_is_the_ratio_of_the_medians() {
        let a = HostSpeed {
            start_ns_per_step: vec![10.0, 11.0, 9.0],
            end_ns_per_step: vec![10.0],
        };
        let b = HostSpeed {
            start_ns_per_step: vec![14.0, 13.0],
            end_ns_per_step: vec![15.0, 12.0],
        };
        let s = shift(&a, &b).unwrap();
        assert!((s - 0.35).abs() < 1e-9, "{s}");
        assert_eq!(shift(&a, &HostSpeed::default()), None);
    }
}
