//! Writing FASTA and FASTQ, and opening a user's possibly gzipped file.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use super::genome::Genome;
use crate::{AsamError, Result};

/// FASTA with 60 bases a line, as most references are.
pub fn write_fasta(path: &Path, genome: &Genome) -> Result<()> {
    let io = |e| AsamError::io(path, e);
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    for c in &genome.contigs {
        writeln!(w, ">{}", c.name).map_err(io)?;
        for line in c.seq.chunks(60) {
            w.write_all(line).map_err(io)?;
            w.write_all(b"\n").map_err(io)?;
        }
    }
    w.flush().map_err(io)
}

/// One FASTQ record: name (without '@'), an optional comment, bases and
/// Phred+33 qualities.
pub fn write_record(
    w: &mut impl Write,
    name: &str,
    comment: &str,
    seq: &[u8],
    qual: &[u8],
) -> std::io::Result<()> {
    w.write_all(b"@")?;
    w.write_all(name.as_bytes())?;
    if !comment.is_empty() {
        w.write_all(b" ")?;
        w.write_all(comment.as_bytes())?;
    }
    w.write_all(b"\n")?;
    w.write_all(seq)?;
    w.write_all(b"\n+\n")?;
    let mut line: Vec<u8> = qual.iter().map(|q| q + 33).collect();
    line.push(b'\n');
    w.write_all(&line)
}

/// A buffered reader of `path`, decompressed when it ends in `.gz`.
pub fn open(path: &Path) -> Result<Box<dyn BufRead>> {
    let f = std::fs::File::open(path).map_err(|e| AsamError::io(path, e))?;
    if path.extension().is_some_and(|e| e == "gz") {
        Ok(Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::read::MultiGzDecoder::new(f),
        )))
    } else {
        Ok(Box::new(BufReader::with_capacity(1 << 16, f)))
    }
}
