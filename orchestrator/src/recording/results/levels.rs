//! Variance by level (Kalibera and Jones, "Rigorous benchmarking in
//! reasonable time", 2013): how much of a summary number's spread is
//! between boots and how much between repetitions inside one boot, and
//! from that and what each level costs, how many repetitions per boot give
//! the tightest interval per minute.
//!
//! For one point with boots i = 1..n, each with r_i repetitions:
//! S₁² is the mean of the within-boot variances, S₂² the variance of the
//! boot means; the between-boot component is T₂ = S₂² − S₁²/r̄ (clamped at
//! 0: a negative estimate means no boot effect was seen). With costs c₁
//! (one more repetition of the sweep in a boot) and c₂ (one more boot),
//! the repetitions per boot that minimise the interval for a time budget
//! are r* = ⌈√(c₂/c₁ · T₁/T₂)⌉ (their equation for two levels).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::manifest::PointRecord;

/// One summary number's variance at each level, over the run's points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelVariance {
    /// The summary key, e.g. `read.lookups_per_s`.
    pub metric: String,
    /// Points (sweep combinations) it was estimated on.
    pub points: usize,
    /// Median over points of √T₁ / mean: spread inside one boot. None when
    /// no boot ran two repetitions of a point.
    pub within_boot_cv: Option<f64>,
    /// Median over points of √T₂ / mean: spread of the boots' own levels
    /// beyond what the within-boot spread explains. None with one boot.
    /// With one repetition per boot it is the whole spread between boots
    /// (the two levels cannot be told apart).
    pub between_boot_cv: Option<f64>,
    /// r* from the measured costs, when both levels were estimated.
    pub best_repetitions_per_boot: Option<u32>,
    /// Median over points of the value's magnitude: what its resolution is
    /// weighed against (absent in runs recorded before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typical: Option<f64>,
}

/// A metric's resolution, where it is coarser than its values can be:
/// CPU times read from the kernel's accounting count 10 ms ticks
/// (USER_HZ = 100), so a process busy for less than a few ticks reads 0 or
/// 0.01 s and its spread between boots is the tick, not the process.
pub fn resolution(metric: &str) -> Option<(f64, &'static str)> {
    let name = metric.rsplit('.').next().unwrap_or(metric);
    let ticked = [
        "cpu_user_s",
        "cpu_sys_s",
        "cpu_system_s",
        "busy_s",
        "cpu_total_s",
        "cpu_s",
        "vcpu_s",
    ];
    ticked
        .iter()
        .any(|t| name == *t || name.ends_with(&format!("_{t}")))
        .then_some((0.01, "10 ms CPU ticks"))
}

/// Within this many units of its resolution a value has no variance to
/// report, only the resolution.
pub const RESOLUTION_UNITS: f64 = 5.0;

fn below_resolution(l: &LevelVariance) -> Option<(f64, &'static str)> {
    let (res, what) = resolution(&l.metric)?;
    l.typical
        .filter(|t| *t < RESOLUTION_UNITS * res)
        .map(|_| (res, what))
}

/// What a boot and a repetition cost, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Costs {
    /// Starting a VM until its agent answers (and its shutdown).
    pub boot_s: f64,
    /// One repetition of the whole sweep inside a boot.
    pub repetition_s: f64,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Sample variance (n − 1); None below two values.
fn variance(v: &[f64]) -> Option<f64> {
    (v.len() >= 2).then(|| {
        let m = mean(v);
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64
    })
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// T₁ and T₂ of one point's values grouped by boot.
fn components(by_boot: &[Vec<f64>]) -> (Option<f64>, Option<f64>) {
    let within: Vec<f64> = by_boot.iter().filter_map(|b| variance(b)).collect();
    let t1 = (!within.is_empty()).then(|| mean(&within));
    let means: Vec<f64> = by_boot.iter().map(|b| mean(b)).collect();
    let reps_per_boot = mean(&by_boot.iter().map(|b| b.len() as f64).collect::<Vec<_>>());
    let t2 = variance(&means).map(|s2| (s2 - t1.unwrap_or(0.0) / reps_per_boot).max(0.0));
    (t1, t2)
}

/// Every numeric summary key's variance by level over the finished points
/// of a run. Empty when no point has two repetitions.
pub fn of_records(records: &[&PointRecord], costs: Option<Costs>) -> Vec<LevelVariance> {
    // metric -> point -> boot -> values
    let mut values: BTreeMap<&str, BTreeMap<u32, BTreeMap<u32, Vec<f64>>>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.ok) {
        for (key, v) in &r.summary {
            if let Some(x) = v.as_f64().filter(|x| x.is_finite()) {
                values
                    .entry(key)
                    .or_default()
                    .entry(r.point)
                    .or_default()
                    .entry(r.boot)
                    .or_default()
                    .push(x);
            }
        }
    }
    let mut out = Vec::new();
    for (metric, points) in values {
        let mut within = Vec::new();
        let mut between = Vec::new();
        let mut t_pairs = Vec::new();
        let mut sizes = Vec::new();
        let mut estimated = 0;
        for boots in points.values() {
            let by_boot: Vec<Vec<f64>> = boots.values().cloned().collect();
            let all: Vec<f64> = by_boot.iter().flatten().copied().collect();
            let m = mean(&all);
            if all.len() < 2 || m == 0.0 {
                continue;
            }
            estimated += 1;
            sizes.push(m.abs());
            let (t1, t2) = components(&by_boot);
            if let Some(t1) = t1 {
                within.push(t1.sqrt() / m.abs());
            }
            if let Some(t2) = t2 {
                between.push(t2.sqrt() / m.abs());
            }
            if let (Some(t1), Some(t2)) = (t1, t2) {
                t_pairs.push((t1, t2));
            }
        }
        if estimated == 0 {
            continue;
        }
        let best = costs.filter(|c| c.repetition_s > 0.0).and_then(|c| {
            let t1 = median(t_pairs.iter().map(|p| p.0).collect())?;
            let t2 = median(t_pairs.iter().map(|p| p.1).collect())?;
            Some(best_repetitions_per_boot(t1, t2, c))
        });
        out.push(LevelVariance {
            metric: metric.to_string(),
            points: estimated,
            within_boot_cv: median(within),
            between_boot_cv: median(between),
            best_repetitions_per_boot: best,
            typical: median(sizes),
        });
    }
    out
}

/// r* = ⌈√(c₂/c₁ · T₁/T₂)⌉, at least 1; with no boot effect seen, every
/// repetition in one boot is best (reported as u32::MAX).
pub fn best_repetitions_per_boot(t1: f64, t2: f64, c: Costs) -> u32 {
    if t2 <= 0.0 {
        return u32::MAX;
    }
    let r = ((c.boot_s / c.repetition_s) * (t1 / t2)).sqrt().ceil();
    if r.is_finite() {
        r.clamp(1.0, 1e6) as u32
    } else {
        1
    }
}

/// One line per metric for `testbed show`: the largest boot effects first.
pub fn describe(levels: &[LevelVariance], max_lines: usize) -> Vec<String> {
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1} %", 100.0 * v));
    let mut sorted: Vec<&LevelVariance> = levels.iter().collect();
    // What matters first: the largest boot effects of values above their
    // resolution; values within a few ticks of zero last.
    sorted.sort_by(|a, b| {
        below_resolution(a)
            .is_some()
            .cmp(&below_resolution(b).is_some())
            .then(
                b.between_boot_cv
                    .unwrap_or(-1.0)
                    .total_cmp(&a.between_boot_cv.unwrap_or(-1.0)),
            )
    });
    let mut lines: Vec<String> = sorted
        .iter()
        .take(max_lines)
        .map(|l| {
            if let Some((res, what)) = below_resolution(l) {
                return format!(
                    "{}: below resolution (typically {} against {res} s, {what}): no variance to report ({} points)",
                    l.metric,
                    l.typical.map_or("-".to_string(), |t| format!("{t:.3} s")),
                    l.points
                );
            }
            let best = match l.best_repetitions_per_boot {
                Some(u32::MAX) => "; no boot effect seen: one boot".to_string(),
                Some(r) => format!("; best {r} repetition(s) per boot"),
                None => String::new(),
            };
            format!(
                "{}: within a boot {}, between boots {} ({} points){best}",
                l.metric,
                pct(l.within_boot_cv),
                pct(l.between_boot_cv),
                l.points
            )
        })
        .collect();
    if sorted.len() > max_lines {
        lines.push(format!(
            "… and {} more in manifest.json (variance)",
            sorted.len() - max_lines
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(point: u32, rep: u32, boot: u32, v: f64) -> PointRecord {
        serde_json::from_value(serde_json::json!({
            "id": format!("p{point:04}-r{rep:02}"), "point": point, "rep": rep,
            "params": {}, "seed": 1, "ok": true, "boot": boot,
            "summary": {"iops": v, "note": "text is skipped"},
        }))
        .unwrap()
    }

    #[test]
    fn separates_the_boot_effect_from_the_repetitions_spread() {
        // Three boots at levels 100, 110, 90; inside each, ±1.
        let mut recs = Vec::new();
        for (boot, level) in [100.0, 110.0, 90.0].into_iter().enumerate() {
            for (k, d) in [-1.0, 0.0, 1.0].into_iter().enumerate() {
                let rep = boot as u32 * 3 + k as u32;
                recs.push(record(0, rep, boot as u32, level + d));
            }
        }
        let refs: Vec<&PointRecord> = recs.iter().collect();
        let costs = Costs {
            boot_s: 1.0,
            repetition_s: 4.0,
        };
        let l = of_records(&refs, Some(costs));
        assert_eq!(l.len(), 1, "{l:?}");
        let l = &l[0];
        assert_eq!((l.metric.as_str(), l.points), ("iops", 1));
        // T₁ = 1, so √T₁/100 = 1 %; S₂² = 100, T₂ = 100 − 1/3.
        assert!((l.within_boot_cv.unwrap() - 0.01).abs() < 1e-9, "{l:?}");
        let between = (100.0f64 - 1.0 / 3.0).sqrt() / 100.0;
        assert!((l.between_boot_cv.unwrap() - between).abs() < 1e-9, "{l:?}");
        // The boots differ 100 times more than repetitions do: one
        // repetition per boot buys the most information per second.
        assert_eq!(l.best_repetitions_per_boot, Some(1));
    }

    #[test]
    fn cpu_times_within_a_few_ticks_of_zero_report_their_resolution_last() {
        // A poller's CPU time reads 0, 0, 0.01 s in three boots (√3 = 173 %
        // between boots, all of it the tick); the IOPS drift 10 %.
        let mut recs = Vec::new();
        for (boot, (cpu, iops)) in [(0.0, 100.0), (0.0, 110.0), (0.01, 90.0)]
            .into_iter()
            .enumerate()
        {
            let mut r = record(0, boot as u32, boot as u32, iops);
            r.summary
                .insert("poll.cpu_user_s".into(), serde_json::json!(cpu));
            recs.push(r);
        }
        let refs: Vec<&PointRecord> = recs.iter().collect();
        let l = of_records(&refs, None);
        let lines = describe(&l, 5);
        assert!(lines[0].starts_with("iops: "), "{lines:?}");
        assert!(
            lines[1].starts_with("poll.cpu_user_s: below resolution")
                && lines[1].contains("10 ms CPU ticks"),
            "{lines:?}"
        );
        assert_eq!(resolution("x.guest_busy_s").map(|r| r.0), Some(0.01));
        assert_eq!(resolution("read.lookups_per_s"), None);
    }

    #[test]
    fn no_boot_effect_keeps_repetitions_in_one_boot() {
        // Two boots with the same values: T₂ clamps to 0.
        let recs = [
            record(0, 0, 0, 10.0),
            record(0, 1, 0, 12.0),
            record(0, 2, 1, 10.0),
            record(0, 3, 1, 12.0),
        ];
        let refs: Vec<&PointRecord> = recs.iter().collect();
        let c = Costs {
            boot_s: 2.0,
            repetition_s: 1.0,
        };
        let l = &of_records(&refs, Some(c))[0];
        assert_eq!(l.between_boot_cv, Some(0.0));
        assert_eq!(l.best_repetitions_per_boot, Some(u32::MAX));
        assert!(describe(std::slice::from_ref(l), 5)[0].contains("no boot effect seen"));
    }

    #[test]
    fn one_boot_has_no_between_level_and_one_repetition_nothing() {
        let one_boot = [record(0, 0, 0, 10.0), record(0, 1, 0, 11.0)];
        let refs: Vec<&PointRecord> = one_boot.iter().collect();
        let l = &of_records(&refs, None)[0];
        assert!(
            l.within_boot_cv.is_some() && l.between_boot_cv.is_none(),
            "{l:?}"
        );
        let single = [record(0, 0, 0, 10.0)];
        let refs: Vec<&PointRecord> = single.iter().collect();
        assert!(of_records(&refs, None).is_empty());
    }

    #[test]
    fn costly_boots_and_a_small_boot_effect_favour_more_repetitions_per_boot() {
        let c = Costs {
            boot_s: 100.0,
            repetition_s: 1.0,
        };
        // √(100 · 4 / 1) = 20.
        assert_eq!(best_repetitions_per_boot(4.0, 1.0, c), 20);
    }
}
