//! The lines `testbed show` prints for a btree point beyond its headline
//! numbers: the fio peer check.

use crate::workload::Summary;

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
    use serde_json::json;

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
