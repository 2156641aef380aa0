//! The binaries that run in the guest, linked static with glibc
//! (`-C target-feature=+crt-static`; this toolchain has no musl target).
//! One cargo build makes them and the host CLI alike (`./x build` runs the
//! same command): `--target` keeps the flag off build scripts and
//! proc-macros, and building the same package set with the same profile
//! means the two never rebuild each other's dependencies.

use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum GuestBinError {
    #[error("building {name} for the guest failed (cargo exit {status}); run: {command}")]
    Build {
        name: String,
        status: String,
        command: String,
    },
    #[error("{0} is not a static binary: the guest has no shared libraries for it")]
    NotStatic(PathBuf),
    #[error("{name} not found at {path} and no source tree to build it from (set {env})")]
    Missing {
        name: String,
        path: PathBuf,
        env: String,
    },
}

pub const TARGET: &str = "x86_64-unknown-linux-gnu";

/// The packages one build makes, host CLI included (the `./x build` set).
pub const PACKAGES: &[&str] = &["testbed", "testbed-agent", "testbed-flight", "testbed-asam"];

const RUSTFLAGS_VAR: &str = "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS";
const RUSTFLAGS: &str = "-C target-feature=+crt-static";

/// Names, packages and override variables are declared once, in the
/// agent's workload registry, and shared with the agent that runs them.
pub use testbed_agent::workload::Helper;
pub use testbed_agent::workload::registry::{AGENT, ASAM, FLIGHT};

/// `$CARGO_TARGET_DIR/<triple>/release`, or the workspace's `target/`.
pub fn release_dir(repo: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target"))
        .join(TARGET)
        .join("release")
}

/// The build command, as a user would type it.
pub fn command_line() -> String {
    let packages: Vec<String> = PACKAGES.iter().map(|p| format!("-p {p}")).collect();
    format!(
        "{RUSTFLAGS_VAR}='{RUSTFLAGS}' cargo build --locked --release --target {TARGET} {}",
        packages.join(" ")
    )
}

/// Returns the static binary, building it (incrementally) from the source tree.
pub fn ensure(
    repo: &Path,
    which: Helper,
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf, GuestBinError> {
    let (bin, env) = (which.binary, which.env);
    if let Ok(p) = std::env::var(env) {
        return Ok(PathBuf::from(p));
    }
    let path = release_dir(repo).join(bin);
    if !repo.join("Cargo.toml").is_file() {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(GuestBinError::Missing {
                name: bin.into(),
                path,
                env: env.into(),
            })
        };
    }
    progress(&format!("building {bin} (static, for the guest)"));
    let started = std::time::Instant::now();
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(repo)
        .args(["build", "--locked", "--release", "--target", TARGET])
        .env(RUSTFLAGS_VAR, RUSTFLAGS);
    // Started from a test, we inherit the variables cargo sets for one
    // crate (CARGO_PKG_NAME, …). Build scripts such as ring's rerun when
    // those change, so `./x build` and this build would rebuild each other.
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_per_crate_cargo_var) {
            cmd.env_remove(name);
        }
    }
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        cmd.arg("--target-dir").arg(dir);
    }
    for p in PACKAGES {
        cmd.args(["--package", p]);
    }
    let status = cmd.status().map_err(|e| GuestBinError::Build {
        name: bin.into(),
        status: e.to_string(),
        command: command_line(),
    });
    crate::phases::add("rust build", started.elapsed());
    let status = status?;
    if !status.success() {
        return Err(GuestBinError::Build {
            name: bin.into(),
            status: status.to_string(),
            command: command_line(),
        });
    }
    if !is_static(&path) {
        return Err(GuestBinError::NotStatic(path));
    }
    Ok(path)
}

/// Variables cargo sets for one crate's build script or test process.
fn is_per_crate_cargo_var(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "OUT_DIR",
    ];
    const PREFIXES: &[&str] = &["CARGO_PKG_", "CARGO_BIN_EXE_", "CARGO_CFG_"];
    EXACT.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

/// An ELF with no PT_INTERP needs no dynamic loader.
pub fn is_static(path: &Path) -> bool {
    let Ok(out) = Command::new("ldd").arg(path).output() else {
        return false;
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.contains("not a dynamic executable") || text.contains("statically linked")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_per_crate_cargo_variables_are_dropped() {
        for v in [
            "CARGO_PKG_NAME",
            "CARGO_MANIFEST_DIR",
            "CARGO_BIN_EXE_testbed",
            "OUT_DIR",
        ] {
            assert!(is_per_crate_cargo_var(v), "{v}");
        }
        for v in [
            "CARGO_TARGET_DIR",
            "CARGO_HOME",
            "CARGO",
            RUSTFLAGS_VAR,
            "PATH",
        ] {
            assert!(!is_per_crate_cargo_var(v), "{v}");
        }
    }
}
