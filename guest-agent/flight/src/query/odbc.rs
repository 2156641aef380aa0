//! The ODBC clients run as `testbed-odbc fetch` (a small dynamically linked
//! binary: the driver manager dlopens psqlODBC, which a static binary such
//! as this one cannot). It reports its own time from connect to the last
//! row, so process start-up is not counted: the same span as the other
//! clients' in-process timers.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use testbed_vocab::taxi::OdbcFetch;

use crate::error::{FlightError, Result};

/// Where to find it: `$TESTBED_ODBC_BIN`; else beside this executable
/// (cargo's debug and release dirs), or in the host release dir next to
/// the static target dir (`target/release` for
/// `target/<triple>/release`); else `testbed-odbc` on PATH.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("TESTBED_ODBC_BIN") {
        return PathBuf::from(p);
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(mut dir) = exe.parent()
    {
        // A test binary lives in target/<profile>/deps.
        if dir.file_name().is_some_and(|n| n == "deps")
            && let Some(up) = dir.parent()
        {
            dir = up;
        }
        let here = dir.join("testbed-odbc");
        if here.is_file() {
            return here;
        }
        if let (Some(profile), Some(target)) =
            (dir.file_name(), dir.parent().and_then(|t| t.parent()))
        {
            let host = target.join(profile).join("testbed-odbc");
            if host.is_file() {
                return host;
            }
        }
    }
    PathBuf::from("testbed-odbc")
}

/// psqlODBC over TCP, with the cluster's password (hex: no quoting). CommLog
/// and Debug are forced off: Debian's odbcinst.ini turns CommLog on, which
/// would time the log writes.
pub fn connection_string(port: u16, password: &str) -> String {
    format!(
        "Driver={{PostgreSQL Unicode}};Server=127.0.0.1;Port={port};Database=postgres;\
         Uid=postgres;Pwd={password};CommLog=0;Debug=0;"
    )
}

/// `mode` rows | blocks; block fetch sizes its text buffers by
/// `max_text_bytes`, the longest string the table holds. The connection
/// string goes by environment (it holds the password).
pub fn fetch(
    conn: &str,
    sql: &str,
    mode: &str,
    batch_rows: usize,
    max_text_bytes: usize,
) -> Result<OdbcFetch> {
    let bin = binary();
    let mut cmd = Command::new(&bin);
    cmd.args(["fetch", "--mode", mode, "--sql", sql])
        .args(["--batch-rows", &batch_rows.to_string()])
        .args(["--max-text-bytes", &max_text_bytes.to_string()])
        .env("TESTBED_ODBC_CONN", conn);
    // Not `e` itself: its command line would show the environment, and
    // with it the password.
    let done = testbed_proc::run_captured(&mut cmd, Duration::from_secs(3600)).map_err(|e| {
        let why = match e {
            testbed_proc::RunError::Spawn { source, .. }
            | testbed_proc::RunError::Wait { source, .. } => source.to_string(),
            testbed_proc::RunError::TimedOut { .. } => "timed out after 1 h".into(),
        };
        FlightError::Other(format!(
            "{} fetch --mode {mode}: {why} (`./x build` builds it, or set $TESTBED_ODBC_BIN)",
            bin.display()
        ))
    })?;
    if !done.status.success() {
        return Err(FlightError::Other(format!(
            "testbed-odbc fetch --mode {mode} failed ({}): {}",
            done.status,
            done.stderr.trim()
        )));
    }
    serde_json::from_str(done.stdout.trim())
        .map_err(|e| FlightError::Other(format!("testbed-odbc printed {:?}: {e}", done.stdout)))
}
