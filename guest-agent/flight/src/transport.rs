//! Channels and listeners over TCP or a Unix socket, with the settings of
//! [`TransportSettings`] applied on both sides.

use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint, Server, ServerTlsConfig, Uri};

use crate::addr::Addr;
use crate::error::{FlightError, Result};
use crate::settings::TransportSettings;

/// Connects to `addr`; a refused or silent server is a [`FlightError::Connect`]
/// naming the address.
pub async fn connect(
    addr: &Addr,
    tls: Option<&ClientTlsConfig>,
    settings: &TransportSettings,
    timeout: Duration,
) -> Result<Channel> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let uri = match addr {
        Addr::Tcp(a) => format!("{scheme}://{a}"),
        // The host part is only a label for a Unix socket.
        Addr::Unix(_) => format!("{scheme}://{}:1", crate::tls::SERVER_NAME),
    };
    let connect_err = |e: &(dyn std::error::Error + 'static)| FlightError::Connect {
        addr: addr.to_string(),
        reason: source_chain(e),
    };
    let mut endpoint = Endpoint::from_shared(uri)
        .map_err(|e| connect_err(&e))?
        .connect_timeout(timeout)
        .tcp_nodelay(settings.tcp_nodelay)
        .max_frame_size(settings.max_frame_bytes);
    endpoint = if settings.adaptive_window {
        endpoint.http2_adaptive_window(true)
    } else {
        endpoint
            .initial_stream_window_size(settings.stream_window_bytes)
            .initial_connection_window_size(settings.connection_window_bytes)
    };
    if let Some(tls) = tls {
        endpoint = endpoint
            .tls_config(tls.clone())
            .map_err(|e| connect_err(&e))?;
    }
    let connecting = async {
        match addr {
            Addr::Tcp(_) => endpoint.connect().await,
            Addr::Unix(path) => {
                let path = path.clone();
                endpoint
                    .connect_with_connector(tower::service_fn(move |_: Uri| {
                        let path = path.clone();
                        async move {
                            let s = tokio::net::UnixStream::connect(path).await?;
                            Ok::<_, std::io::Error>(TokioIo::new(s))
                        }
                    }))
                    .await
            }
        }
    };
    // connect_timeout does not cover a Unix connect or the TLS handshake.
    match tokio::time::timeout(timeout + Duration::from_secs(1), connecting).await {
        Ok(Ok(ch)) => Ok(ch),
        Ok(Err(e)) => Err(connect_err(&e)),
        Err(_) => Err(FlightError::Connect {
            addr: addr.to_string(),
            reason: format!("timed out after {timeout:?}"),
        }),
    }
}

/// An error and its sources on one line ("transport error: ... refused").
pub fn source_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        let t = src.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = src.source();
    }
    s
}

/// A bound listener and the address it got (port 0 resolved).
pub enum Listener {
    Tcp(TcpIncoming, Addr),
    Unix(UnixListenerStream, Addr, PathBuf),
}

impl Listener {
    pub async fn bind(addr: &Addr, settings: &TransportSettings) -> Result<Self> {
        match addr {
            Addr::Tcp(a) => {
                let l = tokio::net::TcpListener::bind(a)
                    .await
                    .map_err(|e| FlightError::io(format!("bind {a}"), e))?;
                let local = l
                    .local_addr()
                    .map_err(|e| FlightError::io(format!("local address of {a}"), e))?;
                let incoming = TcpIncoming::from(l).with_nodelay(Some(settings.tcp_nodelay));
                Ok(Listener::Tcp(incoming, Addr::Tcp(local)))
            }
            Addr::Unix(p) => {
                // A stale socket file from a killed server would make bind fail.
                if p.exists() {
                    let _ = std::fs::remove_file(p);
                }
                let l = tokio::net::UnixListener::bind(p)
                    .map_err(|e| FlightError::io(format!("bind {}", p.display()), e))?;
                Ok(Listener::Unix(
                    UnixListenerStream::new(l),
                    addr.clone(),
                    p.clone(),
                ))
            }
        }
    }

    pub fn addr(&self) -> &Addr {
        match self {
            Listener::Tcp(_, a) | Listener::Unix(_, a, _) => a,
        }
    }
}

/// A tonic server builder with the HTTP/2 settings applied.
pub fn server_builder(
    settings: &TransportSettings,
    tls: Option<ServerTlsConfig>,
) -> Result<Server> {
    let mut b = Server::builder()
        .tcp_nodelay(settings.tcp_nodelay)
        .max_frame_size(settings.max_frame_bytes);
    b = if settings.adaptive_window {
        b.http2_adaptive_window(Some(true))
    } else {
        b.initial_stream_window_size(settings.stream_window_bytes)
            .initial_connection_window_size(settings.connection_window_bytes)
    };
    if let Some(tls) = tls {
        b = b
            .tls_config(tls)
            .map_err(|e| FlightError::Tls(source_chain(&e)))?;
    }
    Ok(b)
}
