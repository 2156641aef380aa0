//! ArrowSAM -> SAM text, in batch order: the way back out (and the round
//! trip the tests check).

use std::io::Write;

use arrow::array::RecordBatch;

use crate::load::SamTable;
use crate::schema::{Columns, Row};
use crate::{AsamError, Result};

/// Writes the header and every record of `batches` (in order) as SAM.
pub fn write_sam(
    out: &mut impl Write,
    header_text: &str,
    reference_names: &[String],
    batches: &[RecordBatch],
) -> Result<()> {
    let io = |e| AsamError::io("SAM output", e);
    out.write_all(header_text.as_bytes()).map_err(io)?;
    let mut line = Vec::new();
    for b in batches {
        let c = Columns::of(b)?;
        for i in 0..b.num_rows() {
            line.clear();
            format_row(&mut line, &c.row(i), reference_names);
            line.push(b'\n');
            out.write_all(&line).map_err(io)?;
        }
    }
    Ok(())
}

/// Appends one record as a SAM line, without the newline.
pub fn format_row(out: &mut Vec<u8>, r: &Row<'_>, reference_names: &[String]) {
    let name = |id: i32| -> &str {
        usize::try_from(id)
            .ok()
            .and_then(|i| reference_names.get(i))
            .map_or("*", String::as_str)
    };
    // SAM writes "=" for a mate on the record's own reference.
    let rnext = if r.rnext_id >= 0 && r.rnext_id == r.rid {
        "="
    } else {
        name(r.rnext_id)
    };
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
        r.qname,
        r.flags,
        name(r.rid),
        r.pos,
        r.mapq,
        r.cigar,
        rnext,
        r.pnext,
        r.tlen,
        r.seq,
        r.qual
    );
    if !r.tags.is_empty() {
        out.push(b'\t');
        out.extend_from_slice(r.tags.as_bytes());
    }
}

/// The whole table as SAM text.
pub fn to_sam_string(t: &SamTable) -> Result<String> {
    let mut v = Vec::new();
    write_sam(&mut v, &t.header_text, &t.reference_names, &t.batches)?;
    String::from_utf8(v).map_err(|e| AsamError::Invalid(format!("SAM output not UTF-8: {e}")))
}
