//! A Flight SQL server with three sources, so protocol, engine and source
//! effects can be told apart: `Postgres` runs the statement in PostgreSQL
//! and turns the rows into Arrow batches; `DataFusion` runs it in
//! DataFusion over the table's Parquet file (the engine the pgwire server
//! shares); `Parquet` answers `SELECT * FROM nyc_taxi [LIMIT n]` from the
//! Parquet file with no SQL engine in between.
//!
//! What a client nobody here wrote needs (tested with the ADBC Flight SQL
//! driver): Handshake (no authentication: any handshake is answered),
//! GetSqlInfo, statements, prepared statements with one bound parameter
//! row (`$1` markers, typed by PostgreSQL or by DataFusion's plan), GetCatalogs/GetDbSchemas/GetTables/
//! GetTableTypes, results cut into messages under gRPC's 4 MiB default, and
//! errors as gRPC statuses (bad SQL: InvalidArgument; an unknown handle:
//! NotFound; what is not offered: Unimplemented).

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError as AfError;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery,
    CommandStatementIngest, CommandStatementQuery, DoPutPreparedStatementResult, ProstMessageExt,
    SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse,
    IpcMessage, SchemaAsIpc, Ticket,
};
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tokio_postgres::types::Type;
use tonic::{Request, Response, Status, Streaming};

use super::libpq::pg_err;
use super::pgarrow;
pub use super::pgarrow::arrow_type;
use super::sqlauth::Auth;
use super::sqlmeta;
use super::sqlparams::{ParamTypes, Params, Prepared, Store};
use super::taxi::TABLE;
use crate::error::{FlightError, Result};
use crate::server::{RunningServer, ServerConfig, start_service};

use pgarrow::BatchStream;
pub type DoGetStream =
    <SqlService as arrow_flight::flight_service_server::FlightService>::DoGetStream;

/// Result messages stay under this, well inside gRPC's 4 MiB default
/// receive limit (which ADBC and most clients keep).
const MAX_MESSAGE_DATA: usize = 2 << 20;

pub enum Source {
    Postgres(Pg),
    Parquet(PathBuf),
    /// DataFusion over the table's Parquet file (the context the pgwire
    /// server shares).
    DataFusion(Arc<datafusion::prelude::SessionContext>),
}

/// How the PostgreSQL source reads a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgRead {
    /// `COPY (query) TO STDOUT (FORMAT binary)`, decoded into Arrow
    /// (statements with bound parameters read rows: COPY takes none).
    BinaryCopy,
    /// The extended query protocol's binary rows (what a libpq-style
    /// client reads), so COPY's effect can be told apart.
    Rows,
}

pub struct Pg {
    pub client: Arc<tokio_postgres::Client>,
    pub read: PgRead,
}

/// The PostgreSQL types of `sql`'s result columns.
async fn pg_types(
    client: &tokio_postgres::Client,
    sql: &str,
) -> std::result::Result<Vec<Type>, Status> {
    let stmt = client
        .prepare(sql)
        .await
        .map_err(|e| Status::invalid_argument(pg_err("prepare", e).to_string()))?;
    Ok(stmt.columns().iter().map(|c| c.type_().clone()).collect())
}

pub struct SqlService {
    source: Source,
    batch_rows: usize,
    prepared: Store,
    /// Checked on every call by the interceptor [`start`] installs.
    auth: Option<Auth>,
}

fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

/// `LIMIT n` of the one query shape the Parquet source answers.
pub fn parse_parquet_query(sql: &str) -> std::result::Result<Option<usize>, Status> {
    let words: Vec<String> = sql
        .trim()
        .trim_end_matches(';')
        .split_whitespace()
        .map(str::to_lowercase)
        .collect();
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["select", "*", "from", t] if *t == TABLE => Ok(None),
        ["select", "*", "from", t, "limit", n] if *t == TABLE => n
            .parse()
            .map(Some)
            .map_err(|_| Status::invalid_argument(format!("bad LIMIT {n:?}"))),
        _ => Err(Status::invalid_argument(format!(
            "the Parquet source answers only SELECT * FROM {TABLE} [LIMIT n], not {sql:?}"
        ))),
    }
}

impl SqlService {
    pub fn new(source: Source, batch_rows: usize) -> Self {
        SqlService {
            source,
            batch_rows: batch_rows.max(1),
            prepared: Store::default(),
            auth: None,
        }
    }

    async fn schema_of(&self, sql: &str) -> std::result::Result<SchemaRef, Status> {
        Ok(self.describe(sql).await?.0)
    }

    /// The result's schema and the parameters' types, as the source's
    /// engine gives them (none for the Parquet source). Bad SQL is the
    /// client's: InvalidArgument.
    async fn describe(&self, sql: &str) -> std::result::Result<(SchemaRef, ParamTypes), Status> {
        match &self.source {
            Source::Postgres(pg) => {
                let stmt = pg
                    .client
                    .prepare(sql)
                    .await
                    .map_err(|e| Status::invalid_argument(pg_err("prepare", e).to_string()))?;
                let fields = stmt
                    .columns()
                    .iter()
                    .map(|c| Ok(Field::new(c.name(), arrow_type(c.type_())?, true)))
                    .collect::<std::result::Result<Vec<_>, Status>>()?;
                let types = ParamTypes::Postgres(stmt.params().to_vec());
                Ok((Arc::new(Schema::new(fields)), types))
            }
            Source::Parquet(path) => {
                parse_parquet_query(sql)?;
                let file = std::fs::File::open(path).map_err(internal)?;
                let b =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                        .map_err(internal)?;
                Ok((b.schema().clone(), ParamTypes::Arrow(Vec::new())))
            }
            Source::DataFusion(ctx) => {
                let (schema, types) = super::engine::describe(ctx, sql).await?;
                Ok((schema, ParamTypes::Arrow(types)))
            }
        }
    }

    async fn batches(
        &self,
        sql: String,
        params: Params,
    ) -> std::result::Result<(SchemaRef, BatchStream), Status> {
        let batch_rows = self.batch_rows;
        // DataFusion's plan carries its schema: plan once, not twice.
        if let Source::DataFusion(ctx) = &self.source {
            let values = match params {
                Params::Arrow(v) => v,
                Params::Postgres(_) => {
                    return Err(Status::internal("PostgreSQL values bound for DataFusion"));
                }
            };
            let df = super::engine::plan_bound(ctx, &sql, values).await?;
            let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
            let stream = df.execute_stream().await.map_err(internal)?;
            let stream = stream.map(|b| b.map_err(|e| AfError::ExternalError(Box::new(e))));
            return Ok((schema, Box::pin(stream)));
        }
        let schema = self.schema_of(&sql).await?;
        let params = match params {
            Params::Postgres(v) => v,
            Params::Arrow(v) if v.is_empty() => Vec::new(),
            Params::Arrow(_) => return Err(Status::internal("Arrow values bound for PostgreSQL")),
        };
        match &self.source {
            Source::Postgres(pg) => {
                // COPY takes no parameters: a bound statement reads rows.
                let stream = if pg.read == PgRead::BinaryCopy
                    && params.is_empty()
                    && pgarrow::copyable(&sql)
                {
                    let types = pg_types(&pg.client, &sql).await?;
                    let rows = pgarrow::copy_out(&pg.client, &sql, &types)
                        .await
                        .map_err(|e| Status::internal(e.to_string()))?;
                    pgarrow::to_batches(rows, schema.clone(), batch_rows)
                } else {
                    let rows = pg
                        .client
                        .query_raw(sql.as_str(), params)
                        .await
                        .map_err(|e| Status::internal(pg_err("query", e).to_string()))?;
                    pgarrow::to_batches(rows, schema.clone(), batch_rows)
                };
                Ok((schema, stream))
            }
            Source::Parquet(path) => {
                let limit = parse_parquet_query(&sql)?;
                let file = std::fs::File::open(path).map_err(internal)?;
                let mut b =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                        .map_err(internal)?
                        .with_batch_size(batch_rows);
                if let Some(n) = limit {
                    b = b.with_limit(n);
                }
                let reader = b.build().map_err(internal)?;
                // Decode on a blocking thread, a few batches ahead.
                let (tx, rx) = tokio::sync::mpsc::channel(4);
                tokio::task::spawn_blocking(move || {
                    for batch in reader {
                        if tx.blocking_send(batch.map_err(AfError::Arrow)).is_err() {
                            break;
                        }
                    }
                });
                let stream = futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|b| (b, rx))
                });
                Ok((schema, Box::pin(stream)))
            }
            Source::DataFusion(_) => Err(Status::internal("DataFusion is answered above")),
        }
    }
}

/// The FlightData of `batches`, cut into messages of at most
/// [`MAX_MESSAGE_DATA`] bytes.
fn encode(schema: SchemaRef, batches: BatchStream) -> DoGetStream {
    Box::pin(
        FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .with_max_flight_data_size(MAX_MESSAGE_DATA)
            .build(batches)
            .map_err(Status::from),
    )
}

fn ipc_schema(schema: &Schema) -> std::result::Result<bytes::Bytes, Status> {
    let IpcMessage(bytes) =
        SchemaAsIpc::new(schema, &arrow::ipc::writer::IpcWriteOptions::default())
            .try_into()
            .map_err(internal)?;
    Ok(bytes)
}

#[tonic::async_trait]
impl FlightSqlService for SqlService {
    type FlightService = SqlService;

    /// With credentials configured, the interceptor has checked them and
    /// the answer is the bearer token (payload and `authorization`
    /// header); without, every handshake is answered empty.
    async fn do_handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<
        Response<
            Pin<Box<dyn Stream<Item = std::result::Result<HandshakeResponse, Status>> + Send>>,
        >,
        Status,
    > {
        let reply = HandshakeResponse {
            protocol_version: 0,
            payload: self
                .auth
                .as_ref()
                .map(|a| bytes::Bytes::from(a.token().to_string()))
                .unwrap_or_default(),
        };
        let mut response: Response<Pin<Box<dyn Stream<Item = _> + Send>>> =
            Response::new(Box::pin(futures::stream::once(async { Ok(reply) })));
        if let Some(a) = &self.auth {
            let value = a.bearer().parse().map_err(internal)?;
            response.metadata_mut().insert("authorization", value);
        }
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let schema = self.schema_of(&query.query).await?;
        let ticket = TicketStatementQuery {
            statement_handle: query.query.into_bytes().into(),
        };
        let ticket = Ticket::new(ticket.as_any().encode_to_vec());
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(internal)?
            .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
            .with_descriptor(request.into_inner());
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        _request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        let sql = String::from_utf8(ticket.statement_handle.to_vec())
            .map_err(|_| Status::invalid_argument("statement handle is not UTF-8"))?;
        let (schema, batches) = self.batches(sql, Params::none()).await?;
        Ok(Response::new(encode(schema, batches)))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        _request: Request<Action>,
    ) -> std::result::Result<ActionCreatePreparedStatementResult, Status> {
        let (schema, param_types) = self.describe(&query.query).await?;
        let arrow_types = match &param_types {
            ParamTypes::Postgres(t) => t
                .iter()
                .map(arrow_type)
                .collect::<std::result::Result<Vec<_>, Status>>()?,
            ParamTypes::Arrow(t) => t.clone(),
        };
        let params = Schema::new(
            arrow_types
                .into_iter()
                .enumerate()
                .map(|(i, t)| Field::new(format!("${}", i + 1), t, true))
                .collect::<Vec<_>>(),
        );
        let handle = self.prepared.open(Prepared {
            sql: query.query,
            param_types,
            bound: None,
        });
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle,
            dataset_schema: ipc_schema(&schema)?,
            parameter_schema: ipc_schema(&params)?,
        })
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> std::result::Result<DoPutPreparedStatementResult, Status> {
        let stream = request.into_inner().map_err(AfError::from);
        let batches: Vec<RecordBatch> = FlightRecordBatchStream::new_from_flight_data(stream)
            .try_collect()
            .await
            .map_err(|e| Status::invalid_argument(format!("parameter batches: {e}")))?;
        let row = match batches.first() {
            Some(first) => arrow::compute::concat_batches(&first.schema(), &batches)
                .map_err(|e| Status::invalid_argument(format!("parameter batches: {e}")))?,
            None => return Err(Status::invalid_argument("no parameter row was sent")),
        };
        self.prepared.bind(&query.prepared_statement_handle, row)?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(query.prepared_statement_handle),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let (sql, _) = self
            .prepared
            .sql_and_params(&cmd.prepared_statement_handle)?;
        let schema = self.schema_of(&sql).await?;
        sqlmeta::info_response(&cmd, &schema, request)
    }

    async fn do_get_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        _request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        let (sql, params) = self
            .prepared
            .sql_and_params(&cmd.prepared_statement_handle)?;
        let (schema, batches) = self.batches(sql, params).await?;
        Ok(Response::new(encode(schema, batches)))
    }

    /// Bulk ingest into PostgreSQL: the batches go in with binary COPY,
    /// appended to an existing table (the only table options offered).
    async fn do_put_statement_ingest(
        &self,
        cmd: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> std::result::Result<i64, Status> {
        let Source::Postgres(pg) = &self.source else {
            return Err(Status::unimplemented(
                "bulk ingest is served over PostgreSQL only (this source is read-only)",
            ));
        };
        ingest_options(&cmd)?;
        let data = request
            .into_inner()
            .map_err(|s| AfError::Tonic(Box::new(s)));
        let batches = FlightRecordBatchStream::new_from_flight_data(data)
            .map_err(|e| FlightError::Other(format!("ingest stream: {e}")));
        let rows = super::pgcopy::copy_in(&pg.client, &cmd.table, batches)
            .await
            .map_err(|e| match e {
                FlightError::Param(m) => Status::invalid_argument(m),
                other => Status::internal(other.to_string()),
            })?;
        i64::try_from(rows).map_err(internal)
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> std::result::Result<(), Status> {
        self.prepared.close(&query.prepared_statement_handle)
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let data = sqlmeta::sql_info()?;
        let schema = query.clone().into_builder(&data).schema();
        sqlmeta::info_response(&query, &schema, request)
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        let data = sqlmeta::sql_info()?;
        let b = query.into_builder(&data);
        sqlmeta::one_batch(b.schema(), b.build())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        sqlmeta::info_response(&query, &schema, request)
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        let mut b = query.into_builder();
        for c in sqlmeta::catalogs(&self.source).await? {
            b.append(c);
        }
        sqlmeta::one_batch(b.schema(), b.build())
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        sqlmeta::info_response(&query, &schema, request)
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        _request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        let mut b = query.into_builder();
        for (catalog, schema) in sqlmeta::schemas(&self.source).await? {
            b.append(catalog, schema);
        }
        sqlmeta::one_batch(b.schema(), b.build())
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        sqlmeta::info_response(&query, &schema, request)
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        _request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        let with_columns = query.include_schema;
        let mut b = query.into_builder();
        let none = Schema::empty();
        for t in sqlmeta::tables(&self.source, with_columns).await? {
            let columns = t.columns.as_deref().unwrap_or(&none);
            b.append(&t.catalog, &t.schema, &t.name, &t.kind, columns)
                .map_err(internal)?;
        }
        sqlmeta::one_batch(b.schema(), b.build())
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        sqlmeta::info_response(&query, &schema, request)
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        let mut b = query.into_builder();
        for t in sqlmeta::TABLE_TYPES {
            b.append(t);
        }
        sqlmeta::one_batch(b.schema(), b.build())
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// Starts a Flight SQL server over `source`; with `auth`, every call must
/// carry its credentials or token.
pub async fn start(
    cfg: &ServerConfig,
    source: Source,
    batch_rows: usize,
    auth: Option<Auth>,
) -> Result<RunningServer> {
    let limit = cfg.settings.max_message_bytes;
    let mut service = SqlService::new(source, batch_rows);
    service.auth = auth.clone();
    let svc = FlightServiceServer::new(service)
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    let checked =
        tonic::service::interceptor::InterceptedService::new(svc, move |req: Request<()>| {
            match &auth {
                Some(a) => a.check(req.metadata()).map(|()| req),
                None => Ok(req),
            }
        });
    start_service(cfg, checked).await
}

/// Flight SQL client: connect, execute, DoGet every endpoint, checksum.
pub async fn fetch(
    addr: &str,
    sql: &str,
    settings: &crate::settings::TransportSettings,
) -> Result<super::taxi::Checksum> {
    let addr: crate::addr::Addr = addr.parse()?;
    let inner =
        crate::bench::client(&addr, None, settings, std::time::Duration::from_secs(10)).await?;
    let mut client = arrow_flight::sql::client::FlightSqlServiceClient::new_from_inner(inner);
    let rpc = |call: &'static str, e: AfError| FlightError::Rpc {
        call,
        addr: addr.to_string(),
        status: e.to_string(),
    };
    let info = client
        .execute(sql.to_string(), None)
        .await
        .map_err(|e| rpc("Flight SQL execute", e))?;
    use super::taxi::BatchChecksum;
    let mut c = super::taxi::Checksum::default();
    for ep in info.endpoint {
        let ticket = ep
            .ticket
            .ok_or_else(|| FlightError::Verify("endpoint without ticket".into()))?;
        let mut stream = client
            .do_get(ticket)
            .await
            .map_err(|e| rpc("Flight SQL DoGet", e))?;
        while let Some(b) = stream.next().await {
            c.add_batch(&b.map_err(|e| rpc("Flight SQL DoGet", e))?)?;
        }
    }
    Ok(c)
}

/// The table options a bulk ingest may ask for: append to an existing
/// table (ADBC's mode "append"). Creating, replacing or failing on an
/// existing table is not offered, and says so.
pub fn ingest_options(
    cmd: &arrow_flight::sql::CommandStatementIngest,
) -> std::result::Result<(), tonic::Status> {
    use arrow_flight::sql::{TableExistsOption, TableNotExistOption};
    if cmd.temporary || cmd.transaction_id.is_some() {
        return Err(tonic::Status::unimplemented(
            "bulk ingest: temporary tables and transactions are not offered",
        ));
    }
    if let Some(o) = &cmd.table_definition_options {
        let exists =
            TableExistsOption::try_from(o.if_exists).unwrap_or(TableExistsOption::Unspecified);
        let missing = TableNotExistOption::try_from(o.if_not_exist)
            .unwrap_or(TableNotExistOption::Unspecified);
        let append = matches!(
            exists,
            TableExistsOption::Append | TableExistsOption::Unspecified
        );
        let no_create = matches!(
            missing,
            TableNotExistOption::Fail | TableNotExistOption::Unspecified
        );
        if !(append && no_create) {
            return Err(tonic::Status::unimplemented(format!(
                "bulk ingest: only appending to an existing table is offered (asked: if_exists \
                 {}, if_not_exist {})",
                exists.as_str_name(),
                missing.as_str_name()
            )));
        }
    }
    Ok(())
}
