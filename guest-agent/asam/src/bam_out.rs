//! ArrowSAM -> a coordinate-sorted BAM file a genomics user can open: the
//! input's header with `@HD VN:1.6 SO:coordinate` and a `@PG` line of
//! ours, the records in batch order, written with noodles and compressed
//! by a pool of BGZF workers (as samtools and sambamba compress with
//! `-@`/`-t` threads).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::num::NonZero;
use std::path::Path;

use arrow::array::RecordBatch;
use noodles::bam;
use noodles::bgzf;
use noodles::sam;
use noodles::sam::alignment::io::Write as _;

use crate::sam_text::format_row;
use crate::schema::Columns;
use crate::{AsamError, Result};

/// The `@PG` ID and PN of ArrowSAM's output.
pub const PROGRAM: &str = "testbed-asam";

/// The output header as text: the input's lines with its `@HD` replaced
/// by `@HD VN:1.6 SO:coordinate` (first), and a `@PG` line appended whose
/// PP chains to the input's last `@PG` (as Picard and samtools chain).
pub fn coordinate_header_text(input_header: &str, command_line: &str) -> String {
    let mut out = String::from("@HD\tVN:1.6\tSO:coordinate\n");
    let mut ids = Vec::new();
    for line in input_header.lines() {
        if line.starts_with("@HD\t") || line == "@HD" || line.is_empty() {
            continue;
        }
        if line.starts_with("@PG\t")
            && let Some(id) = line.split('\t').find_map(|f| f.strip_prefix("ID:"))
        {
            ids.push(id.to_string());
        }
        out.push_str(line);
        out.push('\n');
    }
    // IDs are unique within a header: a second run of ours gets ".1", ...
    let mut id = PROGRAM.to_string();
    let mut n = 0;
    while ids.contains(&id) {
        n += 1;
        id = format!("{PROGRAM}.{n}");
    }
    out.push_str(&format!(
        "@PG\tID:{id}\tPN:{PROGRAM}\tVN:{}",
        env!("CARGO_PKG_VERSION")
    ));
    if let Some(last) = ids.last() {
        out.push_str(&format!("\tPP:{last}"));
    }
    // A header field holds no tab or newline.
    let cl: String = command_line
        .chars()
        .map(|c| if c == '\t' || c == '\n' { ' ' } else { c })
        .collect();
    out.push_str(&format!("\tCL:{cl}\n"));
    out
}

/// Writes `batches` (already coordinate-sorted, in reference order) to a
/// new BAM file at `path` with [`coordinate_header_text`]'s header;
/// `threads` BGZF workers compress. Returns the number of records.
pub fn write_bam(
    path: &Path,
    input_header: &str,
    reference_names: &[String],
    batches: &[RecordBatch],
    threads: usize,
    command_line: &str,
) -> Result<u64> {
    let header_text = coordinate_header_text(input_header, command_line);
    let header: sam::Header = header_text
        .parse()
        .map_err(|e| AsamError::Invalid(format!("output header for {}: {e}", path.display())))?;
    let io = |e| AsamError::io(path, e);
    let file = File::create(path).map_err(io)?;
    let (n, inner) = write_bam_to(
        BufWriter::with_capacity(1 << 20, file),
        &header,
        reference_names,
        batches,
        threads,
        &path.display().to_string(),
    )?;
    // Flushed, not synced: no other tool fsyncs its output either.
    inner.into_inner().map_err(|e| io(e.into_error()))?;
    Ok(n)
}

/// Writes `header` and `batches` as BAM to `inner` (a file, a socket),
/// `threads` BGZF workers compressing; returns the record count and
/// `inner`, flushed. `label` names the destination in errors.
pub fn write_bam_to<W: Write + Send + 'static>(
    inner: W,
    header: &sam::Header,
    reference_names: &[String],
    batches: &[RecordBatch],
    threads: usize,
    label: &str,
) -> Result<(u64, W)> {
    let io = |e| AsamError::io(label, e);
    let workers = NonZero::new(threads.max(1)).unwrap_or(NonZero::<usize>::MIN);
    let mut writer = bam::io::Writer::from(bgzf::io::MultithreadedWriter::with_worker_count(
        workers, inner,
    ));
    writer.write_header(header).map_err(io)?;
    let mut line = Vec::new();
    let mut record = sam::Record::default();
    let mut n = 0u64;
    for b in batches {
        let c = Columns::of(b)?;
        for i in 0..b.num_rows() {
            let row = c.row(i);
            line.clear();
            format_row(&mut line, &row, reference_names);
            // The row goes through noodles' SAM record so that its fields
            // are encoded by the same code that reads them.
            sam::io::Reader::new(&line[..])
                .read_record(&mut record)
                .and_then(|_| writer.write_alignment_record(header, &record))
                .map_err(|e| {
                    AsamError::Invalid(format!("{label}: record {n} (read {}): {e}", row.qname))
                })?;
            n += 1;
        }
    }
    let inner = writer.get_mut().finish().map_err(io)?;
    Ok((n, inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_says_coordinate_and_chains_our_program_line() {
        let input = "@HD\tVN:1.5\tSO:unsorted\n@SQ\tSN:chr1\tLN:10\n@RG\tID:a\tLB:l\n@PG\tID:bwa\tPN:bwa\n@PG\tID:testbed-asam\tPN:testbed-asam\tPP:bwa\n";
        let h = coordinate_header_text(input, "testbed-asam bench-preproc\t--x");
        let lines: Vec<&str> = h.lines().collect();
        assert_eq!(lines[0], "@HD\tVN:1.6\tSO:coordinate");
        assert_eq!(&lines[1..5], &input.lines().skip(1).collect::<Vec<_>>()[..]);
        let pg = lines[5];
        assert!(
            pg.starts_with("@PG\tID:testbed-asam.1\tPN:testbed-asam\tVN:"),
            "{pg}"
        );
        assert!(
            pg.ends_with("\tPP:testbed-asam\tCL:testbed-asam bench-preproc --x"),
            "{pg}"
        );
        assert_eq!(lines.len(), 6);
        let parsed: sam::Header = h.parse().unwrap();
        assert_eq!(parsed.programs().as_ref().len(), 3);
    }
}
