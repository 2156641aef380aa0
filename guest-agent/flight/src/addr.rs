//! Server addresses: a numeric `IP:PORT` (TCP) or `unix:/path` (Unix socket).
//! Names are not resolved on purpose: the static guest binary has no NSS.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::FlightError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl FromStr for Addr {
    type Err = FlightError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        // Accept the URI forms pyarrow prints too.
        if let Some(path) = s
            .strip_prefix("grpc+unix://")
            .or_else(|| s.strip_prefix("unix://"))
            .or_else(|| s.strip_prefix("unix:"))
        {
            if path.is_empty() {
                return Err(FlightError::Address(s.to_string()));
            }
            return Ok(Addr::Unix(PathBuf::from(path)));
        }
        let hostport = s
            .strip_prefix("grpc+tcp://")
            .or_else(|| s.strip_prefix("grpc+tls://"))
            .or_else(|| s.strip_prefix("grpc://"))
            .or_else(|| s.strip_prefix("http://"))
            .unwrap_or(s);
        hostport
            .parse::<SocketAddr>()
            .map(Addr::Tcp)
            .map_err(|_| FlightError::Address(s.to_string()))
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Tcp(a) => write!(f, "{a}"),
            Addr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl Addr {
    /// The location URI pyarrow expects (`grpc+tcp://`, `grpc+tls://`, `grpc+unix://`).
    pub fn pyarrow_uri(&self, tls: bool) -> String {
        match (self, tls) {
            (Addr::Tcp(a), false) => format!("grpc+tcp://{a}"),
            (Addr::Tcp(a), true) => format!("grpc+tls://{a}"),
            (Addr::Unix(p), _) => format!("grpc+unix://{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tcp_unix_and_uri_forms() {
        assert_eq!(
            "127.0.0.1:5000".parse::<Addr>().unwrap(),
            Addr::Tcp("127.0.0.1:5000".parse().unwrap())
        );
        assert_eq!(
            "grpc+tcp://10.0.2.1:7".parse::<Addr>().unwrap(),
            Addr::Tcp("10.0.2.1:7".parse().unwrap())
        );
        assert_eq!(
            "unix:/tmp/s.sock".parse::<Addr>().unwrap(),
            Addr::Unix("/tmp/s.sock".into())
        );
        assert_eq!(
            "grpc+unix:///tmp/s".parse::<Addr>().unwrap(),
            Addr::Unix("/tmp/s".into())
        );
        let err = "localhost:5000".parse::<Addr>().unwrap_err().to_string();
        assert!(err.contains("numeric IP"), "{err}");
        assert_eq!(
            Addr::Unix("/a".into()).to_string().parse::<Addr>().unwrap(),
            Addr::Unix("/a".into())
        );
    }
}
