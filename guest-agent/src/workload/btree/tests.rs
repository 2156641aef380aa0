//! End-to-end runs on a file standing in for the device. O_DIRECT needs a
//! real filesystem, so files live under the crate directory, not tmpfs.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::descriptor::descriptor_offset;
use super::layout::Layout;
use super::*;
use testbed_vocab::protocol::{DeviceRef, SampleChunk};
use crate::workload::{VecSink, Workload};

const DEV_SIZE: u64 = 8 << 20;

struct Fixture {
    _dir: tempfile::TempDir,
    path: String,
    ctx: JobContext,
    sink: Arc<VecSink>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    let path = dir.path().join("nvme.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(DEV_SIZE)
        .unwrap();
    let path = path.to_string_lossy().to_string();
    let devices = BTreeMap::from([(
        "data".to_string(),
        DeviceRef {
            path: Some(path.clone()),
            size_bytes: DEV_SIZE,
            logical_block_size: 512,
        },
    )]);
    let sink = Arc::new(VecSink::default());
    let ctx = JobContext {
        job_id: 3,
        seed: 11,
        devices,
        sink: sink.clone(),
    };
    Fixture {
        _dir: dir,
        path,
        ctx,
        sink,
    }
}

/// Depth-3 parameters; `extra` (JSON members with a leading comma) overrides.
fn params(extra: &str) -> BtreeParams {
    let base = r#"{"device": "data", "depth": 3, "lookups_per_thread": 300, "warmup_lookups": 5}"#;
    let mut v: serde_json::Value = serde_json::from_str(base).unwrap();
    let over: serde_json::Value = serde_json::from_str(&format!("{{\"_\": 0{extra}}}")).unwrap();
    for (k, x) in over.as_object().unwrap().iter().filter(|(k, _)| *k != "_") {
        v[k] = x.clone();
    }
    serde_json::from_value(v).unwrap()
}

fn run_ok(f: &Fixture, p: BtreeParams) -> Summary {
    let w = Workload::Btree(p);
    w.validate(&f.ctx.devices).unwrap();
    w.run(&f.ctx).unwrap()
}

fn chunks(f: &Fixture, metric: &str) -> Vec<SampleChunk> {
    let all = f.sink.0.lock().unwrap();
    all.iter().filter(|c| c.metric == metric).cloned().collect()
}

fn num(s: &Summary, k: &str) -> f64 {
    s.get(k)
        .and_then(|v| v.as_f64())
        .unwrap_or_else(|| panic!("no {k} in {s:?}"))
}

#[test]
fn read_engine_builds_then_verifies_every_lookup() {
    let f = fixture();
    let s = run_ok(&f, params(", \"threads\": 2"));
    assert_eq!(s["built"], serde_json::json!(true));
    assert_eq!(num(&s, "keys"), 29_791.0);
    assert_eq!(num(&s, "verified_lookups"), 600.0);
    assert_eq!(num(&s, "lookups"), 600.0);
    assert_eq!(
        (
            num(&s, "index_ios_per_lookup"),
            num(&s, "total_ios_per_lookup")
        ),
        (3.0, 4.0)
    );
    assert!((num(&s, "ios_per_s") / num(&s, "lookups_per_s") - 4.0).abs() < 1e-9);
    assert!(num(&s, "lookup_latency_p99_ns") >= num(&s, "lookup_latency_p50_ns"));
    assert_eq!(s["hop_latency_mean_ns_by_hop"].as_array().unwrap().len(), 4);
    let lat = chunks(&f, "lookup_latency");
    assert_eq!(lat.iter().map(|c| c.values.len()).sum::<usize>(), 600);
    assert!(
        lat.iter()
            .all(|c| c.tags["engine"] == "read" && c.job_id == 3)
    );
    assert_eq!(
        lat.iter()
            .map(|c| c.thread)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        2
    );
    let hops = chunks(&f, "hop_latency");
    assert_eq!(hops.iter().map(|c| c.values.len()).sum::<usize>(), 2400);
    assert!(hops.iter().any(|c| c.tags["hop"] == "3"));
    // The descriptor now names this tree, so the next point reuses it.
    let s2 = run_ok(&f, params(""));
    assert_eq!(s2["built"], serde_json::json!(false));
    assert_eq!(num(&s2, "verified_lookups"), 300.0);
}

#[test]
fn io_uring_batch_4_with_2_threads_verifies_every_lookup() {
    let f = fixture();
    let s = run_ok(
        &f,
        params(", \"engine\": \"io-uring\", \"batch\": 4, \"threads\": 2"),
    );
    assert_eq!(num(&s, "verified_lookups"), 600.0);
    let lat = chunks(&f, "lookup_latency");
    assert_eq!(lat.iter().map(|c| c.values.len()).sum::<usize>(), 600);
    assert!(lat.iter().all(|c| c.tags["engine"] == "io-uring"));
    assert!(lat.iter().flat_map(|c| &c.values).all(|&v| v > 0.0));
}

#[test]
fn io_uring_variants_registered_buffers_and_sqpoll() {
    let f = fixture();
    let p = params(
        ", \"engine\": \"io-uring\", \"batch\": 8, \"registered_buffers\": true, \"sqpoll\": true",
    );
    let s = run_ok(&f, p);
    assert_eq!(num(&s, "verified_lookups"), 300.0);
}

#[test]
fn the_sqpoll_engine_is_charged_for_its_polling_thread() {
    let f = fixture();
    let p = params(", \"engines\": [\"read\", \"io-uring-sqpoll\"], \"interleave_block\": 50");
    let s = run_ok(&f, p);
    let e = "io-uring-sqpoll";
    assert_eq!(num(&s, &format!("{e}.verified_lookups")), 300.0);
    // The poller spins through the engine's blocks, so the engine's CPU
    // time is most of its wall time; the lookup thread alone, which
    // sleeps waiting for completions, would show a small part of it.
    let cpu = num(&s, &format!("{e}.cpu_user_s")) + num(&s, &format!("{e}.cpu_sys_s"));
    let wall = num(&s, &format!("{e}.wall_s"));
    assert!(cpu >= 0.3 * wall, "CPU {cpu} s over {wall} s of wall time");
    let per_lookup = num(&s, &format!("{e}.cpu_us_per_lookup"));
    assert!((per_lookup - cpu / 300.0 * 1e6).abs() < 1e-6 * per_lookup.max(1.0));
    // The whole machine was at least as busy in those blocks (in ticks).
    let busy = num(&s, &format!("{e}.guest_busy_s"));
    assert!(busy >= 0.5 * cpu, "busy {busy} s, engine {cpu} s");
    let guest_per_lookup = num(&s, &format!("{e}.guest_cpu_us_per_lookup"));
    assert!((guest_per_lookup - busy / 300.0 * 1e6).abs() < 1e-6 * guest_per_lookup.max(1.0));
}

#[test]
fn interleaved_engines_tag_samples_and_prefix_the_summary() {
    let f = fixture();
    let p = params(
        ", \"engines\": [\"read\", \"io-uring\"], \"batch\": 2, \"interleave_block\": 50, \"sample_every\": 3",
    );
    let s = run_ok(&f, p);
    for e in ["read", "io-uring"] {
        assert_eq!(num(&s, &format!("{e}.verified_lookups")), 300.0);
        assert!(num(&s, &format!("{e}.lookups_per_s")) > 0.0);
        assert!(s.contains_key(&format!("{e}.lookup_latency_p999_ns")));
        assert!(s.contains_key(&format!("{e}.cpu_user_s")));
        let kept: usize = chunks(&f, "lookup_latency")
            .iter()
            .filter(|c| c.tags["engine"] == e)
            .map(|c| c.values.len())
            .sum();
        assert_eq!(kept, 100, "every 3rd of 300 lookups for {e}");
    }
    assert!(!s.contains_key("lookups_per_s"));
    assert!(s["sample_rule"].as_str().unwrap().contains("% 3"));
}

#[test]
fn a_corrupted_value_fails_the_run_naming_key_and_offset() {
    let f = fixture();
    // 40 keys so that 300 random lookups surely hit key 7.
    run_ok(&f, params(", \"keys\": 40"));
    let layout = Layout::new(512, 3, 40).unwrap();
    let at = layout.value_offset(7) + 20;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&f.path)
        .unwrap();
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, at).unwrap();
    file.write_all_at(&[b[0] ^ 0xff], at).unwrap();
    file.sync_all().unwrap();
    for engine in ["read", "io-uring"] {
        let p = params(&format!(", \"keys\": 40, \"engine\": \"{engine}\""));
        let err = Workload::Btree(p).run(&f.ctx).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, WorkloadError::Verify(_)), "{engine}: {msg}");
        assert!(
            msg.contains("key 7") && msg.contains(&format!("offset {}", at - 20)),
            "{msg}"
        );
    }
    // build = "always" rewrites the tree, which heals it.
    let s = run_ok(&f, params(", \"keys\": 40, \"build\": \"always\""));
    assert_eq!(s["built"], serde_json::json!(true));
}

#[test]
fn a_different_tree_is_rebuilt_not_reused() {
    let f = fixture();
    run_ok(&f, params(""));
    let s = run_ok(&f, params(", \"tree_seed\": 2"));
    assert_eq!(s["built"], serde_json::json!(true));
    let desc = build::read_descriptor(&f.path, descriptor_offset(DEV_SIZE).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!((desc.tree_seed, desc.depth, desc.keys), (2, 3, 29_791));
}

#[test]
fn four_kib_nodes_and_a_deep_sparse_tree() {
    let f = fixture();
    let s = run_ok(&f, params(", \"node_size\": 4096, \"depth\": 2"));
    assert_eq!(num(&s, "keys"), 255.0 * 255.0);
    assert_eq!(num(&s, "verified_lookups"), 300.0);
    let s = run_ok(
        &f,
        params(", \"depth\": 10, \"keys\": 500, \"engine\": \"io-uring\", \"batch\": 2"),
    );
    assert_eq!(
        (num(&s, "verified_lookups"), num(&s, "total_ios_per_lookup")),
        (300.0, 11.0)
    );
}

#[test]
fn synthetic_chains_issue_exactly_depth_reads_per_lookup() {
    let f = fixture();
    for engine in ["read", "io-uring"] {
        let p = params(&format!(
            ", \"mode\": \"synthetic\", \"depth\": 6, \"engine\": \"{engine}\""
        ));
        let s = run_ok(&f, p);
        assert_eq!(num(&s, "total_ios_per_lookup"), 6.0);
        assert!(!s.contains_key("built"));
        assert_eq!(s["hop_latency_mean_ns_by_hop"].as_array().unwrap().len(), 6);
    }
    let hops = chunks(&f, "hop_latency");
    assert_eq!(
        hops.iter().map(|c| c.values.len()).sum::<usize>(),
        2 * 300 * 6
    );
    assert!(
        hops.iter()
            .all(|c| c.tags["hop"].parse::<u32>().unwrap() < 6)
    );
}

#[test]
#[ignore = "needs fio (./x setup installs it; ./x test runs this)"]
fn compare_with_fio_reports_the_ratio() {
    assert!(
        crate::workload::fio::fio_binary().is_some(),
        "fio is not installed: ./x setup"
    );
    let f = fixture();
    let p = ", \"depth\": 1, \"compare_with_fio\": true, \"fio_ios\": 400, \"threads\": 2";
    let s = run_ok(&f, params(p));
    let ratio = num(&s, "read_vs_fio_iops_ratio");
    assert!(ratio > 0.0 && ratio.is_finite(), "{ratio}");
    assert!(num(&s, "read_vs_fio_latency_ratio") > 0.0);
    // Four segments of 100 I/Os per job, two jobs.
    assert_eq!(s["fio.iops_by_segment"].as_array().unwrap().len(), 4);
    assert_eq!(num(&s, "fio.total_ios"), 800.0);
    let pct = chunks(&f, "fio_clat_percentile");
    assert!(pct.iter().all(|c| c.tags["engine"] == "fio"));
    let segments: std::collections::BTreeSet<_> =
        pct.iter().map(|c| c.tags["segment"].clone()).collect();
    assert_eq!(segments.len(), 4);
    assert_eq!(num(&s, "verified_lookups"), 600.0);
    // Both sides' CPU per I/O, which is what separates them under TCG.
    // fio's usr/sys percentages come from tick-based rusage, so a run of a
    // few milliseconds may honestly report 0; the key must still be there.
    assert!(num(&s, "cpu_us_per_io") > 0.0);
    let fio_cpu = num(&s, "fio.cpu_us_per_io");
    assert!(fio_cpu >= 0.0 && fio_cpu.is_finite(), "{fio_cpu}");
}

#[test]
#[ignore = "needs fio (./x setup installs it; ./x test runs this)"]
fn pinned_threads_and_a_lean_fio_peer() {
    assert!(
        crate::workload::fio::fio_binary().is_some(),
        "fio is not installed: ./x setup"
    );
    let f = fixture();
    let p = ", \"depth\": 1, \"compare_with_fio\": true, \"fio_ios\": 200, \"threads\": 2, \
             \"pin_threads\": true, \"fio_gtod_reduce\": true, \"fio_ioengine\": \"pvsync2\"";
    let s = run_ok(&f, params(p));
    assert_eq!(num(&s, "fio.total_ios"), 400.0);
    // gtod_reduce: fio measures no latencies, only IOPS.
    assert_eq!(num(&s, "fio.lat_mean_ns"), 0.0);
    assert!(num(&s, "read_vs_fio_iops_ratio") > 0.0);
}

#[test]
fn an_async_fio_peer_is_refused() {
    let f = fixture();
    let bad = params(", \"depth\": 1, \"compare_with_fio\": true, \"fio_ioengine\": \"io_uring\"");
    let e = Workload::Btree(bad).validate(&f.ctx.devices).unwrap_err();
    assert!(e.to_string().contains("fio_ioengine"), "{e}");
}

#[test]
fn the_tree_can_live_in_a_file_instead_of_the_namespace() {
    let f = fixture();
    let file = f._dir.path().join("fs").join("tree.img");
    std::fs::create_dir(file.parent().unwrap()).unwrap();
    let extra = format!(", \"file\": {:?}", file.to_string_lossy());
    let s = run_ok(&f, params(&extra));
    assert_eq!(num(&s, "verified_lookups"), 300.0);
    // 7/8 of the 8 MiB device, leaving room for filesystem metadata.
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 7 << 20);
    let raw = std::fs::read(&f.path).unwrap();
    assert!(
        raw.iter().all(|&b| b == 0),
        "the raw namespace stays untouched"
    );
}
