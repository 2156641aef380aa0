//! BQSR on synthetic reads with planted systematic errors: a bad machine
//! cycle and a bad dinucleotide context must show in the table and pull
//! those bases' qualities down, while clean covariates stay near the
//! reported Q30; known sites, duplicates and other skipped reads must not
//! count.

use std::path::Path;

use arrow::array::RecordBatch;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use testbed_asam::bqsr::covariates::context_from_name;
use testbed_asam::bqsr::{
    self, ApplyOptions, Datum, KnownSites, RecalTable, Reference, build_table_with_stats,
};
use testbed_asam::load::parse_sam;
use testbed_asam::schema::Columns;
use testbed_asam::vcf::parse_vcf;

const LEN: usize = 100;
const Q30: char = '?';

fn revcomp(s: &[u8]) -> Vec<u8> {
    s.iter()
        .rev()
        .map(|b| match b {
            b'A' => b'T',
            b'C' => b'G',
            b'G' => b'C',
            _ => b'A',
        })
        .collect()
}

fn other_base(b: u8, rng: &mut ChaCha8Rng) -> u8 {
    loop {
        let c = b"ACGT"[rng.random_range(0..4)];
        if c != b {
            return c;
        }
    }
}

/// What a generator planted, to compare the table with exactly.
#[derive(Default)]
struct Planted {
    /// errors[cycle] over all counted reads (forward cycles 1..=100).
    errors_by_cycle: Vec<u64>,
    total_errors: u64,
    reads: u64,
}

struct Data {
    sam: String,
    reference: Vec<(String, Vec<u8>)>,
    planted: Planted,
}

/// Single-end 100 bp reads, all Q30, half on the reverse strand, over two
/// contigs. In sequencing order, every base is wrong with `background`
/// probability, cycle 50 with `bad_cycle` and, after a G, a base that is not
/// T becomes T with `bad_gt` (an excess of errors in context "GT").
/// `variant` puts a SNP at that 1-based chr1 position in every read.
fn generate(
    seed: u64,
    reads: usize,
    background: f64,
    bad_cycle: f64,
    bad_gt: f64,
    variant: Option<usize>,
) -> Data {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let contigs: Vec<(String, Vec<u8>)> = [("chr1", 20_000), ("chr2", 8_000)]
        .iter()
        .map(|(n, l)| {
            (
                n.to_string(),
                (0..*l).map(|_| b"ACGT"[rng.random_range(0..4)]).collect(),
            )
        })
        .collect();
    let mut sam = String::from("@HD\tVN:1.6\tSO:unsorted\n");
    for (n, s) in &contigs {
        sam.push_str(&format!("@SQ\tSN:{n}\tLN:{}\n", s.len()));
    }
    sam.push_str("@RG\tID:rg1\tSM:s\tLB:l\n");
    let mut planted = Planted {
        errors_by_cycle: vec![0; LEN + 1],
        ..Default::default()
    };
    for i in 0..reads {
        let (name, contig) = &contigs[if i % 4 == 3 { 1 } else { 0 }];
        let start = rng.random_range(0..contig.len() - LEN);
        let mut genome: Vec<u8> = contig[start..start + LEN].to_vec();
        // Genome index of the variant base, if this read covers it.
        let mut on_variant = None;
        if name == "chr1"
            && let Some(v) = variant.filter(|&v| v > start && v <= start + LEN)
        {
            let k = v - 1 - start;
            genome[k] = other_base(contig[v - 1], &mut ChaCha8Rng::seed_from_u64(v as u64));
            on_variant = Some(k);
        }
        let reverse = rng.random_bool(0.5);
        let truth = if reverse {
            revcomp(&genome)
        } else {
            genome.clone()
        };
        let mut read = truth.clone();
        for c in 0..LEN {
            let genome_index = if reverse { LEN - 1 - c } else { c };
            if on_variant == Some(genome_index) {
                // No sequencing error on the variant itself: it must read as
                // the ALT for the known-site count to be exact.
                continue;
            }
            let before = read[c];
            if c + 1 == 50 && rng.random_bool(bad_cycle) {
                read[c] = other_base(read[c], &mut rng);
            } else if c > 0 && read[c - 1] == b'G' && read[c] != b'T' && rng.random_bool(bad_gt) {
                read[c] = b'T';
            } else if rng.random_bool(background) {
                read[c] = other_base(read[c], &mut rng);
            }
            if read[c] != before {
                planted.errors_by_cycle[c + 1] += 1;
                planted.total_errors += 1;
            }
        }
        let seq = if reverse { revcomp(&read) } else { read };
        sam.push_str(&format!(
            "r{i}\t{}\t{name}\t{}\t60\t{LEN}M\t*\t0\t0\t{}\t{}\tRG:Z:rg1\n",
            if reverse { 16 } else { 0 },
            start + 1,
            String::from_utf8_lossy(&seq),
            Q30.to_string().repeat(LEN),
        ));
        planted.reads += 1;
    }
    Data {
        sam,
        reference: contigs,
        planted,
    }
}

fn load(sam: &str) -> (Vec<String>, Vec<RecordBatch>) {
    let t = parse_sam(sam.as_bytes(), Path::new("synthetic.sam")).unwrap();
    (t.reference_names, t.batches)
}

fn reference(d: &Data, names: &[String]) -> Reference {
    Reference::from_contigs(d.reference.clone(), names).unwrap()
}

fn cell(t: &RecalTable, cycle: i32) -> Datum {
    t.cycles[&("rg1".to_string(), 30, cycle)]
}

/// The recalibrated quality of every base at `cycle` (sequencing order).
fn qualities_at_cycle(batches: &[RecordBatch], cycle: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for b in batches {
        let c = Columns::of(b).unwrap();
        for i in 0..b.num_rows() {
            let r = c.row(i);
            let q = r.qual.as_bytes();
            let at = if r.flags & 16 != 0 {
                q.len() - cycle
            } else {
                cycle - 1
            };
            out.push(q[at] - 33);
        }
    }
    out
}

#[test]
fn a_bad_cycle_is_found_exactly_and_recalibrated_down() {
    let d = generate(1, 3000, 0.001, 0.08, 0.0, None);
    let (names, batches) = load(&d.sam);
    let r = reference(&d, &names);
    let (t, stats) = build_table_with_stats(&batches, &r, &KnownSites::none(), 2).unwrap();
    assert_eq!(stats.reads_used, d.planted.reads);
    assert_eq!(stats.bases_counted, d.planted.reads * LEN as u64);
    // Every planted error, and nothing else, is counted, at its cycle.
    let q30 = t.qualities[&("rg1".to_string(), 30)];
    assert_eq!(q30.errors, d.planted.total_errors);
    for cycle in [1, 10, 49, 50, 51, 100] {
        assert_eq!(
            cell(&t, cycle as i32).errors,
            d.planted.errors_by_cycle[cycle],
            "cycle {cycle}"
        );
        assert_eq!(
            cell(&t, cycle as i32).observations,
            d.planted.reads,
            "cycle {cycle}"
        );
    }
    let bad = cell(&t, 50).empirical_quality(30.0);
    let clean = cell(&t, 10).empirical_quality(30.0);
    assert!(bad <= 20.0, "cycle 50 empirical Q {bad}");
    assert!(
        (27.0..=33.0).contains(&clean),
        "cycle 10 empirical Q {clean}"
    );

    let recal = bqsr::apply(&batches, &t, 2).unwrap();
    let at50 = qualities_at_cycle(&recal, 50);
    let at10 = qualities_at_cycle(&recal, 10);
    assert!(at50.iter().all(|&q| q <= 20), "cycle 50: {:?}", &at50[..10]);
    let mean10 = at10.iter().map(|&q| f64::from(q)).sum::<f64>() / at10.len() as f64;
    assert!((27.0..=33.0).contains(&mean10), "cycle 10 mean {mean10}");
    // Only QUAL changes.
    for (a, b) in batches.iter().zip(&recal) {
        assert_eq!(a.num_rows(), b.num_rows());
        for col in [0, 1, 2, 3, 5, 9, 11] {
            assert_eq!(a.column(col), b.column(col));
        }
    }

    // One pass moves a quality only as far as the prior lets it (GATK's
    // model), but the gap between reported and observed error rate at the
    // bad cycle must shrink to well under half.
    let (t2, _) = build_table_with_stats(&recal, &r, &KnownSites::none(), 2).unwrap();
    let raw = |d: Datum| -10.0 * (d.errors as f64 / d.observations as f64).log10();
    let gap_before = 30.0 - raw(cell(&t, 50));
    let q50 = at50[0];
    let cell50 = t2.cycles[&("rg1".to_string(), q50, 50)];
    let gap_after = (f64::from(q50) - raw(cell50)).abs();
    assert!(
        gap_after < gap_before / 2.0,
        "gap {gap_before} before, {gap_after} after (Q{q50})"
    );
}

#[test]
fn a_bad_dinucleotide_context_is_found_and_recalibrated_down() {
    // Enough reads that the clean contexts' cells outweigh the prior's pull
    // towards the lowered global level.
    let d = generate(2, 10_000, 0.001, 0.0, 0.02, None);
    let (names, batches) = load(&d.sam);
    let t = bqsr::build_table(&batches, &reference(&d, &names), &KnownSites::none(), 2).unwrap();
    let ctx = |name: &str| t.contexts[&("rg1".to_string(), 30, context_from_name(name).unwrap())];
    let gt = ctx("GT").empirical_quality(30.0);
    let ac = ctx("AC").empirical_quality(30.0);
    assert!(gt <= 20.0, "GT empirical Q {gt}");
    assert!((27.0..=33.0).contains(&ac), "AC empirical Q {ac}");

    // Bases read as T after a G (in sequencing order) come out lower than
    // bases read as C after an A.
    let recal = bqsr::apply(&batches, &t, 1).unwrap();
    let (mut gt_q, mut ac_q) = (Vec::new(), Vec::new());
    for b in &recal {
        let c = Columns::of(b).unwrap();
        for i in 0..b.num_rows() {
            let r = c.row(i);
            let (mut seq, mut q) = (r.seq.as_bytes().to_vec(), r.qual.as_bytes().to_vec());
            if r.flags & 16 != 0 {
                seq = revcomp(&seq);
                q.reverse();
            }
            for k in 1..seq.len() {
                match (seq[k - 1], seq[k]) {
                    (b'G', b'T') => gt_q.push(f64::from(q[k] - 33)),
                    (b'A', b'C') => ac_q.push(f64::from(q[k] - 33)),
                    _ => {}
                }
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert!(mean(&gt_q) <= 20.0, "GT mean {}", mean(&gt_q));
    assert!(
        (27.0..=33.0).contains(&mean(&ac_q)),
        "AC mean {}",
        mean(&ac_q)
    );
}

#[test]
fn a_variant_at_a_known_site_is_not_an_error() {
    let site = 5_000;
    let d = generate(3, 3000, 0.001, 0.0, 0.0, Some(site));
    let (names, batches) = load(&d.sam);
    let r = reference(&d, &names);
    let (plain, s0) = build_table_with_stats(&batches, &r, &KnownSites::none(), 2).unwrap();
    let covering = s0.bases_counted; // every base counts without known sites
    let vcf = format!(
        "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\nchr1\t{site}\t.\t{}\tA,C\t.\t.\t.\n",
        d.reference[0].1[site - 1] as char
    );
    let known = KnownSites::from_records(&parse_vcf(&vcf, Path::new("known.vcf")).unwrap(), &names);
    let (masked, s1) = build_table_with_stats(&batches, &r, &known, 2).unwrap();
    let q = |t: &RecalTable| t.qualities[&("rg1".to_string(), 30)];
    assert!(s1.bases_masked > 3, "{s1:?}");
    assert_eq!(s1.bases_counted + s1.bases_masked, covering);
    // Unmasked, every read over the site adds an error; masked, none does.
    assert_eq!(q(&plain).errors, d.planted.total_errors + s1.bases_masked);
    assert_eq!(q(&masked).errors, d.planted.total_errors);
}

#[test]
fn skipped_reads_and_bases_change_nothing() {
    let d = generate(4, 600, 0.001, 0.05, 0.0, None);
    let (names, batches) = load(&d.sam);
    let r = reference(&d, &names);
    let base = bqsr::build_table(&batches, &r, &KnownSites::none(), 1).unwrap();
    // The same table with 2 threads.
    assert_eq!(
        bqsr::build_table(&batches, &r, &KnownSites::none(), 2).unwrap(),
        base
    );

    // Reads full of mismatches that BQSR must skip: duplicate, secondary,
    // supplementary, QC-fail, unmapped, MAPQ 0; and a read whose only
    // mismatches are soft-clipped or below Q6.
    let junk = "T".repeat(LEN);
    let mut sam = d.sam.clone();
    for (i, flags) in [1024, 256, 2048, 512].iter().enumerate() {
        sam.push_str(&format!(
            "j{i}\t{flags}\tchr1\t101\t60\t{LEN}M\t*\t0\t0\t{junk}\t{}\tRG:Z:rg1\n",
            Q30.to_string().repeat(LEN)
        ));
    }
    sam.push_str(&format!(
        "j5\t0\tchr1\t101\t0\t{LEN}M\t*\t0\t0\t{junk}\t{}\tRG:Z:rg1\n",
        Q30.to_string().repeat(LEN)
    ));
    sam.push_str(&format!(
        "j6\t4\t*\t0\t0\t*\t*\t0\t0\t{junk}\t{}\tRG:Z:rg1\n",
        Q30.to_string().repeat(LEN)
    ));
    // 10 clipped bases, then 90 that match chr1:101.. except the last 5, at Q5 ('&').
    let chr1 = &d.reference[0].1;
    let mut seq: Vec<u8> = b"T".repeat(10);
    seq.extend_from_slice(&chr1[100..185]);
    seq.extend(
        chr1[185..190]
            .iter()
            .map(|&b| if b == b'T' { b'A' } else { b'T' }),
    );
    let qual = format!("{}{}", Q30.to_string().repeat(95), "&".repeat(5));
    sam.push_str(&format!(
        "j7\t0\tchr1\t101\t60\t10S90M\t*\t0\t0\t{}\t{qual}\tRG:Z:rg1\n",
        String::from_utf8_lossy(&seq)
    ));
    let (_, with_junk) = load(&sam);
    let (t, stats) = build_table_with_stats(&with_junk, &r, &KnownSites::none(), 2).unwrap();
    assert_eq!(stats.bases_clipped, 10);
    assert_eq!(stats.bases_low_quality, 5);
    assert_eq!(stats.reads_skipped, 6);
    let q30 = |t: &RecalTable| t.qualities[&("rg1".to_string(), 30)];
    assert_eq!(q30(&t).errors, q30(&base).errors);
    assert_eq!(q30(&t).observations, q30(&base).observations + 85);
    assert!(!t.qualities.contains_key(&("rg1".to_string(), 5)));

    // ApplyBQSR recalibrates every record (duplicates too) but keeps Q<6,
    // and with keep_original writes the old string as OQ.
    let recal = bqsr::apply_with(
        &with_junk,
        &t,
        ApplyOptions {
            keep_original: true,
        },
        2,
    )
    .unwrap();
    let c = Columns::of(&recal[0]).unwrap();
    let j7 = (0..recal[0].num_rows())
        .map(|i| c.row(i))
        .find(|r| r.qname == "j7")
        .unwrap();
    assert!(j7.qual.ends_with("&&&&&"), "{}", j7.qual);
    assert!(j7.tags.ends_with(&format!("\tOQ:Z:{qual}")), "{}", j7.tags);

    // The report reads back to the same table.
    assert_eq!(
        RecalTable::parse_report(&t.to_report().unwrap()).unwrap(),
        t
    );
}
