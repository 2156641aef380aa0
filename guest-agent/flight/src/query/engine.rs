//! DataFusion as the query engine behind two protocols: one
//! `SessionContext` holding the taxi table (its Parquet file), served over
//! Flight SQL (`sqlserver::Source::DataFusion`) and over PostgreSQL's wire
//! protocol (`pgwire`), so a comparison of the two differs only in the
//! protocol, as in the paper (Dremio over ODBC and over Flight).

use std::path::Path;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::{DataFrame, ParquetReadOptions, SessionConfig, SessionContext};
use datafusion::scalar::ScalarValue;
use tonic::Status;

use super::taxi::TABLE;
use crate::error::{FlightError, Result};

/// The catalog and schema DataFusion lists its tables under.
pub const CATALOG: &str = "datafusion";
pub const SCHEMA: &str = "public";

/// A context over the taxi table's Parquet file. One partition, so a scan
/// returns the file's rows in order and `LIMIT N` returns the first N rows
/// (the clients' checksums check the order); `batch_rows` rows per batch.
/// PostgreSQL clients' session statements and psqlODBC's connect-time
/// lookup are answered by the pgwire front (`pgwire.rs`), not here.
pub async fn table_context(parquet: &Path, batch_rows: usize) -> Result<Arc<SessionContext>> {
    let mut config = SessionConfig::new()
        .with_target_partitions(1)
        .with_batch_size(batch_rows.max(1))
        .with_information_schema(true);
    // Strings as Utf8, not views: arrow-rs's IPC writer sends a sliced
    // view array with all of its data buffers (apache/arrow-rs#5525), and
    // the Flight encoder slices every batch into messages, so each message
    // of a long-string batch carried the whole batch's strings (9 s instead
    // of 0.4 s for 100 000 rows of two long string columns).
    config
        .options_mut()
        .execution
        .parquet
        .schema_force_view_types = false;
    let ctx = SessionContext::new_with_config(config);
    let path = parquet
        .to_str()
        .ok_or_else(|| FlightError::Param(format!("{} is not UTF-8", parquet.display())))?;
    ctx.register_parquet(TABLE, path, ParquetReadOptions::default())
        .await
        .map_err(|e| FlightError::Other(format!("DataFusion: register {path}: {e}")))?;
    Ok(Arc::new(ctx))
}

/// Plans `sql` as a query: no DDL, DML or session statements (the server
/// is read-only, as its SqlInfo says), with its parameters' types in
/// order ($1, $2, …; `Null` where the plan cannot tell). Bad SQL is the
/// client's: InvalidArgument.
pub async fn prepare(
    ctx: &SessionContext,
    sql: &str,
) -> std::result::Result<(DataFrame, Vec<DataType>), Status> {
    let read_only = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let bad = |e: datafusion::error::DataFusionError| {
        Status::invalid_argument(format!("DataFusion: {e}"))
    };
    let df = ctx.sql_with_options(sql, read_only).await.map_err(bad)?;
    let named = df.logical_plan().get_parameter_types().map_err(bad)?;
    let mut types = vec![DataType::Null; named.len()];
    for (name, t) in named {
        let slot = name
            .strip_prefix('$')
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| types.get_mut(i));
        let Some(slot) = slot else {
            return Err(Status::invalid_argument(format!(
                "DataFusion: parameter {name}: number them $1, $2, … without gaps"
            )));
        };
        *slot = t.unwrap_or(DataType::Null);
    }
    Ok((df, types))
}

/// Plans `sql` with `values` bound to its parameters, one per parameter.
pub async fn plan_bound(
    ctx: &SessionContext,
    sql: &str,
    values: Vec<ScalarValue>,
) -> std::result::Result<DataFrame, Status> {
    let (df, types) = prepare(ctx, sql).await?;
    if types.len() != values.len() {
        return Err(Status::invalid_argument(format!(
            "the statement has {} parameter(s); {} were bound",
            types.len(),
            values.len()
        )));
    }
    if values.is_empty() {
        return Ok(df);
    }
    df.with_param_values(values)
        .map_err(|e| Status::invalid_argument(format!("DataFusion: {e}")))
}

/// Plans `sql`, which must take no parameters (pgwire's simple queries).
pub async fn plan(ctx: &SessionContext, sql: &str) -> std::result::Result<DataFrame, Status> {
    plan_bound(ctx, sql, Vec::new()).await
}

/// The result schema of `sql` and its parameters' types.
pub async fn describe(
    ctx: &SessionContext,
    sql: &str,
) -> std::result::Result<(SchemaRef, Vec<DataType>), Status> {
    let (df, types) = prepare(ctx, sql).await?;
    Ok((Arc::new(df.schema().as_arrow().clone()), types))
}

/// Schemas a client lists: not the engine's own.
pub fn user_schema(name: &str) -> bool {
    !matches!(name, "information_schema" | "pg_catalog")
}
