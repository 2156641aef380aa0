//! What the agent asks a helper binary to do: one serde type per command,
//! written by the agent as JSON into a file and read back by the helper's
//! `request FILE` subcommand. With the `cli` feature the same types derive
//! the helper's command line, so a renamed field is a compile error in
//! the agent, not a flag the helper refuses at run time.

pub mod asam;
pub mod flight;

use std::path::Path;

use serde::de::DeserializeOwned;

/// The helpers' subcommand that reads a request: `<helper> request FILE`
/// (`-` for stdin).
pub const SUBCOMMAND: &str = "request";

/// Reads the request in `path` (`-`: stdin); the error names the file and
/// what was wrong with it (serde's message names the field, line and
/// column).
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<T, String> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).map_err(|e| format!("stdin: {e}"))?
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?
    };
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}
