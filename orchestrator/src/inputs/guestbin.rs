//! The binaries that run in the guest, linked static with glibc
//! (`-C target-feature=+crt-static`; this toolchain has no musl target).
//! A helper marked `dynamic` (testbed-odbc: it dlopens psqlODBC) is built
//! for the host instead and runs only on a Debian root image.
//! One cargo build makes them and the host CLI alike (`./x build` runs the
//! same command): `--target` keeps the flag off build scripts and
//! proc-macros, and building the same package set with the same profile
//! means the two never rebuild each other's dependencies.

use std::collections::BTreeMap;
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
    crate::machine::qemu::process::GroupProcess::spawn_command(cmd)?
        .wait_or_interrupt()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::Interrupted, "interrupted"))
}

/// orchestrator/guest-build.txt: target, flags, packages and families of
/// the one build, which `./x build` reads too.
const BUILD_TABLE: &str = include_str!("../../guest-build.txt");

/// The build as the table describes it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BuildSpec {
    pub target: String,
    pub rustflags: String,
    /// Built every time: the host CLI and the agent (`package` lines).
    pub packages: Vec<String>,
    /// Helpers linked static with them (`helper` lines).
    pub helpers: Vec<String>,
    /// Helpers built for the host's profile, linked dynamically
    /// (`dynamic` lines).
    pub dynamic: Vec<String>,
    /// Each figure family's helpers (`family NAME [PACKAGE…]` lines).
    pub families: BTreeMap<String, Vec<String>>,
}

impl BuildSpec {
    /// `CARGO_TARGET_<TRIPLE>_RUSTFLAGS`: the flags for --target only.
    pub fn rustflags_var(&self) -> String {
        format!(
            "CARGO_TARGET_{}_RUSTFLAGS",
            self.target.to_uppercase().replace('-', "_")
        )
    }

    /// The static build's packages: those built every time, then the
    /// static helpers (in table order) that are `wanted` or already
    /// `built`. Keeping the built ones in the build keeps its package set,
    /// and so the features cargo unifies over it, the one `./x build` used
    /// last: neither build then recompiles the other's dependencies.
    pub fn static_packages(&self, wanted: &[&str], built: &dyn Fn(&str) -> bool) -> Vec<String> {
        let helpers = self
            .helpers
            .iter()
            .filter(|h| wanted.contains(&h.as_str()) || built(h));
        self.packages.iter().chain(helpers).cloned().collect()
    }

    /// A family's helpers, or `None` for a family the table does not know.
    pub fn family(&self, name: &str) -> Option<&[String]> {
        self.families.get(name).map(Vec::as_slice)
    }
}

/// Parses guest-build.txt (`key value…` lines, `#` comments).
pub fn parse_build_table(text: &str) -> BuildSpec {
    let mut spec = BuildSpec::default();
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
            "helper" => spec.helpers.push(value),
            "dynamic" => spec.dynamic.push(value),
            "family" => {
                let mut words = value.split_whitespace().map(str::to_string);
                if let Some(name) = words.next() {
                    spec.families.insert(name, words.collect());
                }
            }
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

/// The static build of `packages`, as a user would type it.
pub fn command_line(packages: &[String]) -> String {
    let b = build_spec();
    let packages: Vec<String> = packages.iter().map(|p| format!("-p {p}")).collect();
    format!(
        "{}='{}' cargo build --locked --release --target {} {}",
        b.rustflags_var(),
        b.rustflags,
        b.target,
        packages.join(" ")
    )
}

/// Returns the helper's binary, building it (incrementally) from the
/// source tree; see [`ensure_all`].
pub fn ensure(
    repo: &Path,
    which: Helper,
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf, GuestBinError> {
    let mut found = ensure_all(repo, &[which], progress)?;
    Ok(found.remove(0))
}

/// Returns each helper's binary, in the order given: `$env` if set, else
/// built (incrementally) from the source tree. The static ones come from
/// one cargo build of the packages built every time and these helpers
/// (plus those already built, [`BuildSpec::static_packages`]): a spec
/// that needs no testbed-flight compiles no DataFusion. A dynamic one is
/// built alone for the host (`./x build` builds both the same way).
pub fn ensure_all(
    repo: &Path,
    wanted: &[Helper],
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<PathBuf>, GuestBinError> {
    let path_of = |h: &Helper| {
        if h.dynamic {
            host_release_dir(repo).join(h.binary)
        } else {
            release_dir(repo).join(h.binary)
        }
    };
    let to_build: Vec<Helper> = wanted
        .iter()
        .filter(|h| std::env::var_os(h.env).is_none())
        .copied()
        .collect();
    if !to_build.is_empty() {
        let first = to_build[0];
        let missing = |name: String| GuestBinError::Missing {
            name,
            path: path_of(&first),
            env: first.env.into(),
        };
        if !repo.join("Cargo.toml").is_file() {
            // No tree to build from: the binaries must be there already.
            if let Some(h) = to_build.iter().find(|h| !path_of(h).is_file()) {
                return Err(GuestBinError::Missing {
                    name: h.binary.into(),
                    path: path_of(h),
                    env: h.env.into(),
                });
            }
        } else if let Some(why) = crate::host::paths::no_build() {
            return Err(missing(format!("{} ({why})", first.binary)));
        } else {
            build(repo, &to_build, progress)?;
        }
    }
    Ok(wanted
        .iter()
        .map(|h| std::env::var_os(h.env).map_or_else(|| path_of(h), PathBuf::from))
        .collect())
}

/// One static build for the static helpers of `helpers`, one host build
/// for each dynamic one.
fn build(
    repo: &Path,
    helpers: &[Helper],
    progress: &mut dyn FnMut(&str),
) -> Result<(), GuestBinError> {
    let spec = build_spec();
    let (dynamic, fixed): (Vec<Helper>, Vec<Helper>) =
        helpers.iter().copied().partition(|h| h.dynamic);
    if !fixed.is_empty() {
        let wanted: Vec<&str> = fixed.iter().map(|h| h.package).collect();
        let dir = release_dir(repo);
        // A helper's binary is named as its package.
        let packages = spec.static_packages(&wanted, &|p| dir.join(p).is_file());
        let names: Vec<&str> = fixed.iter().map(|h| h.binary).collect();
        progress(&format!(
            "building {} (static, for the guest: {})",
            names.join(", "),
            packages.join(", ")
        ));
        let mut cmd = cargo(repo);
        cmd.args(["--target", &spec.target])
            .env(spec.rustflags_var(), &spec.rustflags);
        for p in &packages {
            cmd.args(["--package", p]);
        }
        run_build(cmd, &names.join(", "), command_line(&packages))?;
        if let Some(h) = fixed.iter().find(|h| !is_static(&dir.join(h.binary))) {
            return Err(GuestBinError::NotStatic(dir.join(h.binary)));
        }
    }
    for h in dynamic {
        progress(&format!(
            "building {} (dynamic: the host, or a Debian root image)",
            h.binary
        ));
        let mut cmd = cargo(repo);
        cmd.args(["--package", h.package]);
        run_build(
            cmd,
            h.binary,
            format!("cargo build --locked --release -p {}", h.package),
        )?;
    }
    Ok(())
}

/// `cargo build --locked --release` in `repo`, with the environment of
/// the build `./x build` runs.
fn cargo(repo: &Path) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(repo)
        .args(["build", "--locked", "--release"]);
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
    cmd
}

fn run_build(mut cmd: Command, name: &str, command: String) -> Result<(), GuestBinError> {
    let started = std::time::Instant::now();
    let status = run_contained(&mut cmd).map_err(|e| GuestBinError::Build {
        name: name.into(),
        status: e.to_string(),
        command: command.clone(),
    });
    crate::host::phases::add("rust build", started.elapsed());
    let status = status?;
    if !status.success() {
        return Err(GuestBinError::Build {
            name: name.into(),
            status: status.to_string(),
            command,
        });
    }
    Ok(())
}

/// `testbed flight …` and `testbed asam …` run the helper binaries on
/// the host (the CLI links none of their code: DataFusion, tonic and
/// noodles stay in the helpers).
#[derive(Debug, thiserror::Error)]
pub enum HelperExecError {
    #[error(
        "{binary}: ${env} names {path}, which is not a file; unset it or point it at a built {binary}"
    )]
    EnvNotAFile {
        binary: String,
        env: String,
        path: PathBuf,
    },
    #[error(
        "{binary} not found: ${env} is not set, there is no {beside} beside this testbed, and it is not on PATH; build it with {build}, or set ${env} to its path"
    )]
    NotFound {
        binary: String,
        env: String,
        /// The path beside the running `testbed` that was tried.
        beside: String,
        /// The command that puts it there.
        build: String,
    },
    #[error("cannot run {path}: {source}")]
    Exec {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where a helper is looked for on the host: `$env` (which must name a
/// file), then beside `exe` (the running `testbed`), then each directory
/// of `path_var`.
pub fn find_on_host(
    which: Helper,
    env_value: Option<std::ffi::OsString>,
    exe: Option<&Path>,
    path_var: Option<std::ffi::OsString>,
) -> Result<PathBuf, HelperExecError> {
    if let Some(p) = env_value.filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(HelperExecError::EnvNotAFile {
                binary: which.binary.into(),
                env: which.env.into(),
                path: p,
            })
        };
    }
    let exe_dir = exe.and_then(Path::parent);
    if let Some(p) = exe_dir.map(|d| d.join(which.binary))
        && p.is_file()
    {
        return Ok(p);
    }
    if let Some(p) = path_var.as_deref().and_then(|paths| {
        std::env::split_paths(paths)
            .filter(|d| !d.as_os_str().is_empty())
            .map(|d| d.join(which.binary))
            .find(|p| p.is_file())
    }) {
        return Ok(p);
    }
    Err(HelperExecError::NotFound {
        binary: which.binary.into(),
        env: which.env.into(),
        beside: exe_dir.map_or_else(
            || which.binary.to_string(),
            |d| d.join(which.binary).display().to_string(),
        ),
        build: build_hint(which, exe_dir),
    })
}

/// The build that puts `which` beside a `testbed` in `exe_dir`: the
/// profile's directory says which one made that `testbed`.
fn build_hint(which: Helper, exe_dir: Option<&Path>) -> String {
    let name = |p: &Path| p.file_name().and_then(|n| n.to_str()).map(str::to_owned);
    let dir = exe_dir.and_then(name);
    let parent = exe_dir.and_then(Path::parent).and_then(name);
    let b = build_spec();
    match (dir.as_deref(), parent) {
        (Some("debug"), _) => format!("`cargo build -p {}`", which.package),
        (Some("release"), Some(t)) if t == b.target && !which.dynamic => format!(
            "`./x build` (or `{}='{}' cargo build --release --target {} -p {}`)",
            b.rustflags_var(),
            b.rustflags,
            b.target,
            which.package
        ),
        _ => format!("`cargo build --release -p {}`", which.package),
    }
}

/// Replaces this process with the helper, `args` passed on unchanged: its
/// stdio, exit code and signals are the command's own. Returns only when
/// the helper cannot be found or started.
pub fn exec_on_host(which: Helper, args: &[std::ffi::OsString]) -> HelperExecError {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().ok();
    let path = match find_on_host(
        which,
        std::env::var_os(which.env),
        exe.as_deref(),
        std::env::var_os("PATH"),
    ) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let source = Command::new(&path).args(args).exec();
    HelperExecError::Exec { path, source }
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
    crate::inputs::image::libs::elf_deps(path).is_ok_and(|d| d.is_static())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_static_reads_the_headers_and_runs_nothing() {
        assert!(!is_static(Path::new("/bin/ls")), "/bin/ls is dynamic");
        if let Some(busybox) = crate::host::paths::busybox() {
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
    fn a_host_helper_is_found_by_variable_then_beside_testbed_then_on_path() {
        let t = tempfile::tempdir().unwrap();
        let dir = |n: &str| {
            let d = t.path().join(n);
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        let (bin, beside, on_path) = (dir("bin/debug"), dir("other"), dir("path"));
        let exe = bin.join("testbed");
        let put = |d: &Path| {
            let p = d.join(FLIGHT.binary);
            std::fs::write(&p, "").unwrap();
            p
        };
        let path_var =
            Some(std::env::join_paths([t.path().join("none"), on_path.clone()]).unwrap());
        let find = |env: Option<&Path>| {
            find_on_host(FLIGHT, env.map(Into::into), Some(&exe), path_var.clone())
        };
        let e = find(None).unwrap_err().to_string();
        for part in [
            "testbed-flight not found",
            "$TESTBED_FLIGHT_BIN is not set",
            &bin.join("testbed-flight").display().to_string(),
            "not on PATH",
            "`cargo build -p testbed-flight`",
        ] {
            assert!(e.contains(part), "no {part:?} in {e}");
        }
        let p = put(&on_path);
        assert_eq!(find(None).unwrap(), p);
        let b = put(&bin);
        assert_eq!(find(None).unwrap(), b, "beside testbed before PATH");
        let v = put(&beside);
        assert_eq!(find(Some(&v)).unwrap(), v, "the variable before all");
        let missing = beside.join("gone");
        let e = find(Some(&missing)).unwrap_err().to_string();
        assert!(
            e.contains(&format!("$TESTBED_FLIGHT_BIN names {}", missing.display())),
            "{e}"
        );
        // An empty variable counts as unset, as in the guest.
        assert_eq!(find(Some(Path::new(""))).unwrap(), b);
    }

    #[test]
    fn the_build_hint_is_the_build_of_the_running_testbeds_directory() {
        let hint = |d: &str| build_hint(ASAM, Some(Path::new(d)));
        assert_eq!(hint("/t/debug"), "`cargo build -p testbed-asam`");
        assert_eq!(
            hint("/t/release"),
            "`cargo build --release -p testbed-asam`"
        );
        let b = build_spec();
        let h = hint(&format!("/t/{}/release", b.target));
        assert!(h.starts_with("`./x build`"), "{h}");
        assert!(
            h.contains(&format!("{}='{}'", b.rustflags_var(), b.rustflags)),
            "{h}"
        );
        assert!(h.contains("-p testbed-asam`"), "{h}");
        // A dynamic helper is not built for the static target.
        assert_eq!(
            build_hint(ODBC, Some(Path::new(&format!("/t/{}/release", b.target)))),
            "`cargo build --release -p testbed-odbc`"
        );
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
        // Built every time: the host CLI and the agent, nothing else.
        assert_eq!(b.packages, ["testbed", AGENT.package], "{b:?}");
        // Every helper the registry puts in an image, static or dynamic as
        // it is linked; a helper's binary is named as its package.
        for h in [FLIGHT, ASAM, ODBC] {
            let list = if h.dynamic { &b.dynamic } else { &b.helpers };
            assert!(
                list.iter().any(|p| p == h.package),
                "{b:?} lacks {}",
                h.package
            );
            assert_eq!(h.binary, h.package);
        }
        assert_eq!(b.families.len(), 4, "{b:?}");
        assert_eq!(b.family("bpf-storage"), Some(&[][..]));
        assert_eq!(b.family("arrowsam"), Some(&[ASAM.package.to_string()][..]));
        assert_eq!(b.family("nosuch"), None);
        // ./x reads the same file with the same rules.
        let x = std::fs::read_to_string(crate::host::paths::repo_root().join("x")).unwrap();
        assert!(x.contains("orchestrator/guest-build.txt"));
        assert!(x.contains("build_field helper") && x.contains("build_field dynamic"));
    }

    /// ./x's reading of the same table: a family's helpers, every helper
    /// without one, and the family of what `./x reproduce` is given.
    #[test]
    fn x_builds_the_helpers_of_the_family_it_reproduces() {
        let root = crate::host::paths::repo_root();
        let x = std::fs::read_to_string(root.join("x")).unwrap();
        let function = |name: &str| {
            let start = x.find(&format!("\n{name}() {{")).expect(name) + 1;
            let len = x[start..].find("\n}\n").map_or(x.len() - start, |e| e + 3);
            let one_line = x[start..].find('\n').unwrap_or(0);
            // A one-line function ends on its own line.
            if x[start..start + one_line].ends_with('}') {
                x[start..start + one_line + 1].to_string()
            } else {
                x[start..start + len].to_string()
            }
        };
        let script = format!(
            "ROOT={root}\nGUEST_BUILD=$ROOT/orchestrator/guest-build.txt\n{}{}{}\n\
             echo \"flight: $(family_helpers flight | tr '\\n' ' ')\"\n\
             echo \"bpf: $(family_helpers bpf-storage | tr '\\n' ' ')\"\n\
             echo \"all: $(family_helpers | tr '\\n' ' ')\"\n\
             family_helpers nosuch >/dev/null || echo 'nosuch: unknown'\n\
             echo \"figure: $(reproduce_family --accel tcg bpf-fig1 --quick)\"\n\
             echo \"family: $(reproduce_family arrowsam --quick)\"\n\
             echo \"none: $(reproduce_family --quick)\"\n\
             echo \"neither: $(reproduce_family nosuch)\"\n",
            function("build_field"),
            function("family_helpers"),
            function("reproduce_family"),
            root = root.display(),
        );
        let out = Command::new("bash").args(["-c", &script]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            [
                "flight: testbed-flight testbed-asam testbed-odbc ",
                "bpf: ",
                "all: testbed-flight testbed-asam testbed-odbc ",
                "nosuch: unknown",
                "figure: bpf-storage",
                "family: arrowsam",
                "none: ",
                "neither: ",
            ],
            "{script}"
        );
    }

    #[test]
    fn the_static_build_has_the_wanted_helpers_and_those_already_built() {
        let b = parse_build_table(
            "# c\ntarget t\nrustflags -C x\npackage host\npackage agent\n\
             helper big\nhelper small\ndynamic dyn\nfamily none\nfamily f small dyn\n",
        );
        assert_eq!(b.rustflags, "-C x");
        assert_eq!(
            b.family("f"),
            Some(&["small".to_string(), "dyn".to_string()][..])
        );
        assert_eq!(b.family("none"), Some(&[][..]));
        let nothing_built = |_: &str| false;
        assert_eq!(b.static_packages(&[], &nothing_built), ["host", "agent"]);
        assert_eq!(
            b.static_packages(&["small"], &nothing_built),
            ["host", "agent", "small"]
        );
        // Table order, and a built helper stays in the set.
        assert_eq!(
            b.static_packages(&["small"], &|p| p == "big"),
            ["host", "agent", "big", "small"]
        );
        // A dynamic helper is never in the static build.
        assert_eq!(
            b.static_packages(&["dyn"], &|p| p == "dyn"),
            ["host", "agent"]
        );
    }
}
