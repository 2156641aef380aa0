//! summary.parquet: one row per point × summary number, built from the
//! point records. A key the workload writes as `<scope>.<metric>` (e.g.
//! `read.lookups_per_s`, `picard.sort_seconds`) becomes metric
//! `lookups_per_s` with `tag_engine = "read"`: the workload declares the
//! scope's tag and values (`WorkloadParams::summary_scopes`), and this is
//! the only place that splits keys. Non-numeric numbers are kept as `text`.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, RecordBatch, StringBuilder, UInt32Builder,
};
use arrow::datatypes::{DataType, Field, Schema};
use testbed_agent::workload::{MetricInfo, Workload};

use super::columns::{self, Scalar};
use super::manifest::PointRecord;
use super::samples::SamplesError;

/// One summary number of a point, its key split into scope and metric.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRow {
    pub metric: String,
    /// (tag name, value), e.g. ("engine", "read").
    pub scope: Option<(String, String)>,
    pub value: Option<f64>,
    pub text: Option<String>,
    pub unit: Option<String>,
}

/// The workload a record ran, if it can be read back.
pub fn record_workload(rec: &PointRecord) -> Option<Workload> {
    serde_json::from_value(rec.workload.clone()?).ok()
}

/// A record's summary as rows.
pub fn rows(rec: &PointRecord) -> Vec<SummaryRow> {
    let workload = record_workload(rec);
    let scopes = workload.as_ref().and_then(|w| w.params().summary_scopes());
    let declared: Vec<MetricInfo> = workload.as_ref().map(|w| w.metrics()).unwrap_or_default();
    let units: BTreeMap<&str, &str> = declared
        .iter()
        .filter(|m| m.summary && !m.unit.is_empty())
        .map(|m| (m.name, m.unit))
        .collect();
    rec.summary
        .iter()
        .map(|(key, v)| {
            let (metric, scope) = split_key(key, scopes.as_ref(), &declared);
            let (value, text) = match v {
                serde_json::Value::Number(n) => (n.as_f64(), None),
                serde_json::Value::Bool(b) => (Some(f64::from(u8::from(*b))), Some(b.to_string())),
                serde_json::Value::String(s) => (None, Some(s.clone())),
                serde_json::Value::Null => (None, None),
                other => (None, Some(other.to_string())),
            };
            SummaryRow {
                unit: units.get(metric.as_str()).map(|u| u.to_string()),
                metric,
                scope,
                value,
                text,
            }
        })
        .collect()
}

/// `read.lookups_per_s` → (`lookups_per_s`, engine=read) when `read` is one
/// of the point's scope values. A bare key of a point with exactly one
/// scope value belongs to it when the workload declares that metric as
/// carrying the scope's tag (one engine: `lookups_per_s` is that engine's).
/// Anything else stays as it is.
pub fn split_key(
    key: &str,
    scopes: Option<&(&str, Vec<String>)>,
    declared: &[MetricInfo],
) -> (String, Option<(String, String)>) {
    let Some((tag, values)) = scopes else {
        return (key.to_string(), None);
    };
    if let Some((head, rest)) = key.split_once('.')
        && values.iter().any(|v| v == head)
    {
        return (rest.to_string(), Some((tag.to_string(), head.to_string())));
    }
    let scoped = declared
        .iter()
        .any(|m| m.summary && m.name == key && m.tags.contains(tag));
    match values.as_slice() {
        [only] if scoped => (key.to_string(), Some((tag.to_string(), only.clone()))),
        _ => (key.to_string(), None),
    }
}

/// The summary table of every finished point.
pub fn batch(run_id: &str, records: &[&PointRecord]) -> Result<RecordBatch, SamplesError> {
    let per_point: Vec<(&PointRecord, Vec<SummaryRow>)> =
        records.iter().map(|r| (*r, rows(r))).collect();
    let n: usize = per_point.iter().map(|(_, r)| r.len()).sum();
    let mut run = StringBuilder::new();
    let mut point = UInt32Builder::with_capacity(n);
    let mut repetition = UInt32Builder::with_capacity(n);
    let mut boot = UInt32Builder::with_capacity(n);
    let mut metric = StringBuilder::new();
    let mut value = Float64Builder::with_capacity(n);
    let mut text = StringBuilder::new();
    let mut unit = StringBuilder::new();
    // The host's noise over the point (noise.rs), on each of its rows.
    let mut noise = Float64Builder::with_capacity(n);
    let mut noisy = BooleanBuilder::with_capacity(n);
    // What the point cost the host (hostcost.rs), likewise.
    let mut cpu_user = Float64Builder::with_capacity(n);
    let mut cpu_system = Float64Builder::with_capacity(n);
    let mut peak_rss = Float64Builder::with_capacity(n);
    let mut peak_charged = Float64Builder::with_capacity(n);
    let mut vcpu = Float64Builder::with_capacity(n);
    for (rec, rows) in &per_point {
        for r in rows {
            run.append_value(run_id);
            point.append_value(rec.point);
            repetition.append_value(rec.rep);
            boot.append_value(rec.boot);
            metric.append_value(&r.metric);
            value.append_option(r.value);
            text.append_option(r.text.as_deref());
            unit.append_option(r.unit.as_deref());
            noise.append_option(rec.noise.as_ref().map(|x| x.others_pct));
            noisy.append_option(rec.noise.as_ref().map(|x| x.noisy));
            let cost = rec.host_cost.as_ref();
            cpu_user.append_option(cost.map(|c| c.cpu_user_s));
            cpu_system.append_option(cost.map(|c| c.cpu_system_s));
            peak_rss.append_option(cost.and_then(|c| c.peak_rss_mib));
            peak_charged.append_option(cost.and_then(|c| c.peak_charged_mib));
            vcpu.append_option(cost.and_then(|c| c.vcpu_s));
        }
    }
    let fields = vec![
        Field::new("run_id", DataType::Utf8, false),
        Field::new("point", DataType::UInt32, false),
        Field::new("repetition", DataType::UInt32, false),
        Field::new("boot", DataType::UInt32, false),
        Field::new("metric", DataType::Utf8, false),
        Field::new("value", DataType::Float64, true),
        Field::new("text", DataType::Utf8, true),
        Field::new("unit", DataType::Utf8, true),
        Field::new("host_noise_pct", DataType::Float64, true),
        Field::new("noisy", DataType::Boolean, true),
        Field::new("host_cpu_user_s", DataType::Float64, true),
        Field::new("host_cpu_system_s", DataType::Float64, true),
        Field::new("host_peak_rss_mib", DataType::Float64, true),
        Field::new("host_peak_charged_mib", DataType::Float64, true),
        Field::new("host_vcpu_s", DataType::Float64, true),
    ];
    let cols: Vec<ArrayRef> = vec![
        Arc::new(run.finish()),
        Arc::new(point.finish()),
        Arc::new(repetition.finish()),
        Arc::new(boot.finish()),
        Arc::new(metric.finish()),
        Arc::new(value.finish()),
        Arc::new(text.finish()),
        Arc::new(unit.finish()),
        Arc::new(noise.finish()),
        Arc::new(noisy.finish()),
        Arc::new(cpu_user.finish()),
        Arc::new(cpu_system.finish()),
        Arc::new(peak_rss.finish()),
        Arc::new(peak_charged.finish()),
        Arc::new(vcpu.finish()),
    ];
    // Params: per point, constant over its rows; one column per name.
    let params: Vec<BTreeMap<String, Scalar>> = per_point
        .iter()
        .map(|(rec, _)| {
            columns::point_params(
                rec.workload.as_ref().unwrap_or(&serde_json::Value::Null),
                &rec.params,
            )
        })
        .collect();
    let mut pieces: Vec<RecordBatch> = Vec::new();
    let base = RecordBatch::try_new(Arc::new(Schema::new(fields.clone())), cols.clone())?;
    let mut offset = 0;
    for ((_, rows), p) in per_point.iter().zip(&params) {
        let mut f = fields.clone();
        let mut c: Vec<ArrayRef> = base.slice(offset, rows.len()).columns().to_vec();
        offset += rows.len();
        for (name, v) in p {
            let (pf, pc) =
                columns::constant_column(&columns::column_name("param", name), v, rows.len());
            f.push(pf);
            c.push(pc);
        }
        let mut scope_tags: BTreeMap<&str, Vec<Option<&str>>> = BTreeMap::new();
        for r in rows {
            if let Some((t, _)) = &r.scope {
                scope_tags.entry(t.as_str()).or_default();
            }
        }
        for (t, vals) in scope_tags.iter_mut() {
            for r in rows {
                vals.push(
                    r.scope
                        .as_ref()
                        .filter(|(n, _)| n == t)
                        .map(|(_, v)| v.as_str()),
                );
            }
        }
        for (t, vals) in &scope_tags {
            let (tf, tc) = columns::tag_column(&columns::column_name("tag", t), vals);
            f.push(tf);
            c.push(tc);
        }
        pieces.push(RecordBatch::try_new(Arc::new(Schema::new(f)), c)?);
    }
    let unified = super::samples::unify(&pieces)?;
    match unified.first() {
        Some(first) => Ok(arrow::compute::concat_batches(&first.schema(), &unified)?),
        None => Ok(base),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, StringArray};

    fn record(point: u32, depth: i64, summary: serde_json::Value) -> PointRecord {
        PointRecord {
            id: format!("p{point:04}-r00"),
            point,
            rep: 0,
            params: BTreeMap::from([("depth".to_string(), toml::Value::Integer(depth))]),
            workload: Some(serde_json::json!({
                "kind": "btree", "device": "data", "depth": depth,
                "engines": ["read", "io-uring"]
            })),
            seed: 1,
            ok: true,
            error: None,
            wall_s: Some(1.0),
            samples: 0,
            summary: serde_json::from_value(summary).unwrap(),
            boot: 0,
            noise: None,
            host_cost: None,
            earlier: Vec::new(),
        }
    }

    #[test]
    fn engine_prefixes_become_a_tag_and_text_is_kept() {
        let r = record(
            0,
            3,
            serde_json::json!({"read.lookups_per_s": 10.0, "io-uring.lookups_per_s": 12.0,
                               "cross_check.lookups": 5, "mode": "lookups"}),
        );
        let rows = rows(&r);
        let read = rows
            .iter()
            .find(|x| x.scope.as_ref().is_some_and(|s| s.1 == "read"))
            .unwrap();
        assert_eq!(read.metric, "lookups_per_s");
        assert_eq!(read.unit.as_deref(), Some("lookups/s"));
        let cross = rows
            .iter()
            .find(|x| x.metric == "cross_check.lookups")
            .unwrap();
        assert!(cross.scope.is_none());
        let mode = rows.iter().find(|x| x.metric == "mode").unwrap();
        assert_eq!((mode.value, mode.text.as_deref()), (None, Some("lookups")));

        let mut r2 = record(1, 4, serde_json::json!({"lookups_per_s": 9.0, "keys": 7}));
        r2.workload = Some(serde_json::json!({"kind": "btree", "device": "data", "depth": 4}));
        let single = super::rows(&r2);
        let tagged = |m: &str| single.iter().find(|x| x.metric == m).unwrap().scope.clone();
        assert_eq!(
            tagged("lookups_per_s"),
            Some(("engine".into(), "read".into()))
        );
        assert_eq!(tagged("keys"), None);
        let b = batch("run", &[&r, &r2]).unwrap();
        assert_eq!(b.num_rows(), 6);
        let engine = b.column_by_name("tag_engine").unwrap();
        let engine = engine.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(engine.iter().flatten().filter(|e| *e == "read").count(), 2);
        assert!(b.column_by_name("param_depth").is_some());
        assert!(b.column_by_name("param_device").is_some());
        assert_eq!(b.column_by_name("value").unwrap().null_count(), 1);
    }

    #[test]
    fn each_row_carries_its_points_host_noise() {
        let mut quiet = record(0, 3, serde_json::json!({"a": 1.0, "b": 2.0}));
        quiet.noise = Some(crate::machine::noise::HostNoise {
            others_pct: 1.5,
            steal_pct: 0.0,
            own_pct: 95.0,
            load1: Some(2.0),
            interval_s: 3.0,
            noisy_above_pct: 10.0,
            noisy: false,
        });
        let mut busy = quiet.clone();
        busy.point = 1;
        if let Some(n) = busy.noise.as_mut() {
            n.others_pct = 48.0;
            n.noisy = true;
        }
        let unmeasured = record(2, 3, serde_json::json!({"a": 1.0}));
        let b = batch("run", &[&quiet, &busy, &unmeasured]).unwrap();
        let pct = b.column_by_name("host_noise_pct").unwrap();
        let pct = pct
            .as_any()
            .downcast_ref::<arrow::array::Float64Array>()
            .unwrap();
        let noisy = b.column_by_name("noisy").unwrap();
        let noisy = noisy
            .as_any()
            .downcast_ref::<arrow::array::BooleanArray>()
            .unwrap();
        let got: Vec<(Option<f64>, Option<bool>)> = (0..b.num_rows())
            .map(|i| {
                (
                    pct.is_valid(i).then(|| pct.value(i)),
                    noisy.is_valid(i).then(|| noisy.value(i)),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (Some(1.5), Some(false)),
                (Some(1.5), Some(false)),
                (Some(48.0), Some(true)),
                (Some(48.0), Some(true)),
                (None, None)
            ]
        );
    }
}
