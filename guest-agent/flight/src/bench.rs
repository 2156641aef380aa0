//! The bulk client: drives DoGet, DoPut or DoExchange over N streams with T
//! concurrent workers (each on its own connection, as the C++ benchmark's
//! threads are) and returns per-stream bytes, time and DoGet batch latencies.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightData, FlightDescriptor, Ticket};
use serde::{Deserialize, Serialize};
use tonic::transport::{Channel, ClientTlsConfig};

use crate::addr::Addr;
use crate::codec::{BatchDecoder, BatchEncoder, Decoded};
use crate::data::{
    MB, PerfCommand, PerfTicket, PutCommand, PutSummary, ROW_BYTES, batch_plan, check_batch,
    checksum, make_batch, schema, stream_checksum,
};
use crate::error::{FlightError, Result};
use crate::settings::{Compression, Op, TransportSettings};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchConfig {
    pub server: String,
    pub op: Op,
    pub streams: u32,
    /// Concurrent workers; 0 means one per stream.
    pub threads: u32,
    pub records_per_stream: u64,
    pub records_per_batch: u32,
    pub compression: Compression,
    /// CA certificate to trust; set means TLS.
    pub tls_ca: Option<PathBuf>,
    /// Check row counts and checksums of what arrived.
    pub verify: bool,
    pub seed: u64,
    pub settings: TransportSettings,
    pub connect_timeout: Duration,
    /// Keep every received batch until the stream ends (as pyarrow's
    /// `read_all` does), and ask the server to keep what a DoPut sends;
    /// otherwise each batch is dropped once counted.
    #[serde(default)]
    pub keep_batches: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            server: "127.0.0.1:31337".into(),
            op: Op::Get,
            streams: 1,
            threads: 0,
            records_per_stream: 200_980,
            records_per_batch: 4096,
            compression: Compression::None,
            tls_ca: None,
            verify: false,
            seed: 1,
            settings: TransportSettings::default(),
            connect_timeout: Duration::from_secs(5),
            keep_batches: false,
        }
    }
}

/// One stream's outcome. `bytes` counts payload (32 B a row), as the paper.
/// `bench --json` prints one per line (the line type is shared with the agent).
pub type StreamResult = testbed_vocab::flight::StreamResult<Op>;

/// A bulk run: its totals (the `bench --json` summary line, whose fields
/// read through as `r.mb_per_s` …) and every stream's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchResult {
    #[serde(flatten)]
    pub summary: crate::lines::BenchSummary,
    pub per_stream: Vec<StreamResult>,
}

impl std::ops::Deref for BenchResult {
    type Target = crate::lines::BenchSummary;
    fn deref(&self) -> &Self::Target {
        &self.summary
    }
}

fn rpc_err(call: &'static str, addr: &Addr, s: tonic::Status) -> FlightError {
    FlightError::Rpc {
        call,
        addr: addr.to_string(),
        status: format!("{:?}: {}", s.code(), s.message()),
    }
}

/// A connected raw Flight client with the message limits raised.
pub async fn client(
    addr: &Addr,
    tls: Option<&ClientTlsConfig>,
    settings: &TransportSettings,
    timeout: Duration,
) -> Result<FlightServiceClient<Channel>> {
    let ch = crate::transport::connect(addr, tls, settings, timeout).await?;
    Ok(FlightServiceClient::new(ch)
        .max_decoding_message_size(settings.max_message_bytes)
        .max_encoding_message_size(settings.max_message_bytes))
}

#[derive(Clone)]
struct Shared {
    cfg: BenchConfig,
    addr: Addr,
    tls: Option<ClientTlsConfig>,
    batch: RecordBatch,
    encoded: FlightData,
}

pub async fn run(cfg: &BenchConfig) -> Result<BenchResult> {
    let addr: Addr = cfg.server.parse()?;
    check_batch(cfg.records_per_batch)?;
    if cfg.streams == 0 {
        return Err(FlightError::Param("streams must be at least 1".into()));
    }
    crate::settings::validate(&cfg.settings)?;
    let tls = match &cfg.tls_ca {
        Some(ca) => Some(crate::tls::client_config(ca)?),
        None => None,
    };
    let threads = if cfg.threads == 0 {
        cfg.streams
    } else {
        cfg.threads.min(cfg.streams)
    };
    let batch = make_batch(cfg.records_per_batch, cfg.seed)?;
    let encoded = BatchEncoder::new(Compression::None)?.encode(&batch)?;
    let shared = Arc::new(Shared {
        cfg: cfg.clone(),
        addr: addr.clone(),
        tls,
        batch,
        encoded,
    });

    // Plan (DoGet) and connect every worker before the clock starts.
    let mut control = client(
        &addr,
        shared.tls.as_ref(),
        &cfg.settings,
        cfg.connect_timeout,
    )
    .await?;
    let tickets: Vec<Ticket> = if cfg.op == Op::Get {
        let cmd = PerfCommand {
            streams: cfg.streams,
            records_per_stream: cfg.records_per_stream,
            records_per_batch: cfg.records_per_batch,
            compression: cfg.compression,
            seed: cfg.seed,
        };
        let cmd = serde_json::to_vec(&cmd).map_err(|e| FlightError::Other(e.to_string()))?;
        let info = control
            .get_flight_info(FlightDescriptor::new_cmd(cmd))
            .await
            .map_err(|s| rpc_err("GetFlightInfo", &addr, s))?
            .into_inner();
        let tickets: Vec<Ticket> = info.endpoint.into_iter().filter_map(|e| e.ticket).collect();
        if tickets.len() != cfg.streams as usize {
            return Err(FlightError::Verify(format!(
                "GetFlightInfo returned {} endpoints with tickets for {} streams",
                tickets.len(),
                cfg.streams
            )));
        }
        tickets
    } else {
        Vec::new()
    };
    drop(control);
    warm_up(&shared).await?;

    // The clock starts before the workers connect: each connects inside
    // the timer and its first stream's time includes the connect, as the
    // C++ arrow-flight-benchmark times a stream (GetFlightInfo stays out).
    let next = Arc::new(AtomicU32::new(0));
    let tickets = Arc::new(tickets);
    let started = Instant::now();
    let cpu0 = crate::cpu::process_cpu();
    let mut workers = Vec::new();
    for _ in 0..threads {
        let (shared, next, tickets) = (shared.clone(), next.clone(), tickets.clone());
        workers.push(tokio::spawn(async move {
            let mut since = Instant::now();
            let cfg = &shared.cfg;
            let mut c = client(
                &shared.addr,
                shared.tls.as_ref(),
                &cfg.settings,
                cfg.connect_timeout,
            )
            .await?;
            let mut out = Vec::new();
            loop {
                let s = next.fetch_add(1, Ordering::Relaxed);
                if s >= shared.cfg.streams {
                    return Ok::<_, FlightError>(out);
                }
                let r = match shared.cfg.op {
                    Op::Get => get_stream(&mut c, &shared, s, &tickets[s as usize], since).await?,
                    Op::Put => put_stream(&mut c, &shared, s, since).await?,
                    Op::Exchange => exchange_stream(&mut c, &shared, s, since).await?,
                };
                out.push(r);
                since = Instant::now();
            }
        }));
    }
    let mut per_stream = Vec::new();
    for w in workers {
        let r = w
            .await
            .map_err(|e| FlightError::Other(format!("bench worker: {e}")))??;
        per_stream.extend(r);
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = crate::cpu::process_cpu()
        .zip(cpu0)
        .map(|(b, a)| (b.0 - a.0, b.1 - a.1));
    per_stream.sort_by_key(|r| r.stream);
    let bytes: u64 = per_stream.iter().map(|r| r.bytes).sum();
    let records = per_stream.iter().map(|r| r.records).sum();
    Ok(BenchResult {
        summary: crate::lines::BenchSummary {
            op: cfg.op,
            streams: cfg.streams,
            threads,
            records_per_stream: cfg.records_per_stream,
            records_per_batch: cfg.records_per_batch,
            compression: cfg.compression,
            tls: cfg.tls_ca.is_some(),
            transport: match addr {
                Addr::Tcp(_) => "tcp".into(),
                Addr::Unix(_) => "unix".into(),
            },
            wall_seconds: wall,
            bytes,
            records,
            mb_per_s: bytes as f64 / MB / wall.max(1e-9),
            settings: cfg.settings.clone(),
            cpu_user_s: cpu.map(|c| c.0),
            cpu_system_s: cpu.map(|c| c.1),
        },
        per_stream,
    })
}

/// One untimed stream of one batch, on a connection of its own, before
/// the clock: lazy set-up on either side (pyarrow's server imports its
/// compute kernels at its first call) stays out of every pairing's timer.
/// pyarrow_client.py does the same.
async fn warm_up(sh: &Shared) -> Result<()> {
    let mut cfg = sh.cfg.clone();
    cfg.records_per_stream = u64::from(cfg.records_per_batch);
    cfg.streams = 1;
    cfg.verify = false;
    let one = Shared { cfg, ..sh.clone() };
    let mut c = client(
        &one.addr,
        one.tls.as_ref(),
        &one.cfg.settings,
        one.cfg.connect_timeout,
    )
    .await?;
    let t0 = Instant::now();
    match one.cfg.op {
        Op::Get => {
            let cmd = PerfCommand {
                streams: 1,
                records_per_stream: one.cfg.records_per_stream,
                records_per_batch: one.cfg.records_per_batch,
                compression: one.cfg.compression,
                seed: one.cfg.seed,
            };
            let cmd = serde_json::to_vec(&cmd).map_err(|e| FlightError::Other(e.to_string()))?;
            let info = c
                .get_flight_info(FlightDescriptor::new_cmd(cmd))
                .await
                .map_err(|s| rpc_err("GetFlightInfo (warm-up)", &one.addr, s))?
                .into_inner();
            let ticket = info
                .endpoint
                .into_iter()
                .find_map(|e| e.ticket)
                .ok_or_else(|| FlightError::Verify("warm-up: no ticket".into()))?;
            get_stream(&mut c, &one, 0, &ticket, t0).await?;
        }
        Op::Put => {
            put_stream(&mut c, &one, 0, t0).await?;
        }
        Op::Exchange => {
            exchange_stream(&mut c, &one, 0, t0).await?;
        }
    }
    Ok(())
}

fn result(op: Op, stream: u32, records: u64, batches: u64, seconds: f64) -> StreamResult {
    let bytes = records * ROW_BYTES;
    StreamResult {
        op,
        stream,
        bytes,
        records,
        batches,
        seconds,
        mb_per_s: bytes as f64 / MB / seconds.max(1e-9),
        latencies_ns: Vec::new(),
        checksum: None,
    }
}

fn expect_records(sh: &Shared, stream: u32, got: u64) -> Result<()> {
    if got != sh.cfg.records_per_stream {
        return Err(FlightError::Verify(format!(
            "stream {stream}: {got} records arrived, {} expected",
            sh.cfg.records_per_stream
        )));
    }
    Ok(())
}

fn expect_checksum(sh: &Shared, stream: u32, got: u64) -> Result<()> {
    let want = stream_checksum(&sh.batch, sh.cfg.records_per_stream)?;
    if got != want {
        return Err(FlightError::Verify(format!(
            "stream {stream}: checksum {got} differs from the expected {want}"
        )));
    }
    Ok(())
}

async fn get_stream(
    c: &mut FlightServiceClient<Channel>,
    sh: &Shared,
    stream: u32,
    ticket: &Ticket,
    t0: Instant,
) -> Result<StreamResult> {
    let mut input = c
        .do_get(ticket.clone())
        .await
        .map_err(|s| rpc_err("DoGet", &sh.addr, s))?
        .into_inner();
    let mut lat = Vec::with_capacity(batches_per_stream(&sh.cfg) as usize);
    let mut last = t0;
    let got = receive(&mut input, sh, "DoGet", || {
        let now = Instant::now();
        lat.push(now.duration_since(last).as_nanos() as u64);
        last = now;
    })
    .await?;
    let seconds = t0.elapsed().as_secs_f64();
    let mut r = received_result(sh, Op::Get, stream, got, seconds)?;
    r.latencies_ns = lat;
    Ok(r)
}

/// What a stream of batches from the server (DoGet, DoExchange) held.
#[derive(Default)]
struct Received {
    records: u64,
    batches: u64,
    /// Sum of the batches' checksums; 0 unless verifying.
    checksum: u64,
    /// The batches themselves with `keep_batches` (freed after the timer).
    kept: Vec<RecordBatch>,
}

/// Reads the server's batches to the end, calling `on_batch` as each one
/// is decoded (before checksumming, which would skew batch latencies).
async fn receive(
    input: &mut tonic::Streaming<FlightData>,
    sh: &Shared,
    call: &'static str,
    mut on_batch: impl FnMut(),
) -> Result<Received> {
    let mut dec = BatchDecoder::new(Some(schema()), sh.cfg.settings.zero_copy_decode);
    let mut got = Received::default();
    while let Some(msg) = input
        .message()
        .await
        .map_err(|s| rpc_err(call, &sh.addr, s))?
    {
        if let Decoded::Batch(b) = dec.decode(&msg)? {
            on_batch();
            got.records += b.num_rows() as u64;
            got.batches += 1;
            if sh.cfg.verify {
                got.checksum = got.checksum.wrapping_add(checksum(&b)?);
            }
            if sh.cfg.keep_batches {
                got.kept.push(b);
            }
        }
    }
    Ok(got)
}

/// The result of a stream that received `got`, checked when verifying.
fn received_result(
    sh: &Shared,
    op: Op,
    stream: u32,
    got: Received,
    seconds: f64,
) -> Result<StreamResult> {
    let mut r = result(op, stream, got.records, got.batches, seconds);
    if sh.cfg.verify {
        expect_records(sh, stream, got.records)?;
        expect_checksum(sh, stream, got.checksum)?;
        r.checksum = Some(got.checksum);
    }
    Ok(r)
}

/// Batches the client sends or asks for per stream (the last may be short).
fn batches_per_stream(cfg: &BenchConfig) -> u64 {
    let (full, tail) = batch_plan(cfg.records_per_stream, cfg.records_per_batch);
    full + u64::from(tail > 0)
}

/// The messages a DoPut/DoExchange stream sends: schema with the command
/// descriptor, then the batches (shared bytes unless compressed).
fn upload(
    sh: &Shared,
    stream: u32,
) -> Result<impl futures::Stream<Item = FlightData> + Send + 'static> {
    let cmd = PutCommand {
        stream,
        verify: sh.cfg.verify,
        keep: sh.cfg.keep_batches,
    };
    let cmd = serde_json::to_vec(&cmd).map_err(|e| FlightError::Other(e.to_string()))?;
    let mut enc = BatchEncoder::new(sh.cfg.compression)?;
    let first = enc
        .schema(&schema())
        .with_descriptor(FlightDescriptor::new_cmd(cmd));
    let (full, tail) = batch_plan(sh.cfg.records_per_stream, sh.cfg.records_per_batch);
    let reuse = sh.cfg.settings.reuse_encoded_batch && sh.cfg.compression == Compression::None;
    let batch = sh.batch.clone();
    let encoded = sh.encoded.clone();
    let mut tail_batch = (tail > 0).then(|| batch.slice(0, tail as usize));
    let mut sent = 0u64;
    // An encode error ends the stream early; the server then reports a
    // short upload, which the record check below turns into an error.
    let batches = std::iter::from_fn(move || {
        if sent < full {
            sent += 1;
            if reuse {
                Some(encoded.clone())
            } else {
                enc.encode(&batch).ok()
            }
        } else {
            tail_batch.take().and_then(|b| enc.encode(&b).ok())
        }
    });
    Ok(futures::stream::iter(std::iter::once(first).chain(batches)))
}

async fn put_stream(
    c: &mut FlightServiceClient<Channel>,
    sh: &Shared,
    stream: u32,
    t0: Instant,
) -> Result<StreamResult> {
    let messages = upload(sh, stream)?;
    let mut results = c
        .do_put(messages)
        .await
        .map_err(|s| rpc_err("DoPut", &sh.addr, s))?
        .into_inner();
    let first = results
        .message()
        .await
        .map_err(|s| rpc_err("DoPut", &sh.addr, s))?
        .ok_or_else(|| FlightError::Verify("DoPut returned no PutResult".into()))?;
    // Drain to see a trailing error status.
    while results
        .message()
        .await
        .map_err(|s| rpc_err("DoPut", &sh.addr, s))?
        .is_some()
    {}
    let seconds = t0.elapsed().as_secs_f64();
    // A server that is not ours (pyarrow's) may send no summary.
    let summary: Option<PutSummary> = serde_json::from_slice(&first.app_metadata).ok();
    let (records, batches) = match &summary {
        Some(s) => (s.records, s.batches),
        None => (sh.cfg.records_per_stream, batches_per_stream(&sh.cfg)),
    };
    // A short upload (an encode failure ends the stream early) is an error
    // whenever the server says what it got.
    if summary.is_some() {
        expect_records(sh, stream, records)?;
    }
    let mut r = result(Op::Put, stream, records, batches, seconds);
    if sh.cfg.verify {
        let s = summary.ok_or_else(|| {
            FlightError::Verify("DoPut result carries no summary to verify".into())
        })?;
        expect_records(sh, stream, s.records)?;
        let sum = s
            .checksum
            .ok_or_else(|| FlightError::Verify("server returned no checksum".into()))?;
        expect_checksum(sh, stream, sum)?;
        r.checksum = Some(sum);
    }
    Ok(r)
}

async fn exchange_stream(
    c: &mut FlightServiceClient<Channel>,
    sh: &Shared,
    stream: u32,
    t0: Instant,
) -> Result<StreamResult> {
    let messages = upload(sh, stream)?;
    let mut input = c
        .do_exchange(messages)
        .await
        .map_err(|s| rpc_err("DoExchange", &sh.addr, s))?
        .into_inner();
    let got = receive(&mut input, sh, "DoExchange", || {}).await?;
    let seconds = t0.elapsed().as_secs_f64();
    received_result(sh, Op::Exchange, stream, got, seconds)
}

/// The ticket a pyarrow client would send for stream `s` (used by tests).
pub fn ticket_json(cmd: &PerfCommand, s: u32) -> Result<Vec<u8>> {
    let t: PerfTicket = cmd.ticket(s);
    serde_json::to_vec(&t).map_err(|e| FlightError::Other(e.to_string()))
}

/// The lines of one bulk run: every stream in order, then the summary.
pub fn bench_lines(r: &BenchResult) -> Vec<crate::lines::BenchLine> {
    r.per_stream
        .iter()
        .cloned()
        .map(crate::lines::BenchLine::Stream)
        .chain([crate::lines::BenchLine::Summary(bench_summary(r))])
        .collect()
}

/// `r` without its per-stream results (those are lines of their own).
pub fn bench_summary(r: &BenchResult) -> crate::lines::BenchSummary {
    r.summary.clone()
}
