//! ArrowSAM -> SAM text, in batch order: the way back out (and the round
//! trip the tests check).

use std::io::Write;

use arrow::array::RecordBatch;

use crate::load::SamTable;
use crate::schema::Columns;
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
    let name = |id: i32| -> &str {
        usize::try_from(id)
            .ok()
            .and_then(|i| reference_names.get(i))
            .map_or("*", String::as_str)
    };
    for b in batches {
        let c = Columns::of(b)?;
        for i in 0..b.num_rows() {
            let r = c.row(i);
            // SAM writes "=" for a mate on the record's own reference.
            let rnext = if r.rnext_id >= 0 && r.rnext_id == r.rid {
                "="
            } else {
                name(r.rnext_id)
            };
            write!(
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
            )
            .map_err(io)?;
            if !r.tags.is_empty() {
                write!(out, "\t{}", r.tags).map_err(io)?;
            }
            out.write_all(b"\n").map_err(io)?;
        }
    }
    Ok(())
}

/// The whole table as SAM text.
pub fn to_sam_string(t: &SamTable) -> Result<String> {
    let mut v = Vec::new();
    write_sam(&mut v, &t.header_text, &t.reference_names, &t.batches)?;
    String::from_utf8(v).map_err(|e| AsamError::Invalid(format!("SAM output not UTF-8: {e}")))
}
