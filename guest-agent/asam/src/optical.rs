//! Optical duplicates as Picard's MarkDuplicates counts them (defaults:
//! READ_NAME_REGEX parsing the last three `:` fields of a 5- or 7-field
//! Illumina name as tile, x, y; OPTICAL_DUPLICATE_PIXEL_DISTANCE 100).
//! They are not marked differently, only counted, into the metrics'
//! READ_PAIR_OPTICAL_DUPLICATES and so into ESTIMATED_LIBRARY_SIZE.
//!
//! Within one set of duplicate pairs, two pairs are optical duplicates of
//! each other when they are in the same read group and tile and within
//! the pixel distance in x and in y; the set's optical duplicates are, per
//! connected cluster of that relation, all but one. Picard counts a set
//! whose pairs mix FR and RF (by first-of-pair strand) as two sets.

/// Picard's default OPTICAL_DUPLICATE_PIXEL_DISTANCE.
pub const PIXEL_DISTANCE: i64 = 100;

/// Where on the flow cell a read was, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub tile: i16,
    pub x: i32,
    pub y: i32,
}

/// Picard's ReadNameParser with its default "regex": the last three
/// `:`-separated fields parsed as integers (leading digits), when the name
/// has 5 or 7 fields; otherwise no location.
///
/// MarkDuplicates keeps a read end's location in Java shorts
/// (`PhysicalLocationShort`): tile, x and y wrap above 32767 before they
/// are compared or ordered, so a y of 32815 is -32721 and not within 100
/// of 32742. (Found by the metrics gate: READ_PAIR_OPTICAL_DUPLICATES one
/// above Picard's on the tiny data set.)
pub fn location(read_name: &str) -> Option<Location> {
    let fields: Vec<&str> = read_name.split(':').collect();
    if fields.len() != 5 && fields.len() != 7 {
        return None;
    }
    let n = fields.len();
    // Java's (short) cast.
    let short = |f: &str| rapid_parse_int(f) as i16;
    Some(Location {
        tile: short(fields[n - 3]),
        x: i32::from(short(fields[n - 2])),
        y: i32::from(short(fields[n - 1])),
    })
}

/// htsjdk's rapidParseInt: an optional '-', then digits up to the first
/// other character; Java int arithmetic (wrapping).
fn rapid_parse_int(s: &str) -> i32 {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let mut v: i32 = 0;
    for b in digits.bytes().take_while(u8::is_ascii_digit) {
        v = v.wrapping_mul(10).wrapping_add(i32::from(b - b'0'));
    }
    if negative { v.wrapping_neg() } else { v }
}

/// One pair of a duplicate set, as the optical count sees it.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    pub read_group: &'a str,
    pub location: Option<Location>,
    /// Strand of the first-of-pair read, then of the second (true =
    /// reverse): Picard's orientationForOpticalDuplicates.
    pub strands: (bool, bool),
}

fn close(a: &Member<'_>, b: &Member<'_>) -> bool {
    match (a.location, b.location) {
        (Some(l), Some(r)) => {
            a.read_group == b.read_group
                && l.tile == r.tile
                && (i64::from(l.x) - i64::from(r.x)).abs() <= PIXEL_DISTANCE
                && (i64::from(l.y) - i64::from(r.y)).abs() <= PIXEL_DISTANCE
        }
        _ => false,
    }
}

/// Optical duplicates among the pairs of one duplicate set.
pub fn count(set: &[Member<'_>]) -> u64 {
    let fr = set.iter().any(|m| m.strands == (false, true));
    let rf = set.iter().any(|m| m.strands == (true, false));
    if fr && rf {
        let (a, b): (Vec<Member<'_>>, Vec<Member<'_>>) =
            set.iter().partition(|m| m.strands == (false, true));
        return clustered(&a) + clustered(&b);
    }
    clustered(set)
}

/// Σ over connected clusters of (size − 1).
fn clustered(set: &[Member<'_>]) -> u64 {
    if set.len() < 2 {
        return 0;
    }
    let mut parent: Vec<usize> = (0..set.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut merged = 0;
    for i in 0..set.len() {
        for j in i + 1..set.len() {
            if close(&set[i], &set[j]) {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                if a != b {
                    parent[a] = b;
                    merged += 1;
                }
            }
        }
    }
    // Each merge joined two clusters: clusters = n - merged, and
    // Σ (size - 1) = n - clusters.
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_as_picards_default() {
        assert_eq!(
            location("A00123:8:HFLOWXX:2:1101:15000:2000"),
            Some(Location {
                tile: 1101,
                x: 15000,
                y: 2000
            })
        );
        assert_eq!(
            location("M1:7:1101:15:20x"),
            Some(Location {
                tile: 1101,
                x: 15,
                y: 20
            })
        );
        // Java shorts: above 32767 a coordinate wraps.
        assert_eq!(
            location("A00123:42:HSIMXXDSX:2:1101:31534:32815"),
            Some(Location {
                tile: 1101,
                x: 31534,
                y: 32815 - 65536
            })
        );
        assert_eq!(location("read17"), None);
        assert_eq!(location("a:b:1:2:3:4"), None);
    }

    fn m<'a>(rg: &'a str, tile: i16, x: i32, y: i32, strands: (bool, bool)) -> Member<'a> {
        Member {
            read_group: rg,
            location: Some(Location { tile, x, y }),
            strands,
        }
    }

    #[test]
    fn clusters_count_all_but_one_and_respect_group_tile_and_strands() {
        let fr = (false, true);
        // A chain a-b-c (each within 100 of the next, a-c not): one
        // cluster of 3 -> 2; d far away; e in another tile.
        let set = [
            m("g", 1, 0, 0, fr),
            m("g", 1, 90, 0, fr),
            m("g", 1, 180, 0, fr),
            m("g", 1, 5000, 0, fr),
            m("g", 2, 0, 0, fr),
        ];
        assert_eq!(count(&set), 2);
        // Same place, another read group: not optical.
        assert_eq!(count(&[m("g", 1, 0, 0, fr), m("h", 1, 0, 0, fr)]), 0);
        // Same place, first-of-pair strands differ (FR vs RF): apart.
        assert_eq!(
            count(&[m("g", 1, 0, 0, fr), m("g", 1, 0, 0, (true, false))]),
            0
        );
        // Picard's pair of the tiny data set: y 32742 and 32815 are 73
        // apart, but 32815 is a short's -32721: not optical.
        let near_the_wrap = |y: &str| Member {
            read_group: "lib1.L2",
            location: location(&format!("A00123:42:HSIMXXDSX:2:1101:31534:{y}")),
            strands: fr,
        };
        assert_eq!(count(&[near_the_wrap("32742"), near_the_wrap("32815")]), 0);
        assert_eq!(count(&[near_the_wrap("32642"), near_the_wrap("32715")]), 1);
        // No location: never optical.
        let mut unnamed = m("g", 1, 0, 0, fr);
        unnamed.location = None;
        assert_eq!(count(&[unnamed, m("g", 1, 0, 0, fr)]), 0);
        assert_eq!(count(&[m("g", 1, 0, 0, fr), m("g", 1, 100, 100, fr)]), 1);
        assert_eq!(count(&[m("g", 1, 0, 0, fr), m("g", 1, 101, 0, fr)]), 0);
    }
}
