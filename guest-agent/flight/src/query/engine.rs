//! DataFusion as the query engine behind two protocols: one
//! `SessionContext` holding the taxi table (its Parquet file), served over
//! Flight SQL (`sqlserver::Source::DataFusion`) and over PostgreSQL's wire
//! protocol (`pgwire`), so a comparison of the two differs only in the
//! protocol, as in the paper (Dremio over ODBC and over Flight).

use std::path::Path;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::{DataFrame, ParquetReadOptions, SessionConfig, SessionContext};
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
pub async fn taxi_context(parquet: &Path, batch_rows: usize) -> Result<Arc<SessionContext>> {
    let config = SessionConfig::new()
        .with_target_partitions(1)
        .with_batch_size(batch_rows.max(1))
        .with_information_schema(true);
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
/// is read-only, as its SqlInfo says). Bad SQL is the client's:
/// InvalidArgument. Statements with parameters are refused: bound
/// parameters are served by the PostgreSQL source only.
pub async fn plan(ctx: &SessionContext, sql: &str) -> std::result::Result<DataFrame, Status> {
    let read_only = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let df = ctx
        .sql_with_options(sql, read_only)
        .await
        .map_err(|e| Status::invalid_argument(format!("DataFusion: {e}")))?;
    let params = df
        .logical_plan()
        .get_parameter_types()
        .map_err(|e| Status::invalid_argument(format!("DataFusion: {e}")))?;
    if !params.is_empty() {
        return Err(Status::unimplemented(
            "statements with parameters are served by the PostgreSQL source; the DataFusion source takes none",
        ));
    }
    Ok(df)
}

/// The result schema of `sql`.
pub async fn schema(ctx: &SessionContext, sql: &str) -> std::result::Result<SchemaRef, Status> {
    let df = plan(ctx, sql).await?;
    Ok(Arc::new(df.schema().as_arrow().clone()))
}

/// Schemas a client lists: not the engine's own.
pub fn user_schema(name: &str) -> bool {
    !matches!(name, "information_schema" | "pg_catalog")
}
