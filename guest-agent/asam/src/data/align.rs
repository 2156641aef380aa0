//! bwa: the index, one `bwa mem` per read group, and the merge of their
//! outputs into one unsorted SAM holding every `@RG`.
//!
//! `-K` fixes how many bases bwa reads per batch; without it the batch
//! (and so the insert-size estimate each batch uses to pair reads) grows
//! with `-t`, and the output depends on the thread count. With it the SAM
//! body is the same for any `-t` (a test checks 1 against 2).

use std::ffi::OsString;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::tools::BWA;
use crate::{AsamError, Result};

/// bwa mem's `-K`: bases per batch, its own default for one thread.
pub const BATCH_BASES: u64 = 10_000_000;

/// One read group's input to bwa mem.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    /// The tab-separated `@RG` line.
    pub rg_line: String,
    pub reads1: PathBuf,
    pub reads2: PathBuf,
}

/// `bwa index <reference>` (writes `<reference>.bwt` and friends next to it).
pub fn index(reference: &Path) -> Result<()> {
    BWA.run(&[OsString::from("index"), reference.as_os_str().to_owned()])
        .map(|_| ())
}

/// The exact argv (`bwa` first) that aligns one read group: what
/// [`align`] runs, for a driver that times or pipes bwa itself.
pub fn mem_argv(reference: &Path, lane: &Lane, threads: usize) -> Vec<OsString> {
    let mut argv: Vec<OsString> = ["bwa", "mem", "-K", &BATCH_BASES.to_string(), "-v", "1"]
        .iter()
        .map(OsString::from)
        .collect();
    argv.push("-t".into());
    argv.push(threads.max(1).to_string().into());
    // bwa wants the tabs escaped and refuses literal ones.
    argv.push("-R".into());
    argv.push(lane.rg_line.replace('\t', "\\t").into());
    argv.push(reference.into());
    argv.push(lane.reads1.clone().into());
    argv.push(lane.reads2.clone().into());
    argv
}

/// Aligns every lane into `out`: parts in `workdir`, then merged. The
/// header is bwa's `@SQ` lines, every `@RG` and one `@PG` whose command
/// line leaves out paths and threads (so the file does not depend on
/// them).
pub fn align(
    reference: &Path,
    lanes: &[Lane],
    threads: usize,
    workdir: &Path,
    out: &Path,
) -> Result<()> {
    let mut parts = Vec::new();
    for (i, lane) in lanes.iter().enumerate() {
        let part = workdir.join(format!("part{i}.sam"));
        let argv = mem_argv(reference, lane, threads);
        BWA.run_to_file(&argv[1..], &part)?;
        parts.push(part);
    }
    let pg = format!(
        "@PG\tID:bwa\tPN:bwa\tVN:{}\tCL:bwa mem -K {BATCH_BASES} -v 1 -R <read group> {} <R1> <R2>",
        bwa_version().unwrap_or_else(|_| "unknown".into()),
        reference
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    let rg: Vec<&str> = lanes.iter().map(|l| l.rg_line.as_str()).collect();
    merge(&parts, &rg, &pg, out)?;
    for p in &parts {
        std::fs::remove_file(p).map_err(|e| AsamError::io(p, e))?;
    }
    Ok(())
}

/// Concatenates SAM `parts` under one header: the first part's `@SQ`
/// lines, then `rg_lines`, then `pg_line`; the parts' own `@RG`/`@PG`
/// are dropped.
pub fn merge(parts: &[PathBuf], rg_lines: &[&str], pg_line: &str, out: &Path) -> Result<()> {
    let io = |e| AsamError::io(out, e);
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out).map_err(io)?);
    for (i, part) in parts.iter().enumerate() {
        let pio = |e| AsamError::io(part, e);
        let r = BufReader::with_capacity(1 << 20, std::fs::File::open(part).map_err(pio)?);
        let mut in_header = true;
        for line in r.split(b'\n') {
            let line = line.map_err(pio)?;
            if in_header && line.first() == Some(&b'@') {
                if i == 0 && line.starts_with(b"@SQ\t") {
                    w.write_all(&line).map_err(io)?;
                    w.write_all(b"\n").map_err(io)?;
                }
                continue;
            }
            if in_header {
                in_header = false;
                if i == 0 {
                    for rg in rg_lines {
                        writeln!(w, "{rg}").map_err(io)?;
                    }
                    writeln!(w, "{pg_line}").map_err(io)?;
                }
            }
            w.write_all(&line).map_err(io)?;
            w.write_all(b"\n").map_err(io)?;
        }
        if in_header && i == 0 {
            // The first part holds no reads: still write the header.
            for rg in rg_lines {
                writeln!(w, "{rg}").map_err(io)?;
            }
            writeln!(w, "{pg_line}").map_err(io)?;
        }
    }
    w.flush().map_err(io)
}

/// bwa's version ("0.7.17-r1188"), from the usage text it prints when
/// run without arguments (it has no --version).
pub fn bwa_version() -> Result<String> {
    let out = std::process::Command::new(BWA.name)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| AsamError::Spawn {
            tool: BWA.name.into(),
            package: BWA.package.into(),
            source: e,
        })?;
    let text = String::from_utf8_lossy(&out.stderr);
    text.lines()
        .find_map(|l| l.strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| AsamError::Invalid(format!("bwa printed no version: {text:.200}")))
}
