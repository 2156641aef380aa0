//! `genomics-serve` and `genomics-send`.

use std::io::Write;

use anyhow::Context;
use std::path::PathBuf;
use std::time::Duration;

use super::receiver::{BamReceiver, start_flight};
use super::sender::{Pipeline, SendConfig, run, unpartitioned_duplicates};
use crate::server::ServerConfig;
use crate::settings::TransportSettings;

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Flight (DoPut) listening address, IP:PORT (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: String,
    /// Flight listening address with the tuned transport settings.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub tuned_addr: String,
    /// BAM listening address, IP:PORT.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub bam_addr: String,
    /// Sort and duplicate-marking workers per region.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

#[derive(Debug, Clone, clap::Args)]
pub struct SendArgs {
    /// The aligned SAM (testbed-asam prepare's `sam`).
    #[arg(long)]
    pub sam: PathBuf,
    /// The receiver's Flight address.
    #[arg(long)]
    pub server: String,
    /// The receiver's tuned Flight address (for `flight-tuned`).
    #[arg(long, default_value = "")]
    pub tuned_server: String,
    /// The receiver's BAM address.
    #[arg(long)]
    pub bam_server: String,
    #[arg(long, default_value_t = 4)]
    pub regions: u32,
    #[arg(long, default_value_t = 1)]
    pub repetitions: u32,
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "flight,flight-tuned,bam"
    )]
    pub pipelines: Vec<Pipeline>,
    /// BGZF compression workers of the BAM sender.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    #[arg(long, default_value_t = 10.0)]
    pub connect_timeout_secs: f64,
    /// Send each region while the receiver processes the one before.
    #[arg(long)]
    pub overlap: bool,
    /// One JSON line per pipeline × repetition.
    #[arg(long)]
    pub json: bool,
}

/// Serves until SIGINT or SIGTERM; the first stdout line is a ServeReady
/// whose `settings` holds the BAM address (`bam_listening`).
pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    crate::cli::runtime(None)?.block_on(async {
        let settings = TransportSettings::library_defaults();
        let cfg = ServerConfig {
            addr: a.addr.parse()?,
            settings: settings.clone(),
            tls_dir: None,
        };
        let flight = start_flight(&cfg, a.threads.max(1)).await?;
        let tuned_cfg = ServerConfig {
            addr: a.tuned_addr.parse()?,
            settings: super::sender::tuned(),
            tls_dir: None,
        };
        let tuned = start_flight(&tuned_cfg, a.threads.max(1)).await?;
        let bam = BamReceiver::start(&a.bam_addr, a.threads.max(1))?;
        let ready = testbed_lines::flight::ServeReady {
            listening: flight.addr.to_string(),
            tls: false,
            settings: serde_json::json!({
                "bam_listening": bam.addr.to_string(),
                "tuned_listening": tuned.addr.to_string(),
                "transport": settings,
                "tuned_transport": tuned_cfg.settings,
            }),
        };
        crate::cli::announce_and_wait(&ready).await?;
        drop(bam);
        flight.stop().await?;
        tuned.stop().await?;
        Ok(())
    })
}

pub fn send(a: SendArgs) -> anyhow::Result<()> {
    let cfg = SendConfig {
        sam: a.sam,
        flight: a.server,
        flight_tuned: a.tuned_server,
        bam: a.bam_server,
        regions: a.regions,
        repetitions: a.repetitions,
        pipelines: a.pipelines,
        threads: a.threads.max(1),
        timeout: Duration::from_secs_f64(a.connect_timeout_secs.max(0.001)),
        overlap: a.overlap,
    };
    let rt = crate::cli::runtime(None)?;
    let table = testbed_asam::load::load_sam(&cfg.sam)
        .with_context(|| format!("loading {}", cfg.sam.display()))?;
    let mut lines = run(&cfg, &table, &rt)?;
    let whole = unpartitioned_duplicates(&cfg, &table)?;
    for l in &mut lines {
        l.unpartitioned_duplicates = whole;
    }
    let mut out = std::io::stdout().lock();
    for l in &lines {
        if a.json {
            writeln!(out, "{}", serde_json::to_string(l)?)?;
        } else {
            writeln!(
                out,
                "{:6} regions {:3} rep {} ({}): communication {:.3} s, processing {:.3} s, end to end {:.3} s, {} bytes, {} records, {} duplicates",
                l.pipeline,
                l.regions,
                l.repetition,
                l.schedule,
                l.communication_seconds,
                l.processing_seconds,
                l.total_seconds,
                l.wire_bytes,
                l.records,
                l.duplicates
            )?;
        }
    }
    if !a.json {
        writeln!(
            out,
            "duplicates marked over the whole data set at once: {whole}"
        )?;
    }
    Ok(())
}
