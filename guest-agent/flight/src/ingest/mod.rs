//! Ingest (`flight-ingest`): the same rows written into PostgreSQL by
//! Flight SQL bulk ingest (CommandStatementIngest, from our client and
//! from ADBC's `adbc_ingest`, into our Flight SQL server, which writes them
//! with binary COPY), by `COPY … FROM STDIN (FORMAT binary)` over
//! tokio-postgres, by batched `INSERT` over tokio-postgres and by psqlODBC
//! array inserts. Every client starts from the rows in memory (Arrow
//! batches; an IPC file or a CSV file read before its timer for the two
//! that run as processes), writes into a freshly created empty table, and
//! is timed from connect to the last row committed. After each write the
//! table is read back sorted on every column and must equal the generator's
//! rows sorted the same way.

pub mod insert;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use serde::Deserialize;

use crate::error::{FlightError, Result};
use crate::query::charge;
use crate::query::columns::{ColumnSet, ColumnSetExt};
use crate::query::taxi::TABLE;
use crate::query::{libpq, odbc, pg, sqlserver};
use crate::server::ServerConfig;
use crate::settings::TransportSettings;

const ADBC_INGEST_PY: &str = include_str!("adbc_ingest.py");

/// The clients (the vocabulary's: the agent names them in its requests).
pub use testbed_vocab::request::flight::IngestClient;

/// `ingest`'s flags, or the agent's JSON request: one type.
pub use testbed_vocab::request::flight::IngestRequest;

pub type Measurement = testbed_vocab::flight::IngestLine<IngestClient>;

/// What a client process reports about itself.
#[derive(Debug, Deserialize)]
struct ChildReport {
    rows: u64,
    seconds: f64,
    cpu_s: Option<f64>,
}

/// Runs `cmd` (an ingest client process) and reads its report.
fn child_report(mut cmd: Command, what: &str) -> Result<ChildReport> {
    let done = testbed_proc::run_captured(&mut cmd, Duration::from_secs(3600))
        .map_err(|e| FlightError::Other(format!("{what}: {e}")))?;
    if !done.status.success() {
        return Err(FlightError::Other(format!(
            "{what} failed ({}): {}",
            done.status,
            done.stderr.trim()
        )));
    }
    serde_json::from_str(done.stdout.trim())
        .map_err(|e| FlightError::Other(format!("{what} printed {:?}: {e}", done.stdout)))
}

/// The most bytes of values (and string offsets) in one Arrow batch any
/// ingest client sends: half the 16 MiB message limit the ADBC Flight SQL
/// driver ships with, which refuses a larger batch before sending it
/// (65 536 rows of long strings are 79 MB). Every client gets the same
/// batches.
const MAX_BATCH_BYTES: usize = 8 << 20;

/// `batch_rows`, cut so that no batch of `columns` passes `MAX_BATCH_BYTES`.
fn rows_per_batch(columns: ColumnSet, batch_rows: usize) -> usize {
    let cap = (MAX_BATCH_BYTES / columns.max_row_bytes().max(1)).max(1);
    batch_rows.clamp(1, cap)
}

/// The generated rows as batches of `batch_rows` (at most `MAX_BATCH_BYTES`).
fn batches(
    columns: ColumnSet,
    seed: u64,
    rows: u64,
    batch_rows: usize,
) -> Result<Vec<RecordBatch>> {
    let step = rows_per_batch(columns, batch_rows) as u64;
    (0..rows)
        .step_by(step as usize)
        .map(|start| columns.batch(seed, start, step.min(rows - start)))
        .collect()
}

/// The rows as an Arrow IPC file (for ADBC) and as CSV (for ODBC).
fn write_inputs(
    dir: &Path,
    columns: ColumnSet,
    seed: u64,
    rows: u64,
    b: &[RecordBatch],
) -> Result<()> {
    let ipc = crate::private::create_new(&dir.join(format!("ingest-{rows}.arrow")))?;
    let mut w = arrow::ipc::writer::FileWriter::try_new(ipc, &columns.arrow_schema())?;
    for batch in b {
        w.write(batch)?;
    }
    w.finish()?;
    let mut csv = String::new();
    for r in 0..rows {
        columns.csv_line(seed, r, &mut csv);
    }
    let path = dir.join(format!("ingest-{rows}.csv"));
    std::fs::write(&path, csv).map_err(|e| FlightError::io(format!("write {}", path.display()), e))
}

/// testbed-odbc's `--types` for the column set.
fn odbc_types(columns: ColumnSet) -> String {
    use crate::query::taxi::Kind;
    columns
        .columns()
        .iter()
        .map(|(_, _, k)| match k {
            Kind::Int => "int",
            Kind::Float => "float",
            Kind::Timestamp => "timestamp",
            Kind::Text => "text",
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Our Flight SQL client's bulk ingest into `addr`'s table, appending.
async fn flight_ingest(
    addr: &str,
    batches: Vec<RecordBatch>,
    settings: &TransportSettings,
) -> Result<u64> {
    use arrow_flight::sql::{TableDefinitionOptions, TableExistsOption, TableNotExistOption};
    let parsed: crate::addr::Addr = addr.parse()?;
    let inner = crate::bench::client(&parsed, None, settings, Duration::from_secs(10)).await?;
    let mut client = arrow_flight::sql::client::FlightSqlServiceClient::new_from_inner(inner);
    let cmd = arrow_flight::sql::CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: TableNotExistOption::Fail.into(),
            if_exists: TableExistsOption::Append.into(),
        }),
        table: TABLE.into(),
        ..Default::default()
    };
    let stream = futures::stream::iter(batches.into_iter().map(Ok));
    let n = client
        .execute_ingest(cmd, stream)
        .await
        .map_err(|e| FlightError::Rpc {
            call: "Flight SQL ingest",
            addr: addr.to_string(),
            status: e.to_string(),
        })?;
    u64::try_from(n).map_err(|_| FlightError::Verify(format!("ingest reported {n} rows")))
}

/// Starts PostgreSQL and a Flight SQL server over it, then has every client
/// write every N rows into a fresh table.
pub fn run(a: &IngestRequest) -> Result<Vec<Measurement>> {
    if a.rows.is_empty() || a.rows.contains(&0) {
        return Err(FlightError::Param("--rows needs N > 0".into()));
    }
    let pinned = crate::pins::pinned(&a.pins)?;
    let dir = crate::query::RunDir::new(a.run_dir.as_ref(), "testbed-flight-ingest-")?;
    let dir_path = dir.path().to_path_buf();
    // This thread runs the clients and starts the ODBC and ADBC ones.
    let rt = crate::pins::client_runtime(pinned.as_ref(), charge::CLIENT_THREADS)?;
    let server_rt = crate::pins::server_runtime(pinned.as_ref(), charge::SERVER_THREADS)?;
    let mut pg = crate::pins::as_server(pinned.as_ref(), || pg::PgCluster::start(&dir_path))??;
    let conn = pg.conn_string();
    let settings = TransportSettings::default();
    let cfg = ServerConfig {
        addr: "127.0.0.1:0".parse()?,
        settings: settings.clone(),
        tls_dir: None,
    };
    let server = server_rt.block_on(async {
        let client = Arc::new(libpq::connect(&conn).await?);
        let source = sqlserver::Source::Postgres(sqlserver::Pg {
            client,
            read: sqlserver::PgRead::BinaryCopy,
        });
        sqlserver::start(&cfg, source, a.batch_rows, None).await
    })?;
    let addr = server.addr.to_string();
    let meter = charge::Meter {
        postmaster: pg.pid(),
    };
    let python = crate::pyarrow::python();
    let script = dir_path.join("adbc_ingest.py");
    std::fs::write(&script, ADBC_INGEST_PY)
        .map_err(|e| FlightError::io(format!("write {}", script.display()), e))?;
    let mut out = Vec::new();
    for &n in &a.rows {
        let input = batches(a.columns, a.seed, n, a.batch_rows)?;
        write_inputs(&dir_path, a.columns, a.seed, n, &input)?;
        let ipc = dir_path.join(format!("ingest-{n}.arrow"));
        let csv = dir_path.join(format!("ingest-{n}.csv"));
        let want = a.columns.expected_sorted(a.seed, n);
        let value_bytes = a.columns.value_bytes(a.seed, n);
        let check_sql = format!(
            "SELECT * FROM {TABLE} {}",
            a.columns.order_by_every_column()
        );
        for rep in 0..a.repetitions.max(1) {
            for &client in &a.clients {
                // A fresh empty table for every write, committed before the
                // timer starts.
                rt.block_on(async {
                    let c = libpq::connect(&conn).await?;
                    c.batch_execute(&format!(
                        "DROP TABLE IF EXISTS {TABLE}; {}",
                        a.columns.create_table_sql()
                    ))
                    .await
                    .map_err(|e| libpq::pg_err("create the table", e))
                })?;
                let cpu_before = meter.read();
                let t0 = Instant::now();
                let mut own: Option<ChildReport> = None;
                let written = match client {
                    IngestClient::CopyBinary => rt.block_on(async {
                        let c = libpq::connect(&conn).await?;
                        let stream = futures::stream::iter(input.clone().into_iter().map(Ok));
                        crate::query::pgcopy::copy_in(&c, TABLE, stream).await
                    }),
                    IngestClient::InsertBatched => rt.block_on(async {
                        let mut c = libpq::connect(&conn).await?;
                        insert::insert(&mut c, TABLE, &input, a.insert_rows).await
                    }),
                    IngestClient::FlightSqlIngest => {
                        rt.block_on(flight_ingest(&addr, input.clone(), &settings))
                    }
                    IngestClient::AdbcIngest => {
                        let mut cmd = Command::new(&python);
                        cmd.arg(&script)
                            .arg(format!("grpc://{addr}"))
                            .arg(TABLE)
                            .arg(&ipc);
                        child_report(cmd, "adbc_ingest.py").map(|r| {
                            let rows = r.rows;
                            own = Some(r);
                            rows
                        })
                    }
                    IngestClient::OdbcArray => {
                        let mut cmd = Command::new(odbc::binary());
                        cmd.args(["insert", "--table", TABLE, "--types"])
                            .arg(odbc_types(a.columns))
                            .arg("--csv")
                            .arg(&csv)
                            .args(["--batch-rows", &a.insert_rows.to_string()])
                            .env(
                                "TESTBED_ODBC_CONN",
                                odbc::connection_string(pg.port, pg.password()),
                            );
                        child_report(cmd, "testbed-odbc insert").map(|r| {
                            let rows = r.rows;
                            own = Some(r);
                            rows
                        })
                    }
                }
                .map_err(|e| FlightError::Other(format!("{} of {n} rows: {e}", client.name())))?;
                let seconds = own
                    .as_ref()
                    .map_or_else(|| t0.elapsed().as_secs_f64(), |r| r.seconds);
                let cpu =
                    cpu_before.and_then(|b| meter.since(&b, own.as_ref().and_then(|r| r.cpu_s)));
                let got = rt.block_on(libpq::fetch(&conn, &check_sql))?;
                out.push(Measurement {
                    client,
                    rows: n,
                    repetition: rep,
                    seconds,
                    matches: written == n && got == want,
                    value_bytes,
                    client_cpu_s: cpu.map(|c| c.client_s),
                    server_cpu_s: cpu.map(|c| c.server_s),
                });
            }
        }
    }
    server_rt.block_on(server.stop())?;
    pg.stop()?;
    Ok(out)
}

pub fn run_cli(a: &IngestRequest) -> anyhow::Result<()> {
    let ms = run(a)?;
    if a.json {
        for m in &ms {
            println!("{}", serde_json::to_string(m)?);
        }
    } else {
        println!("| rows | client | median s | rows/s | client CPU s | server CPU s | ok |");
        println!("|---|---|---|---|---|---|---|");
        for &n in &a.rows {
            for &client in &a.clients {
                let mine: Vec<&Measurement> = ms
                    .iter()
                    .filter(|m| m.client == client && m.rows == n)
                    .collect();
                let Some(first) = mine.first() else { continue };
                let mut secs: Vec<f64> = mine.iter().map(|m| m.seconds).collect();
                secs.sort_by(f64::total_cmp);
                let median = secs[secs.len() / 2];
                let show = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.3}"));
                println!(
                    "| {n} | {} | {median:.4} | {:.0} | {} | {} | {} |",
                    client.name(),
                    n as f64 / median.max(1e-9),
                    show(first.client_cpu_s),
                    show(first.server_cpu_s),
                    if mine.iter().all(|m| m.matches) {
                        "yes"
                    } else {
                        "NO"
                    }
                );
            }
        }
    }
    if ms.iter().any(|m| !m.matches) {
        anyhow::bail!(
            "some clients left a table that differs from the generated rows (see the table)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_batch_passes_the_adbc_drivers_message_limit() {
        for columns in [
            ColumnSet::Taxi,
            ColumnSet::Ints,
            ColumnSet::StringsShort,
            ColumnSet::StringsLong,
        ] {
            let b = batches(columns, 1, 20_000, 65_536).unwrap();
            assert_eq!(b.iter().map(|b| b.num_rows()).sum::<usize>(), 20_000);
            for batch in &b {
                let mut ipc = Vec::new();
                let mut w =
                    arrow::ipc::writer::StreamWriter::try_new(&mut ipc, &batch.schema()).unwrap();
                w.write(batch).unwrap();
                w.finish().unwrap();
                assert!(ipc.len() <= 16 << 20, "{columns:?}: {} bytes", ipc.len());
            }
        }
        // Long strings are cut; integers keep the rows asked for.
        assert!(rows_per_batch(ColumnSet::StringsLong, 65_536) < 10_000);
        assert_eq!(rows_per_batch(ColumnSet::Ints, 65_536), 65_536);
        assert_eq!(rows_per_batch(ColumnSet::Ints, 0), 1);
    }
}
