//! `flight-query`: the query comparison (PostgreSQL via ODBC row/block
//! fetch, tokio-postgres, Flight SQL over PostgreSQL by binary COPY and by
//! rows, and over Parquet) for one N, run by `testbed-flight query --json`.
//! PostgreSQL 15 must be installed where it runs; the ODBC clients run
//! `testbed-odbc`, linked dynamically: on the host, or in a guest on the
//! bookworm-asam root image (unixodbc and psqlODBC installed).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use testbed_lines::flight::QueryLine;

use super::{Scratch, default_timeout, other, require_binary, run_client};
use crate::workload::{JobContext, ParamError, Summary, WorkloadError, defaults, registry};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlightQueryParams {
    /// N of `SELECT * FROM nyc_taxi LIMIT N`.
    #[serde(default = "default_query_rows")]
    pub rows: u64,
    /// Rows loaded into the table (default: `rows`). Set it to the largest N
    /// of a sweep so every point reads the same table.
    #[serde(default)]
    pub table_rows: Option<u64>,
    #[serde(default = "default_query_clients")]
    pub clients: Vec<String>,
    /// Fetches per client within the job (one cluster, one load).
    #[serde(default = "defaults::one_u32")]
    pub repetitions: u32,
    /// Rows per Arrow batch (Flight SQL) and per ODBC block.
    #[serde(default = "default_batch_rows")]
    pub batch_rows: u32,
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
}

/// The clients `testbed-flight query --clients` knows.
pub use testbed_lines::flight::QUERY_CLIENTS;

fn default_query_rows() -> u64 {
    100_000
}
fn default_query_clients() -> Vec<String> {
    QUERY_CLIENTS.iter().map(|s| s.to_string()).collect()
}
fn default_batch_rows() -> u32 {
    65_536
}

impl FlightQueryParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        if self.rows == 0 {
            return Err(ParamError::new("rows", "must be at least 1"));
        }
        if self.table_rows == Some(0) {
            return Err(ParamError::new("table_rows", "must be at least 1"));
        }
        crate::workload::known_names("clients", "client", &self.clients, &QUERY_CLIENTS)?;
        if self.repetitions == 0 {
            return Err(ParamError::new("repetitions", "must be at least 1"));
        }
        if self.batch_rows == 0 {
            return Err(ParamError::new("batch_rows", "must be at least 1"));
        }
        Ok(())
    }
}

pub fn run_query(p: &FlightQueryParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    run_query_with_binary(p, ctx, &require_binary()?)
}

pub fn run_query_with_binary(
    p: &FlightQueryParams,
    ctx: &JobContext,
    bin: &Path,
) -> Result<Summary, WorkloadError> {
    let scratch = Scratch::new(ctx.job_id)?;
    let args: Vec<String> = vec![
        "query".into(),
        "--json".into(),
        "--rows".into(),
        p.rows.to_string(),
        "--table-rows".into(),
        p.table_rows.unwrap_or(p.rows).to_string(),
        "--clients".into(),
        p.clients.join(","),
        "--repetitions".into(),
        p.repetitions.to_string(),
        "--batch-rows".into(),
        p.batch_rows.to_string(),
        "--seed".into(),
        (ctx.seed % 1_000_000).max(1).to_string(),
        "--run-dir".into(),
        scratch.path().display().to_string(),
    ];
    let lines: Vec<QueryLine> =
        run_client(bin, &args, Duration::from_secs(p.timeout_seconds.max(1)))?;
    record(p, &lines, ctx)
}

/// Samples and summary from the measurement lines.
fn record(
    p: &FlightQueryParams,
    lines: &[QueryLine],
    ctx: &JobContext,
) -> Result<Summary, WorkloadError> {
    let mut s = Summary::new();
    for (i, client) in p.clients.iter().enumerate() {
        let mine: Vec<&QueryLine> = lines.iter().filter(|l| l.client == *client).collect();
        let secs: Vec<f64> = mine.iter().map(|l| l.seconds).collect();
        if secs.len() != p.repetitions as usize {
            return Err(other(format!(
                "testbed-flight query reported {} timings for {client}, {} expected",
                secs.len(),
                p.repetitions
            )));
        }
        let tags = BTreeMap::from([
            ("client".to_string(), client.clone()),
            ("rows".to_string(), p.rows.to_string()),
        ]);
        ctx.emit_samples("query_seconds", "s", i as u32, &tags, &secs);
        let mut sorted = secs.clone();
        sorted.sort_by(f64::total_cmp);
        s.insert(
            format!("{client}_seconds"),
            serde_json::json!(sorted[sorted.len() / 2]),
        );
        if let Some(c) = mine.first() {
            s.insert(format!("{client}_checksum"), c.checksum.clone());
            s.insert("rows_fetched".into(), serde_json::json!(c.rows));
        }
    }
    s.insert("rows".into(), serde_json::json!(p.rows));
    // The command exits non-zero on any mismatch, so reaching here means all agree.
    s.insert("checksums_match".into(), serde_json::json!(true));
    Ok(s)
}

impl crate::workload::WorkloadParams for FlightQueryParams {
    fn validate(
        &self,
        _devices: &BTreeMap<String, crate::protocol::DeviceRef>,
    ) -> Result<(), ParamError> {
        FlightQueryParams::validate(self)
    }
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run_query(self, ctx)
    }
    fn needs(&self) -> crate::workload::Needs {
        let mut host_steps = vec!["postgres"];
        let mut helpers = vec![registry::FLIGHT];
        if self.clients.iter().any(|c| c.contains("odbc-")) {
            host_steps.push("odbc");
            helpers.push(registry::ODBC);
        }
        crate::workload::Needs {
            helpers,
            host_steps,
            ..Default::default()
        }
    }
    fn metrics(&self) -> Vec<crate::workload::MetricInfo> {
        use crate::workload::MetricInfo as M;
        vec![
            M::raw("query_seconds", "s", &["client"]),
            M::summary("rows", "", &[]),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{VecSink, Workload};
    use std::sync::Arc;

    fn q(j: serde_json::Value) -> FlightQueryParams {
        let mut j = j;
        j["kind"] = "flight-query".into();
        match serde_json::from_value(j).unwrap() {
            Workload::FlightQuery(p) => p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn query_params_are_checked() {
        let p = q(serde_json::json!({}));
        assert_eq!(
            (p.rows, p.clients.len(), p.batch_rows),
            (100_000, 10, 65_536)
        );
        assert!(p.validate().is_ok());
        let bad = q(serde_json::json!({"clients": ["odbc-row", "jdbc"]}));
        let e = bad.validate().unwrap_err();
        assert!(e.field == "clients" && e.reason.contains("jdbc"), "{e}");
        assert_eq!(
            q(serde_json::json!({"rows": 0}))
                .validate()
                .unwrap_err()
                .field,
            "rows"
        );
    }

    #[test]
    fn query_without_odbc_runs_postgres_and_flight_sql() {
        let p = FlightQueryParams {
            rows: 2000,
            table_rows: Some(3000),
            clients: vec![
                "tokio-postgres".into(),
                "flight-sql-rows".into(),
                "flight-sql".into(),
                "flight-sql-parquet".into(),
            ],
            repetitions: 2,
            batch_rows: 1000,
            timeout_seconds: 300,
        };
        let sink = Arc::new(VecSink::default());
        let ctx = JobContext {
            job_id: 4,
            seed: 1,
            devices: BTreeMap::new(),
            sink: sink.clone(),
        };
        let s = run_query_with_binary(&p, &ctx, &super::super::real_binary()).unwrap();
        assert_eq!(s["rows_fetched"], serde_json::json!(2000));
        assert_eq!(s["tokio-postgres_checksum"], s["flight-sql_checksum"]);
        assert_eq!(s["tokio-postgres_checksum"], s["flight-sql-rows_checksum"]);
        assert_eq!(s["tokio-postgres_checksum"], s["flight-sql-parquet_checksum"]);
        assert!(s["tokio-postgres_checksum"]["strings"].is_u64(), "{s:?}");
        let chunks = sink.0.lock().unwrap();
        assert_eq!(chunks.len(), 4);
        assert!(
            chunks
                .iter()
                .all(|c| c.metric == "query_seconds" && c.values.len() == 2)
        );
    }
}
