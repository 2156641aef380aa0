//! PostgreSQL's wire protocol in front of a DataFusion context
//! (datafusion-postgres' query handlers, which answer psqlODBC's catalog
//! and `SET`/`SHOW` statements too), with SCRAM-SHA-256 password
//! authentication as the PostgreSQL cluster uses, on a port of our own
//! choosing (port 0 picks a free one). Stopped with [`PgwireServer::stop`]
//! or on drop: the listener and every open connection end.

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::prelude::SessionContext;
use datafusion_postgres::DfSessionService;
use datafusion_postgres::pgwire::api::PgWireServerHandlers;
use datafusion_postgres::pgwire::api::auth::sasl::SASLAuthStartupHandler;
use datafusion_postgres::pgwire::api::auth::sasl::scram::{ScramAuth, gen_salted_password};
use datafusion_postgres::pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use datafusion_postgres::pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use datafusion_postgres::pgwire::error::{PgWireError, PgWireResult};
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

struct Handlers {
    queries: Arc<DfSessionService>,
    users: Arc<OneUser>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.queries.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.queries.clone()
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
    let handlers = Arc::new(Handlers {
        queries: Arc::new(DfSessionService::new(ctx)),
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
                            let _ = datafusion_postgres::pgwire::tokio::process_socket(socket, None, h).await;
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
