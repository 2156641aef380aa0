//! `testbed-odbc fetch`: the query comparison's ODBC clients through
//! unixODBC and psqlODBC: row at a time with SQLGetData (what pyodbc does)
//! and block fetch into bound columnar buffers (what turbodbc does). The
//! connection string (it holds the password) comes from $TESTBED_ODBC_CONN,
//! not the command line. Prints one JSON line: the rows' checksum and the
//! seconds from connect to the last row (process start not counted, the
//! same span as the in-process clients of `testbed-flight query`).

mod insert;

use std::sync::OnceLock;

use odbc_api::buffers::{AnySlice, BufferDesc, ColumnarAnyBuffer};
use odbc_api::sys::Timestamp;
use odbc_api::{ConnectionOptions, Cursor, DataType, Environment, Nullable, ResultSetMetadata};

use testbed_vocab::taxi::{Checksum, OdbcFetch, days_from_civil};

type Result<T> = anyhow::Result<T>;

/// Where the connection string comes from.
const CONN_ENV: &str = "TESTBED_ODBC_CONN";

fn odbc_err(context: &str, e: odbc_api::Error) -> anyhow::Error {
    anyhow::anyhow!("ODBC {context}: {e}")
}

/// One environment per process, as ODBC recommends.
fn env() -> Result<&'static Environment> {
    static ENV: OnceLock<std::result::Result<Environment, String>> = OnceLock::new();
    ENV.get_or_init(|| Environment::new().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("ODBC environment: {e}"))
}

#[derive(Clone, Copy)]
enum Col {
    Int,
    Float,
    Timestamp,
    Text(usize),
}

/// Column kinds; text buffers hold `max_text_bytes` (the caller knows its
/// table's longest string, as a turbodbc user sets its string limit).
fn kinds(cursor: &mut impl ResultSetMetadata, max_text_bytes: usize) -> Result<Vec<Col>> {
    let n = cursor
        .num_result_cols()
        .map_err(|e| odbc_err("columns", e))?;
    (1..=n as u16)
        .map(|i| {
            let t = cursor
                .col_data_type(i)
                .map_err(|e| odbc_err("column type", e))?;
            Ok(match t {
                DataType::Integer | DataType::SmallInt | DataType::BigInt | DataType::TinyInt => {
                    Col::Int
                }
                DataType::Double | DataType::Float { .. } | DataType::Real => Col::Float,
                DataType::Timestamp { .. } => Col::Timestamp,
                // psqlODBC reports text as LONGVARCHAR(8190) whatever it
                // holds, and pgwire's text as unknown-sized. A string longer
                // than the buffer would be truncated and so change the
                // checksum, not pass silently.
                _ => Col::Text(max_text_bytes.max(1)),
            })
        })
        .collect()
}

fn ts_micros(t: &Timestamp) -> i64 {
    let days = days_from_civil(i64::from(t.year), u32::from(t.month), u32::from(t.day));
    let secs =
        days * 86_400 + i64::from(t.hour) * 3600 + i64::from(t.minute) * 60 + i64::from(t.second);
    secs * 1_000_000 + i64::from(t.fraction) / 1000
}

/// One value by SQLGetData; None for NULL.
fn get<T>(row: &mut odbc_api::CursorRow<'_>, col: u16) -> Result<Option<T>>
where
    Nullable<T>: odbc_api::parameter::CElement + odbc_api::handles::CDataMut,
    T: Default,
{
    let mut v = Nullable::<T>::null();
    row.get_data(col, &mut v)
        .map_err(|e| odbc_err(&format!("get column {col}"), e))?;
    Ok(v.into_opt())
}

/// Connects, runs `sql` and reads every row: by rows (None), or in blocks
/// of `batch_rows`.
fn fetch(
    conn_str: &str,
    sql: &str,
    blocks: Option<usize>,
    max_text_bytes: usize,
) -> Result<Checksum> {
    let conn = env()?
        .connect_with_connection_string(conn_str, ConnectionOptions::default())
        .map_err(|e| odbc_err("connect", e))?;
    let mut cursor = conn
        .execute(sql, (), None)
        .map_err(|e| odbc_err("execute", e))?
        .ok_or_else(|| anyhow::anyhow!("ODBC: the query returned no result set"))?;
    let cols = kinds(&mut cursor, max_text_bytes)?;
    match blocks {
        None => fetch_rows(cursor, &cols),
        Some(n) => fetch_blocks(cursor, &cols, n),
    }
}

/// Row at a time: SQLFetch, then SQLGetData per column.
fn fetch_rows(mut cursor: impl Cursor, cols: &[Col]) -> Result<Checksum> {
    let mut c = Checksum::default();
    let mut text = Vec::new();
    while let Some(mut row) = cursor.next_row().map_err(|e| odbc_err("fetch", e))? {
        let r = c.rows;
        for (i, k) in cols.iter().enumerate() {
            let col = i as u16 + 1;
            match k {
                Col::Int => {
                    if let Some(v) = get::<i64>(&mut row, col)? {
                        c.int(r, i, v);
                    }
                }
                Col::Float => {
                    if let Some(v) = get::<f64>(&mut row, col)? {
                        c.float(r, i, v);
                    }
                }
                Col::Timestamp => {
                    if let Some(v) = get::<Timestamp>(&mut row, col)? {
                        c.micros(r, i, ts_micros(&v));
                    }
                }
                Col::Text(_) => {
                    if row
                        .get_text(col, &mut text)
                        .map_err(|e| odbc_err("get text", e))?
                    {
                        c.text(r, i, &text);
                    }
                }
            }
        }
        c.rows += 1;
    }
    Ok(c)
}

/// The bound buffers' limit: long strings get fewer rows per block, as
/// turbodbc sizes its blocks by a buffer size (20 MB by default) rather
/// than by rows.
const BLOCK_BYTES: usize = 64 << 20;

/// Rows per block: `batch_rows`, or fewer when their buffers (values and
/// length indicators) would pass BLOCK_BYTES.
fn block_rows(cols: &[Col], batch_rows: usize) -> usize {
    let row_bytes: usize = cols
        .iter()
        .map(|k| match k {
            Col::Int | Col::Float => 16,
            Col::Timestamp => 24,
            Col::Text(n) => n + 1 + 8,
        })
        .sum();
    batch_rows.min(BLOCK_BYTES / row_bytes.max(1)).max(1)
}

/// Block fetch: up to `batch_rows` rows per SQLFetch into bound column
/// buffers.
fn fetch_blocks(cursor: impl Cursor, cols: &[Col], batch_rows: usize) -> Result<Checksum> {
    let descs = cols.iter().map(|k| match k {
        Col::Int => BufferDesc::I64 { nullable: true },
        Col::Float => BufferDesc::F64 { nullable: true },
        Col::Timestamp => BufferDesc::Timestamp { nullable: true },
        Col::Text(n) => BufferDesc::Text { max_str_len: *n },
    });
    let buffer = ColumnarAnyBuffer::from_descs(block_rows(cols, batch_rows), descs);
    let mut block = cursor
        .bind_buffer(buffer)
        .map_err(|e| odbc_err("bind buffers", e))?;
    let mut c = Checksum::default();
    while let Some(batch) = block.fetch().map_err(|e| odbc_err("fetch", e))? {
        let first = c.rows;
        let row = |j: usize| first + j as u64;
        for i in 0..cols.len() {
            match batch.column(i) {
                AnySlice::NullableI64(s) => s
                    .enumerate()
                    .for_each(|(j, v)| v.into_iter().for_each(|v| c.int(row(j), i, *v))),
                AnySlice::NullableF64(s) => s
                    .enumerate()
                    .for_each(|(j, v)| v.into_iter().for_each(|v| c.float(row(j), i, *v))),
                AnySlice::NullableTimestamp(s) => s.enumerate().for_each(|(j, v)| {
                    v.into_iter()
                        .for_each(|v| c.micros(row(j), i, ts_micros(v)))
                }),
                AnySlice::Text(view) => {
                    for j in 0..view.len() {
                        if let Some(b) = view.get(j) {
                            c.text(row(j), i, b);
                        }
                    }
                }
                _ => anyhow::bail!("ODBC: unexpected buffer kind"),
            }
        }
        c.rows += batch.num_rows() as u64;
    }
    Ok(c)
}

/// User + system CPU seconds of this process so far (getrusage).
fn process_cpu_s() -> Option<f64> {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return None;
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(s(u.ru_utime) + s(u.ru_stime))
}

#[derive(clap::Parser)]
#[command(
    name = "testbed-odbc",
    about = "ODBC clients of the testbed's query comparison"
)]
enum Cli {
    /// Run SQL and fetch every row; print {"checksum": …, "seconds": …}.
    Fetch {
        #[arg(long)]
        sql: String,
        /// rows: SQLFetch + SQLGetData per value; blocks: bound column buffers.
        #[arg(long, value_parser = ["rows", "blocks"])]
        mode: String,
        /// Rows per block fetch (fewer when the buffers would pass 64 MiB).
        #[arg(long, default_value_t = 65_536)]
        batch_rows: usize,
        /// The longest string a text column holds: block fetch's text
        /// buffers are this long.
        #[arg(long, default_value_t = 64)]
        max_text_bytes: usize,
    },
    /// Insert a CSV file's rows into TABLE with bound parameter arrays;
    /// print {"rows": …, "seconds": …, "cpu_s": …} (connect to commit).
    Insert {
        #[arg(long)]
        table: String,
        #[arg(long)]
        csv: String,
        /// The columns' types, in order: int, float, timestamp or text.
        #[arg(long)]
        types: String,
        /// Rows per execute (the parameter arrays' length).
        #[arg(long, default_value_t = 1000)]
        batch_rows: usize,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = <Cli as clap::Parser>::parse();
    let conn = std::env::var(CONN_ENV)
        .map_err(|_| anyhow::anyhow!("${CONN_ENV} must hold the ODBC connection string"))?;
    let (sql, mode, batch_rows, max_text_bytes) = match cli {
        Cli::Fetch {
            sql,
            mode,
            batch_rows,
            max_text_bytes,
        } => (sql, mode, batch_rows, max_text_bytes),
        Cli::Insert {
            table,
            csv,
            types,
            batch_rows,
        } => {
            let kinds = insert::Kind::parse_list(&types)?;
            let done = insert::insert(&conn, &table, &csv, &kinds, batch_rows)?;
            let line = serde_json::json!({
                "rows": done.rows,
                "seconds": done.seconds,
                "cpu_s": done.cpu_s,
            });
            println!("{line}");
            return Ok(());
        }
    };
    let started = std::time::Instant::now();
    let cpu_before = process_cpu_s();
    let checksum = match mode.as_str() {
        "rows" => fetch(&conn, &sql, None, max_text_bytes)?,
        _ => fetch(&conn, &sql, Some(batch_rows), max_text_bytes)?,
    };
    let seconds = started.elapsed().as_secs_f64();
    let line = OdbcFetch {
        checksum,
        seconds,
        cpu_s: cpu_before.zip(process_cpu_s()).map(|(b, a)| a - b),
    };
    println!("{}", serde_json::to_string(&line)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_of_long_strings_hold_fewer_rows_and_short_ones_all_asked() {
        let taxi = [Col::Int, Col::Timestamp, Col::Float, Col::Text(9)];
        assert_eq!(block_rows(&taxi, 65_536), 65_536);
        let long = [Col::Text(1000), Col::Text(1000)];
        let rows = block_rows(&long, 65_536);
        assert!(rows < 65_536 && rows * 2 * 1009 <= BLOCK_BYTES, "{rows}");
        assert_eq!(block_rows(&[Col::Text(usize::MAX / 2)], 10), 1);
    }
}
