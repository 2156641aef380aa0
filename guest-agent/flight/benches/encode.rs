//! Encode/decode cost of the benchmark batches (4 int64 columns), per IPC
//! compression and batch size: what the server pays per DoGet batch when it
//! does not re-send pre-encoded bytes, and what every receiver pays.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use testbed_flight::codec::{BatchDecoder, BatchEncoder, Decoded};
use testbed_flight::data::{ROW_BYTES, make_batch, schema};
use testbed_flight::settings::Compression;

fn bench(c: &mut Criterion) {
    for rows in [4096u32, 65_536] {
        let batch = make_batch(rows, 1).expect("batch");
        let mut g = c.benchmark_group(format!("rows{rows}"));
        g.throughput(Throughput::Bytes(u64::from(rows) * ROW_BYTES));
        for comp in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let mut enc = BatchEncoder::new(comp).expect("encoder");
            g.bench_function(BenchmarkId::new("encode", comp.name()), |b| {
                b.iter(|| enc.encode(black_box(&batch)).expect("encode"))
            });
            let schema_msg = enc.schema(&schema());
            let data = enc.encode(&batch).expect("encode");
            for zero_copy in [true, false] {
                let id = format!(
                    "{}-{}",
                    comp.name(),
                    if zero_copy { "zero-copy" } else { "copy" }
                );
                let mut dec = BatchDecoder::new(Some(schema()), zero_copy);
                dec.decode(&schema_msg).expect("schema");
                g.bench_function(BenchmarkId::new("decode", id), |b| {
                    b.iter(|| match dec.decode(black_box(&data)).expect("decode") {
                        Decoded::Batch(b) => b.num_rows(),
                        _ => 0,
                    })
                });
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
