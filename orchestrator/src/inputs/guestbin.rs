//! The binaries that run in the guest, linked static with glibc
//! (`-C target-feature=+crt-static`; this toolchain has no musl target).
//! A helper marked `dynamic` (testbed-odbc: it dlopens psqlODBC) is built
//! for the host instead and runs only on a Debian root image.
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

/// Runs the build in a process group that dies with us and that Ctrl-C or a
/// SIGTERM sent to `testbed` stops too.
fn run_contained(cmd: &mut Command) -> std::io::Result<std::process::ExitStatus> {
    crate::qemu::process::GroupProcess::spawn_command(cmd)?
        .wait_or_interrupt()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::Interrupted, "interrupted"))
}

/// orchestrator/guest-build.txt: target, flags and packages of the one
/// build, which `./x build` reads too.
const BUILD_TABLE: &str = include_str!("../../guest-build.txt");

/// The build as the table describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildSpec {
    pub target: String,
    pub rustflags: String,
    /// Host CLI included (the `./x build` set).
    pub packages: Vec<String>,
}

impl BuildSpec {
    /// `CARGO_TARGET_<TRIPLE>_RUSTFLAGS`: the flags for --target only.
    pub fn rustflags_var(&self) -> String {
        format!(
            "CARGO_TARGET_{}_RUSTFLAGS",
            self.target.to_uppercase().replace('-', "_")
        )
    }
}

/// Parses guest-build.txt (`key value…` lines, `#` comments).
pub fn parse_build_table(text: &str) -> BuildSpec {
    let mut spec = BuildSpec {
        target: String::new(),
        rustflags: String::new(),
        packages: Vec::new(),
    };
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        let value = value.trim().to_string();
        match key {
            "target" => spec.target = value,
            "rustflags" => spec.rustflags = value,
            "package" => spec.packages.push(value),
            _ => {}
        }
    }
    spec
}

pub fn build_spec() -> BuildSpec {
    parse_build_table(BUILD_TABLE)
}

/// Names, packages and override variables are declared once, in the
/// agent's workload registry, and shared with the agent that runs them.
pub use testbed_agent::workload::Helper;
pub use testbed_agent::workload::registry::{AGENT, ASAM, FLIGHT, ODBC};

/// `$CARGO_TARGET_DIR/<triple>/release`, or the workspace's `target/`.
pub fn release_dir(repo: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target"))
        .join(build_spec().target)
        .join("release")
}

/// Where a dynamic helper is built: the host profile's `release/`.
pub fn host_release_dir(repo: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target"))
        .join("release")
}

/// The build command, as a user would type it.
pub fn command_line() -> String {
    let b = build_spec();
    let packages: Vec<String> = b.packages.iter().map(|p| format!("-p {p}")).collect();
    format!(
        "{}='{}' cargo build --locked --release --target {} {}",
        b.rustflags_var(),
        b.rustflags,
        b.target,
        packages.join(" ")
    )
}

/// Returns the helper's binary, building it (incrementally) from the
/// source tree: static with the guest build, or, for a dynamic helper,
/// alone for the host (`./x build` builds both the same way).
pub fn ensure(
    repo: &Path,
    which: Helper,
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf, GuestBinError> {
    let (bin, env) = (which.binary, which.env);
    if let Ok(p) = std::env::var(env) {
        return Ok(PathBuf::from(p));
    }
    let path = if which.dynamic {
        host_release_dir(repo).join(bin)
    } else {
        release_dir(repo).join(bin)
    };
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
    if let Some(why) = crate::paths::no_build() {
        return Err(GuestBinError::Missing {
            name: format!("{bin} ({why})"),
            path,
            env: env.into(),
        });
    }
    let build = build_spec();
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(repo)
        .args(["build", "--locked", "--release"]);
    let command = if which.dynamic {
        progress(&format!(
            "building {bin} (dynamic: the host, or a Debian root image)"
        ));
        cmd.args(["--package", which.package]);
        format!("cargo build --locked --release -p {}", which.package)
    } else {
        progress(&format!("building {bin} (static, for the guest)"));
        cmd.args(["--target", &build.target])
            .env(build.rustflags_var(), &build.rustflags);
        for p in &build.packages {
            cmd.args(["--package", p]);
        }
        command_line()
    };
    let started = std::time::Instant::now();
    // Started from a test, we inherit the variables cargo sets for one
    // crate (CARGO_PKG_NAME, …). Build scripts such as ring's rerun when
    // those change, so `./x build` and this build would rebuild each other.
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_per_crate_cargo_var) {
            cmd.env_remove(name);
        }
    }
    // `./x test` builds and runs the tests with clippy-driver as the
    // workspace's rustc wrapper (CLIPPY_ARGS set): our crates would get
    // other fingerprints than `./x build` gave them, and be rebuilt.
    if std::env::var_os("CLIPPY_ARGS").is_some() {
        cmd.env_remove("RUSTC_WORKSPACE_WRAPPER")
            .env_remove("CLIPPY_ARGS");
    }
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        cmd.arg("--target-dir").arg(dir);
    }
    let status = run_contained(&mut cmd).map_err(|e| GuestBinError::Build {
        name: bin.into(),
        status: e.to_string(),
        command: command.clone(),
    });
    crate::phases::add("rust build", started.elapsed());
    let status = status?;
    if !status.success() {
        return Err(GuestBinError::Build {
            name: bin.into(),
            status: status.to_string(),
            command,
        });
    }
    if !which.dynamic && !is_static(&path) {
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

/// An ELF with no PT_INTERP and no DT_NEEDED needs no dynamic loader and
/// no libraries; read from its headers, never by running it (as ldd may).
pub fn is_static(path: &Path) -> bool {
    crate::image::libs::elf_deps(path).is_ok_and(|d| d.is_static())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_static_reads_the_headers_and_runs_nothing() {
        assert!(!is_static(Path::new("/bin/ls")), "/bin/ls is dynamic");
        if let Some(busybox) = crate::paths::busybox() {
            assert!(is_static(&busybox), "{}", busybox.display());
        }
        // A script that would leave a mark if anything ran it.
        let t = tempfile::tempdir().unwrap();
        let marker = t.path().join("ran");
        let script = t.path().join("agent");
        std::fs::write(&script, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!is_static(&script), "not an ELF file");
        assert!(!marker.exists(), "the file was executed");
    }

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
            &build_spec().rustflags_var(),
            "PATH",
        ] {
            assert!(!is_per_crate_cargo_var(v), "{v}");
        }
    }

    #[test]
    fn the_build_table_names_the_static_build_of_every_guest_binary() {
        let b = build_spec();
        assert_eq!(b.target, "x86_64-unknown-linux-gnu");
        assert_eq!(
            b.rustflags_var(),
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS"
        );
        assert!(b.rustflags.contains("+crt-static"), "{b:?}");
        // The host CLI and every binary the registry puts in an image.
        for h in [AGENT, FLIGHT, ASAM] {
            assert!(
                b.packages.iter().any(|p| p == h.package),
                "{b:?} lacks {}",
                h.package
            );
        }
        assert!(b.packages.iter().any(|p| p == "testbed"));
        // ./x reads the same file with the same rules.
        let x = std::fs::read_to_string(crate::paths::repo_root().join("x")).unwrap();
        assert!(x.contains("orchestrator/guest-build.txt"));
    }
}
