//! End to end with the real tools (bwa, Picard, samtools): a tiny
//! seeded data set, then arrowsam's order must equal samtools' coordinate
//! order and its duplicate flags Picard's.

use testbed_asam::bench::{BenchOptions, bench};
use testbed_asam::prepare::{DatasetParams, prepare};

#[test]
#[ignore = "prepares the tiny data set with bwa and runs Picard (~6 s); ./x test runs it"]
fn arrowsam_agrees_with_picard_and_samtools_on_a_tiny_data_set() {
    let dir = tempfile::tempdir().unwrap();
    let params = DatasetParams {
        name: "test".into(),
        chromosomes: 3,
        chromosome_length: 30_000,
        coverage: 4.0,
        dup_fraction: 0.2,
        seed: 7,
    };
    let data = prepare(&params, dir.path(), 2).unwrap();
    assert!(!data.cached);
    assert!(data.duplicate_pairs > 0, "{data:?}");
    // A second prepare with the same parameters is served from the cache.
    assert!(prepare(&params, dir.path(), 2).unwrap().cached);

    let report = bench(&BenchOptions {
        sam: data.sam.clone(),
        tools: vec!["picard".into(), "samtools".into(), "arrowsam".into()],
        out_dir: dir.path().join("work"),
        store_dir: dir.path().join("store"),
        threads: 2,
        limits: Default::default(),
        command_line: "real_tools".into(),
    })
    .unwrap();
    let stage = |tool: &str, stage: &str| {
        report
            .stages
            .iter()
            .find(|s| s.tool == tool && s.stage == stage)
            .unwrap_or_else(|| panic!("no {tool} {stage} in {:?}", report.stages))
    };
    let ours = stage("arrowsam", "markdup");
    let picard = stage("picard", "markdup");
    assert_eq!(ours.records, picard.records);
    // Every copied pair is a duplicate pair (two records) except copies of
    // the few unmapped contaminant pairs, which no tool can mark: at least
    // 95 % of the simulated copies are found, and no more than simulated
    // plus a few coincidental ones.
    let marked = ours.duplicates.unwrap();
    let simulated = 2 * data.duplicate_pairs;
    assert!(
        marked * 100 >= simulated * 95 && marked <= simulated + simulated / 10,
        "{ours:?} {data:?}"
    );
    assert_eq!(ours.duplicates, picard.duplicates);
    // bench fails unless both gates pass; here they ran on every record.
    let v = &report.verification;
    assert_eq!(
        v.duplicates_vs_picard.map(|g| g.records),
        Some(ours.records)
    );
    assert_eq!(v.order_vs_samtools.map(|g| g.records), Some(ours.records));
    assert!(stage("arrowsam", "load").seconds > 0.0);
}
