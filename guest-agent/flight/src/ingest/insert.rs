//! Arrow batches into a PostgreSQL table by batched `INSERT`: one prepared
//! multi-row `INSERT … VALUES ($1, …), (…)` per chunk of rows, with binary
//! parameters, all in one transaction (what a careful row-protocol client
//! does; one statement per row would be slower still).

use std::error::Error;
use std::time::{Duration, SystemTime};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType};
use bytes::BytesMut;
use tokio_postgres::Client;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::error::{FlightError, Result};
use crate::query::libpq::pg_err;
use crate::query::pgcopy::check_identifier;

/// PostgreSQL takes at most 65 535 parameters per statement.
const MAX_PARAMS: usize = 65_535;

/// One value of an Arrow column, sent as a binary parameter.
#[derive(Debug)]
enum Val<'a> {
    I32(i32),
    I64(i64),
    F64(f64),
    Time(SystemTime),
    Text(&'a str),
    Null,
}

impl ToSql for Val<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn Error + Sync + Send>> {
        match self {
            Val::I32(v) => v.to_sql(ty, out),
            Val::I64(v) => v.to_sql(ty, out),
            Val::F64(v) => v.to_sql(ty, out),
            Val::Time(v) => v.to_sql(ty, out),
            Val::Text(v) => v.to_sql(ty, out),
            Val::Null => Ok(IsNull::Yes),
        }
    }

    fn accepts(ty: &Type) -> bool {
        [
            Type::INT4,
            Type::INT8,
            Type::FLOAT8,
            Type::TIMESTAMP,
            Type::TEXT,
            Type::VARCHAR,
        ]
        .contains(ty)
    }

    to_sql_checked!();
}

fn value(c: &dyn Array, row: usize) -> Result<Val<'_>> {
    if c.is_null(row) {
        return Ok(Val::Null);
    }
    Ok(match c.data_type() {
        DataType::Int32 => Val::I32(c.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => Val::I64(c.as_primitive::<Int64Type>().value(row)),
        DataType::Float64 => Val::F64(c.as_primitive::<Float64Type>().value(row)),
        DataType::Timestamp(..) => {
            let us = c.as_primitive::<TimestampMicrosecondType>().value(row);
            let at = Duration::from_micros(us.unsigned_abs());
            Val::Time(if us >= 0 {
                SystemTime::UNIX_EPOCH + at
            } else {
                SystemTime::UNIX_EPOCH - at
            })
        }
        DataType::Utf8 => Val::Text(c.as_string::<i32>().value(row)),
        DataType::Utf8View => Val::Text(c.as_string_view().value(row)),
        other => {
            return Err(FlightError::Param(format!(
                "INSERT: column type {other} is not supported"
            )));
        }
    })
}

/// `INSERT INTO table VALUES (…), …` for `rows` rows of `cols` columns.
fn insert_sql(table: &str, cols: usize, rows: usize) -> String {
    let mut sql = format!("INSERT INTO {table} VALUES ");
    for r in 0..rows {
        if r > 0 {
            sql.push(',');
        }
        sql.push('(');
        for c in 0..cols {
            if c > 0 {
                sql.push(',');
            }
            sql.push_str(&format!("${}", r * cols + c + 1));
        }
        sql.push(')');
    }
    sql
}

/// Inserts every row of `batches` into `table`, `rows_per_statement` rows
/// per INSERT (fewer when the parameters would pass PostgreSQL's limit),
/// in one transaction. Returns the rows inserted.
pub async fn insert(
    client: &mut Client,
    table: &str,
    batches: &[RecordBatch],
    rows_per_statement: usize,
) -> Result<u64> {
    check_identifier(table)?;
    let Some(first) = batches.first() else {
        return Ok(0);
    };
    let cols = first.num_columns().max(1);
    let per = rows_per_statement.clamp(1, MAX_PARAMS / cols);
    let tx = client.transaction().await.map_err(|e| pg_err("BEGIN", e))?;
    let full = tx
        .prepare(&insert_sql(table, cols, per))
        .await
        .map_err(|e| pg_err("prepare INSERT", e))?;
    let mut inserted = 0u64;
    let mut params: Vec<Val<'_>> = Vec::with_capacity(per * cols);
    // Rows are gathered across batch boundaries into full statements.
    let flush = async |params: &mut Vec<Val<'_>>| -> Result<u64> {
        let rows = params.len() / cols;
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        let n = if rows == per {
            tx.execute(&full, &refs).await
        } else {
            tx.execute(insert_sql(table, cols, rows).as_str(), &refs)
                .await
        }
        .map_err(|e| pg_err("INSERT", e))?;
        params.clear();
        Ok(n)
    };
    for batch in batches {
        for row in 0..batch.num_rows() {
            for c in batch.columns() {
                params.push(value(c.as_ref(), row)?);
            }
            if params.len() == per * cols {
                inserted += flush(&mut params).await?;
            }
        }
    }
    if !params.is_empty() {
        inserted += flush(&mut params).await?;
    }
    tx.commit().await.map_err(|e| pg_err("COMMIT", e))?;
    Ok(inserted)
}

#[cfg(test)]
mod tests {
    #[test]
    fn statements_number_their_parameters_row_by_row() {
        assert_eq!(
            super::insert_sql("t", 2, 2),
            "INSERT INTO t VALUES ($1,$2),($3,$4)"
        );
    }
}
