//! The benchmark payload: schema, the one pre-built batch, the commands and
//! tickets exchanged (JSON, so a pyarrow script can build them too), and the
//! checksum both sides compute.

use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use serde::{Deserialize, Serialize};

use crate::error::{FlightError, Result};
use crate::settings::Compression;

/// Bytes of payload per row: 4 int64 columns.
pub const ROW_BYTES: u64 = 32;
/// MB as the paper counts it.
pub const MB: f64 = (1u64 << 20) as f64;
/// Largest batch a ticket may ask for (rows); 2^24 rows = 512 MiB.
pub const MAX_BATCH_ROWS: u32 = 1 << 24;

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(
        (0..4)
            .map(|i| Field::new(format!("f{i}"), DataType::Int64, false))
            .collect::<Vec<_>>(),
    ))
}

/// Value of row `row`, column `col`: a multiplicative hash in [0, 2^31), so
/// the data does not compress trivially, the pyarrow scripts can compute the
/// same with numpy, and the wrapping-sum checksum never wraps in practice.
pub fn value(row: u64, col: u64, seed: u64) -> i64 {
    let h = (row * 4 + col)
        .wrapping_mul(0x9E37_79B1)
        .wrapping_add(seed.wrapping_mul(0x85EB_CA77));
    (h & 0x7fff_ffff) as i64
}

/// The batch the server re-sends.
pub fn make_batch(rows: u32, seed: u64) -> Result<RecordBatch> {
    let cols = (0..4u64)
        .map(|c| {
            let v: Int64Array = (0..u64::from(rows)).map(|r| value(r, c, seed)).collect();
            Arc::new(v) as Arc<dyn Array>
        })
        .collect::<Vec<_>>();
    Ok(RecordBatch::try_new(schema(), cols)?)
}

/// Wrapping sum of every int64 value of the batch, as u64 (what the pyarrow
/// scripts compute as `sum % 2**64`).
pub fn checksum(batch: &RecordBatch) -> Result<u64> {
    let mut sum = 0u64;
    for col in batch.columns() {
        let a = col
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| FlightError::Verify(format!("column of type {}", col.data_type())))?;
        sum = a
            .values()
            .iter()
            .fold(sum, |s, &v| s.wrapping_add(v as u64));
    }
    Ok(sum)
}

/// GetFlightInfo command: asks the server to plan `streams` DoGet streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerfCommand {
    pub streams: u32,
    pub records_per_stream: u64,
    pub records_per_batch: u32,
    #[serde(default)]
    pub compression: Compression,
    #[serde(default = "default_seed")]
    pub seed: u64,
}

/// DoGet ticket of one stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerfTicket {
    pub stream: u32,
    pub records: u64,
    pub records_per_batch: u32,
    #[serde(default)]
    pub compression: Compression,
    #[serde(default = "default_seed")]
    pub seed: u64,
}

/// DoPut / DoExchange descriptor command of one stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutCommand {
    pub stream: u32,
    /// Compute a checksum of what arrived (costs a pass over the data).
    #[serde(default)]
    pub verify: bool,
    /// Keep every batch until the stream ends (as a `read_all` does).
    #[serde(default)]
    pub keep: bool,
}

/// What the server answers to a DoPut (PutResult app_metadata).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PutSummary {
    pub records: u64,
    pub batches: u64,
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<u64>,
}

fn default_seed() -> u64 {
    1
}

impl PerfCommand {
    pub fn validate(&self) -> Result<()> {
        if self.streams == 0 {
            return Err(FlightError::Param("streams must be at least 1".into()));
        }
        check_batch(self.records_per_batch)
    }

    pub fn ticket(&self, stream: u32) -> PerfTicket {
        PerfTicket {
            stream,
            records: self.records_per_stream,
            records_per_batch: self.records_per_batch,
            compression: self.compression,
            seed: self.seed,
        }
    }
}

pub fn check_batch(records_per_batch: u32) -> Result<()> {
    if records_per_batch == 0 || records_per_batch > MAX_BATCH_ROWS {
        return Err(FlightError::Param(format!(
            "records_per_batch {records_per_batch} outside 1..={MAX_BATCH_ROWS}"
        )));
    }
    Ok(())
}

/// Batch lengths of a stream: full batches, then the remainder.
pub fn batch_plan(records: u64, per_batch: u32) -> (u64, u32) {
    let per = u64::from(per_batch.max(1));
    (records / per, (records % per) as u32)
}

/// Checksum of a whole stream made of the benchmark batch.
pub fn stream_checksum(batch: &RecordBatch, records: u64) -> Result<u64> {
    let (full, tail) = batch_plan(records, batch.num_rows() as u32);
    let one = checksum(batch)?;
    let tail_sum = checksum(&batch.slice(0, tail as usize))?;
    Ok(one.wrapping_mul(full).wrapping_add(tail_sum))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_is_seeded_and_checksum_adds_up() {
        let a = make_batch(100, 7).unwrap();
        let b = make_batch(100, 7).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, make_batch(100, 8).unwrap());
        assert_eq!(a.num_rows(), 100);
        assert!(a.get_array_memory_size() as u64 >= 100 * ROW_BYTES);
        let s = checksum(&a).unwrap();
        let halves = checksum(&a.slice(0, 40)).unwrap() + checksum(&a.slice(40, 60)).unwrap();
        assert_eq!(s, halves);
        // 2 full batches of 100 + 30 rows.
        assert_eq!(
            stream_checksum(&a, 230).unwrap(),
            2 * s + checksum(&a.slice(0, 30)).unwrap()
        );
        assert_eq!(batch_plan(230, 100), (2, 30));
    }

    #[test]
    fn commands_are_strict_json() {
        let c: PerfCommand =
            serde_json::from_str(r#"{"streams":2,"records_per_stream":10,"records_per_batch":4}"#)
                .unwrap();
        assert_eq!(c.compression, Compression::None);
        assert_eq!(c.ticket(1).stream, 1);
        assert!(serde_json::from_str::<PerfCommand>(r#"{"streams":1,"x":1}"#).is_err());
        assert!(
            PerfCommand {
                records_per_batch: 0,
                ..c
            }
            .validate()
            .is_err()
        );
    }
}
