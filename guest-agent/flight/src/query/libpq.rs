//! Loading the table with COPY, and the tokio-postgres client (the libpq
//! row protocol, binary results over the extended query protocol).

use std::time::SystemTime;

use bytes::Bytes;
use futures::{SinkExt, TryStreamExt};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, Row};

use super::columns::{ColumnSet, ColumnSetExt};
use super::taxi::{Checksum, TABLE};
use crate::error::{FlightError, Result};

pub fn pg_err(context: &str, e: tokio_postgres::Error) -> FlightError {
    // The cause ("password missing") is not part of the error's Display.
    let detail = match (e.as_db_error(), std::error::Error::source(&e)) {
        (Some(d), _) => format!(": {}", d.message()),
        (None, Some(cause)) => format!(": {cause}"),
        (None, None) => String::new(),
    };
    FlightError::Other(format!("{context}: {e}{detail}"))
}

/// Connects; the connection task runs on the current runtime.
pub async fn connect(conn: &str) -> Result<Client> {
    let (client, connection) = tokio_postgres::connect(conn, NoTls)
        .await
        .map_err(|e| pg_err(&format!("connect to PostgreSQL ({})", shown(conn)), e))?;
    tokio::spawn(connection);
    Ok(client)
}

/// `conn` without its password, for messages.
fn shown(conn: &str) -> String {
    conn.split_whitespace()
        .map(|kv| {
            if kv.starts_with("password=") {
                "password=***"
            } else {
                kv
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Creates the table and loads `rows` generated rows with COPY (CSV), in
/// one transaction: COPY into a table created in its own transaction skips
/// the free-space map, so rows lie in the heap in the order sent and
/// `LIMIT N` returns the first N. (Otherwise, with rows of varying width,
/// COPY fills earlier pages' holes with later rows: the string sets came
/// back out of order.)
pub async fn load(conn: &str, columns: ColumnSet, seed: u64, rows: u64) -> Result<()> {
    let client = connect(conn).await?;
    client
        .batch_execute(&format!(
            "BEGIN; DROP TABLE IF EXISTS {TABLE}; {}",
            columns.create_table_sql()
        ))
        .await
        .map_err(|e| pg_err("create table", e))?;
    let sink = client
        .copy_in(&format!("COPY {TABLE} FROM STDIN (FORMAT csv)"))
        .await
        .map_err(|e| pg_err("COPY", e))?;
    futures::pin_mut!(sink);
    let mut buf = String::with_capacity(8 << 20);
    for r in 0..rows {
        columns.csv_line(seed, r, &mut buf);
        if buf.len() >= 8 << 20 {
            let chunk = Bytes::from(std::mem::take(&mut buf));
            sink.send(chunk).await.map_err(|e| pg_err("COPY data", e))?;
        }
    }
    if !buf.is_empty() {
        sink.send(Bytes::from(buf))
            .await
            .map_err(|e| pg_err("COPY data", e))?;
    }
    let n = sink.finish().await.map_err(|e| pg_err("COPY end", e))?;
    if n != rows {
        return Err(FlightError::Verify(format!(
            "COPY loaded {n} rows, {rows} sent"
        )));
    }
    client
        .batch_execute("COMMIT")
        .await
        .map_err(|e| pg_err("COMMIT the load", e))?;
    client
        .batch_execute(&format!("VACUUM ANALYZE {TABLE}"))
        .await
        .map_err(|e| pg_err("VACUUM ANALYZE", e))?;
    Ok(())
}

/// µs since 1970 of a PostgreSQL `timestamp` read as SystemTime.
pub fn micros(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_micros() as i64,
        Err(e) => -(e.duration().as_micros() as i64),
    }
}

fn add_row(c: &mut Checksum, row: &Row) -> Result<()> {
    let r = c.rows;
    let get_err = |e: tokio_postgres::Error| pg_err("read a column", e);
    for (i, col) in row.columns().iter().enumerate() {
        let t = col.type_();
        if *t == Type::INT4 {
            if let Some(v) = row.try_get::<_, Option<i32>>(i).map_err(get_err)? {
                c.int(r, i, i64::from(v));
            }
        } else if *t == Type::INT8 {
            if let Some(v) = row.try_get::<_, Option<i64>>(i).map_err(get_err)? {
                c.int(r, i, v);
            }
        } else if *t == Type::INT2 {
            if let Some(v) = row.try_get::<_, Option<i16>>(i).map_err(get_err)? {
                c.int(r, i, i64::from(v));
            }
        } else if *t == Type::FLOAT8 {
            if let Some(v) = row.try_get::<_, Option<f64>>(i).map_err(get_err)? {
                c.float(r, i, v);
            }
        } else if *t == Type::TIMESTAMP {
            if let Some(v) = row.try_get::<_, Option<SystemTime>>(i).map_err(get_err)? {
                c.micros(r, i, micros(v));
            }
        } else if *t == Type::TEXT || *t == Type::VARCHAR {
            if let Some(v) = row.try_get::<_, Option<&str>>(i).map_err(get_err)? {
                c.text(r, i, v.as_bytes());
            }
        } else {
            return Err(FlightError::Other(format!("unsupported column type {t}")));
        }
    }
    c.rows += 1;
    Ok(())
}

/// Connect, run `sql`, stream every row.
pub async fn fetch(conn: &str, sql: &str) -> Result<Checksum> {
    let client = connect(conn).await?;
    let rows = client
        .query_raw(sql, std::iter::empty::<i32>())
        .await
        .map_err(|e| pg_err("query", e))?;
    futures::pin_mut!(rows);
    let mut c = Checksum::default();
    while let Some(row) = rows.try_next().await.map_err(|e| pg_err("fetch", e))? {
        add_row(&mut c, &row)?;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_connection_string_is_shown_without_its_password() {
        assert_eq!(
            super::shown("host=127.0.0.1 port=5 password=s3cret user=postgres"),
            "host=127.0.0.1 port=5 password=*** user=postgres"
        );
    }
}
