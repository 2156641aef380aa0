//! The lines `testbed show` prints for a btree point beyond its headline
//! numbers: each engine's throughput, latency percentiles and CPU per I/O,
//! the hooks' speedups, the fio peer check.

use crate::workload::Summary;

/// Each hook engine's speedup over the baseline it ran beside in this job
/// (one point = one depth), from `speedup.<engine>.*`:
/// "speedup: nvme-hook 1.49× latency, 1.52× throughput over read; …".
pub fn speedup_line(summary: &Summary) -> Option<String> {
    let mut parts = Vec::new();
    for (k, v) in summary {
        let Some(engine) = k
            .strip_prefix("speedup.")
            .and_then(|r| r.strip_suffix(".baseline"))
        else {
            continue;
        };
        let num = |what: &str| {
            summary
                .get(&format!("speedup.{engine}.{what}"))
                .and_then(serde_json::Value::as_f64)
        };
        let mut words = vec![engine.to_string()];
        if let Some(x) = num("latency") {
            words.push(format!("{x:.2}× latency"));
        }
        if let Some(x) = num("throughput") {
            words.push(format!("{x:.2}× throughput"));
        }
        words.push(format!("over {}", v.as_str().unwrap_or("?")));
        parts.push(words.join(" "));
    }
    (!parts.is_empty()).then(|| format!("speedup: {}", parts.join("; ")))
}

/// One line per engine: lookups per second, lookup latency p50/p99/p99.9
/// CPU time of the lookup threads per lookup and per I/O, and the guest's
/// busy time per lookup (a job of one engine has bare keys).
pub fn engine_lines(summary: &Summary, engines: &[&str]) -> Vec<String> {
    let bare = engines.len() == 1;
    engines
        .iter()
        .filter_map(|e| {
            let num = |k: &str| {
                summary
                    .get(&format!("{e}.{k}"))
                    .or_else(|| if bare { summary.get(k) } else { None })
                    .and_then(serde_json::Value::as_f64)
            };
            let mut line = format!("{e}: {:.0} lookups/s", num("lookups_per_s")?);
            let lat: Vec<String> = [("p50", "p50"), ("p99", "p99"), ("p99.9", "p999")]
                .iter()
                .filter_map(|(label, k)| {
                    num(&format!("lookup_latency_{k}_ns")).map(|v| format!("{label} {:.1}", v / 1e3))
                })
                .collect();
            if !lat.is_empty() {
                line.push_str(&format!(", latency µs {}", lat.join(" ")));
            }
            match (num("cpu_us_per_lookup"), num("cpu_us_per_io")) {
                (Some(l), Some(c)) => {
                    line.push_str(&format!(", CPU {l:.1} µs per lookup ({c:.1} per I/O)"))
                }
                (None, Some(c)) => line.push_str(&format!(", CPU {c:.1} µs per I/O")),
                _ => {}
            }
            if let Some(g) = num("guest_cpu_us_per_lookup") {
                line.push_str(&format!(", guest busy {g:.1} µs per lookup"));
            }
            Some(line)
        })
        .collect()
}

/// The fio peer check in one line: both I/O rates, their ratio and each
/// side's CPU time per I/O (which is what separates them under TCG).
pub fn fio_peer_line(summary: &Summary) -> Option<String> {
    let num = |k: &str| summary.get(k).and_then(serde_json::Value::as_f64);
    let ratio = num("read_vs_fio_iops_ratio")?;
    let ours = num("ios_per_s").or_else(|| num("read.ios_per_s"))?;
    let fio = num("fio.iops")?;
    let mut line = format!("fio peer: read {ours:.0} I/O/s, fio {fio:.0} IOPS, ratio {ratio:.3}");
    let ours_cpu = num("cpu_us_per_io").or_else(|| num("read.cpu_us_per_io"));
    if let (Some(a), Some(b)) = (ours_cpu, num("fio.cpu_us_per_io")) {
        line.push_str(&format!("; CPU per I/O read {a:.1} µs, fio {b:.1} µs"));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_speedup_line_names_each_hook_and_its_baseline() {
        let mut s = Summary::new();
        s.insert("speedup.nvme-hook.latency".into(), serde_json::json!(1.494));
        s.insert("speedup.nvme-hook.throughput".into(), serde_json::json!(1.52));
        s.insert("speedup.nvme-hook.baseline".into(), serde_json::json!("read"));
        s.insert("speedup.syscall-hook.latency".into(), serde_json::json!(1.04));
        s.insert("speedup.syscall-hook.baseline".into(), serde_json::json!("read"));
        assert_eq!(
            speedup_line(&s).unwrap(),
            "speedup: nvme-hook 1.49× latency 1.52× throughput over read; syscall-hook 1.04× latency over read"
        );
        assert_eq!(speedup_line(&Summary::new()), None);
    }
    use serde_json::json;

    #[test]
    fn each_engine_gets_its_rate_percentiles_and_cpu() {
        let summary: Summary = [
            ("read.lookups_per_s", json!(1234.4)),
            ("read.lookup_latency_p50_ns", json!(780.0)),
            ("read.lookup_latency_p99_ns", json!(2100.0)),
            ("read.lookup_latency_p999_ns", json!(5150.0)),
            ("read.cpu_us_per_io", json!(12.34)),
            ("nvme-passthru.lookups_per_s", json!(2000.0)),
            ("nvme-passthru.cpu_us_per_lookup", json!(30.0)),
            ("nvme-passthru.cpu_us_per_io", json!(10.0)),
            ("nvme-passthru.guest_cpu_us_per_lookup", json!(41.0)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(
            engine_lines(&summary, &["read", "nvme-passthru", "io-uring"]),
            [
                "read: 1234 lookups/s, latency µs p50 0.8 p99 2.1 p99.9 5.2, CPU 12.3 µs per I/O",
                "nvme-passthru: 2000 lookups/s, CPU 30.0 µs per lookup (10.0 per I/O), guest busy 41.0 µs per lookup",
            ]
        );
        let bare: Summary = [("lookups_per_s", json!(10.0))]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(engine_lines(&bare, &["read"]), ["read: 10 lookups/s"]);
    }

    #[test]
    fn the_fio_peer_line_shows_rates_ratio_and_cpu() {
        let summary: Summary = [
            ("ios_per_s", json!(3902.2)),
            ("fio.iops", json!(3638.0)),
            ("read_vs_fio_iops_ratio", json!(1.0726)),
            ("cpu_us_per_io", json!(63.04)),
            ("fio.cpu_us_per_io", json!(83.16)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(
            fio_peer_line(&summary).unwrap(),
            "fio peer: read 3902 I/O/s, fio 3638 IOPS, ratio 1.073; CPU per I/O read 63.0 µs, fio 83.2 µs"
        );
        let mut no_peer = summary.clone();
        no_peer.remove("read_vs_fio_iops_ratio");
        assert!(fio_peer_line(&no_peer).is_none());
    }
}
