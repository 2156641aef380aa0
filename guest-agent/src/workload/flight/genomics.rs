//! `flight-genomics`: region-partitioned ArrowSAM batches moved to another
//! node by Flight DoPut, sorted and duplicate-marked per region there,
//! against the same records moved as BAM over the same link
//! (`testbed-flight genomics-serve` / `genomics-send`). The data set is
//! `testbed-asam prepare`'s (bwa in the image).
//!
//! Roles as flight-bulk's: `local` runs receiver and sender here over
//! loopback; in the pair topology the server VM runs `server` (a receiver
//! for the rest of the boot, iperf3 beside it) and the client VM `client`,
//! which measures the link first, in the same boot.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use testbed_vocab::flight::GenomicsLine;
use testbed_vocab::request::flight::{
    FlightRequest, GenomicsSendRequest, GenomicsServeRequest, Pipeline,
};

use super::bulk::{Role, keep_for_boot};
use super::process::{ServerChild, ensure_loopback_up};
use super::{default_timeout, named, other, require_binary, run_client};
use crate::workload::asam::{AsamPreprocParams, asam_binary, prepare_dataset};
use crate::workload::{JobContext, ParamError, Summary, WorkloadError, defaults, registry};

/// The pipelines `genomics-send --pipelines` knows.
pub const PIPELINES: [&str; 3] = Pipeline::NAMES;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlightGenomicsParams {
    #[serde(default)]
    pub role: Role,
    /// server: the Flight address to listen on (IP:PORT); client: the
    /// receiver's (`{peer}:PORT` in a pair).
    #[serde(default)]
    pub address: Option<String>,
    /// The BAM listener's port, on the address's IP.
    #[serde(default = "default_bam_port")]
    pub bam_port: u16,
    /// The port of the Flight listener with the tuned transport settings
    /// (`flight-tuned`), on the address's IP.
    #[serde(default = "default_tuned_port")]
    pub tuned_port: u16,
    /// server: 0 serves for the rest of the boot.
    #[serde(default)]
    pub serve_seconds: u64,
    /// Regions the genome is cut into (the sweep axis).
    #[serde(default = "default_regions")]
    pub regions: u32,
    #[serde(default = "default_pipelines")]
    pub pipelines: Vec<String>,
    /// Moves per pipeline within the job, the order alternating.
    #[serde(default = "defaults::one_u32")]
    pub repetitions: u32,
    /// client/local: send each region while the receiver processes the one
    /// before (every pipeline alike); samples are tagged `schedule`
    /// "overlapped", else "sequential".
    #[serde(default)]
    pub overlap: bool,
    /// Receiver's sort/markdup workers, sender's BGZF workers, bwa's threads.
    #[serde(default = "default_threads")]
    pub threads: u32,
    /// Data set preset (asam-preproc's): tiny | small | medium | large.
    #[serde(default = "default_dataset")]
    pub dataset: String,
    #[serde(default)]
    pub coverage: Option<f64>,
    #[serde(default = "default_dup_fraction")]
    pub dup_fraction: f64,
    #[serde(default = "defaults::one_u64")]
    pub data_seed: u64,
    #[serde(default)]
    pub data_dir: Option<String>,
    /// client: measure the link with iperf3 first (both VMs need iperf3).
    #[serde(default)]
    pub measure_link: bool,
    #[serde(default = "default_link_seconds")]
    pub link_seconds: u32,
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
    /// Local role: the host CPUs of the client and of the server ("1",
    /// "0,2-3"), both or neither, never one CPU in both; default unpinned.
    /// The summary's `pinning` says where they ran.
    #[serde(default)]
    pub client_cpus: Option<String>,
    #[serde(default)]
    pub server_cpus: Option<String>,
}

fn default_bam_port() -> u16 {
    50052
}
fn default_tuned_port() -> u16 {
    50053
}
fn default_regions() -> u32 {
    4
}
fn default_pipelines() -> Vec<String> {
    PIPELINES.iter().map(|s| s.to_string()).collect()
}
fn default_threads() -> u32 {
    2
}
fn default_dataset() -> String {
    "tiny".into()
}
fn default_dup_fraction() -> f64 {
    0.1
}
fn default_link_seconds() -> u32 {
    3
}

impl FlightGenomicsParams {
    /// The data set as asam-preproc names it (its checks, its cache).
    fn data(&self) -> AsamPreprocParams {
        AsamPreprocParams {
            dataset: self.dataset.clone(),
            reference: None,
            reads1: None,
            reads2: None,
            chromosomes: None,
            chromosome_length: None,
            coverage: self.coverage,
            dup_fraction: self.dup_fraction,
            tools: vec!["arrowsam".into()],
            data_seed: self.data_seed,
            threads: self.threads,
            data_dir: self.data_dir.clone(),
            out_dir: None,
            timeout_seconds: self.timeout_seconds,
        }
    }

    pub fn validate(&self) -> Result<(), ParamError> {
        let pinned = super::pinning::parse(self.client_cpus.as_deref(), self.server_cpus.as_deref())?;
        if pinned.is_some() && self.role != Role::Local {
            return Err(ParamError::new(
                "client_cpus",
                "only the local role runs sender and receiver here to pin",
            ));
        }
        if self.role != Role::Local && self.address.is_none() {
            return Err(ParamError::new(
                "address",
                "the server and client roles need an address (IP:PORT)",
            ));
        }
        if !(1..=1024).contains(&self.regions) {
            return Err(ParamError::new("regions", "must be 1..=1024"));
        }
        crate::workload::known_names("pipelines", "pipeline", &self.pipelines, &PIPELINES)?;
        if self.repetitions == 0 {
            return Err(ParamError::new("repetitions", "must be at least 1"));
        }
        if self.overlap && self.role == Role::Server {
            return Err(ParamError::new(
                "overlap",
                "the sender schedules regions: set it on the client",
            ));
        }
        if self.measure_link && self.role == Role::Local {
            return Err(ParamError::new(
                "measure_link",
                "only the client of a pair measures a link",
            ));
        }
        self.data().validate()
    }

    /// The receiver's listeners as the spec places them.
    fn listening(&self) -> Result<Listening, WorkloadError> {
        Ok(Listening {
            flight: self.address.clone().unwrap_or_default(),
            tuned: self.with_port(self.tuned_port)?,
            bam: self.with_port(self.bam_port)?,
        })
    }

    /// The address's IP with `port`.
    fn with_port(&self, port: u16) -> Result<String, WorkloadError> {
        let a = self.address.clone().unwrap_or_default();
        let sa: std::net::SocketAddr = a
            .parse()
            .map_err(|e| other(format!("address {a:?}: {e}")))?;
        Ok(std::net::SocketAddr::new(sa.ip(), port).to_string())
    }
}

pub fn run(p: &FlightGenomicsParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    run_with_binaries(p, ctx, &require_binary()?, asam_binary().as_deref())
}

/// Where a receiver listens: Flight (gRPC defaults), Flight (tuned), BAM.
struct Listening {
    flight: String,
    tuned: String,
    bam: String,
}

fn start_receiver(
    bin: &Path,
    at: &Listening,
    threads: u32,
) -> Result<(ServerChild, Listening), WorkloadError> {
    let request = FlightRequest::GenomicsServe(GenomicsServeRequest {
        addr: at.flight.clone(),
        tuned_addr: at.tuned.clone(),
        bam_addr: at.bam.clone(),
        threads: threads as usize,
    });
    let server = ServerChild::start(bin, &request, Duration::from_secs(60))?;
    let said = |key: &str| {
        server.settings[key]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| other(format!("genomics-serve's ready line has no {key}")))
    };
    let listening = Listening {
        flight: server.addr.clone(),
        tuned: said("tuned_listening")?,
        bam: said("bam_listening")?,
    };
    Ok((server, listening))
}


pub fn run_with_binaries(
    p: &FlightGenomicsParams,
    ctx: &JobContext,
    bin: &Path,
    asam_bin: Option<&Path>,
) -> Result<Summary, WorkloadError> {
    p.validate().map_err(|e| other(e.to_string()))?;
    let timeout = Duration::from_secs(p.timeout_seconds.max(1));
    let asam = || asam_bin.ok_or_else(|| registry::ASAM.not_found());
    match p.role {
        Role::Server => {
            super::bulk::stop_boot_server();
            let (server, at) = start_receiver(bin, &p.listening()?, p.threads)?;
            let iperf = if p.measure_link {
                Some(super::link::start_server()?)
            } else {
                None
            };
            let mut s = Summary::new();
            s.insert("address".into(), serde_json::json!(server.addr));
            s.insert("tuned_address".into(), serde_json::json!(at.tuned));
            s.insert("bam_address".into(), serde_json::json!(at.bam));
            if p.serve_seconds == 0 {
                keep_for_boot(server, iperf);
                s.insert("boot_service".into(), serde_json::json!(true));
            } else {
                std::thread::sleep(Duration::from_secs(p.serve_seconds));
                drop((server, iperf));
            }
            Ok(s)
        }
        Role::Client => {
            let at = p.listening()?;
            let link = if p.measure_link {
                let ip = at
                    .flight
                    .parse::<std::net::SocketAddr>()
                    .map_err(|e| other(format!("address {:?}: {e}", at.flight)))?
                    .ip()
                    .to_string();
                Some(super::link::measure(&ip, p.link_seconds)?)
            } else {
                None
            };
            let sam = prepare_dataset(&p.data(), asam()?)?.sam;
            let lines = send(bin, p, &sam, &at, timeout)?;
            let mut s = record(p, &lines, ctx)?;
            if let Some(l) = link {
                // Regions go sender -> receiver: the client-to-server direction.
                s.insert(
                    "link_mb_per_s".into(),
                    serde_json::json!(l.to_server_mb_per_s),
                );
                s.insert(
                    "link_to_client_mb_per_s".into(),
                    serde_json::json!(l.to_client_mb_per_s),
                );
                link_shares(&mut s, l.to_server_mb_per_s);
            }
            Ok(s)
        }
        Role::Local => {
            ensure_loopback_up()?;
            let sam = prepare_dataset(&p.data(), asam()?)?.sam;
            let any = Listening {
                flight: "127.0.0.1:0".into(),
                tuned: "127.0.0.1:0".into(),
                bam: "127.0.0.1:0".into(),
            };
            let pin = super::pinning::at_run(p.client_cpus.as_deref(), p.server_cpus.as_deref())?;
            let (mut server, at) = super::pinning::on(pin.as_ref().map(|p| &p.server[..]), || {
                start_receiver(bin, &any, p.threads)
            })??;
            let lines = super::pinning::on(pin.as_ref().map(|p| &p.client[..]), || {
                send(bin, p, &sam, &at, timeout)
            });
            server.stop();
            let mut s = record(p, &lines??, ctx)?;
            super::pinning::record(&mut s, pin.as_ref());
            Ok(s)
        }
    }
}

fn send(
    bin: &Path,
    p: &FlightGenomicsParams,
    sam: &Path,
    at: &Listening,
    timeout: Duration,
) -> Result<Vec<GenomicsLine>, WorkloadError> {
    let mut request = GenomicsSendRequest::new(sam.to_path_buf(), &at.flight, &at.bam);
    request.tuned_server = at.tuned.clone();
    request.regions = p.regions;
    request.repetitions = p.repetitions;
    request.pipelines = named("pipelines", &p.pipelines, Pipeline::from_name)?;
    request.threads = p.threads as usize;
    request.overlap = p.overlap;
    request.json = true;
    run_client(bin, &FlightRequest::GenomicsSend(request), timeout)
}

/// Samples per pipeline (one value per repetition) and the summary keys
/// `<pipeline>.<metric>` (medians).
fn record(
    p: &FlightGenomicsParams,
    lines: &[GenomicsLine],
    ctx: &JobContext,
) -> Result<Summary, WorkloadError> {
    let mut s = Summary::new();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (i, pipeline) in p.pipelines.iter().enumerate() {
        let mine: Vec<&GenomicsLine> = lines.iter().filter(|l| l.pipeline == *pipeline).collect();
        if mine.len() != p.repetitions as usize {
            return Err(other(format!(
                "genomics-send reported {} runs of {pipeline}, {} expected",
                mine.len(),
                p.repetitions
            )));
        }
        let first = mine[0];
        let put = |s: &mut Summary, k: &str, v: serde_json::Value| {
            s.insert(format!("{pipeline}.{k}"), v);
        };
        let tags = BTreeMap::from([
            ("pipeline".to_string(), pipeline.clone()),
            ("regions".to_string(), p.regions.to_string()),
            ("schedule".to_string(), first.schedule.clone()),
        ]);
        let comm: Vec<f64> = mine.iter().map(|l| l.communication_seconds).collect();
        let proc_: Vec<f64> = mine.iter().map(|l| l.processing_seconds).collect();
        let total: Vec<f64> = mine.iter().map(|l| l.total_seconds).collect();
        let share: Vec<f64> = mine
            .iter()
            .map(|l| l.communication_seconds / (l.communication_seconds + l.processing_seconds))
            .collect();
        ctx.emit_samples("communication_seconds", "s", i as u32, &tags, &comm);
        ctx.emit_samples("processing_seconds", "s", i as u32, &tags, &proc_);
        ctx.emit_samples("communication_share", "", i as u32, &tags, &share);
        ctx.emit_samples("total_seconds", "s", i as u32, &tags, &total);
        // CPU per GiB of the records (as SAM text), each side on its own
        // tag; a repetition whose CPU could not be read has no sample.
        for side in ["sender", "receiver"] {
            let per_gb: Vec<f64> = mine
                .iter()
                .filter_map(|l| cpu_s_per_gb(l, side))
                .collect();
            if per_gb.is_empty() {
                continue;
            }
            let mut tags = tags.clone();
            tags.insert("side".into(), side.into());
            ctx.emit_samples("cpu_s_per_gb", "s/GiB", i as u32, &tags, &per_gb);
            put(&mut s, &format!("{side}_cpu_s_per_gb"), serde_json::json!(median(per_gb)));
        }

        put(&mut s, "communication_seconds", serde_json::json!(median(comm)));
        put(&mut s, "processing_seconds", serde_json::json!(median(proc_)));
        put(&mut s, "communication_share", serde_json::json!(median(share)));
        put(&mut s, "total_seconds", serde_json::json!(median(total)));
        put(&mut s, "wire_bytes", serde_json::json!(first.wire_bytes));
        put(&mut s, "checksum", serde_json::json!(first.checksum));
        s.insert("records".into(), serde_json::json!(first.records));
        s.insert("duplicates".into(), serde_json::json!(first.duplicates));
        s.insert(
            "unpartitioned_duplicates".into(),
            serde_json::json!(first.unpartitioned_duplicates),
        );
    }
    // genomics-send fails when the pipelines' outputs differ.
    s.insert("checksums_match".into(), serde_json::json!(true));
    s.insert("regions".into(), serde_json::json!(p.regions));
    Ok(s)
}

/// One side's CPU seconds per GiB of the records moved, if it was read.
fn cpu_s_per_gb(l: &GenomicsLine, side: &str) -> Option<f64> {
    let cpu = match side {
        "sender" => l.sender_cpu_s,
        _ => l.receiver_cpu_s,
    }?;
    let gib = l.payload_bytes as f64 / f64::from(1u32 << 30);
    (gib > 0.0).then(|| cpu / gib)
}

/// `<pipeline>.link_share`: the bytes a pipeline put on the wire over its
/// communication time, as a share of the link's rate in that direction
/// (how close to link-bound the move was).
fn link_shares(s: &mut Summary, link_mb_per_s: f64) {
    if link_mb_per_s <= 0.0 {
        return;
    }
    for p in PIPELINES {
        let get = |k: &str| s.get(&format!("{p}.{k}")).and_then(|v| v.as_f64());
        if let (Some(bytes), Some(secs)) = (get("wire_bytes"), get("communication_seconds"))
            && secs > 0.0
        {
            let rate = bytes / f64::from(1u32 << 20) / secs;
            s.insert(
                format!("{p}.link_share"),
                serde_json::json!(rate / link_mb_per_s),
            );
        }
    }
}

impl crate::workload::WorkloadParams for FlightGenomicsParams {
    fn validate(
        &self,
        _devices: &BTreeMap<String, testbed_vocab::protocol::DeviceRef>,
    ) -> Result<(), ParamError> {
        FlightGenomicsParams::validate(self)
    }
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run(self, ctx)
    }
    fn needs(&self) -> crate::workload::Needs {
        let mut host_steps = Vec::new();
        if self.measure_link {
            host_steps.push("iperf3");
        }
        let mut helpers = vec![registry::FLIGHT];
        if self.role != Role::Server {
            helpers.push(registry::ASAM);
            host_steps.push("asam");
        }
        crate::workload::Needs {
            helpers,
            host_steps,
            ..Default::default()
        }
    }
    fn metrics(&self) -> Vec<crate::workload::MetricInfo> {
        use crate::workload::MetricInfo as M;
        vec![
            M::raw("communication_seconds", "s", &["pipeline"]),
            M::raw("processing_seconds", "s", &["pipeline"]),
            M::raw("communication_share", "", &["pipeline"]),
            M::raw("total_seconds", "s", &["pipeline", "schedule"]),
            M::raw("cpu_s_per_gb", "s/GiB", &["pipeline", "side"]),
            M::summary("sender_cpu_s_per_gb", "s/GiB", &["pipeline"]),
            M::summary("receiver_cpu_s_per_gb", "s/GiB", &["pipeline"]),
            M::summary("total_seconds", "s", &["pipeline"]),
            M::summary("communication_seconds", "s", &["pipeline"]),
            M::summary("processing_seconds", "s", &["pipeline"]),
            M::summary("communication_share", "", &["pipeline"]),
            M::summary("wire_bytes", "B", &["pipeline"]),
            M::summary("link_share", "", &["pipeline"]),
            M::summary("records", "", &[]),
            M::summary("duplicates", "", &[]),
        ]
    }
    fn summary_scopes(&self) -> Option<(&'static str, Vec<String>)> {
        (self.role != Role::Server).then(|| ("pipeline", self.pipelines.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{VecSink, Workload, child};
    use std::sync::Arc;

    fn params(j: serde_json::Value) -> FlightGenomicsParams {
        let mut j = j;
        j["kind"] = "flight-genomics".into();
        match serde_json::from_value(j).unwrap() {
            Workload::FlightGenomics(p) => p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_link_share_is_the_wire_rate_over_the_link() {
        let mut s = Summary::new();
        s.insert("bam.wire_bytes".into(), serde_json::json!(2u64 << 20));
        s.insert("bam.communication_seconds".into(), serde_json::json!(0.5));
        link_shares(&mut s, 8.0);
        assert_eq!(s["bam.link_share"], serde_json::json!(0.5));
        assert!(!s.contains_key("flight.link_share"));
    }

    #[test]
    fn bad_parameters_name_their_field() {
        let p = params(serde_json::json!({}));
        assert_eq!((p.role, p.regions, p.pipelines.len()), (Role::Local, 4, 3));
        assert!(p.validate().is_ok());
        let field = |j| params(j).validate().unwrap_err().field;
        assert_eq!(field(serde_json::json!({"regions": 0})), "regions");
        assert_eq!(field(serde_json::json!({"pipelines": ["spark"]})), "pipelines");
        assert_eq!(field(serde_json::json!({"role": "client"})), "address");
        assert_eq!(field(serde_json::json!({"measure_link": true})), "measure_link");
        assert_eq!(
            field(serde_json::json!({"overlap": true, "role": "server", "address": "0.0.0.0:1"})),
            "overlap"
        );
        assert_eq!(field(serde_json::json!({"dataset": "huge"})), "dataset");
    }

    /// Receiver and sender on this machine over loopback, bwa's data set:
    /// both pipelines move every record, agree on the output, and report
    /// a communication share strictly between 0 and 1.
    #[test]
    fn both_pipelines_move_every_region_and_agree_on_the_output() {
        let data = tempfile::tempdir().unwrap();
        let p = params(serde_json::json!({
            "regions": 3,
            "repetitions": 2,
            "coverage": 2.0,
            "data_dir": data.path().display().to_string(),
        }));
        let sink = Arc::new(VecSink::default());
        let ctx = JobContext {
            job_id: 7,
            seed: 1,
            devices: BTreeMap::new(),
            sink: sink.clone(),
        };
        let asam = child::built_binary(registry::ASAM.env, registry::ASAM.binary);
        let s = run_with_binaries(&p, &ctx, &super::super::real_binary(), Some(&asam)).unwrap();
        assert_eq!(s["flight.checksum"], s["bam.checksum"], "{s:?}");
        let records = s["records"].as_u64().unwrap();
        assert!(records > 1000, "{s:?}");
        assert!(s["duplicates"].as_u64().unwrap() > 0, "{s:?}");
        for pl in PIPELINES {
            for side in ["sender", "receiver"] {
                let cpu = s[&format!("{pl}.{side}_cpu_s_per_gb")].as_f64().unwrap();
                assert!(cpu > 0.0, "{pl} {side}: {cpu}");
            }
        }
        for pl in PIPELINES {
            let share = s[&format!("{pl}.communication_share")].as_f64().unwrap();
            assert!(share > 0.0 && share < 1.0, "{pl}: {share}");
            assert!(s[&format!("{pl}.wire_bytes")].as_u64().unwrap() > 0);
        }
        // BGZF compresses what Arrow IPC sends uncompressed.
        assert!(
            s["bam.wire_bytes"].as_u64() < s["flight.wire_bytes"].as_u64(),
            "{s:?}"
        );
        // Both Flight profiles move the same bytes.
        assert_eq!(s["flight.wire_bytes"], s["flight-tuned.wire_bytes"]);
        assert_eq!(s["flight.checksum"], s["flight-tuned.checksum"]);
        let chunks = sink.0.lock().unwrap();
        // Four metrics and two sides' CPU per pipeline.
        assert_eq!(chunks.len(), 18);
        assert!(chunks.iter().all(|c| c.values.len() == 2
            && c.tags["regions"] == "3"
            && c.tags["schedule"] == "sequential"
            && PIPELINES.contains(&c.tags["pipeline"].as_str())));
        drop(chunks);
        let sequential = s;

        // Overlapped: the same records and output, every pipeline's end to
        // end time measured.
        let mut p = p;
        p.overlap = true;
        let sink = Arc::new(VecSink::default());
        let ctx = JobContext { sink: sink.clone(), ..ctx };
        let s = run_with_binaries(&p, &ctx, &super::super::real_binary(), Some(&asam)).unwrap();
        for pl in PIPELINES {
            assert_eq!(s[&format!("{pl}.checksum")], sequential["flight.checksum"], "{pl}");
            let total = s[&format!("{pl}.total_seconds")].as_f64().unwrap();
            assert!(total > 0.0, "{pl}: {total}");
        }
        let chunks = sink.0.lock().unwrap();
        assert!(chunks.iter().all(|c| c.tags["schedule"] == "overlapped"));
        assert_eq!(chunks.iter().filter(|c| c.metric == "total_seconds").count(), 3);
    }
}
