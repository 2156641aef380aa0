//! CPU time: this process's (getrusage), and a Flight server's, asked
//! over Flight: the `cpu` action answers with the serving process's user +
//! system CPU seconds so far, so a client on another machine (the pair
//! topology's other VM) can charge a run the server's CPU by asking before
//! and after it.

use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use arrow_flight::{Action, FlightClient};
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tonic::Status;

use crate::addr::Addr;
use crate::error::{FlightError, Result};
use crate::settings::TransportSettings;

/// The action's type.
pub const CPU_ACTION: &str = "cpu";

/// The action's one result body (JSON).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuReply {
    pub cpu_s: f64,
}

/// User and system CPU seconds of this whole process so far (every
/// thread: the runtime's workers included).
pub fn process_cpu() -> Option<(f64, f64)> {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return None;
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some((s(u.ru_utime), s(u.ru_stime)))
}

/// [`process_cpu`]'s user and system seconds added up.
pub fn process_cpu_s() -> Option<f64> {
    process_cpu().map(|(user, system)| user + system)
}

type ActionStream =
    Pin<Box<dyn Stream<Item = std::result::Result<arrow_flight::Result, Status>> + Send + 'static>>;

/// The server side: this process's CPU as the action's result, or
/// Unimplemented for any other action.
pub fn answer(action: &Action) -> std::result::Result<ActionStream, Status> {
    if action.r#type != CPU_ACTION {
        return Err(Status::unimplemented(format!(
            "no action {:?} (only {CPU_ACTION:?})",
            action.r#type
        )));
    }
    let cpu_s = process_cpu_s().ok_or_else(|| Status::internal("getrusage failed"))?;
    let body =
        serde_json::to_vec(&CpuReply { cpu_s }).map_err(|e| Status::internal(e.to_string()))?;
    Ok(Box::pin(futures::stream::once(async {
        Ok(arrow_flight::Result { body: body.into() })
    })))
}

/// The client side: the CPU seconds of the server at `addr` so far.
pub async fn ask(addr: &Addr, tls_ca: Option<&Path>, timeout: Duration) -> Result<f64> {
    let tls = tls_ca.map(crate::tls::client_config).transpose()?;
    let channel = crate::transport::connect(
        addr,
        tls.as_ref(),
        &TransportSettings::library_defaults(),
        timeout,
    )
    .await?;
    let mut client = FlightClient::new(channel);
    let err = |e: String| FlightError::Other(format!("the CPU time of the server at {addr}: {e}"));
    let mut replies = client
        .do_action(Action::new(CPU_ACTION, ""))
        .await
        .map_err(|e| err(e.to_string()))?;
    let body = replies
        .next()
        .await
        .ok_or_else(|| err("no reply".into()))?
        .map_err(|e| err(e.to_string()))?;
    let reply: CpuReply = serde_json::from_slice(&body).map_err(|e| err(e.to_string()))?;
    Ok(reply.cpu_s)
}
