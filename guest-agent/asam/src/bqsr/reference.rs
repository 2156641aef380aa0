//! The reference genome as BQSR needs it: one upper-cased sequence per SAM
//! header reference, indexed by rID (the batches' reference index).

use std::collections::HashMap;
use std::path::Path;

use crate::{AsamError, Result};

/// Sequences in SAM header order: `sequence(rid)` is the contig the
/// batch with that rID is aligned to.
#[derive(Debug, Clone)]
pub struct Reference {
    names: Vec<String>,
    sequences: Vec<Vec<u8>>,
}

impl Reference {
    /// Loads `fasta` and orders its contigs as `reference_names` (the SAM
    /// header's @SQ order). A header contig missing from the FASTA is an
    /// error naming it; extra FASTA contigs are ignored.
    pub fn from_fasta(fasta: &Path, reference_names: &[String]) -> Result<Reference> {
        Self::from_contigs(read_fasta(fasta)?, reference_names)
            .map_err(|e| AsamError::Invalid(format!("{}: {e}", fasta.display())))
    }

    /// As `from_fasta`, from (name, sequence) pairs already in memory.
    pub fn from_contigs(
        contigs: Vec<(String, Vec<u8>)>,
        reference_names: &[String],
    ) -> Result<Reference> {
        let mut by_name: HashMap<String, Vec<u8>> = contigs.into_iter().collect();
        let sequences = reference_names
            .iter()
            .map(|n| {
                by_name
                    .remove(n)
                    .ok_or_else(|| AsamError::Invalid(format!("the reference has no contig {n:?}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Reference {
            names: reference_names.to_vec(),
            sequences,
        })
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The contig of rID `rid` (None for -1 or an rID past the header).
    pub fn sequence(&self, rid: i32) -> Option<&[u8]> {
        usize::try_from(rid)
            .ok()
            .and_then(|i| self.sequences.get(i))
            .map(Vec::as_slice)
    }
}

/// Every record of a FASTA file: name (up to the first blank) and the
/// upper-cased sequence.
pub fn read_fasta(path: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let text = std::fs::read(path).map_err(|e| AsamError::io(path, e))?;
    parse_fasta(&text).map_err(|(line, reason)| {
        AsamError::Invalid(format!("{}: line {line}: {reason}", path.display()))
    })
}

/// A parse failure: 1-based line and reason.
type LineError = (usize, String);

fn parse_fasta(text: &[u8]) -> std::result::Result<Vec<(String, Vec<u8>)>, LineError> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(header) = line.strip_prefix(b">") {
            let name = std::str::from_utf8(header)
                .map_err(|e| (i + 1, format!("name is not UTF-8: {e}")))?
                .split_whitespace()
                .next()
                .ok_or((i + 1, "empty sequence name".to_string()))?;
            out.push((name.to_string(), Vec::new()));
        } else if !line.is_empty() {
            let (_, seq) = out
                .last_mut()
                .ok_or((i + 1, "sequence before the first '>' line".to_string()))?;
            if let Some(bad) = line
                .iter()
                .find(|b| !b.is_ascii_alphabetic() && **b != b'*' && **b != b'-')
            {
                return Err((
                    i + 1,
                    format!("unexpected byte {:?} in a sequence", *bad as char),
                ));
            }
            seq.extend(line.iter().map(u8::to_ascii_uppercase));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_contigs_as_the_header_and_names_a_missing_one() {
        let contigs = parse_fasta(b">chr2 desc\nacgt\nNN\n>chr1\nGG\n").unwrap();
        let r = Reference::from_contigs(contigs.clone(), &["chr1".into(), "chr2".into()]).unwrap();
        assert_eq!(r.sequence(0), Some(&b"GG"[..]));
        assert_eq!(r.sequence(1), Some(&b"ACGTNN"[..]));
        assert_eq!(r.sequence(-1), None);
        let e = Reference::from_contigs(contigs, &["chr3".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("chr3"), "{e}");
        assert_eq!(parse_fasta(b"ACGT\n").unwrap_err().0, 1);
    }
}
