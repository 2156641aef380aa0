//! PostgreSQL's wire protocol in front of a DataFusion context, served by
//! the `pgwire` crate with our own query handlers: statements DataFusion
//! plans are answered from its record batches (encoded by `arrow-pg`), and
//! the session statements PostgreSQL clients send around them (`SET`,
//! `SHOW`, transaction control, psqlODBC's large-object type lookup) are
//! answered here, as a PostgreSQL server would answer them. SCRAM-SHA-256
//! password authentication as the PostgreSQL cluster uses, on a port of our
//! own choosing (port 0 picks a free one). Stopped with
//! [`PgwireServer::stop`] or on drop: the listener and every open
//! connection end.

use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use async_trait::async_trait;
use datafusion::prelude::{DataFrame, SessionContext};
use futures::{Sink, StreamExt, stream};
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::{ScramAuth, gen_salted_password};
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{DataRowEncoder, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireServerHandlers, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::DataRow;
use pgwire::types::format::FormatOptions;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

use crate::error::{FlightError, Result};

/// PostgreSQL's own count (`scram_iterations`' default).
const SCRAM_ITERATIONS: usize = 4096;

/// The one user and its salted password, computed once at start (as a
/// PostgreSQL cluster stores the verifier, not the password).
#[derive(Debug)]
struct OneUser {
    user: String,
    salt: Vec<u8>,
    salted: Vec<u8>,
}

#[async_trait]
impl AuthSource for OneUser {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        match login.user() {
            Some(u) if u == self.user => {
                Ok(Password::new(Some(self.salt.clone()), self.salted.clone()))
            }
            other => Err(PgWireError::InvalidPassword(
                other.unwrap_or("(none)").to_string(),
            )),
        }
    }
}

/// One statement as the handlers answer it.
#[derive(Clone)]
enum Statement {
    /// Planned by DataFusion at parse time (its schema answers Describe;
    /// Execute runs the same plan).
    Query(Box<DataFrame>),
    /// `SET name = value`: kept in the connection's metadata, where the
    /// row encoder reads `DateStyle`, `extra_float_digits` and the like.
    Set { name: String, value: String },
    /// `SHOW name`: one text column, one row.
    Show { name: String, value: String },
    /// Transaction control on a read-only engine: acknowledged.
    Ack(&'static str),
    /// A catalog lookup whose answer here is no rows (psqlODBC's lookup of
    /// the `lo` type: a cluster without the lo extension answers the same).
    NoRows(&'static [(&'static str, Type)]),
}

/// psqlODBC asks for the large-object type's oid at every connect.
const LO_TYPE_LOOKUP: &str = "select oid, typbasetype from pg_type where typname = 'lo'";
const LO_TYPE_COLUMNS: &[(&str, Type)] = &[("oid", Type::OID), ("typbasetype", Type::OID)];

/// The settings `SHOW` reports: what a PostgreSQL 15 cluster in UTF-8
/// reports for them. Others are unknown, as PostgreSQL says of a name it
/// does not have.
fn setting(name: &str) -> Option<&'static str> {
    Some(match name {
        "transaction_isolation" => "read committed",
        "max_identifier_length" => "63",
        "server_version" => "15.0",
        "server_encoding" | "client_encoding" => "UTF8",
        "standard_conforming_strings" => "on",
        "integer_datetimes" => "on",
        "datestyle" => "ISO, MDY",
        "timezone" => "UTC",
        "default_transaction_read_only" | "transaction_read_only" => "on",
        _ => return None,
    })
}

fn user_error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        message.into(),
    )))
}

/// `name` unquoted and lowercased, as PostgreSQL folds a setting's name.
fn setting_name(word: &str) -> String {
    word.trim_matches('"').to_ascii_lowercase()
}

/// A `SET` value without its quotes (`'ISO'`, `2`, `"a"`).
fn setting_value(text: &str) -> String {
    let t = text.trim();
    t.strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .or_else(|| t.strip_prefix('"').and_then(|v| v.strip_suffix('"')))
        .unwrap_or(t)
        .to_string()
}

/// What `sql` (one statement) is, without planning it.
fn session_statement(sql: &str) -> PgWireResult<Option<Statement>> {
    let words: Vec<&str> = sql.split_whitespace().collect();
    let Some(first) = words.first() else {
        return Ok(None);
    };
    let normalized = words.join(" ").to_ascii_lowercase();
    if normalized == LO_TYPE_LOOKUP {
        return Ok(Some(Statement::NoRows(LO_TYPE_COLUMNS)));
    }
    Ok(Some(match first.to_ascii_lowercase().as_str() {
        "set" => {
            // SET [SESSION | LOCAL] name {= | TO} value
            let rest = match words.get(1).map(|w| w.to_ascii_lowercase()) {
                Some(w) if w == "session" || w == "local" => &words[2..],
                _ => &words[1..],
            };
            let text = rest.join(" ");
            let (name, value) = text
                .split_once('=')
                .map(|(n, v)| (n.trim().to_string(), v.to_string()))
                .or_else(|| {
                    let mut it = text.splitn(3, ' ');
                    match (it.next(), it.next(), it.next()) {
                        (Some(n), Some(to), Some(v)) if to.eq_ignore_ascii_case("to") => {
                            Some((n.to_string(), v.to_string()))
                        }
                        _ => None,
                    }
                })
                .ok_or_else(|| user_error("42601", format!("syntax error in \"{sql}\"")))?;
            Statement::Set {
                name: setting_name(&name),
                value: setting_value(&value),
            }
        }
        "show" if words.len() == 2 => {
            let name = setting_name(words[1]);
            let value = setting(&name).ok_or_else(|| {
                user_error(
                    "42704",
                    format!("unrecognized configuration parameter \"{name}\""),
                )
            })?;
            Statement::Show {
                name,
                value: value.to_string(),
            }
        }
        "begin" | "start" => Statement::Ack("BEGIN"),
        "commit" | "end" => Statement::Ack("COMMIT"),
        "rollback" | "abort" => Statement::Ack("ROLLBACK"),
        _ => return Ok(None),
    }))
}

/// Splits a simple-query string at the semicolons outside quotes.
fn split_statements(query: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quote) = (0, None::<char>);
    for (i, c) in query.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ';') => {
                out.push(&query[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&query[start..]);
    out.into_iter().filter(|s| !s.trim().is_empty()).collect()
}

struct Queries {
    ctx: Arc<SessionContext>,
}

impl Queries {
    async fn parse(&self, sql: &str) -> PgWireResult<Option<Statement>> {
        if let Some(s) = session_statement(sql)? {
            return Ok(Some(s));
        }
        let df = super::engine::plan(&self.ctx, sql)
            .await
            .map_err(|status| user_error("42000", status.message()))?;
        Ok(Some(Statement::Query(Box::new(df))))
    }
}

fn text_fields(columns: &[(&str, Type)], format: &Format) -> Vec<FieldInfo> {
    columns
        .iter()
        .enumerate()
        .map(|(i, (name, ty))| {
            FieldInfo::new((*name).into(), None, None, ty.clone(), format.format_for(i))
        })
        .collect()
}

fn query_fields(
    schema: &SchemaRef,
    format: &Format,
    options: Option<Arc<FormatOptions>>,
) -> PgWireResult<Vec<FieldInfo>> {
    arrow_schema_to_pg_fields(schema, format, options)
}

fn result_fields(statement: &Statement, format: &Format) -> PgWireResult<Vec<FieldInfo>> {
    match statement {
        Statement::Query(df) => {
            query_fields(&Arc::new(df.schema().as_arrow().clone()), format, None)
        }
        Statement::Show { name, .. } => Ok(vec![FieldInfo::new(
            name.clone(),
            None,
            None,
            Type::TEXT,
            format.format_for(0),
        )]),
        Statement::NoRows(columns) => Ok(text_fields(columns, format)),
        Statement::Set { .. } | Statement::Ack(_) => Ok(vec![]),
    }
}

/// Answers `statement` with its results in `format`, the connection's
/// settings applied to the text encoding.
async fn answer<C>(client: &mut C, statement: &Statement, format: &Format) -> PgWireResult<Response>
where
    C: ClientInfo + Send,
{
    match statement {
        Statement::Query(df) => {
            let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
            let schema = Arc::new(df.schema().as_arrow().clone());
            let fields = Arc::new(query_fields(&schema, format, Some(options))?);
            let batches = df
                .as_ref()
                .clone()
                .execute_stream()
                .await
                .map_err(|e| user_error("XX000", format!("DataFusion: {e}")))?;
            let encode = fields.clone();
            let rows = batches
                .map(move |batch| {
                    let rows: Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send + Sync> =
                        match batch {
                            Ok(b) => encode_recordbatch(encode.clone(), b),
                            Err(e) => Box::new(std::iter::once(Err(user_error(
                                "XX000",
                                format!("DataFusion: {e}"),
                            )))),
                        };
                    stream::iter(rows)
                })
                .flatten();
            Ok(Response::Query(QueryResponse::new(fields, rows)))
        }
        Statement::Set { name, value } => {
            client.metadata_mut().insert(name.clone(), value.clone());
            Ok(Response::Execution(Tag::new("SET")))
        }
        Statement::Show { value, .. } => {
            let fields = Arc::new(result_fields(statement, format)?);
            let mut row = DataRowEncoder::new(fields.clone());
            row.encode_field(value)?;
            let rows = stream::iter(vec![Ok(row.take_row())]);
            Ok(Response::Query(QueryResponse::new(fields, rows)))
        }
        Statement::Ack(tag) => Ok(Response::Execution(Tag::new(tag))),
        Statement::NoRows(_) => {
            let fields = Arc::new(result_fields(statement, format)?);
            Ok(Response::Query(QueryResponse::new(
                fields,
                stream::empty::<PgWireResult<DataRow>>(),
            )))
        }
    }
}

#[async_trait]
impl SimpleQueryHandler for Queries {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut responses = Vec::new();
        for sql in split_statements(query) {
            if let Some(statement) = self.parse(sql).await? {
                responses.push(answer(client, &statement, &Format::UnifiedText).await?);
            }
        }
        if responses.is_empty() {
            responses.push(Response::EmptyQuery);
        }
        Ok(responses)
    }
}

#[async_trait]
impl QueryParser for Queries {
    type Statement = Statement;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        self.parse(sql).await
    }

    /// Over pgwire the DataFusion source takes no parameters
    /// (`engine::plan` refuses them; Flight SQL's prepared statements bind
    /// them), nor do the session statements.
    fn get_parameter_types(&self, _statement: &Statement) -> PgWireResult<Vec<Type>> {
        Ok(vec![])
    }

    fn get_result_schema(
        &self,
        statement: &Statement,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        result_fields(statement, format.unwrap_or(&Format::UnifiedText))
    }
}

struct Extended {
    queries: Arc<Queries>,
}

#[async_trait]
impl ExtendedQueryHandler for Extended {
    type Statement = Statement;
    type QueryParser = Queries;

    fn query_parser(&self) -> Arc<Queries> {
        self.queries.clone()
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !portal.parameters.is_empty() {
            return Err(user_error(
                "0A000",
                "over PostgreSQL's protocol the DataFusion source takes no parameters (Flight SQL's prepared statements bind them)",
            ));
        }
        answer(
            client,
            &portal.statement.statement,
            &portal.result_column_format,
        )
        .await
    }
}

struct Handlers {
    simple: Arc<Queries>,
    extended: Arc<Extended>,
    users: Arc<OneUser>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.simple.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.extended.clone()
    }

    /// A fresh handler per connection: it holds that connection's SASL
    /// exchange.
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        let mut scram = ScramAuth::new(self.users.clone());
        scram.set_iterations(SCRAM_ITERATIONS);
        Arc::new(
            SASLAuthStartupHandler::new(Arc::new(DefaultServerParameterProvider::default()))
                .with_scram(scram),
        )
    }
}

pub struct PgwireServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl PgwireServer {
    /// Stops accepting, ends every connection and waits.
    pub async fn stop(mut self) -> Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task)
            .await
            .map_err(|e| FlightError::Other(format!("pgwire server task: {e}")))
    }

    /// A connection string for tokio-postgres.
    pub fn conn_string(&self, user: &str, password: &str) -> String {
        format!(
            "host={} port={} user={user} dbname={} password={password}",
            self.addr.ip(),
            self.addr.port(),
            super::engine::CATALOG
        )
    }
}

impl Drop for PgwireServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `ctx` on `addr` to `user` with `password`.
pub async fn start(
    ctx: Arc<SessionContext>,
    addr: SocketAddr,
    user: &str,
    password: &str,
) -> Result<PgwireServer> {
    let salt = super::pg::random_password()?.into_bytes();
    let users = Arc::new(OneUser {
        user: user.to_string(),
        salted: gen_salted_password(password, &salt, SCRAM_ITERATIONS),
        salt,
    });
    let queries = Arc::new(Queries { ctx });
    let handlers = Arc::new(Handlers {
        simple: queries.clone(),
        extended: Arc::new(Extended { queries }),
        users,
    });
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| FlightError::io(format!("pgwire: listen on {addr}"), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| FlightError::io("pgwire: local address", e))?;
    let (tx, mut stop) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        // Dropped at the end: every connection still open is aborted.
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                _ = &mut stop => break,
                accepted = listener.accept() => match accepted {
                    Ok((socket, _)) => {
                        let h = handlers.clone();
                        connections.spawn(async move {
                            let _ = pgwire::tokio::process_socket(socket, None, h).await;
                        });
                    }
                    // A failed accept (out of descriptors) ends nothing
                    // else; wait a little rather than spin.
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
                },
                // Reap finished connections so the set does not grow.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    });
    Ok(PgwireServer {
        addr,
        stop: Some(tx),
        task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simple_query_string_splits_at_semicolons_outside_quotes() {
        assert_eq!(
            split_statements(
                "SET DateStyle = 'ISO';SET extra_float_digits = 2;show transaction_isolation"
            ),
            vec![
                "SET DateStyle = 'ISO'",
                "SET extra_float_digits = 2",
                "show transaction_isolation"
            ]
        );
        assert_eq!(split_statements("select ';' ; ;"), vec!["select ';' "]);
        assert!(split_statements(" ; ").is_empty());
    }

    #[test]
    fn session_statements_are_answered_as_postgresql_answers_them() {
        let set = |sql| match session_statement(sql) {
            Ok(Some(Statement::Set { name, value })) => (name, value),
            _ => panic!("{sql}: not a SET"),
        };
        assert_eq!(
            set("SET DateStyle = 'ISO'"),
            ("datestyle".into(), "ISO".into())
        );
        assert_eq!(
            set("set extra_float_digits to 2"),
            ("extra_float_digits".into(), "2".into())
        );
        assert_eq!(
            set("SET SESSION search_path = public"),
            ("search_path".into(), "public".into())
        );
        match session_statement("show transaction_isolation") {
            Ok(Some(Statement::Show { value, .. })) => assert_eq!(value, "read committed"),
            _ => panic!("SHOW transaction_isolation"),
        }
        let err = session_statement("SHOW no_such_thing")
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("no_such_thing")));
        assert!(matches!(
            session_statement("select oid,  typbasetype from pg_type where typname = 'lo'"),
            Ok(Some(Statement::NoRows(_)))
        ));
        assert!(matches!(
            session_statement("BEGIN"),
            Ok(Some(Statement::Ack("BEGIN")))
        ));
        // Everything else is DataFusion's to plan.
        assert!(matches!(
            session_statement("SELECT * FROM taxi LIMIT 3"),
            Ok(None)
        ));
        assert!(matches!(session_statement("SETTLE"), Ok(None)));
    }
}
