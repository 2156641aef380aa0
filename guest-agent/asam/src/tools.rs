//! The external programs (bwa, ART, Picard, Sambamba, samtools): how to
//! start them and what an error says when they fail.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};

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
pub const ART: Program = Program {
    name: "art_illumina",
    package: "art-nextgen-simulation-tools",
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

impl Program {
    /// Runs to completion and returns stdout; a non-zero exit is an error
    /// carrying the command and the end of stderr.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Vec<u8>> {
        self.run_in(args, None)
    }

    /// As `run`, with stdout going to `out` instead.
    pub fn run_to_file<S: AsRef<OsStr>>(&self, args: &[S], out: &Path) -> Result<()> {
        self.run_in(args, Some(out)).map(|_| ())
    }

    fn run_in<S: AsRef<OsStr>>(&self, args: &[S], out: Option<&Path>) -> Result<Vec<u8>> {
        let mut cmd = Command::new(self.name);
        cmd.args(args).stdin(Stdio::null()).stderr(Stdio::piped());
        match out {
            Some(path) => {
                let f = std::fs::File::create(path).map_err(|e| AsamError::io(path, e))?;
                cmd.stdout(f);
            }
            None => {
                cmd.stdout(Stdio::piped());
            }
        }
        let output = cmd.output().map_err(|source| AsamError::Spawn {
            tool: self.name.into(),
            package: self.package.into(),
            source,
        })?;
        if !output.status.success() {
            let line: Vec<String> = args
                .iter()
                .map(|a| a.as_ref().to_string_lossy().into_owned())
                .collect();
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
            return Err(AsamError::Tool {
                tool: format!("{} {}", self.name, line.join(" ")),
                status: output.status.to_string(),
                stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            });
        }
        Ok(output.stdout)
    }
}
