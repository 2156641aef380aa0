//! What duplicate marking needs from a CIGAR string and a quality string.

/// Unclipped 5' position of a mapped read (Picard's definition: clipped
/// bases, soft and hard, count): the unclipped start for a forward read,
/// the unclipped end for a reverse one. `None` for a malformed CIGAR.
pub fn unclipped_five_prime(pos: i32, cigar: &str, reverse: bool) -> Option<i32> {
    let ops = parse(cigar)?;
    let is_clip = |op: u8| op == b'S' || op == b'H';
    if !reverse {
        let leading: i64 = ops
            .iter()
            .take_while(|(_, op)| is_clip(*op))
            .map(|(n, _)| *n)
            .sum();
        return i32::try_from(i64::from(pos) - leading).ok();
    }
    let reference: i64 = ops
        .iter()
        .filter(|(_, op)| matches!(op, b'M' | b'D' | b'N' | b'=' | b'X'))
        .map(|(n, _)| *n)
        .sum();
    let trailing: i64 = ops
        .iter()
        .rev()
        .take_while(|(_, op)| is_clip(*op))
        .map(|(n, _)| *n)
        .sum();
    i32::try_from(i64::from(pos) + reference.max(1) - 1 + trailing).ok()
}

fn parse(cigar: &str) -> Option<Vec<(i64, u8)>> {
    if cigar == "*" {
        return Some(Vec::new());
    }
    let mut ops = Vec::new();
    let mut n: i64 = 0;
    let mut digits = false;
    for b in cigar.bytes() {
        if b.is_ascii_digit() {
            n = n.checked_mul(10)?.checked_add(i64::from(b - b'0'))?;
            digits = true;
        } else if digits && b"MIDNSHP=X".contains(&b) {
            ops.push((n, b));
            n = 0;
            digits = false;
        } else {
            return None;
        }
    }
    (!digits).then_some(ops)
}

/// Picard's default duplicate score (SUM_OF_BASE_QUALITIES): the sum of the
/// base qualities of at least 15, capped at i16::MAX / 2 per read.
pub fn quality_score(qual: &str) -> i32 {
    if qual == "*" {
        return 0;
    }
    let sum: i32 = qual
        .bytes()
        .map(|b| i32::from(b.saturating_sub(33)))
        .filter(|&q| q >= 15)
        .sum();
    sum.min(i32::from(i16::MAX) / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_prime_counts_clips_and_reference_length() {
        assert_eq!(unclipped_five_prime(100, "100M", false), Some(100));
        assert_eq!(unclipped_five_prime(100, "5S95M", false), Some(95));
        assert_eq!(unclipped_five_prime(100, "3H2S95M", false), Some(95));
        // reverse: end = 100 + (90 + 2 deleted) - 1, plus 5 trailing clipped
        assert_eq!(unclipped_five_prime(100, "90M2D5S", true), Some(196));
        assert_eq!(unclipped_five_prime(100, "50M10I40M", true), Some(189));
        assert_eq!(unclipped_five_prime(100, "M10", false), None);
    }

    #[test]
    fn score_sums_only_qualities_of_15_or_more() {
        // '0' = 15, '/' = 14, 'I' = 40
        assert_eq!(quality_score("0/I"), 55);
        assert_eq!(quality_score("*"), 0);
    }
}
