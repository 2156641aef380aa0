//! The JSON lines testbed-flight prints on stdout for a parent process (the
//! agent's `flight-bulk` / `flight-query` workloads). The line types live in
//! the `testbed-vocab` crate, which the agent reads them with; here they
//! are instantiated with this crate's own field types.
//!
//! - `serve`: one [`ServeReady`] line once it listens.
//! - `bench --json`: `bench::bench_lines`: one [`BenchLine::Stream`] per
//!   stream, then one [`BenchLine::Summary`] (`"type": "stream"` /
//!   `"summary"`).
//! - `query --json`: one `query::Measurement` per measurement.

use crate::settings::{Compression, Op, TransportSettings};

pub use testbed_vocab::flight::{QUERY_CLIENTS, QUERY_COLUMN_SETS};

/// `serve`'s first stdout line.
pub type ServeReady = testbed_vocab::flight::ServeReady<TransportSettings>;
/// One line of `bench --json`.
pub type BenchLine = testbed_vocab::flight::BenchLine<Op, Compression, TransportSettings>;
/// The summary line of `bench --json`.
pub type BenchSummary = testbed_vocab::flight::BenchSummary<Op, Compression, TransportSettings>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{BenchResult, StreamResult, bench_lines};
    use crate::query::Measurement as QueryLine;
    use crate::query::QueryClient;
    use crate::query::taxi::Checksum;
    use clap::ValueEnum;

    fn stream(stream: u32, latencies_ns: Vec<u64>, checksum: Option<u64>) -> StreamResult {
        StreamResult {
            op: Op::Get,
            stream,
            bytes: 320,
            records: 10,
            batches: 2,
            seconds: 0.5,
            mb_per_s: 0.25,
            latencies_ns,
            checksum,
        }
    }

    fn result() -> BenchResult {
        BenchResult {
            summary: BenchSummary {
                op: Op::Get,
                streams: 2,
                threads: 2,
                records_per_stream: 10,
                records_per_batch: 5,
                compression: Compression::Lz4,
                tls: true,
                transport: "unix".into(),
                wall_seconds: 0.75,
                bytes: 640,
                records: 20,
                mb_per_s: 0.5,
                settings: TransportSettings::default(),
                cpu_user_s: Some(0.25),
                cpu_system_s: Some(0.125),
            },
            per_stream: vec![stream(0, vec![7, 9], Some(3)), stream(1, Vec::new(), None)],
        }
    }

    /// The lines as `bench --json` built them before the line types
    /// existed: each result as a JSON object plus a `type` key.
    fn untyped_lines(r: &BenchResult) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        for s in &r.per_stream {
            let mut v = serde_json::to_value(s).unwrap();
            v["type"] = "stream".into();
            out.push(v);
        }
        let mut v = serde_json::to_value(r).unwrap();
        v.as_object_mut().unwrap().remove("per_stream");
        v["type"] = "summary".into();
        out.push(v);
        out
    }

    #[test]
    fn bench_lines_are_the_untyped_json_and_the_agent_reads_them() {
        let r = result();
        let lines = bench_lines(&r);
        let values: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::to_value(l).unwrap())
            .collect();
        assert_eq!(values, untyped_lines(&r));
        assert!(values[1].get("latencies_ns").is_none());
        assert!(values[1].get("checksum").is_none());
        for (l, v) in lines.iter().zip(&values) {
            let text = v.to_string();
            let back: BenchLine = serde_json::from_str(&text).unwrap();
            assert_eq!(&back, l);
            // What the agent reads (the default type parameters).
            let agent: testbed_vocab::flight::BenchLine = serde_json::from_str(&text).unwrap();
            assert_eq!(&serde_json::to_value(&agent).unwrap(), v);
        }
    }

    #[test]
    fn serve_ready_reads_back() {
        let line = ServeReady {
            listening: "127.0.0.1:5".into(),
            tls: false,
            settings: TransportSettings::default(),
        };
        let text = serde_json::to_string(&line).unwrap();
        let agent: testbed_vocab::flight::ServeReady = serde_json::from_str(&text).unwrap();
        assert_eq!(agent.listening, "127.0.0.1:5");
        assert_eq!(agent.settings["tcp_nodelay"], true);
    }

    #[test]
    fn query_lines_read_back() {
        let m = QueryLine {
            client: QueryClient::FlightSqlParquet,
            limit: 10,
            repetition: 1,
            rows: 10,
            seconds: 0.125,
            checksum: Checksum {
                rows: 10,
                ints: u64::MAX,
                micros: 2,
                cents: 3,
                strings: 4,
            },
            matches: true,
            value_bytes: 640,
            client_cpu_s: Some(0.5),
            server_cpu_s: None,
        };
        let text = serde_json::to_string(&m).unwrap();
        let agent: testbed_vocab::flight::QueryLine = serde_json::from_str(&text).unwrap();
        assert_eq!(agent.client, "flight-sql-parquet");
        assert_eq!(agent.checksum["ints"], u64::MAX);
        assert_eq!(agent.checksum, serde_json::to_value(m.checksum).unwrap());
        assert_eq!(
            (agent.rows, agent.seconds, agent.matches),
            (10, 0.125, true)
        );
        assert_eq!(
            (agent.value_bytes, agent.client_cpu_s, agent.server_cpu_s),
            (640, Some(0.5), None)
        );
    }

    #[test]
    fn query_clients_are_the_names_query_knows() {
        let names: Vec<&str> = QueryClient::value_variants()
            .iter()
            .map(|c| c.name())
            .collect();
        assert_eq!(names, QUERY_CLIENTS);
        for c in QueryClient::value_variants() {
            assert_eq!(serde_json::to_value(c).unwrap(), c.name());
        }
    }

    #[test]
    fn query_column_sets_are_the_names_query_knows() {
        use crate::query::columns::ColumnSet;
        let names: Vec<&str> = ColumnSet::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names, QUERY_COLUMN_SETS);
        assert_eq!(ColumnSet::value_variants(), ColumnSet::ALL);
        for c in ColumnSet::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), c.name());
            assert_eq!(
                clap::ValueEnum::to_possible_value(c).unwrap().get_name(),
                c.name()
            );
        }
    }
}
