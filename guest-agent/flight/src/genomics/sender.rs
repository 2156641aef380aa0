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
use testbed_lines::flight::GenomicsLine;

use super::bam;
use super::partition::{Genome, partition};
use super::process::{Fnv, Processed, process};
use super::receiver::{RegionCommand, Reply};
use crate::addr::Addr;
use crate::error::{FlightError, Result};
use crate::settings::TransportSettings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pipeline {
    /// DoPut with gRPC's default transport settings on both sides.
    Flight,
    /// DoPut with the tuned profile of flight-bulk (32 MiB HTTP/2
    /// windows, large frames) on both sides.
    FlightTuned,
    /// BAM over a plain TCP connection (the kernel's socket defaults).
    Bam,
}

impl Pipeline {
    pub fn as_str(self) -> &'static str {
        match self {
            Pipeline::Flight => "flight",
            Pipeline::FlightTuned => "flight-tuned",
            Pipeline::Bam => "bam",
        }
    }
}

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
}

/// flight-bulk's tuned transport settings, without its malloc tuning:
/// that would change the allocator of every pipeline in the process.
pub fn tuned() -> TransportSettings {
    TransportSettings {
        malloc_tuning: false,
        ..TransportSettings::default()
    }
}

/// What one region's move cost.
struct Moved {
    communication: f64,
    wire_bytes: u64,
    processed: Processed,
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
    let mut lines = Vec::new();
    for rep in 0..cfg.repetitions {
        // Alternate the order so neither pipeline always runs first.
        let mut order = cfg.pipelines.clone();
        if rep % 2 == 1 {
            order.reverse();
        }
        for p in order {
            let mut line = GenomicsLine {
                pipeline: p.as_str().into(),
                regions: cfg.regions,
                repetition: rep,
                communication_seconds: 0.0,
                processing_seconds: 0.0,
                wire_bytes: 0,
                records: 0,
                duplicates: 0,
                unpartitioned_duplicates: 0,
                checksum: String::new(),
            };
            let mut sum = Fnv::default();
            for (r, batches) in parts.iter().enumerate() {
                if batches.is_empty() {
                    continue;
                }
                let moved = match p {
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
                line.communication_seconds += moved.communication;
                line.processing_seconds += moved.processed.seconds;
                line.wire_bytes += moved.wire_bytes;
                line.records += moved.processed.records;
                line.duplicates += moved.processed.duplicates;
                sum.write(&moved.processed.checksum.to_le_bytes());
            }
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
) -> Result<Moved> {
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
    let flight_err = |e: arrow_flight::error::FlightError| {
        FlightError::Other(format!("DoPut of region {region} to {addr}: {e}"))
    };
    let mut replies = client.do_put(data).await.map_err(flight_err)?;
    let mut next = async || -> Result<Reply> {
        let r = replies
            .next()
            .await
            .ok_or_else(|| FlightError::Other(format!("region {region}: the receiver closed")))?
            .map_err(flight_err)?;
        serde_json::from_slice(&r.app_metadata)
            .map_err(|e| FlightError::Other(format!("region {region}: reply: {e}")))
    };
    expect_received(next().await?, region)?;
    let communication = t0.elapsed().as_secs_f64();
    let processed = expect_processed(next().await?, region)?;
    Ok(Moved {
        communication,
        wire_bytes: sent.load(Ordering::Relaxed),
        processed,
    })
}

fn bam_region(
    cfg: &SendConfig,
    region: u32,
    header_text: &str,
    reference_names: &[String],
    batches: &[RecordBatch],
) -> Result<Moved> {
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
    let mut next = || -> Result<Reply> {
        let mut line = String::new();
        replies.read_line(&mut line).map_err(|e| io("reply", e))?;
        serde_json::from_str(&line)
            .map_err(|e| FlightError::Other(format!("BAM receiver reply {line:?}: {e}")))
    };
    expect_received(next()?, region)?;
    let communication = t0.elapsed().as_secs_f64();
    let processed = expect_processed(next()?, region)?;
    Ok(Moved {
        communication,
        wire_bytes: sent.load(Ordering::Relaxed),
        processed,
    })
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
