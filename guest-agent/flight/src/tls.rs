//! Self-signed TLS material for `--tls` runs. The leaf certificate is for
//! the name `localhost`, and clients always verify against that name, so the
//! same files work over TCP, Unix sockets and between VMs whatever their IPs.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

use crate::error::{FlightError, Result};

/// The name every server certificate carries and every client checks.
pub const SERVER_NAME: &str = "localhost";

pub struct TlsFiles {
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

impl TlsFiles {
    pub fn in_dir(dir: &Path) -> Self {
        TlsFiles {
            ca_cert: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
        }
    }
}

fn tls_err(e: impl std::fmt::Display) -> FlightError {
    FlightError::Tls(e.to_string())
}

/// Writes a CA and a server certificate signed by it into `dir`.
pub fn generate(dir: &Path) -> Result<TlsFiles> {
    std::fs::create_dir_all(dir)
        .map_err(|e| FlightError::io(format!("create {}", dir.display()), e))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "testbed flight CA");
    let ca_key = KeyPair::generate().map_err(tls_err)?;
    let ca_cert = ca_params.self_signed(&ca_key).map_err(tls_err)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut params = CertificateParams::new(vec![SERVER_NAME.to_string(), "127.0.0.1".into()])
        .map_err(tls_err)?;
    params
        .distinguished_name
        .push(DnType::CommonName, SERVER_NAME);
    let key = KeyPair::generate().map_err(tls_err)?;
    let cert = params.signed_by(&key, &issuer).map_err(tls_err)?;

    let files = TlsFiles::in_dir(dir);
    for (path, text) in [
        (&files.ca_cert, ca_cert.pem()),
        (&files.server_cert, cert.pem()),
        (&files.server_key, key.serialize_pem()),
    ] {
        std::fs::write(path, text)
            .map_err(|e| FlightError::io(format!("write {}", path.display()), e))?;
    }
    Ok(files)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| FlightError::io(format!("read {}", path.display()), e))
}

pub fn server_config(files: &TlsFiles) -> Result<ServerTlsConfig> {
    let identity = Identity::from_pem(read(&files.server_cert)?, read(&files.server_key)?);
    Ok(ServerTlsConfig::new().identity(identity))
}

pub fn client_config(ca_cert: &Path) -> Result<ClientTlsConfig> {
    Ok(ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(ca_cert)?))
        .domain_name(SERVER_NAME))
}
