//! How B+-tree lookup latency grows with depth in one run: per engine and
//! per combination of the other sweep axes, the mean lookup latency at each
//! depth and a least-squares line through them. One device read per level
//! should make it a line; `show` prints the slope and r².

use std::collections::BTreeMap;

use crate::recording::results::manifest::PointRecord;
use crate::recording::results::summary_table;

/// One engine's latencies across depths, the other parameters fixed.
#[derive(Debug, Clone, PartialEq)]
pub struct DepthSeries {
    pub engine: String,
    /// The other sweep parameters, `k=v` joined by spaces.
    pub others: String,
    /// (depth, mean lookup latency in ns, averaged over repetitions).
    pub points: Vec<(u32, f64)>,
    pub fit: Option<LineFit>,
}

pub use crate::drawing::figures::stats::Fit as LineFit;

/// Least squares over (x, y), the figures' fit; `None` below two distinct x.
pub fn fit_line(xy: &[(f64, f64)]) -> Option<LineFit> {
    let (xs, ys): (Vec<f64>, Vec<f64>) = xy.iter().copied().unzip();
    crate::drawing::figures::stats::linear_fit(&xs, &ys)
}

/// The series of every engine with lookups at three or more depths.
pub fn depth_series(points: &[PointRecord]) -> Vec<DepthSeries> {
    // (engine, others) -> depth -> latencies over repetitions.
    let mut groups: BTreeMap<(String, String), BTreeMap<u32, Vec<f64>>> = BTreeMap::new();
    for p in points.iter().filter(|p| p.ok) {
        let workload = p.workload.as_ref();
        if workload.and_then(|w| w.get("kind")) != Some(&serde_json::json!("btree")) {
            continue;
        }
        let Some(depth) = workload
            .and_then(|w| w.get("depth"))
            .and_then(|d| d.as_u64())
        else {
            continue;
        };
        let others: Vec<String> = p
            .params
            .iter()
            .filter(|(k, _)| k.as_str() != "depth")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for (engine, latency) in engine_latencies(p) {
            groups
                .entry((engine, others.join(" ")))
                .or_default()
                .entry(depth as u32)
                .or_default()
                .push(latency);
        }
    }
    groups
        .into_iter()
        .filter(|(_, by_depth)| by_depth.len() >= 3)
        .map(|((engine, others), by_depth)| {
            let points: Vec<(u32, f64)> = by_depth
                .into_iter()
                .map(|(d, v)| (d, v.iter().sum::<f64>() / v.len() as f64))
                .collect();
            let xy: Vec<(f64, f64)> = points.iter().map(|&(d, l)| (f64::from(d), l)).collect();
            DepthSeries {
                engine,
                others,
                fit: fit_line(&xy),
                points,
            }
        })
        .collect()
}

/// (engine, mean lookup latency) of a point, from the summary table's
/// split of its keys (a one-engine job's bare key is that engine's).
fn engine_latencies(p: &PointRecord) -> Vec<(String, f64)> {
    summary_table::rows(p)
        .into_iter()
        .filter(|r| r.metric == "lookup_latency_mean_ns")
        .filter_map(|r| {
            let engine = r.scope.map_or_else(|| "lookup".to_string(), |(_, v)| v);
            Some((engine, r.value?))
        })
        .collect()
}

/// One line per series: latencies by depth in µs and the fitted slope.
pub fn describe(series: &[DepthSeries]) -> Vec<String> {
    series
        .iter()
        .map(|s| {
            let by_depth: Vec<String> = s
                .points
                .iter()
                .map(|(d, l)| format!("d{d} {:.0}", l / 1e3))
                .collect();
            let fit = s.fit.map_or(String::new(), |f| {
                format!("; {:+.0} µs per level, r² {:.3}", f.slope / 1e3, f.r2)
            });
            format!("{} {}: {} µs{fit}", s.engine, s.others, by_depth.join(", "))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn point(depth: u32, threads: i64, summary: &[(&str, serde_json::Value)]) -> PointRecord {
        let s: BTreeMap<String, serde_json::Value> = summary
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let engines = if s.keys().any(|k| k.contains('.')) {
            json!(["read", "io-uring"])
        } else {
            json!(["read"])
        };
        PointRecord {
            id: format!("d{depth}t{threads}"),
            point: depth,
            rep: 0,
            params: BTreeMap::from([
                ("depth".to_string(), toml::Value::Integer(i64::from(depth))),
                ("threads".to_string(), toml::Value::Integer(threads)),
            ]),
            workload: Some(json!({"kind": "btree", "device": "data", "depth": depth,
                                  "threads": threads, "engines": engines})),
            seed: 1,
            ok: true,
            error: None,
            wall_s: None,
            samples: 0,
            summary: s,
            boot: 0,
            noise: None,
            host_cost: None,
            earlier: Vec::new(),
        }
    }

    #[test]
    fn a_line_is_fitted_exactly() {
        let f = fit_line(&[(1.0, 3.0), (2.0, 5.0), (3.0, 7.0)]).unwrap();
        assert!((f.slope - 2.0).abs() < 1e-12 && (f.intercept - 1.0).abs() < 1e-12);
        assert!((f.r2 - 1.0).abs() < 1e-12);
        let bent = fit_line(&[(1.0, 1.0), (2.0, 4.0), (3.0, 9.0), (4.0, 16.0)]).unwrap();
        assert!(bent.r2 < 0.97, "{bent:?}");
        assert!(fit_line(&[(1.0, 1.0), (1.0, 2.0)]).is_none());
    }

    #[test]
    fn series_per_engine_and_other_parameters() {
        let mut points = Vec::new();
        for d in 1..=4u32 {
            for t in [1, 2] {
                let us = f64::from(d) * 250e3 * t as f64;
                points.push(point(
                    d,
                    t,
                    &[
                        ("read.lookup_latency_mean_ns", json!(us)),
                        ("io-uring.lookup_latency_mean_ns", json!(us / 2.0)),
                    ],
                ));
            }
        }
        // A failed point is left out, not read as zero.
        let mut failed = point(5, 1, &[("read.lookup_latency_mean_ns", json!(0.0))]);
        failed.ok = false;
        points.push(failed);
        let series = depth_series(&points);
        assert_eq!(series.len(), 4);
        let read1 = series
            .iter()
            .find(|s| s.engine == "read" && s.others == "threads=1")
            .unwrap();
        assert_eq!(read1.points.len(), 4);
        assert!((read1.fit.unwrap().slope - 250e3).abs() < 1e-6);
        let lines = describe(&series);
        assert!(
            lines.contains(
                &"read threads=1: d1 250, d2 500, d3 750, d4 1000 µs; +250 µs per level, r² 1.000"
                    .to_string()
            ),
            "{lines:#?}"
        );
    }

    #[test]
    fn a_single_engine_job_is_named_from_its_workload() {
        let points: Vec<PointRecord> = (1..=3)
            .map(|d| {
                point(
                    d,
                    1,
                    &[("lookup_latency_mean_ns", json!(f64::from(d) * 1e5))],
                )
            })
            .collect();
        let series = depth_series(&points);
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].engine, "read");
        // Two depths are not a trend.
        assert!(depth_series(&points[..2]).is_empty());
    }
}
