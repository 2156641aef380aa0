//! The sending node: loads the aligned SAM as ArrowSAM batches, cuts them
//! into regions (untimed: the sender's data is region-partitioned before it
//! moves), then per pipeline and repetition moves every region to the
//! receiver one after another and waits for its two replies. Both
//! pipelines open their connection inside the timer (one per region),
//! start from the same in-memory batches, and end when the receiver holds
//! the same records as ArrowSAM batches. Flight runs with gRPC's default
//! transport settings (`flight`) and with the tuned ones (`flight-tuned`),
//! the BAM socket with the kernel's (which autotunes its buffers). A run
//! fails unless every pipeline's output checksum is equal.
//!
//! Regions move one after another. By default the next region is sent
//! once the receiver has processed the last (`sequential`); with `overlap`
//! it is sent as soon as the last is received, so its transfer runs while
//! the receiver sorts and marks the last (`overlapped`), for every
//! pipeline alike. The end-to-end time of all regions is measured both
//! ways.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::{FlightClient, FlightDescriptor};
use futures::{StreamExt, TryStreamExt};
use testbed_asam::load::SamTable;
use testbed_vocab::flight::GenomicsLine;

use super::bam;
use super::partition::{Genome, partition};
use super::process::{Fnv, Processed, process};
use super::receiver::{RegionCommand, Reply};
use crate::addr::Addr;
use crate::error::{FlightError, Result};
use crate::settings::TransportSettings;

/// The pipelines (the vocabulary's: the agent names them in its requests).
pub use testbed_vocab::request::flight::Pipeline;

#[derive(Debug, Clone)]
pub struct SendConfig {
    pub sam: PathBuf,
    pub flight: String,
    /// The receiver's tuned Flight listener.
    pub flight_tuned: String,
    pub bam: String,
    pub regions: u32,
    pub repetitions: u32,
    pub pipelines: Vec<Pipeline>,
    /// BGZF workers of the BAM writer.
    pub threads: usize,
    pub timeout: Duration,
    /// Send region i+1 while the receiver processes region i.
    pub overlap: bool,
}

/// flight-bulk's tuned transport settings, without its malloc tuning:
/// that would change the allocator of every pipeline in the process.
pub fn tuned() -> TransportSettings {
    TransportSettings {
        malloc_tuning: false,
        ..TransportSettings::default()
    }
}

/// A region the receiver holds, whose processing is still to be heard.
struct Sent {
    region: u32,
    communication: f64,
    wire_bytes: u64,
    replies: Replies,
}

/// Where a region's second reply (processed) will come from.
enum Replies {
    Flight(futures::stream::BoxStream<'static, Result<Reply>>),
    Bam(BufReader<TcpStream>),
}

/// What one region's move cost.
struct Moved {
    communication: f64,
    wire_bytes: u64,
    processed: Processed,
}

impl Sent {
    /// Waits for the receiver's processing of the region.
    fn finish(self, rt: &tokio::runtime::Runtime) -> Result<Moved> {
        let reply = match self.replies {
            Replies::Flight(mut stream) => rt.block_on(async {
                stream.next().await.unwrap_or_else(|| {
                    Err(FlightError::Other(format!(
                        "region {}: the receiver closed",
                        self.region
                    )))
                })
            })?,
            Replies::Bam(mut reader) => bam_reply(&mut reader)?,
        };
        Ok(Moved {
            communication: self.communication,
            wire_bytes: self.wire_bytes,
            processed: expect_processed(reply, self.region)?,
        })
    }
}

/// Every pipeline × repetition, each a [`GenomicsLine`]; fails if their
/// outputs differ.
pub fn run(
    cfg: &SendConfig,
    table: &SamTable,
    rt: &tokio::runtime::Runtime,
) -> Result<Vec<GenomicsLine>> {
    if cfg.pipelines.is_empty() || cfg.repetitions == 0 {
        return Err(FlightError::Param(
            "name a pipeline and at least one repetition".into(),
        ));
    }
    let genome = Genome::from_header(&table.header_text)?;
    let parts = partition(&table.batches, &genome, cfg.regions)?;
    // CPU is charged per byte of the records as SAM text: the same
    // denominator for every pipeline, whatever each puts on the wire.
    let payload_bytes = std::fs::metadata(&cfg.sam)
        .map_err(|e| FlightError::Other(format!("{}: {e}", cfg.sam.display())))?
        .len();
    let mut lines = Vec::new();
    for rep in 0..cfg.repetitions {
        // Alternate the order so neither pipeline always runs first.
        let mut order = cfg.pipelines.clone();
        if rep % 2 == 1 {
            order.reverse();
        }
        for p in order {
            let mut line = GenomicsLine {
                pipeline: p.name().into(),
                regions: cfg.regions,
                repetition: rep,
                schedule: schedule(cfg.overlap).into(),
                communication_seconds: 0.0,
                processing_seconds: 0.0,
                total_seconds: 0.0,
                sender_cpu_s: None,
                receiver_cpu_s: None,
                payload_bytes,
                wire_bytes: 0,
                records: 0,
                duplicates: 0,
                unpartitioned_duplicates: 0,
                checksum: String::new(),
            };
            let mut sum = Fnv::default();
            let mut add = |moved: Moved| {
                line.communication_seconds += moved.communication;
                line.processing_seconds += moved.processed.seconds;
                line.wire_bytes += moved.wire_bytes;
                line.records += moved.processed.records;
                line.duplicates += moved.processed.duplicates;
                sum.write(&moved.processed.checksum.to_le_bytes());
            };
            // Both sides' CPU over the whole move, read outside its timer.
            let cpu0 = (crate::cpu::process_cpu_s(), rt.block_on(receiver_cpu(cfg)));
            let t0 = Instant::now();
            // Overlapped: the region whose processing is heard after the
            // next region is sent.
            let mut pending: Option<Sent> = None;
            for (r, batches) in parts.iter().enumerate() {
                if batches.is_empty() {
                    continue;
                }
                let sent = match p {
                    Pipeline::Flight => rt.block_on(flight_region(
                        cfg,
                        &cfg.flight,
                        TransportSettings::library_defaults(),
                        r as u32,
                        &table.header_text,
                        batches.clone(),
                    ))?,
                    Pipeline::FlightTuned => rt.block_on(flight_region(
                        cfg,
                        &cfg.flight_tuned,
                        tuned(),
                        r as u32,
                        &table.header_text,
                        batches.clone(),
                    ))?,
                    Pipeline::Bam => bam_region(
                        cfg,
                        r as u32,
                        &table.header_text,
                        &table.reference_names,
                        batches,
                    )?,
                };
                if let Some(last) = pending.take() {
                    add(last.finish(rt)?);
                }
                if cfg.overlap {
                    pending = Some(sent);
                } else {
                    add(sent.finish(rt)?);
                }
            }
            if let Some(last) = pending.take() {
                add(last.finish(rt)?);
            }
            line.total_seconds = t0.elapsed().as_secs_f64();
            let cpu1 = (crate::cpu::process_cpu_s(), rt.block_on(receiver_cpu(cfg)));
            line.sender_cpu_s = cpu1.0.zip(cpu0.0).map(|(b, a)| b - a);
            line.receiver_cpu_s = match (cpu1.1, cpu0.1) {
                (Ok(b), Ok(a)) => Some(b - a),
                _ => None,
            };
            line.checksum = format!("{:016x}", sum.0);
            lines.push(line);
        }
    }
    let first = &lines[0];
    if let Some(other) = lines
        .iter()
        .find(|l| l.checksum != first.checksum || l.records != first.records)
    {
        return Err(FlightError::Verify(format!(
            "{} repetition {} produced {} records (checksum {}), {} repetition {} {} ({})",
            first.pipeline,
            first.repetition,
            first.records,
            first.checksum,
            other.pipeline,
            other.repetition,
            other.records,
            other.checksum
        )));
    }
    if first.records != table.records() as u64 {
        return Err(FlightError::Verify(format!(
            "the receiver holds {} records, the SAM file has {}",
            first.records,
            table.records()
        )));
    }
    Ok(lines)
}

/// The receiver process's CPU seconds so far (its `cpu` action on the
/// default Flight listener; the BAM listener is the same process).
async fn receiver_cpu(cfg: &SendConfig) -> Result<f64> {
    crate::cpu::ask(&cfg.flight.parse()?, None, cfg.timeout).await
}

/// The name of a schedule, as lines and tags carry it.
pub fn schedule(overlap: bool) -> &'static str {
    if overlap { "overlapped" } else { "sequential" }
}

/// Duplicates marked over the whole data set at once (not per region): what
/// region boundaries cost the per-region marking, for the summary.
pub fn unpartitioned_duplicates(cfg: &SendConfig, table: &SamTable) -> Result<u64> {
    let p = process(
        &table.batches,
        &table.header_text,
        &table.reference_names,
        cfg.threads,
    )?;
    Ok(p.duplicates)
}

async fn flight_region(
    cfg: &SendConfig,
    addr: &str,
    settings: TransportSettings,
    region: u32,
    header_text: &str,
    batches: Vec<RecordBatch>,
) -> Result<Sent> {
    let addr: Addr = addr.parse()?;
    let cmd = RegionCommand {
        region,
        header_text: header_text.to_string(),
    };
    let cmd = serde_json::to_vec(&cmd).map_err(|e| FlightError::Other(e.to_string()))?;
    let sent = Arc::new(AtomicU64::new(0));
    let counted = sent.clone();
    let t0 = Instant::now();
    let channel = crate::transport::connect(&addr, None, &settings, cfg.timeout).await?;
    let mut client = FlightClient::new(channel);
    let data = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(FlightDescriptor::new_cmd(cmd)))
        .build(futures::stream::iter(batches.into_iter().map(Ok)))
        .inspect_ok(move |d| {
            let n = d.data_header.len() + d.data_body.len() + d.app_metadata.len();
            counted.fetch_add(n as u64, Ordering::Relaxed);
        });
    let to = format!("DoPut of region {region} to {addr}");
    let flight_err =
        move |e: arrow_flight::error::FlightError| FlightError::Other(format!("{to}: {e}"));
    let mut replies = client
        .do_put(data)
        .await
        .map_err(flight_err.clone())?
        .map(move |r| {
            let r = r.map_err(&flight_err)?;
            serde_json::from_slice::<Reply>(&r.app_metadata)
                .map_err(|e| FlightError::Other(format!("region {region}: reply: {e}")))
        })
        .boxed();
    let first = replies.next().await.unwrap_or_else(|| {
        Err(FlightError::Other(format!(
            "region {region}: the receiver closed"
        )))
    })?;
    expect_received(first, region)?;
    Ok(Sent {
        region,
        communication: t0.elapsed().as_secs_f64(),
        wire_bytes: sent.load(Ordering::Relaxed),
        replies: Replies::Flight(replies),
    })
}

fn bam_region(
    cfg: &SendConfig,
    region: u32,
    header_text: &str,
    reference_names: &[String],
    batches: &[RecordBatch],
) -> Result<Sent> {
    let addr: SocketAddr = cfg
        .bam
        .parse()
        .map_err(|e| FlightError::Param(format!("BAM receiver address {:?}: {e}", cfg.bam)))?;
    let io = |what: &str, e: std::io::Error| FlightError::Connect {
        addr: addr.to_string(),
        reason: format!("{what}: {e}"),
    };
    let t0 = Instant::now();
    let conn = TcpStream::connect_timeout(&addr, cfg.timeout).map_err(|e| io("connect", e))?;
    let write_half = conn.try_clone().map_err(|e| io("clone", e))?;
    let sent = Arc::new(AtomicU64::new(0));
    let out = Counting {
        inner: BufWriter::with_capacity(1 << 20, write_half),
        sent: sent.clone(),
    };
    let mut out = bam::send(out, header_text, reference_names, batches, cfg.threads)?;
    out.flush().map_err(|e| io("send", e))?;
    conn.shutdown(Shutdown::Write)
        .map_err(|e| io("shutdown", e))?;
    let mut replies = BufReader::new(conn);
    expect_received(bam_reply(&mut replies)?, region)?;
    Ok(Sent {
        region,
        communication: t0.elapsed().as_secs_f64(),
        wire_bytes: sent.load(Ordering::Relaxed),
        replies: Replies::Bam(replies),
    })
}

/// The BAM receiver's next reply line.
fn bam_reply(replies: &mut BufReader<TcpStream>) -> Result<Reply> {
    let mut line = String::new();
    replies
        .read_line(&mut line)
        .map_err(|e| FlightError::Other(format!("BAM receiver reply: {e}")))?;
    serde_json::from_str(&line)
        .map_err(|e| FlightError::Other(format!("BAM receiver reply {line:?}: {e}")))
}

fn expect_received(r: Reply, region: u32) -> Result<()> {
    match r {
        Reply::Received { .. } => Ok(()),
        other => Err(unexpected(other, region, "received")),
    }
}

fn expect_processed(r: Reply, region: u32) -> Result<Processed> {
    match r {
        Reply::Processed(p) => Ok(p),
        other => Err(unexpected(other, region, "processed")),
    }
}

fn unexpected(r: Reply, region: u32, wanted: &str) -> FlightError {
    match r {
        Reply::Error { message } => {
            FlightError::Other(format!("receiver, region {region}: {message}"))
        }
        other => FlightError::Other(format!("region {region}: expected {wanted}, got {other:?}")),
    }
}

/// A writer that counts what passes through it.
struct Counting<W> {
    inner: W,
    sent: Arc<AtomicU64>,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sent.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
