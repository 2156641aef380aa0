//! SAM text -> ArrowSAM: records parsed with noodles, appended to one batch
//! per reference sequence (and a last one for reads without a reference).

use std::path::Path;

use arrow::array::RecordBatch;
use noodles::sam;

use crate::schema::{BatchBuilder, Row};
use crate::{AsamError, Result};

/// A SAM file as ArrowSAM batches: `batches[i]` holds the records placed on
/// reference `i`, the last batch those placed nowhere (rID -1).
#[derive(Debug, Clone)]
pub struct SamTable {
    pub header_text: String,
    pub reference_names: Vec<String>,
    pub batches: Vec<RecordBatch>,
}

impl SamTable {
    pub fn records(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

/// Reads a whole SAM file.
pub fn load_sam(path: &Path) -> Result<SamTable> {
    let bytes = std::fs::read(path).map_err(|e| AsamError::io(path, e))?;
    parse_sam(&bytes, path)
}

/// Parses SAM text; `path` only names the source in errors.
pub fn parse_sam(bytes: &[u8], path: &Path) -> Result<SamTable> {
    let header_len = header_length(bytes);
    let header_text = std::str::from_utf8(&bytes[..header_len])
        .map_err(|e| bad(path, 0, format!("header is not UTF-8: {e}")))?
        .to_string();
    let header: sam::Header = header_text
        .parse()
        .map_err(|e| bad(path, 0, format!("header: {e}")))?;
    let reference_names: Vec<String> = header
        .reference_sequences()
        .keys()
        .map(|k| k.to_string())
        .collect();
    let mut builders: Vec<BatchBuilder> = (0..=reference_names.len())
        .map(|_| BatchBuilder::default())
        .collect();
    let header_lines = bytes[..header_len].iter().filter(|&&b| b == b'\n').count();
    let mut reader = sam::io::Reader::new(&bytes[header_len..]);
    let mut record = sam::Record::default();
    for line in header_lines + 1.. {
        let n = reader
            .read_record(&mut record)
            .map_err(|e| bad(path, line, e.to_string()))?;
        if n == 0 {
            break;
        }
        let unplaced = reference_names.len();
        with_row(&record, &header, |row| {
            let slot = usize::try_from(row.rid).unwrap_or(unplaced);
            builders[slot].push(row);
        })
        .map_err(|reason| bad(path, line, reason))?;
    }
    let batches = builders
        .into_iter()
        .map(BatchBuilder::finish)
        .collect::<Result<Vec<_>>>()?;
    Ok(SamTable {
        header_text,
        reference_names,
        batches,
    })
}

fn bad(path: &Path, line: usize, reason: String) -> AsamError {
    AsamError::Sam {
        path: path.to_path_buf(),
        line,
        reason,
    }
}

/// Length of the leading `@` lines.
fn header_length(bytes: &[u8]) -> usize {
    let mut at = 0;
    while at < bytes.len() && bytes[at] == b'@' {
        at = match bytes[at..].iter().position(|&b| b == b'\n') {
            Some(nl) => at + nl + 1,
            None => bytes.len(),
        };
    }
    at
}

fn text<'r>(field: &str, raw: &'r [u8]) -> std::result::Result<&'r str, String> {
    std::str::from_utf8(raw)
        .map(|s| if s.is_empty() { "*" } else { s })
        .map_err(|e| format!("{field} is not UTF-8: {e}"))
}

fn reference_id(
    field: &str,
    id: Option<std::io::Result<usize>>,
) -> std::result::Result<i32, String> {
    match id {
        None => Ok(-1),
        Some(r) => r
            .map_err(|e| format!("{field}: {e}"))
            .and_then(|i| i32::try_from(i).map_err(|e| format!("{field}: {e}"))),
    }
}

fn position(
    field: &str,
    p: Option<std::io::Result<noodles::core::Position>>,
) -> std::result::Result<i32, String> {
    match p {
        None => Ok(0),
        Some(r) => r
            .map_err(|e| format!("{field}: {e}"))
            .and_then(|p| i32::try_from(usize::from(p)).map_err(|e| format!("{field}: {e}"))),
    }
}

/// Calls `f` with the record in ArrowSAM terms, its text fields borrowed
/// from the record (no copy until the builder appends them).
fn with_row(
    r: &sam::Record,
    header: &sam::Header,
    f: impl FnOnce(&Row<'_>),
) -> std::result::Result<(), String> {
    let flags = r.flags().map_err(|e| format!("flags: {e}"))?;
    let mapq = match r.mapping_quality() {
        // noodles reads 255 (unavailable) as None.
        None => 255,
        Some(q) => i32::from(u8::from(q.map_err(|e| format!("MAPQ: {e}"))?)),
    };
    let (cigar, sequence, quality, data) = (r.cigar(), r.sequence(), r.quality_scores(), r.data());
    f(&Row {
        qname: r
            .name()
            .map(|n| text("QNAME", n))
            .transpose()?
            .unwrap_or("*"),
        flags: i32::from(u16::from(flags)),
        rid: reference_id("RNAME", r.reference_sequence_id(header))?,
        pos: position("POS", r.alignment_start())?,
        mapq,
        cigar: text("CIGAR", cigar.as_ref())?,
        rnext_id: reference_id("RNEXT", r.mate_reference_sequence_id(header))?,
        pnext: position("PNEXT", r.mate_alignment_start())?,
        tlen: r.template_length().map_err(|e| format!("TLEN: {e}"))?,
        seq: text("SEQ", sequence.as_ref())?,
        qual: text("QUAL", quality.as_ref())?,
        tags: std::str::from_utf8(data.as_ref()).map_err(|e| format!("tags are not UTF-8: {e}"))?,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sam_text::to_sam_string;
    use crate::schema::Columns;
    use crate::testdata::{HEADER, rec};

    /// Records grouped by reference (as the batches are), covering "=",
    /// a mate on another reference, MAPQ 255, "*" fields and tags.
    fn handcrafted() -> String {
        let lines = [
            rec("r1", 99, "chr1", 100, "5S5M", "=", 300, 'I'),
            "r2\t97\tchr1\t7\t255\t3M1I2D6M\tchr2\t50\t-12\tACGTACGTAC\t*\tNM:i:1\tXA:Z:chr2,+5,10M,0;".to_string(),
            rec("r1", 147, "chr1", 300, "10M", "=", 100, '#'),
            rec("r2", 145, "chr2", 50, "10M", "chr1", 7, '5'),
            "r3\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*".to_string(),
            rec("r4", 77, "*", 0, "*", "*", 0, 'A'),
        ];
        format!("{HEADER}{}\n", lines.join("\n"))
    }

    #[test]
    fn sam_to_arrow_to_sam_is_the_identity() {
        let text = handcrafted();
        let t = parse_sam(text.as_bytes(), Path::new("handcrafted.sam")).unwrap();
        assert_eq!(t.reference_names, ["chr1", "chr2"]);
        assert_eq!(
            t.batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(),
            [3, 1, 2]
        );
        let c = Columns::of(&t.batches[0]).unwrap();
        let r2 = c.row(1);
        assert_eq!(
            (r2.rid, r2.pos, r2.mapq, r2.rnext_id, r2.pnext, r2.tlen),
            (0, 7, 255, 1, 50, -12)
        );
        assert_eq!(r2.qual, "*");
        assert_eq!(to_sam_string(&t).unwrap(), text);
    }

    #[test]
    fn the_store_returns_what_was_put() {
        let text = handcrafted();
        let t = parse_sam(text.as_bytes(), Path::new("handcrafted.sam")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::create_in(dir.path()).unwrap();
        let stored = store
            .put("t.arrow", &crate::schema::schema(), &t.batches)
            .unwrap();
        let back = crate::store::get(&stored).unwrap();
        assert_eq!(back, t.batches);
    }

    #[test]
    fn a_bad_record_names_the_file_and_line() {
        let text = format!("{HEADER}r1\t99\tchr9\t100\t60\t10M\t=\t1\t0\tA\tI\n");
        let e = parse_sam(text.as_bytes(), Path::new("bad.sam"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.sam") && e.contains("record 5"), "{e}");
    }
}
