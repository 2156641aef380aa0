//! The column sets the query comparison reads, at the same row counts: the
//! taxi mix, integers only, short strings only and long strings only.
//! Public measurements (the arrow-flight-sql-postgresql benchmark) have
//! Flight SQL ahead on integers and behind on strings, so one mix cannot
//! show both sides. Every set is generated from (seed, row), loaded the
//! same way into every source, and checksummed the same way by every
//! client.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Builder, Int32Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::taxi::{self, Checksum, Kind};
use crate::error::{FlightError, Result};

/// The column set (the vocabulary's: the agent names it in its
/// requests); what each set is and how it is generated is here, as
/// [`ColumnSetExt`].
pub use testbed_vocab::request::flight::ColumnSet;

/// One generated value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Int(i32),
    /// µs since 1970.
    Micros(i64),
    /// Money in whole cents, served as `double precision` cents / 100.
    Cents(i64),
    Text(&'a str),
}

/// The string sets' characters: 64 of them, so six random bits pick one,
/// and none needs quoting in CSV.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// What a column set is: its columns, its generated rows, and the
/// checksums every client's rows must match.
pub trait ColumnSetExt: Copy {
    /// Name, SQL type and kind of every column, in table order.
    fn columns(self) -> Vec<(String, &'static str, Kind)>;

    /// The longest string any column holds, in bytes (a client with fixed
    /// buffers, ODBC block fetch, sizes them by it).
    fn max_text_bytes(self) -> usize;

    /// The most bytes one row takes in an Arrow batch: fixed widths, and
    /// text at its longest plus its 4-byte offset.
    fn max_row_bytes(self) -> usize;

    /// Calls `f(column, value)` for every column of `row`, in table order.
    fn visit_row(self, seed: u64, row: u64, text: &mut String, f: impl FnMut(usize, Value<'_>));

    fn create_table_sql(self) -> String;

    fn arrow_schema(self) -> SchemaRef;

    /// Rows `start..start+n` as an Arrow batch (for Parquet).
    fn batch(self, seed: u64, start: u64, n: u64) -> Result<RecordBatch>;

    /// One CSV line for COPY … (FORMAT csv), timestamps in UTC.
    fn csv_line(self, seed: u64, row: u64, out: &mut String);

    /// Bytes of the first `n` rows' values as Arrow holds them: 4 per
    /// integer, 8 per timestamp or float, a string's length (offsets and
    /// validity not counted). CPU per GiB is charged on this.
    fn value_bytes(self, seed: u64, n: u64) -> u64;

    /// `ORDER BY` every column in table order: a table written by another
    /// path may hold its rows in any order, and sorted on every column both
    /// it and the generator give one order (text compared bytewise, as
    /// the cluster's C locale does).
    fn order_by_every_column(self) -> String;

    /// The checksum of the first `n` rows sorted as
    /// [`Self::order_by_every_column`] sorts them.
    fn expected_sorted(self, seed: u64, n: u64) -> Checksum;

    /// The checksum of the first `n` rows, straight from the generator.
    fn expected(self, seed: u64, n: u64) -> Checksum;
}

impl ColumnSetExt for ColumnSet {
    /// Name, SQL type and kind of every column, in table order.
    fn columns(self) -> Vec<(String, &'static str, Kind)> {
        let same = |prefix: &str, n: usize, sql: &'static str, kind: Kind| {
            (0..n)
                .map(|i| (format!("{prefix}{i}"), sql, kind))
                .collect()
        };
        match self {
            ColumnSet::Taxi => taxi::COLUMNS
                .iter()
                .map(|(n, t, k)| (n.to_string(), *t, *k))
                .collect(),
            ColumnSet::Ints => same("i", 8, "integer", Kind::Int),
            ColumnSet::StringsShort => same("s", 8, "text", Kind::Text),
            ColumnSet::StringsLong => same("l", 2, "text", Kind::Text),
        }
    }

    /// The longest string any column holds, in bytes (a client with fixed
    /// buffers, ODBC block fetch, sizes them by it).
    fn max_text_bytes(self) -> usize {
        match self {
            ColumnSet::Taxi => 9, // "No Charge"
            ColumnSet::Ints => 0,
            ColumnSet::StringsShort => 16,
            ColumnSet::StringsLong => 1000,
        }
    }

    /// The most bytes one row takes in an Arrow batch: fixed widths, and
    /// text at its longest plus its 4-byte offset.
    fn max_row_bytes(self) -> usize {
        self.columns()
            .iter()
            .map(|(_, _, k)| match k {
                Kind::Int => 4,
                Kind::Timestamp | Kind::Float => 8,
                Kind::Text => self.max_text_bytes() + 4,
            })
            .sum()
    }

    /// Calls `f(column, value)` for every column of `row`, in table order.
    fn visit_row(
        self,
        seed: u64,
        row: u64,
        text: &mut String,
        mut f: impl FnMut(usize, Value<'_>),
    ) {
        match self {
            ColumnSet::Taxi => {
                let t = taxi::trip(seed, row);
                f(0, Value::Int(t.vendor_id));
                f(1, Value::Micros(t.pickup_us));
                f(2, Value::Micros(t.dropoff_us));
                f(3, Value::Int(t.passenger_count));
                f(4, Value::Cents(t.distance_cents));
                f(5, Value::Int(t.pickup_location));
                f(6, Value::Int(t.dropoff_location));
                f(7, Value::Text(t.payment));
                f(8, Value::Text(t.flag));
                f(9, Value::Cents(t.fare_cents));
                f(10, Value::Cents(t.tip_cents));
                f(11, Value::Cents(t.total_cents()));
            }
            ColumnSet::Ints => {
                for col in 0..8 {
                    f(
                        col,
                        Value::Int(taxi::mix(seed, row, 100 + col as u64) as i32),
                    );
                }
            }
            ColumnSet::StringsShort | ColumnSet::StringsLong => {
                let (cols, min, spread) = match self {
                    ColumnSet::StringsShort => (8, 1, 16),
                    _ => (2, 200, 801),
                };
                for col in 0..cols {
                    let salt = 200 + 1000 * col as u64;
                    let len = min + (taxi::mix(seed, row, salt) % spread) as usize;
                    random_text(seed, row, salt + 1, len, text);
                    f(col, Value::Text(text));
                }
            }
        }
    }

    fn create_table_sql(self) -> String {
        let cols: Vec<String> = self
            .columns()
            .iter()
            .map(|(n, t, _)| format!("{n} {t} NOT NULL"))
            .collect();
        format!("CREATE TABLE {} ({})", taxi::TABLE, cols.join(", "))
    }

    fn arrow_schema(self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns()
                .into_iter()
                .map(|(n, _, k)| Field::new(n, arrow_type(k), false))
                .collect::<Vec<_>>(),
        ))
    }

    /// Rows `start..start+n` as an Arrow batch (for Parquet).
    fn batch(self, seed: u64, start: u64, n: u64) -> Result<RecordBatch> {
        let schema = self.arrow_schema();
        let cap = n as usize;
        let mut builders: Vec<Builder> = schema
            .fields()
            .iter()
            .map(|f| Builder::new(f.data_type(), cap))
            .collect();
        let mut text = String::new();
        let mut mismatch = None;
        for row in start..start + n {
            self.visit_row(seed, row, &mut text, |col, v| {
                if !builders[col].push(v) {
                    mismatch.get_or_insert(col);
                }
            });
        }
        if let Some(col) = mismatch {
            return Err(FlightError::Other(format!(
                "{}: the generator's column {col} does not match its schema",
                self.name()
            )));
        }
        let cols: Vec<ArrayRef> = builders.iter_mut().map(Builder::finish).collect();
        Ok(RecordBatch::try_new(schema, cols)?)
    }

    /// One CSV line for COPY … (FORMAT csv), timestamps in UTC.
    fn csv_line(self, seed: u64, row: u64, out: &mut String) {
        use std::fmt::Write;
        let mut text = String::new();
        self.visit_row(seed, row, &mut text, |col, v| {
            if col > 0 {
                out.push(',');
            }
            // Writing to a String cannot fail.
            let _ = match v {
                Value::Int(i) => write!(out, "{i}"),
                Value::Micros(us) => write!(out, "{}", taxi::timestamp_text(us)),
                Value::Cents(c) => write!(out, "{}.{:02}", c / 100, c % 100),
                Value::Text(s) => write!(out, "{s}"),
            };
        });
        out.push('\n');
    }

    /// Bytes of the first `n` rows' values as Arrow holds them: 4 per
    /// integer, 8 per timestamp or float, a string's length (offsets and
    /// validity not counted). CPU per GiB is charged on this.
    fn value_bytes(self, seed: u64, n: u64) -> u64 {
        let mut bytes = 0u64;
        let mut text = String::new();
        for row in 0..n {
            self.visit_row(seed, row, &mut text, |_, v| {
                bytes += match v {
                    Value::Int(_) => 4,
                    Value::Micros(_) | Value::Cents(_) => 8,
                    Value::Text(s) => s.len() as u64,
                }
            });
        }
        bytes
    }

    /// `ORDER BY` every column in table order: a table written by another
    /// path may hold its rows in any order, and sorted on every column both
    /// it and the generator give one order (text compared bytewise, as
    /// the cluster's C locale does).
    fn order_by_every_column(self) -> String {
        let names: Vec<String> = self.columns().into_iter().map(|c| c.0).collect();
        format!("ORDER BY {}", names.join(", "))
    }

    /// The checksum of the first `n` rows sorted as
    /// [`Self::order_by_every_column`] sorts them.
    fn expected_sorted(self, seed: u64, n: u64) -> Checksum {
        #[derive(PartialEq, Eq, PartialOrd, Ord)]
        enum Owned {
            Int(i32),
            Micros(i64),
            Cents(i64),
            Text(String),
        }
        let mut rows: Vec<Vec<Owned>> = Vec::with_capacity(n as usize);
        let mut text = String::new();
        for row in 0..n {
            let mut r = Vec::new();
            self.visit_row(seed, row, &mut text, |_, v| {
                r.push(match v {
                    Value::Int(i) => Owned::Int(i),
                    Value::Micros(us) => Owned::Micros(us),
                    Value::Cents(c) => Owned::Cents(c),
                    Value::Text(s) => Owned::Text(s.to_string()),
                })
            });
            rows.push(r);
        }
        rows.sort();
        let mut c = Checksum::default();
        for (row, values) in rows.iter().enumerate() {
            let row = row as u64;
            for (col, v) in values.iter().enumerate() {
                match v {
                    Owned::Int(i) => c.int(row, col, i64::from(*i)),
                    Owned::Micros(us) => c.micros(row, col, *us),
                    Owned::Cents(cents) => c.float(row, col, *cents as f64 / 100.0),
                    Owned::Text(s) => c.text(row, col, s.as_bytes()),
                }
            }
            c.rows += 1;
        }
        c
    }

    /// The checksum of the first `n` rows, straight from the generator.
    fn expected(self, seed: u64, n: u64) -> Checksum {
        let mut c = Checksum::default();
        let mut text = String::new();
        for row in 0..n {
            self.visit_row(seed, row, &mut text, |col, v| match v {
                Value::Int(i) => c.int(row, col, i64::from(i)),
                Value::Micros(us) => c.micros(row, col, us),
                Value::Cents(cents) => c.float(row, col, cents as f64 / 100.0),
                Value::Text(s) => c.text(row, col, s.as_bytes()),
            });
            c.rows += 1;
        }
        c
    }
}

/// `len` characters of ALPHABET into `out` (cleared), ten per random word.
fn random_text(seed: u64, row: u64, salt: u64, len: usize, out: &mut String) {
    out.clear();
    let mut word = 0u64;
    for i in 0..len {
        if i % 10 == 0 {
            word = taxi::mix(seed, row, salt + (i / 10) as u64);
        }
        out.push(ALPHABET[(word & 63) as usize] as char);
        word >>= 6;
    }
}

fn arrow_type(k: Kind) -> DataType {
    match k {
        Kind::Int => DataType::Int32,
        Kind::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
        Kind::Float => DataType::Float64,
        Kind::Text => DataType::Utf8,
    }
}

/// A column under construction, by the schema's type.
enum Builder {
    Int(Int32Builder),
    Micros(TimestampMicrosecondBuilder),
    Float(Float64Builder),
    Text(StringBuilder),
}

impl Builder {
    fn new(t: &DataType, cap: usize) -> Builder {
        match t {
            DataType::Int32 => Builder::Int(Int32Builder::with_capacity(cap)),
            DataType::Timestamp(..) => {
                Builder::Micros(TimestampMicrosecondBuilder::with_capacity(cap))
            }
            DataType::Float64 => Builder::Float(Float64Builder::with_capacity(cap)),
            _ => Builder::Text(StringBuilder::with_capacity(cap, cap * 8)),
        }
    }

    /// False when the value's kind is not the column's (a generator bug).
    fn push(&mut self, v: Value<'_>) -> bool {
        match (self, v) {
            (Builder::Int(b), Value::Int(i)) => b.append_value(i),
            (Builder::Micros(b), Value::Micros(us)) => b.append_value(us),
            (Builder::Float(b), Value::Cents(c)) => b.append_value(c as f64 / 100.0),
            (Builder::Text(b), Value::Text(s)) => b.append_value(s),
            _ => return false,
        }
        true
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::Int(b) => Arc::new(b.finish()),
            Builder::Micros(b) => Arc::new(b.finish()),
            Builder::Float(b) => Arc::new(b.finish()),
            Builder::Text(b) => Arc::new(b.finish()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::taxi::BatchChecksum;

    #[test]
    fn every_set_checksums_the_same_from_arrow_and_from_the_generator() {
        for set in ColumnSet::ALL {
            let mut c = Checksum::default();
            c.add_batch(&set.batch(5, 0, 700).unwrap()).unwrap();
            c.add_batch(&set.batch(5, 700, 300).unwrap()).unwrap();
            assert_eq!(c, set.expected(5, 1000), "{}", set.name());
            assert_ne!(c, set.expected(6, 1000), "{}", set.name());
            let schema = set.arrow_schema();
            assert_eq!(schema.fields().len(), set.columns().len());
            assert!(
                set.create_table_sql()
                    .starts_with("CREATE TABLE nyc_taxi (")
            );
        }
    }

    #[test]
    fn csv_lines_have_every_column_and_strings_their_lengths() {
        for set in ColumnSet::ALL {
            let mut line = String::new();
            set.csv_line(5, 3, &mut line);
            assert_eq!(
                line.trim_end().split(',').count(),
                set.columns().len(),
                "{}: {line}",
                set.name()
            );
        }
        let mut longest = 0;
        let mut shortest = usize::MAX;
        for set in [ColumnSet::StringsShort, ColumnSet::StringsLong] {
            for row in 0..2000 {
                let mut line = String::new();
                set.csv_line(1, row, &mut line);
                for s in line.trim_end().split(',') {
                    assert!(s.len() <= set.max_text_bytes(), "{}: {s}", set.name());
                    longest = longest.max(s.len());
                    shortest = shortest.min(s.len());
                }
            }
        }
        assert_eq!((shortest, longest), (1, 1000));
        let mut taxi_line = String::new();
        ColumnSet::Taxi.csv_line(5, 0, &mut taxi_line);
        assert!(taxi_line.contains("2015-01-01 00:00:0"), "{taxi_line}");
    }
}
