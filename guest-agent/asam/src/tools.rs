//! The external programs (bwa, Picard, Sambamba, samtools, samblaster,
//! bamsormadup): how to start them, what they used, and what an error says
//! when they fail.

use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

pub use testbed_proc::Usage;
use testbed_proc::{Group, RunError};

use crate::{AsamError, Result};

/// A program and the Debian package that provides it.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    pub name: &'static str,
    pub package: &'static str,
}

pub const BWA: Program = Program {
    name: "bwa",
    package: "bwa",
};
pub const PICARD: Program = Program {
    name: "PicardCommandLine",
    package: "picard-tools",
};
pub const SAMBAMBA: Program = Program {
    name: "sambamba",
    package: "sambamba",
};
pub const SAMTOOLS: Program = Program {
    name: "samtools",
    package: "samtools",
};

pub const SAMBLASTER: Program = Program {
    name: "samblaster",
    package: "samblaster",
};
pub const BAMSORMADUP: Program = Program {
    name: "bamsormadup",
    package: "biobambam2",
};

/// Where a measured run's standard streams go.
#[derive(Debug, Clone, Copy, Default)]
pub struct Streams<'a> {
    /// Read as standard input (default: /dev/null).
    pub stdin: Option<&'a Path>,
    /// Standard output written here (default: returned).
    pub stdout: Option<&'a Path>,
}

/// The argv that starts Picard. Under QEMU's multi-threaded TCG
/// (`$TESTBED_ACCEL` = "tcg", set by the agent) the JVM's JIT-compiled code
/// crashes now and then (SIGSEGV/SIGILL at the entry of a C1-compiled
/// method: code one vCPU patches while another runs it); pinned to one
/// vCPU it runs. Only there: on real CPUs Picard keeps all of them.
pub fn picard_argv() -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = Vec::new();
    if std::env::var("TESTBED_ACCEL").is_ok_and(|a| a == "tcg") {
        argv.extend(["taskset".into(), "-c".into(), "0".into()]);
    }
    argv.push(PICARD.name.into());
    argv
}

impl Program {
    /// Runs to completion and returns stdout; a non-zero exit is an error
    /// carrying the command and the end of stderr.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Vec<u8>> {
        self.run_in(args, Streams::default()).map(|(out, _)| out)
    }

    /// As `run`, with stdout going to `out` instead.
    pub fn run_to_file<S: AsRef<OsStr>>(&self, args: &[S], out: &Path) -> Result<()> {
        self.run_measured(
            args,
            Streams {
                stdin: None,
                stdout: Some(out),
            },
        )
        .map(|_| ())
    }

    /// Runs to completion with `streams`; what the tool used (its peak
    /// memory, CPU), which a caller that runs it again for the same
    /// stage needs to combine by taking the larger peak.
    pub fn run_measured<S: AsRef<OsStr>>(&self, args: &[S], streams: Streams) -> Result<Usage> {
        self.run_in(args, streams).map(|(_, usage)| usage)
    }

    /// As `run`, returning what the tool used instead of its output.
    pub fn run_usage<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Usage> {
        self.run_measured(args, Streams::default())
    }

    /// Runs the tool in its own process group (killed with us, and with
    /// everything it started once it exits: see testbed_proc::Group).
    fn run_in<S: AsRef<OsStr>>(&self, args: &[S], streams: Streams) -> Result<(Vec<u8>, Usage)> {
        let mut cmd = if self.name == PICARD.name {
            let argv = picard_argv();
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        } else {
            Command::new(self.name)
        };
        cmd.args(args).stderr(Stdio::piped());
        match streams.stdin {
            Some(path) => {
                let f = std::fs::File::open(path).map_err(|e| AsamError::io(path, e))?;
                cmd.stdin(f);
            }
            None => {
                cmd.stdin(Stdio::null());
            }
        }
        match streams.stdout {
            Some(path) => {
                let f = std::fs::File::create(path).map_err(|e| AsamError::io(path, e))?;
                cmd.stdout(f);
            }
            None => {
                cmd.stdout(Stdio::piped());
            }
        }
        let mut child = Group::spawn(&mut cmd).map_err(|e| match e {
            RunError::Spawn { source, .. } => AsamError::Spawn {
                tool: self.name.into(),
                package: self.package.into(),
                source,
            },
            e => AsamError::Invalid(e.to_string()),
        })?;
        // stderr on a thread, stdout here: neither pipe can fill and block.
        let stderr = child.take_stderr().map(|mut e| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = e.read_to_end(&mut buf);
                buf
            })
        });
        let mut stdout = Vec::new();
        let read = match child.take_stdout() {
            Some(mut o) => o.read_to_end(&mut stdout).map(|_| ()),
            None => Ok(()),
        };
        let status = child
            .wait()
            .map_err(|e| AsamError::Invalid(format!("wait for {}: {e}", self.name)))?;
        let usage = child.usage();
        let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
        read.map_err(|e| AsamError::Invalid(format!("read the output of {}: {e}", self.name)))?;
        if !status.success() {
            let line: Vec<String> = args
                .iter()
                .map(|a| a.as_ref().to_string_lossy().into_owned())
                .collect();
            let stderr = String::from_utf8_lossy(&stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
            return Err(AsamError::Tool {
                tool: format!("{} {}", self.name, line.join(" ")),
                status: status.to_string(),
                stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            });
        }
        let usage = usage.ok_or_else(|| {
            AsamError::Invalid(format!("{}: no resource usage after wait", self.name))
        })?;
        Ok((stdout, usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_tool_reports_its_stderr_and_a_missing_one_its_package() {
        let sh = Program {
            name: "sh",
            package: "dash",
        };
        assert_eq!(sh.run(&["-c", "echo out"]).unwrap(), b"out\n");
        let e = sh
            .run(&["-c", "echo bad >&2; exit 3"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad") && e.contains("exit status: 3"), "{e}");
        let missing = Program {
            name: "/nonexistent/tool",
            package: "some-package",
        };
        let e = missing.run(&["x"]).unwrap_err().to_string();
        assert!(e.contains("apt-get install some-package"), "{e}");
    }
}
