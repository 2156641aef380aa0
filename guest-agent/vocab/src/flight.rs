//! Lines of `testbed-flight`.
//!
//! - `serve`: one [`ServeReady`] line once it listens.
//! - `bench --json`: one [`BenchLine::Stream`] per stream, then one
//!   [`BenchLine::Summary`] (`"type": "stream"` / `"summary"`).
//! - `query --json`: one [`QueryLine`] per measurement.
//!
//! Type parameters (helper type / what the agent reads): `Op`
//! (`settings::Op` / its name), `Compression` (`settings::Compression` /
//! its name), `Settings` (`settings::TransportSettings` / JSON),
//! `Client` (`query::QueryClient` / its name), `Checksum`
//! (`query::taxi::Checksum` / JSON).

use serde::{Deserialize, Serialize};

/// `serve`'s first stdout line: where it listens (port 0 resolved).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeReady<Settings = serde_json::Value> {
    /// IP:PORT or unix:/path.
    pub listening: String,
    pub tls: bool,
    pub settings: Settings,
}

/// One line of `bench --json`, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum BenchLine<Op = String, Compression = String, Settings = serde_json::Value> {
    Stream(StreamResult<Op>),
    Summary(BenchSummary<Op, Compression, Settings>),
}

/// One stream's outcome. `bytes` counts payload (32 B a row), as the paper.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamResult<Op = String> {
    pub op: Op,
    pub stream: u32,
    pub bytes: u64,
    pub records: u64,
    pub batches: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    /// DoGet only: time from the previous batch (or the request) to each batch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latencies_ns: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<u64>,
}

/// A bulk run's totals (the per-stream results are lines of their own).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchSummary<Op = String, Compression = String, Settings = serde_json::Value> {
    pub op: Op,
    pub streams: u32,
    pub threads: u32,
    pub records_per_stream: u64,
    pub records_per_batch: u32,
    pub compression: Compression,
    pub tls: bool,
    pub transport: String,
    /// First request to last stream done.
    pub wall_seconds: f64,
    pub bytes: u64,
    pub records: u64,
    pub mb_per_s: f64,
    pub settings: Settings,
    /// CPU time of the whole client process (all its threads) over the
    /// timed span, user and system; absent from clients that do not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_user_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_system_s: Option<f64>,
}

/// One line of `query --json`: one client fetching N rows once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryLine<Client = String, Checksum = serde_json::Value> {
    pub client: Client,
    pub limit: u64,
    pub repetition: u32,
    pub rows: u64,
    pub seconds: f64,
    /// Digest of the rows fetched, each value at its row and column.
    pub checksum: Checksum,
    /// The checksum equals the generator's.
    pub matches: bool,
    /// Bytes of the fetched rows' values as Arrow holds them (4 per
    /// integer, 8 per timestamp or float, a string's length): every
    /// client's CPU is charged per GiB of this, whatever its wire format.
    #[serde(default)]
    pub value_bytes: u64,
    /// CPU seconds of the client (its threads, or the ODBC process from
    /// connect to last row) and of the server side (the servers' threads,
    /// and PostgreSQL's processes when it runs) during this fetch.
    #[serde(default)]
    pub client_cpu_s: Option<f64>,
    #[serde(default)]
    pub server_cpu_s: Option<f64>,
}

/// One line of `genomics-send --json`: one pipeline moving every region
/// of the data set once (regions one after another), then the receiver's
/// per-region sort and duplicate marking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenomicsLine {
    /// "flight" (ArrowSAM batches by DoPut) or "bam" (BGZF BAM over TCP).
    pub pipeline: String,
    pub regions: u32,
    pub repetition: u32,
    /// "sequential" (a region is sent once the last is processed) or
    /// "overlapped" (once the last is received).
    pub schedule: String,
    /// Sum over regions: from the sender's connect to the receiver
    /// holding the region's records as ArrowSAM batches (encode, transfer
    /// and decode included), on the sender's clock.
    pub communication_seconds: f64,
    /// Sum over regions of the receiver's sort + duplicate marking.
    pub processing_seconds: f64,
    /// From the first region's connect to the last region's processing
    /// reply, on the sender's clock: what overlapping saves shows here.
    pub total_seconds: f64,
    /// The sender process's user + system CPU seconds over the move
    /// (every region, from before the first connect to the last reply).
    #[serde(default)]
    pub sender_cpu_s: Option<f64>,
    /// The receiver process's over the same span: decoding and the
    /// per-region sort and markdup (the same work in every pipeline).
    #[serde(default)]
    pub receiver_cpu_s: Option<f64>,
    /// The records' size as SAM text, what CPU is charged per GiB of.
    #[serde(default)]
    pub payload_bytes: u64,
    /// Bytes the sender wrote to the connection (Flight: FlightData
    /// header and body; BAM: the BGZF stream).
    pub wire_bytes: u64,
    pub records: u64,
    pub duplicates: u64,
    /// Duplicates marked over the whole data set at once: the difference
    /// to `duplicates` is what region boundaries cost (pairs whose
    /// duplicate lies in another region).
    pub unpartitioned_duplicates: u64,
    /// FNV-1a over the SAM lines of every region's output, in order.
    pub checksum: String,
}

/// The names of `query --clients` (`query::QueryClient` serialised).
pub const QUERY_CLIENTS: [&str; 10] = crate::request::flight::QueryClient::NAMES;

/// One line of `ingest --json`: one client writing N rows into the engine
/// once, its time from connect to the last row committed, and whether the
/// table then held exactly the generated rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestLine<Client = String> {
    pub client: Client,
    /// Rows written (asked for).
    pub rows: u64,
    pub repetition: u32,
    pub seconds: f64,
    /// The client reported all rows written, and the table's rows, sorted
    /// on every column, have the checksum of the generator's sorted the
    /// same way (row count included).
    pub matches: bool,
    /// Bytes of the rows' values as Arrow holds them (see [`QueryLine`]).
    pub value_bytes: u64,
    /// CPU seconds of the client and of the server side (PostgreSQL's
    /// processes, and our Flight SQL server's threads) during the write.
    pub client_cpu_s: Option<f64>,
    pub server_cpu_s: Option<f64>,
}

/// The names of `ingest --clients` (`ingest::IngestClient` serialised).
pub const INGEST_CLIENTS: [&str; 5] = crate::request::flight::IngestClient::NAMES;

/// The names of `query --columns` (`query::columns::ColumnSet`).
pub const QUERY_COLUMN_SETS: [&str; 4] = crate::request::flight::ColumnSet::NAMES;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_and_summary_lines_are_told_apart_by_type() {
        let stream = r#"{"type":"stream","op":"get","stream":1,"bytes":32,"records":1,"batches":1,"seconds":0.5,"mb_per_s":0.25}"#;
        let line: BenchLine = serde_json::from_str(stream).unwrap();
        let BenchLine::Stream(s) = &line else {
            panic!("{line:?}")
        };
        assert_eq!((s.op.as_str(), s.stream), ("get", 1));
        assert!(s.latencies_ns.is_empty() && s.checksum.is_none());
        let back = serde_json::to_value(&line).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(stream).unwrap()
        );
        let summary = serde_json::json!({
            "type": "summary", "op": "put", "streams": 1, "threads": 1,
            "records_per_stream": 1, "records_per_batch": 1, "compression": "lz4",
            "tls": true, "transport": "unix", "wall_seconds": 1.0, "bytes": 32,
            "records": 1, "mb_per_s": 1.0, "settings": {"tcp_nodelay": true},
        });
        let line: BenchLine = serde_json::from_value(summary.clone()).unwrap();
        let BenchLine::Summary(s) = &line else {
            panic!("{line:?}")
        };
        assert_eq!(s.settings["tcp_nodelay"], true);
        assert_eq!(serde_json::to_value(&line).unwrap(), summary);
    }
}
