//! What the Flight SQL server says about itself and its data: SqlInfo,
//! catalogs, schemas, tables and table types, read from the source
//! (PostgreSQL's information_schema, or the one Parquet table). The
//! `GetDbSchemas`/`GetTables` builders apply the client's filters.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{ProstMessageExt, SqlInfo};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use futures::TryStreamExt;
use prost::Message;
use tonic::{Request, Response, Status};

use super::libpq::pg_err;
use super::sqlserver::{DoGetStream, Pg, Source, arrow_type};
use super::taxi::TABLE;

/// The catalog and schema the Parquet source's one table is listed under.
pub const PARQUET_CATALOG: &str = "parquet";
pub const PARQUET_SCHEMA: &str = "public";

/// SqlInfo: who we are and what we do not support (no transactions, no
/// updates, no Substrait, no cancel).
pub fn sql_info() -> Result<SqlInfoData, Status> {
    let mut b = SqlInfoDataBuilder::new();
    b.append(SqlInfo::FlightSqlServerName, "testbed-flight");
    b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    // The Arrow columnar format version (Schema.fbs).
    b.append(SqlInfo::FlightSqlServerArrowVersion, "1.3");
    b.append(SqlInfo::FlightSqlServerReadOnly, true);
    b.append(SqlInfo::FlightSqlServerSql, true);
    b.append(SqlInfo::FlightSqlServerSubstrait, false);
    b.append(SqlInfo::FlightSqlServerTransaction, 0i32);
    b.append(SqlInfo::FlightSqlServerCancel, false);
    b.append(SqlInfo::FlightSqlServerStatementTimeout, 0i32);
    b.append(SqlInfo::FlightSqlServerTransactionTimeout, 0i32);
    b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    b.build()
        .map_err(|e| Status::internal(format!("SqlInfo: {e}")))
}

/// A FlightInfo whose one endpoint's ticket is `command` itself (the
/// metadata commands and prepared statements carry everything DoGet needs).
pub fn info_response(
    command: &impl ProstMessageExt,
    schema: &Schema,
    request: Request<FlightDescriptor>,
) -> Result<Response<FlightInfo>, Status> {
    let ticket = Ticket::new(command.as_any().encode_to_vec());
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(e.to_string()))?
        .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
        .with_descriptor(request.into_inner());
    Ok(Response::new(info))
}

/// One batch as a DoGet response.
pub fn one_batch<E: std::fmt::Display>(
    schema: SchemaRef,
    batch: Result<RecordBatch, E>,
) -> Result<Response<DoGetStream>, Status> {
    let batch = batch.map_err(|e| Status::internal(e.to_string()))?;
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::once(async { Ok(batch) }))
        .map_err(Status::from);
    Ok(Response::new(Box::pin(stream)))
}

fn pg_status(what: &str, e: tokio_postgres::Error) -> Status {
    Status::internal(pg_err(what, e).to_string())
}

/// Schemas a client lists: not PostgreSQL's own.
const USER_SCHEMAS: &str =
    "schema_name NOT IN ('pg_catalog', 'information_schema') AND schema_name NOT LIKE 'pg\\_%'";

pub async fn catalogs(source: &Source) -> Result<Vec<String>, Status> {
    match source {
        Source::Postgres(Pg { client: c, .. }) => {
            let row = c
                .query_one("SELECT current_database()::text", &[])
                .await
                .map_err(|e| pg_status("list catalogs", e))?;
            Ok(vec![row.get(0)])
        }
        Source::Parquet(_) => Ok(vec![PARQUET_CATALOG.into()]),
        Source::DataFusion(ctx) => Ok(ctx.catalog_names()),
    }
}

pub async fn schemas(source: &Source) -> Result<Vec<(String, String)>, Status> {
    match source {
        Source::Postgres(Pg { client: c, .. }) => {
            let sql = format!(
                "SELECT catalog_name::text, schema_name::text FROM information_schema.schemata WHERE {USER_SCHEMAS} ORDER BY 1, 2"
            );
            let rows = c
                .query(&sql, &[])
                .await
                .map_err(|e| pg_status("list schemas", e))?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        }
        Source::Parquet(_) => Ok(vec![(PARQUET_CATALOG.into(), PARQUET_SCHEMA.into())]),
        Source::DataFusion(ctx) => Ok(df_schemas(ctx)),
    }
}

/// One listed table.
pub struct TableRow {
    pub catalog: String,
    pub schema: String,
    pub name: String,
    pub kind: String,
    /// Its columns as Arrow fields, when the client asked for them.
    pub columns: Option<SchemaRef>,
}

pub async fn tables(source: &Source, with_columns: bool) -> Result<Vec<TableRow>, Status> {
    match source {
        Source::Postgres(Pg { client: c, .. }) => {
            let sql = format!(
                "SELECT table_catalog::text, table_schema::text, table_name::text, table_type::text \
                 FROM information_schema.tables WHERE {} ORDER BY 1, 2, 3",
                USER_SCHEMAS.replace("schema_name", "table_schema")
            );
            let rows = c
                .query(&sql, &[])
                .await
                .map_err(|e| pg_status("list tables", e))?;
            let mut out = Vec::new();
            for r in rows {
                let (schema, name): (String, String) = (r.get(1), r.get(2));
                let columns = if with_columns {
                    Some(pg_columns(c, &schema, &name).await?)
                } else {
                    None
                };
                let kind: String = r.get(3);
                out.push(TableRow {
                    catalog: r.get(0),
                    schema,
                    name,
                    // SQL's "BASE TABLE" is Flight SQL's (and JDBC's) "TABLE".
                    kind: if kind == "BASE TABLE" {
                        "TABLE".into()
                    } else {
                        kind
                    },
                    columns,
                });
            }
            Ok(out)
        }
        Source::Parquet(path) => {
            let columns = if with_columns {
                let file =
                    std::fs::File::open(path).map_err(|e| Status::internal(e.to_string()))?;
                let b =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                        .map_err(|e| Status::internal(e.to_string()))?;
                Some(b.schema().clone())
            } else {
                None
            };
            Ok(vec![TableRow {
                catalog: PARQUET_CATALOG.into(),
                schema: PARQUET_SCHEMA.into(),
                name: TABLE.into(),
                kind: "TABLE".into(),
                columns,
            }])
        }
        Source::DataFusion(ctx) => {
            let mut out = Vec::new();
            for (catalog, schema) in df_schemas(ctx) {
                let Some(s) = ctx.catalog(&catalog).and_then(|c| c.schema(&schema)) else {
                    continue;
                };
                let mut names = s.table_names();
                names.sort();
                for name in names {
                    let columns = match with_columns {
                        true => s
                            .table(&name)
                            .await
                            .map_err(|e| Status::internal(e.to_string()))?
                            .map(|t| t.schema()),
                        false => None,
                    };
                    out.push(TableRow {
                        catalog: catalog.clone(),
                        schema: schema.clone(),
                        name,
                        kind: "TABLE".into(),
                        columns,
                    });
                }
            }
            Ok(out)
        }
    }
}

/// DataFusion's (catalog, schema) pairs a client lists, sorted.
fn df_schemas(ctx: &datafusion::prelude::SessionContext) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for catalog in ctx.catalog_names() {
        if let Some(c) = ctx.catalog(&catalog) {
            for schema in c.schema_names() {
                if super::engine::user_schema(&schema) {
                    out.push((catalog.clone(), schema));
                }
            }
        }
    }
    out.sort();
    out
}

/// A PostgreSQL table's columns as the server would return them.
async fn pg_columns(
    c: &tokio_postgres::Client,
    schema: &str,
    table: &str,
) -> Result<SchemaRef, Status> {
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let stmt = c
        .prepare(&format!("SELECT * FROM {}.{}", quote(schema), quote(table)))
        .await
        .map_err(|e| pg_status(&format!("columns of {schema}.{table}"), e))?;
    let fields = stmt
        .columns()
        .iter()
        .map(|col| Ok(Field::new(col.name(), arrow_type(col.type_())?, true)))
        .collect::<Result<Vec<_>, Status>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

pub const TABLE_TYPES: [&str; 2] = ["TABLE", "VIEW"];
