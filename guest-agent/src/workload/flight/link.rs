//! The link between the pair topology's VMs, measured with iperf3 in the
//! same boot as the Flight points it bounds: the server VM runs `iperf3 -s`
//! beside its Flight server, the client VM runs `iperf3 -c` in both
//! directions before each point. A remote Flight rate is reported as a
//! share of the link rate in its own direction.

use std::process::{Command, Stdio};
use std::time::Duration;

use testbed_proc::Group;

use super::other;
use crate::workload::WorkloadError;

/// iperf3's port on the server VM.
pub const PORT: u16 = 5201;

/// MB (2^20 bytes) per second each way, as the receiver counted them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub to_server_mb_per_s: f64,
    pub to_client_mb_per_s: f64,
}

/// `iperf3 -s -p PORT`, contained (stopped with its process group).
pub fn start_server() -> Result<Group, WorkloadError> {
    let mut cmd = Command::new("iperf3");
    cmd.args(["-s", "-p", &PORT.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Group::spawn(&mut cmd).map_err(|e| {
        other(format!(
            "start iperf3 -s (add \"iperf3\" to [image] include): {e}"
        ))
    })
}

/// Both directions, `seconds` each, against the server VM at `ip`.
pub fn measure(ip: &str, seconds: u32) -> Result<Link, WorkloadError> {
    let run = |reverse: bool| -> Result<f64, WorkloadError> {
        let mut cmd = Command::new("iperf3");
        cmd.args(["-c", ip, "-p", &PORT.to_string(), "-J", "-t", &seconds.to_string()]);
        if reverse {
            cmd.arg("-R");
        }
        let timeout = Duration::from_secs(u64::from(seconds) + 30);
        let done = testbed_proc::run_captured(&mut cmd, timeout)
            .map_err(|e| other(format!("iperf3 -c {ip}: {e}")))?;
        if !done.status.success() {
            return Err(other(format!(
                "iperf3 -c {ip}{} failed ({}): {}{}",
                if reverse { " -R" } else { "" },
                done.status,
                done.stdout.trim(),
                done.stderr.trim()
            )));
        }
        received_mb_per_s(&done.stdout)
    };
    Ok(Link {
        to_server_mb_per_s: run(false)?,
        to_client_mb_per_s: run(true)?,
    })
}

/// `end.sum_received.bits_per_second` of `iperf3 -J` in MB/s.
pub fn received_mb_per_s(json: &str) -> Result<f64, WorkloadError> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| other(format!("iperf3 -J output: {e}")))?;
    if let Some(e) = v["error"].as_str() {
        return Err(other(format!("iperf3: {e}")));
    }
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .ok_or_else(|| other("iperf3 -J output has no end.sum_received.bits_per_second"))?;
    Ok(bps / 8.0 / f64::from(1u32 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_received_rate_is_read_in_mib_per_second() {
        let json = r#"{"start":{},"end":{"sum_sent":{"bits_per_second":9.0e8},"sum_received":{"bits_per_second":838860800.0}}}"#;
        assert_eq!(received_mb_per_s(json).unwrap(), 100.0);
        let e = received_mb_per_s(r#"{"error":"unable to connect to server"}"#).unwrap_err();
        assert!(e.to_string().contains("unable to connect"), "{e}");
        assert!(received_mb_per_s("{}").is_err());
    }
}
