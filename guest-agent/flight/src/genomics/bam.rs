//! The BAM side of the comparison: one region's records written as BAM
//! (BGZF, noodles' default level, `threads` compressing workers) to a
//! socket, and read back on the receiver into ArrowSAM batches, the form
//! the receiver's sort and duplicate marking take. ArrowSAM keeps SAM's
//! text fields, so the decoder formats each BAM record as its SAM line
//! (noodles) and the ArrowSAM loader reads the lines: the conversion any
//! BAM-fed ArrowSAM receiver needs.

use std::io::{Read, Write};
use std::num::NonZero;
use std::path::Path;

use arrow::array::RecordBatch;
use noodles::bam;
use noodles::bgzf;
use noodles::sam;
use noodles::sam::alignment::io::Write as _;
use testbed_asam::load::{SamTable, read_sam};
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
/// reference names and batches in reference order).
pub fn receive<R: Read + Send + 'static>(input: R, threads: usize) -> Result<SamTable> {
    let workers = NonZero::new(threads.max(1)).unwrap_or(NonZero::<usize>::MIN);
    let mut reader = bam::io::Reader::from(bgzf::io::MultithreadedReader::with_worker_count(
        workers, input,
    ));
    let io = |what: &str, e: std::io::Error| FlightError::Other(format!("BAM stream: {what}: {e}"));
    let header = reader.read_header().map_err(|e| io("header", e))?;
    let mut text = sam::io::Writer::new(Vec::with_capacity(1 << 20));
    text.write_header(&header).map_err(|e| io("header", e))?;
    for (n, record) in reader.records().enumerate() {
        let record = record.map_err(|e| io(&format!("record {n}"), e))?;
        text.write_alignment_record(&header, &record)
            .map_err(|e| io(&format!("record {n} as SAM"), e))?;
    }
    let text = text.into_inner();
    read_sam(&text[..], Path::new("BAM stream"), &BatchLimits::default()).map_err(asam)
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
