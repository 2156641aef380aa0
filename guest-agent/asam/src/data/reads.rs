//! Read pairs: fragments of either haplotype, read groups and libraries,
//! PCR and optical duplicates, Illumina-like names; written as one FASTQ
//! pair per read group plus `duplicates.tsv`, the ground truth of which
//! pairs are copies of one fragment.
//!
//! A PCR duplicate is the same molecule amplified: same haplotype, outer
//! coordinates and strand, same library, sequenced independently (its
//! own errors and qualities), on any lane of its library. An optical
//! duplicate is one cluster read twice: same lane and tile, within 80
//! pixels (Picard's default optical distance is 100). Copies pick their
//! fragment uniformly, so group sizes are Poisson-like: mostly 2, some 3+.
//!
//! Names are `A00123:42:HSIMXXDSX:<lane>:<tile>:<x>:<y>` (unique; Picard's
//! default read-name regex finds tile, x and y). `duplicates.tsv` has one
//! row per pair, in FASTQ order: `read_name`, `read_group`, `library`,
//! `fragment` (pairs with the same number are copies of one molecule),
//! `copies` (pairs in that group), `kind` (`original` for the first copy,
//! then `pcr` or `optical`), `haplotype` (1 or 2), `contig`, `start`
//! (0-based, on the haplotype), `length`, `strand` (`+`: read 1 on the
//! forward strand) and `origin` (`genome`, `chimera`, `contaminant`).
//! Which copy Picard keeps as the non-duplicate is its choice (highest base
//! qualities), not `original`.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::genome::revcomp;
use super::quality;
use super::rng::{Stream, Weighted, normal, stream};
use super::targets::Interval;
use super::variants::Haplotype;
use super::{DataSpec, Mode, Truth};
use crate::{AsamError, Result};

const INSTRUMENT: &str = "A00123";
const RUN: u32 = 42;
const FLOWCELL: &str = "HSIMXXDSX";
/// TruSeq index sequences, one per library.
const BARCODES: [&str; 8] = [
    "ATCACGAT", "CGATGTTT", "TTAGGCAT", "TGACCAAT", "ACAGTGGT", "GCCAATGT", "CAGATCTG", "ACTTGATG",
];
/// Tiles of a NovaSeq-like flow cell: surfaces 1-2, swaths 1-2, 16 tiles.
fn tile(i: u32) -> u16 {
    let surface = 1 + i / 32;
    let swath = 1 + (i / 16) % 2;
    (surface * 1000 + swath * 100 + 1 + i % 16) as u16
}
const TILES: u32 = 64;
const X_RANGE: std::ops::Range<u32> = 1000..32_000;
const Y_RANGE: std::ops::Range<u32> = 1000..37_000;
const OPTICAL_PIXELS: i64 = 80;

/// One read group: a library on a lane.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadGroup {
    pub id: String,
    pub sample: String,
    pub library: String,
    pub platform: String,
    pub unit: String,
    pub lane: u32,
}

impl ReadGroup {
    /// The `@RG` header line, tab-separated.
    pub fn header_line(&self) -> String {
        format!(
            "@RG\tID:{}\tSM:{}\tLB:{}\tPL:{}\tPU:{}",
            self.id, self.sample, self.library, self.platform, self.unit
        )
    }
}

/// Libraries × lanes read groups, library-major.
pub fn read_groups(spec: &DataSpec) -> Vec<ReadGroup> {
    let mut out = Vec::new();
    for lib in 0..spec.libraries {
        for lane in 1..=spec.lanes {
            let library = format!("lib{}", lib + 1);
            out.push(ReadGroup {
                id: format!("{library}.L{lane}"),
                sample: spec.sample.clone(),
                library,
                platform: "ILLUMINA".into(),
                unit: format!(
                    "{FLOWCELL}.{lane}.{}",
                    BARCODES[lib as usize % BARCODES.len()]
                ),
                lane,
            });
        }
    }
    out
}

/// A molecule: `len` bases of haplotype `hap`'s contig from `start`.
#[derive(Debug, Clone, Copy)]
struct Fragment {
    hap: u8,
    contig: u32,
    start: u32,
    len: u32,
    reverse: bool,
    library: u32,
    copies: u32,
    origin: Origin,
}

/// Where a fragment's bases come from. Real libraries hold a few
/// chimeras (two molecules ligated: read 2 maps elsewhere, often on
/// another chromosome) and some contamination (reads that do not map).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Origin {
    Genome,
    /// Read 2 comes, from a junction on, from `len` bases at `start` of
    /// this haplotype contig.
    Chimera {
        hap: u8,
        contig: u32,
        start: u32,
    },
    /// Random sequence from no contig of the reference.
    Contaminant,
}

/// TruSeq adapters, read through when the fragment is shorter than the
/// read (then poly-A: the sequencer reads on into nothing).
const ADAPTER1: &[u8] = b"AGATCGGAAGAGCACACGTCTGAACTCCAGTCA";
const ADAPTER2: &[u8] = b"AGATCGGAAGAGCGTCGTGTAGGGAAAGAGTGT";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Original,
    Pcr,
    Optical,
}

/// One sequenced pair: which fragment, where on the flow cell.
#[derive(Debug, Clone, Copy)]
struct Pair {
    fragment: u32,
    lane: u32,
    tile: u16,
    x: u32,
    y: u32,
    kind: Kind,
}

/// FASTQ files of one read group.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadGroupFiles {
    pub group: ReadGroup,
    pub reads1: PathBuf,
    pub reads2: PathBuf,
    pub pairs: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadCounts {
    pub pairs: u64,
    pub duplicate_pairs: u64,
    pub optical_duplicate_pairs: u64,
    pub off_target_fragments: u64,
}

/// Pairs in total: coverage × (genome or target bases) / bases per pair.
fn total_pairs(spec: &DataSpec, genome_len: u64, targets: &[Interval]) -> u64 {
    let bases = match spec.mode {
        Mode::Wgs => genome_len as f64,
        Mode::Wes => {
            let t: usize = targets.iter().map(|t| t.len()).sum();
            t as f64 / (1.0 - spec.off_target)
        }
    };
    (spec.coverage * bases / (2.0 * f64::from(spec.read_length))).round() as u64
}

/// Simulates the reads of `spec` from `truth` into `dir`.
pub fn simulate(
    spec: &DataSpec,
    truth: &Truth,
    dir: &Path,
) -> Result<(Vec<ReadGroupFiles>, ReadCounts)> {
    let mut rng = stream(spec.seed, Stream::Fragments, 0);
    let total = total_pairs(spec, truth.genome.len(), &truth.targets);
    let dups = (spec.dup_rate * total as f64).round() as u64;
    let unique = (total - dups).max(1);
    let mut counts = ReadCounts {
        pairs: unique + dups,
        duplicate_pairs: dups,
        ..Default::default()
    };
    let pickers = Pickers {
        contigs: [0, 1].map(|h| Weighted::new(truth.haplotypes[h].contigs.iter().map(Vec::len))),
        targets: Weighted::new(truth.targets.iter().map(Interval::len)),
    };
    let mut fragments = Vec::with_capacity(unique as usize);
    for _ in 0..unique {
        let (f, on_target) = fragment(spec, truth, &pickers, &mut rng);
        counts.off_target_fragments += u64::from(!on_target);
        fragments.push(f);
    }
    let mut pairs: Vec<Pair> = Vec::with_capacity((unique + dups) as usize);
    for i in 0..unique {
        let lane = rng.random_range(1..=spec.lanes);
        let (tile, x, y) = random_spot(&mut rng);
        pairs.push(Pair {
            fragment: i as u32,
            lane,
            tile,
            x,
            y,
            kind: Kind::Original,
        });
    }
    for _ in 0..dups {
        let of = rng.random_range(0..unique) as usize;
        fragments[of].copies += 1;
        let original = pairs[of];
        let pair = if rng.random_bool(spec.optical_fraction) {
            counts.optical_duplicate_pairs += 1;
            let (x, y) = near_spot(&original, &mut rng);
            Pair {
                x,
                y,
                kind: Kind::Optical,
                ..original
            }
        } else {
            let lane = rng.random_range(1..=spec.lanes);
            let (tile, x, y) = random_spot(&mut rng);
            Pair {
                lane,
                tile,
                x,
                y,
                kind: Kind::Pcr,
                ..original
            }
        };
        pairs.push(pair);
    }
    // The per-pair error streams are numbered before sorting, so they do
    // not depend on the order the file is written in.
    let mut numbered: Vec<(u64, Pair)> = pairs
        .into_iter()
        .enumerate()
        .map(|(i, p)| (i as u64, p))
        .collect();
    let groups = read_groups(spec);
    let group_of = |p: &Pair| {
        let lib = fragments[p.fragment as usize].library;
        (lib * spec.lanes + p.lane - 1) as usize
    };
    make_names_unique(&mut numbered);
    // In a real FASTQ reads come tile by tile.
    numbered.sort_by_key(|(_, p)| (group_of(p), p.tile, p.y, p.x));
    write_reads(spec, truth, dir, &groups, &fragments, &numbered, &group_of)
        .map(|files| (files, counts))
}

/// Where a cluster sits on a lane: tile, x, y.
fn random_spot(rng: &mut ChaCha8Rng) -> (u16, u32, u32) {
    (
        tile(rng.random_range(0..TILES)),
        rng.random_range(X_RANGE),
        rng.random_range(Y_RANGE),
    )
}

/// A spot within [`OPTICAL_PIXELS`] of `p`'s, on its tile.
fn near_spot(p: &Pair, rng: &mut ChaCha8Rng) -> (u32, u32) {
    let mut d = || rng.random_range(-OPTICAL_PIXELS..=OPTICAL_PIXELS);
    let x = (i64::from(p.x) + d()).max(1) as u32;
    let y = (i64::from(p.y) + d()).max(1) as u32;
    (x, y)
}

/// Read names are lane:tile:x:y, so two pairs on one spot of a lane would
/// share a name (a few in millions, drawn at random). Sorted by spot,
/// each repeat moves one pixel right of the one before; order and
/// uniqueness hold, and no set of millions of spots is kept.
fn make_names_unique(pairs: &mut [(u64, Pair)]) {
    pairs.sort_by_key(|(_, p)| (p.lane, p.tile, p.y, p.x));
    for i in 1..pairs.len() {
        let prev = pairs[i - 1].1;
        let p = &mut pairs[i].1;
        if (p.lane, p.tile, p.y) == (prev.lane, prev.tile, prev.y) && p.x <= prev.x {
            p.x = prev.x + 1;
        }
    }
}

/// Where fragments come from: a contig of each haplotype by length, a
/// target by length.
struct Pickers {
    contigs: [Weighted; 2],
    targets: Weighted,
}

/// A fragment, and whether it was drawn from a target (always true in WGS).
fn fragment(
    spec: &DataSpec,
    truth: &Truth,
    pickers: &Pickers,
    rng: &mut ChaCha8Rng,
) -> (Fragment, bool) {
    let hap = rng.random_range(0..2u8);
    let h: &Haplotype = &truth.haplotypes[hap as usize];
    let read_len = spec.read_length as usize;
    let len = if rng.random_bool(spec.short_fragment_rate) {
        rng.random_range(read_len / 2..read_len)
    } else {
        (spec.fragment_mean + spec.fragment_sd * normal(rng))
            .round()
            .max(read_len as f64) as usize
    };
    let on_target =
        spec.mode == Mode::Wes && !truth.targets.is_empty() && !rng.random_bool(spec.off_target);
    let (contig, start) = if on_target {
        let t = truth.targets[pickers.targets.pick(rng)];
        let (a, b) = (
            h.from_reference(t.contig, t.start),
            h.from_reference(t.contig, t.end),
        );
        // Captured: the fragment overlaps the target by 20 bases or more.
        let lo = (a + 20).saturating_sub(len);
        let hi = b.saturating_sub(20).max(lo + 1);
        (t.contig, rng.random_range(lo..hi))
    } else {
        let c = pickers.contigs[hap as usize].pick(rng);
        let room = h.contigs[c].len().saturating_sub(len).max(1);
        (c, rng.random_range(0..room))
    };
    let contig_len = h.contigs[contig].len();
    let len = len.min(contig_len);
    let start = start.min(contig_len - len);
    let u: f64 = rng.random();
    let origin = if u < spec.contaminant_rate {
        Origin::Contaminant
    } else if u < spec.contaminant_rate + spec.chimera_rate {
        let hap = rng.random_range(0..2u8);
        let c = pickers.contigs[hap as usize].pick(rng);
        let other = truth.haplotypes[hap as usize].contigs[c].len();
        Origin::Chimera {
            hap,
            contig: c as u32,
            start: rng.random_range(0..other.saturating_sub(len).max(1)) as u32,
        }
    } else {
        Origin::Genome
    };
    (
        Fragment {
            hap,
            contig: contig as u32,
            start: start as u32,
            len: len as u32,
            reverse: rng.random_bool(0.5),
            library: rng.random_range(0..spec.libraries),
            copies: 1,
            origin,
        },
        on_target || spec.mode == Mode::Wgs,
    )
}

/// The true bases of read 1 and read 2 of fragment `f` (number `index`),
/// `read_length` each.
fn templates(spec: &DataSpec, truth: &Truth, f: &Fragment, index: u32) -> [Vec<u8>; 2] {
    let piece = |hap: u8, contig: u32, start: u32| {
        let c = &truth.haplotypes[hap as usize].contigs[contig as usize];
        let end = (start + f.len).min(c.len() as u32);
        c[start as usize..end as usize].to_vec()
    };
    let seq = match f.origin {
        Origin::Contaminant => {
            let mut rng = stream(spec.seed, Stream::Contaminant, u64::from(index));
            (0..f.len)
                .map(|_| b"ACGT"[rng.random_range(0..4)])
                .collect()
        }
        _ => piece(f.hap, f.contig, f.start),
    };
    let rc = revcomp(&seq);
    // Read 1 starts at the fragment's left end on the forward strand, or
    // at its right end on the reverse.
    let (mut t1, mut t2) = if f.reverse { (rc, seq) } else { (seq, rc) };
    if let Origin::Chimera { hap, contig, start } = f.origin {
        // The junction is somewhere in read 2: where both sides are 30+
        // bases, bwa reports a supplementary alignment, as for real
        // chimeras.
        let mut rng = stream(spec.seed, Stream::Chimera, u64::from(index));
        let keep = rng.random_range(0..spec.read_length as usize).min(t2.len());
        t2.truncate(keep);
        t2.extend(revcomp(&piece(hap, contig, start)));
    }
    let l = spec.read_length as usize;
    for (t, adapter) in [(&mut t1, ADAPTER1), (&mut t2, ADAPTER2)] {
        t.truncate(l);
        if t.len() < l {
            t.extend_from_slice(adapter);
            t.resize(l, b'A');
            t.truncate(l);
        }
    }
    [t1, t2]
}

fn write_reads(
    spec: &DataSpec,
    truth: &Truth,
    dir: &Path,
    groups: &[ReadGroup],
    fragments: &[Fragment],
    pairs: &[(u64, Pair)],
    group_of: &dyn Fn(&Pair) -> usize,
) -> Result<Vec<ReadGroupFiles>> {
    let reads_dir = dir.join("reads");
    std::fs::create_dir_all(&reads_dir).map_err(|e| AsamError::io(&reads_dir, e))?;
    let tsv_path = dir.join("duplicates.tsv");
    let tsv_io = |e| AsamError::io(&tsv_path, e);
    let mut tsv = BufWriter::new(std::fs::File::create(&tsv_path).map_err(tsv_io)?);
    writeln!(
        tsv,
        "read_name\tread_group\tlibrary\tfragment\tcopies\tkind\thaplotype\tcontig\tstart\tlength\tstrand\torigin"
    )
    .map_err(tsv_io)?;
    let mut out = Vec::new();
    let mut at = 0;
    for (gi, g) in groups.iter().enumerate() {
        let reads1 = reads_dir.join(format!("{}_R1.fastq", g.id));
        let reads2 = reads_dir.join(format!("{}_R2.fastq", g.id));
        let open = |p: &Path| {
            std::fs::File::create(p)
                .map(|f| BufWriter::with_capacity(1 << 20, f))
                .map_err(|e| AsamError::io(p, e))
        };
        let (mut w1, mut w2) = (open(&reads1)?, open(&reads2)?);
        let mut n = 0;
        let barcode = g.unit.rsplit('.').next().unwrap_or("");
        while at < pairs.len() && group_of(&pairs[at].1) == gi {
            let (id, p) = pairs[at];
            at += 1;
            n += 1;
            let f = fragments[p.fragment as usize];
            let name = format!(
                "{INSTRUMENT}:{RUN}:{FLOWCELL}:{}:{}:{}:{}",
                p.lane, p.tile, p.x, p.y
            );
            let [t1, t2] = templates(spec, truth, &f, p.fragment);
            let mut rng = stream(spec.seed, Stream::Pair, id);
            let (b1, q1) = quality::sequence(&t1, 1, p.lane, &mut rng);
            let (b2, q2) = quality::sequence(&t2, 2, p.lane, &mut rng);
            super::fastx::write_record(&mut w1, &name, &format!("1:N:0:{barcode}"), &b1, &q1)
                .map_err(|e| AsamError::io(&reads1, e))?;
            super::fastx::write_record(&mut w2, &name, &format!("2:N:0:{barcode}"), &b2, &q2)
                .map_err(|e| AsamError::io(&reads2, e))?;
            let kind = match p.kind {
                Kind::Original => "original",
                Kind::Pcr => "pcr",
                Kind::Optical => "optical",
            };
            writeln!(
                tsv,
                "{name}\t{}\t{}\t{}\t{}\t{kind}\t{}\t{}\t{}\t{}\t{}\t{}",
                g.id,
                g.library,
                p.fragment,
                f.copies,
                f.hap + 1,
                truth.genome.contigs[f.contig as usize].name,
                f.start,
                f.len,
                if f.reverse { '-' } else { '+' },
                match f.origin {
                    Origin::Genome => "genome",
                    Origin::Chimera { .. } => "chimera",
                    Origin::Contaminant => "contaminant",
                }
            )
            .map_err(tsv_io)?;
        }
        w1.flush().map_err(|e| AsamError::io(&reads1, e))?;
        w2.flush().map_err(|e| AsamError::io(&reads2, e))?;
        out.push(ReadGroupFiles {
            group: g.clone(),
            reads1,
            reads2,
            pairs: n,
        });
    }
    tsv.flush().map_err(tsv_io)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::{sizes, truth};
    use super::*;

    fn fragment_at(len: u32, origin: Origin) -> Fragment {
        Fragment {
            hap: 0,
            contig: 0,
            start: 1000,
            len,
            reverse: false,
            library: 0,
            copies: 1,
            origin,
        }
    }

    #[test]
    fn pairs_on_one_spot_are_moved_apart() {
        let at = |lane, x| Pair {
            fragment: 0,
            lane,
            tile: 1101,
            x,
            y: 5,
            kind: Kind::Original,
        };
        let mut v: Vec<(u64, Pair)> = [at(1, 7), at(1, 7), at(2, 7), at(1, 8), at(1, 7)]
            .into_iter()
            .enumerate()
            .map(|(i, p)| (i as u64, p))
            .collect();
        make_names_unique(&mut v);
        let spots: Vec<(u32, u32)> = v.iter().map(|(_, p)| (p.lane, p.x)).collect();
        assert_eq!(spots, [(1, 7), (1, 8), (1, 9), (1, 10), (2, 7)]);
    }

    #[test]
    fn templates_read_the_fragment_its_adapter_or_a_chimeric_partner() {
        let spec = DataSpec {
            contigs: 2,
            ..sizes::tiny()
        };
        let t = truth(&spec);
        let hap = &t.haplotypes[0].contigs[0];
        let [r1, r2] = templates(&spec, &t, &fragment_at(300, Origin::Genome), 0);
        assert_eq!(r1, hap[1000..1100]);
        assert_eq!(r2, revcomp(&hap[1200..1300]));
        // Shorter than a read: the adapter follows the insert.
        let [r1, r2] = templates(&spec, &t, &fragment_at(60, Origin::Genome), 0);
        assert_eq!(r1[..60], hap[1000..1060]);
        assert!(r1[60..].starts_with(ADAPTER1) && r2[60..].starts_with(ADAPTER2));
        // A chimera: read 1 as usual, read 2 ends in the partner.
        let partner = Origin::Chimera {
            hap: 1,
            contig: 1,
            start: 500,
        };
        let [r1, r2] = templates(&spec, &t, &fragment_at(300, partner), 3);
        assert_eq!(r1, hap[1000..1100]);
        let other = revcomp(&t.haplotypes[1].contigs[1][500..800]);
        let keep: usize = stream(spec.seed, Stream::Chimera, 3).random_range(0..100);
        assert_eq!(r2[..keep], revcomp(&hap[1000..1300])[..keep]);
        assert_eq!(r2[keep..], other[..100 - keep]);
        // Contaminants are random, the same for the same fragment number.
        let c = fragment_at(300, Origin::Contaminant);
        assert_eq!(templates(&spec, &t, &c, 9), templates(&spec, &t, &c, 9));
        assert_ne!(templates(&spec, &t, &c, 9), templates(&spec, &t, &c, 10));
    }
}
