//! WES mode: a targets BED is written and the reads come from the targets
//! (plus the documented off-target fraction).

mod data_common;

use data_common::read_sam;
use testbed_asam::data::{Mode, sizes};
use testbed_asam::prepare::{DataSpec, prepare_generated};

#[test]
fn wes_data_reads_fall_in_targets_but_for_the_off_target_fraction() {
    let root = tempfile::tempdir().unwrap();
    let spec = DataSpec {
        name: "wes".into(),
        mode: Mode::Wes,
        coverage: 30.0,
        ..sizes::tiny()
    };
    let p = prepare_generated(&spec, root.path(), 2).unwrap();
    let bed = std::fs::read_to_string(p.targets_bed.as_ref().unwrap()).unwrap();
    let targets: Vec<(String, i64, i64)> = bed
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect();
    assert!(targets.len() >= 40, "{} targets", targets.len());
    let target_bp: i64 = targets.iter().map(|t| t.2 - t.1).sum();
    let genome: u64 = 3.1e9 as u64 / 4000;
    assert!(
        (target_bp as f64) < 0.05 * genome as f64,
        "targets cover {target_bp} bp"
    );
    // A read is on target when within a fragment's length of one: the
    // fragment overlapped the target, the read is one end of it.
    let near = |r: &data_common::Rec| {
        let (s, e) = r.span();
        targets
            .iter()
            .any(|t| t.0 == r.rname && s < t.2 + 400 && t.1 - 400 < e)
    };
    let reads: Vec<_> = read_sam(&p.sam)
        .into_iter()
        .filter(|r| !r.unmapped() && r.mapq >= 20)
        .collect();
    let on = reads.iter().filter(|r| near(r)).count() as f64 / reads.len() as f64;
    println!(
        "wes: {} targets, {target_bp} bp, {} pairs, {:.1} % of confident reads near targets",
        targets.len(),
        p.pairs,
        100.0 * on
    );
    assert!(on >= 0.85, "only {on} of reads near targets");
    assert!(
        on <= 0.97,
        "{on} of reads near targets: no off-target reads"
    );
    // The BED is sorted and names contigs of the reference.
    let mut sorted = targets.clone();
    let order = |c: &str| {
        p.read_groups.len()
            + testbed_asam::data::genome::HG19
                .iter()
                .position(|h| h.0 == c)
                .unwrap()
    };
    sorted.sort_by_key(|t| (order(&t.0), t.1));
    assert_eq!(sorted, targets);
}
