//! The hand-use subcommands (`bqsr`, `apply-bqsr`, `score`) on files: the
//! SAM that `bqsr --out-sam` writes equals what `apply-bqsr` makes from
//! the table it wrote, and `score` reads the VCFs it is given.

use std::os::unix::fs::PermissionsExt;

use testbed_asam::cli_extra::{ExtraCommand, run_extra};

#[test]
fn bqsr_then_apply_bqsr_agree_and_score_runs() {
    let dir = tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .unwrap();
    let p = |f: &str| dir.path().join(f);
    // chr1 = (ACGTTGCA)×50; reads of 40 bases, one in four with a mismatch
    // at base 20 (G→T at chr1:…), and one read a duplicate.
    let chr1: String = "ACGTTGCA".repeat(50);
    std::fs::write(p("ref.fa"), format!(">chr1\n{chr1}\n")).unwrap();
    let mut sam = format!(
        "@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:chr1\tLN:{}\n@RG\tID:rg1\tSM:s\n",
        chr1.len()
    );
    for i in 0..40usize {
        let start = i * 8;
        let mut seq: Vec<u8> = chr1.as_bytes()[start..start + 40].to_vec();
        if i % 4 == 0 {
            seq[20] = if seq[20] == b'T' { b'A' } else { b'T' };
        }
        let flag = if i == 39 {
            1024
        } else if i % 2 == 1 {
            16
        } else {
            0
        };
        sam.push_str(&format!(
            "r{i}\t{flag}\tchr1\t{}\t60\t40M\t*\t0\t0\t{}\t{}\tRG:Z:rg1\n",
            start + 1,
            String::from_utf8_lossy(&seq),
            "?".repeat(40)
        ));
    }
    std::fs::write(p("in.sam"), &sam).unwrap();
    let known = "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\nchr1\t2\t.\tC\tT\t.\t.\t.\n";
    std::fs::write(p("known.vcf"), known).unwrap();

    run_extra(ExtraCommand::Bqsr {
        sam: p("in.sam"),
        reference: p("ref.fa"),
        known_sites: Some(p("known.vcf")),
        table: p("recal.txt"),
        out_sam: Some(p("direct.sam")),
        keep_original: true,
        threads: 2,
    })
    .unwrap();
    let report = std::fs::read_to_string(p("recal.txt")).unwrap();
    assert!(report.contains("#:GATKTable:RecalTable2:"), "{report}");
    run_extra(ExtraCommand::ApplyBqsr {
        sam: p("in.sam"),
        table: p("recal.txt"),
        out_sam: p("applied.sam"),
        keep_original: true,
        threads: 1,
    })
    .unwrap();
    let direct = std::fs::read_to_string(p("direct.sam")).unwrap();
    assert_eq!(direct, std::fs::read_to_string(p("applied.sam")).unwrap());
    // Qualities changed (10 errors in 1560 counted bases is not Q30) and
    // the old ones are kept.
    let first = direct.lines().find(|l| l.starts_with("r1\t")).unwrap();
    let f: Vec<&str> = first.split('\t').collect();
    assert_ne!(f[10], "?".repeat(40));
    assert!(
        first.ends_with(&format!("OQ:Z:{}", "?".repeat(40))),
        "{first}"
    );

    let vcf = "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\nchr1\t21\t.\tT\tA\t.\tPASS\t.\n";
    std::fs::write(p("calls.vcf"), vcf).unwrap();
    run_extra(ExtraCommand::Score {
        calls: p("calls.vcf"),
        truth: p("calls.vcf"),
        reference: Some(p("ref.fa")),
        targets: None,
        genotype: false,
        include_filtered: false,
    })
    .unwrap();
    let e = run_extra(ExtraCommand::Score {
        calls: p("missing.vcf"),
        truth: p("calls.vcf"),
        reference: None,
        targets: None,
        genotype: false,
        include_filtered: false,
    })
    .unwrap_err();
    assert!(format!("{e:#}").contains("missing.vcf"), "{e:#}");
}
