//! `testbed flight <cmd>` and `testbed-flight <cmd>`: the same subcommands,
//! blocking, each on its own tokio runtime.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::bench::bench_lines;
use crate::bench::{BenchConfig, BenchResult};
use crate::lines::ServeReady;
use crate::server::ServerConfig;
use crate::settings::Op;
use testbed_vocab::request::flight::{
    BenchRequest, FlightRequest, GenCertRequest, GenomicsSendRequest, GenomicsServeRequest,
    IngestRequest, PyServeRequest, QueryRequest, ServeRequest, ServerCpuRequest,
};

#[derive(Debug, clap::Subcommand)]
pub enum FlightCommand {
    /// Serve the bulk benchmark (DoGet/DoPut/DoExchange) until SIGINT/SIGTERM.
    Serve(ServeRequest),
    /// Run the bulk client against a server and print MB/s.
    Bench(Box<BenchRequest>),
    /// Write a CA and a server certificate (name "localhost") for --tls runs.
    GenCert(GenCertRequest),
    /// pyarrow's Flight server with the bulk benchmark's semantics (python3
    /// or $TESTBED_PYTHON), until SIGINT/SIGTERM; first line as `serve`'s.
    PyServe(PyServeRequest),
    /// pyarrow's Flight client on the bulk benchmark: `bench`'s flags, lines
    /// as `bench --json`.
    PyBench(Box<BenchRequest>),
    /// Query comparison: PostgreSQL via ODBC (row, block), libpq, Flight SQL.
    Query(QueryRequest),
    /// Ingest: the same rows written into PostgreSQL by Flight SQL bulk
    /// ingest (ours and ADBC's), binary COPY, batched INSERT and psqlODBC
    /// array inserts; each table checked against the generator.
    Ingest(IngestRequest),
    /// The query comparison's Flight SQL server on its own (a fresh
    /// PostgreSQL with the taxi table), for any Flight SQL client; prints
    /// its address as JSON and serves until stdin closes, SIGINT or SIGTERM.
    SqlServe(crate::query::serve::SqlServeArgs),
    /// The genomics receiver: DoPut of a region's ArrowSAM batches, and a
    /// BAM listener; sorts and marks duplicates per region.
    GenomicsServe(GenomicsServeRequest),
    /// The genomics sender: a SAM file's regions moved by Flight and by BAM.
    GenomicsSend(GenomicsSendRequest),
    /// The CPU seconds a testbed-flight server (`serve`, `genomics-serve`)
    /// has used so far, asked by its `cpu` action; one JSON line
    /// `{"cpu_s": x}`.
    ServerCpu(ServerCpuRequest),
    /// One of the commands above as the JSON request the agent writes
    /// (`{"command": "bench", "server": …}`, the flags' names with `_`).
    Request {
        /// The request's file; `-` reads stdin.
        file: PathBuf,
    },
}

impl FlightCommand {
    fn from_request(r: FlightRequest) -> FlightCommand {
        match r {
            FlightRequest::Serve(r) => FlightCommand::Serve(r),
            FlightRequest::Bench(r) => FlightCommand::Bench(r),
            FlightRequest::PyServe(r) => FlightCommand::PyServe(r),
            FlightRequest::PyBench(r) => FlightCommand::PyBench(r),
            FlightRequest::ServerCpu(r) => FlightCommand::ServerCpu(r),
            FlightRequest::GenCert(r) => FlightCommand::GenCert(r),
            FlightRequest::Query(r) => FlightCommand::Query(r),
            FlightRequest::Ingest(r) => FlightCommand::Ingest(r),
            FlightRequest::GenomicsServe(r) => FlightCommand::GenomicsServe(r),
            FlightRequest::GenomicsSend(r) => FlightCommand::GenomicsSend(r),
        }
    }
}

/// The bulk client's configuration from its request.
pub fn bench_config(a: &BenchRequest) -> BenchConfig {
    BenchConfig {
        server: a.server.clone(),
        op: if a.put { Op::Put } else { a.op },
        streams: a.streams,
        threads: a.threads,
        records_per_stream: a.records_per_stream,
        records_per_batch: a.records_per_batch,
        compression: a.compression,
        tls_ca: a.tls_ca.clone(),
        verify: a.verify,
        seed: a.seed,
        settings: a.profile.apply(a.settings.clone()),
        connect_timeout: Duration::from_secs_f64(a.connect_timeout_secs.max(0.001)),
        keep_batches: a.keep_batches,
    }
}

/// Runs one subcommand to completion.
pub fn run_command(cmd: FlightCommand) -> anyhow::Result<()> {
    match cmd {
        FlightCommand::Request { file } => {
            let request: FlightRequest = testbed_vocab::request::read(&file)
                .map_err(|e| anyhow::anyhow!("testbed-flight request: {e}"))?;
            run_command(FlightCommand::from_request(request))
        }
        FlightCommand::Serve(ServeRequest {
            addr,
            tls_dir,
            settings,
            profile,
            runtime_threads,
        }) => {
            let settings = profile.apply(settings);
            crate::settings::tune_malloc(&settings);
            let cfg = ServerConfig {
                addr: addr.parse()?,
                settings,
                tls_dir,
            };
            crate::runtime::runtime(runtime_threads)?.block_on(serve(cfg))
        }
        FlightCommand::Bench(args) => {
            let cfg = bench_config(&args);
            crate::settings::tune_malloc(&cfg.settings);
            let r = crate::runtime::runtime(args.runtime_threads)?
                .block_on(crate::bench::run(&cfg))
                .with_context(|| {
                    format!("Flight {} benchmark against {}", cfg.op.name(), cfg.server)
                })?;
            print_bench(&r, args.json)
        }
        FlightCommand::GenCert(GenCertRequest { dir }) => {
            let f = crate::tls::generate(&dir)?;
            println!("{}", f.ca_cert.display());
            Ok(())
        }
        FlightCommand::PyServe(PyServeRequest { addr, tls_dir }) => {
            crate::pyarrow::serve_cli(&addr, tls_dir.as_deref())
        }
        FlightCommand::PyBench(args) => crate::pyarrow::bench_cli(&args),
        FlightCommand::Query(args) => crate::query::run_cli(&args),
        FlightCommand::Ingest(args) => crate::ingest::run_cli(&args),
        FlightCommand::SqlServe(args) => crate::query::serve::run_cli(&args),
        FlightCommand::GenomicsServe(args) => crate::genomics::cli::serve(args),
        FlightCommand::GenomicsSend(args) => crate::genomics::cli::send(args),
        FlightCommand::ServerCpu(ServerCpuRequest {
            server,
            tls_ca,
            connect_timeout_secs,
        }) => {
            let timeout = std::time::Duration::from_secs_f64(connect_timeout_secs.max(0.001));
            let cpu_s = crate::runtime::runtime(Some(1))?.block_on(crate::cpu::ask(
                &server.parse()?,
                tls_ca.as_deref(),
                timeout,
            ))?;
            println!(
                "{}",
                serde_json::to_string(&crate::cpu::CpuReply { cpu_s })?
            );
            Ok(())
        }
    }
}

async fn serve(cfg: ServerConfig) -> anyhow::Result<()> {
    let server = crate::server::start(&cfg).await?;
    // The first stdout line tells a parent where we listen (port 0 resolved).
    let line = ServeReady {
        listening: server.addr.to_string(),
        tls: cfg.tls_dir.is_some(),
        settings: cfg.settings.clone(),
    };
    crate::runtime::announce_and_wait(&line).await?;
    server.stop().await?;
    Ok(())
}

fn print_bench(r: &BenchResult, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        for line in bench_lines(r) {
            writeln!(out, "{}", serde_json::to_string(&line)?)?;
        }
        return Ok(());
    }
    for s in &r.per_stream {
        writeln!(
            out,
            "stream {:>3}: {:>10} records {:>6} batches {:>8.3} s {:>9.1} MB/s{}",
            s.stream,
            s.records,
            s.batches,
            s.seconds,
            s.mb_per_s,
            latency_text(&s.latencies_ns)
        )?;
    }
    writeln!(
        out,
        "Do{} streams={} threads={} records/stream={} batch={} compression={} tls={} {}: {:.1} MB/s ({} MB in {:.3} s)",
        match r.op {
            Op::Get => "Get",
            Op::Put => "Put",
            Op::Exchange => "Exchange",
        },
        r.streams,
        r.threads,
        r.records_per_stream,
        r.records_per_batch,
        r.compression.name(),
        r.tls,
        r.transport,
        r.mb_per_s,
        r.bytes as f64 / crate::data::MB,
        r.wall_seconds
    )?;
    Ok(())
}

fn latency_text(ns: &[u64]) -> String {
    if ns.is_empty() {
        return String::new();
    }
    let mut v = ns.to_vec();
    v.sort_unstable();
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    format!(
        "  batch latency p50 {:.1} us p99 {:.1} us max {:.1} us",
        p(0.5),
        p(0.99),
        p(1.0)
    )
}
