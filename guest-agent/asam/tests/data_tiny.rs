//! The `tiny` preset end to end (generator, bwa index, bwa mem): its
//! realism (GC, MAPQ spread, variants, duplicates), its truth VCF against
//! bcftools and the haplotypes, and that it is byte-identical for a seed
//! and independent of bwa's thread count. One test, so the data set is
//! made once (twice, for determinism) and removed at the end.

mod data_common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use data_common::{Rec, read_sam, read_tsv, spec_of};
use testbed_asam::data::{self, sizes};
use testbed_asam::prepare::{
    DataSpec, Prepared, Source, bwa_commands, cache_key, prepare_generated,
};

#[test]
#[ignore = "simulates and aligns the tiny data set twice with ART and bwa (~15 s); ./x test runs it"]
fn the_tiny_data_set_is_realistic_deterministic_and_thread_independent() {
    let root = tempfile::tempdir().unwrap();
    let spec = sizes::preset("tiny").unwrap();
    let p = prepare_generated(&spec, &root.path().join("a"), 2).unwrap();
    let generate = p.seconds["generate"];
    let align = p.seconds["align"];
    println!(
        "tiny: {} pairs, generate {generate:.2} s, bwa index {:.2} s, bwa mem (2 threads) {align:.2} s",
        p.pairs, p.seconds["index"]
    );
    assert!(align < 20.0, "bwa mem took {align} s on tiny");
    assert!(!p.cached);
    let again = prepare_generated(&spec, &root.path().join("a"), 2).unwrap();
    assert!(again.cached);
    assert_eq!(again.sam, p.sam);
    // A moved cache root still answers, with the paths where it is now.
    std::fs::rename(root.path().join("a"), root.path().join("moved")).unwrap();
    let moved = prepare_generated(&spec, &root.path().join("moved"), 2).unwrap();
    assert!(moved.cached && moved.sam.starts_with(root.path().join("moved")));
    assert!(moved.read_groups.iter().all(|g| g.reads1.is_file()));
    std::fs::rename(root.path().join("moved"), root.path().join("a")).unwrap();

    gc_is_near_41_percent(&p.reference);
    mapping_quality_varies(&p);
    duplicates_share_outer_coordinates_and_differ_in_errors(&p);
    vcfs_pass_bcftools_and_alts_match_the_haplotypes(&p);
    counts_are_as_documented(&p);
    read_groups_and_commands(&p);
    same_files_for_a_seed_and_one_thread(&p, root.path());
}

fn gc_is_near_41_percent(reference: &Path) {
    let text = std::fs::read_to_string(reference).unwrap();
    let (mut gc, mut all) = (0usize, 0usize);
    for l in text.lines().filter(|l| !l.starts_with('>')) {
        gc += l.bytes().filter(|b| matches!(b, b'G' | b'C')).count();
        all += l.len();
    }
    let f = gc as f64 / all as f64;
    assert!((0.39..=0.43).contains(&f), "GC {f}");
    let names: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix('>')).collect();
    assert_eq!(names.len(), 25);
    assert_eq!(names[0], "chr1");
    assert_eq!(names[22..], ["chrX", "chrY", "chrM"]);
}

fn mapping_quality_varies(p: &Prepared) {
    let recs: Vec<Rec> = read_sam(&p.sam)
        .into_iter()
        .filter(|r| !r.unmapped())
        .collect();
    let n = recs.len() as f64;
    let zero = recs.iter().filter(|r| r.mapq == 0).count() as f64 / n;
    let high = recs.iter().filter(|r| r.mapq >= 30).count() as f64 / n;
    println!(
        "tiny: MAPQ 0 {:.1} %, MAPQ >= 30 {:.1} %",
        100.0 * zero,
        100.0 * high
    );
    assert!(
        zero >= 0.01,
        "only {zero} of reads have MAPQ 0: repeats too weak"
    );
    assert!(
        zero <= 0.15,
        "{zero} of reads have MAPQ 0: repeats too strong"
    );
    assert!(high >= 0.8, "only {high} of reads have MAPQ >= 30");
}

fn duplicates_share_outer_coordinates_and_differ_in_errors(p: &Prepared) {
    let rows = read_tsv(p.duplicates_tsv.as_ref().unwrap());
    assert_eq!(rows.len() as u64, p.pairs);
    let names: std::collections::HashSet<&str> =
        rows.iter().map(|r| r["read_name"].as_str()).collect();
    assert_eq!(names.len(), rows.len(), "read names repeat");
    let dups = rows.iter().filter(|r| r["kind"] != "original").count() as u64;
    assert_eq!(dups, p.duplicate_pairs);
    let mut by_name: HashMap<&str, [Option<&Rec>; 2]> = HashMap::new();
    let recs = read_sam(&p.sam);
    for r in &recs {
        by_name.entry(&r.name).or_default()[usize::from(!r.first())] = Some(r);
    }
    let mut groups: HashMap<&str, Vec<&HashMap<String, String>>> = HashMap::new();
    for r in &rows {
        groups.entry(&r["fragment"]).or_default().push(r);
    }
    let (mut checked, mut same_ends, mut seq_differs, mut qual_differs) = (0, 0, 0, 0);
    for members in groups.values().filter(|m| m.len() > 1) {
        let libs: Vec<&str> = members.iter().map(|m| m["library"].as_str()).collect();
        assert!(
            libs.iter().all(|l| *l == libs[0]),
            "one library per fragment: {libs:?}"
        );
        let pairs: Vec<[&Rec; 2]> = members
            .iter()
            .map(|m| {
                let [a, b] = by_name[m["read_name"].as_str()];
                [a.unwrap(), b.unwrap()]
            })
            .collect();
        // Only where the mapper is sure: at MAPQ 0 it may place copies
        // of one fragment apart.
        if pairs.iter().flatten().any(|r| r.unmapped() || r.mapq < 20) {
            continue;
        }
        checked += 1;
        let ends =
            |pr: &[&Rec; 2]| pr.map(|r| (r.rname.clone(), r.unclipped_five_prime(), r.reverse()));
        if pairs.iter().all(|pr| ends(pr) == ends(&pairs[0])) {
            same_ends += 1;
        }
        if pairs
            .iter()
            .any(|pr| pr[0].seq != pairs[0][0].seq || pr[1].seq != pairs[0][1].seq)
        {
            seq_differs += 1;
        }
        if pairs.iter().any(|pr| pr[0].qual != pairs[0][0].qual) {
            qual_differs += 1;
        }
        for m in members.iter().filter(|m| m["kind"] == "optical") {
            let orig = members.iter().find(|o| o["kind"] == "original").unwrap();
            let f = |n: &str| -> Vec<i64> {
                n.rsplit(':').take(3).map(|x| x.parse().unwrap()).collect()
            };
            let (a, b) = (f(&m["read_name"]), f(&orig["read_name"]));
            assert_eq!(a[2], b[2], "optical duplicate on another tile");
            assert!((a[0] - b[0]).abs() <= 100 && (a[1] - b[1]).abs() <= 100);
            assert_eq!(m["read_group"], orig["read_group"], "optical: same lane");
        }
    }
    println!(
        "tiny: {checked} confident duplicate groups: {same_ends} share ends, {seq_differs} differ in bases, {qual_differs} in qualities"
    );
    assert!(checked > 50, "{checked} groups");
    assert!(
        same_ends as f64 >= 0.97 * checked as f64,
        "{same_ends}/{checked} share outer ends"
    );
    assert!(
        seq_differs as f64 >= 0.3 * checked as f64,
        "{seq_differs}/{checked} differ in bases"
    );
    assert_eq!(qual_differs, checked, "copies with identical qualities");
    // Unrelated pairs rarely share both ends by chance.
    assert!(p.duplicate_pairs as f64 > 0.05 * p.pairs as f64);
}

fn vcfs_pass_bcftools_and_alts_match_the_haplotypes(p: &Prepared) {
    let truth_vcf = p.truth_vcf.as_ref().unwrap();
    let counts = p.variants.unwrap();
    for (vcf, want) in [
        (truth_vcf, counts.snps + counts.indels),
        (p.known_sites.as_ref().unwrap(), counts.known_sites),
    ] {
        let out = Command::new("bcftools")
            .args(["view", "-H"])
            .arg(vcf)
            .output()
            .expect("bcftools (apt-get install bcftools)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "bcftools warns: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            out.stdout.iter().filter(|&&b| b == b'\n').count() as u64,
            want
        );
    }
    // The file's records against the haplotypes regenerated from the spec.
    let t = data::truth(&spec_of(p));
    let index: HashMap<&str, usize> = t
        .genome
        .contigs
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();
    let text = std::fs::read_to_string(truth_vcf).unwrap();
    let mut n = 0;
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = l.split('\t').collect();
        let c = index[f[0]];
        let pos: usize = f[1].parse::<usize>().unwrap() - 1;
        let (reference, alt) = (f[3].as_bytes(), f[4].as_bytes());
        assert_eq!(
            &t.genome.contigs[c].seq[pos..pos + reference.len()],
            reference,
            "{l}"
        );
        let gt: Vec<&str> = f[9].split('|').collect();
        assert_eq!(gt.len(), 2, "phased diploid GT: {l}");
        for (h, hap) in t.haplotypes.iter().enumerate() {
            let at = hap.from_reference(c, pos);
            let allele = if gt[h] == "1" { alt } else { reference };
            assert_eq!(
                &hap.contigs[c][at..at + allele.len()],
                allele,
                "hap {h}: {l}"
            );
        }
        n += 1;
    }
    assert_eq!(n, t.variants.len());
}

fn counts_are_as_documented(p: &Prepared) {
    let v = p.variants.unwrap();
    let total = (v.snps + v.indels) as f64;
    let genome: u64 = std::fs::read_to_string(&p.reference)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('>'))
        .map(|l| l.len() as u64)
        .sum();
    let expected = genome as f64 / 815.0;
    assert!(
        (total - expected).abs() < 0.15 * expected,
        "{total} variants, expected ~{expected}"
    );
    let ratio = v.het as f64 / v.hom as f64;
    assert!((1.3..2.0).contains(&ratio), "het/hom {ratio}");
    assert!((0.06..0.16).contains(&(v.indels as f64 / total)));
    assert!(v.known_sites > 0);
}

fn read_groups_and_commands(p: &Prepared) {
    assert_eq!(p.read_groups.len(), 4);
    let header: Vec<String> = std::fs::read_to_string(&p.sam)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with('@'))
        .filter(|l| l.starts_with("@RG"))
        .map(String::from)
        .collect();
    let want: Vec<String> = p.read_groups.iter().map(|g| g.header_line()).collect();
    assert_eq!(header, want);
    assert!(want.iter().all(|l| {
        ["ID:", "SM:", "LB:", "PL:", "PU:"]
            .iter()
            .all(|k| l.contains(k))
    }));
    assert_eq!(p.read_groups.iter().map(|g| g.pairs).sum::<u64>(), p.pairs);
    let cmds = bwa_commands(p, 3);
    assert_eq!(cmds.len(), 4);
    let c: Vec<String> = cmds[0]
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert_eq!(c[..4], ["bwa", "mem", "-K", "10000000"]);
    assert!(c.windows(2).any(|w| w == ["-t", "3"]));
    assert!(
        c.iter().any(|a| a.starts_with("@RG\\tID:lib1.L1\\t")),
        "{c:?}"
    );
}

fn same_files_for_a_seed_and_one_thread(p: &Prepared, root: &Path) {
    let spec = spec_of(p);
    let q = prepare_generated(&spec, &root.join("b"), 1).unwrap();
    assert_eq!(p.sha256, q.sha256, "same seed, other directory, 1 thread");
    let (a, b) = (
        std::fs::read(&p.sam).unwrap(),
        std::fs::read(&q.sam).unwrap(),
    );
    assert!(a == b, "aligned.sam differs between 2 threads and 1");
    for (x, y) in p.read_groups.iter().zip(&q.read_groups) {
        assert_eq!(
            std::fs::read(&x.reads1).unwrap(),
            std::fs::read(&y.reads1).unwrap()
        );
    }
    // Another seed is another data set.
    let key = |spec: DataSpec| cache_key(&Source::Generated(spec)).unwrap();
    assert_ne!(key(spec.clone()), key(DataSpec { seed: 2, ..spec }));
}
