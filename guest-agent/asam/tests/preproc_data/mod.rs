//! A seeded synthetic aligned SAM file for the tests that run the real
//! tools: two chromosomes, two read groups in two libraries, FR pairs
//! (some soft-clipped, some on the reverse strand first), PCR duplicates
//! with their own qualities, fragments whose mate is unmapped, unmapped
//! pairs, secondary alignments, and pairs across chromosomes; mate fields
//! and TLEN consistent, so that Picard's ValidateSamFile accepts it.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const READ_LENGTH: u32 = 50;
pub const CHROMOSOME_LENGTH: u32 = 20_000;

pub const HEADER: &str = "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:20000\n@SQ\tSN:chr2\tLN:20000\n@RG\tID:rgA\tSM:s1\tLB:libA\tPL:ILLUMINA\n@RG\tID:rgB\tSM:s1\tLB:libB\tPL:ILLUMINA\n@PG\tID:bwa\tPN:bwa\tVN:0.7.17\n";

struct Read {
    rname: &'static str,
    pos: u32,
    reverse: bool,
    cigar: String,
}

fn seq(rng: &mut ChaCha8Rng) -> String {
    (0..READ_LENGTH)
        .map(|_| b"ACGT"[rng.random_range(0..4)] as char)
        .collect()
}

fn qual(rng: &mut ChaCha8Rng) -> String {
    (0..READ_LENGTH)
        .map(|_| rng.random_range(b'#'..=b'I') as char)
        .collect()
}

fn end(r: &Read) -> u32 {
    // Reference length: the CIGARs here are [nS]mM.
    let m: u32 = r
        .cigar
        .rsplit('S')
        .next()
        .and_then(|s| s.trim_end_matches('M').parse().ok())
        .unwrap_or(READ_LENGTH);
    r.pos + m - 1
}

fn cigar(rng: &mut ChaCha8Rng) -> String {
    if rng.random_bool(0.1) {
        let clip = rng.random_range(1..10);
        format!("{clip}S{}M", READ_LENGTH - clip)
    } else {
        format!("{READ_LENGTH}M")
    }
}

/// The two records of a pair with both mates mapped.
fn pair_lines(name: &str, rg: &str, a: &Read, b: &Read, rng: &mut ChaCha8Rng) -> [String; 2] {
    let same = a.rname == b.rname;
    let tlen: i64 = if same {
        let left = a.pos.min(b.pos) as i64;
        let right = end(a).max(end(b)) as i64;
        right - left + 1
    } else {
        0
    };
    let mut line = |me: &Read, mate: &Read, first: bool| {
        let mut flags = 0x1 | 0x2 | if first { 0x40 } else { 0x80 };
        if me.reverse {
            flags |= 0x10;
        }
        if mate.reverse {
            flags |= 0x20;
        }
        let sign = if !same || me.pos < mate.pos || (me.pos == mate.pos && first) {
            1
        } else {
            -1
        };
        let rnext = if same { "=" } else { mate.rname };
        format!(
            "{name}\t{flags}\t{}\t{}\t60\t{}\t{rnext}\t{}\t{}\t{}\t{}\tRG:Z:{rg}\tNM:i:0",
            me.rname,
            me.pos,
            me.cigar,
            mate.pos,
            sign * tlen,
            seq(rng),
            qual(rng)
        )
    };
    [line(a, b, true), line(b, a, false)]
}

/// `pairs` template pairs (plus their duplicates and the special cases) as
/// SAM text, grouped by read name as an aligner writes them.
pub fn synthetic_sam(pairs: usize, seed: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = String::from(HEADER);
    let mut push = |lines: &[String]| {
        for l in lines {
            out.push_str(l);
            out.push('\n');
        }
    };
    let rname = |rng: &mut ChaCha8Rng| if rng.random_bool(0.5) { "chr1" } else { "chr2" };
    for i in 0..pairs {
        let rg = if rng.random_bool(0.5) { "rgA" } else { "rgB" };
        let chr = rname(&mut rng);
        let p1 = rng.random_range(1..CHROMOSOME_LENGTH - 600);
        let p2 = p1 + rng.random_range(0..300);
        let first_reverse = rng.random_bool(0.3);
        let a = Read {
            rname: chr,
            pos: p1,
            reverse: first_reverse,
            cigar: cigar(&mut rng),
        };
        let b = Read {
            rname: chr,
            pos: p2,
            reverse: !first_reverse,
            cigar: cigar(&mut rng),
        };
        let copies = if rng.random_bool(0.2) {
            rng.random_range(2..5)
        } else {
            1
        };
        // Illumina-like names (tile, x, y) for most templates, so that
        // Picard finds optical duplicates: a copy is either near the first
        // (same tile, within 80 pixels) or anywhere.
        let tile = 1101 + rng.random_range(0..3);
        let (x0, y0) = (rng.random_range(1000..30000), rng.random_range(1000..30000));
        for c in 0..copies {
            let name = if i % 5 == 0 {
                format!("p{i}_{c}")
            } else if c == 0 || rng.random_bool(0.5) {
                let (dx, dy) = if c == 0 {
                    (0, 0)
                } else {
                    (rng.random_range(-80..80), rng.random_range(-80..80))
                };
                // The run field keeps names unique: not part of a location.
                format!("SIM:{i}r{c}:FC:1:{tile}:{}:{}", x0 + dx, y0 + dy)
            } else {
                format!(
                    "SIM:{i}r{c}:FC:1:{tile}:{}:{}",
                    rng.random_range(1000..30000),
                    rng.random_range(1000..30000)
                )
            };
            push(&pair_lines(&name, rg, &a, &b, &mut rng));
        }
        match rng.random_range(0..40) {
            // A fragment at the pair's first end, its mate unmapped.
            0..=2 => {
                let name = format!("f{i}");
                let (s, q) = (seq(&mut rng), qual(&mut rng));
                let flags = 0x1 | 0x8 | 0x40 | if a.reverse { 0x10 } else { 0 };
                push(&[
                    format!(
                        "{name}\t{flags}\t{chr}\t{}\t60\t{}\t=\t{}\t0\t{s}\t{q}\tRG:Z:{rg}\tNM:i:0",
                        a.pos, a.cigar, a.pos
                    ),
                    format!(
                        "{name}\t{}\t{chr}\t{}\t0\t*\t=\t{}\t0\t{}\t{}\tRG:Z:{rg}",
                        0x1 | 0x4 | 0x80 | if a.reverse { 0x20 } else { 0 },
                        a.pos,
                        a.pos,
                        seq(&mut rng),
                        qual(&mut rng)
                    ),
                ]);
            }
            // An unmapped pair.
            3 => {
                let name = format!("u{i}");
                push(&[
                    format!(
                        "{name}\t77\t*\t0\t0\t*\t*\t0\t0\t{}\t{}\tRG:Z:{rg}",
                        seq(&mut rng),
                        qual(&mut rng)
                    ),
                    format!(
                        "{name}\t141\t*\t0\t0\t*\t*\t0\t0\t{}\t{}\tRG:Z:{rg}",
                        seq(&mut rng),
                        qual(&mut rng)
                    ),
                ]);
            }
            // A pair across chromosomes, and a secondary alignment of its
            // first read.
            4 => {
                let c = Read {
                    rname: "chr1",
                    pos: a.pos,
                    reverse: false,
                    cigar: format!("{READ_LENGTH}M"),
                };
                let d = Read {
                    rname: "chr2",
                    pos: b.pos,
                    reverse: true,
                    cigar: format!("{READ_LENGTH}M"),
                };
                let name = format!("x{i}");
                let mut lines = pair_lines(&name, rg, &c, &d, &mut rng).to_vec();
                let mut f: Vec<String> = lines[0].split('\t').map(str::to_string).collect();
                let flags: u32 = f[1].parse().unwrap_or(0);
                f[1] = (flags | 0x100).to_string();
                f[2] = "chr2".into();
                f[3] = ((d.pos + 500) % (CHROMOSOME_LENGTH - 600) + 1).to_string();
                f[4] = "0".into();
                f[6] = "=".into();
                f[8] = "0".into();
                let secondary = f.join("\t");
                lines.push(secondary);
                push(&lines);
            }
            _ => {}
        }
    }
    out
}
