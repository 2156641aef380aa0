//! Checks of a user's files (the `paper` size): the FASTQ pair, the
//! reference and the optional truth VCF, known sites and targets BED.
//! Each problem is an [`InputError`] naming the file, the record and the
//! line, so a bad file is found without reading bwa's stderr.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use super::fastx::open;
use crate::{AsamError, Result};

#[derive(Debug, thiserror::Error)]
#[error("{}: record {record} (line {line}): {reason}", path.display())]
pub struct InputError {
    pub path: PathBuf,
    /// 1-based.
    pub record: u64,
    /// 1-based.
    pub line: u64,
    pub reason: String,
}

impl From<InputError> for AsamError {
    fn from(e: InputError) -> Self {
        AsamError::Invalid(e.to_string())
    }
}

fn bad(path: &Path, record: u64, line: u64, reason: impl Into<String>) -> AsamError {
    InputError {
        path: path.to_path_buf(),
        record,
        line,
        reason: reason.into(),
    }
    .into()
}

/// Reads one line without its newline; `None` at the end.
fn next_line(r: &mut dyn BufRead, path: &Path, buf: &mut String) -> Result<Option<()>> {
    buf.clear();
    let n = r.read_line(buf).map_err(|e| AsamError::io(path, e))?;
    if n == 0 {
        return Ok(None);
    }
    while buf.ends_with('\n') || buf.ends_with('\r') {
        buf.pop();
    }
    Ok(Some(()))
}

/// A FASTQ file read record by record, each checked.
struct FastqReader {
    path: PathBuf,
    r: Box<dyn BufRead>,
    line: u64,
    record: u64,
    lines: [String; 4],
}

impl FastqReader {
    fn new(path: &Path) -> Result<Self> {
        Ok(FastqReader {
            path: path.to_path_buf(),
            r: open(path)?,
            line: 0,
            record: 0,
            lines: Default::default(),
        })
    }

    /// The next record's name (up to the first space, without /1 or /2),
    /// or `None` at a clean end.
    fn next(&mut self) -> Result<Option<String>> {
        self.record += 1;
        let first = self.line + 1;
        for k in 0..4 {
            if next_line(&mut self.r, &self.path, &mut self.lines[k])?.is_none() {
                if k == 0 {
                    return Ok(None);
                }
                return Err(bad(
                    &self.path,
                    self.record,
                    first,
                    format!("truncated: the file ends after {k} of the record's 4 lines"),
                ));
            }
            self.line += 1;
        }
        let [head, seq, plus, qual] = &self.lines;
        let at = |k: u64, reason: String| Err(bad(&self.path, self.record, first + k, reason));
        let Some(name) = head.strip_prefix('@') else {
            return at(0, format!("header does not start with '@': {:.40}", head));
        };
        let name = name.split_whitespace().next().unwrap_or("");
        if name.is_empty() {
            return at(0, "empty read name".into());
        }
        if let Some((i, c)) = seq
            .char_indices()
            .find(|(_, c)| !c.is_ascii_alphabetic() && *c != '.')
        {
            return at(1, format!("sequence has {c:?} at column {}", i + 1));
        }
        if !plus.starts_with('+') {
            return at(
                2,
                format!("separator line does not start with '+': {:.40}", plus),
            );
        }
        if qual.len() != seq.len() {
            return at(
                3,
                format!("{} qualities for {} bases", qual.len(), seq.len()),
            );
        }
        if let Some((i, c)) = qual.char_indices().find(|(_, c)| !('!'..='~').contains(c)) {
            return at(
                3,
                format!("quality {c:?} at column {} is not Phred+33", i + 1),
            );
        }
        let name = name
            .strip_suffix("/1")
            .or_else(|| name.strip_suffix("/2"))
            .unwrap_or(name);
        Ok(Some(name.to_string()))
    }
}

/// Checks every record of a FASTQ pair and that mates pair up by name;
/// returns the number of pairs.
pub fn check_fastq_pair(r1: &Path, r2: &Path) -> Result<u64> {
    let mut a = FastqReader::new(r1)?;
    let mut b = FastqReader::new(r2)?;
    let mut pairs = 0;
    loop {
        let line = b.line + 1;
        match (a.next()?, b.next()?) {
            (None, None) => return Ok(pairs),
            (Some(x), Some(y)) if x != y => {
                return Err(bad(
                    r2,
                    b.record,
                    line,
                    format!(
                        "read {y} is not the mate of {x} (record {} of {})",
                        a.record,
                        r1.display()
                    ),
                ));
            }
            (Some(_), Some(_)) => pairs += 1,
            (Some(_), None) => {
                return Err(bad(
                    r2,
                    b.record,
                    line,
                    format!("the file ends but {} has more records", r1.display()),
                ));
            }
            (None, Some(_)) => {
                return Err(bad(
                    r1,
                    a.record,
                    a.line + 1,
                    format!("the file ends but {} has more records", r2.display()),
                ));
            }
        }
    }
}

/// Contig names and lengths of a FASTA reference, in file order.
pub fn fasta_contigs(path: &Path) -> Result<Vec<(String, u64)>> {
    let mut r = open(path)?;
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut buf = String::new();
    let mut line = 0u64;
    while next_line(&mut r, path, &mut buf)?.is_some() {
        line += 1;
        if let Some(h) = buf.strip_prefix('>') {
            let name = h.split_whitespace().next().unwrap_or("").to_string();
            let record = out.len() as u64 + 1;
            if name.is_empty() {
                return Err(bad(path, record, line, "sequence without a name"));
            }
            if let Some(first) = seen.insert(name.clone(), line) {
                return Err(bad(
                    path,
                    record,
                    line,
                    format!("contig {name} again (first at line {first})"),
                ));
            }
            out.push((name, 0));
        } else if let Some(last) = out.last_mut() {
            last.1 += buf.trim_end().len() as u64;
        } else if !buf.trim().is_empty() {
            return Err(bad(path, 1, line, "sequence before the first '>' header"));
        }
    }
    if out.is_empty() {
        return Err(bad(path, 1, line.max(1), "no sequences"));
    }
    Ok(out)
}

/// Checks that every record of a VCF or BED file names a contig of
/// `reference` (`contigs`) and lies inside it; returns the record count.
pub fn check_contigs(path: &Path, contigs: &[(String, u64)], reference: &Path) -> Result<u64> {
    let lengths: HashMap<&str, u64> = contigs.iter().map(|(n, l)| (n.as_str(), *l)).collect();
    let bed = !path.to_string_lossy().contains(".vcf");
    let mut r = open(path)?;
    let mut buf = String::new();
    let (mut line, mut record) = (0u64, 0u64);
    while next_line(&mut r, path, &mut buf)?.is_some() {
        line += 1;
        if buf.starts_with('#') || buf.trim().is_empty() || buf.starts_with("track") {
            continue;
        }
        record += 1;
        let cols: Vec<&str> = buf.split('\t').collect();
        let want = if bed { 3 } else { 8 };
        if cols.len() < want {
            return Err(bad(
                path,
                record,
                line,
                format!("{} columns, want at least {want}", cols.len()),
            ));
        }
        let Some(&len) = lengths.get(cols[0]) else {
            return Err(bad(
                path,
                record,
                line,
                format!(
                    "contig {} is not in the reference {}",
                    cols[0],
                    reference.display()
                ),
            ));
        };
        // VCF POS is 1-based; a BED end is exclusive: both at most len.
        let end_col = if bed { 2 } else { 1 };
        let end: u64 = cols[end_col].parse().map_err(|_| {
            bad(
                path,
                record,
                line,
                format!("position {:?} is not a number", cols[end_col]),
            )
        })?;
        if end > len {
            return Err(bad(
                path,
                record,
                line,
                format!("position {end} is past the end of {} ({len} bp)", cols[0]),
            ));
        }
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn fastq_problems_name_the_record_and_line() {
        let d = tempfile::tempdir().unwrap();
        let good = "@a/1\nACGT\n+\nIIII\n@b/1\nACGT\n+\nIIII\n";
        let r1 = write(d.path(), "r1.fq", good);
        let r2 = write(d.path(), "r2.fq", &good.replace("/1", "/2"));
        assert_eq!(check_fastq_pair(&r1, &r2).unwrap(), 2);
        let cases = [
            (
                "@a/2\nACGT\n+\nIIII\n@b/2\nACGT\n+\n",
                "record 2 (line 5): truncated",
            ),
            (
                "@a/2\nACGT\n+\nIIII\nb/2\nACGT\n+\nIIII\n",
                "record 2 (line 5): header",
            ),
            (
                "@a/2\nACGT\n+\nIIII\n@b/2\nAC-T\n+\nIIII\n",
                "record 2 (line 6): sequence has '-'",
            ),
            (
                "@a/2\nACGT\n+\nIII\n@b/2\nACGT\n+\nIIII\n",
                "record 1 (line 4): 3 qualities",
            ),
            (
                "@a/2\nACGT\n+\nIIII\n@c/2\nACGT\n+\nIIII\n",
                "record 2 (line 5): read c is not the mate of b",
            ),
            ("@a/2\nACGT\n+\nIIII\n", "record 2 (line 5): the file ends"),
        ];
        for (text, want) in cases {
            let bad2 = write(d.path(), "bad2.fq", text);
            let e = check_fastq_pair(&r1, &bad2).unwrap_err().to_string();
            assert!(
                e.contains("bad2.fq") && e.contains(want),
                "{e} (want {want})"
            );
        }
    }

    #[test]
    fn a_contig_missing_from_the_reference_is_named_with_its_line() {
        let d = tempfile::tempdir().unwrap();
        let fa = write(d.path(), "ref.fa", ">chr1 x\nACGT\nAC\n>chr2\nACGTACGT\n");
        let contigs = fasta_contigs(&fa).unwrap();
        assert_eq!(contigs, vec![("chr1".into(), 6), ("chr2".into(), 8)]);
        let bed = write(d.path(), "t.bed", "chr1\t0\t5\nchr3\t1\t2\n");
        let e = check_contigs(&bed, &contigs, &fa).unwrap_err().to_string();
        assert!(e.contains("t.bed: record 2 (line 2): contig chr3"), "{e}");
        let vcf = write(
            d.path(),
            "t.vcf",
            "##x\n#CHROM\nchr2\t9\t.\tA\tC\t.\t.\t.\n",
        );
        let e = check_contigs(&vcf, &contigs, &fa).unwrap_err().to_string();
        assert!(
            e.contains("t.vcf: record 1 (line 3): position 9 is past"),
            "{e}"
        );
        let dup = write(d.path(), "dup.fa", ">a\nA\n>a\nC\n");
        let e = fasta_contigs(&dup).unwrap_err().to_string();
        assert!(e.contains("record 2 (line 3): contig a again"), "{e}");
    }
}
