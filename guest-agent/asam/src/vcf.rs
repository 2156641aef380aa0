//! Minimal VCF text reading, plain or BGZF-compressed (what `bcftools -Oz`
//! writes): the columns known-site masking and call scoring need. Only the
//! first sample's GT is read; everything else in a line is ignored.

use std::io::Read;
use std::path::Path;

use crate::{AsamError, Result};

/// One data line of a VCF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VcfRecord {
    pub chrom: String,
    /// 1-based, as written.
    pub pos: u64,
    /// Upper-cased.
    pub reference: String,
    /// Upper-cased; "*" and symbolic alleles are kept as written.
    pub alts: Vec<String>,
    /// "PASS", "." or the failed filters, as written.
    pub filter: String,
    /// The first sample's GT as allele indexes (None = "."), if present.
    pub genotype: Option<Vec<Option<usize>>>,
    /// 1-based line number in the file (for error messages).
    pub line: usize,
}

impl VcfRecord {
    /// Last reference base the record covers (1-based, inclusive).
    pub fn end(&self) -> u64 {
        self.pos + (self.reference.len() as u64).max(1) - 1
    }
}

/// Reads a VCF, decompressing it when it starts with the gzip magic.
pub fn read_vcf(path: &Path) -> Result<Vec<VcfRecord>> {
    let raw = std::fs::read(path).map_err(|e| AsamError::io(path, e))?;
    let text = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        noodles::bgzf::io::Reader::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| AsamError::io(path, e))?;
        out
    } else {
        raw
    };
    let text = String::from_utf8(text)
        .map_err(|e| AsamError::Invalid(format!("{}: not UTF-8: {e}", path.display())))?;
    parse_vcf(&text, path)
}

/// Parses VCF text; `path` only names the source in errors.
pub fn parse_vcf(text: &str, path: &Path) -> Result<Vec<VcfRecord>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        out.push(parse_line(line, i + 1).map_err(|reason| {
            AsamError::Invalid(format!("{}: line {}: {reason}", path.display(), i + 1))
        })?);
    }
    Ok(out)
}

fn parse_line(line: &str, number: usize) -> std::result::Result<VcfRecord, String> {
    let f: Vec<&str> = line.split('\t').collect();
    if f.len() < 8 {
        return Err(format!("{} columns, a VCF line has at least 8", f.len()));
    }
    let pos: u64 = f[1].parse().map_err(|e| format!("POS {:?}: {e}", f[1]))?;
    if pos == 0 {
        return Err("POS 0".into());
    }
    let reference = f[3].to_ascii_uppercase();
    if reference.is_empty() || !reference.bytes().all(|b| b"ACGTN".contains(&b)) {
        return Err(format!("REF {:?} is not a sequence of ACGTN", f[3]));
    }
    let alts = if f[4] == "." {
        Vec::new()
    } else {
        f[4].split(',').map(str::to_ascii_uppercase).collect()
    };
    let genotype = match (f.get(8), f.get(9)) {
        (Some(format), Some(sample)) => genotype(format, sample)?,
        _ => None,
    };
    Ok(VcfRecord {
        chrom: f[0].to_string(),
        pos,
        reference,
        alts,
        filter: f[6].to_string(),
        genotype,
        line: number,
    })
}

fn genotype(format: &str, sample: &str) -> std::result::Result<Option<Vec<Option<usize>>>, String> {
    let Some(at) = format.split(':').position(|k| k == "GT") else {
        return Ok(None);
    };
    let Some(gt) = sample.split(':').nth(at) else {
        return Ok(None);
    };
    gt.split(['/', '|'])
        .map(|a| {
            if a == "." {
                Ok(None)
            } else {
                a.parse().map(Some).map_err(|e| format!("GT {gt:?}: {e}"))
            }
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_columns_genotype_and_names_a_bad_line() {
        let text = "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\ts\n\
                    chr1\t10\t.\tac\tA,AT\t50\tPASS\t.\tGT:DP\t1|2:9\n\
                    chr1\t20\t.\tG\t.\t.\t.\t.\n";
        let r = parse_vcf(text, Path::new("x.vcf")).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].reference, "AC");
        assert_eq!(r[0].alts, ["A", "AT"]);
        assert_eq!(r[0].genotype, Some(vec![Some(1), Some(2)]));
        assert_eq!(r[0].end(), 11);
        assert!(r[1].alts.is_empty() && r[1].genotype.is_none());
        let e = parse_vcf("chr1\tx\t.\tA\tC\t.\t.\t.\n", Path::new("bad.vcf"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.vcf: line 1") && e.contains("POS"), "{e}");
    }
}
