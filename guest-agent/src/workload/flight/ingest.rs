//! `flight-ingest`: the same rows written into PostgreSQL by Flight SQL
//! bulk ingest (our client, and ADBC's `adbc_ingest`), binary COPY,
//! batched INSERT and psqlODBC array inserts, run by `testbed-flight ingest
//! --json`. PostgreSQL 15 must be installed where it runs; `adbc-ingest`
//! needs Python with adbc-driver-flightsql and pyarrow, `odbc-array`
//! testbed-odbc with unixODBC and psqlODBC (the host, as `./x setup`
//! installs them).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use testbed_vocab::flight::IngestLine;
use testbed_vocab::request::flight::{ColumnSet, FlightRequest, IngestClient, IngestRequest};

use super::{
    CpuSpent, Scratch, default_timeout, median, named, other, record_cpu_per_gb, require_binary,
};
use crate::workload::{JobContext, ParamError, Summary, WorkloadError, defaults, registry};

pub use testbed_vocab::flight::{INGEST_CLIENTS, QUERY_COLUMN_SETS};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlightIngestParams {
    /// Rows written by every client.
    #[serde(default = "default_rows")]
    pub rows: u64,
    /// The table's columns, as flight-query's `columns`.
    #[serde(default = "default_columns")]
    pub columns: String,
    #[serde(default = "default_clients")]
    pub clients: Vec<String>,
    /// Writes per client within the job (one cluster; a fresh table each).
    #[serde(default = "defaults::one_u32")]
    pub repetitions: u32,
    /// Rows per Arrow batch (Flight SQL ingest, COPY).
    #[serde(default = "default_batch_rows")]
    pub batch_rows: u32,
    /// Rows per INSERT statement and per ODBC parameter array.
    #[serde(default = "default_insert_rows")]
    pub insert_rows: u32,
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

fn default_rows() -> u64 {
    100_000
}
fn default_columns() -> String {
    "taxi".into()
}
fn default_clients() -> Vec<String> {
    INGEST_CLIENTS.iter().map(|s| s.to_string()).collect()
}
fn default_batch_rows() -> u32 {
    65_536
}
fn default_insert_rows() -> u32 {
    1000
}

impl FlightIngestParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        super::pinning::parse(self.client_cpus.as_deref(), self.server_cpus.as_deref())?;
        if self.rows == 0 {
            return Err(ParamError::new("rows", "must be at least 1"));
        }
        crate::workload::known_names("clients", "client", &self.clients, &INGEST_CLIENTS)?;
        crate::workload::known_names(
            "columns",
            "column set",
            std::slice::from_ref(&self.columns),
            &QUERY_COLUMN_SETS,
        )?;
        for (field, v) in [
            ("repetitions", self.repetitions),
            ("batch_rows", self.batch_rows),
            ("insert_rows", self.insert_rows),
        ] {
            if v == 0 {
                return Err(ParamError::new(field, "must be at least 1"));
            }
        }
        Ok(())
    }
}

pub fn run_ingest(p: &FlightIngestParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    run_ingest_with_binary(p, ctx, &require_binary()?)
}

pub fn run_ingest_with_binary(
    p: &FlightIngestParams,
    ctx: &JobContext,
    bin: &Path,
) -> Result<Summary, WorkloadError> {
    let scratch = Scratch::new(ctx.job_id)?;
    let columns = named("columns", std::slice::from_ref(&p.columns), ColumnSet::from_name)?;
    let clients = named("clients", &p.clients, IngestClient::from_name)?;
    let request = |pins| {
        FlightRequest::Ingest(IngestRequest {
            rows: vec![p.rows],
            columns: columns[0],
            clients,
            repetitions: p.repetitions,
            seed: (ctx.seed % 1_000_000).max(1),
            batch_rows: p.batch_rows as usize,
            insert_rows: p.insert_rows as usize,
            run_dir: Some(scratch.path().to_path_buf()),
            json: true,
            pins,
        })
    };
    let (lines, pin) = super::pinning::run_pinned::<IngestLine>(
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
    p: &FlightIngestParams,
    lines: &[IngestLine],
    ctx: &JobContext,
) -> Result<Summary, WorkloadError> {
    let mut s = Summary::new();
    for (i, client) in p.clients.iter().enumerate() {
        let mine: Vec<&IngestLine> = lines.iter().filter(|l| l.client == *client).collect();
        if mine.len() != p.repetitions as usize {
            return Err(other(format!(
                "testbed-flight ingest reported {} writes for {client}, {} expected",
                mine.len(),
                p.repetitions
            )));
        }
        if let Some(bad) = mine.iter().find(|l| !l.matches || l.rows != p.rows) {
            return Err(other(format!(
                "{client} (repetition {}): the table does not hold the {} generated rows",
                bad.repetition, p.rows
            )));
        }
        let secs: Vec<f64> = mine.iter().map(|l| l.seconds).collect();
        let tags = BTreeMap::from([
            ("client".to_string(), client.clone()),
            ("rows".to_string(), p.rows.to_string()),
        ]);
        ctx.emit_samples("ingest_seconds", "s", i as u32, &tags, &secs);
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
    }
    s.insert("rows".into(), serde_json::json!(p.rows));
    s.insert("tables_match".into(), serde_json::json!(true));
    Ok(s)
}

impl crate::workload::WorkloadParams for FlightIngestParams {
    fn validate(
        &self,
        _devices: &BTreeMap<String, testbed_vocab::protocol::DeviceRef>,
    ) -> Result<(), ParamError> {
        FlightIngestParams::validate(self)
    }
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run_ingest(self, ctx)
    }
    fn needs(&self) -> crate::workload::Needs {
        let mut host_steps = vec!["postgres"];
        let mut helpers = vec![registry::FLIGHT];
        if self.clients.iter().any(|c| c == "odbc-array") {
            host_steps.push("odbc");
            helpers.push(registry::ODBC);
        }
        if self.clients.iter().any(|c| c == "adbc-ingest") {
            host_steps.push("adbc");
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
            M::raw("ingest_seconds", "s", &["client"]),
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

    /// Two CPUs this test may use, if it has two.
    fn two_cpus() -> Option<Vec<usize>> {
        let cpus = testbed_proc::affinity::this_thread_cpus().unwrap();
        (cpus.len() >= 2).then(|| cpus[..2].to_vec())
    }

    fn q(j: serde_json::Value) -> FlightIngestParams {
        let mut j = j;
        j["kind"] = "flight-ingest".into();
        match serde_json::from_value(j).unwrap() {
            Workload::FlightIngest(p) => p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ingest_params_are_checked() {
        let p = q(serde_json::json!({}));
        assert_eq!((p.rows, p.clients.len(), p.columns.as_str()), (100_000, 5, "taxi"));
        assert!(p.validate().is_ok());
        for (bad, field) in [
            (serde_json::json!({"clients": ["copy-binary", "bcp"]}), "clients"),
            (serde_json::json!({"columns": "blobs"}), "columns"),
            (serde_json::json!({"rows": 0}), "rows"),
            (serde_json::json!({"insert_rows": 0}), "insert_rows"),
        ] {
            assert_eq!(q(bad).validate().unwrap_err().field, field);
        }
    }

    #[test]
    fn every_in_process_client_writes_the_table_the_generator_holds() {
        let p = FlightIngestParams {
            rows: 2500,
            columns: "strings-short".into(),
            clients: vec![
                "flight-sql-ingest".into(),
                "copy-binary".into(),
                "insert-batched".into(),
            ],
            repetitions: 2,
            batch_rows: 1000,
            insert_rows: 300,
            timeout_seconds: 300,
            // Clients and servers on separate CPUs where there are two.
            client_cpus: two_cpus().map(|c| c[1].to_string()),
            server_cpus: two_cpus().map(|c| c[0].to_string()),
        };
        let sink = Arc::new(VecSink::default());
        let ctx = JobContext {
            job_id: 5,
            seed: 1,
            devices: BTreeMap::new(),
            sink: sink.clone(),
        };
        let s = run_ingest_with_binary(&p, &ctx, &super::super::real_binary()).unwrap();
        assert_eq!(s["tables_match"], true);
        let want = match two_cpus() {
            Some(c) => format!("client {}, server {}", c[1], c[0]),
            None => "not pinned".into(),
        };
        assert_eq!(s["pinning"], serde_json::json!(want));
        let chunks = sink.0.lock().unwrap();
        // Time, and CPU per GiB on both sides, for every client.
        assert_eq!(chunks.len(), 3 * 3, "{chunks:?}");
        assert!(chunks.iter().all(|c| c.values.len() == 2));
        for client in ["flight-sql-ingest", "copy-binary", "insert-batched"] {
            assert!(s[&format!("{client}_seconds")].as_f64().unwrap() > 0.0);
            let cpu = s[&format!("{client}_client_cpu_s_per_gb")].as_f64();
            assert!(cpu.is_some_and(|v| v > 0.0), "{client}: {s:?}");
        }
    }
}
