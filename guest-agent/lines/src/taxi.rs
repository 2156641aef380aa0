//! The taxi table's checksum, shared by every query client: the Arrow
//! ones (testbed-flight) and the ODBC ones (testbed-odbc, which links no
//! Arrow). Plain Rust and serde only.

use serde::{Deserialize, Serialize};

/// Order-independent digest of fetched rows: wrapping sums of ints,
/// timestamps (µs since 1970), money (rounded to cents) and FNV-1a hashes of
/// strings. Equal checksums mean the same multiset of values.
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

impl Checksum {
    pub fn int(&mut self, v: i64) {
        self.ints = self.ints.wrapping_add(v as u64);
    }
    pub fn micros(&mut self, v: i64) {
        self.micros = self.micros.wrapping_add(v as u64);
    }
    pub fn float(&mut self, v: f64) {
        self.cents = self.cents.wrapping_add((v * 100.0).round() as i64 as u64);
    }
    pub fn text(&mut self, s: &[u8]) {
        self.strings = self.strings.wrapping_add(fnv1a(s));
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
}
