//! The taxi table's checksum, shared by every query client: the Arrow
//! ones (testbed-flight) and the ODBC ones (testbed-odbc, which links no
//! Arrow). Plain Rust and serde only.

use serde::{Deserialize, Serialize};

/// Digest of fetched rows that depends on where each value sits: every
/// value is hashed with its row and column index before the wrapping sums
/// (ints, timestamps in µs since 1970, money rounded to cents, FNV-1a of
/// strings). Equal checksums mean the same values in the same rows and
/// columns, so a reordered result or swapped columns do not pass. The
/// sums are still order-free to compute: batches and columns may be added
/// in any order as long as each value carries its position.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksum {
    pub rows: u64,
    pub ints: u64,
    pub micros: u64,
    pub cents: u64,
    pub strings: u64,
}

pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// A value's bits mixed with its position (SplitMix64's finaliser).
fn at(v: u64, row: u64, col: usize) -> u64 {
    let mut z = v
        ^ row.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (col as u64 + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Checksum {
    /// Adds the value at (`row`, `col`), both counted from 0 in the result.
    pub fn int(&mut self, row: u64, col: usize, v: i64) {
        self.ints = self.ints.wrapping_add(at(v as u64, row, col));
    }
    pub fn micros(&mut self, row: u64, col: usize, v: i64) {
        self.micros = self.micros.wrapping_add(at(v as u64, row, col));
    }
    pub fn float(&mut self, row: u64, col: usize, v: f64) {
        let cents = (v * 100.0).round() as i64 as u64;
        self.cents = self.cents.wrapping_add(at(cents, row, col));
    }
    pub fn text(&mut self, row: u64, col: usize, s: &[u8]) {
        self.strings = self.strings.wrapping_add(at(fnv1a(s), row, col));
    }

    /// A short fingerprint for tables.
    pub fn short(&self) -> String {
        let h = fnv1a(
            &[self.ints, self.micros, self.cents, self.strings]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        );
        format!("{:016x}", h)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// One ODBC fetch (`testbed-odbc fetch`'s line): what arrived and how long
/// the client took from connect to its last row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OdbcFetch {
    pub checksum: Checksum,
    pub seconds: f64,
    /// The process's user + system CPU seconds over the same span.
    #[serde(default)]
    pub cpu_s: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: &[(i64, &str)]) -> Checksum {
        let mut c = Checksum::default();
        for (r, (v, s)) in rows.iter().enumerate() {
            c.int(r as u64, 0, *v);
            c.text(r as u64, 1, s.as_bytes());
            c.rows += 1;
        }
        c
    }

    #[test]
    fn the_checksum_sees_row_order_and_column_order() {
        let rows = [(1, "a"), (2, "b"), (3, "c")];
        let same = table(&rows);
        assert_eq!(same, table(&rows));
        // The same multiset of rows, in another order.
        assert_ne!(same, table(&[(2, "b"), (1, "a"), (3, "c")]));
        // Values of one type swapped between columns.
        let mut a = Checksum::default();
        a.int(0, 0, 7);
        a.int(0, 1, 9);
        let mut b = Checksum::default();
        b.int(0, 0, 9);
        b.int(0, 1, 7);
        assert_ne!(a, b);
        // Columns added in another order give the same digest.
        let mut by_column = Checksum::default();
        for (r, (v, _)) in rows.iter().enumerate() {
            by_column.int(r as u64, 0, *v);
        }
        for (r, (_, s)) in rows.iter().enumerate() {
            by_column.text(r as u64, 1, s.as_bytes());
        }
        by_column.rows = 3;
        assert_eq!(by_column, same);
    }
}
