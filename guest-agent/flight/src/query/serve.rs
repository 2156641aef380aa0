//! `testbed-flight sql-serve`: the query comparison's Flight SQL server on
//! its own, for clients of one's own (the ADBC test, JDBC, DBeaver): the
//! generated taxi table in a private directory, served over Flight SQL
//! from a fresh PostgreSQL, from DataFusion over the table's Parquet file,
//! or from the Parquet file with no engine. The first stdout line is JSON naming the address; it
//! serves until stdin closes, SIGINT or SIGTERM, then stops both servers.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use std::io::Read;

use super::columns::ColumnSet;
use super::{libpq, pg, sqlserver, taxi};
use crate::server::ServerConfig;
use crate::settings::TransportSettings;

/// Where `--user`'s password comes from.
pub const PASSWORD_ENV: &str = "TESTBED_FLIGHT_SQL_PASSWORD";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SourceKind {
    /// Statements run in PostgreSQL, results read with binary COPY (rows
    /// for statements with bound parameters) into Arrow batches.
    Postgres,
    /// `SELECT * FROM nyc_taxi [LIMIT n]` from the Parquet file.
    Parquet,
    /// DataFusion over the Parquet file (read-only statements, no bound
    /// parameters).
    Datafusion,
}

#[derive(Debug, Clone, clap::Args)]
pub struct SqlServeArgs {
    /// IP:PORT to listen on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: String,
    /// Rows of the generated nyc_taxi table.
    #[arg(long, default_value_t = 10_000)]
    pub rows: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Rows per Arrow batch of a result.
    #[arg(long, default_value_t = 65_536)]
    pub batch_rows: usize,
    #[arg(long, value_enum, default_value = "postgres")]
    pub source: SourceKind,
    /// Where PostgreSQL's data directory and the Parquet file go (default: a
    /// private temporary directory, removed afterwards).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Require this user (with the password from $TESTBED_FLIGHT_SQL_PASSWORD,
    /// so it is not on a command line): basic credentials, or the bearer
    /// token the Handshake returns, on every call.
    #[arg(long)]
    pub user: Option<String>,
}

pub fn run_cli(a: &SqlServeArgs) -> anyhow::Result<()> {
    if a.rows == 0 {
        anyhow::bail!("--rows must be at least 1");
    }
    let auth = match &a.user {
        Some(user) => {
            let password = std::env::var(PASSWORD_ENV)
                .with_context(|| format!("--user {user} needs ${PASSWORD_ENV}"))?;
            Some(super::sqlauth::Auth::new(user, &password)?)
        }
        None => None,
    };
    let dir = super::RunDir::new(a.run_dir.as_ref(), "testbed-flight-query-")?;
    // PostgreSQL only for its own source.
    let mut pg = match a.source {
        SourceKind::Postgres => Some(pg::PgCluster::start(dir.path())?),
        SourceKind::Parquet | SourceKind::Datafusion => None,
    };
    let rt = crate::runtime::runtime(None)?;
    let served = rt.block_on(async {
        let parquet = dir.path().join(format!("{}.parquet", taxi::TABLE));
        let source = match (&pg, a.source) {
            (Some(pg), _) => {
                let conn = pg.conn_string();
                libpq::load(&conn, ColumnSet::Taxi, a.seed, a.rows)
                    .await
                    .context("load the taxi table")?;
                sqlserver::Source::Postgres(sqlserver::Pg {
                    client: Arc::new(libpq::connect(&conn).await?),
                    read: sqlserver::PgRead::BinaryCopy,
                })
            }
            (None, SourceKind::Datafusion) => {
                super::write_parquet(&parquet, ColumnSet::Taxi, a.seed, a.rows)?;
                sqlserver::Source::DataFusion(
                    super::engine::table_context(&parquet, a.batch_rows).await?,
                )
            }
            (None, _) => {
                super::write_parquet(&parquet, ColumnSet::Taxi, a.seed, a.rows)?;
                sqlserver::Source::Parquet(parquet)
            }
        };
        let cfg = ServerConfig {
            addr: a.addr.parse()?,
            settings: TransportSettings::default(),
            tls_dir: None,
        };
        let server = sqlserver::start(&cfg, source, a.batch_rows, auth).await?;
        println!(
            "{}",
            serde_json::json!({
                "address": server.addr.to_string(),
                "table": taxi::TABLE,
                "table_rows": a.rows,
                "seed": a.seed,
            })
        );
        wait_for_stop().await?;
        server.stop().await?;
        Ok::<_, anyhow::Error>(())
    });
    // PostgreSQL stops whatever the server did.
    let stopped = pg.as_mut().map_or(Ok(()), pg::PgCluster::stop);
    served?;
    stopped?;
    Ok(())
}

/// Until stdin reaches its end (the parent went away), SIGINT or SIGTERM.
async fn wait_for_stop() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    // A plain thread: it may stay blocked in read() when a signal ends us.
    let (closed_tx, stdin_closed) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while std::io::stdin().read(&mut buf).is_ok_and(|n| n > 0) {}
        let _ = closed_tx.send(());
    });
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = term.recv() => {}
        _ = stdin_closed => {}
    }
    Ok(())
}
