//! `client_cpus` and `server_cpus` of the Flight workloads: the client and
//! the server on separate host CPUs where a spec asks, and the summary
//! saying where they ran. Processes get the mask of the agent thread that
//! spawns them (testbed_proc::affinity); testbed-flight's own query and
//! ingest runs pin their runtimes and children from the same two lists.

use testbed_proc::affinity;
use testbed_vocab::request::flight::{CpuPins, FlightRequest};

use super::other;
use crate::workload::{ParamError, Summary, WorkloadError};

/// The two CPU lists, parsed: both given and disjoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Pinning {
    pub client: Vec<usize>,
    pub server: Vec<usize>,
}

/// `client_cpus`/`server_cpus` as a spec gives them ("1", "0,2-3"): both or
/// neither, no CPU in both.
pub fn parse(client: Option<&str>, server: Option<&str>) -> Result<Option<Pinning>, ParamError> {
    let list = |field: &str, s: &str| {
        affinity::parse_list(s).map_err(|e| ParamError::new(field, e.to_string()))
    };
    match (client, server) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(ParamError::new(
            "server_cpus",
            "client_cpus is given: give server_cpus too",
        )),
        (None, Some(_)) => Err(ParamError::new(
            "client_cpus",
            "server_cpus is given: give client_cpus too",
        )),
        (Some(c), Some(s)) => {
            let (client, server) = (list("client_cpus", c)?, list("server_cpus", s)?);
            if let Some(cpu) = client.iter().find(|c| server.contains(c)) {
                return Err(ParamError::new(
                    "server_cpus",
                    format!("CPU {cpu} is in client_cpus too: client and server must not share one"),
                ));
            }
            Ok(Some(Pinning { client, server }))
        }
    }
}

/// [`parse`] at run time, where a bad list is the run's error, and every
/// CPU must be one this machine lets the agent use.
pub fn at_run(client: Option<&str>, server: Option<&str>) -> Result<Option<Pinning>, WorkloadError> {
    let p = parse(client, server).map_err(|e| other(e.to_string()))?;
    if let Some(p) = &p {
        for (field, cpus) in [("client_cpus", &p.client), ("server_cpus", &p.server)] {
            affinity::check_allowed(cpus).map_err(|e| other(format!("{field}: {e}")))?;
        }
    }
    Ok(p)
}

/// Runs `f` (which spawns a client or a server) on `cpus`, if any.
pub fn on<T>(cpus: Option<&[usize]>, f: impl FnOnce() -> T) -> Result<T, WorkloadError> {
    affinity::with_thread_pinned(cpus, f).map_err(|e| other(format!("pinning: {e}")))
}

/// `pinning` in the summary: "client 1, server 0", or "not pinned".
pub fn record(s: &mut Summary, p: Option<&Pinning>) {
    let text = match p {
        Some(p) => format!(
            "client {}, server {}",
            affinity::format_list(&p.client),
            affinity::format_list(&p.server)
        ),
        None => "not pinned".into(),
    };
    s.insert("pinning".into(), serde_json::json!(text));
}

/// Runs testbed-flight's query or ingest request, made by `request` from
/// the spec's CPU lists, and gives its lines and the pinning for the
/// summary.
pub fn run_pinned<T: serde::de::DeserializeOwned>(
    bin: &std::path::Path,
    request: impl FnOnce(CpuPins) -> FlightRequest,
    timeout: std::time::Duration,
    client: Option<&str>,
    server: Option<&str>,
) -> Result<(Vec<T>, Option<Pinning>), WorkloadError> {
    let pin = at_run(client, server)?;
    let request = request(cpu_pins(pin.as_ref()));
    Ok((super::run_client(bin, &request, timeout)?, pin))
}

/// testbed-flight's client and server CPU lists for the query and ingest
/// runs.
pub fn cpu_pins(p: Option<&Pinning>) -> CpuPins {
    CpuPins {
        client_cpus: p.map(|p| affinity::format_list(&p.client)),
        server_cpus: p.map(|p| affinity::format_list(&p.server)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_lists_or_neither_and_never_one_cpu_in_both() {
        assert_eq!(parse(None, None).unwrap(), None);
        let p = parse(Some("1"), Some("0")).unwrap().unwrap();
        assert_eq!((p.client.clone(), p.server.clone()), (vec![1], vec![0]));
        assert_eq!(parse(Some("1"), None).unwrap_err().field, "server_cpus");
        assert_eq!(parse(None, Some("0")).unwrap_err().field, "client_cpus");
        let e = parse(Some("0-1"), Some("1")).unwrap_err();
        assert!(e.field == "server_cpus" && e.reason.contains("CPU 1"), "{e:?}");
        assert_eq!(parse(Some("x"), Some("0")).unwrap_err().field, "client_cpus");
        let mut s = Summary::new();
        record(&mut s, Some(&p));
        assert_eq!(s["pinning"], "client 1, server 0");
        let pins = cpu_pins(Some(&p));
        assert_eq!((pins.client_cpus.as_deref(), pins.server_cpus.as_deref()), (Some("1"), Some("0")));
        assert_eq!(cpu_pins(None), CpuPins::default());
    }
}
