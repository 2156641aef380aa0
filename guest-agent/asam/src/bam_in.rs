//! BAM -> ArrowSAM without SAM text in between: each record's fields go
//! from noodles' BAM record straight to the batch builders, cut into
//! batches per reference as the SAM loader cuts them. ArrowSAM's CIGAR,
//! SEQ, QUAL and tag columns hold SAM's text, so those four are formatted
//! field by field (as noodles' SAM writer formats them: every integer tag
//! as `i`, floats trimmed), never as a whole line that is parsed again.

use std::io::{Read, Write};
use std::num::NonZero;
use std::path::Path;

use noodles::bam;
use noodles::bgzf;
use noodles::sam;
use noodles::sam::alignment::record::data::field::Value;
use noodles::sam::alignment::record::data::field::value::Array;

use crate::load::{Batcher, BySlot, SamHead, SamTable, reference_names};
use crate::schema::{BatchLimits, Row};
use crate::{AsamError, Result};

/// Reads one BGZF-compressed BAM stream to its end (`threads` inflating
/// workers) into ArrowSAM batches in reference order, unplaced last.
/// `what` names the stream in errors.
pub fn read_bam(
    input: impl Read + Send + 'static,
    what: &Path,
    threads: usize,
    limits: &BatchLimits,
) -> Result<SamTable> {
    limits.validate()?;
    let (mut reader, header) = open(input, what, threads)?;
    let mut header_text = sam::io::Writer::new(Vec::new());
    header_text
        .write_header(&header)
        .map_err(|e| AsamError::io(what, with_context("header as SAM", e)))?;
    let header_text = String::from_utf8(header_text.into_inner())
        .map_err(|e| AsamError::Invalid(format!("{}: header: {e}", what.display())))?;
    let reference_names = reference_names(&header);
    let mut batcher = Batcher::new(reference_names.len(), limits);
    let mut slots = BySlot::default();
    let mut text = TextFields::default();
    let mut record = bam::Record::default();
    let mut n = 0u64;
    loop {
        let read = reader
            .read_record(&mut record)
            .map_err(|e| AsamError::io(what, with_context(&format!("record {n}"), e)))?;
        if read == 0 {
            break;
        }
        let row = text
            .row(&record, reference_names.len())
            .map_err(|e| AsamError::Invalid(format!("{}: record {n}: {e}", what.display())))?;
        if let Some((slot, full)) = batcher.push(&row) {
            slots.push(slot, full.finish()?);
        }
        n += 1;
    }
    let records = batcher.records;
    batcher.finish(|slot, b| {
        slots.push(slot, b);
        Ok(())
    })?;
    Ok(slots.into_table(SamHead {
        header_text,
        reference_names,
        records,
    }))
}

/// The conversion [`read_bam`] replaces: every record formatted as its SAM
/// line by noodles' writer, the whole text parsed again by the SAM loader.
/// Kept as the tests' oracle and the benchmark's baseline.
pub fn read_bam_via_sam_text(
    input: impl Read + Send + 'static,
    what: &Path,
    threads: usize,
    limits: &BatchLimits,
) -> Result<SamTable> {
    use noodles::sam::alignment::io::Write as _;
    let (mut reader, header) = open(input, what, threads)?;
    let io = |context: &str, e| AsamError::io(what, with_context(context, e));
    let mut text = sam::io::Writer::new(Vec::with_capacity(1 << 20));
    text.write_header(&header).map_err(|e| io("header", e))?;
    for (n, record) in reader.records().enumerate() {
        let record = record.map_err(|e| io(&format!("record {n}"), e))?;
        text.write_alignment_record(&header, &record)
            .map_err(|e| io(&format!("record {n} as SAM"), e))?;
    }
    crate::load::read_sam(&text.into_inner()[..], what, limits)
}

type BamReader<R> = bam::io::Reader<bgzf::io::MultithreadedReader<R>>;

/// The stream's reader (`threads` inflating workers) and its header.
fn open<R: Read + Send + 'static>(
    input: R,
    what: &Path,
    threads: usize,
) -> Result<(BamReader<R>, sam::Header)> {
    let workers = NonZero::new(threads.max(1)).unwrap_or(NonZero::<usize>::MIN);
    let mut reader = bam::io::Reader::from(bgzf::io::MultithreadedReader::with_worker_count(
        workers, input,
    ));
    let header = reader
        .read_header()
        .map_err(|e| AsamError::io(what, with_context("header", e)))?;
    Ok((reader, header))
}

fn with_context(what: &str, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The four text columns of the record being converted, in buffers that
/// are reused from record to record.
#[derive(Default)]
struct TextFields {
    cigar: Vec<u8>,
    seq: Vec<u8>,
    qual: Vec<u8>,
    tags: Vec<u8>,
}

/// SAM's bases for BAM's 4-bit codes (SAM spec § 4.2.3).
const BASES: &[u8; 16] = b"=ACMGRSVTWYHKDBN";
/// The highest quality SAM's text can hold ('~' - '!').
const MAX_QUALITY: u8 = b'~' - b'!';

impl TextFields {
    /// The record in ArrowSAM terms, its text fields formatted into
    /// `self`; refused, naming the field, where BAM holds what SAM cannot.
    fn row<'a>(
        &'a mut self,
        r: &'a bam::Record,
        references: usize,
    ) -> std::result::Result<Row<'a>, String> {
        let reference = |name: &str, id: Option<std::io::Result<usize>>| match id {
            None => Ok(-1),
            Some(Err(e)) => Err(format!("{name}: {e}")),
            Some(Ok(i)) if i >= references => Err(format!(
                "{name}: reference {i} is not in the header's {references}"
            )),
            Some(Ok(i)) => i32::try_from(i).map_err(|e| format!("{name}: {e}")),
        };
        let position = |name: &str, p: Option<std::io::Result<noodles::core::Position>>| match p {
            None => Ok(0),
            Some(Err(e)) => Err(format!("{name}: {e}")),
            Some(Ok(p)) => i32::try_from(usize::from(p)).map_err(|e| format!("{name}: {e}")),
        };

        self.cigar.clear();
        let cigar = r.cigar();
        if cigar.is_empty() {
            self.cigar.push(b'*');
        } else {
            sam::io::writer::record::write_cigar(&mut self.cigar, &cigar)
                .map_err(|e| format!("CIGAR: {e}"))?;
        }

        let sequence = r.sequence();
        self.seq.clear();
        if sequence.is_empty() {
            self.seq.push(b'*');
        } else {
            for &pair in sequence.as_bytes() {
                self.seq.push(BASES[usize::from(pair >> 4)]);
                self.seq.push(BASES[usize::from(pair & 0x0f)]);
            }
            self.seq.truncate(sequence.len());
        }

        // noodles gives no scores where BAM has them all 0xFF (omitted).
        let scores = r.quality_scores();
        let scores = scores.as_ref();
        self.qual.clear();
        if scores.is_empty() {
            self.qual.push(b'*');
        } else {
            if let Some(&q) = scores.iter().find(|&&q| q > MAX_QUALITY) {
                return Err(format!("QUAL: score {q} is above SAM's {MAX_QUALITY}"));
            }
            self.qual.extend(scores.iter().map(|&q| q + b'!'));
        }

        self.tags.clear();
        for (i, field) in r.data().iter().enumerate() {
            let (tag, value) = field.map_err(|e| format!("tags: {e}"))?;
            if i > 0 {
                self.tags.push(b'\t');
            }
            self.tags.extend_from_slice(tag.as_ref());
            write_value(&mut self.tags, &value).map_err(|e| {
                let tag = String::from_utf8_lossy(tag.as_ref()).into_owned();
                format!("tag {tag}: {e}")
            })?;
        }

        let text = |name: &str, bytes: &'a [u8]| {
            std::str::from_utf8(bytes).map_err(|e| format!("{name}: not UTF-8: {e}"))
        };
        Ok(Row {
            qname: match r.name() {
                None => "*",
                Some(n) => text("QNAME", n.as_ref())?,
            },
            flags: i32::from(u16::from(r.flags())),
            rid: reference("RNAME", r.reference_sequence_id())?,
            pos: position("POS", r.alignment_start())?,
            // noodles reads 255 (unavailable) as None.
            mapq: r.mapping_quality().map_or(255, |q| i32::from(u8::from(q))),
            cigar: text("CIGAR", &self.cigar)?,
            rnext_id: reference("RNEXT", r.mate_reference_sequence_id())?,
            pnext: position("PNEXT", r.mate_alignment_start())?,
            tlen: r.template_length(),
            seq: text("SEQ", &self.seq)?,
            qual: text("QUAL", &self.qual)?,
            tags: text("tags", &self.tags)?,
        })
    }
}

/// `:TYPE:VALUE` of one optional field, as SAM writes it.
fn write_value(out: &mut Vec<u8>, value: &Value<'_>) -> std::io::Result<()> {
    match value {
        Value::Character(c) => {
            out.extend_from_slice(b":A:");
            out.push(*c);
        }
        Value::Int8(n) => write!(out, ":i:{n}")?,
        Value::UInt8(n) => write!(out, ":i:{n}")?,
        Value::Int16(n) => write!(out, ":i:{n}")?,
        Value::UInt16(n) => write!(out, ":i:{n}")?,
        Value::Int32(n) => write!(out, ":i:{n}")?,
        Value::UInt32(n) => write!(out, ":i:{n}")?,
        Value::Float(n) => {
            out.extend_from_slice(b":f:");
            write_float(out, *n)?;
        }
        Value::String(s) => {
            out.extend_from_slice(b":Z:");
            out.extend_from_slice(s.as_ref());
        }
        Value::Hex(s) => {
            out.extend_from_slice(b":H:");
            out.extend_from_slice(s.as_ref());
        }
        Value::Array(a) => {
            out.extend_from_slice(b":B:");
            write_array(out, a)?;
        }
    }
    Ok(())
}

/// `SUBTYPE,v1,v2,...` of a `B` array.
fn write_array(out: &mut Vec<u8>, array: &Array<'_>) -> std::io::Result<()> {
    fn each<N: std::fmt::Display>(
        out: &mut Vec<u8>,
        subtype: u8,
        values: impl Iterator<Item = std::io::Result<N>>,
    ) -> std::io::Result<()> {
        out.push(subtype);
        for v in values {
            write!(out, ",{}", v?)?;
        }
        Ok(())
    }
    match array {
        Array::Int8(v) => each(out, b'c', v.iter()),
        Array::UInt8(v) => each(out, b'C', v.iter()),
        Array::Int16(v) => each(out, b's', v.iter()),
        Array::UInt16(v) => each(out, b'S', v.iter()),
        Array::Int32(v) => each(out, b'i', v.iter()),
        Array::UInt32(v) => each(out, b'I', v.iter()),
        Array::Float(v) => {
            out.push(b'f');
            for n in v.iter() {
                out.push(b',');
                write_float(out, n?)?;
            }
            Ok(())
        }
    }
}

/// A float as noodles' SAM writer writes it (lexical, trailing ".0"
/// trimmed), so both paths give the same text; SAM has no NaN or infinity.
fn write_float(out: &mut Vec<u8>, n: f32) -> std::io::Result<()> {
    const FORMAT: u128 = lexical_core::format::STANDARD;
    const OPTIONS: lexical_core::WriteFloatOptions = lexical_core::WriteFloatOptionsBuilder::new()
        .trim_floats(true)
        .build_strict();
    if !n.is_finite() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{n} is not a SAM float"),
        ));
    }
    let mut buf = [0u8; lexical_core::BUFFER_SIZE];
    out.extend_from_slice(lexical_core::write_with_options::<_, FORMAT>(
        n, &mut buf, &OPTIONS,
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::parse_sam;
    use crate::sam_text::to_sam_string;

    fn bam_of(sam_text: &str) -> Vec<u8> {
        let t = parse_sam(sam_text.as_bytes(), Path::new("t.sam")).unwrap();
        let header: sam::Header = t.header_text.parse().unwrap();
        let (_, bytes) = crate::bam_out::write_bam_to(
            Vec::new(),
            &header,
            &t.reference_names,
            &t.batches,
            1,
            "test BAM",
        )
        .unwrap();
        bytes
    }

    /// Every kind of field BAM holds: every tag type and array subtype,
    /// omitted SEQ and QUAL, "=" and another reference as RNEXT, MAPQ 255,
    /// an odd number of bases, unplaced reads.
    const SAM: &str = "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:1000\n@SQ\tSN:chr2\tLN:500\n@RG\tID:a\tLB:l\n\
r1\t99\tchr1\t100\t60\t5S5M\t=\t300\t210\tACGTACGTAC\tIIIIIIIIII\tRG:Z:a\tNM:i:0\tXA:Z:chr2,+5,10M,0;\n\
r1\t147\tchr1\t300\t60\t10M\t=\t100\t-210\tNCGTRYKMAC\t#########~\tAS:i:-70000\tXU:i:4000000000\tXC:A:q\n\
r2\t65\tchr2\t50\t255\t3M1I2D5M\tchr1\t7\t0\tACGTACGTA\t*\tXF:f:0.25\tXG:f:-1e-10\tXH:H:CAFE\n\
r2\t129\tchr1\t7\t0\t9M\tchr2\t50\t0\t*\t*\tBc:B:c,-1,2\tBC:B:C,0,255\tBs:B:s,-300\tBS:B:S,60000\tBi:B:i,-70000,0\tBI:B:I,4000000000\tBf:B:f,0.5,-2\n\
r3\t4\t*\t0\t0\t*\t*\t0\t0\tACG\tIII\n";

    #[test]
    fn decodes_every_field_as_the_sam_text_round_trip_does() {
        let bytes = bam_of(SAM);
        let direct = read_bam(
            std::io::Cursor::new(bytes.clone()),
            Path::new("t.bam"),
            2,
            &BatchLimits::default(),
        )
        .unwrap();
        let oracle = read_bam_via_sam_text(
            std::io::Cursor::new(bytes),
            Path::new("t.bam"),
            1,
            &BatchLimits::default(),
        )
        .unwrap();
        assert_eq!(direct.reference_names, ["chr1", "chr2"]);
        assert_eq!(direct.header_text, oracle.header_text);
        assert_eq!(
            to_sam_string(&direct).unwrap(),
            to_sam_string(&oracle).unwrap()
        );
        // The batches themselves, not only their text, are the same.
        assert_eq!(direct.batches, oracle.batches);
        assert_eq!(direct.records(), 5);
        // And the text is SAM's own where SAM text is canonical.
        let text = to_sam_string(&direct).unwrap();
        assert!(
            text.contains("\tNCGTRYKMAC\t#########~\tAS:i:-70000\tXU:i:4000000000\tXC:A:q"),
            "{text}"
        );
        assert!(
            text.contains("\tXF:f:0.25\tXG:f:-1e-10\tXH:H:CAFE"),
            "{text}"
        );
        assert!(text.contains("BI:B:I,4000000000\tBf:B:f,0.5,-2"), "{text}");
        assert!(
            text.contains("r3\t4\t*\t0\t0\t*\t*\t0\t0\tACG\tIII"),
            "{text}"
        );
    }

    #[test]
    fn batches_are_cut_by_the_limits_per_reference() {
        let bytes = bam_of(SAM);
        let limits = BatchLimits {
            max_rows: 1,
            max_string_bytes: 1 << 20,
        };
        let t = read_bam(std::io::Cursor::new(bytes), Path::new("t.bam"), 1, &limits).unwrap();
        assert_eq!(t.batches.len(), 5);
        let rids: Vec<_> = t
            .batches
            .iter()
            .map(|b| crate::schema::batch_reference(b).unwrap())
            .collect();
        assert_eq!(rids, [Some(0), Some(0), Some(0), Some(1), Some(-1)]);
    }

    #[test]
    fn a_cut_stream_names_the_stream_and_where_it_broke() {
        // Enough records for several BGZF blocks (64 KiB of BAM each).
        let mut sam = SAM.to_string();
        for i in 0..3000 {
            sam.push_str(&format!(
                "u{i}\t4\t*\t0\t0\t*\t*\t0\t0\t{}\t{}\n",
                "ACGT".repeat(25),
                "I".repeat(100)
            ));
        }
        let bytes = bam_of(&sam);
        // Cut into the first block (the header's), then into the last data
        // block (the final 28 bytes are BGZF's end-of-file block).
        for (cut, broke) in [(100, "header"), (bytes.len() - 40, "record ")] {
            let e = read_bam(
                std::io::Cursor::new(bytes[..cut].to_vec()),
                Path::new("region 3 BAM"),
                1,
                &BatchLimits::default(),
            )
            .unwrap_err()
            .to_string();
            assert!(e.starts_with("region 3 BAM: ") && e.contains(broke), "{e}");
        }
    }
}
