//! Runs the lookup threads. Every thread follows the same schedule of blocks
//! (warm-up per engine, then measured blocks round-robin over the engines);
//! a barrier starts each block on all threads at once, so with several
//! engines only one engine runs at a time and each engine's wall time is the
//! sum of its blocks' spans.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::cpu::{CpuTimes, thread_cpu};
use super::engine_read::ReadEngine;
use super::engine_uring::{UringEngine, UringOptions};
use super::lookup::Plan;
use super::params::Engine;
use super::recorder::Recorder;
use crate::workload::WorkloadError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Index into the job's engine list.
    pub engine: usize,
    pub lookups: u64,
    pub measured: bool,
}

/// Warm-up blocks first, then measured blocks of at most `block` lookups,
/// round-robin until each engine has done `lookups`.
pub fn schedule(engines: usize, warmup: u64, lookups: u64, block: u64) -> Vec<Block> {
    let mut out: Vec<Block> = (0..engines)
        .filter(|_| warmup > 0)
        .map(|engine| Block {
            engine,
            lookups: warmup,
            measured: false,
        })
        .collect();
    // One engine needs no interleaving: one block keeps it simple to read.
    let block = if engines == 1 { lookups } else { block.max(1) };
    let mut left = lookups;
    while left > 0 {
        let n = left.min(block);
        out.extend((0..engines).map(|engine| Block {
            engine,
            lookups: n,
            measured: true,
        }));
        left -= n;
    }
    out
}

pub struct RunConfig<'a> {
    pub path: &'a str,
    pub plan: &'a Plan,
    pub engines: &'a [Engine],
    pub uring: UringOptions,
    pub threads: u32,
    pub schedule: &'a [Block],
    pub sample_every: u64,
    pub seed: u64,
}

/// What one engine did on one thread.
pub struct EngineTally {
    pub rec: Recorder,
    pub cpu: CpuTimes,
}

pub struct ThreadOutcome {
    pub tallies: Vec<EngineTally>,
    /// (start, end) of each measured block, by schedule index.
    pub spans: Vec<Option<(Instant, Instant)>>,
}

enum Instance {
    Read(ReadEngine),
    // Boxed: a ring is much larger than a read engine.
    Uring(Box<UringEngine>),
}

impl Instance {
    fn open(engine: Engine, cfg: &RunConfig) -> Result<Self, WorkloadError> {
        Ok(match engine {
            Engine::Read => Instance::Read(ReadEngine::open(cfg.path, cfg.plan)?),
            Engine::IoUring => {
                Instance::Uring(Box::new(UringEngine::open(cfg.path, cfg.plan, cfg.uring)?))
            }
        })
    }

    fn run(
        &mut self,
        plan: &Plan,
        rng: &mut ChaCha8Rng,
        n: u64,
        rec: &mut Recorder,
    ) -> Result<(), WorkloadError> {
        match self {
            Instance::Read(e) => e.run(plan, rng, n, rec),
            Instance::Uring(e) => e.run(plan, rng, n, rec),
        }
    }
}

/// Runs all threads; the first error of any thread fails the whole run.
pub fn run_threads(cfg: &RunConfig) -> Result<Vec<ThreadOutcome>, WorkloadError> {
    let barrier = Barrier::new(cfg.threads as usize);
    let failed = AtomicBool::new(false);
    let results: Vec<Result<ThreadOutcome, WorkloadError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let (barrier, failed) = (&barrier, &failed);
                s.spawn(move || thread_main(t, cfg, barrier, failed))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(WorkloadError::Other("lookup thread panicked".into())))
            })
            .collect()
    });
    results.into_iter().collect()
}

fn thread_main(
    t: u32,
    cfg: &RunConfig,
    barrier: &Barrier,
    failed: &AtomicBool,
) -> Result<ThreadOutcome, WorkloadError> {
    let mut error: Option<WorkloadError> = None;
    let note = |e: WorkloadError, error: &mut Option<WorkloadError>| {
        failed.store(true, Ordering::SeqCst);
        error.get_or_insert(e);
    };
    let hops = cfg.plan.ios_per_lookup() as usize;
    let mut tallies = Vec::new();
    let mut instances = Vec::new();
    for &engine in cfg.engines {
        match (
            Recorder::new(hops, cfg.sample_every),
            Instance::open(engine, cfg),
        ) {
            (Ok(rec), Ok(inst)) => {
                tallies.push(EngineTally {
                    rec,
                    cpu: CpuTimes::default(),
                });
                instances.push(inst);
            }
            (Err(e), _) | (_, Err(e)) => note(e, &mut error),
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ (u64::from(t) << 32 | 0xb7ee));
    let mut spans = vec![None; cfg.schedule.len()];
    // Every thread waits at every block, even after a failure, so no thread
    // is left alone at a barrier.
    for (i, block) in cfg.schedule.iter().enumerate() {
        barrier.wait();
        if failed.load(Ordering::SeqCst) {
            continue;
        }
        let (inst, tally) = (&mut instances[block.engine], &mut tallies[block.engine]);
        let outcome = if block.measured {
            let cpu0 = thread_cpu();
            let t0 = Instant::now();
            let r = inst.run(cfg.plan, &mut rng, block.lookups, &mut tally.rec);
            spans[i] = Some((t0, Instant::now()));
            tally.cpu.add(thread_cpu().since(cpu0));
            r
        } else {
            Recorder::new(hops, u64::MAX)
                .and_then(|mut scratch| inst.run(cfg.plan, &mut rng, block.lookups, &mut scratch))
        };
        if let Err(e) = outcome {
            note(e, &mut error);
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok(ThreadOutcome { tallies, spans }),
    }
}

/// Wall time of each engine: per measured block, from the first thread's
/// start to the last thread's end, summed.
pub fn engine_wall_s(schedule: &[Block], outcomes: &[ThreadOutcome], engines: usize) -> Vec<f64> {
    let mut wall = vec![0.0; engines];
    for (i, block) in schedule.iter().enumerate().filter(|(_, b)| b.measured) {
        let spans = outcomes.iter().filter_map(|o| o.spans[i]);
        let start = spans.clone().map(|s| s.0).min();
        let end = spans.map(|s| s.1).max();
        if let (Some(a), Some(b)) = (start, end) {
            wall[block.engine] += b.duration_since(a).as_secs_f64();
        }
    }
    wall
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_interleaves_measured_blocks() {
        let s = schedule(2, 5, 250, 100);
        let shape: Vec<(usize, u64, bool)> = s
            .iter()
            .map(|b| (b.engine, b.lookups, b.measured))
            .collect();
        assert_eq!(
            shape,
            vec![
                (0, 5, false),
                (1, 5, false),
                (0, 100, true),
                (1, 100, true),
                (0, 100, true),
                (1, 100, true),
                (0, 50, true),
                (1, 50, true),
            ]
        );
        let single = schedule(1, 0, 250, 100);
        assert_eq!(
            single,
            vec![Block {
                engine: 0,
                lookups: 250,
                measured: true
            }]
        );
    }
}
