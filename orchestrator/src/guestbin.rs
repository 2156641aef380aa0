//! The binaries that run in the guest, linked static with glibc
//! (`-C target-feature=+crt-static`; this toolchain has no musl target).
//! Built with cargo into target/guest, separate from host builds, because
//! crt-static cannot apply to the host's proc-macros.

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

/// (package, binary, override env var)
pub type Helper = (&'static str, &'static str, &'static str);

pub const AGENT: Helper = ("testbed-agent", "testbed-agent", "TESTBED_AGENT_BIN");
pub const FLIGHT: Helper = ("testbed-flight", "testbed-flight", "TESTBED_FLIGHT_BIN");
pub const ASAM: Helper = ("testbed-asam", "testbed-asam", "TESTBED_ASAM_BIN");

/// Returns the static binary, building it (incrementally) from the source tree.
pub fn ensure(
    repo: &Path,
    which: (&str, &str, &str),
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf, GuestBinError> {
    let (package, bin, env) = which;
    if let Ok(p) = std::env::var(env) {
        return Ok(PathBuf::from(p));
    }
    // Beside the host build ($CARGO_TARGET_DIR or <repo>/target), in guest/.
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target"))
        .join("guest");
    let path = target_dir.join(TARGET).join("release").join(bin);
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
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(repo)
        .args([
            "build",
            "--release",
            "--package",
            package,
            "--bin",
            bin,
            "--target",
            TARGET,
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .env(
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
            "-C target-feature=+crt-static",
        )
        // The same profile as `./x build`, so the two share one cache
        // instead of rebuilding each other's output.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "true");
    let command = format!(
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS='-C target-feature=+crt-static' CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=true cargo build --release -p {package} --bin {bin} --target {TARGET} --target-dir {}",
        target_dir.display()
    );
    let status = cmd.status().map_err(|e| GuestBinError::Build {
        name: bin.into(),
        status: e.to_string(),
        command: command.clone(),
    })?;
    if !status.success() {
        return Err(GuestBinError::Build {
            name: bin.into(),
            status: status.to_string(),
            command,
        });
    }
    if !is_static(&path) {
        return Err(GuestBinError::NotStatic(path));
    }
    Ok(path)
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
