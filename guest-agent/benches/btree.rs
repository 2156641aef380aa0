//! Host benches of the B+-tree workload's CPU parts: searching one node, and
//! building a depth-3 tree image into memory and into an O_DIRECT file.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use testbed_agent::workload::btree::build::{DirectSink, image_to_vec, write_image};
use testbed_agent::workload::btree::layout::{Layout, NODE_LEAF, NodeRef, encode_node};
use testbed_agent::workload::randread::AlignedBuf;

fn node_search(c: &mut Criterion) {
    let mut g = c.benchmark_group("node_search");
    for node_size in [512usize, 4096] {
        let mut buf = vec![0u8; node_size];
        let f = (node_size as u64 - 16) / 16;
        encode_node(&mut buf, NODE_LEAF, (0..f).map(|i| (i * 3, i)));
        let node = NodeRef::new(&buf);
        g.bench_with_input(BenchmarkId::new("search_le", node_size), &node, |b, n| {
            let mut k = 0u64;
            b.iter(|| {
                k = (k + 7) % (f * 3);
                black_box(n.search_le(black_box(k)))
            })
        });
    }
    g.finish();
}

fn build(c: &mut Criterion) {
    let layout = Layout::new(512, 3, 31u64.pow(3)).expect("layout");
    let mut g = c.benchmark_group("build_depth3");
    g.throughput(Throughput::Bytes(layout.total_bytes));
    g.sample_size(10);
    g.bench_function("vec", |b| {
        b.iter(|| black_box(image_to_vec(&layout, 1).expect("build")))
    });
    // O_DIRECT needs a real filesystem: next to the crate, not tmpfs.
    let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).expect("tempdir");
    let path = dir.path().join("tree.img");
    let path = path.to_string_lossy().to_string();
    let mut chunk = AlignedBuf::new(1 << 20, 4096).expect("buffer");
    g.bench_function("o_direct_file", |b| {
        b.iter(|| {
            let mut sink = DirectSink::open(&path, layout.total_bytes).expect("open");
            write_image(&layout, 1, &mut sink, chunk.as_mut_slice()).expect("write");
            sink.sync().expect("sync");
        })
    });
    g.finish();
}

criterion_group!(benches, node_search, build);
criterion_main!(benches);
