//! `flight-bulk`: Arrow Flight DoGet/DoPut/DoExchange throughput. Runs
//! `testbed-flight bench --json` (and a `serve` child) and turns the
//! client's lines (one per stream, then a summary) into samples.
//!
//! Roles: `local` starts a server child and a client on this machine;
//! `server` and `client` are the two halves of the two-VM topology, the
//! client reaching the server at `address`.
//!
//! Implementations: `client` and `server` are each `ours` or `pyarrow`
//! (Arrow C++ under Python, `testbed-flight py-bench`/`py-serve`), so the
//! four pairings run on the same payload with the same timer boundaries
//! (GetFlightInfo outside, each stream's connect inside) and the same
//! retention (`keep_batches`, both sides); `profile` picks the transport
//! settings (`tuned`, or each library's `defaults`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use testbed_vocab::flight::{BenchLine, BenchSummary, StreamResult};
use testbed_vocab::request::flight::{
    BenchRequest, FlightRequest, PyServeRequest, ServeRequest, ServerCpuRequest,
};

use super::process::{ServerChild, ensure_loopback_up, gen_cert};
use super::{Scratch, default_timeout, other, require_binary, run_client};
use crate::workload::{
    JobContext, ParamError, Summary, WorkloadError, defaults, latency_summary, registry,
};

/// The operation, compression and transport profile: the vocabulary's, the
/// names testbed-flight's requests take.
pub use testbed_vocab::request::flight::{Compression, Op, Profile};

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

/// Whose Flight runs one side of a pairing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Implementation {
    /// testbed-flight (arrow-rs, tonic).
    #[default]
    Ours,
    /// pyarrow's Flight (Arrow C++, gRPC C++).
    Pyarrow,
}

impl Implementation {
    fn as_str(self) -> &'static str {
        match self {
            Implementation::Ours => "ours",
            Implementation::Pyarrow => "pyarrow",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlightBulkParams {
    #[serde(default)]
    pub operation: Op,
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
    /// The client's implementation.
    #[serde(default)]
    pub client: Implementation,
    /// The server's implementation (the local role starts it).
    #[serde(default)]
    pub server: Implementation,
    #[serde(default)]
    pub profile: Profile,
    /// Keep every received batch until its stream ends (pyarrow's
    /// `read_all`), on the client and, for DoPut, on the server; by
    /// default both drop each batch once counted.
    #[serde(default)]
    pub keep_batches: bool,
    /// Pair topology: the server runs iperf3 beside Flight, and the
    /// client measures the link both ways before each point (same boot)
    /// and reports its rate as a share of it (`link_share`). Needs iperf3
    /// in the guest (`[image] include = ["iperf3"]`).
    #[serde(default)]
    pub measure_link: bool,
    /// Seconds of each iperf3 direction.
    #[serde(default = "default_link_seconds")]
    pub link_seconds: u32,
    /// Local role: the host CPUs of the client and of the server ("1",
    /// "0,2-3"), both or neither, never one CPU in both; default unpinned.
    /// The summary's `pinning` says where they ran.
    #[serde(default)]
    pub client_cpus: Option<String>,
    #[serde(default)]
    pub server_cpus: Option<String>,
}

fn default_link_seconds() -> u32 {
    2
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

/// Largest batch the server accepts (rows), as testbed-flight's MAX_BATCH_ROWS.
const MAX_BATCH_ROWS: u32 = 1 << 24;

impl FlightBulkParams {
    pub fn batch(&self) -> u32 {
        self.records_per_batch.unwrap_or(match self.operation {
            Op::Put => 2048,
            _ => 4096,
        })
    }

    pub fn validate(&self) -> Result<(), ParamError> {
        let pinned = super::pinning::parse(self.client_cpus.as_deref(), self.server_cpus.as_deref())?;
        if pinned.is_some() && self.role != Role::Local {
            return Err(ParamError::new(
                "client_cpus",
                "only the local role runs client and server here to pin",
            ));
        }
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
        if self.measure_link && self.role == Role::Local {
            return Err(ParamError::new(
                "measure_link",
                "measures the link between the pair's VMs: the server and client roles only",
            ));
        }
        if !(1..=600).contains(&self.link_seconds) {
            return Err(ParamError::new("link_seconds", "must be 1..=600"));
        }
        for (field, side) in [("client", self.client), ("server", self.server)] {
            if side != Implementation::Pyarrow {
                continue;
            }
            if self.operation == Op::Exchange {
                return Err(ParamError::new(
                    field,
                    "pyarrow pairings run get and put (its benchmark side has no exchange)",
                ));
            }
            if self.role != Role::Local {
                return Err(ParamError::new(
                    field,
                    "pyarrow pairings run in the local role (pyarrow is on the host, not in the guest)",
                ));
            }
        }
        Ok(())
    }

    /// "ours→pyarrow": client, then server.
    pub fn pairing(&self) -> String {
        format!("{}→{}", self.client.as_str(), self.server.as_str())
    }
}

/// The client's request for `server`: `bench --json`, or pyarrow's client
/// (`py-bench`, which prints the same lines).
fn bench_request(
    p: &FlightBulkParams,
    server: &str,
    tls_ca: Option<&Path>,
    seed: u64,
) -> FlightRequest {
    let mut r = BenchRequest::new(server);
    r.op = p.operation;
    r.compression = p.compression;
    r.profile = p.profile;
    r.keep_batches = p.keep_batches;
    r.streams = p.streams;
    r.records_per_stream = p.records_per_stream;
    r.records_per_batch = p.batch();
    // The batch values come from the seed, so runs are reproducible.
    r.seed = (seed % 1_000_000).max(1);
    r.tls_ca = tls_ca.map(Path::to_path_buf);
    match p.client {
        Implementation::Ours => {
            r.json = true;
            r.threads = p.threads;
            r.connect_timeout_secs = 30.0;
            FlightRequest::Bench(Box::new(r))
        }
        // pyarrow runs a thread per stream and has its own connect timeout.
        Implementation::Pyarrow => FlightRequest::PyBench(Box::new(r)),
    }
}

/// Every `stride`-th value, so at most `max` remain.
fn subsample(v: &[f64], max: usize) -> (Vec<f64>, usize) {
    let stride = v.len().div_ceil(max.max(1)).max(1);
    (v.iter().step_by(stride).copied().collect(), stride)
}

/// Turns the client's lines into samples and the job summary.
pub fn record(
    p: &FlightBulkParams,
    lines: &[BenchLine],
    ctx: &JobContext,
) -> Result<Summary, WorkloadError> {
    let op = p.operation.name();
    let summary: &BenchSummary = lines
        .iter()
        .find_map(|l| match l {
            BenchLine::Summary(s) => Some(s),
            BenchLine::Stream(_) => None,
        })
        .ok_or_else(|| other("flight client printed no summary line"))?;
    let stream_lines = lines.iter().filter_map(|l| match l {
        BenchLine::Stream(s) => Some(s),
        BenchLine::Summary(_) => None,
    });
    let mut all_lat = Vec::new();
    let mut max_stride = 1;
    let mut streams = 0u32;
    for l in stream_lines {
        let StreamResult {
            stream,
            mb_per_s,
            latencies_ns,
            records,
            ..
        } = l;
        // Checked on every run, whichever side is whose: a short stream's
        // speed does not count.
        if *records != p.records_per_stream {
            return Err(other(format!(
                "stream {stream} ({}) moved {records} records, {} expected",
                p.pairing(),
                p.records_per_stream
            )));
        }
        let tags = BTreeMap::from([
            ("op".to_string(), op.to_string()),
            ("stream".to_string(), stream.to_string()),
        ]);
        ctx.emit_samples("flight_throughput", "MB/s", *stream, &tags, &[*mb_per_s]);
        let lat: Vec<f64> = latencies_ns.iter().map(|&ns| ns as f64).collect();
        if !lat.is_empty() {
            let (sent, stride) = subsample(&lat, p.max_latency_samples);
            max_stride = max_stride.max(stride);
            ctx.emit_samples("flight_batch_latency", "ns", *stream, &tags, &sent);
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
    s.insert("mb_per_s".into(), serde_json::json!(summary.mb_per_s));
    s.insert(
        "wall_seconds".into(),
        serde_json::json!(summary.wall_seconds),
    );
    s.insert("bytes".into(), serde_json::json!(summary.bytes));
    s.insert("records".into(), serde_json::json!(summary.records));
    s.insert("threads".into(), serde_json::json!(summary.threads));
    s.insert("settings".into(), summary.settings.clone());
    s.insert("transport".into(), serde_json::json!(summary.transport));
    s.insert("tls".into(), serde_json::json!(summary.tls));
    s.insert("operation".into(), serde_json::json!(op));
    s.insert("streams".into(), serde_json::json!(p.streams));
    s.insert("records_per_batch".into(), serde_json::json!(p.batch()));
    s.insert("pairing".into(), serde_json::json!(p.pairing()));
    s.insert("keep_batches".into(), serde_json::json!(p.keep_batches));
    let client_cpu = summary
        .cpu_user_s
        .zip(summary.cpu_system_s)
        .map(|(u, y)| u + y);
    put_cpu_per_gb(&mut s, "client", client_cpu);
    if !all_lat.is_empty() {
        latency_summary("flight_batch_latency", &all_lat, &mut s);
        s.insert(
            "latency_sample_stride".into(),
            serde_json::json!(max_stride),
        );
    }
    Ok(s)
}

/// The CPU seconds the testbed-flight server at `server` has used so far
/// (`testbed-flight server-cpu`).
fn server_cpu(bin: &Path, server: &str, ca: Option<&Path>) -> Result<f64, WorkloadError> {
    #[derive(Deserialize)]
    struct ServerCpu {
        cpu_s: f64,
    }
    let request = FlightRequest::ServerCpu(ServerCpuRequest {
        server: server.into(),
        tls_ca: ca.map(Path::to_path_buf),
        connect_timeout_secs: 10.0,
    });
    let lines: Vec<ServerCpu> = run_client(bin, &request, Duration::from_secs(30))?;
    match lines.as_slice() {
        [one] => Ok(one.cpu_s),
        lines => Err(other(format!(
            "testbed-flight server-cpu printed {} lines, 1 expected",
            lines.len()
        ))),
    }
}

/// `<side>_cpu_s` and `<side>_cpu_s_per_gb` (CPU seconds per GiB of
/// payload moved); `cpu_s_per_gb` is both sides' once both are in.
fn put_cpu_per_gb(s: &mut Summary, side: &str, cpu_s: Option<f64>) {
    let Some(cpu) = cpu_s else { return };
    let gib = s.get("bytes").and_then(serde_json::Value::as_f64).unwrap_or(0.0) / (1u64 << 30) as f64;
    s.insert(format!("{side}_cpu_s"), serde_json::json!(cpu));
    if gib > 0.0 {
        s.insert(format!("{side}_cpu_s_per_gb"), serde_json::json!(cpu / gib));
        let both = ["client_cpu_s", "server_cpu_s"]
            .iter()
            .map(|k| s.get(*k).and_then(serde_json::Value::as_f64))
            .sum::<Option<f64>>();
        if let Some(b) = both {
            s.insert("cpu_s_per_gb".into(), serde_json::json!(b / gib));
        }
    }
}

/// The link's rates as samples and summary, and the point's rate as a
/// share of the link in its data's direction (DoGet: server to client;
/// DoPut: client to server; DoExchange: the slower way).
fn record_link(p: &FlightBulkParams, l: &super::link::Link, ctx: &JobContext, s: &mut Summary) {
    for (direction, v) in [
        ("to-server", l.to_server_mb_per_s),
        ("to-client", l.to_client_mb_per_s),
    ] {
        let tags = BTreeMap::from([("direction".to_string(), direction.to_string())]);
        ctx.emit_samples("link_throughput", "MB/s", 0, &tags, &[v]);
    }
    let link = match p.operation {
        Op::Get => l.to_client_mb_per_s,
        Op::Put => l.to_server_mb_per_s,
        Op::Exchange => l.to_client_mb_per_s.min(l.to_server_mb_per_s),
    };
    s.insert("link_to_server_mb_per_s".into(), serde_json::json!(l.to_server_mb_per_s));
    s.insert("link_to_client_mb_per_s".into(), serde_json::json!(l.to_client_mb_per_s));
    s.insert("link_mb_per_s".into(), serde_json::json!(link));
    let rate = s.get("mb_per_s").and_then(|v| v.as_f64()).unwrap_or(0.0);
    if link > 0.0 {
        s.insert("link_share".into(), serde_json::json!(rate / link));
    }
}

/// The server a `serve_seconds = 0` job leaves serving after it ends: the
/// pair topology's server VM runs that job once per boot, and the client
/// VM's points use the server after. A guard, not a detached process: the
/// next server job stops it, as does [`stop_boot_server`], and the kernel
/// kills it with the thread that ran the job (the agent's job loop).
static BOOT_SERVER: Mutex<Option<BootService>> = Mutex::new(None);

/// A boot's servers: Flight, and iperf3 when the link is measured. Both
/// are stopped on drop.
struct BootService {
    _flight: ServerChild,
    _iperf: Option<testbed_proc::Group>,
}

/// Keeps `server` (and iperf3) serving for the rest of the boot, where the
/// next server job or [`stop_boot_server`] stops them.
pub(super) fn keep_for_boot(server: ServerChild, iperf: Option<testbed_proc::Group>) {
    if let Ok(mut slot) = BOOT_SERVER.lock() {
        *slot = Some(BootService {
            _flight: server,
            _iperf: iperf,
        });
    }
}

/// Stops the server a `serve_seconds = 0` job left serving, if any (for
/// the agent to call when the host ends the boot).
pub fn stop_boot_server() {
    let server = BOOT_SERVER.lock().ok().and_then(|mut s| s.take());
    // Dropped (stopped) outside the lock.
    drop(server);
}

pub fn run(p: &FlightBulkParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    run_with_binary(p, ctx, &require_binary()?)
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
                Transport::Unix => format!("unix:{}", scratch.path().join("flight.sock").display()),
            };
            let tls_dir = scratch.path().join("tls");
            if p.tls {
                gen_cert(&bin, &tls_dir)?;
            }
            let tls = p.tls.then_some(tls_dir.as_path());
            let tls_dir_given = tls.map(Path::to_path_buf);
            let serve = match p.server {
                Implementation::Ours => {
                    let mut r = ServeRequest::new(&addr);
                    r.profile = p.profile;
                    r.tls_dir = tls_dir_given;
                    FlightRequest::Serve(r)
                }
                Implementation::Pyarrow => FlightRequest::PyServe(PyServeRequest {
                    addr: addr.clone(),
                    tls_dir: tls_dir_given,
                }),
            };
            let pin = super::pinning::at_run(p.client_cpus.as_deref(), p.server_cpus.as_deref())?;
            let mut server = super::pinning::on(pin.as_ref().map(|p| &p.server[..]), || {
                ServerChild::start(&bin, &serve, start_timeout)
            })??;
            let ca = tls_dir.join("ca.pem");
            let request = bench_request(p, &server.addr, p.tls.then_some(ca.as_path()), ctx.seed);
            // The server's CPU over the client's run: its start-up (for
            // pyarrow, Python importing pyarrow) stays out; the client's
            // untimed GetFlightInfo and one-batch warm-up are in, alike for
            // both servers.
            let server_cpu0 = super::process::group_cpu_s(server.child.id());
            let lines = super::pinning::on(pin.as_ref().map(|p| &p.client[..]), || {
                run_client(&bin, &request, timeout)
            });
            let server_cpu = super::process::group_cpu_s(server.child.id())
                .zip(server_cpu0)
                .map(|(b, a)| b - a);
            server.stop();
            let mut s = record(p, &lines??, ctx)?;
            put_cpu_per_gb(&mut s, "server", server_cpu);
            super::pinning::record(&mut s, pin.as_ref());
            Ok(s)
        }
        Role::Client => {
            let server = p.address.clone().unwrap_or_default();
            // The link first, in this boot, untimed by the Flight clock.
            let link = if p.measure_link {
                let ip = server
                    .parse::<std::net::SocketAddr>()
                    .map_err(|e| other(format!("address {server:?}: {e}")))?
                    .ip()
                    .to_string();
                Some(super::link::measure(&ip, p.link_seconds)?)
            } else {
                None
            };
            let ca = p.tls_dir.as_ref().map(|d| Path::new(d).join("ca.pem"));
            let request = bench_request(p, &server, ca.as_deref(), ctx.seed);
            // The server VM's CPU over the client's run, asked over Flight
            // (its `cpu` action) before and after, as the local role reads
            // its server's group.
            let server_cpu0 = server_cpu(&bin, &server, ca.as_deref());
            let lines = run_client(&bin, &request, timeout)?;
            let server_cpu1 = server_cpu(&bin, &server, ca.as_deref());
            let mut s = record(p, &lines, ctx)?;
            match (server_cpu1, server_cpu0) {
                (Ok(b), Ok(a)) => put_cpu_per_gb(&mut s, "server", Some(b - a)),
                // CPU is a metric: not reading it loses the metric, not the run.
                (Err(e), _) | (_, Err(e)) => {
                    s.insert("server_cpu_unread".into(), serde_json::json!(e.to_string()));
                }
            }
            if let Some(l) = link {
                record_link(p, &l, ctx, &mut s);
            }
            Ok(s)
        }
        Role::Server => {
            let scratch = Scratch::new(ctx.job_id)?;
            let tls_dir = match &p.tls_dir {
                Some(d) => PathBuf::from(d),
                None => scratch.path().join("tls"),
            };
            if p.tls && !tls_dir.join("server.pem").is_file() {
                gen_cert(&bin, &tls_dir)?;
            }
            let addr = p.address.clone().unwrap_or_default();
            // An earlier boot service may hold the address.
            stop_boot_server();
            let t0 = Instant::now();
            let mut serve = ServeRequest::new(&addr);
            serve.profile = p.profile;
            serve.tls_dir = p.tls.then(|| tls_dir.clone());
            let mut server = ServerChild::start(&bin, &FlightRequest::Serve(serve), start_timeout)?;
            // The iperf3 server lives exactly as long as the Flight server.
            let iperf = if p.measure_link {
                Some(super::link::start_server()?)
            } else {
                None
            };
            if p.serve_seconds == 0 {
                // A service for the rest of the boot (the pair topology's
                // server VM), held where the next server job or
                // stop_boot_server stops it; never detached (see BOOT_SERVER).
                let mut s = Summary::new();
                s.insert("address".into(), serde_json::json!(server.addr));
                s.insert("boot_service".into(), serde_json::json!(true));
                s.insert("iperf3".into(), serde_json::json!(iperf.is_some()));
                keep_for_boot(server, iperf);
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
            drop(iperf);
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

impl crate::workload::WorkloadParams for FlightBulkParams {
    fn validate(
        &self,
        _devices: &BTreeMap<String, testbed_vocab::protocol::DeviceRef>,
    ) -> Result<(), ParamError> {
        FlightBulkParams::validate(self)
    }
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run(self, ctx)
    }
    fn needs(&self) -> crate::workload::Needs {
        let mut host_steps = Vec::new();
        if self.client == Implementation::Pyarrow || self.server == Implementation::Pyarrow {
            host_steps.push("pyarrow");
        }
        if self.measure_link {
            host_steps.push("iperf3");
        }
        crate::workload::Needs {
            helpers: vec![registry::FLIGHT],
            host_steps,
            ..Default::default()
        }
    }
    fn metrics(&self) -> Vec<crate::workload::MetricInfo> {
        use crate::workload::MetricInfo as M;
        vec![
            M::raw("flight_throughput", "MB/s", &["op", "stream"]),
            M::raw("flight_batch_latency", "ns", &["op", "stream"]),
            M::summary("mb_per_s", "MB/s", &[]),
            M::raw("link_throughput", "MB/s", &["direction"]),
            M::summary("link_mb_per_s", "MB/s", &[]),
            M::summary("link_share", "", &[]),
            M::summary("client_cpu_s", "s", &[]),
            M::summary("server_cpu_s", "s", &[]),
            M::summary("client_cpu_s_per_gb", "s/GiB", &[]),
            M::summary("server_cpu_s_per_gb", "s/GiB", &[]),
            M::summary("cpu_s_per_gb", "s/GiB", &[]),
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
        assert_eq!(p.operation, Op::Get);
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
        assert_eq!(
            field(r#"{"client":"pyarrow","operation":"exchange"}"#),
            "client"
        );
        assert_eq!(
            field(r#"{"server":"pyarrow","role":"server","address":"10.0.0.1:5"}"#),
            "server"
        );
    }

    #[test]
    fn a_pyarrow_client_runs_py_bench_with_the_same_payload_and_profile() {
        let p = params(
            r#"{"client":"pyarrow","profile":"defaults","keep_batches":true,"records_per_stream":99}"#,
        );
        let FlightRequest::PyBench(r) = bench_request(&p, "127.0.0.1:5", None, 7) else {
            panic!("not py-bench")
        };
        assert_eq!(r.profile, Profile::Defaults);
        assert_eq!(r.records_per_stream, 99);
        assert!(r.keep_batches);
        assert_eq!(r.threads, 0, "pyarrow runs a thread per stream");
        assert_eq!(p.pairing(), "pyarrow→ours");
    }

    #[test]
    fn the_clients_request_carries_op_compression_and_streams() {
        let p = params(r#"{"operation":"exchange","compression":"zstd","streams":3}"#);
        let FlightRequest::Bench(r) = bench_request(&p, "10.0.0.1:5", None, 7) else {
            panic!("not bench")
        };
        assert_eq!((r.op, r.compression, r.streams), (Op::Exchange, Compression::Zstd, 3));
        assert!(r.json && r.tls_ca.is_none());
        assert_eq!(r.server, "10.0.0.1:5");
    }

    #[test]
    fn subsampling_keeps_at_most_max() {
        let v: Vec<f64> = (0..1001).map(f64::from).collect();
        let (s, stride) = subsample(&v, 100);
        assert!(s.len() <= 100 && stride == 11, "{} {stride}", s.len());
        assert_eq!(subsample(&v[..5], 100), (v[..5].to_vec(), 1));
    }

    fn ctx(job_id: u64, sink: Arc<VecSink>) -> JobContext {
        JobContext {
            job_id,
            seed: 1,
            devices: BTreeMap::new(),
            sink,
        }
    }

    #[test]
    fn a_missing_summary_or_stream_is_an_error() {
        let p = params(r#"{"streams":2,"records_per_stream":1}"#);
        let stream: BenchLine = serde_json::from_value(serde_json::json!({
            "type": "stream", "op": "get", "stream": 0, "bytes": 32, "records": 1,
            "batches": 1, "seconds": 1.0, "mb_per_s": 0.5, "latencies_ns": [5],
        }))
        .unwrap();
        let summary: BenchLine = serde_json::from_value(serde_json::json!({
            "type": "summary", "op": "get", "streams": 2, "threads": 2,
            "records_per_stream": 1, "records_per_batch": 1, "compression": "none",
            "tls": false, "transport": "tcp", "wall_seconds": 1.0, "bytes": 64,
            "records": 2, "mb_per_s": 1.0,
            "settings": {"tcp_nodelay": true},
        }))
        .unwrap();
        let sink = Arc::new(VecSink::default());
        let e = record(&p, std::slice::from_ref(&stream), &ctx(1, sink.clone())).unwrap_err();
        assert!(e.to_string().contains("no summary"), "{e}");
        let e = record(
            &p,
            &[stream.clone(), summary.clone()],
            &ctx(1, sink.clone()),
        )
        .unwrap_err();
        assert!(e.to_string().contains("1 streams, 2 expected"), "{e}");
        let mut second = stream.clone();
        if let BenchLine::Stream(s) = &mut second {
            s.stream = 1;
        }
        let s = record(
            &p,
            &[stream.clone(), second, summary.clone()],
            &ctx(1, sink.clone()),
        )
        .unwrap();
        assert_eq!(s["records"], 2);
        // A short stream fails the point, naming the pairing.
        let mut short = stream.clone();
        if let BenchLine::Stream(s) = &mut short {
            s.stream = 1;
            s.records = 0;
        }
        let e = record(&p, &[stream, short, summary], &ctx(1, sink.clone())).unwrap_err();
        assert!(
            e.to_string()
                .contains("stream 1 (ours→ours) moved 0 records, 1 expected"),
            "{e}"
        );
        assert_eq!(s["settings"]["tcp_nodelay"], true);
        assert_eq!(s["latency_sample_stride"], 1);
    }

    fn run_with_real_binary(p: FlightBulkParams) -> (Summary, Vec<testbed_vocab::protocol::SampleChunk>) {
        let sink = Arc::new(VecSink::default());
        let s = run_with_binary(&p, &ctx(3, sink.clone()), &super::super::real_binary()).unwrap();
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
    fn pinning_is_local_only_and_the_summary_says_where_both_ran() {
        let field = |j: &str| params(j).validate().unwrap_err().field;
        assert_eq!(field(r#"{"client_cpus":"1"}"#), "server_cpus");
        assert_eq!(field(r#"{"client_cpus":"0-1","server_cpus":"1"}"#), "server_cpus");
        assert_eq!(
            field(r#"{"role":"client","address":"10.0.2.2:1","client_cpus":"1","server_cpus":"0"}"#),
            "client_cpus"
        );
        let cpus = testbed_proc::affinity::this_thread_cpus().unwrap();
        let (p, want) = match cpus.len() >= 2 {
            true => (
                params(&format!(
                    r#"{{"records_per_stream":20000,"client_cpus":"{}","server_cpus":"{}"}}"#,
                    cpus[1], cpus[0]
                )),
                format!("client {}, server {}", cpus[1], cpus[0]),
            ),
            false => (params(r#"{"records_per_stream":20000}"#), "not pinned".into()),
        };
        let (s, _) = run_with_real_binary(p);
        assert_eq!(s["records"], serde_json::json!(20_000));
        assert_eq!(s["pinning"], serde_json::json!(want));
        // The agent's thread has its own mask back.
        assert_eq!(testbed_proc::affinity::this_thread_cpus().unwrap(), cpus);
    }

    /// Needs pyarrow (`./x setup` installs it).
    #[test]
    #[ignore = "starts pyarrow's Python client or server in every pairing and profile (~8 s); ./x test runs it"]
    fn all_four_pairings_move_the_same_records_under_every_profile() {
        for (op, profile) in [("get", "tuned"), ("put", "defaults"), ("put", "library")] {
            for client in ["ours", "pyarrow"] {
                for server in ["ours", "pyarrow"] {
                    let p = params(&format!(
                        r#"{{"operation":"{op}","client":"{client}","server":"{server}","profile":"{profile}","records_per_stream":10000,"streams":2}}"#
                    ));
                    let (s, chunks) = run_with_real_binary(p);
                    let what = format!("{client}→{server} {op} {profile}");
                    assert_eq!(s["pairing"], format!("{client}→{server}"), "{what}");
                    assert_eq!(s["records"], serde_json::json!(20_000), "{what}");
                    let by = s["settings"]["implementation"].as_str();
                    if client == "pyarrow" {
                        assert_eq!(by, Some("pyarrow"), "{what}: {s:?}");
                        assert_eq!(s["settings"]["profile"], profile, "{what}");
                    } else {
                        // Ours records its settings: tonic's own windows
                        // under `library`, the ones it ships with otherwise.
                        let window = s["settings"]["stream_window_bytes"].as_u64();
                        let want = if profile == "library" { 65_535 } else { 32 << 20 };
                        assert_eq!(window, Some(want), "{what}");
                    }
                    let thr = chunks
                        .iter()
                        .filter(|c| c.metric == "flight_throughput" && c.values[0] > 0.0)
                        .count();
                    assert_eq!(thr, 2, "{what}");
                    // Both sides' CPU over the transfer, per GiB moved.
                    for side in ["client", "server"] {
                        let per_gb = s[&format!("{side}_cpu_s_per_gb")].as_f64();
                        assert!(per_gb.is_some_and(|v| v > 0.0), "{what} {side}: {s:?}");
                    }
                    let (c, v) = (s["client_cpu_s"].as_f64(), s["server_cpu_s"].as_f64());
                    let gib = 20_000.0 * 32.0 / f64::from(1u32 << 30);
                    let total = s["cpu_s_per_gb"].as_f64().unwrap_or(0.0);
                    assert!(
                        (total - (c.unwrap_or(0.0) + v.unwrap_or(0.0)) / gib).abs() < 1e-6 * total,
                        "{what}: {s:?}"
                    );
                }
            }
        }
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

    #[test]
    fn the_scratch_dir_is_private_not_a_pre_created_one() {
        let victim = tempfile::tempdir().unwrap();
        // The scratch dir used to be temp_dir/testbed-flight-<pid>-<job>:
        // another user could create it first, with a symlink inside.
        let planted =
            std::env::temp_dir().join(format!("testbed-flight-{}-{}", std::process::id(), 9));
        std::fs::create_dir(&planted).unwrap();
        std::os::unix::fs::symlink(victim.path(), planted.join("tls")).unwrap();
        let p = params(r#"{"transport":"unix","tls":true,"records_per_stream":1000}"#);
        let sink = Arc::new(VecSink::default());
        let r = run_with_binary(&p, &ctx(9, sink), &super::super::real_binary());
        let _ = std::fs::remove_dir_all(&planted);
        let left: Vec<_> = std::fs::read_dir(victim.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            left.is_empty(),
            "written through the planted symlink: {left:?}"
        );
        assert_eq!(r.unwrap()["records"], serde_json::json!(1000));
    }

    #[test]
    fn a_server_for_the_boot_is_stopped_when_the_next_one_starts() {
        let p = params(r#"{"role":"server","address":"127.0.0.1:0","serve_seconds":0}"#);
        let bin = super::super::real_binary();
        let run = || {
            let s = run_with_binary(&p, &ctx(4, Arc::new(VecSink::default())), &bin).unwrap();
            s["address"].as_str().unwrap().to_string()
        };
        let first = run();
        // It serves after its job ended (the pair topology's client uses it).
        assert!(std::net::TcpStream::connect(&first).is_ok());
        let second = run();
        assert!(std::net::TcpStream::connect(&second).is_ok());
        // A client of another machine's server (here this one's) charges
        // the run the server's CPU, asked over Flight.
        let client = params(&format!(
            r#"{{"role":"client","address":"{second}","records_per_stream":200000,"records_per_batch":4096}}"#
        ));
        let s = run_with_binary(&client, &ctx(5, Arc::new(VecSink::default())), &bin).unwrap();
        for key in ["client_cpu_s_per_gb", "server_cpu_s_per_gb", "cpu_s_per_gb"] {
            assert!(s[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {s:?}");
        }
        assert!(!s.contains_key("server_cpu_unread"), "{s:?}");
        assert!(
            std::net::TcpStream::connect(&first).is_err(),
            "the first server still serves at {first}"
        );
        stop_boot_server();
        assert!(
            std::net::TcpStream::connect(&second).is_err(),
            "the second server still serves at {second}"
        );
    }
}
