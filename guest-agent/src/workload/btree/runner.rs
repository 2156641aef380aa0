//! Runs the lookup threads. Every thread follows the same schedule of blocks
//! (warm-up per engine, then measured blocks round-robin over the engines,
//! optionally with peer (fio) blocks in between); a barrier starts each
//! block on all threads at once, so only one engine (or fio) runs at a time
//! and each engine's wall time is the sum of its blocks' spans. Interleaving
//! matters: results drift 10-15 % between boots and within a busy host.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::bio_count::BioCounter;
use super::cpu::{CpuTimes, GuestCpu, other_thread_cpu, thread_cpu};
use super::engine;
use super::engine_uring::UringOptions;
use super::lookup::{Lookups, Plan};
use super::params::Engine;
use super::recorder::Recorder;
use crate::workload::WorkloadError;
use crate::workload::fio::FioReport;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// Unmeasured lookups of engine `engine` (index into the job's engines).
    Warmup {
        engine: usize,
        lookups: u64,
    },
    Measure {
        engine: usize,
        lookups: u64,
    },
    /// Thread 0 runs the peer (fio) while the others wait.
    Peer,
    /// A peer run whose report is dropped: a freshly started fio is slow at
    /// first (page faults; under TCG, code not yet translated).
    PeerWarmup,
}

/// Warm-up blocks first (and one peer warm-up if there are peers), then
/// rounds of one measured block (at most `block` lookups) per engine until
/// each engine has done `lookups`, with `peers` peer blocks spread evenly
/// after the rounds.
pub fn schedule(engines: usize, warmup: u64, lookups: u64, block: u64, peers: u32) -> Vec<Block> {
    let mut out: Vec<Block> = (0..engines)
        .filter(|_| warmup > 0)
        .map(|engine| Block::Warmup {
            engine,
            lookups: warmup,
        })
        .collect();
    if peers > 0 {
        out.push(Block::PeerWarmup);
    }
    // One engine needs no interleaving, except with the peer.
    let block = match (engines, peers) {
        (1, 0) => lookups,
        (1, p) => lookups.div_ceil(u64::from(p)),
        _ => block,
    }
    .max(1);
    let rounds = lookups.div_ceil(block);
    let peers = u64::from(peers);
    let mut left = lookups;
    for round in 0..rounds {
        let n = left.min(block);
        out.extend((0..engines).map(|engine| Block::Measure { engine, lookups: n }));
        left -= n;
        // A peer block whenever the even spread of `peers` over `rounds` steps.
        if (round + 1) * peers / rounds > round * peers / rounds {
            out.push(Block::Peer);
        }
    }
    out
}

/// The peer check run by thread 0 in `Block::Peer`.
pub type Peer<'a> = &'a (dyn Fn() -> Result<FioReport, WorkloadError> + Sync);

pub struct RunConfig<'a> {
    pub path: &'a str,
    pub plan: &'a Plan,
    pub engines: &'a [Engine],
    pub uring: UringOptions,
    pub threads: u32,
    pub schedule: &'a [Block],
    pub sample_every: u64,
    pub seed: u64,
    pub peer: Option<Peer<'a>>,
    /// Pin lookup thread t to CPU t mod (online CPUs).
    pub pin_threads: bool,
    /// Count the guest's bio submissions per engine (`count_bios`).
    pub bios: Option<&'a BioCounter>,
}

/// What one engine did on one thread.
pub struct EngineTally {
    pub rec: Recorder,
    pub cpu: CpuTimes,
    /// Reads the kernel did for measured lookups (hook engines; 0 otherwise).
    pub kernel_hops: u64,
    /// Bios submitted in the guest during the engine's measured blocks, by
    /// any thread (`count_bios`; thread 0's tally holds them).
    pub bios: u64,
    /// The guest's busy CPU time (all CPUs) during the engine's measured
    /// blocks (thread 0's tally holds it).
    pub guest_busy_s: f64,
}

pub struct ThreadOutcome {
    pub tallies: Vec<EngineTally>,
    /// (start, end) of each measured block, by schedule index.
    pub spans: Vec<Option<(Instant, Instant)>>,
    /// Reports of the peer blocks (thread 0 only), in order.
    pub peer_reports: Vec<FioReport>,
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
    if cfg.pin_threads
        && let Err(e) = pin_to_cpu(t)
    {
        note(e, &mut error);
    }
    let hops = cfg.plan.ios_per_lookup() as usize;
    let mut tallies = Vec::new();
    let mut instances = Vec::new();
    for &engine in cfg.engines {
        match (
            Recorder::new(hops, cfg.sample_every),
            engine::open(engine, cfg.path, cfg.plan, cfg.uring),
        ) {
            (Ok(rec), Ok(inst)) => {
                tallies.push(EngineTally {
                    rec,
                    cpu: CpuTimes::default(),
                    kernel_hops: 0,
                    bios: 0,
                    guest_busy_s: 0.0,
                });
                instances.push(inst);
            }
            (Err(e), _) | (_, Err(e)) => note(e, &mut error),
        }
    }
    let mut helpers: Vec<Option<Helper>> = instances
        .iter()
        .map(|i| i.helper_thread().and_then(Helper::new))
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ (u64::from(t) << 32 | 0xb7ee));
    let mut spans = vec![None; cfg.schedule.len()];
    let mut peer_reports = Vec::new();
    // Every thread waits at every block, even after a failure, so no thread
    // is left alone at a barrier.
    // At every block boundary thread 0 reads the guest-wide counters and
    // gives what they moved to the engine of the block that just ended, if
    // measured: the guest's busy CPU time (/proc/stat: interrupts, softirqs
    // and kernel threads too — where a hook re-issues and a poller spins)
    // and, with `count_bios`, the bios submitted. Bios are counted exactly
    // (a second barrier keeps every thread out of the next block until
    // read); CPU time is in ticks, and the microseconds thread 0 spends
    // reading while others start the next block do not matter at that grain.
    let mut mark: Option<(Option<GuestCpu>, u64, Option<usize>)> = None;
    let mut at_boundary = |next: Option<&Block>,
                           tallies: &mut Vec<EngineTally>,
                           error: &mut Option<WorkloadError>| {
        if t != 0 {
            if cfg.bios.is_some() {
                barrier.wait();
            }
            return;
        }
        let cpu = GuestCpu::read();
        let bios = match cfg.bios.map(BioCounter::total).transpose() {
            Ok(b) => b.unwrap_or(0),
            Err(e) => {
                note(e, error);
                0
            }
        };
        if let Some((cpu0, bios0, Some(engine))) = mark
            && let Some(tally) = tallies.get_mut(engine)
        {
            tally.bios += bios.saturating_sub(bios0);
            if let (Some(a), Some(b)) = (cpu0, cpu) {
                tally.guest_busy_s += b.seconds_since(a).0;
            }
        }
        let measured = match next {
            Some(Block::Measure { engine, .. }) => Some(*engine),
            _ => None,
        };
        mark = Some((cpu, bios, measured));
        if cfg.bios.is_some() {
            barrier.wait();
        }
    };
    for (i, block) in cfg.schedule.iter().enumerate() {
        barrier.wait();
        at_boundary(Some(block), &mut tallies, &mut error);
        if failed.load(Ordering::SeqCst) {
            continue;
        }
        settle_helpers(&mut helpers, &mut tallies, Some(block));
        let outcome = match *block {
            Block::Measure { engine, lookups } => {
                let (inst, tally) = (&mut instances[engine], &mut tallies[engine]);
                let cpu0 = thread_cpu();
                let t0 = Instant::now();
                let r = inst.run(Lookups {
                    plan: cfg.plan,
                    rng: &mut rng,
                    n: lookups,
                    rec: &mut tally.rec,
                });
                spans[i] = Some((t0, Instant::now()));
                tally.cpu.add(thread_cpu().since(cpu0));
                tally.kernel_hops += inst.take_kernel_hops();
                r
            }
            Block::Warmup { engine, lookups } => {
                Recorder::new(hops, u64::MAX).and_then(|mut scratch| {
                    let r = instances[engine].run(Lookups {
                        plan: cfg.plan,
                        rng: &mut rng,
                        n: lookups,
                        rec: &mut scratch,
                    });
                    instances[engine].take_kernel_hops();
                    r
                })
            }
            Block::Peer => match (t, cfg.peer) {
                (0, Some(peer)) => peer().map(|r| peer_reports.push(r)),
                _ => Ok(()),
            },
            Block::PeerWarmup => match (t, cfg.peer) {
                (0, Some(peer)) => peer().map(drop),
                _ => Ok(()),
            },
        };
        if let Err(e) = outcome {
            note(e, &mut error);
        }
    }
    // Every thread has finished the last block before it is counted.
    barrier.wait();
    at_boundary(None, &mut tallies, &mut error);
    settle_helpers(&mut helpers, &mut tallies, None);
    match error {
        Some(e) => Err(e),
        None => Ok(ThreadOutcome {
            tallies,
            spans,
            peer_reports,
        }),
    }
}

/// Online CPUs, as the scheduler sees them (at least 1).
/// An engine's helper thread (its SQPOLL poller) and its CPU clock as last
/// read. It serves its engine's ring alone, so all its time between two
/// readings belongs to that engine's latest block — spent in it or in the
/// short spin after it, during another engine's block — and counts when
/// that block was measured (not a warm-up).
struct Helper {
    tid: i32,
    last: CpuTimes,
    measuring: bool,
}

impl Helper {
    fn new(tid: i32) -> Option<Helper> {
        Some(Helper {
            tid,
            last: other_thread_cpu(tid)?,
            measuring: false,
        })
    }
}

/// At a block boundary (`next` None after the last block): adds each
/// helper's time since its last reading to its engine's tally if its
/// latest block was measured, and notes whether `next` is a measured block
/// of its engine.
fn settle_helpers(
    helpers: &mut [Option<Helper>],
    tallies: &mut [EngineTally],
    next: Option<&Block>,
) {
    for (engine, slot) in helpers.iter_mut().enumerate() {
        let Some(h) = slot else { continue };
        // The poller exits with its ring; nothing more to count then.
        let Some(now) = other_thread_cpu(h.tid) else {
            *slot = None;
            continue;
        };
        if h.measuring
            && let Some(t) = tallies.get_mut(engine)
        {
            t.cpu.add(now.since(h.last));
        }
        h.last = now;
        match next {
            Some(Block::Measure { engine: e, .. }) if *e == engine => h.measuring = true,
            Some(Block::Warmup { engine: e, .. }) if *e == engine => h.measuring = false,
            _ => {}
        }
    }
}

pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Pins the calling thread to CPU `t` mod the online CPUs, so the lookup
/// threads and fio's jobs (`cpus_allowed_policy=split`) sit on the same CPUs.
fn pin_to_cpu(t: u32) -> Result<(), WorkloadError> {
    let cpu = t as usize % online_cpus();
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)
        .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set))
        .map_err(|e| WorkloadError::Other(format!("pin lookup thread {t} to CPU {cpu}: {e}")))
}

/// Wall time of each engine: per measured block, from the first thread's
/// start to the last thread's end, summed.
pub fn engine_wall_s(schedule: &[Block], outcomes: &[ThreadOutcome], engines: usize) -> Vec<f64> {
    let mut wall = vec![0.0; engines];
    for (i, block) in schedule.iter().enumerate() {
        let Block::Measure { engine, .. } = *block else {
            continue;
        };
        let spans = outcomes.iter().filter_map(|o| o.spans[i]);
        let start = spans.clone().map(|s| s.0).min();
        let end = spans.map(|s| s.1).max();
        if let (Some(a), Some(b)) = (start, end) {
            wall[engine] += b.duration_since(a).as_secs_f64();
        }
    }
    wall
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(engine: usize, lookups: u64) -> Block {
        Block::Measure { engine, lookups }
    }

    #[test]
    fn schedule_interleaves_measured_blocks() {
        let s = schedule(2, 5, 250, 100, 0);
        let w = |engine| Block::Warmup { engine, lookups: 5 };
        assert_eq!(
            s,
            vec![
                w(0),
                w(1),
                m(0, 100),
                m(1, 100),
                m(0, 100),
                m(1, 100),
                m(0, 50),
                m(1, 50)
            ]
        );
        assert_eq!(schedule(1, 0, 250, 100, 0), vec![m(0, 250)]);
    }

    #[test]
    fn peer_blocks_are_spread_between_rounds() {
        let (p, pw) = (Block::Peer, Block::PeerWarmup);
        assert_eq!(
            schedule(1, 0, 300, 100, 3),
            vec![pw, m(0, 100), p, m(0, 100), p, m(0, 100), p]
        );
        let s = schedule(2, 0, 400, 100, 2);
        assert_eq!(
            s,
            vec![
                pw,
                m(0, 100),
                m(1, 100),
                m(0, 100),
                m(1, 100),
                p,
                m(0, 100),
                m(1, 100),
                m(0, 100),
                m(1, 100),
                p
            ]
        );
        // More peers than rounds: one per round.
        assert_eq!(
            schedule(2, 0, 100, 100, 4),
            vec![pw, m(0, 100), m(1, 100), p]
        );
    }
}
