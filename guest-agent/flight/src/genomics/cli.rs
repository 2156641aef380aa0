//! `genomics-serve` and `genomics-send`.

use std::io::Write;

use anyhow::Context;
use std::time::Duration;

use super::receiver::{BamReceiver, start_flight};
use super::sender::{SendConfig, run, unpartitioned_duplicates};
use crate::server::ServerConfig;
use crate::settings::TransportSettings;

/// The two commands' flags, or the agent's JSON requests: one type each.
pub use testbed_vocab::request::flight::{GenomicsSendRequest, GenomicsServeRequest};

/// Serves until SIGINT or SIGTERM; the first stdout line is a ServeReady
/// whose `settings` holds the BAM address (`bam_listening`).
pub fn serve(a: GenomicsServeRequest) -> anyhow::Result<()> {
    crate::runtime::runtime(None)?.block_on(async {
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
        let ready = testbed_vocab::flight::ServeReady {
            listening: flight.addr.to_string(),
            tls: false,
            settings: serde_json::json!({
                "bam_listening": bam.addr.to_string(),
                "tuned_listening": tuned.addr.to_string(),
                "transport": settings,
                "tuned_transport": tuned_cfg.settings,
            }),
        };
        crate::runtime::announce_and_wait(&ready).await?;
        drop(bam);
        flight.stop().await?;
        tuned.stop().await?;
        Ok(())
    })
}

pub fn send(a: GenomicsSendRequest) -> anyhow::Result<()> {
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
    let rt = crate::runtime::runtime(None)?;
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
