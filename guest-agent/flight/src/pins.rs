//! `--client-cpus`/`--server-cpus` of the query and ingest runs, where
//! servers and clients share one process: the calling thread, the client
//! runtime and every client process it starts (ODBC, ADBC) go on the
//! client's CPUs; the server runtime and PostgreSQL on the server's.

use testbed_proc::affinity;

use crate::error::{FlightError, Result};

/// The two flags (the vocabulary's: the agent fills them in).
pub use testbed_vocab::request::flight::CpuPins;

/// The two lists, parsed and checked against the CPUs this process may use.
#[derive(Debug, Clone, PartialEq)]
pub struct Pinned {
    pub client: Vec<usize>,
    pub server: Vec<usize>,
}

/// The two lists of `pins`, checked: both or neither, each CPU one this
/// process may use, none in both.
pub fn pinned(pins: &CpuPins) -> Result<Option<Pinned>> {
    let (c, s) = match (&pins.client_cpus, &pins.server_cpus) {
        (None, None) => return Ok(None),
        (Some(c), Some(s)) => (c, s),
        _ => {
            return Err(FlightError::Param(
                "--client-cpus and --server-cpus go together".into(),
            ));
        }
    };
    let list = |flag: &str, s: &str| {
        let cpus =
            affinity::parse_list(s).map_err(|e| FlightError::Param(format!("{flag}: {e}")))?;
        let allowed =
            affinity::this_thread_cpus().map_err(|e| FlightError::Other(e.to_string()))?;
        match cpus.iter().find(|c| !allowed.contains(c)) {
            Some(cpu) => Err(FlightError::Param(format!(
                "{flag}: CPU {cpu} is not one this process may run on (allowed: {})",
                affinity::format_list(&allowed)
            ))),
            None => Ok(cpus),
        }
    };
    let p = Pinned {
        client: list("--client-cpus", c)?,
        server: list("--server-cpus", s)?,
    };
    if let Some(cpu) = p.client.iter().find(|c| p.server.contains(c)) {
        return Err(FlightError::Param(format!(
            "CPU {cpu} is in --client-cpus and --server-cpus"
        )));
    }
    Ok(Some(p))
}

/// Puts the calling thread (and so every process it starts) on the
/// client's CPUs for the rest of its life: the CLI's main thread, which
/// drives the clients.
pub fn pin_caller_as_client(p: Option<&Pinned>) -> Result<()> {
    match p {
        Some(p) => {
            affinity::pin_this_thread(&p.client).map_err(|e| FlightError::Other(e.to_string()))
        }
        None => Ok(()),
    }
}

/// The client runtime (threads named `name`, two workers) on the client's
/// CPUs, after putting the calling thread there too
/// ([`pin_caller_as_client`]).
pub fn client_runtime(p: Option<&Pinned>, name: &str) -> Result<tokio::runtime::Runtime> {
    pin_caller_as_client(p)?;
    crate::runtime::named_runtime_on(Some(2), name, p.map(|p| p.client.clone()))
        .map_err(|e| FlightError::Other(e.to_string()))
}

/// The server runtime (threads named `name`) on the server's CPUs.
pub fn server_runtime(p: Option<&Pinned>, name: &str) -> Result<tokio::runtime::Runtime> {
    crate::runtime::named_runtime_on(None, name, p.map(|p| p.server.clone()))
        .map_err(|e| FlightError::Other(e.to_string()))
}

/// Runs `f` (which starts a server process) on the server's CPUs.
pub fn as_server<T>(p: Option<&Pinned>, f: impl FnOnce() -> T) -> Result<T> {
    affinity::with_thread_pinned(p.map(|p| &p.server[..]), f)
        .map_err(|e| FlightError::Other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pins(c: Option<&str>, s: Option<&str>) -> CpuPins {
        CpuPins {
            client_cpus: c.map(String::from),
            server_cpus: s.map(String::from),
        }
    }

    #[test]
    fn both_or_neither_disjoint_and_allowed() {
        assert_eq!(pinned(&pins(None, None)).unwrap(), None);
        assert!(pinned(&pins(Some("0"), None)).is_err());
        let e = pinned(&pins(Some("0"), Some("0"))).unwrap_err().to_string();
        assert!(e.contains("CPU 0"), "{e}");
        let e = pinned(&pins(Some("0"), Some("1023")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--server-cpus: CPU 1023"), "{e}");
        let cpus = affinity::this_thread_cpus().unwrap();
        if cpus.len() >= 2 {
            let (c, s) = (cpus[0].to_string(), cpus[1].to_string());
            let p = pinned(&pins(Some(&c), Some(&s))).unwrap().unwrap();
            assert_eq!((p.client, p.server), (vec![cpus[0]], vec![cpus[1]]));
        }
    }
}
