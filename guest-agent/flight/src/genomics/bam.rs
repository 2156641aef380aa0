//! The BAM side of the comparison: one region's records written as BAM
//! (BGZF, noodles' default level, `threads` compressing workers) to a
//! socket, and read back on the receiver into ArrowSAM batches, the form
//! the receiver's sort and duplicate marking take: each record's fields go
//! straight to ArrowSAM's builders (`testbed_asam::bam_in`), not through a
//! SAM line that is formatted and parsed again.

use std::io::{Read, Write};
use std::path::Path;

use arrow::array::RecordBatch;
use noodles::sam;
use testbed_asam::bam_in::read_bam;
use testbed_asam::load::SamTable;
use testbed_asam::schema::BatchLimits;

use super::partition::asam;
use crate::error::{FlightError, Result};

/// Writes the region as BAM to `out`; returns `out`, flushed.
pub fn send<W: Write + Send + 'static>(
    out: W,
    header_text: &str,
    reference_names: &[String],
    batches: &[RecordBatch],
    threads: usize,
) -> Result<W> {
    let header: sam::Header = header_text
        .parse()
        .map_err(|e| FlightError::Param(format!("SAM header: {e}")))?;
    let (_, out) = testbed_asam::bam_out::write_bam_to(
        out,
        &header,
        reference_names,
        batches,
        threads,
        "BAM stream",
    )
    .map_err(asam)?;
    Ok(out)
}

/// Reads one BAM stream to its end into ArrowSAM batches (header text,
/// reference names and batches in reference order): each record's fields
/// straight into the batch builders, no SAM line in between.
pub fn receive<R: Read + Send + 'static>(input: R, threads: usize) -> Result<SamTable> {
    read_bam(
        input,
        Path::new("BAM stream"),
        threads,
        &BatchLimits::default(),
    )
    .map_err(asam)
}

#[cfg(test)]
mod tests {
    use super::*;
    use testbed_asam::load::parse_sam;

    #[test]
    fn a_region_survives_the_bam_round_trip_field_for_field() {
        let sam = "@HD\tVN:1.6\n@SQ\tSN:chr1\tLN:1000\n@SQ\tSN:chr2\tLN:500\n@RG\tID:a\tLB:l\n\
r1\t99\tchr1\t100\t60\t5S5M\t=\t300\t210\tACGTACGTAC\tIIIIIIIIII\tRG:Z:a\tNM:i:0\n\
r1\t147\tchr1\t300\t60\t10M\t=\t100\t-210\tACGTACGTAC\t##########\tRG:Z:a\n\
r2\t65\tchr2\t50\t0\t10M\tchr1\t7\t0\tACGTACGTAC\t*\tRG:Z:a\tXA:Z:chr2,+5,10M,0;\n\
r3\t4\t*\t0\t0\t*\t*\t0\t0\t*\t*\n";
        let t = parse_sam(sam.as_bytes(), Path::new("t.sam")).unwrap();
        let bytes = send(
            Vec::new(),
            &t.header_text,
            &t.reference_names,
            &t.batches,
            2,
        )
        .unwrap();
        let back = receive(std::io::Cursor::new(bytes), 2).unwrap();
        assert_eq!(back.reference_names, t.reference_names);
        assert_eq!(
            testbed_asam::sam_text::to_sam_string(&back)
                .unwrap()
                .split_once("r1")
                .unwrap()
                .1,
            testbed_asam::sam_text::to_sam_string(&t)
                .unwrap()
                .split_once("r1")
                .unwrap()
                .1
        );
        assert_eq!(back.records(), 4);
    }
}
