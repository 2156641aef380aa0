//! BPF-KV style B+-tree lookups from user space (the baselines of the HotOS
//! and XRP papers): build the tree on the device, then look up random keys
//! with the `read` and/or `io-uring` engines, verifying every value.
//!
//! A lookup of a depth-`d` tree reads `d` nodes, then the block holding the
//! value (`index_ios_per_lookup = d`, `total_ios_per_lookup = d + 1`). The
//! synthetic mode reads `d` blocks at seeded random offsets instead.

pub mod bio_count;
pub mod build;
pub mod cpu;
pub mod descriptor;
pub mod engine;
pub mod engine_hook;
pub mod engine_hook_uring;
pub mod engine_read;
pub mod engine_uring;
pub mod hook_report;
pub mod kernel_log;
pub mod layout;
pub mod lookup;
pub mod lookup_ring;
pub mod nvme_admin;
pub mod nvme_passthru;
pub mod params;
pub mod polled;
pub mod protection;
pub mod recorder;
pub mod report;
pub mod runner;
pub mod safety;
pub mod show;
pub mod synthetic;
pub mod target;

pub use params::{BtreeParams, BuildPolicy, Engine, Mode};

use std::collections::BTreeMap;

use super::fio::{self, Amount, FioJob, FioRw, run_fio};
use super::{JobContext, Summary, WorkloadError};
use cpu::{GuestCpu, process_cpu};
use engine_uring::UringOptions;
use lookup::Plan;
use runner::{RunConfig, ThreadOutcome, engine_wall_s, run_threads, schedule};

/// fio I/Os per job when the spec does not say: enough that fio's
/// millisecond runtime resolution does not matter.
const MIN_FIO_IOS: u64 = 2000;

pub fn run(p: &BtreeParams, ctx: &JobContext) -> Result<Summary, WorkloadError> {
    let dev = ctx.device(&p.device)?.clone();
    let resolved = p
        .resolve(&dev)
        .map_err(|e| WorkloadError::Other(e.to_string()))?;
    let path = match &p.file {
        Some(f) => f.clone(),
        None => ctx.device_path(&p.device)?,
    };
    let plan = &resolved.plan;
    let mut summary = Summary::new();

    if let Plan::Tree(t) = plan {
        let reuse = p.build == BuildPolicy::IfNeeded;
        let b = build::ensure_tree(&path, resolved.target_size, &t.layout, t.tree_seed, reuse)?;
        summary.insert("built".into(), b.built.into());
        summary.insert("build_s".into(), b.seconds.into());
        summary.insert("tree_bytes".into(), t.layout.total_bytes.into());
        summary.insert("keys".into(), t.layout.keys.into());
        if p.mode == Mode::HookSafety {
            let cases = safety::run(&path, t, resolved.target_size)?;
            safety::summarise(&cases, &mut summary);
            kernel_log::check(&mut summary);
            return Ok(summary);
        }
    }

    let engines = p.engine_list();
    let peers = if p.compare_with_fio { p.fio_rounds } else { 0 };
    let blocks = schedule(
        engines.len(),
        p.warmup_lookups,
        p.lookups_per_thread,
        p.interleave_block,
        peers,
    );
    let fio_job = p
        .compare_with_fio
        .then(|| fio_job(p, plan, &path, ctx.seed));
    let peer = fio_job.as_ref().map(|job| move || run_fio(job));
    if engines.contains(&Engine::NvmePassthruPoll) {
        let release = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default();
        polled::check_passthru_poll_threads(&release, p.threads)?;
    }
    let bios = p.count_bios.then(bio_count::BioCounter::open).transpose()?;
    let cfg = RunConfig {
        path: &path,
        plan,
        engines: &engines,
        uring: UringOptions {
            batch: p.batch,
            registered_buffers: p.registered_buffers,
            sqpoll: p.sqpoll,
            iopoll: false,
            passthru: false,
            registered_file: false,
        },
        threads: p.threads,
        schedule: &blocks,
        sample_every: p.sample_every,
        seed: ctx.seed,
        peer: peer
            .as_ref()
            .map(|f| f as &(dyn Fn() -> Result<fio::FioReport, WorkloadError> + Sync)),
        pin_threads: p.pin_threads,
        bios: bios.as_ref(),
    };
    if p.cross_check_lookups > 0 {
        hook_report::cross_check(&cfg, p.cross_check_lookups, &mut summary)?;
    }
    let (proc0, guest0) = (process_cpu(), GuestCpu::read());
    let outcomes = run_threads(&cfg)?;
    let proc_cpu = process_cpu().since(proc0);
    let guest = guest0
        .zip(GuestCpu::read())
        .map(|(a, b)| b.seconds_since(a));

    report::emit_samples(ctx, &engines, &outcomes);
    let walls = engine_wall_s(&blocks, &outcomes, engines.len());
    let mut numbers = BTreeMap::new();
    for (e, engine) in engines.iter().enumerate() {
        let prefix = if engines.len() == 1 {
            ""
        } else {
            engine.name()
        };
        let n = report::summarise_engine(
            prefix,
            e,
            plan,
            &outcomes,
            walls[e],
            cfg.bios.is_some(),
            &mut summary,
        );
        numbers.insert(*engine, n);
        if engine.is_hook() {
            hook_report::put_kernel_hops(prefix, e, &outcomes, &mut summary);
        }
    }
    hook_report::put_speedups(&engines, &mut summary);
    if engines.iter().any(|e| e.is_hook()) {
        kernel_log::check(&mut summary);
    }
    put_job_keys(p, plan, &mut summary);
    summary.insert("process_cpu_user_s".into(), proc_cpu.user_s.into());
    summary.insert("process_cpu_sys_s".into(), proc_cpu.sys_s.into());
    if let Some((busy, total)) = guest {
        summary.insert("guest_cpu_busy_s".into(), busy.into());
        summary.insert("guest_cpu_total_s".into(), total.into());
    }
    if p.compare_with_fio {
        let read = numbers.get(&Engine::Read).copied().unwrap_or_default();
        put_fio_comparison(&outcomes, read, ctx, &mut summary);
    }
    Ok(summary)
}

/// What the guest derived from the parameters. The parameters themselves
/// are not echoed: the host keeps the resolved workload of every point.
fn put_job_keys(p: &BtreeParams, plan: &Plan, summary: &mut Summary) {
    summary.insert(
        "index_ios_per_lookup".into(),
        plan.index_ios_per_lookup().into(),
    );
    summary.insert("total_ios_per_lookup".into(), plan.ios_per_lookup().into());
    summary.insert(
        "sample_rule".into(),
        report::sample_rule(p.sample_every).into(),
    );
}

/// The peer: fio QD1 random reads of one node over the region the lookups
/// read (the tree image, or the whole device for chains), one job per
/// thread, split into `fio_rounds` segments.
fn fio_job(p: &BtreeParams, plan: &Plan, path: &str, seed: u64) -> FioJob {
    let (size, align) = match plan {
        Plan::Tree(t) => (Some(t.layout.total_bytes), p.node_size),
        Plan::Synthetic(_) => (None, synthetic::CHAIN_ALIGN as u32),
    };
    let total = p
        .fio_ios
        .unwrap_or((p.lookups_per_thread * u64::from(plan.ios_per_lookup())).max(MIN_FIO_IOS));
    FioJob {
        path: path.to_string(),
        block_size: p.node_size,
        align,
        rw: FioRw::Randread,
        iodepth: 1,
        numjobs: p.threads,
        ioengine: p.fio_ioengine.clone(),
        clocksource: fio::FioClock::ClockGettime,
        gtod_reduce: p.fio_gtod_reduce,
        cpus_allowed: p.pin_threads.then(|| {
            let cpus = (p.threads as usize).min(runner::online_cpus());
            format!("0-{}", cpus - 1)
        }),
        size,
        amount: Amount::Ios(total.div_ceil(u64::from(p.fio_rounds.max(1)))),
        seed,
    }
}

/// fio's segments folded into one report, and the read engine's I/O rate
/// and per-I/O latency as ratios to fio's.
fn put_fio_comparison(
    outcomes: &[ThreadOutcome],
    read: report::EngineNumbers,
    ctx: &JobContext,
    summary: &mut Summary,
) {
    let segments = outcomes
        .first()
        .map_or(&[][..], |o| o.peer_reports.as_slice());
    for (i, r) in segments.iter().enumerate() {
        let tags = BTreeMap::from([
            ("engine".to_string(), "fio".to_string()),
            ("segment".to_string(), i.to_string()),
        ]);
        r.emit(ctx, &tags);
    }
    let by_segment: Vec<f64> = segments.iter().map(|r| r.iops).collect();
    summary.insert("fio.iops_by_segment".into(), by_segment.into());
    let Some(fio) = fio::combine(segments) else {
        return;
    };
    fio.add_to("fio.", summary);
    if fio.iops > 0.0 {
        summary.insert(
            "read_vs_fio_iops_ratio".into(),
            (read.ios_per_s / fio.iops).into(),
        );
    }
    if fio.lat_mean_ns > 0.0 {
        summary.insert(
            "read_vs_fio_latency_ratio".into(),
            (read.hop_mean_ns / fio.lat_mean_ns).into(),
        );
    }
}

impl super::WorkloadParams for BtreeParams {
    fn validate(
        &self,
        devices: &BTreeMap<String, testbed_vocab::protocol::DeviceRef>,
    ) -> Result<(), super::ParamError> {
        BtreeParams::validate(self, devices)
    }
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError> {
        run(self, ctx)
    }
    fn needs(&self) -> super::Needs {
        let hooks = self.mode == Mode::HookSafety || self.engine_list().iter().any(|e| e.is_hook());
        super::Needs {
            bpf_programs: hooks,
            host_steps: if self.compare_with_fio { vec!["fio"] } else { Vec::new() },
            ..Default::default()
        }
    }
    fn metrics(&self) -> Vec<super::MetricInfo> {
        use super::MetricInfo as M;
        vec![
            M::raw("lookup_latency", "ns", &["engine"]),
            M::raw("hop_latency", "ns", &["engine", "hop"]),
            M::raw("fio_clat_percentile", "ns", &["engine", "segment", "pct"]),
            M::summary("lookups_per_s", "lookups/s", &["engine"]),
            M::summary("lookups", "", &["engine"]),
            M::summary("wall_s", "s", &["engine"]),
            M::summary("lookup_latency_mean_ns", "ns", &["engine"]),
            M::summary("lookup_latency_p50_ns", "ns", &["engine"]),
            M::summary("lookup_latency_p99_ns", "ns", &["engine"]),
            M::summary("lookup_latency_p999_ns", "ns", &["engine"]),
            M::summary("hop_latency_mean_ns", "ns", &["engine"]),
            M::summary("hop_latency_p99_ns", "ns", &["engine"]),
            M::summary("ios_per_s", "IOPS", &["engine"]),
            M::summary("cpu_us_per_io", "µs", &["engine"]),
            M::summary("cpu_us_per_lookup", "µs", &["engine"]),
            M::summary("guest_cpu_us_per_lookup", "µs", &["engine"]),
            M::summary("guest_busy_s", "s", &["engine"]),
            M::summary("block_bios", "", &["engine"]),
            M::summary("bios_per_lookup", "", &["engine"]),
        ]
    }
    fn show_lines(&self, summary: &Summary) -> Vec<String> {
        let engines: Vec<&str> = self.engine_list().iter().map(|e| e.name()).collect();
        show::engine_lines(summary, &engines)
            .into_iter()
            .chain(show::speedup_line(summary))
            .chain(show::fio_peer_line(summary))
            .collect()
    }
    fn summary_scopes(&self) -> Option<(&'static str, Vec<String>)> {
        let mut names: Vec<String> = self
            .engine_list()
            .iter()
            .map(|e| e.name().to_string())
            .collect();
        if self.compare_with_fio {
            names.push("fio".into());
        }
        Some(("engine", names))
    }
}

#[cfg(test)]
mod tests;
