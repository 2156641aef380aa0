//! The two host–agent message parts the workloads use on their own: a
//! device as a job names it, and a run of raw samples. The rest of the
//! protocol (the messages around them, the framing) is the agent's
//! `protocol` module, which re-exports these.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceRef {
    /// Path of the block device or file, if the host knows it.
    pub path: Option<String>,
    pub size_bytes: u64,
    pub logical_block_size: u32,
}

/// A run of raw samples of one metric from one thread, sent column-wise so
/// the JSON stays compact. `seq` of values[i] is `first_seq + i`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleChunk {
    pub job_id: u64,
    pub metric: String,
    pub unit: String,
    pub thread: u32,
    pub first_seq: u64,
    /// Extra labels, e.g. the engine when engines are interleaved in a job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// JSON has no NaN: a non-finite value travels as null and arrives as
    /// NaN, for the host to refuse by name rather than as a broken line.
    #[serde(deserialize_with = "null_as_nan")]
    pub values: Vec<f64>,
}

fn null_as_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let values: Vec<Option<f64>> = Deserialize::deserialize(d)?;
    Ok(values.into_iter().map(|v| v.unwrap_or(f64::NAN)).collect())
}
