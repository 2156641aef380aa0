//! Query comparison (`flight-query` in papers.md): `SELECT * FROM nyc_taxi
//! LIMIT N` through a row protocol and through Flight SQL. Each timing
//! includes connecting and fetching every row; every client's rows are
//! checksummed and must agree with the generator.

pub mod charge;
pub mod columns;
pub mod engine;
pub mod libpq;
pub mod odbc;
pub mod pg;
pub mod pgarrow;
pub mod pgcopy;
pub mod pgwire;
pub mod serve;
pub mod sqlauth;
pub mod sqlmeta;
pub mod sqlparams;
pub mod sqlserver;
pub mod taxi;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::error::{FlightError, Result};
use crate::server::ServerConfig;
use crate::settings::TransportSettings;
use columns::{ColumnSet, ColumnSetExt};
use taxi::Checksum;

/// The clients (the vocabulary's: the agent names them in its requests).
pub use testbed_vocab::request::flight::QueryClient;

/// `query`'s flags, or the agent's JSON request: one type.
pub use testbed_vocab::request::flight::QueryRequest;

/// One client fetching N rows once; `query --json` prints one per line
/// (the line type is shared with the agent).
pub type Measurement = testbed_vocab::flight::QueryLine<QueryClient, Checksum>;

#[derive(Debug, Clone, Serialize)]
pub struct QueryReport {
    pub table_rows: u64,
    pub columns: ColumnSet,
    pub seed: u64,
    /// COPY into PostgreSQL (None: no client read PostgreSQL).
    pub load_seconds: Option<f64>,
    pub parquet_seconds: f64,
    pub measurements: Vec<Measurement>,
}

impl QueryReport {
    pub fn all_match(&self) -> bool {
        self.measurements.iter().all(|m| m.matches)
    }
}

/// Where the run's files go: the directory the user chose, or a private
/// temporary one (mode 0700) removed on drop.
pub(crate) enum RunDir {
    Chosen(PathBuf),
    Private(tempfile::TempDir),
}

impl RunDir {
    pub(crate) fn new(chosen: Option<&PathBuf>, prefix: &str) -> Result<RunDir> {
        Ok(match chosen {
            Some(p) => {
                std::fs::create_dir_all(p)
                    .map_err(|e| FlightError::io(format!("create {}", p.display()), e))?;
                RunDir::Chosen(p.clone())
            }
            None => RunDir::Private(crate::private::tempdir(prefix)?),
        })
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        match self {
            RunDir::Chosen(p) => p,
            RunDir::Private(d) => d.path(),
        }
    }
}

/// The first `rows` rows of the table as a new Parquet file.
pub fn write_parquet(
    path: &std::path::Path,
    columns: ColumnSet,
    seed: u64,
    rows: u64,
) -> Result<()> {
    let file = crate::private::create_new(path)?;
    let mut w = parquet::arrow::ArrowWriter::try_new(file, columns.arrow_schema(), None)
        .map_err(|e| FlightError::Other(format!("parquet writer: {e}")))?;
    let step = 65_536u64;
    let mut start = 0;
    while start < rows {
        let n = step.min(rows - start);
        w.write(&columns.batch(seed, start, n)?)
            .map_err(|e| FlightError::Other(format!("parquet write: {e}")))?;
        start += n;
    }
    w.close()
        .map_err(|e| FlightError::Other(format!("parquet close: {e}")))?;
    Ok(())
}

/// A client whose server this run did not start (a bug in the selection).
fn not_started(client: QueryClient, what: &str) -> FlightError {
    FlightError::Other(format!("{}: {what} was not started", client.name()))
}

/// DataFusion over the Parquet file, served over Flight SQL and over
/// pgwire (user `postgres`, a random password) from one context.
struct Datafusion {
    flight: crate::server::RunningServer,
    pgwire: pgwire::PgwireServer,
    password: String,
}

impl Datafusion {
    const USER: &str = "postgres";

    async fn start(
        cfg: &ServerConfig,
        parquet: &std::path::Path,
        batch_rows: usize,
    ) -> Result<Self> {
        let ctx = engine::table_context(parquet, batch_rows).await?;
        let password = pg::random_password()?;
        // pgwire beside the Flight SQL server, on the same IP.
        let ip = match &cfg.addr {
            crate::addr::Addr::Tcp(a) => a.ip(),
            crate::addr::Addr::Unix(_) => std::net::Ipv4Addr::LOCALHOST.into(),
        };
        let pgwire = pgwire::start(ctx.clone(), (ip, 0).into(), Self::USER, &password).await?;
        let flight =
            sqlserver::start(cfg, sqlserver::Source::DataFusion(ctx), batch_rows, None).await?;
        Ok(Datafusion {
            flight,
            pgwire,
            password,
        })
    }

    fn flight_addr(&self) -> String {
        self.flight.addr.to_string()
    }

    fn pgwire_conn(&self) -> String {
        self.pgwire.conn_string(Self::USER, &self.password)
    }

    async fn stop(self) -> Result<()> {
        let r1 = self.flight.stop().await;
        let r2 = self.pgwire.stop().await;
        r1.and(r2)
    }
}

/// Starts PostgreSQL, loads the table, serves it over Flight SQL and runs
/// every client on every N.
pub fn run(a: &QueryRequest) -> Result<QueryReport> {
    let max_n = a.rows.iter().copied().max().unwrap_or(0);
    let table_rows = a.table_rows.unwrap_or(max_n);
    if a.rows.is_empty() || table_rows == 0 {
        return Err(FlightError::Param("--rows needs at least one N > 0".into()));
    }
    let pinned = crate::pins::pinned(&a.pins)?;
    let dir = RunDir::new(a.run_dir.as_ref(), "testbed-flight-query-")?;
    // This thread runs the clients and starts the ODBC ones.
    let rt = crate::pins::client_runtime(pinned.as_ref(), charge::CLIENT_THREADS)?;
    // PostgreSQL only when a client reads it (the DataFusion and Parquet
    // clients read the Parquet file).
    let mut pg = match a.clients.iter().any(|c| c.reads_postgres()) {
        true => Some(crate::pins::as_server(pinned.as_ref(), || {
            pg::PgCluster::start(dir.path())
        })??),
        false => None,
    };
    let conn = pg.as_ref().map(pg::PgCluster::conn_string);
    let load_seconds = match &conn {
        Some(conn) => {
            let t0 = Instant::now();
            rt.block_on(libpq::load(conn, a.columns, a.seed, table_rows))?;
            Some(t0.elapsed().as_secs_f64())
        }
        None => None,
    };
    let parquet_path = dir.path().join("nyc_taxi.parquet");
    let t0 = Instant::now();
    write_parquet(&parquet_path, a.columns, a.seed, table_rows)?;
    let parquet_seconds = t0.elapsed().as_secs_f64();

    // Flight SQL servers on their own runtime, as a separate server would be.
    let server_rt = crate::pins::server_runtime(pinned.as_ref(), charge::SERVER_THREADS)?;
    let settings = TransportSettings::default();
    let cfg = ServerConfig {
        addr: "127.0.0.1:0".parse()?,
        settings: settings.clone(),
        tls_dir: None,
    };
    let (sql_pg, sql_parquet) = server_rt.block_on(async {
        // Over PostgreSQL: read by binary COPY, and by rows.
        let mut over_pg = Vec::new();
        for read in [sqlserver::PgRead::BinaryCopy, sqlserver::PgRead::Rows] {
            let Some(conn) = &conn else { break };
            let client = Arc::new(libpq::connect(conn).await?);
            let source = sqlserver::Source::Postgres(sqlserver::Pg { client, read });
            over_pg.push(sqlserver::start(&cfg, source, a.batch_rows, None).await?);
        }
        let source = sqlserver::Source::Parquet(parquet_path.clone());
        let parquet = sqlserver::start(&cfg, source, a.batch_rows, None).await?;
        Ok::<_, FlightError>((over_pg, parquet))
    })?;
    let pq_addr = sql_parquet.addr.to_string();
    let over_pg = |client: QueryClient, i: usize| {
        sql_pg
            .get(i)
            .map(|s| s.addr.to_string())
            .ok_or_else(|| not_started(client, "PostgreSQL"))
    };
    let pg_conn = |client: QueryClient| {
        conn.clone()
            .ok_or_else(|| not_started(client, "PostgreSQL"))
    };
    // DataFusion behind both protocols, when a client reads it.
    let datafusion = if a.clients.iter().any(|c| c.reads_datafusion()) {
        Some(server_rt.block_on(Datafusion::start(&cfg, &parquet_path, a.batch_rows))?)
    } else {
        None
    };
    let df = |client: QueryClient| {
        datafusion
            .as_ref()
            .ok_or_else(|| not_started(client, "DataFusion"))
    };

    let meter = charge::Meter {
        postmaster: pg.as_ref().and_then(pg::PgCluster::pid),
    };
    let mut measurements = Vec::new();
    for &n in &a.rows {
        let sql = format!("SELECT * FROM {} LIMIT {n}", taxi::TABLE);
        let fetched = n.min(table_rows);
        let want = a.columns.expected(a.seed, fetched);
        let value_bytes = a.columns.value_bytes(a.seed, fetched);
        for rep in 0..a.repetitions.max(1) {
            for &client in &a.clients {
                let cpu_before = meter.read();
                let t0 = Instant::now();
                // The ODBC child times itself (connect to last row), and
                // counts its own CPU over the same span.
                let mut own_seconds = None;
                let mut own_cpu = None;
                let mut odbc = |port: u16, password: &str, mode: &str| {
                    let conn = odbc::connection_string(port, password);
                    let text_bytes = a.columns.max_text_bytes();
                    odbc::fetch(&conn, &sql, mode, a.batch_rows, text_bytes).map(|f| {
                        own_seconds = Some(f.seconds);
                        own_cpu = f.cpu_s;
                        f.checksum
                    })
                };
                let got =
                    match client {
                        QueryClient::OdbcRow | QueryClient::OdbcBlock => match &pg {
                            Some(pg) => {
                                let mode = match client {
                                    QueryClient::OdbcRow => "rows",
                                    _ => "blocks",
                                };
                                odbc(pg.port, pg.password(), mode)
                            }
                            None => Err(not_started(client, "PostgreSQL")),
                        },
                        QueryClient::TokioPostgres => {
                            pg_conn(client).and_then(|conn| rt.block_on(libpq::fetch(&conn, &sql)))
                        }
                        QueryClient::FlightSql => over_pg(client, 0)
                            .and_then(|addr| rt.block_on(sqlserver::fetch(&addr, &sql, &settings))),
                        QueryClient::FlightSqlRows => over_pg(client, 1)
                            .and_then(|addr| rt.block_on(sqlserver::fetch(&addr, &sql, &settings))),
                        QueryClient::FlightSqlParquet => {
                            rt.block_on(sqlserver::fetch(&pq_addr, &sql, &settings))
                        }
                        QueryClient::DatafusionFlightSql => df(client).and_then(|d| {
                            rt.block_on(sqlserver::fetch(&d.flight_addr(), &sql, &settings))
                        }),
                        QueryClient::DatafusionPgwireTokioPostgres => df(client)
                            .and_then(|d| rt.block_on(libpq::fetch(&d.pgwire_conn(), &sql))),
                        QueryClient::DatafusionPgwireOdbcRow => {
                            df(client).and_then(|d| odbc(d.pgwire.addr.port(), &d.password, "rows"))
                        }
                        QueryClient::DatafusionPgwireOdbcBlock => df(client)
                            .and_then(|d| odbc(d.pgwire.addr.port(), &d.password, "blocks")),
                    }
                    .map_err(|e| FlightError::Other(format!("{} LIMIT {n}: {e}", client.name())))?;
                let seconds = own_seconds.unwrap_or_else(|| t0.elapsed().as_secs_f64());
                // Outside the timer: it may wait for a backend's exit.
                let cpu = cpu_before.and_then(|b| meter.since(&b, own_cpu));
                measurements.push(Measurement {
                    client,
                    limit: n,
                    repetition: rep,
                    rows: got.rows,
                    seconds,
                    checksum: got,
                    matches: got == want,
                    value_bytes,
                    client_cpu_s: cpu.map(|c| c.client_s),
                    server_cpu_s: cpu.map(|c| c.server_s),
                });
            }
        }
    }
    server_rt.block_on(async {
        let mut stopped = sql_parquet.stop().await;
        for s in sql_pg {
            stopped = stopped.and(s.stop().await);
        }
        if let Some(d) = datafusion {
            stopped = stopped.and(d.stop().await);
        }
        stopped
    })?;
    if let Some(pg) = &mut pg {
        pg.stop()?;
    }
    Ok(QueryReport {
        table_rows,
        columns: a.columns,
        seed: a.seed,
        load_seconds,
        parquet_seconds,
        measurements,
    })
}

pub fn run_cli(a: &QueryRequest) -> anyhow::Result<()> {
    let r = run(a)?;
    if a.json {
        for m in &r.measurements {
            println!("{}", serde_json::to_string(m)?);
        }
    } else {
        let load = match r.load_seconds {
            Some(s) => format!("COPY load {s:.2} s"),
            None => "PostgreSQL not started".into(),
        };
        println!(
            "table {} rows of {} (seed {}), {load}, Parquet write {:.2} s",
            r.table_rows,
            r.columns.name(),
            r.seed,
            r.parquet_seconds
        );
        println!(
            "| N | client | median s ({} reps) | rows/s | rows | checksum | ok |",
            a.repetitions.max(1)
        );
        println!("|---|---|---|---|---|---|---|");
        for &n in &a.rows {
            for &client in &a.clients {
                let ms: Vec<&Measurement> = r
                    .measurements
                    .iter()
                    .filter(|m| m.limit == n && m.client == client)
                    .collect();
                let Some(first) = ms.first() else { continue };
                let mut secs: Vec<f64> = ms.iter().map(|m| m.seconds).collect();
                secs.sort_by(f64::total_cmp);
                let median = secs[secs.len() / 2];
                println!(
                    "| {n} | {} | {median:.4} | {:.0} | {} | {} | {} |",
                    client.name(),
                    first.rows as f64 / median.max(1e-9),
                    first.rows,
                    first.checksum.short(),
                    if ms.iter().all(|m| m.matches) {
                        "yes"
                    } else {
                        "NO"
                    }
                );
            }
        }
    }
    if !r.all_match() {
        anyhow::bail!(
            "some clients returned rows that differ from the generated table (see the table)"
        );
    }
    Ok(())
}
