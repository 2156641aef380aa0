//! A seeded synthetic data set: random reference, `bwa index`, 2×100 bp
//! reads simulated by ART, injected PCR duplicates, `bwa mem` to an
//! unsorted `aligned.sam`. Cached by its parameters.

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::tools::{ART, BWA};
use crate::{AsamError, Result};

#[derive(Debug, Clone, Serialize)]
pub struct DatasetParams {
    /// A label ("tiny", "small"); part of the cache directory name.
    pub name: String,
    pub chromosomes: u32,
    pub chromosome_length: u64,
    /// Mean read coverage ART simulates (before duplicates are added).
    pub coverage: f64,
    /// Fraction of read pairs copied once more as PCR duplicates.
    pub dup_fraction: f64,
    pub seed: u64,
}

pub const READ_LENGTH: u32 = 100;

impl DatasetParams {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(AsamError::Invalid(m.to_string()));
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return bad("dataset name: use letters, digits, - _ .");
        }
        if self.chromosomes == 0 || self.chromosomes > 100 {
            return bad("chromosomes: 1..=100");
        }
        if self.chromosome_length < 2000 {
            return bad("chromosome length: at least 2000 (pairs span ~300 bp)");
        }
        if !(self.coverage > 0.0 && self.coverage <= 1000.0) {
            return bad("coverage: > 0 and <= 1000");
        }
        if !(0.0..1.0).contains(&self.dup_fraction) {
            return bad("dup fraction: 0 <= f < 1");
        }
        Ok(())
    }

    /// The cache directory under `root`: every parameter is in the name.
    pub fn dir(&self, root: &Path) -> PathBuf {
        root.join(format!(
            "{}-c{}-l{}-x{}-d{}-s{}",
            self.name,
            self.chromosomes,
            self.chromosome_length,
            self.coverage,
            self.dup_fraction,
            self.seed
        ))
    }
}

/// What `prepare` made (or found cached); `prepare` prints it as its one
/// JSON line (the type is shared with the agent).
pub use testbed_lines::asam::Prepared;

/// Makes the data set under `root` unless it is there already.
pub fn prepare(p: &DatasetParams, root: &Path, threads: usize) -> Result<Prepared> {
    p.validate()?;
    let dir = p.dir(root);
    let sam = dir.join("aligned.sam");
    let reference = dir.join("ref.fa");
    let info_path = dir.join("prepared.json");
    // One process generates a data set; another that wants it at the same
    // time waits here and then finds it cached.
    std::fs::create_dir_all(root).map_err(|e| AsamError::io(root, e))?;
    let lock_path = root.join(format!(
        ".{}.lock",
        dir.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    ));
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| AsamError::io(&lock_path, e))?;
    lock.lock().map_err(|e| AsamError::io(&lock_path, e))?;
    if sam.is_file() && info_path.is_file() {
        let text = std::fs::read_to_string(&info_path).map_err(|e| AsamError::io(&info_path, e))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| AsamError::Invalid(format!("{}: {e}", info_path.display())))?;
        return Ok(Prepared {
            sam,
            reference,
            cached: true,
            pairs: v["pairs"].as_u64().unwrap_or(0),
            duplicate_pairs: v["duplicate_pairs"].as_u64().unwrap_or(0),
        });
    }
    std::fs::create_dir_all(&dir).map_err(|e| AsamError::io(&dir, e))?;
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    write_reference(&reference, p, &mut rng)?;
    BWA.run(&[OsArg::s("index"), OsArg::p(&reference)])?;
    let prefix = dir.join("reads");
    ART.run(&[
        OsArg::s("-ss"),
        OsArg::s("HS25"),
        OsArg::s("-i"),
        OsArg::p(&reference),
        OsArg::s("-p"),
        OsArg::s("-na"),
        OsArg::s("-l"),
        OsArg::s(&READ_LENGTH.to_string()),
        OsArg::s("-f"),
        OsArg::s(&p.coverage.to_string()),
        OsArg::s("-m"),
        OsArg::s("300"),
        OsArg::s("-s"),
        OsArg::s("30"),
        OsArg::s("-rs"),
        OsArg::s(&(p.seed % 1_000_000_000).to_string()),
        OsArg::s("-o"),
        OsArg::p(&prefix),
    ])?;
    let r1 = dir.join("reads1.fq");
    let r2 = dir.join("reads2.fq");
    let (pairs, duplicate_pairs) = add_duplicates(&r1, &r2, p.dup_fraction, &mut rng)?;
    let tmp = dir.join("aligned.sam.tmp");
    BWA.run_to_file(
        &[
            OsArg::s("mem"),
            OsArg::s("-v"),
            OsArg::s("1"),
            OsArg::s("-t"),
            OsArg::s(&threads.max(1).to_string()),
            // One read group, so the library is named as in real data.
            OsArg::s("-R"),
            OsArg::s("@RG\\tID:sim\\tSM:sim\\tLB:sim-lib"),
            OsArg::p(&reference),
            OsArg::p(&r1),
            OsArg::p(&r2),
        ],
        &tmp,
    )?;
    std::fs::rename(&tmp, &sam).map_err(|e| AsamError::io(&sam, e))?;
    let info = serde_json::json!({"params": p, "pairs": pairs, "duplicate_pairs": duplicate_pairs});
    std::fs::write(&info_path, info.to_string()).map_err(|e| AsamError::io(&info_path, e))?;
    Ok(Prepared {
        sam,
        reference,
        cached: false,
        pairs,
        duplicate_pairs,
    })
}

/// An argument that is either text or a path.
pub enum OsArg<'a> {
    Text(String),
    Path(&'a Path),
}

impl<'a> OsArg<'a> {
    fn s(t: &str) -> Self {
        OsArg::Text(t.to_string())
    }
    fn p(p: &'a Path) -> Self {
        OsArg::Path(p)
    }
}

impl AsRef<std::ffi::OsStr> for OsArg<'_> {
    fn as_ref(&self) -> &std::ffi::OsStr {
        match self {
            OsArg::Text(t) => t.as_ref(),
            OsArg::Path(p) => p.as_os_str(),
        }
    }
}

fn write_reference(path: &Path, p: &DatasetParams, rng: &mut ChaCha8Rng) -> Result<()> {
    let io = |e| AsamError::io(path, e);
    let mut w = BufWriter::new(std::fs::File::create(path).map_err(io)?);
    const BASES: &[u8; 4] = b"ACGT";
    for c in 1..=p.chromosomes {
        writeln!(w, ">chr{c}").map_err(io)?;
        let mut line = Vec::with_capacity(61);
        for i in 0..p.chromosome_length {
            line.push(BASES[rng.random_range(0..4)]);
            if (i + 1) % 60 == 0 || i + 1 == p.chromosome_length {
                line.push(b'\n');
                w.write_all(&line).map_err(io)?;
                line.clear();
            }
        }
    }
    w.flush().map_err(io)
}

/// Appends a copy of a `fraction` of the pairs to both FASTQ files, with a
/// new name and slightly different qualities (a PCR duplicate is the same
/// fragment sequenced again, so its quality string differs). Returns
/// (pairs before, copies added).
fn add_duplicates(r1: &Path, r2: &Path, fraction: f64, rng: &mut ChaCha8Rng) -> Result<(u64, u64)> {
    let reads1 = read_fastq(r1)?;
    let reads2 = read_fastq(r2)?;
    if reads1.len() != reads2.len() {
        return Err(AsamError::Invalid(format!(
            "{} and {} hold different numbers of reads ({} vs {})",
            r1.display(),
            r2.display(),
            reads1.len(),
            reads2.len()
        )));
    }
    let mut copies = Vec::new();
    for (i, (a, b)) in reads1.iter().zip(&reads2).enumerate() {
        if rng.random_bool(fraction) {
            copies.push((i, jitter(&a.qual, rng), jitter(&b.qual, rng)));
        }
    }
    for (path, reads, mate) in [(r1, &reads1, 1), (r2, &reads2, 2)] {
        let io = |e| AsamError::io(path, e);
        let mut w = BufWriter::new(
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(io)?,
        );
        for (k, (i, q1, q2)) in copies.iter().enumerate() {
            let r = &reads[*i];
            let qual = if mate == 1 { q1 } else { q2 };
            writeln!(
                w,
                "@{}_dup{k}/{mate}\n{}\n+\n{}",
                r.base_name(),
                r.seq,
                qual
            )
            .map_err(io)?;
        }
        w.flush().map_err(io)?;
    }
    Ok((reads1.len() as u64, copies.len() as u64))
}

fn jitter(qual: &str, rng: &mut ChaCha8Rng) -> String {
    qual.bytes()
        .map(|q| {
            let shifted = i32::from(q) + rng.random_range(-3..=3);
            char::from(shifted.clamp(35, 74) as u8)
        })
        .collect()
}

struct FastqRead {
    name: String,
    seq: String,
    qual: String,
}

impl FastqRead {
    /// The name without its "/1" or "/2".
    fn base_name(&self) -> &str {
        self.name
            .strip_suffix("/1")
            .or_else(|| self.name.strip_suffix("/2"))
            .unwrap_or(&self.name)
    }
}

fn read_fastq(path: &Path) -> Result<Vec<FastqRead>> {
    let io = |e| AsamError::io(path, e);
    let f = std::io::BufReader::new(std::fs::File::open(path).map_err(io)?);
    let lines: Vec<String> = f.lines().collect::<std::io::Result<_>>().map_err(io)?;
    let mut out = Vec::with_capacity(lines.len() / 4);
    for (n, rec) in lines.chunks(4).enumerate() {
        let [name, seq, _, qual] = rec else {
            return Err(AsamError::Invalid(format!(
                "{}: truncated FASTQ record {n}",
                path.display()
            )));
        };
        let name = name.strip_prefix('@').ok_or_else(|| {
            AsamError::Invalid(format!("{}: record {n} has no @ name", path.display()))
        })?;
        out.push(FastqRead {
            name: name.split_whitespace().next().unwrap_or(name).to_string(),
            seq: seq.clone(),
            qual: qual.clone(),
        });
    }
    Ok(out)
}
