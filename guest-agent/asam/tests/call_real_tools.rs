//! bcftools and freebayes on a hand-built BAM (samtools) with planted
//! variants, scored against the truth they were planted from.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use testbed_asam::call::{Caller, call_variants};
use testbed_asam::tools::SAMTOOLS;
use testbed_asam::vcf::read_vcf;
use testbed_asam::vcfscore::{Counts, ScoreOptions, score_files};

/// One haplotype base: the base and the 0-based reference position it
/// stands for (None: inserted).
type Hap = Vec<(u8, Option<usize>)>;

#[derive(Clone, Copy)]
enum Planted {
    Snp(usize, u8),
    /// Deletes this many bases after the 0-based anchor.
    Del(usize, usize),
    /// Inserts these bases after the 0-based anchor.
    Ins(usize, &'static [u8]),
}

impl Planted {
    fn anchor(&self) -> usize {
        match *self {
            Planted::Snp(p, _) | Planted::Del(p, _) | Planted::Ins(p, _) => p,
        }
    }
}

fn haplotype(reference: &[u8], variants: &[Planted]) -> Hap {
    let mut hap = Vec::new();
    let mut skip_until = 0;
    for (p, &b) in reference.iter().enumerate() {
        if p < skip_until {
            continue;
        }
        let v = variants.iter().find(|v| v.anchor() == p);
        match v {
            Some(Planted::Snp(_, alt)) => hap.push((*alt, Some(p))),
            _ => hap.push((b, Some(p))),
        }
        match v {
            Some(Planted::Del(_, n)) => skip_until = p + 1 + n,
            Some(Planted::Ins(_, bases)) => hap.extend(bases.iter().map(|&b| (b, None))),
            _ => {}
        }
    }
    hap
}

/// POS (1-based) and CIGAR of a haplotype window: inserted bases at the
/// ends are soft-clipped.
fn alignment(window: &[(u8, Option<usize>)]) -> (usize, String) {
    let mut ops: Vec<(char, usize)> = Vec::new();
    let push = |op: char, ops: &mut Vec<(char, usize)>| match ops.last_mut() {
        Some((o, n)) if *o == op => *n += 1,
        _ => ops.push((op, 1)),
    };
    let mut prev: Option<usize> = None;
    for &(_, r) in window {
        match (r, prev) {
            (None, None) => push('S', &mut ops),
            (None, Some(_)) => push('I', &mut ops),
            (Some(p), Some(q)) if p > q + 1 => {
                ops.push(('D', p - q - 1));
                push('M', &mut ops);
            }
            (Some(_), _) => push('M', &mut ops),
        }
        if r.is_some() {
            prev = r;
        }
    }
    if let Some(last) = ops.last_mut().filter(|(o, _)| *o == 'I') {
        last.0 = 'S';
    }
    let pos = window.iter().find_map(|(_, r)| *r).map_or(0, |p| p + 1);
    (pos, ops.iter().map(|(o, n)| format!("{n}{o}")).collect())
}

fn text(s: &[u8]) -> String {
    String::from_utf8_lossy(s).into_owned()
}

struct Contig {
    name: &'static str,
    seq: Vec<u8>,
    /// (variant, homozygous)
    variants: Vec<(Planted, bool)>,
}

fn truth_line(name: &str, seq: &[u8], v: Planted, hom: bool) -> String {
    let gt = if hom { "1/1" } else { "0/1" };
    let (pos, r, a) = match v {
        Planted::Snp(p, alt) => (
            p + 1,
            (seq[p] as char).to_string(),
            (alt as char).to_string(),
        ),
        Planted::Del(p, n) => (p + 1, text(&seq[p..=p + n]), (seq[p] as char).to_string()),
        Planted::Ins(p, b) => (
            p + 1,
            (seq[p] as char).to_string(),
            format!("{}{}", seq[p] as char, text(b)),
        ),
    };
    format!("{name}\t{pos}\t.\t{r}\t{a}\t.\tPASS\t.\tGT\t{gt}\n")
}

/// Writes ref.fa, truth.vcf and a sorted, indexed reads.bam into `dir`.
fn build(dir: &Path) {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut random =
        |n: usize| -> Vec<u8> { (0..n).map(|_| b"ACGT"[rng.random_range(0..4)]).collect() };
    let chr1 = random(6000);
    let chr2 = random(4000);
    let flip = |b: u8| if b == b'A' { b'G' } else { b'A' };
    let contigs = vec![
        Contig {
            name: "chr1",
            variants: vec![
                (Planted::Snp(1000, flip(chr1[1000])), true),
                (Planted::Snp(2000, flip(chr1[2000])), false),
                (Planted::Del(3000, 2), true),
                (Planted::Ins(4000, b"TTG"), false),
            ],
            seq: chr1,
        },
        Contig {
            name: "chr2",
            variants: vec![
                (Planted::Snp(2000, flip(chr2[2000])), true),
                (Planted::Del(3000, 1), false),
            ],
            seq: chr2,
        },
    ];
    let mut fasta = String::new();
    let mut truth = String::from(
        "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\ttruth\n",
    );
    let mut sam = String::from("@HD\tVN:1.6\tSO:unsorted\n");
    for c in &contigs {
        fasta.push_str(&format!(
            ">{}\n{}\n",
            c.name,
            String::from_utf8_lossy(&c.seq)
        ));
        sam.push_str(&format!("@SQ\tSN:{}\tLN:{}\n", c.name, c.seq.len()));
        for &(v, hom) in &c.variants {
            truth.push_str(&truth_line(c.name, &c.seq, v, hom));
        }
    }
    sam.push_str("@RG\tID:rg1\tSM:sample\tLB:lib1\tPL:ILLUMINA\n");
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let mut n = 0;
    for c in &contigs {
        let all: Vec<Planted> = c.variants.iter().map(|(v, _)| *v).collect();
        let hom: Vec<Planted> = c
            .variants
            .iter()
            .filter(|(_, h)| *h)
            .map(|(v, _)| *v)
            .collect();
        let haps = [haplotype(&c.seq, &all), haplotype(&c.seq, &hom)];
        // 40x of 100 bp reads, half from each haplotype, both strands.
        for _ in 0..c.seq.len() * 40 / 100 {
            let hap = &haps[rng.random_range(0..2)];
            let s = rng.random_range(0..hap.len() - 100);
            let window = &hap[s..s + 100];
            let (pos, cigar) = alignment(window);
            let seq: String = window.iter().map(|(b, _)| *b as char).collect();
            let flag = if rng.random_bool(0.5) { 16 } else { 0 };
            sam.push_str(&format!(
                "r{n}\t{flag}\t{}\t{pos}\t60\t{cigar}\t*\t0\t0\t{seq}\t{}\tRG:Z:rg1\n",
                c.name,
                "I".repeat(100)
            ));
            n += 1;
        }
    }
    std::fs::write(dir.join("ref.fa"), fasta).unwrap();
    std::fs::write(dir.join("truth.vcf"), truth).unwrap();
    std::fs::write(dir.join("reads.sam"), sam).unwrap();
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    SAMTOOLS
        .run(&["sort", "-o", &p("reads.bam"), &p("reads.sam")])
        .unwrap();
}

fn private_tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .unwrap()
}

fn data_lines(vcf: &Path) -> Vec<String> {
    read_vcf(vcf)
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}:{}:{}:{:?}:{:?}",
                r.chrom, r.pos, r.reference, r.alts, r.genotype
            )
        })
        .collect()
}

#[test]
fn both_callers_find_every_planted_variant_with_its_genotype() {
    let dir = private_tempdir();
    build(dir.path());
    let (reference, bam, truth) = (
        dir.path().join("ref.fa"),
        dir.path().join("reads.bam"),
        dir.path().join("truth.vcf"),
    );
    for caller in [Caller::Bcftools, Caller::Freebayes] {
        let out = dir.path().join(format!("{}.vcf.gz", caller.name()));
        call_variants(caller, &reference, &bam, &out, 2).unwrap();
        assert!(
            dir.path()
                .join(format!("{}.vcf.gz.tbi", caller.name()))
                .exists()
        );
        let o = ScoreOptions {
            genotype_aware: true,
            include_filtered: false,
        };
        let s = score_files(&out, &truth, Some(&reference), None, &o).unwrap();
        let name = caller.name();
        assert_eq!(
            s.snp.counts,
            Counts {
                tp: 3,
                fp: 0,
                fn_: 0
            },
            "{name}: {s:?}"
        );
        assert_eq!(
            s.indel.counts,
            Counts {
                tp: 3,
                fp: 0,
                fn_: 0
            },
            "{name}: {s:?}"
        );
        assert_eq!(
            (s.all.precision, s.all.recall, s.all.f1),
            (Some(1.0), Some(1.0), Some(1.0))
        );

        // Nothing in the output names the scratch directory.
        let mut text = String::new();
        let raw = std::fs::read(&out).unwrap();
        std::io::Read::read_to_string(&mut noodles::bgzf::io::Reader::new(&raw[..]), &mut text)
            .unwrap();
        assert!(!text.contains("testbed-call-"), "{name}: {text}");

        // One worker gives the same calls as two.
        let one = dir.path().join(format!("{name}-1.vcf.gz"));
        call_variants(caller, &reference, &bam, &one, 1).unwrap();
        assert_eq!(data_lines(&one), data_lines(&out), "{name}");
    }
    // The scratch directories are gone.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("testbed-call-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_failing_caller_names_itself() {
    let dir = private_tempdir();
    build(dir.path());
    let missing = dir.path().join("missing.bam");
    let e = call_variants(
        Caller::Bcftools,
        &dir.path().join("ref.fa"),
        &missing,
        &dir.path().join("x.vcf.gz"),
        1,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("samtools") && e.contains("missing.bam"), "{e}");
}
