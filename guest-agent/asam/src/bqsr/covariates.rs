//! The covariates of one read's bases, as GATK4's covariates compute them:
//! read group (`ReadGroupCovariate`), reported quality
//! (`QualityScoreCovariate`), machine cycle (`CycleCovariate`) and the
//! dinucleotide context (`ContextCovariate`, mismatches context size 2).

use crate::schema::flag;

/// Bases reported below this quality are neither counted nor recalibrated
/// (GATK's `--preserve-qscores-less-than`, default 6).
pub const MIN_USABLE_QUALITY: u8 = 6;
/// Read-end bases at or below this quality are written as N before the
/// context is taken (GATK's `--low-quality-tail`, default 2).
pub const LOW_QUALITY_TAIL: u8 = 2;
/// GATK refuses longer reads (`--maximum-cycle-value`, default 500).
pub const MAX_CYCLE: usize = 500;
/// The highest quality SAM can write ('~' - 33).
pub const MAX_SAM_QUALITY: u8 = 93;
/// Number of dinucleotide contexts (4 × 4).
pub const CONTEXTS: usize = 16;

const QC_FAIL: i32 = 0x200;
const SECOND_OF_PAIR: i32 = 0x80;

/// Read group covariate: the `RG:Z:` tag. GATK uses the read group's PU
/// when the header gives one; we key on the ID (no header here), so two
/// read groups sharing a PU are two rows. Reads without RG share "-".
pub fn read_group(tags: &str) -> &str {
    tags.split('\t')
        .find_map(|t| t.strip_prefix("RG:Z:"))
        .unwrap_or("-")
}

/// Why a record adds nothing to the table (GATK4 BaseRecalibrator's
/// default read filters, plus supplementary: see the module docs).
pub fn skipped_for_table(flags: i32, mapq: i32) -> bool {
    flags
        & (flag::UNMAPPED | flag::SECONDARY | flag::SUPPLEMENTARY | flag::DUPLICATE | QC_FAIL)
        != 0
        // MappingQualityNotZero and MappingQualityAvailable (255 = unknown).
        || mapq == 0
        || mapq == 255
}

/// Machine cycle of each base in read (SEQ) order, 1-based; negative for
/// the second read of a pair; counted from the SEQ end for reverse-strand
/// reads, whose SEQ is the reverse complement of what was sequenced.
pub fn cycles(len: usize, flags: i32) -> Vec<i32> {
    let second = flags & flag::PAIRED != 0 && flags & SECOND_OF_PAIR != 0;
    let sign = if second { -1 } else { 1 };
    let reverse = flags & flag::REVERSE != 0;
    (0..len)
        .map(|i| {
            let from_start = if reverse { len - i } else { i + 1 };
            sign * from_start as i32
        })
        .collect()
}

/// 2-bit code of a base, None for anything but ACGT.
pub fn base_code(b: u8) -> Option<u8> {
    match b.to_ascii_uppercase() {
        b'A' => Some(0),
        b'C' => Some(1),
        b'G' => Some(2),
        b'T' => Some(3),
        _ => None,
    }
}

pub fn context_name(c: u8) -> String {
    let base = |x: u8| b"ACGT"[usize::from(x & 3)] as char;
    format!("{}{}", base(c >> 2), base(c))
}

pub fn context_from_name(s: &str) -> Option<u8> {
    let b = s.as_bytes();
    if b.len() != 2 {
        return None;
    }
    Some(base_code(b[0])? << 2 | base_code(b[1])?)
}

fn complement(b: u8) -> u8 {
    match b.to_ascii_uppercase() {
        b'A' => b'T',
        b'C' => b'G',
        b'G' => b'C',
        b'T' => b'A',
        _ => b'N',
    }
}

/// Dinucleotide context of each base in read (SEQ) order: the previous
/// base and this one in sequencing direction (complemented and from the
/// SEQ end for reverse-strand reads). None for the first sequenced base,
/// and where either base is not ACGT or lies in a low-quality tail.
pub fn contexts(seq: &[u8], quals: &[u8], reverse: bool) -> Vec<Option<u8>> {
    let len = seq.len();
    let mut bases: Vec<u8> = seq.to_vec();
    // GATK clips low-quality ends by writing N (ClippingRepresentation.WRITE_NS).
    for i in (0..len).take_while(|&i| quals[i] <= LOW_QUALITY_TAIL) {
        bases[i] = b'N';
    }
    for i in (0..len).rev().take_while(|&i| quals[i] <= LOW_QUALITY_TAIL) {
        bases[i] = b'N';
    }
    let stranded: Vec<u8> = if reverse {
        bases.iter().rev().map(|&b| complement(b)).collect()
    } else {
        bases
    };
    let mut out = vec![None; len];
    for i in 1..len {
        let c = base_code(stranded[i - 1]).zip(base_code(stranded[i]));
        let at = if reverse { len - 1 - i } else { i };
        out[at] = c.map(|(p, b)| p << 2 | b);
    }
    out
}

/// What one read base is aligned to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Aligned to this 1-based reference position (M, = or X).
    Aligned(i64),
    /// Inserted after this 1-based reference position (I).
    Inserted(i64),
    /// Soft-clipped: not part of the alignment.
    Clipped,
}

/// Placement of every SEQ base for a record at 1-based `pos`; None for a
/// malformed CIGAR or one whose read length differs from `len`.
pub fn placements(pos: i32, cigar: &str, len: usize) -> Option<Vec<Placement>> {
    let mut out = Vec::with_capacity(len);
    let mut ref_pos = i64::from(pos);
    let mut n: usize = 0;
    let mut digits = false;
    for b in cigar.bytes() {
        if b.is_ascii_digit() {
            n = n.checked_mul(10)?.checked_add(usize::from(b - b'0'))?;
            digits = true;
            continue;
        }
        if !digits {
            return None;
        }
        match b {
            b'M' | b'=' | b'X' => {
                for k in 0..n {
                    out.push(Placement::Aligned(ref_pos + k as i64));
                }
                ref_pos += n as i64;
            }
            b'I' => out.extend(std::iter::repeat_n(Placement::Inserted(ref_pos - 1), n)),
            b'S' => out.extend(std::iter::repeat_n(Placement::Clipped, n)),
            b'D' | b'N' => ref_pos += n as i64,
            b'H' | b'P' => {}
            _ => return None,
        }
        n = 0;
        digits = false;
    }
    (!digits && out.len() == len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycle_is_negative_for_read_two_and_reversed_on_the_reverse_strand() {
        assert_eq!(cycles(3, 0), [1, 2, 3]);
        assert_eq!(cycles(3, flag::REVERSE), [3, 2, 1]);
        assert_eq!(cycles(3, 0x1 | 0x80), [-1, -2, -3]);
        assert_eq!(cycles(3, 0x1 | 0x80 | flag::REVERSE), [-3, -2, -1]);
        // Second-of-pair without the paired bit is not read 2 (GATK checks both).
        assert_eq!(cycles(2, 0x80), [1, 2]);
    }

    #[test]
    fn context_follows_the_sequencing_direction() {
        let q = [30u8; 4];
        let f = contexts(b"ACGT", &q, false);
        let names: Vec<Option<String>> = f.iter().map(|c| c.map(context_name)).collect();
        assert_eq!(
            names,
            [
                None,
                Some("AC".into()),
                Some("CG".into()),
                Some("GT".into())
            ]
        );
        // Reverse: sequenced as ACGT reverse-complemented = ACGT; SEQ index 3
        // (the first sequenced base) has no context.
        let r = contexts(b"AACC", &q, true);
        let names: Vec<Option<String>> = r.iter().map(|c| c.map(context_name)).collect();
        // sequenced: GGTT; contexts in sequencing order: -, GG, GT, TT
        assert_eq!(
            names,
            [
                Some("TT".into()),
                Some("GT".into()),
                Some("GG".into()),
                None
            ]
        );
        // An N and a low-quality tail break the context.
        let n = contexts(b"ANGTA", &[30, 30, 30, 30, 2], false);
        assert_eq!(n, [None, None, None, Some(2 << 2 | 3), None]);
        assert_eq!(context_from_name("GT"), Some(2 << 2 | 3));
    }

    #[test]
    fn placements_follow_the_cigar() {
        use Placement::*;
        assert_eq!(
            placements(100, "1S2M1I1D1M", 5),
            Some(vec![
                Clipped,
                Aligned(100),
                Aligned(101),
                Inserted(101),
                Aligned(103)
            ])
        );
        assert_eq!(
            placements(100, "2H3M", 3),
            Some(vec![Aligned(100), Aligned(101), Aligned(102)])
        );
        assert_eq!(placements(100, "4M", 3), None);
        assert_eq!(placements(100, "M4", 4), None);
    }

    #[test]
    fn table_filters_follow_gatk() {
        assert!(!skipped_for_table(99, 60));
        for f in [0x4, 0x100, 0x200, 0x400, 0x800] {
            assert!(skipped_for_table(f, 60), "{f:#x}");
        }
        assert!(skipped_for_table(0, 0) && skipped_for_table(0, 255));
        assert_eq!(read_group("NM:i:0\tRG:Z:rg2"), "rg2");
        assert_eq!(read_group(""), "-");
    }
}
