//! PostgreSQL results as Arrow batches: the column types this converts,
//! and a stream of rows (the extended query protocol's `Row`s, or binary
//! `COPY … TO STDOUT` rows) cut into batches of a chosen row count.

use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use arrow::array::{
    ArrayBuilder, ArrayRef, Float64Builder, Int16Builder, Int32Builder, Int64Builder, RecordBatch,
    StringBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use arrow_flight::error::FlightError as AfError;
use futures::{Stream, TryStreamExt};
use tokio_postgres::binary_copy::{BinaryCopyOutRow, BinaryCopyOutStream};
use tokio_postgres::types::{FromSql, Type};
use tonic::Status;

use super::libpq::{micros, pg_err};

pub type BatchStream =
    Pin<Box<dyn Stream<Item = std::result::Result<RecordBatch, AfError>> + Send>>;

/// Arrow type of a PostgreSQL column type this server can convert.
pub fn arrow_type(t: &Type) -> Result<DataType, Status> {
    Ok(match *t {
        Type::INT2 => DataType::Int16,
        Type::INT4 => DataType::Int32,
        Type::INT8 => DataType::Int64,
        Type::FLOAT8 => DataType::Float64,
        Type::TEXT | Type::VARCHAR => DataType::Utf8,
        Type::TIMESTAMP => DataType::Timestamp(TimeUnit::Microsecond, None),
        _ => {
            return Err(Status::unimplemented(format!(
                "column type {t} is not converted"
            )));
        }
    })
}

enum ColBuilder {
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    F64(Float64Builder),
    Text(StringBuilder),
    Ts(TimestampMicrosecondBuilder),
}

impl ColBuilder {
    fn new(t: &DataType, cap: usize) -> Self {
        match t {
            DataType::Int16 => ColBuilder::I16(Int16Builder::with_capacity(cap)),
            DataType::Int32 => ColBuilder::I32(Int32Builder::with_capacity(cap)),
            DataType::Int64 => ColBuilder::I64(Int64Builder::with_capacity(cap)),
            DataType::Float64 => ColBuilder::F64(Float64Builder::with_capacity(cap)),
            DataType::Timestamp(..) => {
                ColBuilder::Ts(TimestampMicrosecondBuilder::with_capacity(cap))
            }
            _ => ColBuilder::Text(StringBuilder::with_capacity(cap, cap * 8)),
        }
    }

    fn push<R: PgRow>(&mut self, row: &R, i: usize) -> Result<(), tokio_postgres::Error> {
        match self {
            ColBuilder::I16(b) => b.append_option(row.get_col::<Option<i16>>(i)?),
            ColBuilder::I32(b) => b.append_option(row.get_col::<Option<i32>>(i)?),
            ColBuilder::I64(b) => b.append_option(row.get_col::<Option<i64>>(i)?),
            ColBuilder::F64(b) => b.append_option(row.get_col::<Option<f64>>(i)?),
            ColBuilder::Text(b) => b.append_option(row.get_col::<Option<&str>>(i)?),
            ColBuilder::Ts(b) => b.append_option(row.get_col::<Option<SystemTime>>(i)?.map(micros)),
        }
        Ok(())
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            ColBuilder::I16(b) => Arc::new(b.finish()),
            ColBuilder::I32(b) => Arc::new(b.finish()),
            ColBuilder::I64(b) => Arc::new(b.finish()),
            ColBuilder::F64(b) => Arc::new(b.finish()),
            ColBuilder::Text(b) => Arc::new(b.finish()),
            ColBuilder::Ts(b) => Arc::new(b.finish()),
        }
    }

    fn len(&self) -> usize {
        match self {
            ColBuilder::I16(b) => b.len(),
            ColBuilder::I32(b) => b.len(),
            ColBuilder::I64(b) => b.len(),
            ColBuilder::F64(b) => b.len(),
            ColBuilder::Text(b) => b.len(),
            ColBuilder::Ts(b) => b.len(),
        }
    }
}

/// A result row of either kind.
pub trait PgRow {
    fn get_col<'a, T: FromSql<'a>>(&'a self, i: usize) -> Result<T, tokio_postgres::Error>;
}

impl PgRow for tokio_postgres::Row {
    fn get_col<'a, T: FromSql<'a>>(&'a self, i: usize) -> Result<T, tokio_postgres::Error> {
        self.try_get(i)
    }
}

impl PgRow for BinaryCopyOutRow {
    fn get_col<'a, T: FromSql<'a>>(&'a self, i: usize) -> Result<T, tokio_postgres::Error> {
        self.try_get(i)
    }
}

/// Whether `sql` can be wrapped in `COPY (…) TO STDOUT`: a query.
pub fn copyable(sql: &str) -> bool {
    let first = sql.split_whitespace().next().unwrap_or_default();
    ["select", "with", "values", "table"]
        .iter()
        .any(|k| first.eq_ignore_ascii_case(k))
}

/// `COPY (sql) TO STDOUT (FORMAT binary)`, decoded as `types`.
pub async fn copy_out(
    client: &tokio_postgres::Client,
    sql: &str,
    types: &[Type],
) -> crate::error::Result<BinaryCopyOutStream> {
    let body = sql.trim().trim_end_matches(';');
    let stream = client
        .copy_out(&format!("COPY ({body}) TO STDOUT (FORMAT binary)"))
        .await
        .map_err(|e| pg_err("COPY TO STDOUT", e))?;
    Ok(BinaryCopyOutStream::new(stream, types))
}

/// Cuts `rows` into batches of `batch_rows` rows of `schema`.
pub fn to_batches<R, S>(rows: S, schema: SchemaRef, batch_rows: usize) -> BatchStream
where
    R: PgRow + Send + 'static,
    S: Stream<Item = Result<R, tokio_postgres::Error>> + Send + 'static,
{
    let types: Vec<DataType> = schema
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    let stream = futures::stream::unfold((Box::pin(rows), false), move |(mut rows, done)| {
        let types = types.clone();
        let s = schema.clone();
        async move {
            if done {
                return None;
            }
            let mut cols: Vec<ColBuilder> = types
                .iter()
                .map(|t| ColBuilder::new(t, batch_rows))
                .collect();
            let mut ended = false;
            while cols.first().is_none_or(|c| c.len() < batch_rows) {
                match rows.try_next().await {
                    Ok(Some(row)) => {
                        for (i, c) in cols.iter_mut().enumerate() {
                            if let Err(e) = c.push(&row, i) {
                                let e = AfError::ExternalError(Box::new(pg_err("convert", e)));
                                return Some((Err(e), (rows, true)));
                            }
                        }
                    }
                    Ok(None) => {
                        ended = true;
                        break;
                    }
                    Err(e) => {
                        let e = AfError::ExternalError(Box::new(pg_err("fetch", e)));
                        return Some((Err(e), (rows, true)));
                    }
                }
            }
            if ended && cols.first().is_none_or(|c| c.len() == 0) {
                return None;
            }
            let arrays = cols.iter_mut().map(ColBuilder::finish).collect();
            let b = RecordBatch::try_new(s, arrays).map_err(AfError::Arrow);
            Some((b, (rows, ended)))
        }
    });
    Box::pin(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_queries_go_through_copy() {
        assert!(copyable("SELECT * FROM t"));
        assert!(copyable("  with x as (select 1) select * from x"));
        assert!(!copyable("SHOW server_version"));
        assert!(!copyable(""));
    }
}
