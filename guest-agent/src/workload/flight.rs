//! `flight-bulk`: Arrow Flight DoGet/DoPut/DoExchange throughput. The agent
//! stays free of arrow/tonic: it runs the `testbed-flight` binary (server
//! and/or client) as child processes and turns the client's JSON lines
//! (`bench --json`: one per stream, then a summary) into samples.
//!
//! Roles: `local` starts a server child and a client on this machine;
//! `server` and `client` are the two halves of the two-VM topology, the
//! client reaching the server at `address`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{JobContext, ParamError, Summary, WorkloadError, child, defaults, latency_summary};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    #[default]
    Get,
    Put,
    Exchange,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    None,
    Lz4,
    Zstd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    #[default]
    Tcp,
    Unix,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Server child and client on this machine.
    #[default]
    Local,
    /// Serve at `address` for `serve_seconds` (the remote topology's server VM).
    Server,
    /// Run the client against the server at `address`.
    Client,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlightBulkParams {
    #[serde(default)]
    pub operation: Operation,
    #[serde(default = "defaults::one_u32")]
    pub streams: u32,
    /// Concurrent client workers; 0 = one per stream (the paper's streams = threads).
    #[serde(default)]
    pub threads: u32,
    #[serde(default = "default_records")]
    pub records_per_stream: u64,
    /// Default: 4096 for get/exchange, 2048 for put (the paper's sizes).
    #[serde(default)]
    pub records_per_batch: Option<u32>,
    #[serde(default)]
    pub compression: Compression,
    #[serde(default)]
    pub transport: Transport,
    #[serde(default)]
    pub tls: bool,
    #[serde(default)]
    pub role: Role,
    /// `server`: IP:PORT to bind; `client`: IP:PORT of the server.
    #[serde(default)]
    pub address: Option<String>,
    /// Directory with ca.pem/server.pem/server.key for TLS between VMs
    /// (local runs generate their own).
    #[serde(default)]
    pub tls_dir: Option<String>,
    /// `server` role: how long to serve before the job ends.
    #[serde(default = "default_serve_seconds")]
    pub serve_seconds: u64,
    /// Per-stream cap on batch-latency samples sent (evenly subsampled).
    #[serde(default = "default_max_latency_samples")]
    pub max_latency_samples: usize,
    /// Kill the client if it runs longer (TCG is slow).
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
}

fn default_records() -> u64 {
    200_980
}
fn default_serve_seconds() -> u64 {
    600
}
fn default_max_latency_samples() -> usize {
    100_000
}
fn default_timeout() -> u64 {
    3600
}

/// Largest batch the server accepts (rows), as testbed-flight's MAX_BATCH_ROWS.
const MAX_BATCH_ROWS: u32 = 1 << 24;

impl FlightBulkParams {
    pub fn batch(&self) -> u32 {
        self.records_per_batch.unwrap_or(match self.operation {
            Operation::Put => 2048,
            _ => 4096,
        })
    }

    pub fn validate(&self) -> Result<(), ParamError> {
        if self.streams == 0 {
            return Err(ParamError::new("streams", "must be at least 1"));
        }
        if self.threads > self.streams {
            return Err(ParamError::new("threads", "must not exceed streams"));
        }
        if self.records_per_stream == 0 {
            return Err(ParamError::new("records_per_stream", "must be at least 1"));
        }
        let b = self.batch();
        if b == 0 || b > MAX_BATCH_ROWS {
            return Err(ParamError::new(
                "records_per_batch",
                format!("{b} outside 1..={MAX_BATCH_ROWS}"),
            ));
        }
        match (self.role, &self.address) {
            (Role::Server | Role::Client, None) => {
                return Err(ParamError::new(
                    "address",
                    "required for the server and client roles (numeric IP:PORT)",
                ));
            }
            (Role::Local, Some(_)) => {
                return Err(ParamError::new(
                    "address",
                    "the local role picks its own address; drop it or use role = \"server\"/\"client\"",
                ));
            }
            _ => {}
        }
        if let Some(a) = &self.address
            && a.parse::<std::net::SocketAddr>().is_err()
        {
            return Err(ParamError::new(
                "address",
                format!("{a:?} is not a numeric IP:PORT"),
            ));
        }
        if self.role != Role::Local && self.transport == Transport::Unix {
            return Err(ParamError::new(
                "transport",
                "a Unix socket does not cross machines; use tcp for the server/client roles",
            ));
        }
        if self.role == Role::Client && self.tls && self.tls_dir.is_none() {
            return Err(ParamError::new(
                "tls_dir",
                "a TLS client needs the server's ca.pem: set tls_dir",
            ));
        }
        if self.max_latency_samples == 0 {
            return Err(ParamError::new("max_latency_samples", "must be at least 1"));
        }
        Ok(())
    }

    fn op(&self) -> &'static str {
        match self.operation {
            Operation::Get => "get",
            Operation::Put => "put",
            Operation::Exchange => "exchange",
        }
    }

    fn compression(&self) -> &'static str {
        match self.compression {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// `$TESTBED_FLIGHT_BIN`, then `testbed-flight` on PATH, then /bin.
pub fn flight_binary() -> Option<PathBuf> {
    super::registry::FLIGHT.find()
}

fn other(msg: impl Into<String>) -> WorkloadError {
    WorkloadError::Other(msg.into())
}

/// A child `testbed-flight serve`, stopped (SIGTERM, then SIGKILL) on drop.
struct ServerChild {
    child: Child,
    addr: String,
}

impl ServerChild {
    fn start(
        bin: &Path,
        addr: &str,
        tls_dir: Option<&Path>,
        timeout: Duration,
    ) -> Result<Self, WorkloadError> {
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--addr", addr]);
        if let Some(d) = tls_dir {
            cmd.arg("--tls-dir").arg(d);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| WorkloadError::io(format!("spawn {} serve", bin.display()), e))?;
        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(out);
                let mut line = String::new();
                let _ = r.read_line(&mut line);
                let _ = tx.send(line);
                let _ = std::io::copy(&mut r, &mut std::io::sink());
            });
        }
        let line = rx.recv_timeout(timeout).unwrap_or_default();
        let listening = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| v["listening"].as_str().map(str::to_string));
        let mut server = ServerChild {
            child,
            addr: String::new(),
        };
        match listening {
            Some(a) => {
                server.addr = a;
                if let Some(err) = server.child.stderr.take() {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut BufReader::new(err), &mut std::io::sink());
                    });
                }
                Ok(server)
            }
            None => {
                let _ = server.child.kill();
                let _ = server.child.wait();
                let mut err = String::new();
                if let Some(mut e) = server.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                Err(other(format!(
                    "testbed-flight serve --addr {addr} did not start within {timeout:?}: {}",
                    err.trim()
                )))
            }
        }
    }

    fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// Brings the loopback interface up if it is down: as PID 1 in a fresh
/// initramfs nothing else does, and the local role talks over 127.0.0.1.
/// A no-op (no privilege needed) where `lo` is already up, as on a host.
pub fn ensure_loopback_up() -> Result<(), WorkloadError> {
    let err = |what: &str| {
        WorkloadError::io(
            format!("{what} (bringing lo up)"),
            std::io::Error::last_os_error(),
        )
    };
    // SAFETY: socket/ioctl/close on a descriptor we own, with a zeroed
    // ifreq whose name is the NUL-terminated "lo".
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(err("socket"));
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let up = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        let result = if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) < 0 {
            Err(err("SIOCGIFFLAGS"))
        } else if req.ifr_ifru.ifru_flags & (libc::IFF_UP as libc::c_short) != 0 {
            Ok(())
        } else {
            req.ifr_ifru.ifru_flags |= up;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) < 0 {
                Err(err("SIOCSIFFLAGS"))
            } else {
                Ok(())
            }
        };
        libc::close(fd);
        result
    }
}

/// A scratch directory (socket, TLS files) removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(job_id: u64) -> Result<Self, WorkloadError> {
        let p =
            std::env::temp_dir().join(format!("testbed-flight-{}-{job_id}", std::process::id()));
        std::fs::create_dir_all(&p)
            .map_err(|e| WorkloadError::io(format!("create {}", p.display()), e))?;
        Ok(Scratch(p))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn gen_cert(bin: &Path, dir: &Path) -> Result<(), WorkloadError> {
    let out = Command::new(bin)
        .arg("gen-cert")
        .arg("--dir")
        .arg(dir)
        .output()
        .map_err(|e| WorkloadError::io(format!("spawn {} gen-cert", bin.display()), e))?;
    if !out.status.success() {
        return Err(other(format!(
            "testbed-flight gen-cert failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The client command line for `server`.
fn bench_args(p: &FlightBulkParams, server: &str, tls_ca: Option<&Path>, seed: u64) -> Vec<String> {
    let mut a: Vec<String> = [
        "bench",
        "--json",
        "--server",
        server,
        "--op",
        p.op(),
        "--compression",
        p.compression(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (k, v) in [
        ("--streams", p.streams.to_string()),
        ("--threads", p.threads.to_string()),
        ("--records-per-stream", p.records_per_stream.to_string()),
        ("--batch", p.batch().to_string()),
        // The batch values come from the seed, so runs are reproducible.
        ("--seed", (seed % 1_000_000).max(1).to_string()),
        ("--connect-timeout-secs", "30".to_string()),
    ] {
        a.push(k.into());
        a.push(v);
    }
    if let Some(ca) = tls_ca {
        a.push("--tls-ca".into());
        a.push(ca.display().to_string());
    }
    a
}

/// Runs the client and returns its JSON lines; the error carries stderr.
fn run_client(
    bin: &Path,
    args: &[String],
    timeout: Duration,
) -> Result<Vec<serde_json::Value>, WorkloadError> {
    child::run_json(bin, args, timeout, "flight client")
}

/// Every `stride`-th value, so at most `max` remain.
fn subsample(v: &[f64], max: usize) -> (Vec<f64>, usize) {
    let stride = v.len().div_ceil(max.max(1)).max(1);
    (v.iter().step_by(stride).copied().collect(), stride)
}

/// Turns the client's JSON lines into samples and the job summary.
pub fn record(
    p: &FlightBulkParams,
    lines: &[serde_json::Value],
    ctx: &JobContext,
) -> Result<Summary, WorkloadError> {
    let op = p.op();
    let summary_line = lines
        .iter()
        .find(|l| l["type"] == "summary")
        .ok_or_else(|| other("flight client printed no summary line"))?;
    let mut all_lat = Vec::new();
    let mut max_stride = 1;
    let mut streams = 0u32;
    for l in lines.iter().filter(|l| l["type"] == "stream") {
        let stream = l["stream"].as_u64().unwrap_or(0) as u32;
        let tags = BTreeMap::from([
            ("op".to_string(), op.to_string()),
            ("stream".to_string(), stream.to_string()),
        ]);
        let mbps = l["mb_per_s"]
            .as_f64()
            .ok_or_else(|| other(format!("stream line without mb_per_s: {l}")))?;
        ctx.emit_samples("flight_throughput", "MB/s", stream, &tags, &[mbps]);
        let lat: Vec<f64> = l["latencies_ns"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
            .unwrap_or_default();
        if !lat.is_empty() {
            let (sent, stride) = subsample(&lat, p.max_latency_samples);
            max_stride = max_stride.max(stride);
            ctx.emit_samples("flight_batch_latency", "ns", stream, &tags, &sent);
            all_lat.extend(lat);
        }
        streams += 1;
    }
    if streams != p.streams {
        return Err(other(format!(
            "flight client reported {streams} streams, {} expected",
            p.streams
        )));
    }
    let mut s = Summary::new();
    for k in [
        "mb_per_s",
        "wall_seconds",
        "bytes",
        "records",
        "threads",
        "settings",
        "transport",
        "tls",
    ] {
        if let Some(v) = summary_line.get(k) {
            s.insert(k.to_string(), v.clone());
        }
    }
    s.insert("operation".into(), serde_json::json!(op));
    s.insert("streams".into(), serde_json::json!(p.streams));
    s.insert("records_per_batch".into(), serde_json::json!(p.batch()));
    if !all_lat.is_empty() {
        latency_summary("flight_batch_latency", &all_lat, &mut s);
        s.insert(
            "latency_sample_stride".into(),
            serde_json::json!(max_stride),
        );
    }
    Ok(s)
}

pub fn run(p: &FlightBulkParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    let bin = flight_binary().ok_or_else(|| {
        other("testbed-flight not found ($TESTBED_FLIGHT_BIN, PATH, /bin); put it in the image")
    })?;
    run_with_binary(p, ctx, &bin)
}

pub fn run_with_binary(
    p: &FlightBulkParams,
    ctx: &JobContext,
    bin: &Path,
) -> Result<Summary, WorkloadError> {
    let bin = bin.to_path_buf();
    let timeout = Duration::from_secs(p.timeout_seconds.max(1));
    let start_timeout = Duration::from_secs(60);
    match p.role {
        Role::Local => {
            if p.transport == Transport::Tcp {
                ensure_loopback_up()?;
            }
            let scratch = Scratch::new(ctx.job_id)?;
            let addr = match p.transport {
                Transport::Tcp => "127.0.0.1:0".to_string(),
                Transport::Unix => format!("unix:{}", scratch.0.join("flight.sock").display()),
            };
            let tls_dir = scratch.0.join("tls");
            if p.tls {
                gen_cert(&bin, &tls_dir)?;
            }
            let tls = p.tls.then_some(tls_dir.as_path());
            let mut server = ServerChild::start(&bin, &addr, tls, start_timeout)?;
            let ca = tls_dir.join("ca.pem");
            let args = bench_args(p, &server.addr, p.tls.then_some(ca.as_path()), ctx.seed);
            let lines = run_client(&bin, &args, timeout);
            server.stop();
            record(p, &lines?, ctx)
        }
        Role::Client => {
            let server = p.address.clone().unwrap_or_default();
            let ca = p.tls_dir.as_ref().map(|d| Path::new(d).join("ca.pem"));
            let args = bench_args(p, &server, ca.as_deref(), ctx.seed);
            let lines = run_client(&bin, &args, timeout)?;
            record(p, &lines, ctx)
        }
        Role::Server => {
            let scratch = Scratch::new(ctx.job_id)?;
            let tls_dir = match &p.tls_dir {
                Some(d) => PathBuf::from(d),
                None => scratch.0.join("tls"),
            };
            if p.tls && !tls_dir.join("server.pem").is_file() {
                gen_cert(&bin, &tls_dir)?;
            }
            let addr = p.address.clone().unwrap_or_default();
            let t0 = Instant::now();
            let mut server = ServerChild::start(
                &bin,
                &addr,
                p.tls.then_some(tls_dir.as_path()),
                start_timeout,
            )?;
            if p.serve_seconds == 0 {
                // A service for the whole boot (the pair topology's server
                // VM): the job ends, the server keeps serving until power-off.
                let mut s = Summary::new();
                s.insert("address".into(), serde_json::json!(server.addr));
                s.insert("detached".into(), serde_json::json!(true));
                std::mem::forget(server);
                return Ok(s);
            }
            let deadline = t0 + Duration::from_secs(p.serve_seconds);
            let mut exited = None;
            while Instant::now() < deadline {
                if let Ok(Some(st)) = server.child.try_wait() {
                    exited = Some(st);
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if let Some(st) = exited {
                return Err(other(format!(
                    "flight server on {addr} exited early ({st})"
                )));
            }
            server.stop();
            let mut s = Summary::new();
            s.insert(
                "served_seconds".into(),
                serde_json::json!(t0.elapsed().as_secs_f64()),
            );
            s.insert("address".into(), serde_json::json!(server.addr));
            Ok(s)
        }
    }
}

/// `flight-query`: the query comparison (PostgreSQL via ODBC row/block
/// fetch, libpq, Flight SQL over PostgreSQL and over Parquet) for one N,
/// run by `testbed-flight query`. PostgreSQL 15 must be installed where it
/// runs, and the ODBC clients need a testbed-flight built with `--features odbc`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlightQueryParams {
    /// N of `SELECT * FROM nyc_taxi LIMIT N`.
    #[serde(default = "default_query_rows")]
    pub rows: u64,
    /// Rows loaded into the table (default: `rows`). Set it to the largest N
    /// of a sweep so every point reads the same table.
    #[serde(default)]
    pub table_rows: Option<u64>,
    #[serde(default = "default_query_clients")]
    pub clients: Vec<String>,
    /// Fetches per client within the job (one cluster, one load).
    #[serde(default = "defaults::one_u32")]
    pub repetitions: u32,
    /// Rows per Arrow batch (Flight SQL) and per ODBC block.
    #[serde(default = "default_batch_rows")]
    pub batch_rows: u32,
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
}

pub const QUERY_CLIENTS: [&str; 5] = [
    "odbc-row",
    "odbc-block",
    "libpq",
    "flight-sql",
    "flight-sql-parquet",
];

fn default_query_rows() -> u64 {
    100_000
}
fn default_query_clients() -> Vec<String> {
    QUERY_CLIENTS.iter().map(|s| s.to_string()).collect()
}
fn default_batch_rows() -> u32 {
    65_536
}

impl FlightQueryParams {
    pub fn validate(&self) -> Result<(), ParamError> {
        if self.rows == 0 {
            return Err(ParamError::new("rows", "must be at least 1"));
        }
        if self.table_rows == Some(0) {
            return Err(ParamError::new("table_rows", "must be at least 1"));
        }
        if self.clients.is_empty() {
            return Err(ParamError::new("clients", "name at least one client"));
        }
        if let Some(c) = self
            .clients
            .iter()
            .find(|c| !QUERY_CLIENTS.contains(&c.as_str()))
        {
            return Err(ParamError::new(
                "clients",
                format!("unknown client {c:?}; known: {}", QUERY_CLIENTS.join(", ")),
            ));
        }
        if self.repetitions == 0 {
            return Err(ParamError::new("repetitions", "must be at least 1"));
        }
        if self.batch_rows == 0 {
            return Err(ParamError::new("batch_rows", "must be at least 1"));
        }
        Ok(())
    }
}

pub fn run_query(p: &FlightQueryParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    let bin = flight_binary().ok_or_else(|| {
        other("testbed-flight not found ($TESTBED_FLIGHT_BIN, PATH, /bin); put it in the image")
    })?;
    run_query_with_binary(p, ctx, &bin)
}

pub fn run_query_with_binary(
    p: &FlightQueryParams,
    ctx: &JobContext,
    bin: &Path,
) -> Result<Summary, WorkloadError> {
    let scratch = Scratch::new(ctx.job_id)?;
    let args: Vec<String> = vec![
        "query".into(),
        "--json".into(),
        "--rows".into(),
        p.rows.to_string(),
        "--table-rows".into(),
        p.table_rows.unwrap_or(p.rows).to_string(),
        "--clients".into(),
        p.clients.join(","),
        "--repetitions".into(),
        p.repetitions.to_string(),
        "--batch-rows".into(),
        p.batch_rows.to_string(),
        "--seed".into(),
        (ctx.seed % 1_000_000).max(1).to_string(),
        "--run-dir".into(),
        scratch.0.display().to_string(),
    ];
    let lines = run_client(bin, &args, Duration::from_secs(p.timeout_seconds.max(1)))?;
    let mut s = Summary::new();
    for (i, client) in p.clients.iter().enumerate() {
        let mine: Vec<&serde_json::Value> = lines
            .iter()
            .filter(|l| l["client"] == client.as_str())
            .collect();
        let secs: Vec<f64> = mine.iter().filter_map(|l| l["seconds"].as_f64()).collect();
        if secs.len() != p.repetitions as usize {
            return Err(other(format!(
                "testbed-flight query reported {} timings for {client}, {} expected",
                secs.len(),
                p.repetitions
            )));
        }
        let tags = BTreeMap::from([
            ("client".to_string(), client.clone()),
            ("rows".to_string(), p.rows.to_string()),
        ]);
        ctx.emit_samples("query_seconds", "s", i as u32, &tags, &secs);
        let mut sorted = secs.clone();
        sorted.sort_by(f64::total_cmp);
        s.insert(
            format!("{client}_seconds"),
            serde_json::json!(sorted[sorted.len() / 2]),
        );
        if let Some(c) = mine.first() {
            s.insert(format!("{client}_checksum"), c["checksum"].clone());
            s.insert("rows_fetched".into(), c["rows"].clone());
        }
    }
    s.insert("rows".into(), serde_json::json!(p.rows));
    // The command exits non-zero on any mismatch, so reaching here means all agree.
    s.insert("checksums_match".into(), serde_json::json!(true));
    Ok(s)
}

impl super::WorkloadParams for FlightBulkParams {
    fn validate(
        &self,
        _devices: &BTreeMap<String, crate::protocol::DeviceRef>,
    ) -> Result<(), ParamError> {
        FlightBulkParams::validate(self)
    }
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run(self, ctx)
    }
    fn needs(&self) -> super::Needs {
        super::Needs {
            helpers: vec![super::registry::FLIGHT],
            ..Default::default()
        }
    }
    fn metrics(&self) -> Vec<super::MetricInfo> {
        use super::MetricInfo as M;
        vec![
            M::raw("flight_throughput", "MB/s", &["op", "stream"]),
            M::raw("flight_batch_latency", "ns", &["op", "stream"]),
            M::summary("mb_per_s", "MB/s", &[]),
        ]
    }
}

impl super::WorkloadParams for FlightQueryParams {
    fn validate(
        &self,
        _devices: &BTreeMap<String, crate::protocol::DeviceRef>,
    ) -> Result<(), ParamError> {
        FlightQueryParams::validate(self)
    }
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run_query(self, ctx)
    }
    fn needs(&self) -> super::Needs {
        super::Needs {
            helpers: vec![super::registry::FLIGHT],
            host_steps: vec!["postgres"],
            ..Default::default()
        }
    }
    fn metrics(&self) -> Vec<super::MetricInfo> {
        use super::MetricInfo as M;
        vec![
            M::raw("query_seconds", "s", &["client"]),
            M::summary("rows", "", &[]),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{VecSink, Workload};
    use std::sync::Arc;

    fn params(json: &str) -> FlightBulkParams {
        let mut v: serde_json::Value = if json.is_empty() {
            serde_json::json!({})
        } else {
            serde_json::from_str(json).unwrap()
        };
        v["kind"] = "flight-bulk".into();
        match serde_json::from_value(v).unwrap() {
            Workload::FlightBulk(p) => p,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn defaults_follow_the_paper_and_unknown_keys_are_refused() {
        let p = params("");
        assert_eq!(p.operation, Operation::Get);
        assert_eq!(
            (p.streams, p.records_per_stream, p.batch()),
            (1, 200_980, 4096)
        );
        assert_eq!(p.role, Role::Local);
        assert_eq!(params(r#"{"operation":"put"}"#).batch(), 2048);
        assert!(p.validate().is_ok());
        let bad = serde_json::from_value::<Workload>(
            serde_json::json!({"kind": "flight-bulk", "stream": 2}),
        );
        assert!(bad.is_err());
    }

    #[test]
    fn bad_parameters_name_their_field() {
        let field = |j: &str| params(j).validate().unwrap_err().field;
        assert_eq!(field(r#"{"streams":0}"#), "streams");
        assert_eq!(field(r#"{"records_per_batch":0}"#), "records_per_batch");
        assert_eq!(field(r#"{"role":"client"}"#), "address");
        assert_eq!(
            field(r#"{"role":"client","address":"localhost:1"}"#),
            "address"
        );
        assert_eq!(field(r#"{"address":"10.0.0.1:5"}"#), "address");
        assert_eq!(
            field(r#"{"role":"server","address":"10.0.0.1:5","transport":"unix"}"#),
            "transport"
        );
        assert_eq!(
            field(r#"{"role":"client","address":"10.0.0.1:5","tls":true}"#),
            "tls_dir"
        );
        assert!(
            params(r#"{"role":"client","address":"10.0.0.1:5"}"#)
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn loopback_is_up_afterwards() {
        ensure_loopback_up().unwrap();
        assert!(std::net::TcpListener::bind("127.0.0.1:0").is_ok());
    }

    #[test]
    fn subsampling_keeps_at_most_max() {
        let v: Vec<f64> = (0..1001).map(f64::from).collect();
        let (s, stride) = subsample(&v, 100);
        assert!(s.len() <= 100 && stride == 11, "{} {stride}", s.len());
        assert_eq!(subsample(&v[..5], 100), (v[..5].to_vec(), 1));
    }

    fn real_binary() -> PathBuf {
        crate::workload::child::built_binary(crate::workload::registry::FLIGHT.env, crate::workload::registry::FLIGHT.binary)
    }

    fn run_with_real_binary(p: FlightBulkParams) -> (Summary, Vec<crate::protocol::SampleChunk>) {
        let sink = Arc::new(VecSink::default());
        let ctx = JobContext {
            job_id: 3,
            seed: 1,
            devices: BTreeMap::new(),
            sink: sink.clone(),
        };
        let s = run_with_binary(&p, &ctx, &real_binary()).unwrap();
        let chunks = sink.0.lock().unwrap().clone();
        (s, chunks)
    }

    #[test]
    fn local_get_over_tcp_emits_throughput_and_latency_samples() {
        let p = params(r#"{"streams":2,"records_per_stream":20000,"records_per_batch":4096}"#);
        let (s, chunks) = run_with_real_binary(p);
        let thr: Vec<_> = chunks
            .iter()
            .filter(|c| c.metric == "flight_throughput")
            .collect();
        assert_eq!(thr.len(), 2);
        assert!(
            thr.iter()
                .all(|c| c.values[0] > 0.0 && c.unit == "MB/s" && c.tags["op"] == "get")
        );
        let lat: usize = chunks
            .iter()
            .filter(|c| c.metric == "flight_batch_latency")
            .map(|c| c.values.len())
            .sum();
        // 4 full batches and a tail, per stream.
        assert_eq!(lat, 10);
        assert_eq!(s["records"], serde_json::json!(40_000));
        assert!(s["mb_per_s"].as_f64().unwrap() > 0.0);
        assert!(s.contains_key("flight_batch_latency_p99_ns"));
        assert_eq!(s["settings"]["tcp_nodelay"], serde_json::json!(true));
    }

    #[test]
    fn query_params_are_checked() {
        let q = |j: serde_json::Value| -> FlightQueryParams {
            let mut j = j;
            j["kind"] = "flight-query".into();
            match serde_json::from_value(j).unwrap() {
                Workload::FlightQuery(p) => p,
                other => panic!("{other:?}"),
            }
        };
        let p = q(serde_json::json!({}));
        assert_eq!(
            (p.rows, p.clients.len(), p.batch_rows),
            (100_000, 5, 65_536)
        );
        assert!(p.validate().is_ok());
        let bad = q(serde_json::json!({"clients": ["odbc-row", "jdbc"]}));
        let e = bad.validate().unwrap_err();
        assert!(e.field == "clients" && e.reason.contains("jdbc"), "{e}");
        assert_eq!(
            q(serde_json::json!({"rows": 0}))
                .validate()
                .unwrap_err()
                .field,
            "rows"
        );
    }

    #[test]
    fn query_without_odbc_runs_postgres_and_flight_sql() {
        let p = FlightQueryParams {
            rows: 2000,
            table_rows: Some(3000),
            clients: vec![
                "libpq".into(),
                "flight-sql".into(),
                "flight-sql-parquet".into(),
            ],
            repetitions: 2,
            batch_rows: 1000,
            timeout_seconds: 300,
        };
        let sink = Arc::new(VecSink::default());
        let ctx = JobContext {
            job_id: 4,
            seed: 1,
            devices: BTreeMap::new(),
            sink: sink.clone(),
        };
        let s = run_query_with_binary(&p, &ctx, &real_binary()).unwrap();
        assert_eq!(s["rows_fetched"], serde_json::json!(2000));
        assert_eq!(s["libpq_checksum"], s["flight-sql_checksum"]);
        assert_eq!(s["libpq_checksum"], s["flight-sql-parquet_checksum"]);
        let chunks = sink.0.lock().unwrap();
        assert_eq!(chunks.len(), 3);
        assert!(
            chunks
                .iter()
                .all(|c| c.metric == "query_seconds" && c.values.len() == 2)
        );
    }

    #[test]
    fn local_put_over_unix_socket_with_tls() {
        let p = params(
            r#"{"operation":"put","transport":"unix","tls":true,"records_per_stream":10000,"compression":"lz4"}"#,
        );
        let (s, chunks) = run_with_real_binary(p);
        assert_eq!(s["records"], serde_json::json!(10_000));
        assert_eq!(s["transport"], serde_json::json!("unix"));
        assert_eq!(s["tls"], serde_json::json!(true));
        assert!(chunks.iter().all(|c| c.metric == "flight_throughput"));
    }
}
