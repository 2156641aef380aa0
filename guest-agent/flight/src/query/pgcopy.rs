//! Arrow batches into a PostgreSQL table by `COPY … FROM STDIN (FORMAT
//! binary)`, the bulk path PostgreSQL offers: used by the `copy-binary`
//! ingest client directly and by the Flight SQL server's bulk ingest
//! (CommandStatementIngest). The rows are encoded straight from the Arrow
//! columns into COPY's binary format (PostgreSQL's "Binary Format" of
//! COPY: a header, then per row a 16-bit field count and per field a
//! 32-bit length and the value in the type's binary send format).

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type, TimeUnit};
use bytes::{BufMut, Bytes, BytesMut};
use futures::{SinkExt, Stream, StreamExt};
use tokio_postgres::Client;

use crate::error::{FlightError, Result};
use crate::query::libpq::pg_err;

/// PostgreSQL's timestamps count µs from 2000-01-01, Unix's from 1970.
const PG_EPOCH_US: i64 = 946_684_800_000_000;
/// Chunks sent to the server at about this size.
const CHUNK: usize = 4 << 20;

/// The COPY statement for `table` (a plain identifier, checked).
pub fn copy_sql(table: &str) -> Result<String> {
    check_identifier(table)?;
    Ok(format!("COPY {table} FROM STDIN (FORMAT binary)"))
}

/// Only names made of ASCII letters, digits and `_` (not first a digit)
/// are written into SQL: a client names the table.
pub fn check_identifier(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(FlightError::Param(format!(
            "table name {name:?}: only ASCII letters, digits and _ are accepted"
        )))
    }
}

/// Writes every batch of `batches` into `table`; returns the rows
/// PostgreSQL reports copied (checked against the rows sent).
pub async fn copy_in<S>(client: &Client, table: &str, batches: S) -> Result<u64>
where
    S: Stream<Item = Result<RecordBatch>>,
{
    let sink = client
        .copy_in(&copy_sql(table)?)
        .await
        .map_err(|e| pg_err("COPY FROM STDIN (FORMAT binary)", e))?;
    futures::pin_mut!(sink);
    futures::pin_mut!(batches);
    let mut buf = BytesMut::with_capacity(CHUNK + (64 << 10));
    // Signature, flags, header extension length.
    buf.put_slice(b"PGCOPY\n\xff\r\n\0");
    buf.put_i32(0);
    buf.put_i32(0);
    let mut sent = 0u64;
    while let Some(batch) = batches.next().await {
        let batch = batch?;
        encode_batch(&batch, &mut buf)?;
        sent += batch.num_rows() as u64;
        if buf.len() >= CHUNK {
            let chunk: Bytes = buf.split().freeze();
            sink.send(chunk).await.map_err(|e| pg_err("COPY data", e))?;
        }
    }
    buf.put_i16(-1);
    sink.send(buf.freeze())
        .await
        .map_err(|e| pg_err("COPY data", e))?;
    let copied = sink.finish().await.map_err(|e| pg_err("COPY end", e))?;
    if copied != sent {
        return Err(FlightError::Verify(format!(
            "COPY into {table} took {copied} rows, {sent} sent"
        )));
    }
    Ok(copied)
}

/// Appends the batch's rows in COPY's binary format.
fn encode_batch(batch: &RecordBatch, buf: &mut BytesMut) -> Result<()> {
    let cols = batch.columns();
    for c in cols {
        match c.data_type() {
            DataType::Int32
            | DataType::Int64
            | DataType::Float64
            | DataType::Utf8
            | DataType::Utf8View
            | DataType::Timestamp(TimeUnit::Microsecond, _) => {}
            other => {
                return Err(FlightError::Param(format!(
                    "COPY binary: column type {other} is not supported (int32, int64, float64, utf8, timestamp[us])"
                )));
            }
        }
    }
    let n_cols = i16::try_from(cols.len())
        .map_err(|_| FlightError::Param(format!("{} columns are too many", cols.len())))?;
    for row in 0..batch.num_rows() {
        buf.put_i16(n_cols);
        for c in cols {
            if c.is_null(row) {
                buf.put_i32(-1);
                continue;
            }
            match c.data_type() {
                DataType::Int32 => {
                    buf.put_i32(4);
                    buf.put_i32(c.as_primitive::<Int32Type>().value(row));
                }
                DataType::Int64 => {
                    buf.put_i32(8);
                    buf.put_i64(c.as_primitive::<Int64Type>().value(row));
                }
                DataType::Float64 => {
                    buf.put_i32(8);
                    buf.put_f64(c.as_primitive::<Float64Type>().value(row));
                }
                DataType::Timestamp(..) => {
                    let us = c
                        .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                        .value(row);
                    buf.put_i32(8);
                    buf.put_i64(us - PG_EPOCH_US);
                }
                DataType::Utf8 => put_text(buf, c.as_string::<i32>().value(row))?,
                _ => put_text(buf, c.as_string_view().value(row))?,
            }
        }
    }
    Ok(())
}

fn put_text(buf: &mut BytesMut, s: &str) -> Result<()> {
    let len = i32::try_from(s.len())
        .map_err(|_| FlightError::Param(format!("a {}-byte string is too long", s.len())))?;
    buf.put_i32(len);
    buf.put_slice(s.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::columns::{ColumnSet, ColumnSetExt};

    #[test]
    fn only_plain_identifiers_reach_sql() {
        assert!(copy_sql("nyc_taxi").is_ok());
        for bad in ["", "1t", "t; DROP TABLE x", "a.b", "t\"", &"x".repeat(64)] {
            assert!(copy_sql(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_row_is_its_field_count_then_length_prefixed_values() {
        let batch = ColumnSet::Taxi.batch(1, 0, 1).unwrap();
        let mut buf = BytesMut::new();
        encode_batch(&batch, &mut buf).unwrap();
        assert_eq!(&buf[..2], &12i16.to_be_bytes());
        // vendor_id: 4 bytes, 1 or 2.
        assert_eq!(&buf[2..6], &4i32.to_be_bytes());
        let vendor = i32::from_be_bytes(buf[6..10].try_into().unwrap());
        assert!(vendor == 1 || vendor == 2);
        // pickup_at: 8 bytes, µs since 2000-01-01 (2015 is 15 years on).
        assert_eq!(&buf[10..14], &8i32.to_be_bytes());
        let us = i64::from_be_bytes(buf[14..22].try_into().unwrap());
        assert_eq!(us / 1_000_000 / 86_400 / 365, 15);
    }
}
