//! The error type of this crate's library API.

use arrow::error::ArrowError;

#[derive(Debug, thiserror::Error)]
pub enum FlightError {
    /// No Flight server answers at the address (refused, timed out, TLS failed).
    #[error("cannot connect to Flight server at {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("invalid address {0:?}: expected IP:PORT (numeric IP) or unix:/path/to/socket")]
    Address(String),
    /// A Flight call failed; `status` is the server's (or transport's) message.
    #[error("{call} to {addr} failed: {status}")]
    Rpc {
        call: &'static str,
        addr: String,
        status: String,
    },
    #[error("invalid IPC data: {0}")]
    Ipc(String),
    #[error("schema mismatch: expected {expected}, got {got}")]
    SchemaMismatch { expected: String, got: String },
    #[error("arrow: {0}")]
    Arrow(#[from] ArrowError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("invalid parameter: {0}")]
    Param(String),
    #[error("verification failed: {0}")]
    Verify(String),
    #[error("{0}")]
    Other(String),
}

impl FlightError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        FlightError::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = FlightError> = std::result::Result<T, E>;
