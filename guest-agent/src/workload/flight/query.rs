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
use testbed_vocab::flight::QueryLine;
use testbed_vocab::request::flight::{ColumnSet, FlightRequest, QueryClient, QueryRequest};

use super::{
    CpuSpent, Scratch, default_timeout, median, named, other, record_cpu_per_gb, require_binary,
};
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
    /// The table's columns: "taxi" (the mix), "ints", "strings-short" or
    /// "strings-long", at the same row counts.
    #[serde(default = "default_query_columns")]
    pub columns: String,
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
    /// The host CPUs of the clients and of the servers ("1", "0,2-3"),
    /// both or neither, never one CPU in both; default unpinned. The
    /// summary's `pinning` says where they ran.
    #[serde(default)]
    pub client_cpus: Option<String>,
    #[serde(default)]
    pub server_cpus: Option<String>,
}

/// The clients and column sets `testbed-flight query` knows.
pub use testbed_vocab::flight::{QUERY_CLIENTS, QUERY_COLUMN_SETS};

fn default_query_columns() -> String {
    "taxi".into()
}

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
        super::pinning::parse(self.client_cpus.as_deref(), self.server_cpus.as_deref())?;
        if self.rows == 0 {
            return Err(ParamError::new("rows", "must be at least 1"));
        }
        if self.table_rows == Some(0) {
            return Err(ParamError::new("table_rows", "must be at least 1"));
        }
        crate::workload::known_names("clients", "client", &self.clients, &QUERY_CLIENTS)?;
        crate::workload::known_names(
            "columns",
            "column set",
            std::slice::from_ref(&self.columns),
            &QUERY_COLUMN_SETS,
        )?;
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
    let columns = named("columns", std::slice::from_ref(&p.columns), ColumnSet::from_name)?;
    let clients = named("clients", &p.clients, QueryClient::from_name)?;
    let request = |pins| {
        FlightRequest::Query(QueryRequest {
            rows: vec![p.rows],
            table_rows: Some(p.table_rows.unwrap_or(p.rows)),
            columns: columns[0],
            clients,
            repetitions: p.repetitions,
            seed: (ctx.seed % 1_000_000).max(1),
            batch_rows: p.batch_rows as usize,
            run_dir: Some(scratch.path().to_path_buf()),
            json: true,
            pins,
        })
    };
    let (lines, pin) = super::pinning::run_pinned::<QueryLine>(
        bin,
        request,
        Duration::from_secs(p.timeout_seconds.max(1)),
        p.client_cpus.as_deref(),
        p.server_cpus.as_deref(),
    )?;
    let mut s = record(p, &lines, ctx)?;
    super::pinning::record(&mut s, pin.as_ref());
    Ok(s)
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
        s.insert(format!("{client}_seconds"), serde_json::json!(median(secs)));
        let cpu: Vec<CpuSpent> = mine
            .iter()
            .map(|l| CpuSpent {
                value_bytes: l.value_bytes,
                client_s: l.client_cpu_s,
                server_s: l.server_cpu_s,
            })
            .collect();
        record_cpu_per_gb(ctx, &mut s, client, i as u32, &tags, &cpu);
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
        _devices: &BTreeMap<String, testbed_vocab::protocol::DeviceRef>,
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
            M::raw("cpu_s_per_gb", "s/GiB", &["client", "side"]),
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
        assert_eq!(p.columns, "taxi");
        let e = q(serde_json::json!({"columns": "blobs"}))
            .validate()
            .unwrap_err();
        assert!(e.field == "columns" && e.reason.contains("blobs"), "{e}");
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
            columns: "strings-short".into(),
            clients: vec![
                "tokio-postgres".into(),
                "flight-sql-rows".into(),
                "flight-sql".into(),
                "flight-sql-parquet".into(),
            ],
            repetitions: 2,
            batch_rows: 1000,
            timeout_seconds: 300,
            client_cpus: None,
            server_cpus: None,
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
        // Time, and CPU per GiB on both sides, for every client.
        assert_eq!(chunks.len(), 4 * 3, "{chunks:?}");
        assert!(chunks.iter().all(|c| c.values.len() == 2));
        let cpu: Vec<_> = chunks
            .iter()
            .filter(|c| c.metric == "cpu_s_per_gb")
            .collect();
        assert_eq!(cpu.len(), 8);
        let per_gb = |client: &str, side: &str| {
            s[&format!("{client}_{side}_cpu_s_per_gb")]
                .as_f64()
                .unwrap_or(-1.0)
        };
        for client in ["tokio-postgres", "flight-sql", "flight-sql-rows", "flight-sql-parquet"] {
            // Threads are read in ns: every client shows some CPU.
            assert!(per_gb(client, "client") > 0.0, "{client}: {s:?}");
            // PostgreSQL's processes are read in 10 ms ticks, which a
            // backend serving 2000 rows may not fill; the Flight SQL
            // servers' own threads (ns) always show some.
            let server = per_gb(client, "server");
            match client {
                "tokio-postgres" => assert!(server >= 0.0, "{s:?}"),
                _ => assert!(server > 0.0, "{client}: {s:?}"),
            }
        }
    }
}
