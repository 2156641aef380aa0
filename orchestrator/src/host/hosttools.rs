//! The host's tools: one table (`orchestrator/host-tools.txt`) of every
//! program or file the build, the runs and the tests call, the package that
//! provides it and the steps that need it. `./x setup` installs from the
//! same table; here it serves `testbed doctor` and the preflight that runs
//! before each long step, so a missing package is named in one line at the
//! start instead of after a ten-minute build.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The table, compiled in so the binary checks what its source declared.
pub const TABLE: &str = include_str!("../../host-tools.txt");

/// The steps a tool can be needed for (the table's NEEDS column).
pub const NEEDS: &[&str] = &[
    "build",
    "vm",
    "kernel-fetch",
    "kernel-build",
    "bpf",
    "fio",
    "asam",
    "postgres",
    "odbc",
    "pyarrow",
    "adbc",
    "iperf3",
    "report",
    "provenance",
    "slurm",
    "image",
    "test",
];

/// What a step is called in messages.
pub fn describe(need: &str) -> &'static str {
    match need {
        "build" => "building the testbed",
        "vm" => "booting VMs",
        "kernel-fetch" => "fetching the Debian cloud kernel",
        "kernel-build" => "building a kernel from source",
        "bpf" => "building the BPF programs",
        "fio" => "fio runs",
        "asam" => "the ArrowSAM comparison",
        "postgres" => "the PostgreSQL comparison",
        "odbc" => "the ODBC clients",
        "pyarrow" => "the pyarrow peer",
        "adbc" => "the ADBC ingest client",
        "iperf3" => "measuring the VM-to-VM link",
        "report" => "checking reports in a browser",
        "provenance" => "recording the git commit",
        "slurm" => "the Slurm executor",
        "image" => "building guest root filesystem images",
        "test" => "the test suite",
        _ => "an unknown step",
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    /// A command name, an absolute path, or `py:MODULE`.
    pub tool: String,
    /// A Debian package, or `pip:NAME`.
    pub package: String,
    pub needs: Vec<String>,
    /// Line in the table, for error messages.
    pub line: usize,
}

impl Tool {
    /// How to install it, as a user would type it.
    pub fn install_hint(&self) -> String {
        match self.package.strip_prefix("pip:") {
            Some(p) => format!("pip install {p}"),
            None => format!("apt-get install {}", self.package),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("host-tools.txt:{line}: {message}")]
pub struct TableError {
    pub line: usize,
    pub message: String,
}

/// Parses a table in the format of `host-tools.txt`.
pub fn parse(text: &str) -> Result<Vec<Tool>, TableError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let body = raw.split('#').next().unwrap_or("").trim();
        if body.is_empty() {
            continue;
        }
        let cols: Vec<&str> = body.split_whitespace().collect();
        let [tool, package, needs] = cols[..] else {
            return Err(TableError {
                line,
                message: format!(
                    "expected `TOOL PACKAGE NEEDS`, found {} columns",
                    cols.len()
                ),
            });
        };
        let needs: Vec<String> = needs.split(',').map(str::to_string).collect();
        if let Some(bad) = needs.iter().find(|n| !NEEDS.contains(&n.as_str())) {
            return Err(TableError {
                line,
                message: format!("unknown need `{bad}` (known: {})", NEEDS.join(", ")),
            });
        }
        out.push(Tool {
            tool: tool.into(),
            package: package.into(),
            needs,
            line,
        });
    }
    Ok(out)
}

/// The compiled-in table.
pub fn table() -> Result<Vec<Tool>, TableError> {
    parse(TABLE)
}

/// Why a tool was not found.
#[derive(Debug, thiserror::Error)]
pub enum ToolNotFound {
    #[error("not found")]
    NoProgram,
    #[error("{python}: {source}")]
    NoPython {
        python: String,
        source: std::io::Error,
    },
    #[error("{python} cannot import {module}")]
    NoModule { python: String, module: String },
}

/// Where a tool is found (a path, or a Python module and its version), or
/// why not.
pub fn locate(tool: &str) -> Result<String, ToolNotFound> {
    if let Some(module) = tool.strip_prefix("py:") {
        let python = std::env::var("TESTBED_PYTHON").unwrap_or_else(|_| "python3".into());
        let out = Command::new(&python)
            .args([
                "-c",
                &format!("import {module}; print({module}.__version__)"),
            ])
            .output();
        let out = match out {
            Ok(out) => out,
            Err(source) => return Err(ToolNotFound::NoPython { python, source }),
        };
        return if out.status.success() {
            Ok(format!(
                "{module} {}",
                String::from_utf8_lossy(&out.stdout).trim()
            ))
        } else {
            Err(ToolNotFound::NoModule {
                python,
                module: module.to_string(),
            })
        };
    }
    find_program(tool)
        .map(|p| p.display().to_string())
        .ok_or(ToolNotFound::NoProgram)
}

/// The tools of some steps that are absent, each once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub needs: Vec<String>,
    pub tools: Vec<Tool>,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let steps: Vec<&str> = self.needs.iter().map(|n| describe(n)).collect();
        let tools: Vec<String> = self
            .tools
            .iter()
            .map(|t| format!("{} ({})", t.tool, t.install_hint()))
            .collect();
        write!(
            f,
            "missing for {}: {}; `./x setup` installs every tool the testbed needs",
            steps.join(" and "),
            tools.join(", ")
        )
    }
}

impl std::error::Error for Missing {}

/// The preflight: every tool the named steps need must be present. Fails
/// with one line naming each missing tool and its package.
pub fn preflight(needs: &[&str]) -> Result<(), PreflightError> {
    let table = table().map_err(PreflightError::Table)?;
    check_with(&table, needs, &|t| locate(t).is_ok()).map_err(PreflightError::Missing)
}

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error("{0}")]
    Missing(Missing),
    #[error("the compiled-in tool table is broken: {0}")]
    Table(TableError),
}

/// As [`preflight`], with the presence test given (for tests).
pub fn check_with(
    table: &[Tool],
    needs: &[&str],
    present: &dyn Fn(&str) -> bool,
) -> Result<(), Missing> {
    let mut missing: Vec<Tool> = Vec::new();
    for t in table {
        let wanted = t.needs.iter().any(|n| needs.contains(&n.as_str()));
        if wanted && !missing.iter().any(|m| m.tool == t.tool) && !present(&t.tool) {
            missing.push(t.clone());
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let mut steps: Vec<String> = Vec::new();
    for n in needs {
        let hit = missing.iter().any(|t| t.needs.iter().any(|x| x == n));
        if hit && !steps.iter().any(|s| s == n) {
            steps.push(n.to_string());
        }
    }
    Err(Missing {
        needs: steps,
        tools: missing,
    })
}

/// The Debian packages of the table (for `./x setup`; pip ones excluded).
pub fn apt_packages(table: &[Tool]) -> Vec<String> {
    let mut v: Vec<String> = table
        .iter()
        .filter(|t| !t.package.starts_with("pip:"))
        .map(|t| t.package.clone())
        .collect();
    v.sort();
    v.dedup();
    v
}

/// A program by name on $PATH, then in the sbin and bin directories (which
/// a non-root PATH may lack); a name with a slash is taken as a path.
pub fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    #[test]
    fn the_compiled_in_table_parses_and_covers_every_need() {
        let t = table().unwrap();
        assert!(t.len() > 30, "{}", t.len());
        for n in NEEDS {
            assert!(
                t.iter().any(|x| x.needs.iter().any(|y| y == n)),
                "no tool needs {n}"
            );
            assert_ne!(describe(n), "an unknown step", "{n}");
        }
        // The tool the kernel's headers_install calls: found missing on a
        // fresh machine once.
        let rsync = t.iter().find(|x| x.tool == "rsync").unwrap();
        assert!(rsync.needs.contains(&"kernel-build".to_string()));
        assert!(apt_packages(&t).contains(&"rsync".to_string()));
        assert!(!apt_packages(&t).iter().any(|p| p.starts_with("pip:")));
    }

    #[test]
    fn a_bad_line_is_named_with_its_number() {
        let e = parse("# c\nmake build-essential build\nrsync rsync\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("3 columns") || e.message.contains("2 columns"));
        let e = parse("make build-essential bulid\n").unwrap_err();
        assert!(e.to_string().contains("unknown need `bulid`"), "{e}");
    }

    #[test]
    fn the_preflight_names_each_missing_tool_and_package_in_one_line() {
        let table = parse(
            "make build-essential kernel-build,bpf\nrsync rsync kernel-build\n\
             pahole dwarves kernel-build\nfio fio fio\npy:pyarrow pip:pyarrow pyarrow\n",
        )
        .unwrap();
        let present = |t: &str| t == "make";
        let err = check_with(&table, &["kernel-build"], &present).unwrap_err();
        let line = err.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with("missing for building a kernel from source: rsync (apt-get install rsync), pahole (apt-get install dwarves)"),
            "{line}"
        );
        assert!(!line.contains("fio"), "{line}");
        assert!(check_with(&table, &["bpf"], &present).is_ok());
        let err = check_with(&table, &["fio", "pyarrow"], &|_| false).unwrap_err();
        assert_eq!(err.needs, vec!["fio", "pyarrow"]);
        assert!(err.to_string().contains("pyarrow (pip install pyarrow)"));
    }

    /// Commands every Debian system has (essential packages) or that run
    /// in the guest (busybox applets), and names tests use to be absent.
    const NOT_HOST_TOOLS: &[&str] = &[
        "sh",
        "id",
        "chmod",
        "kill",
        "sleep",
        "yes",
        "timeout",
        "/bin/ip",
        "/nonexistent/prog",
        "/nonexistent/tool",
        "bpftool-not-here",
        // The Rust toolchain comes from rust-toolchain.toml, not apt.
        "rustc",
    ];

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && !p.ends_with("target") {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// The static half of the fresh-machine check (the other half builds a
    /// Debian root and runs `./x setup` in it): every program the code
    /// starts by name is in the table, so `./x setup` installs it.
    #[test]
    fn every_program_the_code_starts_is_in_the_table() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = Vec::new();
        for d in ["orchestrator", "guest-agent"] {
            rust_files(&root.join(d), &mut files);
        }
        assert!(files.len() > 50, "{}", files.len());
        let table = table().unwrap();
        let listed = |name: &str| table.iter().any(|t| t.tool == name);
        let mut unlisted = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            // Every literal program name started; the ArrowSAM tools by name.
            let mut names: Vec<&str> = text
                .split("Command::new(\"")
                .skip(1)
                .filter_map(|rest| rest.split('"').next())
                .collect();
            if f.ends_with("asam/src/tools.rs") {
                names.extend(
                    text.split("name: \"")
                        .skip(1)
                        .filter_map(|rest| rest.split('"').next()),
                );
            }
            for n in names {
                if !listed(n) && !NOT_HOST_TOOLS.contains(&n) {
                    unlisted.push(format!("{n} ({})", f.display()));
                }
            }
        }
        assert!(
            unlisted.is_empty(),
            "started by the code but not in host-tools.txt: {unlisted:?}"
        );
    }

    #[test]
    fn tools_are_found_on_path_or_by_absolute_path() {
        assert!(locate("sh").is_ok());
        assert!(locate("/bin/sh").is_ok());
        assert!(locate("definitely-not-a-tool-xyz").is_err());
        assert!(locate("/nonexistent/file.h").is_err());
    }
}
