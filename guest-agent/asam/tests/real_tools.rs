//! End to end with the real tools (bwa, ART, Picard, samtools): a tiny
//! seeded data set, then arrowsam's order must equal samtools' coordinate
//! order and its duplicate flags Picard's.

use testbed_asam::bench::{BenchOptions, bench};
use testbed_asam::prepare::{DatasetParams, prepare};

#[test]
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
        workdir: dir.path().join("work"),
        store_dir: dir.path().join("store"),
        threads: 2,
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
    // Every injected copy is a duplicate pair (two records), plus ART's own.
    assert!(
        ours.duplicates.unwrap() >= 2 * data.duplicate_pairs,
        "{ours:?} {data:?}"
    );
    assert_eq!(ours.duplicates, picard.duplicates);
    assert_eq!(report.verification.dup_mismatches_vs_picard, Some(0));
    assert_eq!(report.verification.order_matches_samtools, Some(true));
    assert!(stage("arrowsam", "load").seconds > 0.0);
}
