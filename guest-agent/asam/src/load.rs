//! SAM text -> ArrowSAM: the file is streamed line by line (never read
//! whole), each record parsed with noodles and appended to the batch of its
//! reference sequence; a batch full by [`BatchLimits`] is finished and a new
//! one started, so a chromosome becomes a run of batches. Reads without a
//! reference go to the last run.

use std::io::BufRead;
use std::path::Path;

use arrow::array::RecordBatch;
use noodles::sam;

use crate::schema::{BatchBuilder, BatchLimits, Row};
use crate::{AsamError, Result};

/// A SAM file as ArrowSAM batches: the batches of reference 0, then of
/// reference 1, ..., then those of the records placed nowhere (rID -1).
/// References without records have no batch.
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

/// Streams a SAM file into batches cut at the default [`BatchLimits`].
pub fn load_sam(path: &Path) -> Result<SamTable> {
    load_sam_with(path, &BatchLimits::default())
}

/// Streams a SAM file into batches cut at `limits`.
pub fn load_sam_with(path: &Path, limits: &BatchLimits) -> Result<SamTable> {
    let file = std::fs::File::open(path).map_err(|e| AsamError::io(path, e))?;
    read_sam(
        std::io::BufReader::with_capacity(1 << 20, file),
        path,
        limits,
    )
}

/// Parses SAM text held in memory; `path` only names the source in errors.
pub fn parse_sam(bytes: &[u8], path: &Path) -> Result<SamTable> {
    read_sam(bytes, path, &BatchLimits::default())
}

/// Reads SAM from `input` one line at a time; `path` names it in errors.
/// The batches in reference order, unplaced last.
pub fn read_sam(input: impl BufRead, path: &Path, limits: &BatchLimits) -> Result<SamTable> {
    let mut slots = BySlot::default();
    let head = read_sam_into(input, path, limits, |slot, b| {
        slots.push(slot, b);
        Ok(())
    })?;
    Ok(slots.into_table(head))
}

/// Emitted batches kept by slot, so that the table lists them in
/// reference order whatever order they were emitted in.
#[derive(Default)]
pub(crate) struct BySlot(Vec<Vec<RecordBatch>>);

impl BySlot {
    pub(crate) fn push(&mut self, slot: usize, b: RecordBatch) {
        if self.0.len() <= slot {
            self.0.resize(slot + 1, Vec::new());
        }
        self.0[slot].push(b);
    }

    /// The unplaced slot is the highest: its batches come last.
    pub(crate) fn into_table(self, head: SamHead) -> SamTable {
        SamTable {
            header_text: head.header_text,
            reference_names: head.reference_names,
            batches: self.0.into_iter().flatten().collect(),
        }
    }
}

/// The batch being filled for each reference (the last slot: reads placed
/// nowhere); a batch full by the limits is handed back to be emitted.
pub(crate) struct Batcher<'l> {
    builders: Vec<BatchBuilder>,
    limits: &'l BatchLimits,
    pub(crate) records: u64,
}

impl<'l> Batcher<'l> {
    pub(crate) fn new(references: usize, limits: &'l BatchLimits) -> Self {
        Batcher {
            builders: (0..=references).map(|_| BatchBuilder::default()).collect(),
            limits,
            records: 0,
        }
    }

    /// Appends `row` to its reference's batch; the batch it filled, if
    /// any, with its slot.
    pub(crate) fn push(&mut self, row: &Row<'_>) -> Option<(usize, BatchBuilder)> {
        let unplaced = self.builders.len() - 1;
        let slot = usize::try_from(row.rid).map_or(unplaced, |r| r.min(unplaced));
        let b = &mut self.builders[slot];
        let full = b
            .is_full_for(row, self.limits)
            .then(|| (slot, std::mem::take(b)));
        self.builders[slot].push(row);
        self.records += 1;
        full
    }

    /// Emits every batch still being filled, in slot order.
    pub(crate) fn finish(
        self,
        mut emit: impl FnMut(usize, RecordBatch) -> Result<()>,
    ) -> Result<()> {
        for (slot, last) in self.builders.into_iter().enumerate() {
            if last.rows() > 0 {
                emit(slot, last.finish()?)?;
            }
        }
        Ok(())
    }
}

/// What [`read_sam_into`] returns besides the batches it emitted.
#[derive(Debug, Clone)]
pub struct SamHead {
    pub header_text: String,
    pub reference_names: Vec<String>,
    pub records: u64,
}

/// Streams SAM from `input` into batches, calling `emit(slot, batch)` for
/// each batch as soon as it is full (slot: the reference index, or
/// `reference_names.len()` for the unplaced), so that memory holds one
/// batch per reference at most; the rest are emitted at the end, in slot
/// order.
pub fn read_sam_into(
    mut input: impl BufRead,
    path: &Path,
    limits: &BatchLimits,
    mut emit: impl FnMut(usize, RecordBatch) -> Result<()>,
) -> Result<SamHead> {
    limits.validate()?;
    let mut line = Vec::new();
    let mut line_no = 0;
    // The header: the leading `@` lines.
    let mut header_text = String::new();
    let mut pending = false;
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| AsamError::io(path, e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if line[0] != b'@' {
            pending = true;
            break;
        }
        let text = std::str::from_utf8(&line)
            .map_err(|e| bad(path, line_no, format!("header is not UTF-8: {e}")))?;
        header_text.push_str(text);
        if !header_text.ends_with('\n') {
            header_text.push('\n');
        }
    }
    let header: sam::Header = header_text.parse().map_err(|e| {
        bad(
            path,
            header_error_line(&header_text),
            format!("header: {e}"),
        )
    })?;
    let reference_names = reference_names(&header);
    let mut batcher = Batcher::new(reference_names.len(), limits);
    let mut record = sam::Record::default();
    while pending {
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if !text.is_empty() {
            sam::io::Reader::new(text)
                .read_record(&mut record)
                .map_err(|e| {
                    bad(
                        path,
                        line_no,
                        format!("{e} (a record has 11 or more tab-separated fields)"),
                    )
                })?;
            let mut full = None;
            with_row(&record, &header, |row| full = batcher.push(row))
                .map_err(|reason| bad(path, line_no, reason))?;
            if let Some((slot, b)) = full {
                emit(slot, b.finish()?)?;
            }
        }
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| AsamError::io(path, e))?;
        line_no += 1;
        pending = n > 0;
    }
    let records = batcher.records;
    batcher.finish(emit)?;
    Ok(SamHead {
        header_text,
        reference_names,
        records,
    })
}

/// The header's reference names, in order: index i is rID i.
pub fn reference_names(header: &sam::Header) -> Vec<String> {
    header
        .reference_sequences()
        .keys()
        .map(|k| k.to_string())
        .collect()
}

/// The first header line at which the header stops parsing (noodles names
/// no line): the header is parsed line by line, only when it failed whole.
fn header_error_line(header_text: &str) -> usize {
    let lines: Vec<&str> = header_text.lines().collect();
    let mut text = String::new();
    for (i, l) in lines.iter().enumerate() {
        text.push_str(l);
        text.push('\n');
        if text.parse::<sam::Header>().is_err() {
            return i + 1;
        }
    }
    lines.len().max(1)
}

fn bad(path: &Path, line: usize, reason: String) -> AsamError {
    AsamError::Sam {
        path: path.to_path_buf(),
        line,
        reason,
    }
}

/// "field POS (column 4)": how an error names the field it is about.
fn field(name: &str) -> String {
    const COLUMNS: [&str; 12] = [
        "QNAME", "FLAG", "RNAME", "POS", "MAPQ", "CIGAR", "RNEXT", "PNEXT", "TLEN", "SEQ", "QUAL",
        "tags",
    ];
    match COLUMNS.iter().position(|c| *c == name) {
        Some(11) => "optional fields (column 12 on)".to_string(),
        Some(i) => format!("field {name} (column {})", i + 1),
        None => format!("field {name}"),
    }
}

fn text<'r>(name: &str, raw: &'r [u8]) -> std::result::Result<&'r str, String> {
    std::str::from_utf8(raw)
        .map(|s| if s.is_empty() { "*" } else { s })
        .map_err(|e| format!("{}: not UTF-8: {e}", field(name)))
}

fn reference_id(
    name: &str,
    id: Option<std::io::Result<usize>>,
) -> std::result::Result<i32, String> {
    match id {
        None => Ok(-1),
        Some(r) => r
            .map_err(|e| format!("{}: {e}", field(name)))
            .and_then(|i| i32::try_from(i).map_err(|e| format!("{}: {e}", field(name)))),
    }
}

fn position(
    name: &str,
    p: Option<std::io::Result<noodles::core::Position>>,
) -> std::result::Result<i32, String> {
    match p {
        None => Ok(0),
        Some(r) => r
            .map_err(|e| format!("{}: {e}", field(name)))
            .and_then(|p| {
                i32::try_from(usize::from(p)).map_err(|e| format!("{}: {e}", field(name)))
            }),
    }
}

/// Calls `f` with the record in ArrowSAM terms, its text fields borrowed
/// from the record (no copy until the builder appends them). Every field
/// is checked here, so a malformed one is reported with its line rather
/// than later, by the stage that first reads it.
fn with_row(
    r: &sam::Record,
    header: &sam::Header,
    f: impl FnOnce(&Row<'_>),
) -> std::result::Result<(), String> {
    let flags = r.flags().map_err(|e| format!("{}: {e}", field("FLAG")))?;
    let mapq = match r.mapping_quality() {
        // noodles reads 255 (unavailable) as None.
        None => 255,
        Some(q) => i32::from(u8::from(q.map_err(|e| format!("{}: {e}", field("MAPQ")))?)),
    };
    let (cigar, sequence, quality, data) = (r.cigar(), r.sequence(), r.quality_scores(), r.data());
    let mut read_length = 0;
    for op in cigar.iter() {
        let op = op.map_err(|e| format!("{}: {e}", field("CIGAR")))?;
        if op.kind().consumes_read() {
            read_length += op.len();
        }
    }
    for tag in data.iter() {
        tag.map_err(|e| format!("{}: {e}", field("tags")))?;
    }
    let seq = text("SEQ", sequence.as_ref())?;
    let qual = text("QUAL", quality.as_ref())?;
    if !cigar.is_empty() && seq != "*" && read_length != seq.len() {
        return Err(format!(
            "{}: {read_length} read bases for {} in SEQ",
            field("CIGAR"),
            seq.len()
        ));
    }
    if seq != "*" && qual != "*" && seq.len() != qual.len() {
        return Err(format!(
            "{}: {} qualities for {} bases",
            field("QUAL"),
            qual.len(),
            seq.len()
        ));
    }
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
        tlen: r
            .template_length()
            .map_err(|e| format!("{}: {e}", field("TLEN")))?,
        seq,
        qual,
        tags: std::str::from_utf8(data.as_ref())
            .map_err(|e| format!("{}: not UTF-8: {e}", field("tags")))?,
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
        assert_eq!(
            crate::schema::chromosome_groups(&t.batches).unwrap(),
            [(0, vec![0]), (1, vec![1]), (-1, vec![2])]
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

    /// Each malformed line is refused with the file, its line number and
    /// the field at fault.
    #[test]
    fn a_bad_record_names_the_file_line_and_field() {
        let good = rec("ok", 99, "chr1", 100, "10M", "=", 300, 'I');
        let cases = [
            (rec("r1", 99, "chr9", 100, "10M", "=", 1, 'I'), "RNAME"),
            (good.replacen("\t99\t", "\tx9\t", 1), "FLAG"),
            (good.replacen("\t100\t", "\t-5\t", 1), "POS"),
            (good.replacen("\t60\t", "\t999\t", 1), "MAPQ"),
            (good.replacen("\t10M\t", "\t10Q\t", 1), "CIGAR"),
            (good.replacen("\t10M\t", "\t9M\t", 1), "CIGAR"),
            (good.replacen("\t300\t", "\tabc\t", 1), "PNEXT"),
            (good.replacen("\t0\t", "\tt\t", 1), "TLEN"),
            (good.replacen("IIIIIIIIII", "III", 1), "QUAL"),
            (good.replacen("RG:Z:rg1", "RG:Q:rg1", 1), "optional fields"),
        ];
        for (line, what) in cases {
            // Line 6: the header's 4 lines and one good record come first.
            let text = format!("{HEADER}{good}\n{line}\n{good}\n");
            let e = parse_sam(text.as_bytes(), Path::new("bad.sam"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("bad.sam") && e.contains("line 6") && e.contains(what),
                "{what}: {e}"
            );
        }
        // A bad header line is named too: @SQ without a length, line 3.
        let bad_header = HEADER.replace("@SQ\tSN:chr2\tLN:10000", "@SQ\tSN:chr2");
        let e = parse_sam(
            format!("{bad_header}{good}\n").as_bytes(),
            Path::new("h.sam"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("h.sam") && e.contains("line 3") && e.contains("header"),
            "{e}"
        );
        let short = format!("{HEADER}r1\t99\tchr1\t100\n");
        let e = parse_sam(short.as_bytes(), Path::new("short.sam"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("short.sam") && e.contains("line 5"), "{e}");
    }

    /// Tiny limits cut every chromosome into several batches, each within
    /// the limits, holding the same records in the same order as one batch.
    #[test]
    fn batches_are_cut_at_the_limits_and_a_chromosome_spans_several() {
        let mut lines = Vec::new();
        for i in 0..7 {
            lines.extend(crate::testdata::pair(&format!("p{i}"), 100 + i, 300, 'I'));
        }
        lines.push(rec("c2", 0, "chr2", 5, "10M", "*", 0, 'I'));
        let text = format!("{HEADER}{}\n", lines.join("\n"));
        let limits = BatchLimits {
            max_rows: 3,
            max_string_bytes: 1000,
        };
        let t = read_sam(text.as_bytes(), Path::new("t.sam"), &limits).unwrap();
        assert_eq!(
            t.batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(),
            [3, 3, 3, 3, 2, 1]
        );
        assert_eq!(
            crate::schema::chromosome_groups(&t.batches).unwrap(),
            [(0, vec![0, 1, 2, 3, 4]), (1, vec![5])]
        );
        // Streamed, a full batch is emitted at once: chr1's first batches
        // come before chr2's only one, which is emitted at the end.
        let mut slots = Vec::new();
        read_sam_into(text.as_bytes(), Path::new("t.sam"), &limits, |slot, b| {
            slots.push((slot, b.num_rows()));
            Ok(())
        })
        .unwrap();
        assert_eq!(slots, [(0, 3), (0, 3), (0, 3), (0, 3), (0, 2), (1, 1)]);
        assert_eq!(to_sam_string(&t).unwrap(), text);
        // A byte bound: each record's tags take 8 bytes, so 2 fit in 20.
        let bytes = BatchLimits {
            max_rows: 100,
            max_string_bytes: 20,
        };
        let t = read_sam(text.as_bytes(), Path::new("t.sam"), &bytes).unwrap();
        assert!(
            t.batches.iter().all(|b| b.num_rows() <= 2),
            "{:?}",
            t.batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>()
        );
        assert_eq!(t.records(), 15);
        assert_eq!(to_sam_string(&t).unwrap(), text);
    }
}
