//! BAM -> ArrowSAM per record: the direct decoder (fields to the batch
//! builders) against the SAM text round trip it replaced (each record
//! formatted as a SAM line, the text parsed again). Records shaped like
//! bwa's: 150 bases, paired, six tags. What the flight-genomics BAM
//! receiver pays per region beyond inflating BGZF.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use noodles::sam;
use testbed_asam::bam_in::{read_bam, read_bam_via_sam_text};
use testbed_asam::load::parse_sam;
use testbed_asam::schema::BatchLimits;

const RECORDS: usize = 50_000;

/// A BAM of `RECORDS` paired, bwa-like records on two references.
fn bam() -> Vec<u8> {
    let mut sam = String::from(
        "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:50000000\n@SQ\tSN:chr2\tLN:50000000\n@RG\tID:rg1\tLB:lib1\tSM:s1\n",
    );
    let bases = b"ACGT";
    for i in 0..RECORDS {
        let seq: String = (0..150)
            .map(|j| bases[(i * 7 + j * 13 + j / 5) % 4] as char)
            .collect();
        let qual: String = (0..150)
            .map(|j| (b'#' + ((i + j * 3) % 38) as u8) as char)
            .collect();
        let (chr, pos) = (1 + i % 2, 1000 + (i / 2) * 300);
        let (flag, tlen) = if i % 2 == 0 { (99, 450) } else { (147, -450) };
        sam.push_str(&format!(
            "read{}:{}\t{flag}\tchr{chr}\t{pos}\t60\t150M\t=\t{}\t{tlen}\t{seq}\t{qual}\tNM:i:2\tMD:Z:70A50C28\tMC:Z:150M\tAS:i:140\tXS:i:20\tRG:Z:rg1\n",
            i / 2,
            i % 2,
            pos + 300
        ));
    }
    let t = parse_sam(sam.as_bytes(), Path::new("bench.sam")).expect("SAM");
    let header: sam::Header = t.header_text.parse().expect("header");
    let (_, bytes) = testbed_asam::bam_out::write_bam_to(
        Vec::new(),
        &header,
        &t.reference_names,
        &t.batches,
        1,
        "bench BAM",
    )
    .expect("BAM");
    bytes
}

fn bench(c: &mut Criterion) {
    let bytes = bam();
    let limits = BatchLimits::default();
    let mut g = c.benchmark_group("bam-to-arrowsam");
    g.throughput(Throughput::Elements(RECORDS as u64));
    g.sample_size(10);
    g.bench_function("direct", |b| {
        b.iter(|| {
            let input = std::io::Cursor::new(bytes.clone());
            read_bam(black_box(input), Path::new("bench"), 1, &limits)
                .expect("decode")
                .records()
        })
    });
    g.bench_function("via-sam-text", |b| {
        b.iter(|| {
            let input = std::io::Cursor::new(bytes.clone());
            read_bam_via_sam_text(black_box(input), Path::new("bench"), 1, &limits)
                .expect("decode")
                .records()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
