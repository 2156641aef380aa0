//! The synthetic NYC-taxi trip: the yellow-cab trip record's shape
//! (timestamps, small ints, money as floats, short strings), generated from
//! a seed so every run loads the same rows (the `taxi` column set of
//! `columns.rs`), and the checksum all clients compute over what they
//! fetched.

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Float64Type, Int32Type, Int64Type, TimeUnit, TimestampMicrosecondType,
};

use crate::error::{FlightError, Result};

pub const TABLE: &str = "nyc_taxi";

/// How a column is read and checksummed, whatever the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    Timestamp,
    Float,
    Text,
}

/// Column name, SQL type, kind.
pub const COLUMNS: [(&str, &str, Kind); 12] = [
    ("vendor_id", "integer", Kind::Int),
    ("pickup_at", "timestamp", Kind::Timestamp),
    ("dropoff_at", "timestamp", Kind::Timestamp),
    ("passenger_count", "integer", Kind::Int),
    ("trip_distance", "double precision", Kind::Float),
    ("pickup_location_id", "integer", Kind::Int),
    ("dropoff_location_id", "integer", Kind::Int),
    ("payment_type", "text", Kind::Text),
    ("store_and_fwd_flag", "text", Kind::Text),
    ("fare_amount", "double precision", Kind::Float),
    ("tip_amount", "double precision", Kind::Float),
    ("total_amount", "double precision", Kind::Float),
];

const PAYMENT: [&str; 4] = ["Credit", "Cash", "No Charge", "Dispute"];
/// 2015-01-01 00:00:00 UTC in microseconds.
const EPOCH_2015_US: i64 = 1_420_070_400_000_000;

/// One trip. Money is whole cents so every client reads it back exactly.
#[derive(Debug, Clone, PartialEq)]
pub struct Trip {
    pub vendor_id: i32,
    pub pickup_us: i64,
    pub dropoff_us: i64,
    pub passenger_count: i32,
    pub distance_cents: i64,
    pub pickup_location: i32,
    pub dropoff_location: i32,
    pub payment: &'static str,
    pub flag: &'static str,
    pub fare_cents: i64,
    pub tip_cents: i64,
}

impl Trip {
    pub fn total_cents(&self) -> i64 {
        self.fare_cents + self.tip_cents + 50
    }
}

/// SplitMix64 of (seed, row): rows can be made in any order, in parallel.
pub(crate) fn mix(seed: u64, row: u64, salt: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(row.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(salt.wrapping_mul(0x94D0_49BB_1331_11EB));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn trip(seed: u64, row: u64) -> Trip {
    let r = |salt: u64, n: u64| mix(seed, row, salt) % n;
    let pickup_us = EPOCH_2015_US + (row as i64) * 2_000_000 + (r(1, 2) as i64) * 1_000_000;
    let duration_s = 60 + r(2, 3540) as i64;
    let fare_cents = 250 + r(5, 7000) as i64;
    Trip {
        vendor_id: 1 + r(0, 2) as i32,
        pickup_us,
        dropoff_us: pickup_us + duration_s * 1_000_000,
        passenger_count: 1 + r(3, 6) as i32,
        distance_cents: 10 + r(4, 3000) as i64,
        pickup_location: 1 + r(6, 265) as i32,
        dropoff_location: 1 + r(7, 265) as i32,
        payment: PAYMENT[r(8, 4) as usize],
        flag: if r(9, 50) == 0 { "Y" } else { "N" },
        fare_cents,
        tip_cents: if r(10, 3) == 0 { 0 } else { r(11, 1500) as i64 },
    }
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

pub fn timestamp_text(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// The checksum every client computes (shared with testbed-odbc, which
/// links no Arrow): see [`testbed_vocab::taxi::Checksum`].
pub use testbed_vocab::taxi::{Checksum, days_from_civil, fnv1a};

/// Adds Arrow batches to a [`Checksum`].
pub trait BatchChecksum {
    fn add_batch(&mut self, b: &RecordBatch) -> Result<()>;
}

impl BatchChecksum for Checksum {
    /// Adds every row of an Arrow batch (any int width, µs timestamps,
    /// floats, strings and string views), as the Flight SQL client sees them.
    fn add_batch(&mut self, b: &RecordBatch) -> Result<()> {
        let first_row = self.rows;
        for (col, a) in b.columns().iter().enumerate() {
            add_array(self, first_row, col, a.as_ref())?;
        }
        self.rows += b.num_rows() as u64;
        Ok(())
    }
}

fn add_array(c: &mut Checksum, first_row: u64, col: usize, a: &dyn Array) -> Result<()> {
    // Nulls do not occur in the table (all NOT NULL); skip them if a
    // source ever sends some.
    let valid = |i: usize| a.is_valid(i);
    let row = |i: usize| first_row + i as u64;
    match a.data_type() {
        DataType::Int32 => {
            let a = a.as_primitive::<Int32Type>();
            (0..a.len())
                .filter(|&i| valid(i))
                .for_each(|i| c.int(row(i), col, i64::from(a.value(i))));
        }
        DataType::Int64 => {
            let a = a.as_primitive::<Int64Type>();
            (0..a.len())
                .filter(|&i| valid(i))
                .for_each(|i| c.int(row(i), col, a.value(i)));
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            let a = a.as_primitive::<TimestampMicrosecondType>();
            (0..a.len())
                .filter(|&i| valid(i))
                .for_each(|i| c.micros(row(i), col, a.value(i)));
        }
        DataType::Float64 => {
            let a = a.as_primitive::<Float64Type>();
            (0..a.len())
                .filter(|&i| valid(i))
                .for_each(|i| c.float(row(i), col, a.value(i)));
        }
        DataType::Utf8 => {
            let a = a.as_string::<i32>();
            (0..a.len())
                .filter(|&i| valid(i))
                .for_each(|i| c.text(row(i), col, a.value(i).as_bytes()));
        }
        // DataFusion reads Parquet strings as views.
        DataType::Utf8View => {
            let a = a.as_string_view();
            (0..a.len())
                .filter(|&i| valid(i))
                .for_each(|i| c.text(row(i), col, a.value(i).as_bytes()));
        }
        DataType::LargeUtf8 => {
            let a = a.as_string::<i64>();
            (0..a.len())
                .filter(|&i| valid(i))
                .for_each(|i| c.text(row(i), col, a.value(i).as_bytes()));
        }
        other => {
            return Err(FlightError::Other(format!(
                "checksum: unexpected column type {other}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_roundtrips() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2015, 1, 1) * 86_400_000_000, EPOCH_2015_US);
        assert_eq!(
            timestamp_text(EPOCH_2015_US + 3_723_000_000),
            "2015-01-01 01:02:03"
        );
        for d in [-1000, 0, 59, 60, 16_436, 20_000] {
            let (y, m, dd) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, dd), d);
        }
    }
}
