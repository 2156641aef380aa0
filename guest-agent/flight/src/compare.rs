//! Our Flight beside pyarrow's C++ Flight on loopback, in one run: the same
//! payload through four pairings (ours->ours, pyarrow->pyarrow, and the two
//! crossings, which tell whether a gap is on the client or the server side),
//! median of N repetitions, and the ratio ours / pyarrow.

use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::bench::BenchConfig;
use crate::data::ROW_BYTES;
use crate::pyarrow::{self, Scripts};
use crate::server::ServerConfig;
use crate::settings::{Op, TransportSettings};

#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    #[arg(long, value_enum, value_delimiter = ',', default_value = "get,put")]
    pub ops: Vec<Op>,
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub streams: Vec<u32>,
    /// Records per batch.
    #[arg(long, value_delimiter = ',', default_value = "4096,65536")]
    pub batches: Vec<u32>,
    /// Payload per stream in MB (2^20 bytes).
    #[arg(long, default_value_t = 256)]
    pub mb_per_stream: u64,
    #[arg(long, default_value_t = 3)]
    pub repetitions: u32,
    /// Skip the crossed pairings (ours->pyarrow, pyarrow->ours).
    #[arg(long)]
    pub no_cross: bool,
    /// Python with pyarrow (default: $TESTBED_PYTHON or python3).
    #[arg(long)]
    pub python: Option<String>,
    /// Also write the rows as JSON here.
    #[arg(long)]
    pub json_out: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub settings: TransportSettings,
}

/// Median MB/s of one pairing at one point.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub op: Op,
    pub streams: u32,
    pub records_per_batch: u32,
    pub records_per_stream: u64,
    pub ours: f64,
    pub pyarrow: f64,
    pub ratio: f64,
    pub ours_client_pyarrow_server: Option<f64>,
    pub pyarrow_client_ours_server: Option<f64>,
    pub samples_ours: Vec<f64>,
    pub samples_pyarrow: Vec<f64>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

pub fn run(a: &CompareArgs) -> anyhow::Result<()> {
    let python = a.python.clone().unwrap_or_else(pyarrow::python);
    let version = pyarrow::check(&python)?;
    crate::settings::tune_malloc(&a.settings);
    let scripts = Scripts::write()?;
    let records = a.mb_per_stream * (1 << 20) / ROW_BYTES;

    // Our server gets its own runtime (its own worker threads), as the
    // pyarrow server is its own process.
    let server_rt = crate::cli::runtime(None)?;
    let ours = server_rt.block_on(crate::server::start(&ServerConfig {
        addr: "127.0.0.1:0".parse()?,
        settings: a.settings.clone(),
        tls_dir: None,
    }))?;
    let ours_addr = ours.addr.to_string();
    let py_server = pyarrow::start_server(&python, &scripts, "127.0.0.1:0", None)?;
    let client_rt = crate::cli::runtime(None)?;

    let ours_client = |server: &str, op: Op, streams: u32, batch: u32| -> anyhow::Result<f64> {
        let cfg = BenchConfig {
            server: server.to_string(),
            op,
            streams,
            records_per_stream: records,
            records_per_batch: batch,
            settings: a.settings.clone(),
            ..BenchConfig::default()
        };
        let r = client_rt
            .block_on(crate::bench::run(&cfg))
            .with_context(|| format!("our {} client against {server}", op.as_str()))?;
        Ok(r.mb_per_s)
    };
    let py_client = |server: &str, op: Op, streams: u32, batch: u32| -> anyhow::Result<f64> {
        let mut cmd = Command::new(&python);
        cmd.arg(scripts.client())
            .arg(op.as_str())
            .args(["--server", server])
            .args(["--streams", &streams.to_string()])
            .args(["--records-per-stream", &records.to_string()])
            .args(["--batch", &batch.to_string()]);
        let lines = pyarrow::run_json_lines(cmd, Duration::from_secs(600))?;
        lines
            .iter()
            .find(|l| l["type"] == "summary")
            .and_then(|l| l["mb_per_s"].as_f64())
            .context("pyarrow client printed no summary")
    };

    let mut rows = Vec::new();
    eprintln!(
        "payload {} MB per stream ({records} records), {} repetitions, pyarrow {version}",
        a.mb_per_stream, a.repetitions
    );
    for &op in &a.ops {
        if op == Op::Exchange {
            anyhow::bail!("compare-pyarrow covers get and put");
        }
        for &streams in &a.streams {
            for &batch in &a.batches {
                let (mut o, mut p, mut op_, mut po) = (vec![], vec![], vec![], vec![]);
                for _ in 0..a.repetitions.max(1) {
                    o.push(ours_client(&ours_addr, op, streams, batch)?);
                    p.push(py_client(&py_server.addr, op, streams, batch)?);
                    if !a.no_cross {
                        op_.push(ours_client(&py_server.addr, op, streams, batch)?);
                        po.push(py_client(&ours_addr, op, streams, batch)?);
                    }
                }
                let row = Row {
                    op,
                    streams,
                    records_per_batch: batch,
                    records_per_stream: records,
                    ours: median(&o),
                    pyarrow: median(&p),
                    ratio: median(&o) / median(&p),
                    ours_client_pyarrow_server: (!a.no_cross).then(|| median(&op_)),
                    pyarrow_client_ours_server: (!a.no_cross).then(|| median(&po)),
                    samples_ours: o,
                    samples_pyarrow: p,
                };
                eprintln!(
                    "  {} streams={} batch={}: ours {:.0} MB/s, pyarrow {:.0} MB/s",
                    op.as_str(),
                    streams,
                    batch,
                    row.ours,
                    row.pyarrow
                );
                rows.push(row);
            }
        }
    }
    drop(py_server);
    server_rt.block_on(ours.stop())?;
    print_table(&rows);
    if let Some(p) = &a.json_out {
        let doc = serde_json::json!({
            "pyarrow": version,
            "mb_per_stream": a.mb_per_stream,
            "repetitions": a.repetitions,
            "settings": a.settings,
            "rows": rows,
        });
        std::fs::write(p, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("write {}", p.display()))?;
    }
    Ok(())
}

fn print_table(rows: &[Row]) {
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.0}"));
    println!(
        "| op  | streams | batch | ours MB/s | pyarrow MB/s | ratio | ours->py MB/s | py->ours MB/s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} | {} | {} |",
            r.op.as_str(),
            r.streams,
            r.records_per_batch,
            r.ours,
            r.pyarrow,
            r.ratio,
            opt(r.ours_client_pyarrow_server),
            opt(r.pyarrow_client_ours_server)
        );
    }
    let logs: Vec<f64> = rows.iter().map(|r| r.ratio.ln()).collect();
    if !logs.is_empty() {
        let gm = (logs.iter().sum::<f64>() / logs.len() as f64).exp();
        let min = rows.iter().map(|r| r.ratio).fold(f64::INFINITY, f64::min);
        println!("ratio ours/pyarrow: geometric mean {gm:.2}, min {min:.2} (goal >= 1.0)");
    }
}
