//! The `paper` size: a user's FASTQ pair and reference are checked,
//! indexed and aligned; bad files give an error naming the file, the
//! record and the line, and leave no cache entry behind.

use std::io::Write;
use std::path::{Path, PathBuf};

use testbed_asam::data::{self, sizes};
use testbed_asam::prepare::{DataSpec, UserInput, prepare_user};

/// A small generated data set (no alignment) standing in for user files.
fn user_files(dir: &Path) -> data::Generated {
    let spec = DataSpec {
        name: "user".into(),
        contigs: 3,
        coverage: 2.0,
        libraries: 1,
        lanes: 1,
        ..sizes::tiny()
    };
    let mut spec = spec;
    spec.set_chr1_length(30_000);
    data::generate(&spec, dir).unwrap()
}

fn input(g: &data::Generated, reads1: PathBuf, reads2: PathBuf) -> UserInput {
    UserInput {
        name: "paper".into(),
        reference: g.reference.clone(),
        reads1,
        reads2,
        truth_vcf: Some(g.truth_vcf.clone()),
        known_sites: Some(g.known_sites.clone()),
        targets_bed: None,
        sample: "NA12878".into(),
        library: "libA".into(),
    }
}

fn entries(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| !n.ends_with(".lock"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn paper_data_user_files_are_indexed_and_aligned_and_bad_ones_are_named() {
    let d = tempfile::tempdir().unwrap();
    let g = user_files(&d.path().join("user"));
    let rg = &g.read_groups[0];
    let root = d.path().join("cache");

    // Good files, the second read gzipped.
    let gz = d.path().join("r2.fastq.gz");
    let mut w = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    w.write_all(&std::fs::read(&rg.reads2).unwrap()).unwrap();
    w.finish().unwrap();
    let p = prepare_user(&input(&g, rg.reads1.clone(), gz.clone()), &root, 2).unwrap();
    assert_eq!(p.pairs, rg.pairs);
    assert_eq!(p.read_groups.len(), 1);
    assert_eq!(
        p.read_groups[0].header_line(),
        "@RG\tID:libA.L1\tSM:NA12878\tLB:libA\tPL:ILLUMINA\tPU:paper.1"
    );
    let sam = std::fs::read_to_string(&p.sam).unwrap();
    let body = sam.lines().filter(|l| !l.starts_with('@')).count() as u64;
    assert!(body >= 2 * p.pairs, "{body} records for {} pairs", p.pairs);
    assert!(p.truth_vcf.is_some() && p.sha256.is_some());
    // A build killed half-way is cleared by the next one of that entry.
    let dir = p.dir.clone().unwrap();
    let entry = dir.file_name().unwrap().to_string_lossy().into_owned();
    let stale = root.join(format!(".build-{entry}-x"));
    std::fs::create_dir(&stale).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let again = prepare_user(&input(&g, rg.reads1.clone(), gz.clone()), &root, 2).unwrap();
    assert!(!again.cached && !stale.exists());
    assert_eq!(again.sha256, p.sha256);
    let cached = prepare_user(&input(&g, rg.reads1.clone(), gz), &root, 2).unwrap();
    assert!(cached.cached);

    let fastq = std::fs::read_to_string(&rg.reads1).unwrap();
    let lines: Vec<&str> = fastq.lines().collect();
    let write = |name: &str, text: String| {
        let p = d.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    // Record 3's header lost its '@' (line 9).
    let mut bad = lines.clone();
    let no_at = bad[8][1..].to_string();
    bad[8] = &no_at;
    let malformed = write("malformed.fastq", bad.join("\n") + "\n");
    // Cut inside record 5 (after its sequence line, line 18).
    let truncated = write("truncated.fastq", lines[..18].join("\n") + "\n");
    let fresh = d.path().join("fresh");
    for (r1, want) in [
        (
            malformed,
            "malformed.fastq: record 3 (line 9): header does not start with '@'",
        ),
        (truncated, "truncated.fastq: record 5 (line 17): truncated"),
    ] {
        let e = prepare_user(&input(&g, r1, rg.reads2.clone()), &fresh, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}\nwant: {want}");
    }

    // A reference without chr3, which the truth VCF names.
    let reference = std::fs::read_to_string(&g.reference).unwrap();
    let cut = reference.find(">chr3").unwrap();
    let short_ref = write("short.fa", reference[..cut].to_string());
    let vcf = std::fs::read_to_string(&g.truth_vcf).unwrap();
    let (line, record) = vcf
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#'))
        .enumerate()
        .find(|(_, (_, l))| l.starts_with("chr3\t"))
        .map(|(rec, (line, _))| (line + 1, rec + 1))
        .unwrap();
    let mut u = input(&g, rg.reads1.clone(), rg.reads2.clone());
    u.reference = short_ref.clone();
    let e = prepare_user(&u, &fresh, 1).unwrap_err().to_string();
    let want =
        format!("truth.vcf: record {record} (line {line}): contig chr3 is not in the reference");
    assert!(e.contains(&want), "{e}\nwant: {want}");
    // And a BED naming it.
    u.truth_vcf = None;
    u.known_sites = None;
    u.targets_bed = Some(write("t.bed", "chr1\t100\t200\nchr3\t5\t50\n".into()));
    let e = prepare_user(&u, &fresh, 1).unwrap_err().to_string();
    assert!(e.contains("t.bed: record 2 (line 2): contig chr3"), "{e}");
    assert!(
        entries(&fresh).is_empty(),
        "left behind: {:?}",
        entries(&fresh)
    );
}
